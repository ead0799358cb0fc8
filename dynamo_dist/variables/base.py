"""Shared machinery of the dynamo_dist VariableTrackers.

A tracked object wraps the *real* mesh / placement / process group that is
known at trace time. Queries are answered by evaluating them on that real
object (constant folding) — soundness comes from the guards installed when a
sourced object is first wrapped (``dynamo_dist.guards``) and from sourceless
objects only ever being derived from guarded ones.
"""

from __future__ import annotations

import builtins
import inspect
import logging
import operator
from typing import Any, ClassVar

from .. import _compat as C
from .members import Kind, Member

GB_PREFIX = "dynamo_dist:"
log = logging.getLogger("dynamo_dist.fold")
break_log = logging.getLogger("dynamo_dist.breaks")

_RICHCOMPARE = {
    "__eq__": operator.eq,
    "__ne__": operator.ne,
    "__lt__": operator.lt,
    "__le__": operator.le,
    "__gt__": operator.gt,
    "__ge__": operator.ge,
}


def graph_break(gb_type: str, context: str, explanation: str, hints: list[str]) -> Any:
    """A clean, explained graph break. ``gb_type`` never carries per-call data."""
    break_log.debug("graph break %s %s (%s): %s Hint: %s", GB_PREFIX, gb_type, context, explanation,
                    " Hint: ".join(hints))
    C.unimplemented(
        gb_type=f"{GB_PREFIX} {gb_type}",
        context=context,
        explanation=explanation,
        hints=hints,
    )


def raise_like_eager(tx: Any, exc: BaseException) -> Any:
    """Re-raise an exception the real object raised, as the user's program
    would see it in eager mode."""
    exc_type = type(exc)
    if getattr(builtins, exc_type.__name__, None) is exc_type:
        C.raise_observed_exception(exc_type, tx, args=[str(a) for a in exc.args] or [str(exc)])
    graph_break(
        "query raised a non-builtin exception",
        f"{exc_type.__name__}: {exc}",
        f"The query raised {exc_type.__name__}: {exc}. Dynamo can only re-raise "
        "builtin exception types inside a compiled region.",
        ["Fix the call so it does not raise, or make it outside the compiled function."],
    )


_NO_VALUE = object()


def real_value(vt: C.VariableTracker) -> Any:
    """The trace-time value of a tracked object or constant, else _NO_VALUE."""
    if isinstance(vt, DistObjectVariable) or vt.is_python_constant():
        try:
            return vt.as_python_constant()
        except NotImplementedError:
            return _NO_VALUE
    if isinstance(vt, C.BaseListVariable):  # a tuple/list of placements, ...
        values = [real_value(i) for i in vt.items]
        if all(v is not _NO_VALUE for v in values):
            return vt.python_type()(values)
    return _NO_VALUE


def constant_args(tx: Any, what: str, args: list, kwargs: dict) -> tuple[list, dict]:
    """Python values of call arguments; a graph break if one is only known at run time."""
    values = [real_value(a) for a in args]
    kw_values = {k: real_value(v) for k, v in kwargs.items()}
    if all(v is not _NO_VALUE for v in (*values, *kw_values.values())):
        return values, kw_values
    graph_break(
        "argument is not a trace-time constant",
        f"{what} args={args} kwargs={kwargs}",
        f"`{what}` was called with an argument whose value is only known when the "
        "graph runs (a tensor or a dynamic value), so it cannot be folded.",
        [
            "Pass Python ints/strings (not tensors or SymInts) to mesh, placement "
            "and process-group queries.",
            "If the value comes from a tensor, compute it outside the compiled function.",
        ],
    )


def describe(value: Any) -> str:
    """Short, user-facing text for a folded value."""
    from torch.distributed import ProcessGroup

    if isinstance(value, ProcessGroup):
        return f"ProcessGroup(name={value.group_name!r}, size={value.size()})"
    if isinstance(value, (list, tuple)) and any(isinstance(v, ProcessGroup) for v in value):
        return f"[{', '.join(describe(v) for v in value)}]"
    return repr(value)


