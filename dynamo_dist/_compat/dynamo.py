"""Dynamo's tracer, trackers, codegen and guards, as small named functions.

Everything dynamo_dist does *with* Dynamo (build a stock tracker, emit
bytecode, install a guard, keep per-frame state, add a graph node) goes
through a function here, so a torch release that moves these internals is a
change to this module only.
"""

from __future__ import annotations

import dis

import inspect
import typing
from typing import Any, Callable

import torch._dynamo
from torch._dynamo.bytecode_transformation import create_call_function
from torch._dynamo.exc import Unsupported, raise_observed_exception, unimplemented  # noqa: F401 (re-exported)
from torch._dynamo.exc import PackageError
from torch._dynamo.guards import CheckFunctionManager, GuardBuilder, get_verbose_code_parts, install_guard
from torch._dynamo.source import AttrSource
from torch._dynamo.symbolic_convert import InstructionTranslator, InstructionTranslatorBase
from torch._dynamo.types import FrameAction, FrameExecStrategy
from torch._dynamo.variables.base import ValueMutationNew, VariableTracker
from torch._dynamo.variables.builder import SourcelessBuilder, VariableBuilder, wrap_fx_proxy
from torch._dynamo.variables.builtin import BuiltinVariable
from torch._dynamo.variables.constant import ConstantVariable
from torch._dynamo.variables.functions import UserFunctionVariable, UserMethodVariable
from torch._dynamo.variables.lists import BaseListVariable, ListVariable, TupleVariable
from torch._dynamo.variables.misc import GetAttrVariable
from torch._dynamo.variables.tensor import TensorVariable
from torch._guards import CompileContext

try:  # 2.13+: what get_real_python_backed_value answers for "no object"
    from torch._dynamo.variables.base import NO_SUCH_SUBOBJ as _NO_SUCH_SUBOBJ
except ImportError:  # pragma: no cover - 2.11 / 2.12
    _NO_SUCH_SUBOBJ = object()
NO_KNOWN_VALUE = object()

# Where Dynamo decides ``a is b`` for two trackers (2.12+): the module globals
# named ``vt_identity_compare`` that its handlers call (2.12 imports it from
# ``object_protocol`` at each call, 2.13+ also bind it in ``builtin``). 2.11
# has none: ``is`` reaches ``BuiltinVariable.call_is_`` (``slots.BUILTIN_HOOKS``).
from torch._dynamo.variables import builtin as _builtin_module  # noqa: E402

try:
    from torch._dynamo.variables import object_protocol as _object_protocol  # noqa: E402
except ImportError:  # pragma: no cover - 2.11
    _object_protocol = None
IDENTITY_HOOK_POINTS: tuple[Any, ...] = tuple(
    m for m in (_object_protocol, _builtin_module) if m is not None and hasattr(m, "vt_identity_compare"))

# After torch._dynamo (importing it first is a circular import inside torch).
from torch._functorch._aot_autograd import runtime_wrappers as aot_runtime_wrappers  # noqa: E402

# 2.11's AOTAutograd runtime describes every DTensor argument for its log
# (``typing.cast``, ``device_mesh``...), also when the log is off, and casts
# its arguments with ``typing.cast`` (an identity that 2.11's Dynamo does not
# skip): no frames.
AOT_RUNTIME_CALL_TREES: tuple = tuple(
    f for f in (getattr(aot_runtime_wrappers, "_describe_arg_for_logging", None), typing.cast)
    if f is not None)

try:  # 2.12+: AOTAutograd generates its subclass wrap / unwrap functions
    from torch._functorch._aot_autograd import subclass_codegen as _aot_subclass_codegen  # noqa: E402
except ImportError:  # pragma: no cover - 2.11
    _aot_subclass_codegen = None

# (module, attribute) of the function AOTAutograd generates runtime code with, or None.
AOT_CODEGEN_HOOK_POINT: tuple[Any, str] | None = (
    (_aot_subclass_codegen, "_compile_and_exec_source")
    if hasattr(_aot_subclass_codegen, "_compile_and_exec_source") else None)

