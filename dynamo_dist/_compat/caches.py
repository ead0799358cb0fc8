"""torch's compile caches: the objects ``_hooks`` changes so distributed
programs get stable, sound cache keys, and the counters diagnostics read.

- ``fx_cache_pickler()``: inductor's ``FxGraphCachePickler``, which pickles
  everything a graph's FX-graph-cache key (and, as its subclass, the
  AOTAutograd cache key) depends on. Its per-instance ``dispatch_table`` gets
  a ``DeviceMesh`` reducer: a mesh reached through an opaque graph input
  (2.12+: DTensor flattens its mesh as an inner "tensor") is otherwise
  pickled whole, cached ``hash()`` included, which differs in every process.
- ``MESH_STABLE_HASH``: ``DeviceMesh._stable_hash`` (2.12+), what the
  AOTAutograd key reads for a DTensor input's mesh; it leaves out the process
  groups and this rank's coordinate.
- ``hash_details()``: inductor's ``FxGraphHashDetails``, everything a key
  hashes (the AOTAutograd key's details subclass it); its ``cache_key_tag``
  (``torch.compiler.config.cache_key_tag``) gets this rank.
- ``constants_loaders()``: inductor's ``CompiledFxGraphConstants`` classes,
  whose ``unwrap`` gives a graph loaded from the cache its constants: it
  leaves out ``torchbind_constants`` (opaque objects such as a mesh the graph
  calls ``mesh_get_process_group`` on under ``compile_on_one_rank``), so the
  loaded graph runs with ``None`` there (torch 2.13-2.15).
- ``cacheable_functions()``: inductor's ``unsafe_marked_cacheable_functions``
  (name -> version string, part of the key through the config hash): the
  functions the AOTAutograd cache accepts as graph call targets.
- ``sdpa_backend_calls()``: the two private functions Dynamo puts in a graph
  for ``with sdpa_kernel(...)`` (``SDPAKernelVariable``, torch 2.11-2.15):
  ``_backend_from_string(name)`` per backend and ``_sdpa_kernel(backends,
  set_priority)`` on entry and exit (see ``caching/sdpa.py``).
- ``BYPASS_LOGS``: the loggers where each cache says why it bypassed, at
  INFO, one line per bypass (``bypass_reason`` reads it back).
"""

from __future__ import annotations

import importlib
import logging
from typing import Any, Callable

import torch.nn.attention as sdpa_attention
from torch._dynamo.utils import counters

from .distributed import DeviceMesh

# (owner, attribute) or None on a release without it (2.11).
MESH_STABLE_HASH: tuple[Any, str] | None = (DeviceMesh, "_stable_hash") if hasattr(DeviceMesh, "_stable_hash") else None

# Counters in ``torch._dynamo.utils.counters`` that count cache outcomes,
# as (counter group, key) per (cache, outcome).
CACHE_COUNTERS: dict[tuple[str, str], tuple[str, str]] = {
    ("fx_graph", "hit"): ("inductor", "fxgraph_cache_hit"),
    ("fx_graph", "miss"): ("inductor", "fxgraph_cache_miss"),
    ("fx_graph", "bypass"): ("inductor", "fxgraph_cache_bypass"),
    ("aot_autograd", "hit"): ("aot_autograd", "autograd_cache_hit"),
    ("aot_autograd", "miss"): ("aot_autograd", "autograd_cache_miss"),
    ("aot_autograd", "bypass"): ("aot_autograd", "autograd_cache_bypass"),
}


def outcome_counts() -> dict[str, dict[str, int]]:
    """``{cache: {outcome: count}}`` counted so far in this process (caches
    ``fx_graph``, ``aot_autograd``; outcomes ``hit``, ``miss``, ``bypass``)."""
    out: dict[str, dict[str, int]] = {}
    for (cache, outcome), (group, key) in CACHE_COUNTERS.items():
        out.setdefault(cache, {})[outcome] = int(counters[group][key])
    return out


def codecache() -> Any:
    # Heavy (imports inductor): only when the plugin is installed.
    return importlib.import_module("torch._inductor.codecache")


def fx_cache_pickler() -> type:
    return codecache().FxGraphCachePickler


def hash_details() -> type:
    return codecache().FxGraphHashDetails


def constants_loaders() -> tuple[type, ...]:
    output_code = importlib.import_module("torch._inductor.output_code")
    return tuple(getattr(output_code, name) for name in ("CompiledFxGraphConstants", "CompiledFxGraphConstantsWithGm")
                 if hasattr(output_code, name))


def stored_opaque_constants(graph: Any) -> dict[str, Any]:
    """The opaque-object constants a compiled FX graph was saved with."""
    return dict(getattr(graph, "torchbind_constants", None) or {})


def cacheable_functions() -> dict[str, str]:
    return importlib.import_module("torch._inductor.config").unsafe_marked_cacheable_functions


def sdpa_backend_calls() -> dict[str, Callable[..., Any]]:
    """``module.name`` (as the AOTAutograd cache names a call target) -> the
    function, for the calls Dynamo records for ``with sdpa_kernel(...)``."""
    calls = (sdpa_attention._backend_from_string, sdpa_attention._sdpa_kernel)
    return {f"{fn.__module__}.{fn.__name__}": fn for fn in calls}


# cache -> (its module's logger, the text before the reason in its INFO line on a bypass)
BYPASS_LOGS: dict[str, tuple[str, str]] = {
    "fx_graph": ("torch._inductor.codecache", "Bypassing FX Graph Cache because "),
    "aot_autograd": ("torch._functorch._aot_autograd.autograd_cache", "Bypassing autograd cache due to: "),
}


def bypass_loggers() -> dict[str, logging.Logger]:
    return {cache: logging.getLogger(name) for cache, (name, _) in BYPASS_LOGS.items()}


def bypass_reason(cache: str, message: str) -> str | None:
    """The reason in a line a cache's logger wrote, if it is a bypass line."""
    prefix = BYPASS_LOGS[cache][1]
    if not message.startswith(prefix):
        return None
    return message[len(prefix):].strip("'")


def inductor_config() -> Any:
    return importlib.import_module("torch._inductor.config")
