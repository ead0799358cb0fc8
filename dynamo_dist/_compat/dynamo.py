"""Dynamo's tracer, trackers, codegen and guards, as small named functions.

Everything dynamo_dist does *with* Dynamo (build a stock tracker, emit
bytecode, install a guard, keep per-frame state, add a graph node) goes
through a function here, so a torch release that moves these internals is a
change to this module only.
"""

from __future__ import annotations

import contextlib
import copyreg
import dataclasses
import dis
import functools
import inspect
import logging
import operator
import re
import types
import typing
from typing import Any, Callable

import torch._dynamo
from torch._dispatch.python import enable_python_dispatcher as _enable_python_dispatcher
from torch._dynamo.bytecode_transformation import create_call_function
from torch._dynamo.exc import Unsupported, raise_observed_exception, unimplemented  # noqa: F401 (re-exported)
from torch._dynamo.exc import PackageError
from torch._C._dynamo.guards import DictGuardManager as _DictGuardManager
from torch._dynamo.guards import CheckFunctionManager, GuardBuilder, get_verbose_code_parts, install_guard
from torch._dynamo.source import AttrSource, GetItemSource, GlobalStateSource, ListGetItemSource
from torch._dynamo.symbolic_convert import InstructionTranslator, InstructionTranslatorBase
from torch._dynamo.types import FrameAction, FrameExecStrategy
from torch._dynamo.variables.base import ValueMutationNew, VariableTracker
from torch._dynamo.variables.builder import SourcelessBuilder, VariableBuilder, wrap_fx_proxy
from torch._dynamo.variables.builtin import BuiltinVariable
from torch._dynamo.variables.constant import ConstantVariable
from torch._dynamo.variables.functions import UserFunctionVariable, UserMethodVariable
from torch._dynamo.variables.higher_order_ops import AutogradFunctionApplyVariable
from torch._dynamo.variables.lists import BaseListVariable, ListVariable, TupleVariable
from torch._dynamo.variables.misc import GetAttrVariable
from torch._dynamo.variables.tensor import TensorVariable
from torch._dynamo.variables.user_defined import UserDefinedObjectVariable
from torch._guards import CompileContext
from torch._higher_order_ops.wrap import tag_activation_checkpoint as _tag_activation_checkpoint
from torch.utils._config_module import _UNSET_SENTINEL

from .distributed import MESH_CONSTRUCTION_FUNCTIONS

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

# Functions skipped as frames together with every frame they call while
# installed (``_hooks``): runtime code that a compiled function's graph break
# or ``.backward()`` runs with Dynamo's callback live.
RUNTIME_ONLY_CALL_TREES: tuple = (*MESH_CONSTRUCTION_FUNCTIONS, *AOT_RUNTIME_CALL_TREES)

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


def tracing_tx() -> Any:
    """The tracer of the frame being traced now, or None outside tracing."""
    try:
        return InstructionTranslator.current_tx()
    except (AttributeError, IndexError):
        return None


def frame_state(tx: Any, key: str) -> dict:
    """A dict that lives as long as the frame being traced (its output graph)."""
    return tx.output.__dict__.setdefault(f"_dynamo_dist_{key}", {})


def scope_state(tx: Any, key: str) -> dict:
    """A dict of the graph being traced now: the frame's, or a subgraph's
    (a higher-order operator's body, whose inputs share the outer tensors'
    fake values)."""
    return tx.output.current_tracer.__dict__.setdefault(f"_dynamo_dist_{key}", {})


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


def graph_state_call(tx: Any, fn: Callable[..., Any], *args: Any) -> Any:
    """``fn(*args)`` as a call_function node on global state (its arguments
    constants or such nodes), returned: a switch the graph's later calls are
    traced under (AOTAutograd replays the graph, node by node, when it traces
    it), as Dynamo records ``torch._C._set_grad_enabled``."""
    return tx.output.create_node("call_function", fn, args, {})


def run_on_fakes(tx: Any, op: Callable[..., Any], *values: Any) -> Any:
    """``op(*values)`` on the trace's fake tensors, outside the graph: what it
    computes is dropped, what it asks of sizes stays (the guards the shape
    environment adds as it answers)."""
    fake_mode = tx.output.fake_mode
    # As Dynamo runs a node for its example value (``get_fake_value``).
    with fake_mode, _enable_python_dispatcher(), fake_mode.shape_env.ignore_fresh_unbacked_symbols():
        return op(*values)


def has_symbolic_size(value: Any) -> bool:
    """Whether a (fake) tensor's shape holds a size that is not a constant."""
    return any(isinstance(n, torch.SymInt) and not n.node.expr.is_number for n in value.shape)


def graph_mark(tx: Any) -> tuple[Any, frozenset]:
    """The graph being traced now (the frame's, or a higher-order op's
    subgraph) and the nodes it has: ``nodes_since`` tells what was added."""
    graph = tx.output.current_tracer.graph
    return graph, frozenset(graph.nodes)


def nodes_since(tx: Any, mark: tuple[Any, frozenset]) -> tuple[Any, list]:
    """The graph of ``mark`` and the operations added to it since, in order
    (graph inputs Dynamo lifted meanwhile excluded)."""
    graph, before = mark
    return graph, [n for n in graph.nodes if n not in before and n.op in ("call_function", "call_method")]


