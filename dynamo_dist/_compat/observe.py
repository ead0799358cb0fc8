"""What the tools (``diagnostics/``, the CLI, benchmarks, fuzzing, coverage
and the worlds) read from torch's internals, behind small named functions.

Nothing outside ``dynamo_dist/_compat/`` imports torch's private modules or
reads private attributes of torch objects; a torch upgrade that moves one of
these is a change here. Changes to torch's global state are not made here:
they go through ``_hooks.Patches`` (``_hooks/tools.py``); this
module only names the objects they change.
"""

from __future__ import annotations

import importlib
import json
import logging
import os
from typing import Any, Callable

import torch
import torch.distributed._functional_collectives as funcol  # noqa: F401  (user programs' functional collectives)
import torch.distributed as dist
import torch.fx
from torch._dynamo.exc import InternalTorchDynamoError, RestartAnalysis, TorchRuntimeError, Unsupported  # noqa: F401
import torch._dynamo
from torch._dynamo.utils import counters
from torch._dynamo.testing import CompileCounterWithBackend
from torch._dynamo.backends.registry import lookup_backend as lookup
from torch._guards import CompileContext
from torch._dynamo.symbolic_convert import graph_break_log
from torch._ops import OpOverload, OpOverloadPacket
from torch.distributed.distributed_c10d import _resolve_process_group
from torch._C._distributed_c10d import _create_work_from_future
from torch.distributed.tensor import DTensor
from torch.distributed.tensor._dtensor_spec import DTensorSpec, TensorMeta
import torch.distributed.tensor.debug as dtensor_debug
from torch.utils._pytree import tree_flatten
from torch.utils._dtype_abbrs import dtype_abbrs as _dtype_abbrs
from torch._dynamo.backends.common import aot_autograd
from torch._dynamo.backends.debugging import boxed_nop
from torch._functorch.partitioners import min_cut_rematerialization_partition
from torch._inductor.runtime.cache_dir_utils import default_cache_dir  # light (already loaded by Dynamo)
from torch.testing._internal.distributed.fake_pg import FakeStore

from .c10d import HAS_P2P_SWITCH, P2P_SWITCH  # noqa: F401  (the coverage table's point-to-point switch)
from .caches import RECORDING_BACKEND, outcome_counts  # noqa: F401  (the recording world's backend; cache outcomes)
from .distributed import all_gather_single, clear_sharding_propagation_cache  # noqa: F401  (programs; client builds)
from .dynamo import precompile_caching  # noqa: F401  (whether torch's precompile is on)
from .release import torch_version  # noqa: F401  (the running torch, as the tables name it)

__all__ = [
    "funcol", "Unsupported", "InternalTorchDynamoError", "RestartAnalysis",
    "reset_dynamo", "mark_dynamic", "dynamo_counters", "graph_break_count", "graph_break_reasons", "compile_counter",
    "lookup_backend", "current_compile_id", "op_namespace_and_name", "op_schema_args",
    "resolve_group_ranks", "tree_leaves", "fake_store", "init_fake_process_group",
    "compilation_metrics", "compilation_metrics_limit", "graph_break_logger", "duplicate_break_checker",
    "dynamo_config", "inductor_config", "functorch_config", "rendezvous_handlers",
    "aot_eager_lowering", "inductor_lowering",
    "structured_trace_logger", "cache_artifact", "compile_cache_settings",
    "RECORDING_BACKEND", "backend_registered", "completed_work", "flatten_mesh",
    "redistribute_planner", "forget_dtensor_plans",
    "precompile_caching", "dynamo_cache_lookup", "dynamo_cache_counts", "package_key", "saved_frames",
    "package_bypass_logger", "package_bypass_reason",
    "HAS_P2P_SWITCH", "P2P_SWITCH", "outcome_counts", "all_gather_single", "clear_sharding_propagation_cache",
    "torch_version",
]


