"""spmd_types (the ``spmd-types`` package), as the plugin needs it.

torchtitan 0.3.0's default ``parallelism.spmd_backend`` writes its parallel
code with spmd_types: plain local tensors, every collective written out
(``spmd.all_reduce`` ...), the current mesh in spmd_types' thread-local state,
and an optional type checker, a ``TorchFunctionMode`` that stores local types
(and, in global mode, PartitionSpecs) on tensors as attributes. Every fact
the plugin uses about the package's internals is here, for the releases read
(0.2.3, which torchtitan 0.3.0 installs, and 0.3.1); the rest of the plugin
names them only through this module.

The package is optional and never imported here: ``facts()`` answers None
until the user's program has imported ``spmd_types`` (importing it costs
about a second), and the facts are read once it has.

Facts read from 0.2.3 and 0.3.1 (the same on both unless said):

- the checker is ``spmd_types._checker._SpmdTypeMode``; ``typecheck()``
  enters one mode per thread (``_state._tls.current_mode``) and flips its
  switches when entered again (``_strict``, ``_local``, ``_disabled``;
  ``no_typecheck()`` sets ``_disabled``, ``local()`` sets ``_local``);
  while a mode is current it patches ``torch.autograd.Function.apply`` (a
  descriptor, ``_AutogradApplyDescriptor``, that routes ``.apply`` through
  ``__torch_function__``);
- a tensor's types are two attributes: ``_local_type`` (a dict MeshAxis ->
  R/I/V/P; absent: untyped) and ``_partition_spec`` (a ``PartitionSpec``;
  absent: none);
- the current mesh is a stack of ``MeshEntry`` (``_state._tls.mesh_stack``,
  made on first push): axes, local axes, names, every name, and the process
  group of each axis; ``set_current_mesh`` pushes one;
- the public functions that raise ``SpmdTypeError`` are wrapped by
  ``_traceback.api_boundary``, whose wrapper reads and writes
  ``_traceback._tls.under_filter`` (absent until the first call): the
  traceback filtering of an error raised inside;
- the collectives (``all_reduce`` ...) and ``convert`` / ``reinterpret`` call
  ``has_torch_function_unary(x)`` and, under a mode, ``handle_torch_function``
  with themselves as the public API: the checker sees ``spmd.all_reduce``,
  not the ops inside it;
- 0.3.1 only: ``register_no_typecheck(fn)`` pauses the checker while ``fn``'s
  code object is on the thread's stack (``_state._NO_TYPECHECK_CODES``,
  ``_state._in_no_typecheck_frame``, read by ``is_type_checking`` and by the
  mode), and ``spmd_typecheck`` on an autograd Function runs after its apply.
"""

from __future__ import annotations

import contextlib
import functools
import importlib.metadata
import os
import sys
from dataclasses import dataclass
from typing import Any, Callable, Iterator

import torch

PACKAGE = "spmd_types"
DISTRIBUTION = "spmd-types"
LOCAL_TYPE_ATTR = "_local_type"
PARTITION_SPEC_ATTR = "_partition_spec"
TYPE_ATTRS = (LOCAL_TYPE_ATTR, PARTITION_SPEC_ATTR)

# The public functions that read or write tensor types or spmd_types' state
# and compute no tensor: run as themselves at trace time (their answers fold).
TYPE_FUNCTIONS = (
    "assert_type", "assert_local_type", "assert_type_like", "assert_local_type_like", "mutate_type",
    "get_local_type", "get_axis_local_type", "maybe_get_axis_local_type", "has_local_type", "get_partition_spec",
    "is_type_checking", "current_mesh", "current_mesh_names", "current_mesh_all_names", "normalize_axis",
    "normalize_mesh", "normalize_partition_spec", "merge_types",
)
# The context managers that change spmd_types' state for a block.
CONTEXT_FUNCTIONS = ("no_typecheck", "local", "typecheck", "set_current_mesh")
# The collectives and local conversions the checker sees as one call each.
COLLECTIVE_FUNCTIONS = (
    "all_reduce", "all_gather", "reduce_scatter", "all_to_all", "redistribute", "unshard", "convert", "reinterpret",
    "shard", "invariant_to_replicate", "reinterpret_no_grad",
)