def move_to_end(tx: Any, graph: Any, nodes: list) -> bool:
    """Move ``nodes`` (of ``graph``, in order) to the end of the graph being
    traced now, where the next operation goes; nothing if that is another
    graph or a node was erased. Moving an operation later is sound when
    nothing between uses it. Whether they moved."""
    if graph is not tx.output.current_tracer.graph or any(getattr(n, "_erased", False) for n in nodes):
        return False
    for node in nodes:
        last = next(iter(reversed(graph.nodes)))
        if last is not node:
            last.append(node)
    return True


# torch 2.11 loses an autograd.Function's gradient (silently: zeros) when the
# forward it traces as a subgraph returns a tensor it changed in place (any
# in-place op; stock alike; 2.12 traces it right).
INPLACE_IN_FUNCTION_FORWARD_LOSES_GRAD: bool = tuple(
    int(p) for p in torch.__version__.split("+")[0].split(".")[:2]) < (2, 12)
_FUNCTION_HOP = getattr(AutogradFunctionApplyVariable, "_HOP_NAME", "autograd.Function")


def in_autograd_function_forward(tx: Any) -> bool:
    """Whether Dynamo is tracing the forward of an ``autograd.Function``
    (its subgraph; the backward's tracer is a child of the forward's)."""
    tracer = tx.output.current_tracer
    parent = getattr(tracer, "parent", None)
    return getattr(tracer, "source_target", None) == _FUNCTION_HOP and \
        getattr(parent, "source_target", None) != _FUNCTION_HOP


def example_value(vt: VariableTracker) -> Any:
    """The fake value a tensor tracker's graph node computes (None if unknown)."""
    return vt.proxy.node.meta.get("example_value")


def _constrained_symbols(tx: Any) -> set:
    """The symbols of the input sizes the user constrained
    (``torch._dynamo.mark_dynamic``), read from the output graph's tracked
    fakes (their symbolic contexts' constraints)."""
    constrained: set = set()
    for tracked in getattr(tx.output, "tracked_fakes", ()):
        context, fake = tracked.symbolic_context, tracked.fake
        sizes = getattr(context, "constraint_sizes", None)
        if not sizes or not isinstance(fake, torch.Tensor):
            continue
        for dim, constraint in enumerate(sizes):
            if constraint is not None and dim < fake.dim() and isinstance(fake.size(dim), torch.SymInt):
                constrained |= fake.size(dim).node.expr.free_symbols
    return constrained


def constrained_dims(tx: Any, vt: VariableTracker) -> list[int]:
    """The dims of a tensor tracker's value whose size depends on an input
    size the user constrained (``torch._dynamo.mark_dynamic``: Dynamo raises
    ``ConstraintViolationError`` if the trace specializes it)."""
    value = example_value(vt)
    if value is None:
        return []
    constrained = _constrained_symbols(tx)
    if not constrained:
        return []
    return [dim for dim, size in enumerate(value.size())
            if isinstance(size, torch.SymInt) and size.node.expr.free_symbols & constrained]


def marked_sizes(tx: Any) -> frozenset:
    """The symbols of the input sizes marked dynamic (``mark_dynamic``)
    that the trace has not fixed yet."""
    return frozenset(_constrained_symbols(tx))


def fixed_sizes(tx: Any, symbols: frozenset) -> list[str]:
    """Those of ``symbols`` (``marked_sizes``) the trace has fixed to one
    value since, by name: Dynamo raises ``ConstraintViolationError`` for
    each when the frame's guards are made."""
    if not symbols:
        return []
    shape_env = getattr(tx.output, "shape_env", None)
    if shape_env is None:
        return []
    fixed = []
    for symbol in symbols:
        bounds = shape_env.var_to_range.get(symbol)
        if shape_env.replace(symbol).is_number or (bounds is not None and bounds.lower == bounds.upper):
            fixed.append(str(symbol))
    return sorted(fixed)


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


def object_value(vt: VariableTracker) -> Any:
    """``known_value``, or the Python object a tracker of a plain object
    holds (2.11 / 2.12 wrap a ``ReduceOp`` or an options struct as one,
    answering neither ``get_real_python_backed_value`` nor as a constant);
    else ``NO_KNOWN_VALUE``."""
    value = known_value(vt)
    if value is not NO_KNOWN_VALUE:
        return value
    realized = vt.realize() if hasattr(vt, "realize") else vt
    if isinstance(realized, UserDefinedObjectVariable):
        return realized.value
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
# Every plugin guard is built by a function of this section, and each has a
# saved form: what torch's precompile pickles in its place
# (``precompile/plugin_guards.py``).

def guard_identity(source: Any, value: Any = None) -> None:
    """The object at ``source`` is the same object (a tracked type's guard:
    ``value``, the object now, is not needed, its identity is the whole
    guard)."""
    install_guard(source.make_guard(DYNAMO_DIST_ID_MATCH))


def DYNAMO_DIST_ID_MATCH(builder: Any, guard: Any) -> None:
    """``guard_identity``'s guard: C++ ``ID_MATCH``, or, where torch's
    precompile is at work (``caching_precompile`` drops every ``ID_MATCH``
    from the live guards; a saving build refuses it), a Python ``v is`` the
    compile-time object (held, so its id cannot be reused)."""
    if not (precompile_caching() or getattr(builder, "save_guards", False)):
        GuardBuilder.ID_MATCH(builder, guard)
        return
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
    install_guard(source_a.make_guard(functools.partial(DYNAMO_DIST_SAME_OBJECT, source_b.name, same)))