# -- Dynamo's state ------------------------------------------------------------
def reset_dynamo() -> None:
    """Drop every compiled frame and guard (``torch._dynamo.reset()``)."""
    torch._dynamo.reset()


def mark_dynamic(tensor: torch.Tensor, dim: int) -> None:
    """Mark ``dim`` of ``tensor`` dynamic for the next compile (``torch._dynamo.mark_dynamic``)."""
    torch._dynamo.mark_dynamic(tensor, dim)


def dynamo_counters() -> Any:
    """Dynamo's global counters (``counters["graph_break"]`` ...)."""
    return counters


def graph_break_count() -> int:
    """Graph breaks counted so far in this process."""
    return sum(dynamo_counters()["graph_break"].values())


def graph_break_reasons() -> set[str]:
    """The distinct graph-break reasons counted so far."""
    return set(dynamo_counters()["graph_break"])


def compile_counter(backend: Any = "eager") -> Any:
    """A backend counting frames and keeping graphs (``frame_count``, ``graphs``)."""
    return CompileCounterWithBackend(backend)


def lookup_backend(backend: Any) -> Callable[..., Any]:
    """A registered backend by name (or the callable itself)."""
    return lookup(backend)


def current_compile_id() -> str:

    return str(CompileContext.current_compile_id())


def dynamo_config() -> Any:
    """The ``torch._dynamo.config`` module (values changed through ``Patches``)."""
    return importlib.import_module("torch._dynamo.config")


def inductor_config() -> Any:
    return importlib.import_module("torch._inductor.config")


def functorch_config() -> Any:
    return importlib.import_module("torch._functorch.config")


# -- compile metrics and the graph-break log -------------------------------------
def dynamo_utils() -> Any:
    return importlib.import_module("torch._dynamo.utils")


def compilation_metrics() -> list[Any]:
    """Dynamo's per-compile rows (``CompilationMetrics``), oldest first."""
    return list(dynamo_utils().get_compilation_metrics())


def compilation_metrics_limit() -> int:
    """How many rows Dynamo keeps (a bounded deque)."""
    utils = dynamo_utils()
    return utils._compilation_metrics.maxlen or utils.DEFAULT_COMPILATION_METRICS_LIMIT


def set_compilation_metrics_limit(limit: int) -> None:
    dynamo_utils().set_compilation_metrics_limit(limit)


def graph_break_logger() -> Any:
    """The ``graph_breaks`` artifact logger (what ``TORCH_LOGS=graph_breaks`` shows)."""
    return graph_break_log


def duplicate_break_checker() -> Any:
    """Dynamo prints a repeated break without its stack; this object (its
    ``set`` attribute) remembers which it has seen."""
    return dynamo_utils().graph_break_dup_warning_checker


# -- FX graphs --------------------------------------------------------------------
def op_namespace_and_name(target: Any) -> tuple[str, str] | None:
    """``("_c10d_functional", "all_reduce")`` for an op overload or packet;
    None for anything else."""

    if isinstance(target, OpOverloadPacket):
        target = target.default
    if not isinstance(target, OpOverload):
        return None
    return target.namespace, target._opname


def op_schema_args(target: Any) -> list[str] | None:
    """The argument names of an op's schema, in order (None if not an op)."""
    if isinstance(target, OpOverloadPacket):
        target = target.default
    if not isinstance(target, OpOverload):
        return None
    return [a.name for a in target._schema.arguments]


def resolve_group_ranks(group_name: str) -> list[int] | None:
    """The global ranks of the live process group named ``group_name``."""
    try:

        return list(dist.get_process_group_ranks(_resolve_process_group(group_name)))
    except Exception:  # group already destroyed, or not a c10d group
        return None


def tree_leaves(tree: Any) -> list[Any]:

    return tree_flatten(tree)[0]


