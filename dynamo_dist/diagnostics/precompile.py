"""Where each frame came from under torch's precompile (explain).

With ``torch._dynamo.config.caching_precompile`` on
(``TORCH_CACHING_PRECOMPILE=1``), ``torch.compile(fn)`` looks ``fn`` up in
Dynamo's cache (``TORCHINDUCTOR_CACHE_DIR/dynamo``) and installs the frames a
hit holds: those run without being traced. A frame the entry does not hold,
or whose saved guards fail, is traced here, and each compile traced here goes
into ``fn``'s package, which ``torch.compiler.save_cache_artifacts()`` writes,
unless Dynamo declines it (a package bypass: guards or a graph it cannot
save; the plugin declines a compile whose guards have no saved form).

``Precompile`` watches both through torch's own channels, for the recording
only (its changes go into the recorder's ``Patches``): every lookup
(``DynamoCache.load``, wrapped: which function, hit / miss / error by
Dynamo's ``dynamo_cache`` counters, the frames a hit holds) and every bypass
(the warning Dynamo logs, with the compile it happens in). ``fill`` joins
them with Dynamo's compile-metrics rows, which say what was traced here.
Under compile once (``compile_once/frames.py``) a frame one rank traced is
sent to the others, which run it without tracing: its compile-once records
(``shipped``, read from the structured trace with the cache outcomes) say
"loaded from rank r", or, on the rank that traced it, that it was sent.
"""

from __future__ import annotations

import functools
import logging
import os
from dataclasses import dataclass, field
from typing import Any

from .._compat import dynamo_logs as L
from ..compile_once.protocol import VIA_WORDS
from .._compat import observe as O
from .report import (DECLINED, LOADED, LOADED_FROM_RANK, LOADED_FROM_RANK_THEN_TRACED, LOADED_THEN_TRACED, NOT_SAVED,
                     PACKAGED, PLUGIN, STOCK_DYNAMO, TRACED, ExplainReport, FrameOrigin)

# How the plugin's own reason for declining a package begins (``precompile/saved_guards.py``).
PLUGIN_REASON = "dynamo_dist:"
# Backends whose compiles torch's precompile saves (it saves a frame with its AOTAutograd entry).
SAVED_BACKENDS = ("inductor",)

Key = tuple[str, str, int]  # (code name, file name without its directory, first line)


def _key(name: str, file: str, line: int) -> Key:
    # The file's base name: the same script run from another directory is the same frame.
    return name, os.path.basename(file), int(line)


@dataclass
class Lookup:
    """One ``torch.compile(fn)`` looking ``fn`` up in Dynamo's cache."""

    name: str  # fn's code name
    file: str
    line: int
    state: str  # "hit", "miss" or "error"
    frames: list[tuple[str, str, int, int]] = field(default_factory=list)  # a hit's: O.saved_frames

    @property
    def key(self) -> Key:
        return _key(self.name, self.file, self.line)


class _BypassHandler(logging.Handler):
    """Dynamo's "Detected a package bypass" warnings -> ``Precompile.declined``."""

    def __init__(self, sink: Precompile) -> None:
        super().__init__(logging.DEBUG)
        self.sink = sink

    def emit(self, record: logging.LogRecord) -> None:
        try:
            reason = O.package_bypass_reason(record)
            if reason is not None:
                self.sink.declined.setdefault(O.current_compile_id(), []).append(reason)
        except Exception:  # never an error in the user's program
            pass