def DYNAMO_DIST_SAME_OBJECT(other: str, same: bool, builder: Any, guard: Any) -> None:
    code = f"{builder.arg_ref(guard)} {'is' if same else 'is not'} {builder.arg_ref(other)}"
    builder.add_python_lambda_leaf_guard_to_root([code], get_verbose_code_parts(code, guard))


@dataclasses.dataclass(frozen=True)
class PredicateGuard:
    """A plugin predicate guard, whole, as one named record: what
    ``DYNAMO_DIST_MATCH`` builds from and what torch's precompile saves
    from (``precompile/plugin_guards.py``). At guard build time ``expect(value)`` says what
    the value must be, as picklable data (it may also hold a process-local
    shortcut that does not pickle), ``check_from(expected)`` returns the
    per-call check, and ``describe`` is the recompile reason shown when it
    fails (a sentence, or ``describe(source_name, value)``). ``expect`` and
    ``check_from`` are module-level functions: the saved guard is them plus
    the expectation."""

    expect: Callable[[Any], Any]
    check_from: Callable[[Any], Callable[[Any], bool]]
    describe: str | Callable[[str, Any], str]

    def reason(self, name: str, value: Any) -> str:
        return self.describe if isinstance(self.describe, str) else self.describe(name, value)


def predicate_guard(expect: Callable[[Any], Any], check_from: Callable[[Any], Callable[[Any], bool]],
                    describe: str | Callable[[str, Any], str]) -> Callable[[Any, Any], None]:
    """A guard-building function (what ``source.make_guard`` takes) for the
    ``PredicateGuard`` of these three."""
    return functools.partial(DYNAMO_DIST_MATCH, predicate=PredicateGuard(expect, check_from, describe))


def DYNAMO_DIST_MATCH(builder: Any, guard: Any, *, predicate: PredicateGuard) -> None:
    value = builder.get(guard)
    builder.get_guard_manager(guard).add_lambda_guard(
        predicate.check_from(predicate.expect(value)),
        get_verbose_code_parts(predicate.reason(guard.name, value), guard), guard.user_stack,
    )


def guard_predicate(source: Any, expect: Callable[[Any], Any], check_from: Callable[[Any], Callable[[Any], bool]],
                    describe: str) -> None:
    """A Python predicate guard on ``source`` (a ``PredicateGuard``), where
    no C++ guard expresses the check; ``describe`` is shown as the
    recompile reason."""
    _guard_log.debug("guard %s", describe)
    install_guard(source.make_guard(predicate_guard(expect, check_from, describe)))


_guard_log = logging.getLogger("dynamo_dist.guards")


# Stock's guard on a DTensor input's spec (``x._spec``), which ``_hooks``
# replaces while installed (``guards.dtensor``).
DTENSOR_SPEC_GUARD_POINT: tuple[Any, str] = (GuardBuilder, "DTENSOR_SPEC_MATCH")


def guard_build_hook(source: Any, name: str, hook: Callable[[str, Any], None]) -> None:
    """A guard that checks nothing: while Dynamo builds guards it calls
    ``hook(source_name, value_at_compile_time)`` (Dynamo sorts and prints
    guards by ``name``). A source Dynamo cannot evaluate is skipped. Not
    saved by torch's precompile (there is nothing to check)."""

    def build(builder: Any, guard: Any) -> None:
        try:
            value = builder.get(guard)
        except Exception:
            return
        hook(guard.name, value)

    build.__name__ = build.__qualname__ = name
    build.checks_nothing = True  # type: ignore[attr-defined]
    install_guard(source.make_guard(build))


# -- torch's precompile -------------------------------------------------------
# ``caching_precompile`` and ``aot_compile`` save a frame's guards as their
# builder functions (pickled by name) plus the values they read, and rebuild
# them on load. What the plugin saves in their place (its guards' saved
# forms, torch's guards it saves otherwise, the saved-by guard) is
# ``dynamo_dist/precompile/`` (``saved_guards.py``); here are the points and
# the guard builder's operations it uses.
GUARD_SERIALIZATION_POINT: tuple[Any, str] = (CheckFunctionManager, "serialize_guards")


def precompile_caching() -> bool:
    """``torch._dynamo.config.caching_precompile`` (``TORCH_CACHING_PRECOMPILE=1``)."""
    return bool(getattr(torch._dynamo.config, "caching_precompile", False))


def precompile_caching_set(on: bool) -> Any:
    """A context manager: ``caching_precompile`` set to ``on`` for the block."""
    return torch._dynamo.config.patch(caching_precompile=on)


def guard_create_fn(guard: Any) -> Any:
    """The function (or partial) that builds ``guard``."""
    return guard.create_fn


def guard_source(guard: Any) -> Any:
    """The source ``guard`` is on."""
    return guard.originating_source


def guard_replaced(guard: Any, create_fn: Any = None, source: Any = None) -> Any:
    """``guard`` built by ``create_fn`` and/or on ``source`` instead."""
    changes = {"create_fn": create_fn, "originating_source": source}
    return dataclasses.replace(guard, **{k: v for k, v in changes.items() if v is not None})


