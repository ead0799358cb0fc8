"""spmd_types in a compiled frame: its checker, its functions and its
state, declared as tracked types (``SPMD_CHECKER``, ``SPMD_FUNCTION``,
``TORCH_FUNCTION_DISPATCH``).

The checker (``spmd_types.checker.typecheck()``) is a torch-function mode:
every torch call, and every spmd_types collective, dispatches to it. Stock
Dynamo inlines its ``__torch_function__`` (hundreds of frames; it fails on the
checker's own meshes and on ``autograd.Function.apply``), never shows it
``spmd.all_reduce`` (its ``has_torch_function`` ignores modes), and runs it
again on the graph's ops at run time. Here:

- a torch call under the checker is traced as with the checker off (the same
  graph), then the checker's own rule for that call runs on the traced values
  (``spmd_run.check``): an ill-typed call raises eager's ``SpmdTypeError`` in
  the traced program (the frame runs eagerly and raises it from the user's
  line), a well-typed one leaves its types on the traced tensors, replayed on
  the outputs at run time;
- ``has_torch_function*`` answers True under the checker, as eager does, and
  ``handle_torch_function`` dispatches to it: the checker sees
  ``spmd.all_reduce`` with its ``src``/``dst``, not the ops inside it;
- spmd_types' functions of types and state (``assert_type``,
  ``get_local_type``, ``current_mesh`` ...) run as themselves at trace time,
  and its context managers (``no_typecheck``, ``local``, ``set_current_mesh``)
  change the frame's trace-time state (``Kind.TYPES``, ``Kind.CONTEXT``); its
  collectives are traced as their bodies, without the traceback-filtering
  wrapper whose thread-local flag stock guards on (``Kind.BODY``);
- a graph of a frame traced under the checker runs with the checker off the
  mode stack (``runtime``): nothing of the checker runs at run time.

An activation-checkpointed block, which Dynamo traces as one higher-order
operator and hands to the checker as one call, is traced with the checker on
instead: eager's checker checks the block's operations as they run. Another
higher-order operator (``torch.cond`` ...) is checked as one call, as eager's
checker sees it. A call the checker's rule cannot run on traced values (an
``autograd.Function`` inside a rule, a value not known while tracing) runs
eagerly, with the checker, behind a clean ``dynamo_dist:`` graph break.
"""

from __future__ import annotations

import types
from typing import Any, Callable, ClassVar, Mapping

import torch

from .. import _compat as C
from ..tracked_types import TrackedType, declare
from . import spmd_run
from .breaks import Break, graph_break
from .importable import ImportableObjectVariable
from .members import Kind, Member, MemberTable
from .rebuild import by_import

S = C.spmd

SPMD_FUNCTIONS = MemberTable("spmd_types", {
    **{name: Member(Kind.TYPES, method=True) for name in S.TYPE_FUNCTIONS},
    **{name: Member(Kind.CONTEXT, method=True) for name in S.CONTEXT_FUNCTIONS},
    **{name: Member(Kind.BODY, method=True) for name in S.COLLECTIVE_FUNCTIONS},
}, calls_only=True)

TORCH_FUNCTION_DISPATCH = MemberTable("torch.overrides", {
    "has_torch_function": Member(Kind.TF_QUERY, method=True),
    "has_torch_function_unary": Member(Kind.TF_QUERY, method=True),
    "has_torch_function_variadic": Member(Kind.TF_QUERY, method=True),
    "handle_torch_function": Member(Kind.TF_HANDLER, method=True),
}, calls_only=True)


# -- the checker ----------------------------------------------------------------------