@dataclass(frozen=True, eq=False)
class Facts:
    """What the plugin reads of the installed spmd_types."""

    version: str
    package: Any
    state: Any  # spmd_types._state
    traceback: Any  # spmd_types._traceback
    checker: Any  # spmd_types._checker
    types: Any  # spmd_types.types
    mesh_axis: Any  # spmd_types._mesh_axis
    mode_type: type
    error_type: type
    boundary_code: Any  # the code object of api_boundary's wrapper
    functions: dict  # public name -> the object users call
    no_typecheck_codes: Any  # 0.3.1's registered code objects (a set), or None


@functools.cache
def _read_facts() -> Facts:
    # The one import of the package, made only once the program imported it.
    import spmd_types._checker, spmd_types._mesh_axis, spmd_types._state, spmd_types._traceback, spmd_types.types  # noqa: E401

    package = spmd_types
    try:
        version = importlib.metadata.version(DISTRIBUTION)
    except importlib.metadata.PackageNotFoundError:  # pragma: no cover - a source checkout
        version = "unknown"
    functions = {}
    for name in (*TYPE_FUNCTIONS, *CONTEXT_FUNCTIONS, *COLLECTIVE_FUNCTIONS):
        fn = getattr(package, name, None)
        if fn is None and name == "typecheck":
            fn = package._checker.typecheck
        if fn is not None:
            functions[name] = fn
    boundary = package._traceback.api_boundary(lambda: None)
    return Facts(version=version, package=package, state=package._state, traceback=package._traceback,
                 checker=package._checker, types=package.types, mesh_axis=package._mesh_axis,
                 mode_type=package._checker._SpmdTypeMode, error_type=package.SpmdTypeError,
                 boundary_code=boundary.__code__, functions=functions,
                 no_typecheck_codes=getattr(package._state, "_NO_TYPECHECK_CODES", None))


# name -> ``callback(facts)``, called once the program has imported
# spmd_types: what can only be declared or changed with its classes.
ON_LOADED: dict[str, Callable[[Facts], None]] = {}
_LOADED: list[Facts] = []


def on_loaded(name: str, callback: Callable[[Facts], None]) -> None:
    """Call ``callback(facts)`` once the program has imported spmd_types
    (now, if it has)."""
    ON_LOADED[name] = callback
    if _LOADED:
        callback(_LOADED[0])


def runtime_only_call_trees(f: Facts) -> tuple:
    """spmd_types' functions that run only eagerly, never as compiled frames,
    nor anything they call: the checker's ``__torch_function__`` (run at a
    graph break, or where a frame runs eagerly, under the checker)."""
    return (f.mode_type.__torch_function__,)


def facts() -> Facts | None:
    """The installed spmd_types' facts, or None while the program has not
    imported it (then nothing of it can reach a compiled frame)."""
    if _LOADED:
        return _LOADED[0]
    module = sys.modules.get(PACKAGE)
    if module is None or getattr(getattr(module, "__spec__", None), "_initializing", False):
        return None  # not imported, or still importing
    found = _read_facts()
    _LOADED.append(found)
    for callback in list(ON_LOADED.values()):
        callback(found)
    return found


def version() -> str | None:
    f = facts()
    return f.version if f is not None else None


# -- objects --------------------------------------------------------------------

def is_checker_class(cls: type) -> bool:
    """``cls`` is the checker's TorchFunctionMode class (or a subclass)."""
    f = facts()
    return f is not None and isinstance(cls, type) and issubclass(cls, f.mode_type)