# 2.11's Dynamo traces ``dtensor.to_local()`` as a call of a closure it builds
# (``method_to_local``), which the AOTAutograd cache refuses; 2.12+ trace it
# as a plain method call.
STOCK_TO_LOCAL_IS_CLOSURE: bool = hasattr(TensorVariable, "method_to_local")

__all__ = [
    "aot_runtime_wrappers", "BuiltinVariable", "SourcelessBuilder", "TensorVariable", "VariableBuilder",
    "VariableTracker",
]

dynamo_disable = torch._dynamo.disable


def reset() -> None:
    """Drop compiled code and guards (``torch._dynamo.reset``)."""
    torch._dynamo.reset()


# -- the tracer ---------------------------------------------------------------

def current_tx() -> Any:
    return InstructionTranslator.current_tx()


def frame_state(tx: Any, key: str) -> dict:
    """A dict that lives as long as the frame being traced (its output graph)."""
    return tx.output.__dict__.setdefault(f"_dynamo_dist_{key}", {})


def opcode_tables() -> list[tuple[type, list]]:
    """Every tracer class with a ``dispatch_table`` of its own (opcode ->
    handler, built once when the class is made: patching the opcode method
    alone changes nothing), with a copy of its table."""
    found, todo = [], [InstructionTranslatorBase]
    while todo:
        cls = todo.pop()
        todo.extend(cls.__subclasses__())
        if "dispatch_table" in cls.__dict__:
            found.append((cls, list(cls.__dict__["dispatch_table"])))
    return found


def opcode_number(name: str) -> int | None:
    """The opcode called ``name`` in this Python, or None."""
    return dis.opmap.get(name)


def stack_top(tx: Any) -> Any:
    return tx.stack[-1] if tx.stack else None


def take_jump(tx: Any, inst: Any, jump_when: bool, truth: bool, keep: bool) -> None:
    """A conditional jump on the tracker at the top of the stack, whose truth
    is ``truth``: pop it, and when ``truth == jump_when`` jump (keeping it on
    the stack if ``keep``), as the tracer does for a constant."""
    value = tx.pop()
    if truth == jump_when:
        if keep:
            tx.push(value)
        tx.jump(inst)


def tracer_state(tx: Any, key: str) -> dict:
    """A dict that lives as long as the graph being traced now: the frame's
    graph, or the subgraph of a higher-order op (an ``autograd.Function``'s
    forward or backward, a checkpointed region). A value made by a graph op
    belongs there: another subgraph reaches it only through its parents."""
    tracer = tx.output.current_tracer
    return tracer.__dict__.setdefault(f"_dynamo_dist_{key}", {})


def break_graph(gb_type: str, context: str, explanation: str, hints: list[str]) -> Any:
    unimplemented(gb_type=gb_type, context=context, explanation=explanation, hints=hints)


def raise_observed(exc_type: type, tx: Any, args: list) -> Any:
    """Raise ``exc_type(*args)`` inside the traced program, as eager would."""
    raise_observed_exception(exc_type, tx, args=args)


def graph_call(tx: Any, op: Callable[..., Any], tensors: list, constants: tuple = ()) -> VariableTracker:
    """``op(*constants, *tensors)`` as one call_function node; Dynamo runs
    ``op`` on fake tensors for the example value."""
    proxy = tx.output.create_proxy("call_function", op, (*constants, *(t.as_proxy() for t in tensors)), {})
    # Some redistributions (``_StridedShard``) compute an index tensor whose
    # size is data-dependent on fake tensors, then return a static shape: the
    # intermediate unbacked sizes never reach the output.
    with tx.output.fake_mode.shape_env.ignore_fresh_unbacked_symbols():
        return wrap_fx_proxy(tx, proxy)


def example_value(vt: VariableTracker) -> Any:
    """The fake value a tensor tracker's graph node computes (None if unknown)."""
    return vt.proxy.node.meta.get("example_value")


# -- trackers -----------------------------------------------------------------

def is_tracker(x: Any) -> bool:
    return isinstance(x, VariableTracker)


def is_tensor(vt: Any) -> bool:
    return isinstance(vt, TensorVariable)