class SpmdCheckerVariable(C.dynamo.TorchFunctionModeVariable):
    """The checker on the frame's mode stack: a torch call dispatched to it is
    traced as with the checker off, then checked by the checker's own rule."""

    def call_torch_function(self, tx: Any, fn: Any, types: Any, args: Any, kwargs: dict) -> Any:
        return self.dispatch(tx, fn, _applied_function(fn), types, list(args), kwargs)

    def dispatch(self, tx: Any, fn: Any, applied: type | None, types: Any, args: list, kwargs: dict) -> Any:
        """The call ``fn(*args, **kwargs)`` dispatched to the checker; where it
        is an ``autograd.Function``'s apply, ``applied`` is that Function."""
        state = spmd_run.frame_state(tx)
        checking = (state.checking and not spmd_run.paused_by_frames(tx)
                    and not spmd_run.inside_applied_function(tx))
        if checking and applied is None and C.dynamo.is_activation_checkpoint(C.dynamo.known_value(fn)):
            # Eager's checker never sees the checkpointed block as one call: the
            # block's function runs under it, each operation checked. So its body
            # is traced with the checker on, each operation checked as it is
            # traced (the same graph); its outputs share their fake values with
            # the operator's, so they leave with the types the body gave them.
            with C.dynamo.mode_pushed(tx, self):
                return C.dynamo.call_operator_undispatched(tx, fn, args, kwargs)
        result = _erased(tx, fn, applied, args, kwargs)  # what eager computes: the graph with the checker off
        if checking:
            func = None if applied is None else S.bound_apply(applied)
            try:
                spmd_run.check(tx, self.value, fn, types, args, kwargs, result, func=func)
            except spmd_run.CannotRun as e:
                what = f"checker on `{_name(C.dynamo.known_value(fn) if func is None else func)}`"
                graph_break(Break.SPMD_NOT_RUN, context=what, what=what, why=str(e))
        return result


def checked_apply(tx: Any, fn_cls: type, args: list, kwargs: dict) -> Any:
    """``fn_cls.apply(*args, **kwargs)`` under the checker, or None where the
    checker does not see it. Eager's checker replaces ``Function.apply`` with
    a descriptor that dispatches every apply on tensors to it (a Function
    registered with a ``typecheck_forward`` is checked by that, never looked
    inside); Dynamo traces ``cls.apply`` as the Function, past the mode, so
    it is dispatched here as eager dispatches it."""
    checker = _checker_on_top(tx)
    if checker is None or spmd_run.inside_applied_function(tx):
        return None
    if not any(C.dynamo.is_tensor(v) for v in (*args, *kwargs.values())):
        return None
    return checker.dispatch(tx, None, fn_cls, None, list(args), kwargs)


def _erased(tx: Any, fn: Any, applied: type | None, args: list, kwargs: dict) -> Any:
    """The call traced as with the checker off: an operator (``x * y``),
    which Dynamo dispatches to a mode as the tensor method eager's mode
    receives, is traced as the operator again (the same graph node); an
    ``autograd.Function``'s apply (``applied``; what the checker's
    descriptor hands it) is traced as that Function's apply, with nothing
    inside it checked: eager's checker runs an applied Function off the
    mode stack (or its ``typecheck_forward`` instead)."""
    if applied is not None:
        with spmd_run.applying_function(tx):
            return C.dynamo.call_autograd_apply(tx, applied, args, kwargs)
    behind = C.dynamo.operator_behind(tx, C.dynamo.known_value(fn))
    if behind is None:
        return fn.call_function(tx, args, kwargs)
    op, swapped = behind
    return C.dynamo.call_builtin(tx, op, args[::-1] if swapped and len(args) == 2 else args, kwargs)


def _applied_function(fn: Any) -> type | None:
    """The ``autograd.Function`` whose ``apply`` ``fn`` is: bound in the
    program, or bound by the checker's ``apply`` descriptor (which Dynamo
    keeps as the descriptor and the class)."""
    bound = C.dynamo.bound_descriptor(fn)
    if bound is not None and S.is_apply_descriptor(bound[0]) and isinstance(bound[1], type):
        return bound[1]
    return S.autograd_apply_class(C.dynamo.known_value(fn))


def _name(value: Any) -> str:
    return getattr(value, "__qualname__", None) or getattr(value, "__name__", None) or repr(value)


def checker_tracker(value: Any, source: Any = None) -> SpmdCheckerVariable:
    return SpmdCheckerVariable(value, source=source)