class Rebuild:
    """How to recreate a sourceless tracked object in bytecode: take ``root``
    (a tracker that can itself be reconstructed) and replay ``steps``."""

    __slots__ = ("root", "steps")

    def __init__(self, root: C.VariableTracker, steps: tuple) -> None:
        self.root, self.steps = root, steps

    def then(self, *step: Any) -> "Rebuild":
        return Rebuild(self.root, self.steps + (step,))

    def __call__(self, codegen: Any) -> None:
        codegen.add_push_null(
            lambda: codegen.load_import_from("dynamo_dist.variables._rebuild", "apply_steps")
        )
        codegen(self.root)
        codegen.extend_output([codegen.create_load_const(self.steps)])
        codegen.extend_output(C.create_call_function(2, False))


def step_for(tracker: C.VariableTracker, *step: Any) -> Rebuild:
    rebuild = getattr(tracker, "rebuild", None)
    if tracker.source is None and rebuild is not None:
        return rebuild.then(*step)
    return Rebuild(tracker, (step,))


class DistObjectVariable(C.VariableTracker):
    """Base tracker: a real distributed object, queried through a member table."""

    MEMBERS: ClassVar[dict[str, Member]] = {}
    LABEL: ClassVar[str] = "object"

    _nonvar_fields = {"value", "rebuild", *C.VariableTracker._nonvar_fields}

    def __init__(self, value: Any, rebuild: Rebuild | None = None, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.value = value
        self.rebuild = rebuild

    # -- identity ----------------------------------------------------------
    def python_type(self) -> type:
        return type(self.value)

    def as_python_constant(self) -> Any:
        return self.value

    def is_python_constant(self) -> bool:
        # Deliberately False although the value is known: Dynamo constant-folds
        # getattr/calls on "constants" by running them on the real object,
        # which would bypass our member table (and its breaks and guards).
        # Our own code asks for values through ``real_value``.
        return False

    def is_python_equal(self, other: object) -> bool:
        other_value = real_value(other) if isinstance(other, C.VariableTracker) else _NO_VALUE
        return other_value is not _NO_VALUE and self.value == other_value

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.value!r})"

    def debug_repr(self) -> str:
        return repr(self.value)

    # -- slots -------------------------------------------------------------
    def hash_impl(self, tx: Any) -> tuple[int, bool]:
        return hash(self.value), False

    def richcompare_impl(self, tx: Any, other: C.VariableTracker, op: str) -> C.VariableTracker:
        other_value = real_value(other)
        if other_value is _NO_VALUE:
            return C.ConstantVariable.create(NotImplemented)
        try:
            result = getattr(self.value, op)(other_value)
        except Exception as e:  # eager raises the same
            raise_like_eager(tx, e)
        return C.ConstantVariable.create(result)

    def repr_impl(self, tx: Any) -> C.VariableTracker:
        return C.ConstantVariable.create(repr(self.value))

    def str_impl(self, tx: Any) -> C.VariableTracker:
        return C.ConstantVariable.create(str(self.value))

    def call_obj_hasattr(self, tx: Any, name: str) -> C.VariableTracker:
        return C.ConstantVariable.create(hasattr(self.value, name))

    def bool_impl(self, tx: Any) -> C.VariableTracker | None:
        return C.ConstantVariable.create(bool(self.value))

    # -- as a graph value: delegate to stock ---------------------------------
    def stock_tracker(self, tx: Any) -> C.VariableTracker:
        """The tracker stock torch would have for this object: reloaded from
        our source, or rebuilt by replaying our derivation on the stock
        tracker of our root."""
        from .._hooks import stock_create, stock_wrap

        # One stock tracker per object per frame: each stock wrap of a mesh
        # adds a graph input, so it must happen once.
        cache = tx.output.__dict__.setdefault("_dynamo_dist_stock_trackers", {})
        key = self.source if self.source is not None else (
            id(self.rebuild.root), self.rebuild.steps) if self.rebuild is not None else id(self.value)
        if key in cache:
            return cache[key]
        if self.source is not None:
            cache[key] = stock_wrap(tx, self.source, self.value)
            return cache[key]
        if self.rebuild is None:
            cache[key] = stock_create(tx, self.value)
            return cache[key]
        root = self.rebuild.root
        tracker = root.stock_tracker(tx) if isinstance(root, DistObjectVariable) else root
        for step in self.rebuild.steps:
            if step[0] == "attr":
                tracker = tracker.var_getattr(tx, step[1])
            else:
                name, args, kwargs = (
                    (step[1], step[2], dict(step[3])) if step[0] == "call" else ("__getitem__", (step[1],), {})
                )
                tracker = tracker.call_method(
                    tx,
                    name,
                    [C.ConstantVariable.create(a) for a in args],
                    {k: C.ConstantVariable.create(v) for k, v in kwargs.items()},
                )
        cache[key] = tracker
        return tracker

    def as_proxy(self) -> Any:
        # Only reached when the object itself must be a graph value (an
        # argument to a DTensor op): give it exactly the form stock gives it.
        return self.stock_tracker(C.current_tx()).as_proxy()

    # -- reconstruction ----------------------------------------------------
    def reconstruct(self, codegen: Any) -> None:
        if self.rebuild is None:
            graph_break(
                f"{self.LABEL} cannot be reconstructed",
                repr(self.value),
                f"A {self.LABEL} built inside the compiled region escapes it, and "
                "dynamo_dist does not know how to rebuild it in bytecode.",
                [f"Return the inputs you need instead of the {self.LABEL}, or build it outside."],
            )
        self.rebuild(codegen)

    # -- members -----------------------------------------------------------
    def var_getattr(self, tx: Any, name: str) -> C.VariableTracker:
        member = self.MEMBERS.get(name)
        if member is None:
            return self.unknown_member(tx, name, None)
        if member.method:
            return C.GetAttrVariable(self, name, py_type=type(getattr(type(self.value), name, None)))
        return self.apply_member(tx, name, member, [], {})

    def call_method(self, tx: Any, name: str, args: list, kwargs: dict) -> C.VariableTracker:
        member = self.MEMBERS.get(name)
        if member is not None and member.method:
            return self.apply_member(tx, name, member, args, kwargs)
        if name.startswith("__") and name.endswith("__"):
            return super().call_method(tx, name, args, kwargs)
        return self.unknown_member(tx, name, (args, kwargs))

    def apply_member(
        self, tx: Any, name: str, member: Member, args: list, kwargs: dict
    ) -> C.VariableTracker:
        if member.kind is Kind.BREAK:
            graph_break(
                f"unsupported {self.LABEL} member",
                f"{type(self.value).__name__}.{name}",
                f"`{type(self.value).__name__}.{name}` is not supported inside a compiled "
                "region by dynamo_dist.",
                [member.hint],
            )
        if member.kind is Kind.RANK and C.compile_on_one_rank():
            return self.runtime_rank_member(tx, name, args, kwargs)
        return self.evaluate(tx, name, member.method, args, kwargs)

    def evaluate(self, tx: Any, name: str, method: bool, args: list, kwargs: dict) -> C.VariableTracker:
        """Evaluate ``value.name(*args)`` on the real object and wrap the answer."""
        what = f"{type(self.value).__name__}.{name}"
        pargs, pkwargs = constant_args(tx, what, args, kwargs)
        try:
            attr = getattr(self.value, name)
            result = attr(*pargs, **pkwargs) if method else attr
        except Exception as e:
            raise_like_eager(tx, e)
        if method:
            step = ("call", name, tuple(pargs), tuple(sorted(pkwargs.items())))
            call = ", ".join([*map(repr, pargs), *(f"{k}={v!r}" for k, v in pkwargs.items())])
            what = f"{what}({call})"
        else:
            step = ("attr", name)
        log.debug("folded %s -> %s", what, describe(result))
        return wrap_value(tx, result, step_for(self, *step), what)

    def runtime_rank_member(self, tx: Any, name: str, args: list, kwargs: dict) -> C.VariableTracker:
        return self.evaluate(tx, name, True, args, kwargs)

    def unknown_member(self, tx: Any, name: str, call: tuple | None) -> C.VariableTracker:
        """Members not in our table, handled the way stock torch would:
        missing -> AttributeError as in eager; members stock evaluates on the
        real object -> folded; members stock traces -> inlined; else a clean
        break."""
        cls = type(self.value)
        if not hasattr(self.value, name):
            C.raise_observed_exception(
                AttributeError, tx, args=[f"'{cls.__name__}' object has no attribute '{name}'"]
            )
        static = inspect.getattr_static(self.value, name, None)
        if call is None and callable(static) and not isinstance(static, property):
            # A method: decide at call time, when the arguments are known.
            return C.GetAttrVariable(self, name)
        stock_kind = C.stock_member_kind(cls, name)
        if stock_kind == "inlined" and inspect.isfunction(static):
            from torch._dynamo.variables.functions import UserFunctionVariable

            return UserFunctionVariable(static).call_function(tx, [self, *call[0]], call[1])
        if call is not None:
            if stock_kind == "use_real" or isinstance(static, property):
                return self.evaluate(tx, name, True, *call)
        else:
            value = getattr(self.value, name)
            if (stock_kind == "use_real" or isinstance(static, property)) and _foldable(value):
                return self.evaluate(tx, name, False, [], {})
            # Another attribute (``mesh._layout``, ``mesh._pg_registry``): read
            # it as Dynamo reads any Python object's attribute, guarded at its
            # source, so such code is never worse than on stock.
            if self.source is not None:
                return C.VariableBuilder(tx, C.AttrSource(self.source, name))(value)
            if stock_kind is not None:
                return self.stock_tracker(tx).var_getattr(tx, name)
        graph_break(
            f"unsupported {self.LABEL} member",
            f"{cls.__name__}.{name}",
            f"`{cls.__name__}.{name}` is not a member dynamo_dist can fold or trace, and "
            "stock torch has no safe handling for it either.",
            [
                "Move this access outside the compiled function and pass the result in.",
                f"Supported {self.LABEL} members: {', '.join(sorted(self.MEMBERS))}.",
            ],
        )