def functions() -> dict[Any, str]:
    """The public spmd_types functions the plugin treats, object -> name."""
    f = facts()
    return {} if f is None else _functions_of(f)


@functools.cache
def _functions_of(f: Facts) -> dict[Any, str]:
    return {fn: name for name, fn in f.functions.items()}


def unwrapped(fn: Any) -> Any:
    """The function an ``api_boundary`` wrapper calls, or ``fn``."""
    f = facts()
    code = getattr(fn, "__code__", None)
    if f is not None and code is f.boundary_code and hasattr(fn, "__wrapped__"):
        return fn.__wrapped__
    return fn


def is_type_error(e: BaseException) -> bool:
    f = facts()
    return f is not None and isinstance(e, f.error_type)


def autograd_apply_class(func: Any) -> type | None:
    """The ``autograd.Function`` subclass ``func`` is the bound ``apply`` of
    (the checker asks the same: ``_get_autograd_function_class``), or None."""
    f = facts()
    return None if f is None else f.checker._get_autograd_function_class(func)


def bound_apply(cls: type) -> Any:
    """``cls.apply`` as eager's checker receives it: ``Function``'s own
    ``apply`` bound to ``cls`` (the checker's descriptor, installed while a
    checker is current, hands the program a wrapper that dispatches it)."""
    apply = torch.autograd.Function.__dict__["apply"]
    return getattr(apply, "_orig", apply).__get__(None, cls)


def is_apply_descriptor(value: Any) -> bool:
    """Whether ``value`` is the checker's ``autograd.Function.apply``
    descriptor (installed while a checker is current)."""
    f = facts()
    return f is not None and isinstance(value, f.checker._AutogradApplyDescriptor)


# -- the thread's state ----------------------------------------------------------

@dataclass(frozen=True)
class State:
    """spmd_types' state that its functions read on this thread: the current
    checker (None: none) with its switches, and the mesh stack (a tuple of
    immutable ``MeshEntry``; None: never pushed on this thread)."""

    mode: Any
    strict: bool
    local: bool
    disabled: bool
    mesh_stack: tuple | None

    @property
    def checking(self) -> bool:
        """A checker is current and not paused (``is_type_checking`` without
        0.3.1's frames)."""
        return self.mode is not None and not self.disabled

    def top_entry(self) -> Any:
        return self.mesh_stack[-1] if self.mesh_stack else None


def capture() -> State:
    """The state of this thread now."""
    f = facts()
    if f is None:
        return State(None, False, False, False, None)
    tls = f.state._tls
    mode = getattr(tls, "current_mode", None)
    stack = getattr(tls, "mesh_stack", None)
    return State(mode=mode, strict=bool(mode._strict) if mode is not None else False,
                 local=bool(mode._local) if mode is not None else False,
                 disabled=bool(mode._disabled) if mode is not None else False,
                 mesh_stack=tuple(stack) if stack is not None else None)


@contextlib.contextmanager
def installed(state: State) -> Iterator[list]:
    """Run spmd_types' own code on ``state`` (the trace-time state of a
    frame): it is put in this thread's place for the block, and the real
    one back after. Yields a list that holds, after the block, the state the
    code left."""
    f = facts()
    tls = f.state._tls
    real = capture()
    absent = object()
    real_stack = getattr(tls, "mesh_stack", absent)
    real_mode = getattr(tls, "current_mode", absent)
    left: list = []
    _put(tls, state)
    try:
        yield left
    finally:
        left.append(capture())
        if real_mode is absent:
            tls.__dict__.pop("current_mode", None)
        else:
            tls.current_mode = real_mode
        if real.mode is not None:
            real.mode._strict, real.mode._local, real.mode._disabled = real.strict, real.local, real.disabled
        if real_stack is absent:
            tls.__dict__.pop("mesh_stack", None)
        else:
            tls.mesh_stack = real_stack


