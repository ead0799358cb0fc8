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
- ``sdpa_backend_calls()``: the two private functions Dynamo puts in a graph
  for ``with sdpa_kernel(...)`` (``SDPAKernelVariable``, torch 2.11-2.15):
  ``_backend_from_string(name)`` per backend and ``_sdpa_kernel(backends,
  set_priority)`` on entry and exit (see ``caching/sdpa.py``).
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

import dataclasses
import importlib
import os
from typing import Any, Callable, ContextManager

import torch
import torch.distributed as dist
import torch.nn.attention as sdpa_attention
from torch._dynamo.utils import GmWrapper, counters
from torch._functorch.autograd_function import autograd_function_apply
from torch._logging import trace_structured
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


def set_stored_opaque_constants(graph: Any, constants: dict[str, Any]) -> None:
    """Give the copy of a compiled FX graph being saved these constants (a
    new dict: the copy shares the live graph's)."""
    graph.torchbind_constants = constants


def compiled_graph_class() -> type:
    """``CompiledFxGraph``: its ``prepare_for_serialization()`` readies a copy
    of a compiled graph for pickling (the FX-graph cache, the AOTAutograd
    cache's bundled entries, a compile subprocess's reply)."""
    return importlib.import_module("torch._inductor.output_code").CompiledFxGraph


def sdpa_backend_calls() -> dict[str, Callable[..., Any]]:
    """``module.name`` (as the AOTAutograd cache names a call target) -> the
    function, for the calls Dynamo records for ``with sdpa_kernel(...)``."""
    calls = (sdpa_attention._backend_from_string, sdpa_attention._sdpa_kernel)
    return {f"{fn.__module__}.{fn.__name__}": fn for fn in calls}


def inductor_config() -> Any:
    return importlib.import_module("torch._inductor.config")


# -- compile once per job (``compile_once/``) ------------------------------------------
# The artifact types of the two caches' entries (``CacheArtifact.type()``).
AOT_ARTIFACT = "aot_autograd"
FX_ARTIFACT = "inductor"


def aot_autograd_cache() -> type:
    """``AOTAutogradCache``: its static ``_lookup(key, local, remote, args,
    cache_info, aot_config)`` returns ``(entry, pickled)`` or None, ``try_load``
    returns ``(compiled_fn, aot_config)`` (2.12+) or ``compiled_fn`` (2.11;
    the config is changed in place), ``save(key, entry, remote)`` stores a
    compiled entry (2.11-2.15)."""
    return _autograd_cache_module().AOTAutogradCache


def fx_graph_cache() -> type:
    """``FxGraphCache``: its static ``_lookup_graph(key, example_inputs, local,
    remote_cache, constants, evaluate_guards)`` returns ``(graph or None,
    info)`` and ``_save_graph(key, graph, ...)`` stores one (2.11-2.15)."""
    return codecache().FxGraphCache


def compile_scope_points() -> tuple[tuple[Any, str], ...]:
    """The calls that compile one graph, outermost first: Dynamo handing a
    graph to its backend (``OutputGraph.call_user_compiler``) and inductor
    lowering one graph (``compile_fx._compile_fx_inner``, also a lazily
    lowered backward at the first ``.backward()``)."""
    output_graph = importlib.import_module("torch._dynamo.output_graph").OutputGraph
    compile_fx = importlib.import_module("torch._inductor.compile_fx")
    return ((output_graph, "call_user_compiler"), (compile_fx, "_compile_fx_inner"))


def aot_lookup_parts(result: Any, aot_config: Any) -> tuple[Any, Any]:
    """``(compiled_fn, aot_config)`` of what ``try_load`` returned."""
    return result if isinstance(result, tuple) else (result, aot_config)


def aot_cache_key(aot_config: Any) -> str | None:
    """The AOTAutograd key a missed lookup left on the config (None: bypassed)."""
    info = getattr(aot_config, "cache_info", None)
    return getattr(info, "cache_key", None)


def with_eager_backward(aot_config: Any) -> Any:
    """The config that lowers the backward with the forward (the compile then
    saves its cache entry before it returns)."""
    if dataclasses.is_dataclass(aot_config) and type(aot_config).__dataclass_params__.frozen:
        return dataclasses.replace(aot_config, force_non_lazy_backward_lowering=True)
    aot_config.force_non_lazy_backward_lowering = True
    return aot_config


def rebuilt_try_load_result(result: Any, compiled_fn: Any, aot_config: Any) -> Any:
    return (compiled_fn, aot_config) if isinstance(result, tuple) else compiled_fn


def _artifact_manager() -> Any:
    return importlib.import_module("torch.compiler._cache").CacheArtifactManager


def artifact_mark() -> dict[str, int]:
    """Where the record of new cache artifacts stands now, per type."""
    return {artifact_type: len(items) for artifact_type, items in _artifact_manager()._new_cache_artifacts.items()}


