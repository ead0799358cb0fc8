"""The one reader of torch's structured trace for the compile caches: each
lookup's hit / miss / bypass record (with its payload: the key, the bypass
reason, the time a hit saved), dynamo_dist's compile-once records, and the
post-AOTAutograd graphs torch prints. ``explain``'s recorder and the tools
(the warm-start benchmarks, the cache tests) all read it through here.
"""

from __future__ import annotations

import logging
from typing import Any, Callable

from .. import _hooks
from .._compat import observe as O
from .. import compile_once
from .caches import CacheEvents, lookup_reason
from .report import PLUGIN

Printed = Callable[[str, str, str], None]


class TraceHandler(logging.Handler):
    """Structured-trace records -> ``events`` (cache outcomes, compile-once
    sources) and ``on_printed`` (post-AOTAutograd graphs as printed code)."""

    def __init__(self, events: CacheEvents, on_printed: Printed | None = None) -> None:
        super().__init__(logging.DEBUG)
        self.events, self.on_printed = events, on_printed

    def emit(self, record: logging.LogRecord) -> None:
        try:
            found = O.cache_artifact(record)
            if found is not None:
                cache, state, payload, cid = found
                self.events.add(cid or O.current_compile_id(), cache, state, payload)
                return
            source = O.named_artifact(record, compile_once.TRACE_ARTIFACT)
            if source is not None:
                self.events.add_source(source[0])
                return
            printed = O.aot_graph_event(record) if self.on_printed is not None else None
            if printed is not None:
                stage, code, cid = printed
                self.on_printed(cid or O.current_compile_id(), stage, code)
        except Exception:  # never an error in the user's program
            pass


class CacheLog:
    """``with CacheLog() as log: ...``: every cache outcome torch logged in
    the block (``log.events``), and the bypasses' reasons."""

    def __init__(self) -> None:
        self.events = CacheEvents()

    def __enter__(self) -> "CacheLog":
        self._patches = _hooks.trace_patches(TraceHandler(self.events))
        return self

    def __exit__(self, *exc: Any) -> None:
        self._patches.restore()

    def outcomes(self, cache: str) -> list[tuple[str, dict[str, Any]]]:
        """``(state, payload)`` of each lookup of ``cache`` ("aot_autograd" or "fx_graph"), in order."""
        return [(state, payload) for events in self.events.events.values()
                for c, state, payload, _ in events if c == cache]

    def bypass_reasons(self, cache: str) -> list[str]:
        """torch's reason for each bypass of ``cache``, as it logged it."""
        return [str(payload.get("cache_bypass_reason", "")) for state, payload in self.outcomes(cache)
                if state == "bypass"]

    def bypasses_in_words(self, mode: str = PLUGIN) -> list[str]:
        """``cache: reason`` for each bypass, in ``explain``'s words, once each."""
        found: list[str] = []
        for cache in ("aot_autograd", "fx_graph"):
            for raw in self.bypass_reasons(cache):
                words, _ = lookup_reason(cache, "bypass", {"cache_bypass_reason": raw}, "", mode)
                if f"{cache}: {words}" not in found:
                    found.append(f"{cache}: {words}")
        return found