# -- lowering (what the recording backend runs) ------------------------------------
def aot_eager_lowering(gm: torch.fx.GraphModule, example_inputs: list[Any],
                       forward: Callable[[torch.fx.GraphModule], None],
                       backward: Callable[[torch.fx.GraphModule], None]) -> Callable[..., Any]:
    """Lower ``gm`` as the registered ``aot_eager`` backend does, calling
    ``forward(graph)`` / ``backward(graph)`` with each post-AOTAutograd graph."""

    def fw(graph: torch.fx.GraphModule, inputs: list[Any]) -> Callable[..., Any]:
        forward(graph)
        return boxed_nop(graph, inputs)

    def bw(graph: torch.fx.GraphModule, inputs: list[Any]) -> Callable[..., Any]:
        backward(graph)
        return boxed_nop(graph, inputs)

    return aot_autograd(fw_compiler=fw, bw_compiler=bw, partition_fn=min_cut_rematerialization_partition,
                        keep_inference_input_mutations=True)(gm, example_inputs)


def inductor_lowering(gm: torch.fx.GraphModule, example_inputs: list[Any],
                      record: Callable[[torch.fx.GraphModule, bool], None],
                      autograd_cache: bool = False) -> Callable[..., Any]:
    """Compile ``gm`` with inductor, calling ``record(graph, is_backward)``
    with each graph inductor's inner compiler receives. A hit in the
    AOTAutograd cache skips the inner compiler (nothing recorded), so by
    default that cache is off for this compile; inductor's FX graph cache
    still applies. ``autograd_cache=True`` (explain, which reports the
    caches' real outcomes) leaves it as the user has it."""
    # Heavy (imports all of inductor): only when a graph is lowered with it.
    from torch._inductor.compile_fx import compile_fx, compile_fx_inner

    def inner(graph: torch.fx.GraphModule, inputs: list[Any], **kwargs: Any) -> Any:
        record(graph, bool(kwargs.get("is_backward")))
        return compile_fx_inner(graph, inputs, **kwargs)

    if autograd_cache:
        return compile_fx(gm, example_inputs, inner_compile=inner)
    with functorch_config().patch(enable_autograd_cache=False):
        return compile_fx(gm, example_inputs, inner_compile=inner)


# -- compile caches (what explain reports per graph) ---------------------------------
# torch logs one structured-trace artifact per cache lookup, named
# ``<prefix><state>`` (state: hit, miss, bypass; the FX graph cache also
# "disabled" in its event log, but logs no artifact then), with a JSON payload
# (``cache_bypass_reason``, ``time_saved_ns`` / ``time_saved_ms``, ``key``).
# The same names on 2.11-2.15 (grep "fx_graph_cache_{cache_state}").
CACHE_ARTIFACT_PREFIXES = {"fx_graph_cache_": "fx_graph", "aotautograd_cache_": "aot_autograd"}
CACHE_STATES = ("hit", "miss", "bypass")


def structured_trace_logger() -> logging.Logger:
    """torch's structured-trace logger (``TORCH_TRACE``, what tlparse reads).
    torch computes artifacts only while it has a handler; it never
    propagates. Handlers are added through ``_hooks.recording_patches``."""
    return logging.getLogger("torch.__trace")


# Structured-trace events holding a post-AOTAutograd graph as printed code
# (logged on a fresh compile and replayed from the AOTAutograd cache on a
# hit) -> the stage of that graph.
AOT_GRAPH_EVENTS = {"aot_forward_graph": "forward", "aot_inference_graph": "forward",
                    "aot_backward_graph": "backward"}


def _record_compile_id(metadata: dict[str, Any]) -> str | None:
    # As current_compile_id() spells it (no attempt: graphs are keyed so).
    if metadata.get("frame_id") is None:
        return None
    return f"{metadata['frame_id']}/{metadata.get('frame_compile_id')}"


def aot_graph_event(record: logging.LogRecord) -> tuple[str, str, str | None] | None:
    """``(stage, printed graph, compile id)`` for a structured-trace record
    holding a post-AOTAutograd graph, else None."""
    metadata = getattr(record, "metadata", None)
    if not isinstance(metadata, dict):
        return None
    stage = next((AOT_GRAPH_EVENTS[k] for k in metadata if k in AOT_GRAPH_EVENTS), None)
    payload = getattr(record, "payload", None)
    if stage is None or not isinstance(payload, str):
        return None
    return stage, payload, _record_compile_id(metadata)