def artifacts_since(mark: dict[str, int], wanted: set[tuple[str, str]]) -> list[Any]:
    """The artifacts recorded since ``mark`` and the ``(type, key)`` ones in
    ``wanted`` (a lookup hit of an entry recorded earlier is not recorded
    again); raises LookupError for one of ``wanted`` never recorded."""
    manager = _artifact_manager()
    found: dict[tuple[str, str], Any] = {}
    for artifact_type, items in manager._new_cache_artifacts.items():
        start = mark.get(artifact_type, 0)
        for artifact in items[start if start <= len(items) else 0:]:
            found[(artifact.type(), artifact.key)] = artifact
    for artifact in manager._seen_artifacts:
        if (artifact.type(), artifact.key) in wanted:
            found.setdefault((artifact.type(), artifact.key), artifact)
    missing = wanted - found.keys()
    if missing:
        raise LookupError(f"no recorded cache artifact for {sorted(missing)}")
    return list(found.values())


def serialize_artifacts(artifacts: list[Any]) -> bytes:
    """The bytes ``torch.compiler.load_cache_artifacts`` takes, of these artifacts."""
    module = importlib.import_module("torch.compiler._cache")
    serializer_type = importlib.import_module("torch.utils._appending_byte_serializer").AppendingByteSerializer
    by_type: dict[str, list[Any]] = {}
    for artifact in artifacts:
        by_type.setdefault(artifact.type(), []).append(artifact)
    serializer = serializer_type(serialize_fn=module._serialize_single_cache)
    serializer.extend(list(by_type.items()))
    return serializer.to_bytes()


def load_artifacts(data: bytes) -> None:
    """Write artifacts into this process's local caches; raises ValueError
    if torch could not read them."""
    if torch.compiler.load_cache_artifacts(data) is None:
        raise ValueError("torch could not read them")


def trace_artifact(name: str, payload: Callable[[], str]) -> None:
    """A JSON structured-trace artifact (computed only when something listens)."""
    trace_structured("artifact", metadata_fn=lambda: {"name": name, "encoding": "json"}, payload_fn=payload)


# The backend of ``worlds.recording``'s world: a fake world whose groups
# record the collectives they are asked to run (Python process groups).
RECORDING_BACKEND = "fake_recording"
FAKE_BACKENDS = ("fake", RECORDING_BACKEND)


def is_fake_world() -> bool:
    """One process posing as a rank: torch's fake backend, or the recording one (``worlds.recording``)."""
    return dist.get_backend() in FAKE_BACKENDS


def default_store() -> Any:
    """The c10d store of the default process group (the job's), or None."""
    try:
        return dist.distributed_c10d._get_default_store()
    except (RuntimeError, ValueError, AttributeError):
        return None


def _setting(module_name: str, path: str) -> Any:
    """A config value by module and dotted path, or None where this release lacks it."""
    try:
        value: Any = importlib.import_module(module_name)
    except ImportError:
        return None
    for part in path.split("."):
        value = getattr(value, part, None)
    return value


def _on(module_name: str, path: str) -> bool:
    return _setting(module_name, path) is True


_INDUCTOR, _FUNCTORCH, _COMMS = "torch._inductor.config", "torch._functorch.config", "torch._inductor.config_comms"


def _reorders() -> bool:
    """Inductor reorders collectives for overlap (its SPMD check then runs)."""
    return _on(_INDUCTOR, "aten_distributed_optimizations.enable_overlap_scheduling") or \
        _on(_INDUCTOR, "reorder_for_compute_comm_overlap")


# Settings under which a compile runs collectives on every rank that compiles,
# by name -> whether they are on now: a rank that loads instead of compiling
# would leave the others waiting in them.
COMPILE_TIME_COLLECTIVES: dict[str, Callable[[], bool]] = {
    f"{_FUNCTORCH}._sync_decision_cross_ranks": lambda: _on(_FUNCTORCH, "_sync_decision_cross_ranks"),
    f"{_FUNCTORCH}._sync_cache_decision_cross_ranks": lambda: _on(_FUNCTORCH, "_sync_cache_decision_cross_ranks"),
    f"{_INDUCTOR}.aten_distributed_optimizations.spmd_check with collective reordering":
        lambda: _on(_INDUCTOR, "aten_distributed_optimizations.spmd_check") and _reorders(),
    f"{_INDUCTOR}.aten_distributed_optimizations.enable_overlap_scheduling":
        lambda: _on(_INDUCTOR, "aten_distributed_optimizations.enable_overlap_scheduling"),
    f"{_COMMS}.runtime_estimations_align_across_all_distributed_ranks":
        lambda: _on(_COMMS, "runtime_estimations_align_across_all_distributed_ranks"),
}


def compile_time_collectives_on() -> list[str]:
    """The ``COMPILE_TIME_COLLECTIVES`` settings that are on, by name."""
    return [name for name, on in COMPILE_TIME_COLLECTIVES.items() if on()]


def redis_backend() -> type | None:
    """torch's Redis remote-cache backend: on a connection error it sets its
    ``_redis`` client to None and the remote cache is off for the process."""
    module = importlib.import_module("torch._inductor.remote_cache")
    return getattr(module, "RedisRemoteCacheBackend", None)


def redis_client_lost(backend: Any) -> bool:
    return getattr(backend, "_redis", None) is None