def _put(tls: Any, state: State) -> None:
    tls.current_mode = state.mode
    if state.mode is not None:
        state.mode._strict, state.mode._local, state.mode._disabled = state.strict, state.local, state.disabled
    if state.mesh_stack is None:
        tls.__dict__.pop("mesh_stack", None)
    else:
        tls.mesh_stack = list(state.mesh_stack)


def switches(mode: Any) -> tuple[bool, bool, bool]:
    """A checker's switches: (strict, local, paused)."""
    return (bool(mode._strict), bool(mode._local), bool(mode._disabled))


def entry_fields(entry: Any) -> tuple:
    """A mesh entry's fields: (axes, local axes, names, every name, groups)."""
    return (entry.axes, entry.local_axes, entry.names, entry.all_names, entry.pgs)


def pause_checker_while(fn: Callable[..., Any]) -> Callable[..., Any]:
    """``fn`` run with the checker off the torch-function mode stack (a
    compiled graph: the checker ran on its values while it was traced)."""
    f = facts()
    mode_type = f.mode_type

    def run_unchecked(*args: Any, **kwargs: Any) -> Any:
        depth = torch._C._len_torch_function_stack()
        if depth == 0 or type(torch._C._get_function_stack_at(depth - 1)) is not mode_type:
            return fn(*args, **kwargs)
        mode = torch._C._pop_torch_function_stack()
        try:
            return fn(*args, **kwargs)
        finally:
            torch._C._push_on_torch_function_stack(mode)

    run_unchecked.__wrapped__ = fn  # type: ignore[attr-defined]
    return run_unchecked


# -- 0.3.1's frames that pause the checker ---------------------------------------

def no_typecheck_codes() -> frozenset:
    """The code objects ``register_no_typecheck`` registered (0.3.1; empty
    on 0.2.3)."""
    f = facts()
    codes = f.no_typecheck_codes if f is not None else None
    return frozenset(codes) if codes else frozenset()


def callers_pause_checking() -> bool:
    """A registered no-typecheck function is on this thread's stack now,
    below the caller (0.3.1; False on 0.2.3)."""
    f = facts()
    if f is None or not f.no_typecheck_codes:
        return False
    return bool(f.state._in_no_typecheck_frame())


# -- types and axes as plain data (what a saved guard holds) ---------------------
# A MeshAxis is a layout of ranks (``axis.layout``: shape and stride tuples;
# equal layouts are equal axes); a local type maps axes to the enum
# ``PerMeshAxisLocalSpmdType`` (R, I, V, P by value); a PartitionSpec is a
# tuple subclass of entries (None, an axis, a tuple of axes) whose pickle
# loses its entries (``__new__`` takes them spread out).

def axis_data(axis: Any) -> Any:
    if isinstance(axis, str):
        return ("name", axis)
    return (tuple(axis.layout.shape), tuple(axis.layout.stride))


@functools.lru_cache(maxsize=None)
def axis_from_data(data: Any) -> Any:
    if data[0] == "name":
        return data[1]
    module = _read_facts().mesh_axis
    return module.MeshAxis(module._make_axis_layout(data[0], data[1]))


def local_type_data(local_type: Any) -> Any:
    if local_type is None:
        return None
    return tuple(sorted((axis_data(a), t.value) for a, t in local_type.items()))


def local_type_from_data(data: Any) -> Any:
    if data is None:
        return None
    enum = _read_facts().types.PerMeshAxisLocalSpmdType
    return {axis_from_data(a): enum(t) for a, t in data}


def partition_spec_data(spec: Any) -> Any:
    if spec is None:
        return None
    return tuple(None if e is None else ("many", tuple(axis_data(a) for a in e)) if isinstance(e, tuple)
                 else ("one", axis_data(e)) for e in spec)


def partition_spec_from_data(data: Any) -> Any:
    if data is None:
        return None
    def entry(e: Any) -> Any:
        if e is None:
            return None
        return tuple(axis_from_data(a) for a in e[1]) if e[0] == "many" else axis_from_data(e[1])

    return _read_facts().types.PartitionSpec(*(entry(e) for e in data))