def known_value(vt: VariableTracker) -> Any:
    """The Python object ``vt`` stands for at trace time (a class, a
    constant, a tracked object), else ``NO_KNOWN_VALUE``. 2.13+ trackers say it
    themselves (``get_real_python_backed_value``, which 2.12 leaves to a few
    trackers); others as a constant."""
    real = getattr(vt, "get_real_python_backed_value", None)
    value = real() if real is not None else _NO_SUCH_SUBOBJ
    if value is not _NO_SUCH_SUBOBJ:
        return value
    try:
        return vt.as_python_constant()
    except NotImplementedError:
        return NO_KNOWN_VALUE


def list_items(vt: Any) -> list | None:
    """The items of a list/tuple tracker, else None."""
    return vt.items if isinstance(vt, BaseListVariable) else None


def is_literal(value: Any) -> bool:
    return ConstantVariable.is_literal(value)


def constant(value: Any) -> VariableTracker:
    return ConstantVariable.create(value)


def make_tuple(items: list) -> VariableTracker:
    return TupleVariable(items)


def make_list(items: list) -> VariableTracker:
    return ListVariable(items, mutation_type=ValueMutationNew())


def skip_top_level_frames(fn: Callable[..., Any]) -> None:
    """Dynamo never compiles a frame of ``fn`` when it is called from running
    code; tracing still inlines it as before (the skip is per code object,
    read by the frame callback only)."""
    torch._dynamo.eval_frame.skip_code(fn.__code__)


def skip_frames_recursively(fn: Callable[..., Any]) -> None:
    """Dynamo never compiles a frame of ``fn`` called from running code, nor
    any frame ``fn`` calls in turn; tracing still inlines it as before."""
    torch._C._dynamo.eval_frame.set_code_exec_strategy(
        fn.__code__, FrameExecStrategy(FrameAction.SKIP, FrameAction.SKIP))


def unskip_top_level_frames(fn: Callable[..., Any]) -> None:
    """Undo ``skip_top_level_frames`` (clears the code object's Dynamo state)."""
    torch._C._dynamo.eval_frame.reset_code(fn.__code__)


def as_list(tx: Any, vt: VariableTracker) -> VariableTracker:
    """``list(vt)`` as Dynamo traces it: a user class's ``__iter__`` is
    inlined, so each item keeps its source and guards. May raise Unsupported."""
    return SourcelessBuilder.create(tx, list).call_function(tx, [vt], {})


def method_of(vt: VariableTracker, name: str, py_type: type | None = None) -> VariableTracker:
    """``vt.name`` as a bound-method tracker, called later through ``vt.call_method``."""
    return GetAttrVariable(vt, name, py_type=py_type)


# 2.13 / 2.14: ``UserMethodVariable(fn, obj)`` (a plain function);
# 2.15: ``UserMethodVariable(im_func, im_self)`` with a function tracker.
_METHOD_TAKES_TRACKER = "im_func" in inspect.signature(UserMethodVariable.__init__).parameters


def user_method(fn: Callable[..., Any], vt: VariableTracker) -> VariableTracker:
    """``vt.fn`` as Dynamo's bound-method tracker."""
    if _METHOD_TAKES_TRACKER:
        return UserMethodVariable(UserFunctionVariable(fn), vt)
    return UserMethodVariable(fn, vt)


def inline_call(tx: Any, fn: Callable[..., Any], args: list, kwargs: dict) -> VariableTracker:
    """Trace a call of the Python function ``fn`` (its body is inlined)."""
    return UserFunctionVariable(fn).call_function(tx, args, kwargs)


def wrap_sourced(tx: Any, source: Any, value: Any) -> VariableTracker:
    """The tracker (ours if hooked) for ``value`` read from ``source``."""
    return VariableBuilder(tx, source)(value)


def attr_source(source: Any, name: str) -> Any:
    return AttrSource(source, name)


# -- codegen ------------------------------------------------------------------

def emit_import(codegen: Any, module: str, name: str) -> None:
    """Bytecode that loads ``module.name``."""
    codegen.load_import_from(module, name)