class Precompile:
    """The Dynamo-cache lookups and package bypasses of one recording."""

    def __init__(self) -> None:
        self.lookups: list[Lookup] = []
        self.declined: dict[str, list[str]] = {}  # compile id -> the bypass reasons Dynamo logged
        self.seen_on = False  # caching_precompile was on at some point of the recording

    def watch(self, patches: Any) -> None:
        """Wrap Dynamo's cache lookup and listen to its bypass warnings,
        through ``patches`` (restored when the recording ends). The wrapper
        returns what the lookup returns, and records nothing it cannot read."""
        self.seen_on |= O.precompile_caching()
        owner, name = O.dynamo_cache_lookup()
        original = getattr(owner, name)

        @functools.wraps(original)
        def load(cache: Any, fn: Any) -> Any:
            before = _safely(O.dynamo_cache_counts)
            result = original(cache, fn)
            _safely(self._looked_up, fn, before, result)
            return result

        patches.set(owner, name, load)
        logger = O.package_bypass_logger()
        if not logger.isEnabledFor(logging.WARNING):  # the user quietened Dynamo: hear it, print nothing new
            patches.set(logger, "level", logging.WARNING)
            patches.set(logger, "_cache", {})
            patches.set(logger, "propagate", False)
        patches.set(logger, "handlers", [*logger.handlers, _BypassHandler(self)])

    def _looked_up(self, fn: Any, before: dict[str, int] | None, result: Any) -> None:
        self.seen_on = True
        after = O.dynamo_cache_counts()
        counted = [s for s in ("error", "hit", "miss") if before is not None and after[s] > before[s]]
        state = counted[0] if counted else ("hit" if result is not None else "miss")
        frames = O.saved_frames(result) if result is not None else []
        self.lookups.append(Lookup(*O.package_key(fn), state=state, frames=frames))

    # -- the report ---------------------------------------------------------------
    def fill(self, report: ExplainReport, rows: list[Any], backend: str,
             shipped: dict[str, dict[str, Any]] | None = None) -> None:
        """``report.precompile`` and ``report.frames``, when precompile was
        on: every frame a lookup loaded, every frame another rank sent
        (``shipped``: compile once's records, by key) and every frame traced
        here (from the compile-metrics ``rows``), in that order."""
        if not (self.seen_on or self.lookups or self.declined):
            return
        report.precompile = f"Dynamo's cache in {os.path.join(O.compile_cache_settings()['dir'], 'dynamo')}"
        traced: dict[Key, list[Any]] = {}
        names: dict[Key, tuple[str, str, int]] = {}
        for r in rows:
            if r.co_name is None or r.compile_id is None:
                continue
            key = _key(r.co_name, r.co_filename or "?", r.co_firstlineno or 0)
            traced.setdefault(key, []).append(r)
            names.setdefault(key, (r.co_name, r.co_filename or "?", r.co_firstlineno or 0))
        loaded: dict[Key, Lookup] = {}
        for lookup in self.lookups:
            for name, file, line, entries in lookup.frames:
                if entries:
                    loaded.setdefault(_key(name, file, line), lookup)
                    names.setdefault(_key(name, file, line), (name, file, line))
        sent: dict[Key, list[dict[str, Any]]] = {}
        for record in (shipped or {}).values():
            if record.get("level") == "frame" and record.get("frame"):
                name, file, line = record["frame"]
                sent.setdefault(_key(name, file, line), []).append(record)
                names.setdefault(_key(name, file, line), (name, file, int(line)))
        order = list(dict.fromkeys([*loaded, *sent, *traced]))
        report.frames = [self._frame(names[k], traced.get(k, []), k in loaded, backend, sent.get(k, []))
                         for k in order]

    def _frame(self, name: tuple[str, str, int], rows: list[Any], loaded: bool, backend: str,
               shipped: list[dict[str, Any]]) -> FrameOrigin:
        code_name, file, line = name
        frame = FrameOrigin(function=_label(code_name), file=file, line=line, origin=LOADED if loaded else TRACED)
        frame.compile_ids = list(dict.fromkeys(str(r.compile_id) for r in rows))
        from_rank = next((r["source_rank"] for r in shipped if "source_rank" in r), None)
        if from_rank is not None and not loaded:
            frame.origin = LOADED_FROM_RANK.format(rank=from_rank)
            via = next((r["via"] for r in shipped if r.get("via") in VIA_WORDS), None)
            if via is not None:  # how its bytes came; replaced below if it was traced after all
                frame.why = f"its bytes came {VIA_WORDS[via]}"
        if not rows:
            return frame
        if loaded:
            frame.origin = LOADED_THEN_TRACED
            failed = next((r.recompile_reason for r in rows if r.recompile_reason), None)
            frame.why = "none of its saved entries' guards passed" + \
                (f": {failed.strip().splitlines()[-1].strip()}" if failed else "")
        elif from_rank is not None:
            frame.origin = LOADED_FROM_RANK_THEN_TRACED.format(rank=from_rank)
            frame.why = f"the variants rank {from_rank} sent do not pass their guards here"
        else:
            frame.why = "; ".join(filter(None, [self._why_traced(_key(*name)), *map(_sent_words, shipped)]))
        reasons = list(dict.fromkeys(r for cid in frame.compile_ids for r in self.declined.get(cid, [])))
        if reasons:
            frame.package = DECLINED
            frame.declined_by = PLUGIN if all(r.startswith(PLUGIN_REASON) for r in reasons) else STOCK_DYNAMO
            declined = [cid for cid in frame.compile_ids if cid in self.declined]
            partial = f" (compile{'s' * (len(declined) > 1)} {', '.join(declined)} only)" \
                if len(declined) < len(frame.compile_ids) else ""
            frame.reason = "; ".join(reasons) + partial
        elif all(r.fail_type is not None for r in rows):
            frame.package, frame.reason = NOT_SAVED, "its compile failed (see Compile failures): it ran eagerly"
        elif backend not in SAVED_BACKENDS:
            frame.package = NOT_SAVED
            frame.reason = (f"compiled with explain's {backend} backend, and torch's precompile saves only a cached "
                            "backend's frames (explain with backend inductor saves them)")
        else:
            frame.package = PACKAGED
        return frame

    def _why_traced(self, key: Key) -> str:
        """Why a frame no lookup loaded was traced: the lookup of its own
        function, or of the function it resumes after a graph break."""
        own = [lookup for lookup in self.lookups if lookup.key == key]
        if own:
            return {"miss": "no entry for it in Dynamo's cache",
                    "error": "its entry in Dynamo's cache failed to load (torch logged why)",
                    }.get(own[-1].state, "its entry in Dynamo's cache holds no compiled code for it (none was saved)")
        resumed = L.resume_point(key[0])
        if resumed is None:
            return ""
        owner = [lookup for lookup in self.lookups if lookup.name == resumed[0] and lookup.key[1] == key[1]]
        if not owner:
            return ""
        return {"miss": f"no entry for {resumed[0]} in Dynamo's cache",
                "error": f"the entry of {resumed[0]} in Dynamo's cache failed to load (torch logged why)",
                }.get(owner[-1].state, f"not in the entry of {resumed[0]} in Dynamo's cache")


def _sent_words(record: dict[str, Any]) -> str:
    """What compile once did with a frame traced here."""
    if record.get("abandoned"):
        return f"this rank was the job's first to reach it; not sent to the others: {record['abandoned']}"
    if record.get("bytes"):
        return f"this rank was the job's first to reach it; sent to the others ({record['bytes'] / 1024:.0f} KiB)"
    return str(record.get("source", ""))


def _label(code_name: str) -> str:
    """A frame as the user knows it: ``step``, or ``step after the break at
    line 12`` for the frame Dynamo made to continue ``step`` after a graph break."""
    resumed = L.resume_point(code_name)
    return f"{resumed[0]} after the break at line {resumed[1]}" if resumed else code_name


def _safely(fn: Any, *args: Any) -> Any:
    """What cannot be read is left out, never an error in the user's program."""
    try:
        return fn(*args)
    except Exception:
        return None