def guarded_value(builder: Any, guard_or_source: Any) -> Any:
    """The value a guard (or a source) reads, as the guard builder reads it."""
    return builder.get(guard_or_source)


def source_name(source: Any, up: int = 0) -> str:
    """A source's name (a method on some releases, a property on others),
    ``up`` bases up."""
    for _ in range(up):
        source = source.base
    return source.name() if callable(getattr(source, "name", None)) else str(getattr(source, "name", source))


def source_base(source: Any) -> Any:
    """The source ``source`` reads from, or None."""
    return getattr(source, "base", None)


def source_step(source: Any) -> tuple[str, Any] | None:
    """How ``source`` is read from its base: ("attr", name), ("item", key),
    or None for any other read."""
    member, index = getattr(source, "member", None), getattr(source, "index", None)
    if type(source) is AttrSource and isinstance(member, str):
        return "attr", member
    if type(source) in (GetItemSource, ListGetItemSource) and isinstance(index, (int, str)) \
            and not getattr(source, "index_is_slice", False):
        return "item", index
    return None


def guard_manager_of(builder: Any, source: Any) -> Any:
    """The guard manager of ``source`` (raises where its value cannot be read now)."""
    return builder.get_guard_manager_from_source(source)


def takes_checks(manager: Any) -> bool:
    """A guard manager that takes a Python check (a dict's takes none)."""
    return not isinstance(manager, _DictGuardManager)


def add_check(manager: Any, check: Callable[[Any], bool], text: str, guard: Any) -> None:
    """``check`` on the value of ``manager``, shown as ``text`` when it fails."""
    manager.add_lambda_guard(check, get_verbose_code_parts(text, guard), guard.user_stack)


def add_root_check(builder: Any, check: Callable[[Any], bool], text: str, guard: Any) -> None:
    """``check`` on the frame's locals, checked first, shown as ``text``."""
    builder.guard_manager.root.add_lambda_guard(check, get_verbose_code_parts(text, guard), None)


def frame_guard(create_fn: Callable[[Any, Any], None]) -> Any:
    """A guard built by ``create_fn`` on the frame as a whole (no value)."""
    return GlobalStateSource().make_guard(create_fn)


def release_guarded_value(builder: Any, value: Any) -> None:
    """torch's guard pickler no longer refuses ``value`` as a value a guard
    reads (it saves it as its placeholder)."""
    builder.guard_tree_values.pop(id(value), None)


def decline_package(output_graph: Any, reason: str, refused: str) -> None:
    """The frame is not packaged: ``PackageError(refused)`` where it has no
    package (``aot_compile``), ``PackageError(reason)`` under
    ``strict_precompile``, else a package bypass logged with ``reason``."""
    if getattr(output_graph, "package", None) is None:
        raise PackageError(refused)
    if torch._dynamo.config.strict_precompile:
        raise PackageError(reason)
    output_graph.bypass_package(reason)


# A torch guard on a config entry's override reads
# ``<config module>._config[<key>].user_override`` (``precompile/torch_guards.py``).
_OVERRIDE_KEY = re.compile(r"\._config\[['\"]([^'\"]+)['\"]\]\.user_override")
CONFIG_UNSET = _UNSET_SENTINEL  # what an unset override's ``get()`` answers


def config_override_key(guard: Any) -> str | None:
    """The config entry whose override ``guard`` (a torch guard) reads, or None."""
    found = _OVERRIDE_KEY.search(guard.name)
    return None if found is None else found.group(1)


def config_module_of(builder: Any, guard: Any) -> Any:
    """The config module whose ``_config`` a guard on an override reads,
    evaluated from the guard's own source (``<module>._config[key]
    .user_override``): the module the traced frame read, alias or not
    (an alias entry's ``getattr`` answers its target's value). None where
    the source does not reach a config module."""
    source = guard.originating_source
    while source is not None and getattr(source, "member", None) != "_config":
        source = getattr(source, "base", None)
    if source is None:
        return None
    try:
        module = builder.get(source.base)
    except Exception:  # a source the builder cannot read here: torch's own form
        return None
    is_config = isinstance(module, types.ModuleType) and isinstance(getattr(module, "_config", None), dict)
    return module if is_config else None


def config_entry(module: Any, key: str) -> Any:
    """The entry ``key`` of a config module (its ``hide`` says it was
    deleted), or None."""
    return getattr(module, "_config", {}).get(key)


def config_value_without_override(module: Any, key: str) -> Any:
    """What ``module.key`` answers while the entry has no override, where
    that answer is fixed for the life of the process: the environment's
    default, else the declared default (no alias, no forcing environment
    variable, no justknob). ``CONFIG_UNSET`` where it is not."""
    entry = config_entry(module, key)
    if (entry is None or getattr(entry, "alias", None) is not None or getattr(entry, "justknob", None) is not None
            or getattr(entry, "env_value_force", _UNSET_SENTINEL) is not _UNSET_SENTINEL or entry.hide):
        return _UNSET_SENTINEL
    value = getattr(entry, "env_value_default", _UNSET_SENTINEL)
    if value is _UNSET_SENTINEL:
        value = entry.default
    return value