def _checker_on_top(tx: Any) -> Any:
    top = C.dynamo.top_mode_tracker(tx)
    return top if isinstance(top, SpmdCheckerVariable) else None


# -- spmd_types' functions ---------------------------------------------------------------
# handler(tracker, tx, member, args, kwargs) -> the answer's tracker.
CallHandler = Callable[["SpmdFunctionVariable", Any, Member, list, dict], Any]


def types_call(vt: SpmdFunctionVariable, tx: Any, member: Member, args: list, kwargs: dict) -> Any:
    """TYPES: run as itself now, on the frame's state and the traced tensors'
    types; its changes written back, its answer folded."""
    try:
        return spmd_run.run(tx, vt.value, args, kwargs, vt.name)
    except spmd_run.CannotRun as e:
        what = f"`spmd_types.{vt.name}`"
        graph_break(Break.SPMD_NOT_RUN, context=what, what=what, why=str(e))


def body_call(vt: SpmdFunctionVariable, tx: Any, member: Member, args: list, kwargs: dict) -> Any:
    """BODY: traced as the function its traceback-filtering wrapper calls."""
    return C.dynamo.inline_call(tx, S.unwrapped(vt.value), args, kwargs)


def context_call(vt: SpmdFunctionVariable, tx: Any, member: Member, args: list, kwargs: dict) -> Any:
    """CONTEXT: a context manager whose enter and exit run as themselves on
    the frame's state. ``typecheck()`` with no checker current starts type
    checking (patches torch, pushes a mode): the ``with`` runs eagerly."""
    if vt.value is S.facts().functions.get("typecheck") and spmd_run.frame_state(tx).mode is None:
        what = "spmd_types.checker.typecheck()"
        graph_break(Break.SPMD_CHECKER_ENTERED, context=what, what=what)
    return SpmdContextVariable(vt.value, vt.name, args, kwargs)


class SpmdFunctionVariable(ImportableObjectVariable):
    STATE = ("name",)
    KIND_HANDLERS: ClassVar[Mapping[Kind, CallHandler]] = {
        Kind.TYPES: types_call,
        Kind.BODY: body_call,
        Kind.CONTEXT: context_call,
    }

    def __init__(self, value: Any, name: str, **kwargs: Any) -> None:
        super().__init__(value, **kwargs)
        self.name = name

    def call_function(self, tx: Any, args: list, kwargs: dict) -> Any:
        member = SPMD_FUNCTIONS[self.name]
        return self.KIND_HANDLERS[member.kind](self, tx, member, args, kwargs)


SPMD_FUNCTIONS.require_handlers(SpmdFunctionVariable.KIND_HANDLERS, "SpmdFunctionVariable.KIND_HANDLERS")


class SpmdContextVariable(C.dynamo.ContextWrappingVariable):
    """``with spmd.no_typecheck():`` (``local()``, ``set_current_mesh(...)``,
    ``typecheck(...)`` under a current checker): the context manager itself,
    entered and exited at trace time on the frame's spmd_types state. At a
    graph break inside the block the resumed code enters it again, made by
    the same call."""

    _nonvar_fields = {"fn", "name", "cm", *C.dynamo.ContextWrappingVariable._nonvar_fields}

    def __init__(self, fn: Any, name: str, args: list, kwargs: dict, **rest: Any) -> None:
        super().__init__(target_values=None, **rest)
        self.fn, self.name, self.args, self.kwargs, self.cm = fn, name, list(args), dict(kwargs), None

    def module_name(self) -> str:
        return self.fn.__module__

    def fn_name(self) -> str:
        return self.fn.__name__

    def enter(self, tx: Any) -> Any:
        try:
            with spmd_run.StandIns(tx) as s:
                pargs = [s.real(a) for a in self.args]
                pkwargs = {k: s.real(v) for k, v in self.kwargs.items()}
        except spmd_run.CannotRun as e:
            what = f"`spmd_types.{self.name}(...)`"
            graph_break(Break.SPMD_NOT_RUN, context=what, what=what, why=str(e))
        try:
            with spmd_run.running(tx):
                self.cm = self.fn(*pargs, **pkwargs)
                self.cm.__enter__()
        except Exception as e:
            spmd_run.raise_in_program(tx, e)
        return C.dynamo.constant(None)

    def exit(self, tx: Any, *args: Any) -> Any:
        cm, self.cm = self.cm, None
        if cm is not None:
            with spmd_run.running(tx):
                cm.__exit__(None, None, None)
        return C.dynamo.constant(None)

    def reconstruct(self, codegen: Any) -> None:
        C.dynamo.emit_call_import(codegen, self.fn.__module__, self.fn.__name__, tuple(self.args), self.kwargs)

    def supports_graph_breaks(self) -> bool:
        return True

    def exit_on_graph_break(self) -> bool:
        return True

    def python_type(self) -> type:
        return type(self.cm) if self.cm is not None else object