def emit_call_import(codegen: Any, module: str, name: str, args: tuple = (), kwargs: dict | None = None) -> None:
    """Bytecode for ``module.name(*args, **kwargs)``: an argument that is a
    tracker is reconstructed, anything else is a constant."""
    kwargs = kwargs or {}
    codegen.add_push_null(lambda: codegen.load_import_from(module, name))
    for a in (*args, *kwargs.values()):
        if isinstance(a, VariableTracker):
            codegen(a)
        else:
            codegen.extend_output([codegen.create_load_const(a)])
    if kwargs:
        codegen.extend_output(codegen.create_call_function_kw(len(args) + len(kwargs), tuple(kwargs), False))
    else:
        codegen.extend_output(create_call_function(len(args), False))


# -- guards -------------------------------------------------------------------

def guard_identity(source: Any) -> None:
    """The object at ``source`` is the same object: C++ ``ID_MATCH``, or,
    under ``caching_precompile`` (which drops every ``ID_MATCH`` from the
    live guards), a Python identity check of the plugin's own that it keeps."""
    if precompile_caching():
        install_guard(source.make_guard(DYNAMO_DIST_ID_MATCH))
    else:
        install_guard(source.make_guard(GuardBuilder.ID_MATCH))


def DYNAMO_DIST_ID_MATCH(builder: Any, guard: Any) -> None:
    """``guard_identity``'s guard under ``caching_precompile``: ``v is`` the
    compile-time object (held, so its id cannot be reused)."""
    value = builder.get(guard)
    code = f"{guard.name} is the object this frame was compiled for ({type(value).__name__} at {id(value):#x})"
    builder.get_guard_manager(guard).add_lambda_guard(
        lambda v, _compiled_for=value: v is _compiled_for, get_verbose_code_parts(code, guard), guard.user_stack
    )


def guard_type(source: Any) -> None:
    """C++ ``TYPE_MATCH``: the object at ``source`` has the same exact type."""
    install_guard(source.make_guard(GuardBuilder.TYPE_MATCH))


def guard_attr_equals(source: Any, name: str) -> None:
    """C++ ``EQUALS_MATCH`` on ``source.name``."""
    install_guard(AttrSource(source, name).make_guard(GuardBuilder.EQUALS_MATCH))


def guard_same_object(source_a: Any, source_b: Any, same: bool) -> None:
    """The objects at two sources are (``same``) or are not the same object:
    a relation no single-source guard can state (Dynamo's own
    ``DUPLICATE_INPUT`` states only ``is``), checked after the others."""

    def DYNAMO_DIST_SAME_OBJECT(builder: Any, guard: Any) -> None:
        code = f"{builder.arg_ref(guard)} {'is' if same else 'is not'} {builder.arg_ref(source_b.name)}"
        builder.add_python_lambda_leaf_guard_to_root([code], get_verbose_code_parts(code, guard))

    install_guard(source_a.make_guard(DYNAMO_DIST_SAME_OBJECT))


def predicate_guard(make_check: Callable[[Any], Callable[[Any], bool]],
                    describe: Callable[[str, Any], str]) -> Callable[[Any, Any], None]:
    """A guard-building function (what ``source.make_guard`` takes): at guard
    build time ``make_check(value_at_compile_time)`` returns the per-call
    check, and ``describe(source_name, value)`` the recompile reason shown
    when it fails."""

    def DYNAMO_DIST_MATCH(builder: Any, guard: Any) -> None:
        value = builder.get(guard)
        builder.get_guard_manager(guard).add_lambda_guard(
            make_check(value), get_verbose_code_parts(describe(guard.name, value), guard), guard.user_stack
        )

    return DYNAMO_DIST_MATCH


def guard_predicate(source: Any, make_check: Callable[[Any], Callable[[Any], bool]], describe: str) -> None:
    """A Python predicate guard on ``source``: ``make_check(value_at_compile_time)``
    returns the per-call check; ``describe`` is shown as the recompile reason."""
    install_guard(source.make_guard(predicate_guard(make_check, lambda name, value: describe)))


# Stock's guard on a DTensor input's spec (``x._spec``), which ``_hooks``
# replaces while installed (``guards.dtensor``).
DTENSOR_SPEC_GUARD_POINT: tuple[Any, str] = (GuardBuilder, "DTENSOR_SPEC_MATCH")