def reads_through_a_module(guard: Any, output_graph: Any) -> bool:
    """``guard``'s value is reached through a module global of the frame
    (``flags.USE_X``, not the global itself)."""
    source = guard.originating_source
    while getattr(source, "base", None) is not None:
        source = source.base
    name = getattr(source, "global_name", None)
    scope = getattr(output_graph, "global_scope", None) or {}
    return isinstance(name, str) and source is not guard.originating_source and isinstance(
        scope.get(name), types.ModuleType)


def hasattr_guard_target(guard: Any) -> tuple[Any, str] | None:
    """The object and attribute name a ``HASATTR`` guard checks: 2.12+
    guard the object with the attribute's name as an argument; 2.11 guards
    the attribute's own source. None where neither reads so."""
    source, attr = guard.originating_source, getattr(guard.create_fn, "keywords", {}).get("attr")
    if attr is not None:
        return source, attr
    step = source_step(source)
    return None if step is None or step[0] != "attr" else (source.base, source.member)


def torch_functions_off() -> Any:
    """A context manager: no torch-function mode or override is called in
    the block (values handled as plain data, never through the caller's
    modes)."""
    return torch._C.DisableTorchFunction()


# FSDP2's ``fully_shard`` gives each module class ``C`` it wraps a class
# ``FSDP<C>`` (bases ``FSDPModule, C``), made the first time and kept in
# ``_fully_shard.cls_to_fsdp_cls`` (``_fsdp_init._apply_to_module``). torch's
# guard pickler saves ``FSDP<C>`` as ``C`` and rebuilds it through
# ``GuardsStatePickler._unpickle_fsdp_module_type``, a lookup in that dict:
# in a process that loads the frame before ``fully_shard`` ran on a ``C``
# (torchtitan compiles each block, then shards it), the lookup raises
# KeyError inside ``torch.compile``. ``precompile.fsdp.fsdp_type_made_on_load`` makes the
# class there as ``fully_shard`` makes it, with torch's own function, into
# the same dict: ``fully_shard`` then takes that class, so a rebuilt guard
# checks the class the module will have (and fails, so the frame is traced
# again, for a module never sharded).
FSDP_TYPE_UNPICKLE_POINT: tuple[Any, str] | None = None
try:
    from torch._dynamo.guards import GuardsStatePickler as _GuardsStatePickler
    from torch.distributed.fsdp._fully_shard import _fully_shard as _fsdp
    if (hasattr(_GuardsStatePickler, "_unpickle_fsdp_module_type") and hasattr(_fsdp, "get_cls_to_fsdp_cls")
            and hasattr(_fsdp, "_apply_to_module") and hasattr(_fsdp, "_unimplemented_deepcopy")):
        FSDP_TYPE_UNPICKLE_POINT = (_GuardsStatePickler, "_unpickle_fsdp_module_type")
except ImportError:  # pragma: no cover - a build without torch.distributed's FSDP
    pass


def fsdp_class(original_type: type) -> type:
    """``FSDP<original_type>``: the class ``fully_shard`` gives a module of
    ``original_type``, made now (as ``fully_shard`` makes it) if no module
    of that class was sharded yet."""
    classes = _fsdp.get_cls_to_fsdp_cls()
    if original_type not in classes:
        holder = object.__new__(original_type)  # only its class is changed, as fully_shard changes a module's
        _fsdp._apply_to_module((holder,), classes, _fsdp.FSDPModule, "FSDP", _fsdp._unimplemented_deepcopy)
    return classes[original_type]


# An FSDP2 module itself (a frame's ``self``, a block torchtitan compiles
# after ``fully_shard``) has a class whose name is its qualified name, so
# torch's guard pickler leaves it to pickle's default: ``__newobj__`` of its
# class, which rebuilds as ``cls.__new__(cls)``. ``FSDPModule.__new__`` makes
# an instance of the module's original class instead (for modules built by
# indexing a container), so the loaded local is a ``C``, not an ``FSDP<C>``:
# the guard on its class (``TYPE_MATCH``, rebuilt from that local) checks
# ``C`` and never passes on the live module, and the restart traces the frame
# again (stock 2.15 too). ``precompile.fsdp.fsdp_module_keeps_class`` pickles such a module
# as ``copyreg._reconstructor`` of its class (``object.__new__``, then its
# state as before), so it loads as the FSDP class; that class is saved as
# before (``_unpickle_fsdp_module_type``) and the stored entry stays loadable
# without the plugin.
FSDP_MODULE_PICKLE_POINT: tuple[Any, str] | None = (
    (_GuardsStatePickler, "reducer_override") if FSDP_TYPE_UNPICKLE_POINT is not None else None)


def _is_fsdp_class(cls: type) -> bool:
    return (issubclass(cls, _fsdp.FSDPModule) and cls is not _fsdp.FSDPModule
            and _fsdp.get_cls_to_fsdp_cls().get(cls.__mro__[2]) is cls)


def fsdp_module_reduction(obj: Any) -> tuple | None:
    """The pickle reduction that loads the FSDP2 module ``obj`` with its FSDP
    class: ``copyreg._reconstructor`` of its class (``object.__new__``),
    then its state as pickle's default saves it; None for anything else."""
    if not isinstance(obj, torch.nn.Module) or not _is_fsdp_class(type(obj)):
        return None
    default = obj.__reduce_ex__(2)
    if default[0] is not copyreg.__newobj__ or tuple(default[1]) != (type(obj),):
        return None
    return (copyreg._reconstructor, (type(obj), object, None), *default[2:])


