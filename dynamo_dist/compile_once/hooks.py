"""The changes compile once makes to torch, as rows ``_hooks/caches.py``
installs (each through its reversible ``Patches`` record):

- the AOTAutograd and FX-graph lookups: one that misses locally and remotely
  goes through the job's store (``protocol.after_miss``);
- their saves: the compiling rank publishes what the cache saved;
- their hit records: a hit needs no coordination, and is noted;
- AOTAutograd's ``try_load``: the claiming rank lowers its backward at once;
- every graph compile (Dynamo handing a graph to its backend, inductor
  lowering one) is a ``protocol.scope``;
- Dynamo's frame conversion, under torch's precompile: a frame is traced once
  per job and loaded by the other ranks (``frames``);
- a Redis remote cache that torch switches off is said once.
"""

from __future__ import annotations

import functools
from typing import Any, Callable

from .. import _compat as C
from . import frames, protocol
from .protocol import AOT, FX


def rows() -> list[tuple[Any, str, Any]]:
    """``(owner, name, replacement)`` for each change, built from what is
    installed now (the replacements wrap the current values)."""
    aot, fx = C.caches.aot_autograd_cache(), C.caches.fx_graph_cache()
    out: list[tuple[Any, str, Any]] = [
        (aot, "_lookup", staticmethod(_coordinated_lookup(aot.__dict__["_lookup"].__func__, AOT,
                                                          lambda found: found is not None))),
        (fx, "_lookup_graph", staticmethod(_coordinated_lookup(fx.__dict__["_lookup_graph"].__func__, FX,
                                                               lambda found: found[0] is not None))),
        (aot, "try_load", staticmethod(_claimed_lowers_backward_at_once(aot.__dict__["try_load"].__func__))),
        (aot, "save", staticmethod(_publishing(aot.__dict__["save"].__func__, AOT))),
        (fx, "_save_graph", staticmethod(_publishing(fx.__dict__["_save_graph"].__func__, FX))),
    ]
    for owner, artifact in ((aot, AOT), (fx, FX)):
        out.append((owner, "_record_result", classmethod(_noting_hits(owner.__dict__["_record_result"].__func__,
                                                                      artifact))))
    out += [(owner, name, _in_scope(getattr(owner, name))) for owner, name in C.caches.compile_scope_points()]
    owner, name = C.packages.FRAME_CONVERSION_POINT
    out.append((owner, name, frames.shipped_frames(getattr(owner, name))))
    redis = C.caches.redis_backend()
    if redis is not None:
        out += [(redis, name, _reporting_lost_server(redis.__dict__[name])) for name in ("_get", "_put")]
    return out


def _coordinated_lookup(lookup: Callable[..., Any], artifact: str, hit: Callable[[Any], bool]) -> Callable[..., Any]:
    def coordinated(key: str, *args: Any, **kwargs: Any) -> Any:
        again = functools.partial(lookup, key, *args, **kwargs)
        with protocol.quiet_lookups():
            found = again()
        if hit(found):
            return found
        loaded = protocol.after_miss(artifact, key, again, hit)
        return loaded if loaded is not None else found

    return coordinated


def _claimed_lowers_backward_at_once(try_load: Callable[..., Any]) -> Callable[..., Any]:
    """A rank that claimed the graph lowers its backward with its forward, so
    the entry is saved (and published) before the forward's collectives need
    the waiting ranks."""
    def load(mod: Any, args: Any, aot_config: Any, *rest: Any, **kwargs: Any) -> Any:
        result = try_load(mod, args, aot_config, *rest, **kwargs)
        compiled_fn, config = C.caches.aot_lookup_parts(result, aot_config)
        key = C.caches.aot_cache_key(config)
        if compiled_fn is None and key is not None and protocol.claimed_here(AOT, key):
            return C.caches.rebuilt_try_load_result(result, compiled_fn, C.caches.with_eager_backward(config))
        return result

    return load


def _publishing(save: Callable[..., Any], artifact: str) -> Callable[..., Any]:
    def saved(key: str, *args: Any, **kwargs: Any) -> Any:
        out = save(key, *args, **kwargs)
        if artifact == FX:
            protocol.fx_key_touched(key)
        protocol.saved(artifact, key)
        return out

    return saved


def _noting_hits(record: Callable[..., Any], artifact: str) -> Callable[..., Any]:
    def record_result(cls: Any, key: str, local_hit: bool, local_miss: bool, remote_hit: bool,
                      remote_miss: bool) -> Any:
        if local_hit or remote_hit:
            if artifact == FX:
                protocol.fx_key_touched(key)
            protocol.record_hit(artifact, key, remote=remote_hit)
        return record(cls, key, local_hit, local_miss, remote_hit, remote_miss)

    return record_result


def _in_scope(compile_graph: Callable[..., Any]) -> Callable[..., Any]:
    @functools.wraps(compile_graph)
    def compile_in_scope(*args: Any, **kwargs: Any) -> Any:
        with protocol.scope():
            return compile_graph(*args, **kwargs)

    return compile_in_scope


def _reporting_lost_server(method: Callable[..., Any]) -> Callable[..., Any]:
    """torch drops a Redis remote cache it cannot reach without a word."""
    def call(self: Any, *args: Any, **kwargs: Any) -> Any:
        had_client = not C.caches.redis_client_lost(self)
        out = method(self, *args, **kwargs)
        if had_client and C.caches.redis_client_lost(self):
            protocol.remote_cache_lost(C.caches.remote_cache_address())
        return out

    return call