def remote_cache_address() -> str:
    """Where torch's Redis remote caches connect (its environment variables)."""
    url = os.environ.get("TORCHINDUCTOR_REDIS_URL")
    if url:
        return url
    return f"redis://{os.environ.get('TORCHINDUCTOR_REDIS_HOST', 'localhost')}:" \
           f"{os.environ.get('TORCHINDUCTOR_REDIS_PORT', '6379')}"


def remote_caches_on() -> bool:
    """torch's FX-graph or AOTAutograd remote cache is on (its config or environment)."""
    found = False
    for module_name, name in (("torch._inductor.utils", "should_use_remote_fx_graph_cache"),
                              ("torch._functorch._aot_autograd.autograd_cache", "should_use_remote_autograd_cache")):
        try:
            found = found or bool(getattr(importlib.import_module(module_name), name)())
        except Exception:  # a release without it, or a config it cannot read: off
            pass
    return found


_FLEET: dict[str, Any] = {}  # address -> (client, address) or None: one check per server and process


def fleet_client() -> tuple[Any, str] | None:
    """(a Redis client of torch's remote caches' server, its address) where
    one of those caches is on, the ``redis`` package imports and the server
    answers; None otherwise. The client is made as torch makes its own
    (``RedisRemoteCacheBackend``: ``TORCHINDUCTOR_REDIS_URL``, else
    ``_HOST`` / ``_PORT``); the answer is kept per address."""
    if not remote_caches_on():
        return None
    address = remote_cache_address()
    if address not in _FLEET:
        try:
            backend = redis_backend()
            client = backend("dynamo_dist")._redis if backend is not None else None
            if client is not None:
                client.ping()
            _FLEET[address] = None if client is None else (client, address)
        except Exception:
            _FLEET[address] = None
    return _FLEET[address]


def process_rank() -> int:
    """This process's global rank (0 outside a world)."""
    return dist.get_rank() if dist.is_available() and dist.is_initialized() else 0


def inductor_cache_dir() -> str:
    """The local cache dir inductor uses (``TORCHINDUCTOR_CACHE_DIR`` or its default)."""
    return importlib.import_module("torch._inductor.runtime.cache_dir_utils").cache_dir()


# -- device-agnostic keys under compile_on_one_rank (``caching/keys.py``) -----------------
def tensor_metadata_point() -> tuple[Any, str]:
    """Where the caches' keys describe a tensor (its ``TensorMetadata``)."""
    return codecache(), "extract_tensor_metadata_for_cache_key"


def device_agnostic_codegen() -> bool:
    """Whether inductor's code is the same on every device under
    ``compile_on_one_rank`` (2.14+: the wrapper reads the device index at run
    time, kernels carry no index, and tracing refuses any accelerator but the
    current one)."""
    wrapper = importlib.import_module("torch._inductor.codegen.wrapper")
    return hasattr(wrapper, "_COOR_DEVICE_IDX_VAR")


def current_accelerator() -> torch.device | None:
    """The current accelerator device, with its index, or None (CPU only)."""
    accelerator = getattr(torch, "accelerator", None)
    if accelerator is None or not accelerator.is_available():
        return None
    device = accelerator.current_accelerator()
    return torch.device(device.type, accelerator.current_device_index())


def cudagraphs_on() -> bool:
    """CUDA graphs capture the compile-time device index in the cached
    artifact (``CompiledFxGraph.device_idxs``): it is not device-agnostic."""
    return bool(inductor_config().triton.cudagraphs)


# -- the AOTAutograd cache's admission of one graph --------------------------

def _autograd_cache_module() -> Any:
    return importlib.import_module("torch._functorch._aot_autograd.autograd_cache")


def aot_key_hook_point() -> tuple[Any, str]:
    """(module, name) of ``autograd_cache_key(gm, example_inputs, config,
    ...)``: checks that the Dynamo graph is cacheable, then computes its key
    (what ``AOTAutogradCache`` and ``aot_autograd.autograd_cache_key`` call)."""
    return _autograd_cache_module(), "autograd_cache_key"


def bypass_error() -> type[Exception]:
    return _autograd_cache_module().BypassAOTAutogradCache


def graph_module_of(mod: Any) -> Any:
    """The GraphModule the key is computed for (Dynamo may pass a wrapper)."""
    return mod.gm if isinstance(mod, GmWrapper) else mod


def node_refusal(node: Any) -> str | None:
    """Why the AOTAutograd cache refuses ``node`` in a graph it checks
    (``check_node_safe``: the call targets it knows how to key), or None."""
    cache = _autograd_cache_module()
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


# Where Dynamo records a node's example value (a fake tensor, a SymInt...);
# the AOTAutograd cache accepts a method call only on a receiver that has one.
_EXAMPLE_VALUE = "example_value"


def example_value(node: Any) -> Any:
    return node.meta.get(_EXAMPLE_VALUE)


def set_example_value(node: Any, value: Any) -> None:
    node.meta[_EXAMPLE_VALUE] = value


def drop_example_value(node: Any) -> None:
    node.meta.pop(_EXAMPLE_VALUE, None)