_DTYPES_BY_ABBREVIATION = {abbr: dtype for dtype, abbr in _dtype_abbrs.items()}


def dtype_named(abbreviation: str) -> torch.dtype | None:
    """The dtype a printed graph abbreviates (``f32`` -> ``torch.float32``)."""
    return _DTYPES_BY_ABBREVIATION.get(abbreviation)


def op_named(namespace: str, op: str, overload: str) -> Any:
    """``torch.ops.<namespace>.<op>.<overload>``, or None if there is none."""
    try:
        return getattr(getattr(getattr(torch.ops, namespace), op), overload)
    except (AttributeError, RuntimeError):
        return None


def cache_artifact(record: logging.LogRecord) -> tuple[str, str, dict[str, Any], str | None] | None:
    """``(cache, state, payload, compile id)`` for a structured-trace record
    that is a compile-cache outcome (cache: "fx_graph" or "aot_autograd";
    state: "hit", "miss" or "bypass"), else None."""
    metadata = getattr(record, "metadata", None)
    if not isinstance(metadata, dict) or not isinstance(metadata.get("artifact"), dict):
        return None
    name = str(metadata["artifact"].get("name", ""))
    for prefix, cache in CACHE_ARTIFACT_PREFIXES.items():
        state = name[len(prefix):] if name.startswith(prefix) else None
        if state in CACHE_STATES:
            break
    else:
        return None
    try:
        payload = json.loads(getattr(record, "payload", None) or "{}")
    except ValueError:
        payload = {}
    return cache, state, payload if isinstance(payload, dict) else {}, _record_compile_id(metadata)


def named_artifact(record: logging.LogRecord, name: str) -> tuple[dict[str, Any], str | None] | None:
    """``(JSON payload, compile id)`` of a structured-trace artifact called ``name``, else None."""
    metadata = getattr(record, "metadata", None)
    if not isinstance(metadata, dict) or not isinstance(metadata.get("artifact"), dict) \
            or metadata["artifact"].get("name") != name:
        return None
    try:
        payload = json.loads(getattr(record, "payload", None) or "{}")
    except ValueError:
        return None
    return (payload, _record_compile_id(metadata)) if isinstance(payload, dict) else None


def compile_cache_settings() -> dict[str, Any]:
    """Whether inductor's FX graph cache and the AOTAutograd cache are on
    (locally), and the directory they use, read without side effects
    (torch's ``cache_dir()`` creates the directory and sets the variable)."""
    off = bool(getattr(importlib.import_module("torch.compiler.config"), "force_disable_caches", False))
    ind, fun = inductor_config(), functorch_config()
    return {
        "fx_graph": bool(ind.fx_graph_cache) and not off,
        "aot_autograd": bool(getattr(fun, "enable_autograd_cache", False)) and not off,
        "force_disable_caches": off,
        "dir": os.path.abspath(os.environ.get("TORCHINDUCTOR_CACHE_DIR") or default_cache_dir()),
    }


# -- torch's precompile (what explain reports per frame) ------------------------------
# Under ``torch._dynamo.config.caching_precompile`` (TORCH_CACHING_PRECOMPILE=1),
# ``torch.compile(fn)`` looks ``fn`` up in Dynamo's cache: ``DynamoCache.load(fn)``
# (torch/_dynamo/package.py, a ``DiskDynamoCache`` on 2.11-2.15) logs "Loading
# CompilePackage for <key>", counts one of ``counters["dynamo_cache"]``'s
# dynamo_cache_hit / dynamo_cache_miss / dynamo_cache_error and returns the
# saved entry (None on a miss or an error), whose compiled code the caller then
# installs on each code object the entry holds. A compile that cannot be saved
# (its guards or its graph) is left out of the package by
# ``OutputGraph.bypass_package``, which logs "Detected a package bypass:
# <reason>" as a warning of ``torch._dynamo.output_graph`` (under
# ``strict_precompile`` it raises ``PackageError`` instead).
DYNAMO_CACHE_COUNTERS = {"dynamo_cache_hit": "hit", "dynamo_cache_miss": "miss", "dynamo_cache_error": "error"}
PACKAGE_BYPASS_MESSAGE = "Detected a package bypass: %s"