def guard_build_hook(source: Any, name: str, hook: Callable[[str, Any], None]) -> None:
    """A guard that checks nothing: while Dynamo builds guards it calls
    ``hook(source_name, value_at_compile_time)`` (Dynamo sorts and prints
    guards by ``name``). A source Dynamo cannot evaluate is skipped."""

    def build(builder: Any, guard: Any) -> None:
        try:
            value = builder.get(guard)
        except Exception:
            return
        hook(guard.name, value)

    build.__name__ = build.__qualname__ = name
    install_guard(source.make_guard(build))


# -- torch's precompile -------------------------------------------------------
# ``caching_precompile`` and ``aot_compile`` save a frame's guards as their
# builder functions plus the values they read, and rebuild them on load. The
# plugin's guards are closures over compile-time facts (a mesh fingerprint, a
# group object, a DTensor spec) that torch cannot pickle by name: saved, they
# come back as torch's ``_Missing`` and fail on load. So the frame is declined
# where torch serializes its guards: a package bypass (logged with the reason;
# the frame is traced again after a restart, its FX and AOTAutograd entries
# still hit), or torch's ``PackageError`` under ``strict_precompile``. The
# bypass is made here rather than by raising ``PackageError`` for torch to
# turn into one: 2.11-2.14 then fail on the missing guard state.
GUARD_SERIALIZATION_POINT: tuple[Any, str] = (CheckFunctionManager, "serialize_guards")
PLUGIN_GUARDS_NOT_SAVED = (
    "dynamo_dist: this frame's guards on {names} (a DeviceMesh, ProcessGroup, placement or DTensor spec) cannot "
    "be saved by torch's precompile yet, so the frame is not packaged: with TORCH_CACHING_PRECOMPILE=1 it is "
    "traced again after a restart (its FX graph and AOTAutograd entries still load from the compile caches)"
)
AOT_COMPILE_REFUSED = (
    "dynamo_dist: aot_compile cannot save this function: its guards on {names} (a DeviceMesh, ProcessGroup, "
    "placement or DTensor spec) cannot be serialized yet. Compile it with torch.compile instead (a restart "
    "loads its FX graph and AOTAutograd entries from the compile caches)"
)


def precompile_caching() -> bool:
    """``torch._dynamo.config.caching_precompile`` (``TORCH_CACHING_PRECOMPILE=1``)."""
    return bool(getattr(torch._dynamo.config, "caching_precompile", False))


def plugin_guard_builder(create_fn: Any) -> bool:
    """A guard built by a function of this package (or a partial of one)."""
    fn = getattr(create_fn, "func", create_fn)
    return (getattr(fn, "__module__", None) or "").split(".")[0] == __name__.split(".")[0]


def refuse_plugin_guards(original: Callable[..., Any]) -> Callable[..., Any]:
    """``CheckFunctionManager.serialize_guards`` that declines the package of
    a frame with a guard of the plugin's."""

    def serialize_guards(self: Any, builder: Any, sorted_guards: Any, output_graph: Any) -> Any:
        ours = sorted({g.name for g in sorted_guards if plugin_guard_builder(g.create_fn)})
        if not ours:
            return original(self, builder, sorted_guards, output_graph)
        names = ", ".join(ours[:3]) + (f" and {len(ours) - 3} more" if len(ours) > 3 else "")
        reason = PLUGIN_GUARDS_NOT_SAVED.format(names=names)
        if getattr(output_graph, "package", None) is None:  # aot_compile: there is no package to bypass
            raise PackageError(AOT_COMPILE_REFUSED.format(names=names))
        if torch._dynamo.config.strict_precompile:
            raise PackageError(reason)
        output_graph.bypass_package(reason)
        return b""  # never stored: the entry is bypassed

    return serialize_guards


def default_group_source(tx: Any) -> Any:
    """The source of the default (WORLD) process group."""
    module = tx.import_source("torch.distributed.distributed_c10d")
    return AttrSource(AttrSource(module, "GroupMember"), "WORLD")


def current_compile_id() -> str:
    return str(CompileContext.current_compile_id())