# -- torch.overrides' dispatch functions ----------------------------------------------------

def tf_query(vt: TorchFunctionDispatchVariable, tx: Any, member: Member, args: list, kwargs: dict) -> Any:
    """TF_QUERY: True under the checker (a mode is on), as eager answers."""
    if _checker_on_top(tx) is None:
        return vt.stock(tx).call_function(tx, args, kwargs)
    return C.dynamo.constant(not C.dynamo.consume_skip_next(tx))


def tf_handler(vt: TorchFunctionDispatchVariable, tx: Any, member: Member, args: list, kwargs: dict) -> Any:
    """TF_HANDLER: ``handle_torch_function(public_api, relevant_args, *args,
    **kwargs)`` dispatches to the checker with the public API, as in eager
    (with the checker popped for the call). Tensor subclasses with their own
    ``__torch_function__`` among the arguments: stock's handling."""
    if _checker_on_top(tx) is None or len(args) < 2 or C.dynamo.list_items(args[1]) is None or any(
            not C.dynamo.is_tensor(a) and C.dynamo.known_value(a) is C.dynamo.NO_KNOWN_VALUE
            for a in C.dynamo.list_items(args[1])):
        return vt.stock(tx).call_function(tx, args, kwargs)
    public_api, _, *rest = args
    return C.dynamo.dispatch_to_mode(tx, public_api, C.dynamo.make_tuple([]), rest, kwargs)


class TorchFunctionDispatchVariable(ImportableObjectVariable):
    STATE = ("name",)
    KIND_HANDLERS: ClassVar[Mapping[Kind, CallHandler]] = {
        Kind.TF_QUERY: tf_query,
        Kind.TF_HANDLER: tf_handler,
    }

    def __init__(self, value: Any, name: str, **kwargs: Any) -> None:
        super().__init__(value, **kwargs)
        self.name = name

    def stock(self, tx: Any) -> Any:
        if self.source is not None:
            return C.stock.stock_wrap(tx, self.source, self.value)
        return C.stock.stock_create(tx, self.value)

    def call_function(self, tx: Any, args: list, kwargs: dict) -> Any:
        member = TORCH_FUNCTION_DISPATCH[self.name]
        return self.KIND_HANDLERS[member.kind](self, tx, member, args, kwargs)


TORCH_FUNCTION_DISPATCH.require_handlers(TorchFunctionDispatchVariable.KIND_HANDLERS,
                                         "TorchFunctionDispatchVariable.KIND_HANDLERS")


_DISPATCH_FUNCTIONS = {getattr(torch.overrides, name): name for name in TORCH_FUNCTION_DISPATCH}


def dispatch_functions() -> dict[Any, str]:
    """torch.overrides' dispatch functions, tracked while the frame being
    traced runs under spmd_types' checker (stock's own everywhere else)."""
    tx = C.dynamo.tracing_tx() if S.facts() is not None else None
    if tx is None or not any(S.is_checker_class(type(m)) for m in C.dynamo.frame_modes(tx)):
        return {}
    return _DISPATCH_FUNCTIONS


def spmd_functions() -> dict[Any, str]:
    """spmd_types' public functions the table has a row for (none while the
    program has not imported spmd_types)."""
    return S.functions()


# -- spmd_types' values ----------------------------------------------------------------------

