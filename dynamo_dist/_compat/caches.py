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
  set_priority)`` on entry and exit (see ``sdpa_cache.py``).
- ``BYPASS_LOGS``: the loggers where each cache says why it bypassed, at
  INFO, one line per bypass (``bypass_reason`` reads it back).
- The AOTAutograd cache's admission of one graph (``caching/aot_key.py``),
  the same on torch 2.11-2.15: ``aot_key_hook_point()`` (the function that
  checks a Dynamo graph and computes its key; the cache calls it by its
  module's global name), ``bypass_error()`` (what it raises to refuse),
  ``node_refusal`` (its per-node check), the meta entry where Dynamo keeps a
  checkpointed subgraph's selective-AC ``context_fn`` (read through the
  ``cache_hash`` attribute), the ``autograd_function_apply`` op with the
  config flag that admits it, and the op types a policy compares.
"""

from __future__ import annotations

import importlib
import logging
from typing import Any, Callable, ContextManager

import torch
import torch.nn.attention as sdpa_attention
from torch._dynamo.utils import GmWrapper, counters
from torch._functorch.autograd_function import autograd_function_apply
from torch._ops import HigherOrderOperator, OpOverload, OpOverloadPacket

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


# -- the AOTAutograd cache's admission of one graph --------------------------

def autograd_cache() -> Any:
    return importlib.import_module("torch._functorch._aot_autograd.autograd_cache")


def aot_key_hook_point() -> tuple[Any, str]:
    """(module, name) of ``autograd_cache_key(gm, example_inputs, config,
    ...)``: checks that the Dynamo graph is cacheable, then computes its key
    (what ``AOTAutogradCache`` and ``aot_autograd.autograd_cache_key`` call)."""
    return autograd_cache(), "autograd_cache_key"


def bypass_error() -> type[Exception]:
    return autograd_cache().BypassAOTAutogradCache


def graph_module_of(mod: Any) -> Any:
    """The GraphModule the key is computed for (Dynamo may pass a wrapper)."""
    return mod.gm if isinstance(mod, GmWrapper) else mod


def node_refusal(node: Any) -> str | None:
    """Why the AOTAutograd cache refuses ``node`` in a graph it checks
    (``check_node_safe``: the call targets it knows how to key), or None."""
    cache = autograd_cache()
    try:
        cache.check_node_safe(node)
    except cache.BypassAOTAutogradCache as e:
        return str(e)
    return None


# The GraphModule.meta entry where Dynamo keeps a checkpointed subgraph's
# ``context_fn`` (selective activation checkpointing); the AOTAutograd key
# reads its ``cache_hash`` attribute and bypasses the graph without one.
_CHECKPOINT_CONTEXT_FN = "_checkpoint_context_fn"
# The start of the AOTAutograd cache's bypass reason for such a graph.
SAC_BYPASS_REASON = "SAC context_fn does not have a cache_hash attribute"


def checkpoint_context_fn(gm: Any) -> Any:
    return gm.meta.get(_CHECKPOINT_CONTEXT_FN)


def set_checkpoint_context_fn(gm: Any, context_fn: Any) -> None:
    gm.meta[_CHECKPOINT_CONTEXT_FN] = context_fn


# The op Dynamo records for a custom autograd.Function:
# ``autograd_function_apply(fwd_body, bwd_body, *args, **indices)``, and the
# ctx class the cache refuses as a call target unless custom Functions are admitted.
AUTOGRAD_FUNCTION_APPLY = autograd_function_apply
FUNCTION_CTX = torch.autograd.function.FunctionCtx
_ADMIT_CUSTOM_FUNCTIONS = "autograd_cache_allow_custom_autograd_functions"


def custom_functions_admitted_by_user() -> bool:
    """torch's global opt-in (``TORCHINDUCTOR_AUTOGRAD_CACHE_ALLOW_CUSTOM_AUTOGRAD=1``)."""
    return bool(getattr(importlib.import_module("torch._functorch.config"), _ADMIT_CUSTOM_FUNCTIONS))


def custom_functions_admitted() -> ContextManager[None]:
    """The opt-in switched on for the duration of the block (one graph's key)."""
    return importlib.import_module("torch._functorch.config").patch(**{_ADMIT_CUSTOM_FUNCTIONS: True})


# Operators as a selective-AC policy sees them (``func`` in ``policy(ctx, func, ...)``).
OP_TYPES: tuple[type, ...] = (OpOverload, OpOverloadPacket, HigherOrderOperator)


def op_name(op: Any) -> str:
    """An operator's registered name, the same object in every process
    (``aten.mm.default``, ``aten.mm``, ``higher_order.flex_attention``)."""
    if isinstance(op, HigherOrderOperator):
        return f"{op.namespace}.{op.name()}"
    return str(op)