# torch's guard pickler (torch's precompile saves a frame's guards and the
# locals they were built on): ``reducer_override`` returns NotImplemented for
# what it leaves to pickle's default.
GUARD_STATE_PICKLE_POINT: tuple[Any, str] = (torch._dynamo.guards.GuardsStatePickler, "reducer_override")


def guarded_values(pickler: Any) -> dict:
    """The values torch's guard pickler was told guards read (by id)."""
    return pickler.guard_tree_values


def autograd_function_of_ctx(obj: Any) -> type | None:
    """The ``autograd.Function`` whose ``ctx`` ``obj`` is (its backward node,
    an instance of ``Function._backward_cls``), or None."""
    if not isinstance(obj, torch.autograd.function.BackwardCFunction):
        return None
    function = getattr(type(obj), "_forward_cls", None)
    return function if isinstance(function, type) and function._backward_cls is type(obj) else None


def new_ctx_of(function: type) -> Any:
    """A new ``ctx`` of the ``autograd.Function`` ``function`` (an instance
    of its backward node class), as ``apply`` makes one."""
    return function._backward_cls()


def ctx_holds_tensors(ctx: Any) -> bool:
    """``ctx`` holds tensors through the autograd API: saved
    (``save_for_backward``: ``to_save`` during ``forward``, taken by
    ``apply`` after it), marked non-differentiable or dirty."""
    return bool(ctx._raw_saved_tensors or ctx.to_save or ctx.non_differentiable or ctx.dirty_tensors)


# 2.11-2.14 name a new global of a frame's output ``prefix`` plus a counter
# of this process (``unique_id``): a frame loaded from Dynamo's cache has
# installed the saving process's names in the module globals, so when its
# guards fail and the frame is traced again, the first new global
# (``__builtins_dict___0``) collides with a loaded one and the trace crashes
# (stock too). 2.15 picks a name unbound in the globals
# (``unique_id_unbound_in``), which ``precompile.new_globals.install_global_unbound``
# backports.
from torch._dynamo import output_graph as _output_graph  # noqa: E402

INSTALL_GLOBAL_POINT: tuple[Any, str] | None = (
    None if hasattr(_output_graph, "unique_id_unbound_in") else (_output_graph.OutputGraph, "install_global"))


def new_global_name(prefix: str) -> str:
    """The next name ``OutputGraph.install_global`` would give a new global
    of ``prefix`` (its process-wide counter)."""
    return _output_graph.unique_id(prefix)


def default_group_source(tx: Any) -> Any:
    """The source of the default (WORLD) process group."""
    module = tx.import_source("torch.distributed.distributed_c10d")
    return AttrSource(AttrSource(module, "GroupMember"), "WORLD")


def current_compile_id() -> str:
    return str(CompileContext.current_compile_id())


# -- torch-function modes and tensor attributes (spmd_types' checker) ------------
# A TorchFunctionMode on the stack when a frame is traced is a tracker in the
# tracer's symbolic mode stack (``tx.symbolic_torch_function_state``); torch
# calls dispatch to the top one (``call_torch_function``) with it popped.
# Dynamo answers ``has_torch_function*`` from tensor subclasses only, where
# eager also answers True under any mode: the checker then never sees
# ``spmd.all_reduce``, only the ops inside it. A tensor attribute set in the
# frame is a pending side effect of its tracker, replayed on the tensors that
# outlive the frame.
from torch._dynamo.output_graph import OutputGraph as _OutputGraph  # noqa: E402
from torch._dynamo.variables.misc import AutogradFunctionVariable, DeletedVariable  # noqa: E402
from torch._dynamo.variables.torch_function import TorchFunctionModeVariable  # noqa: E402,F401

# Where each graph Dynamo made is handed to the backend (a fresh compile, or
# an AOTAutograd entry loaded from the cache): what it returns is the
# function the frame's code calls.
BACKEND_CALL_POINT: tuple[Any, str] = (_OutputGraph, "call_user_compiler")
# The overridable functions of torch.overrides a Python API calls to ask for,
# and hand over to, torch-function dispatch.
TORCH_FUNCTION_QUERIES = (torch.overrides.has_torch_function, torch.overrides.has_torch_function_unary,
                          torch.overrides.has_torch_function_variadic)
TORCH_FUNCTION_HANDLER = torch.overrides.handle_torch_function


def top_mode_tracker(tx: Any) -> Any:
    """The tracker of the torch-function mode a torch call dispatches to now
    (the top of the frame's symbolic mode stack), or None."""
    state = tx.symbolic_torch_function_state
    if not state.torch_function_mode_enabled or not state.mode_stack:
        return None
    vt = state.mode_stack[-1]
    return vt.realize() if hasattr(vt, "realize") else vt


def consume_skip_next(tx: Any) -> bool:
    """``torch._C._skip_one_hop_torch_function`` was called: the next
    ``has_torch_function*`` answers False (and resets it), as in C++."""
    state = tx.symbolic_torch_function_state
    if state.skip_next:
        state.skip_next = False
        return True
    return False


def dispatch_to_mode(tx: Any, fn: VariableTracker, types: VariableTracker, args: list, kwargs: dict) -> Any:
    """``mode.__torch_function__(fn, types, args, kwargs)`` on the top mode,
    popped for the call, as eager's ``handle_torch_function`` does."""
    return tx.symbolic_torch_function_state.call_torch_function_mode(tx, fn, types, args, kwargs)