def dynamo_cache_lookup() -> tuple[Any, str]:
    """``(owner, name)`` of what ``torch.compile(fn)`` calls to look ``fn``
    up in Dynamo's cache (``DiskDynamoCache.load(self, fn)``), for a
    ``Patches`` that watches the lookups."""
    package = importlib.import_module("torch._dynamo.package")
    return type(package.DynamoCache), "load"


def dynamo_cache_counts() -> dict[str, int]:
    """Dynamo's cache lookups so far in this process: ``{"hit": n, "miss": n, "error": n}``."""
    counted = counters["dynamo_cache"]
    return {state: int(counted.get(name, 0)) for name, state in DYNAMO_CACHE_COUNTERS.items()}


def package_key(fn: Any) -> tuple[str, str, int]:
    """``(code name, file, first line)`` of the function whose package
    ``DynamoCache.load(fn)`` looks up (the innermost one under wrappers, as
    torch keys it: by its qualified name and first line)."""
    inner = importlib.import_module("torch._dynamo.eval_frame").innermost_fn(fn)
    code = getattr(inner, "__code__", None)
    return str(getattr(code, "co_name", "?")), str(getattr(code, "co_filename", "?")), \
        int(getattr(code, "co_firstlineno", 0) or 0)


def saved_frames(entry: Any) -> list[tuple[str, str, int, int]]:
    """``(code name, file, first line, compiled entries)`` of each frame a
    loaded Dynamo cache entry (``PrecompileCacheEntry``) holds; a frame whose
    compiles were all left out of the package has no entry."""
    found = []
    for code in getattr(getattr(entry, "dynamo", None), "codes", None) or ():
        saved = code.python_code
        entries = 0 if getattr(code, "bypassed", False) else len(code.guarded_codes)
        found.append((str(saved.co_name), str(saved.co_filename), int(saved.co_firstlineno), entries))
    return found


def package_bypass_logger() -> logging.Logger:
    """The logger whose warning says a compile was left out of its package."""
    return logging.getLogger("torch._dynamo.output_graph")


def package_bypass_reason(record: logging.LogRecord) -> str | None:
    """The reason of a "Detected a package bypass" record, else None."""
    if record.msg != PACKAGE_BYPASS_MESSAGE or not isinstance(record.args, tuple) or not record.args:
        return None
    return str(record.args[0])


# -- worlds ---------------------------------------------------------------------------
def fake_store() -> Any:
    """The store of torch's single-process fake process-group world."""
    return FakeStore()


def init_fake_process_group(world_size: int, rank: int) -> None:
    """``init_process_group("fake")``: groups, meshes and ranks behave as on
    ``world_size`` ranks seen from ``rank``; collectives do nothing."""

    dist.init_process_group("fake", store=fake_store(), rank=rank, world_size=world_size)


def backend_registered(name: str) -> bool:
    """Whether c10d has a backend plugin called ``name``."""
    return name.upper() in dist.Backend._plugins


def completed_work(result: Any) -> Any:
    """A finished ``Work`` whose future holds ``result``: what a Python
    process group returns from a collective it has already done."""
    future = torch.futures.Future()
    future.set_result(result)
    return _create_work_from_future(future)


def flatten_mesh(mesh: Any, dims: tuple[str, ...], name: str) -> Any:
    """``mesh[dims]._flatten(name)``: the submesh of ``dims`` flattened to one
    dim, registered on the root mesh (what the redistribute planner looks up)."""
    return mesh[dims[0] if len(dims) == 1 else dims]._flatten(name)