class SpmdValueVariable(C.slots.ValueTracker):
    """An immutable spmd_types value (a ``MeshAxis``, a ``PartitionSpec``):
    a constant, whose members are answered by the real value, rebuilt in
    bytecode from its plain data."""

    def as_python_constant(self) -> Any:
        return self.value

    def is_python_constant(self) -> bool:
        return True

    def __repr__(self) -> str:
        return f"SpmdValueVariable({self.value!r})"

    def vt_hash(self, tx: Any) -> tuple[int, bool]:
        return hash(self.value), False

    def vt_richcompare(self, tx: Any, other: Any, op: str) -> Any:
        other_value = C.dynamo.known_value(other)
        if other_value is C.dynamo.NO_KNOWN_VALUE:
            return C.dynamo.constant(NotImplemented)
        return C.dynamo.constant(getattr(self.value, op)(other_value))

    def vt_repr(self, tx: Any) -> Any:
        return C.dynamo.constant(repr(self.value))

    def vt_str(self, tx: Any) -> Any:
        return C.dynamo.constant(str(self.value))

    def vt_hasattr(self, tx: Any, name: str) -> Any:
        return C.dynamo.constant(hasattr(self.value, name))

    def vt_bool(self, tx: Any) -> Any:
        return C.dynamo.constant(bool(self.value))

    def vt_getattr(self, tx: Any, name: str) -> Any:
        if not hasattr(self.value, name):
            C.dynamo.raise_observed(AttributeError, tx,
                                    [f"'{type(self.value).__name__}' object has no attribute '{name}'"])
        attr = getattr(self.value, name)
        if callable(attr) and not isinstance(attr, type):
            return C.dynamo.method_of(self, name)
        return C.dynamo.build_value(tx, attr)

    def call_method(self, tx: Any, name: str, args: list, kwargs: dict) -> Any:
        try:
            return spmd_run.run(tx, getattr(self.value, name), args, kwargs, name)
        except spmd_run.CannotRun as e:
            what = f"`{type(self.value).__name__}.{name}`"
            graph_break(Break.SPMD_NOT_RUN, context=what, what=what, why=str(e))

    def reconstruct(self, codegen: Any) -> None:
        C.dynamo.emit_call_import(codegen, S.__name__, "value_from_data", (S.value_data(self.value),))


def value_tracker(value: Any, source: Any = None, rebuild: Any = None) -> SpmdValueVariable:
    return SpmdValueVariable(value, source=source)


def install_value_guard(source: Any, value: Any) -> None:
    """A sourced axis or PartitionSpec: equal by value (its plain data)."""
    C.dynamo.guard_predicate(source, S.value_data, _same_value_check, f"dynamo_dist: `{source.name}` == {value!r}")


def _same_value_check(data: tuple) -> Callable[[Any], bool]:
    expected = S.value_from_data(data)
    kind = type(expected)
    return lambda v: type(v) is kind and v == expected


def _declare_values(facts: Any) -> None:
    classes = S.value_classes()
    declare(TrackedType(name="spmd_types value", python_type=classes, tracker=value_tracker,
                        guard=install_value_guard, sourceless=True, fast_types=classes))


SPMD_CHECKER = declare(TrackedType(
    name="spmd_types checker", python_type=torch.overrides.TorchFunctionMode, class_test=S.is_checker_class,
    tracker=checker_tracker))
SPMD_FUNCTION = declare(TrackedType(
    name="spmd_types function", python_type=types.FunctionType, objects=spmd_functions,
    tracker=SpmdFunctionVariable, members=SPMD_FUNCTIONS, guard=C.dynamo.guard_identity, rebuild=by_import))
TORCH_FUNCTION_DISPATCH_FUNCTION = declare(TrackedType(
    name="torch.overrides dispatch function", python_type=(types.BuiltinFunctionType, types.FunctionType),
    objects=dispatch_functions, tracker=TorchFunctionDispatchVariable, members=TORCH_FUNCTION_DISPATCH,
    guard=C.dynamo.guard_identity, rebuild=by_import))
S.on_loaded("values", _declare_values)