# Where Dynamo traces ``cls.apply(...)`` of an ``autograd.Function``
# (every release 2.11-2.15), past any torch-function mode.
AUTOGRAD_APPLY_POINT: tuple[Any, str] = (AutogradFunctionVariable, "call_apply")


def call_autograd_apply(tx: Any, fn_cls: type, args: list, kwargs: dict) -> Any:
    """``fn_cls.apply(*args, **kwargs)`` traced as Dynamo traces an
    ``autograd.Function``'s apply, whatever ``Function.apply`` is now (the
    checker replaces it with a descriptor Dynamo cannot call)."""
    return AutogradFunctionVariable(fn_cls).call_method(tx, "apply", args, kwargs)


def bound_descriptor(vt: VariableTracker) -> tuple[Any, Any] | None:
    """(descriptor, the object it is bound to) for a method Dynamo keeps as
    a descriptor and its object (a descriptor it cannot read, 2.13+), else None."""
    vt = vt.realize() if hasattr(vt, "realize") else vt
    descriptor, obj = getattr(vt, "descriptor", None), getattr(vt, "obj", None)
    if descriptor is None or not isinstance(obj, VariableTracker):
        return None
    if isinstance(obj, AutogradFunctionVariable):  # its class, which it does not say as a value
        return descriptor, obj.fn_cls
    return descriptor, known_value(obj)


def pending_attribute(tx: Any, vt: VariableTracker, name: str) -> tuple[bool, Any]:
    """(True, tracker) for an attribute set (or deleted: ``DeletedVariable``)
    in this frame, else (False, None)."""
    side_effects = tx.output.side_effects
    if side_effects.has_pending_mutation_of_attr(vt, name):
        return True, side_effects.load_attr(vt, name, deleted_ok=True)
    return False, None


def pending_attributes_by_node(tx: Any, names: tuple[str, ...]) -> dict[Any, dict[str, Any]]:
    """The attributes in ``names`` set in this frame on traced tensors, by
    the graph node of each tensor: node -> {name: value} (a deleted one is
    absent; one whose value is not known while tracing is left out)."""
    found: dict[Any, dict[str, Any]] = {}
    mutations = getattr(tx.output.side_effects, "store_attr_mutations", {})
    for vt, attrs in list(mutations.items()):
        node = getattr(getattr(vt, "proxy", None), "node", None)
        if node is None:
            continue
        for name in names:
            value_vt = attrs.get(name)
            if value_vt is None or isinstance(value_vt, DeletedVariable):
                continue
            value = known_value(value_vt)
            if value is not NO_KNOWN_VALUE:
                found.setdefault(node, {})[name] = value
    return found


def is_deleted(vt: Any) -> bool:
    return isinstance(vt, DeletedVariable)


def set_attribute(tx: Any, vt: VariableTracker, name: str, value: VariableTracker) -> None:
    """``setattr(vt, name, value)`` traced as Dynamo traces it (a side effect)."""
    SourcelessBuilder.create(tx, setattr).call_function(tx, [vt, ConstantVariable.create(name), value], {})


def delete_attribute(tx: Any, vt: VariableTracker, name: str) -> None:
    SourcelessBuilder.create(tx, delattr).call_function(tx, [vt, ConstantVariable.create(name)], {})


def graph_input_value(vt: VariableTracker) -> Any:
    """The real tensor a graph input's tracker stands for (its ``GraphArg``), or None."""
    proxy = getattr(vt, "proxy", None)
    grapharg = proxy.node.meta.get("grapharg") if proxy is not None else None
    if grapharg is None:
        return None
    try:
        return grapharg.example
    except Exception:  # a weak reference that died: not known
        return None


def build_value(tx: Any, value: Any) -> VariableTracker:
    """The tracker Dynamo (and the plugin's hooks) make for a value built now."""
    return SourcelessBuilder.create(tx, value)


def build_class(tx: Any, cls: type) -> VariableTracker:
    return SourcelessBuilder.create(tx, cls)


def module_source(tx: Any, module: str) -> Any:
    """A source for ``module`` (the frame's import alias global)."""
    return tx.import_source(module)


def frame_codes(tx: Any) -> list:
    """The code objects of the frame being traced and of every function
    inlined into it now, innermost first."""
    codes = []
    while tx is not None:
        code = getattr(tx, "f_code", None)
        if code is not None:
            codes.append(code)
        tx = getattr(tx, "parent", None)
    return codes


def is_autograd_function_tracker(vt: Any) -> bool:
    return isinstance(vt, AutogradFunctionVariable)


from torch._dynamo.variables.dicts import ConstDictVariable  # noqa: E402
from torch._dynamo.variables.tensor import SymNodeVariable  # noqa: E402


def dict_items(vt: Any) -> list | None:
    """The (key tracker, value tracker) pairs of a dict tracker, else None."""
    if not isinstance(vt, ConstDictVariable):
        return None
    return [(getattr(k, "vt", k), v) for k, v in vt.items.items()]


def symbolic_value(vt: Any) -> Any:
    """The SymInt / SymFloat / SymBool a symbolic scalar's tracker stands
    for while tracing, else ``NO_KNOWN_VALUE``."""
    return vt.sym_num if isinstance(vt, SymNodeVariable) else NO_KNOWN_VALUE