# The redistribute planner's module switches (torch 2.11-2.15): the names of
# ``torch.distributed.tensor._redistribute``'s globals that pick a plan, for
# ``_hooks.tools.planner_patches`` to set.
PLANNER_FORCE_MIN_COST = "_FORCE_MIN_COST_REDISTRIBUTION_PLAN"
PLANNER_NO_TRANSFORM_OPTIMIZATION = "_DISABLE_REDISTRIBUTE_TRANSFORM_OPTIMIZATION"


def redistribute_planner() -> Any:
    """The module of DTensor's redistribute planner (its switches are module globals)."""
    return importlib.import_module("torch.distributed.tensor._redistribute")


def min_cost_plan_switch_exists() -> bool:
    """Whether this release's planner has the min-cost switch
    (``use_min_cost_redistribution_plan``)."""
    return hasattr(redistribute_planner(), "use_min_cost_redistribution_plan")


def use_min_cost_plan(enabled: bool = True) -> Any:
    """``use_min_cost_redistribution_plan(enabled)``: the context manager a
    job switches DTensor's planner with (the min-cost graph search or the
    greedy one) for the block."""
    return redistribute_planner().use_min_cost_redistribution_plan(enabled)


# The planner's entry that makes a plan without its cache: what a trace runs
# (``_are_we_tracing()``), and eager on a spec pair it has not planned yet.
PLANNER_PLAN_FUNCTION = "_gen_transform_infos_non_cached"


def redistribute_plan(mesh: Any, src: tuple, dst: tuple, shape: tuple[int, ...], min_cost: bool,
                      dtype: torch.dtype = torch.float32) -> list[tuple[int, Any, Any]]:
    """The steps DTensor's planner makes for a ``shape`` tensor on ``mesh``
    from placements ``src`` to ``dst`` (before merging steps onto flattened
    meshes), with the min-cost search or the greedy one: ``(mesh dim, from,
    to)`` each. Made afresh, as a trace makes it."""
    planner = redistribute_planner()
    meta = TensorMeta(torch.Size(shape), torch.empty(shape, device="meta").stride(), dtype)
    specs = [DTensorSpec(mesh, tuple(p), tensor_meta=meta) for p in (src, dst)]
    old = getattr(planner, PLANNER_FORCE_MIN_COST)
    setattr(planner, PLANNER_FORCE_MIN_COST, min_cost)
    try:
        steps = getattr(planner, PLANNER_PLAN_FUNCTION)(*specs)
    finally:
        setattr(planner, PLANNER_FORCE_MIN_COST, old)
    return [(s.mesh_dim, *s.src_dst_placements) for s in steps]


def forget_dtensor_plans() -> None:
    """Empty DTensor's caches of redistribute plans and sharding decisions.
    Plans are made under the planner's switches as they were; and both are
    keyed by mesh equality, which leaves out this rank and its groups, so a
    process that plays several worlds one after another would otherwise
    reuse one world's plan (its meshes, its group names) in the next."""
    planner = redistribute_planner()
    for cached in (getattr(planner, "_gen_transform_infos", None),
                   getattr(type(DTensor._op_dispatcher.sharding_propagator), "_propagate_tensor_meta_cached", None)):
        if hasattr(cached, "cache_clear"):
            cached.cache_clear()
    clear_planners = getattr(planner, "clear_redistribute_planner_cache", None)  # planners per mesh
    if clear_planners is not None:
        clear_planners()
    dtensor_debug._clear_sharding_prop_cache()  # the Python cache and the C++ dispatch fast path's


def rendezvous_handlers() -> dict[str, Any]:
    """torch.distributed's rendezvous handler table (scheme -> handler); the
    CLI changes it only through ``Patches``."""
    rdzv = importlib.import_module("torch.distributed.rendezvous")  # the module (the package exports a function)
    return rdzv._rendezvous_handlers