def _foldable(value: Any) -> bool:
    """Can ``wrap_value`` represent this answer (constants, distributed objects
    and tuples/lists of them)?"""
    from . import registry

    if isinstance(value, (tuple, list)):
        return all(_foldable(v) for v in value)
    return C.ConstantVariable.is_literal(value) or registry.tracker_for(value) is not None


class ImportableObjectVariable(C.VariableTracker):
    """A module-level class or function of torch.distributed (``Shard``,
    ``dist.get_rank``): a constant, compared by identity, rebuilt by import."""

    _nonvar_fields = {"value", *C.VariableTracker._nonvar_fields}

    def __init__(self, value: Any, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.value = value

    def python_type(self) -> type:
        return type(self.value)

    def as_python_constant(self) -> Any:
        return self.value

    def is_python_constant(self) -> bool:
        return True

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.value.__qualname__})"

    def hash_impl(self, tx: Any) -> tuple[int, bool]:
        return hash(self.value), False

    def richcompare_impl(self, tx: Any, other: C.VariableTracker, op: str) -> C.VariableTracker:
        if op in ("__eq__", "__ne__") and other.is_python_constant():
            eq = self.value is other.as_python_constant()
            return C.ConstantVariable.create(eq if op == "__eq__" else not eq)
        return C.ConstantVariable.create(NotImplemented)

    def call_obj_hasattr(self, tx: Any, name: str) -> C.VariableTracker:
        return C.ConstantVariable.create(hasattr(self.value, name))

    def reconstruct(self, codegen: Any) -> None:
        codegen.load_import_from(self.value.__module__, self.value.__qualname__)


def wrap_value(tx: Any, value: Any, rebuild: Rebuild, what: str) -> C.VariableTracker:
    """Wrap a query's answer: constants fold, distributed objects stay tracked."""
    from . import registry

    tracker = registry.tracker_for(value, rebuild)
    if tracker is not None:
        return tracker
    if isinstance(value, (tuple, list)):
        from torch._dynamo.variables.lists import ListVariable, TupleVariable

        items = [wrap_value(tx, v, rebuild.then("item", i), what) for i, v in enumerate(value)]
        if isinstance(value, tuple):
            return TupleVariable(items)
        from torch._dynamo.variables.base import ValueMutationNew

        return ListVariable(items, mutation_type=ValueMutationNew())
    if C.ConstantVariable.is_literal(value):
        return C.ConstantVariable.create(value)
    graph_break(
        "query result is not foldable",
        f"{what} -> {type(value).__name__}",
        f"`{what}` returned a {type(value).__name__}, which is neither a constant nor a "
        "mesh, placement or process group, so it cannot be folded into the graph.",
        [MOVE_OUT_HINT],
    )


MOVE_OUT_HINT = "Compute it outside the compiled function and pass the result in."