from torch._dynamo.variables.ctx_manager import ContextWrappingVariable  # noqa: E402,F401


def frame_modes(tx: Any) -> list:
    """The torch-function modes on the stack when the frame was called
    (torch guards their types)."""
    return list(getattr(tx.output, "torch_function_mode_stack", None) or ())


def graph_modes(output_graph: Any) -> list:
    """The same, from the output graph (at backend-compile time)."""
    return list(getattr(output_graph, "torch_function_mode_stack", None) or ())




def dataclass_fields(tx: Any, vt: Any) -> tuple[type, dict] | None:
    """(class, {field: tracker}) of a dataclass instance Dynamo tracks as a
    user object (one built in the frame holds its fields as trackers only),
    else None."""
    if not isinstance(vt, UserDefinedObjectVariable):
        return None
    cls = vt.python_type()
    if not dataclasses.is_dataclass(cls):
        return None
    getattr_slot = getattr(vt, "tp_getattro_impl", None) or vt.var_getattr
    return cls, {f.name: getattr_slot(tx, f.name) for f in dataclasses.fields(cls) if f.init}


from torch._dynamo.variables import builtin as _builtins  # noqa: E402

# The operators whose tensor operands Dynamo traces as a builtin
# (``operator.mul`` ...): under a torch-function mode it dispatches the tensor
# method eager's mode receives instead (``BUILTIN_TO_TENSOR_FN_MAP``; the
# reflected method, operands swapped, when only the right one is a tensor).
# The operator is read from the instruction the frame executes.
_UNARY = {"UNARY_NEGATIVE": operator.neg, "UNARY_POSITIVE": operator.pos, "UNARY_INVERT": operator.invert,
          "UNARY_NOT": operator.not_, "BINARY_SUBSCR": operator.getitem, "STORE_SUBSCR": operator.setitem,
          "CONTAINS_OP": operator.contains}
_COMPARE = {"<": operator.lt, "<=": operator.le, "==": operator.eq, "!=": operator.ne, ">": operator.gt,
            ">=": operator.ge}
_NB = {"ADD": "add", "AND": "and_", "FLOOR_DIVIDE": "floordiv", "LSHIFT": "lshift", "MATRIX_MULTIPLY": "matmul",
       "MULTIPLY": "mul", "REMAINDER": "mod", "OR": "or_", "POWER": "pow", "RSHIFT": "rshift", "SUBTRACT": "sub",
       "TRUE_DIVIDE": "truediv", "XOR": "xor"}


def _instruction_operator(inst: Any) -> Any:
    if inst.opname in _UNARY:
        return _UNARY[inst.opname]
    if inst.opname == "COMPARE_OP":
        return _COMPARE.get(inst.argval if isinstance(inst.argval, str) else None)
    if inst.opname == "BINARY_OP":
        names = [name for name, _ in getattr(dis, "_nb_ops", ())]
        if not isinstance(inst.arg, int) or inst.arg >= len(names):
            return None
        name = names[inst.arg].removeprefix("NB_")
        inplace = name.startswith("INPLACE_")
        base = _NB.get(name.removeprefix("INPLACE_"))
        if base is None:
            return None
        return getattr(operator, ("i" + base.rstrip("_")) if inplace else base, None)
    return None


def is_activation_checkpoint(func: Any) -> bool:
    """``func`` is the operator Dynamo traces ``torch.utils.checkpoint``'s
    block as (``tag_activation_checkpoint``): eager runs the block's
    function under the modes of its caller."""
    return func is _tag_activation_checkpoint


def call_operator_undispatched(tx: Any, fn: VariableTracker, args: list, kwargs: dict) -> VariableTracker:
    """A higher-order operator's call traced without dispatching it to the
    torch-function modes (its body traced under the mode stack as it is
    now): what its tracker does once a mode has handed the call back."""
    return fn._call_function(tx, args, kwargs)


@contextlib.contextmanager
def mode_pushed(tx: Any, mode: VariableTracker) -> Any:
    """``mode`` back on the frame's torch-function mode stack for the block
    (Dynamo pops a mode while its ``__torch_function__`` is traced, as eager
    does)."""
    state = tx.symbolic_torch_function_state
    state.push_torch_function_mode(mode)
    try:
        yield
    finally:
        popped = state.pop_torch_function_mode()
        assert popped is mode, "the torch-function mode stack changed inside the block"


def operator_behind(tx: Any, func: Any) -> tuple[Any, bool] | None:
    """(the builtin, whether its operands were swapped) when the tensor
    method ``func`` dispatched to a mode stands for the operator the frame is
    executing (``x * y``), else None."""
    inst = getattr(tx, "current_instruction", None)
    op = _instruction_operator(inst) if inst is not None else None
    if op is None:
        return None
    _builtins.populate_builtin_to_tensor_fn_map()
    if _builtins.BUILTIN_TO_TENSOR_FN_MAP.get(op) is func:
        return op, False
    if _builtins.BUILTIN_TO_TENSOR_RFN_MAP.get(op) is func:
        return op, True
    return None


def call_builtin(tx: Any, fn: Any, args: list, kwargs: dict) -> VariableTracker:
    """``fn(*args, **kwargs)`` for a builtin, traced as Dynamo traces it."""
    return SourcelessBuilder.create(tx, fn).call_function(tx, args, kwargs)