def mode_and_top_entry() -> tuple[Any, Any]:
    """(the current checker or None, the top mesh entry or None), read
    directly (what a guard reads on every call)."""
    tls = _read_facts().state._tls
    stack = getattr(tls, "mesh_stack", None)
    return getattr(tls, "current_mode", None), (stack[-1] if stack else None)


def value_classes() -> tuple[type, ...]:
    """spmd_types' immutable values a frame may build or return (an axis, a
    PartitionSpec), which Dynamo cannot build itself."""
    f = _read_facts()
    return (f.mesh_axis.MeshAxis, f.types.PartitionSpec)


def value_data(value: Any) -> tuple:
    """One of ``value_classes()`` as plain data (what bytecode rebuilds it from)."""
    if isinstance(value, _read_facts().types.PartitionSpec):
        return ("spec", partition_spec_data(value))
    return ("axis", axis_data(value))


def value_from_data(data: tuple) -> Any:
    return partition_spec_from_data(data[1]) if data[0] == "spec" else axis_from_data(data[1])


# -- types as the user reads them (explain) ---------------------------------------

def package_dir() -> str | None:
    """The directory of the spmd_types the program imported (with a trailing
    separator), or None while it has not imported it."""
    file = getattr(sys.modules.get(PACKAGE), "__file__", None)
    return os.path.dirname(os.path.abspath(file)) + os.sep if file else None


def tensor_types(tensor: Any) -> tuple[Any, Any]:
    """A real tensor's (local type, PartitionSpec) as the checker reads them
    (None where absent)."""
    attrs = getattr(tensor, "__dict__", {})
    return attrs.get(LOCAL_TYPE_ATTR), attrs.get(PARTITION_SPEC_ATTR)


def axis_names(state: State) -> dict[Any, str]:
    """Each axis of the current mesh (``state``'s top entry) -> its name."""
    entry = state.top_entry()
    return {} if entry is None else {axis: name for name, axis in entry.names.items()}


def group_axis_names(state: State) -> dict[str, str]:
    """The group name of each axis of the current mesh -> the axis's name."""
    entry = state.top_entry()
    if entry is None:
        return {}
    names = axis_names(state)
    return {pg.group_name: names[axis] for axis, pg in entry.pgs.items()
            if axis in names and getattr(pg, "group_name", None)}


def _axis_text(axis: Any, names: dict[Any, str]) -> str:
    return names.get(axis) or _read_facts().types.format_axis(axis)


def per_axis_types(local_type: Any, spec: Any, names: dict[Any, str]) -> dict[str, str]:
    """axis name -> its type on that axis: ``S(d)`` where the PartitionSpec
    shards dim d on it (spmd_types' own ``partition_spec_get_shard``), else
    the local type (R, I, V, P)."""
    types = _read_facts().types
    axes = list(local_type or {})
    for entry in spec or ():
        for axis in (entry if isinstance(entry, tuple) else (entry,)):
            if axis is not None and axis not in axes:
                axes.append(axis)
    found = {}
    for axis in axes:
        shard = types.partition_spec_get_shard(spec, axis) if spec is not None else None
        found[_axis_text(axis, names)] = str(shard) if shard is not None else local_type[axis].name
    return found


def spec_text(spec: Any, names: dict[Any, str]) -> str:
    """A PartitionSpec with its axes by name: ``(None, tp)``; "" for none."""
    if spec is None:
        return ""
    def entry(e: Any) -> str:
        if e is None:
            return "None"
        if isinstance(e, tuple):
            return "(" + ", ".join(_axis_text(a, names) for a in e) + ")"
        return _axis_text(e, names)

    return "(" + ", ".join(entry(e) for e in spec) + ("," if len(spec) == 1 else "") + ")"
