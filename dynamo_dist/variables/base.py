"""The base tracker of a real distributed object, queried through its member
table.

A tracked object wraps the *real* mesh / placement / process group that is
known at trace time. Queries are answered by evaluating them on that real
object (constant folding) — soundness comes from the guards installed when a
sourced object is first wrapped (``dynamo_dist.guards``) and from sourceless
objects only ever being derived from guarded ones.

Each row of a member table has a ``Kind``, and the Kind alone selects the
handler function (``KIND_HANDLERS``, Kind -> function); a tracker specialises a
Kind by giving its own table another function for it, never by testing a
member's name. A tracker class whose table has a row of a Kind it has no
handler for fails when the class is defined.
"""

from __future__ import annotations

import inspect
from typing import Any, Callable, ClassVar, Mapping

from .. import _compat as C
from .. import tracked_types
from .breaks import Break, short_repr, graph_break, log, raise_like_eager
from .folding import NO_VALUE, constant_args, real_value
from .identity import Identity
from .members import Kind, Member, MemberTable
from .rebuild import CallMethod, GetAttr, Rebuild, step_for
from .runtime_rank import tensor_in_graph
from .wrap import foldable, wrap_value


def _identity_hashed_without_guard(vt: Any) -> bool:
    # An identity hash (ProcessGroup) may be a constant only where a guard
    # pins the object's identity (a sourced object).
    return isinstance(vt, DistObjectVariable) and vt.vt_hash(None)[1] and vt.source is None


def folds_builtin(args: tuple, ours: str) -> bool:
    """Whether ``fold_builtin`` answers for the builtin's ``args``: one of our
    trackers; for ``hash``, also a tuple holding one whose items are all known
    now (2.11 / 2.12 cannot hash any tuple: ``hash(placements)`` would break).
    (``is`` is ``identity.fold_is``'s.)"""
    if len(args) != 1:
        return False
    (vt,) = args
    if C.dynamo.is_tracker(vt) and hasattr(vt, ours):
        return True
    items = C.dynamo.list_items(vt) if ours == "vt_hash" and C.dynamo.is_tracker(vt) else None
    return (items is not None and vt.python_type() is tuple
            and any(isinstance(i, DistObjectVariable) for i in items)
            and not any(_identity_hashed_without_guard(i) for i in items)
            and real_value(vt) is not NO_VALUE)


def fold_builtin(tx: Any, args: tuple, ours: str, builtin: str) -> Any:
    """``str`` / ``repr`` / ``hash`` of our trackers (``folds_builtin``), for
    the releases whose builtins never reach a tracker (``C.slots.BUILTIN_HOOKS``)."""
    (tracker,) = args
    if ours != "vt_hash":
        return getattr(tracker, ours)(tx)
    if not isinstance(tracker, C.slots.Tracker):  # a tuple (``folds_builtin``)
        return C.dynamo.constant(hash(real_value(tracker)))
    value, by_identity = tracker.vt_hash(tx)
    if by_identity and tracker.source is None:
        graph_break(Break.IDENTITY_HASH, context=repr(tracker))
    return C.dynamo.constant(value)


# -- the handler of each Kind ------------------------------------------------
# handler(tracker, tx, name, member, args, kwargs) -> the answer's tracker.
Handler = Callable[["DistObjectVariable", Any, str, Member, list, dict], Any]


def fold_member(vt: DistObjectVariable, tx: Any, name: str, member: Member, args: list, kwargs: dict) -> Any:
    """FOLD: evaluated on the real object; the answer is a constant, or stays
    tracked (a mesh, a tuple of groups) and rebuilds from this object."""
    return vt.evaluate(tx, name, member.method, args, kwargs)


def rank_member(vt: DistObjectVariable, tx: Any, name: str, member: Member, args: list, kwargs: dict) -> Any:
    """RANK: folded, or a runtime op under ``compile_on_one_rank``."""
    if C.distributed.compile_on_one_rank():
        return vt.runtime_rank_member(tx, name, args, kwargs)
    return vt.evaluate(tx, name, member.method, args, kwargs)


def group_member(vt: DistObjectVariable, tx: Any, name: str, member: Member, args: list, kwargs: dict) -> Any:
    """GROUP: a tracked process group derived from this object (the mesh
    tracker's handler also records which mesh dim it is)."""
    return vt.evaluate(tx, name, member.method, args, kwargs)


def tensor_member(vt: DistObjectVariable, tx: Any, name: str, member: Member, args: list, kwargs: dict) -> Any:
    """TENSOR: a tensor rebuilt in the graph from the folded values (the
    guard on this object pins them), as ``torch.tensor(...)``."""
    pargs, pkwargs = constant_args(tx, f"{type(vt.value).__name__}.{name}", args, kwargs)
    try:
        attr = getattr(vt.value, name)
        value = attr(*pargs, **pkwargs) if member.method else attr
    except Exception as e:
        raise_like_eager(tx, e)
    return tensor_in_graph(tx, value.tolist())


def unsupported_member(vt: DistObjectVariable, tx: Any, name: str, member: Member, args: list,
                       kwargs: dict) -> Any:
    """BREAK: a clean graph break with the row's hint (and its cause, when
    the row names why the member cannot be in a graph)."""
    what = f"{type(vt.value).__name__}.{name}"
    if member.cause is not None:
        graph_break(member.cause, context=what, what=what, hint=member.hint)
    graph_break(Break.UNSUPPORTED_MEMBER, context=what, label=vt.LABEL, what=what, hint=member.hint)


class DistObjectVariable(C.slots.Tracker):
    """Base tracker: a real distributed object, queried through a member table."""

    MEMBERS: ClassVar[MemberTable] = MemberTable("object", {})
    LABEL: ClassVar[str] = "object"
    # Kind -> the function that handles a row of that kind (DTENSOR_OP rows
    # are DTensor's, handled in variables/dtensor.py).
    KIND_HANDLERS: ClassVar[Mapping[Kind, Handler]] = {
        Kind.FOLD: fold_member,
        Kind.RANK: rank_member,
        Kind.GROUP: group_member,
        Kind.TENSOR: tensor_member,
        Kind.BREAK: unsupported_member,
    }
    REAL_VALUE_KNOWN = True
    STATE = ("value", "rebuild")
    # Private attributes torch's own traced code reads, folded like FOLD rows
    # (not table rows: users do not write them).
    FOLDED_PRIVATE: ClassVar[tuple[str, ...]] = ()

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        cls.MEMBERS.require_handlers(cls.KIND_HANDLERS, f"{cls.__name__}.KIND_HANDLERS")

    def __init__(self, value: Any, rebuild: Rebuild | None = None, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.value = value
        self.rebuild = rebuild

    # -- identity ----------------------------------------------------------
    def identity(self) -> Identity:
        """What the guards fix of this object (``identity.fold_is``): its value."""
        return Identity.BY_VALUE

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

    def vt_python_equal(self, other: object) -> bool:
        other_value = real_value(other) if C.dynamo.is_tracker(other) else NO_VALUE
        return other_value is not NO_VALUE and self.value == other_value

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.value!r})"

    def debug_repr(self) -> str:
        return repr(self.value)

    # -- slots -------------------------------------------------------------
    def vt_hash(self, tx: Any) -> tuple[int, bool]:
        return hash(self.value), False

    def vt_richcompare(self, tx: Any, other: Any, op: str) -> Any:
        other_value = real_value(other)
        if other_value is NO_VALUE:
            return C.dynamo.constant(NotImplemented)
        try:
            result = getattr(self.value, op)(other_value)
        except Exception as e:  # eager raises the same
            raise_like_eager(tx, e)
        return C.dynamo.constant(result)

    def vt_repr(self, tx: Any) -> Any:
        return C.dynamo.constant(repr(self.value))

    def vt_str(self, tx: Any) -> Any:
        return C.dynamo.constant(str(self.value))

    def vt_hasattr(self, tx: Any, name: str) -> Any:
        return C.dynamo.constant(hasattr(self.value, name))

    def vt_bool(self, tx: Any) -> Any:
        return C.dynamo.constant(bool(self.value))

    # -- as a graph value: delegate to stock ---------------------------------
    def stock_tracker(self, tx: Any) -> Any:
        """The tracker stock torch would have for this object: reloaded from
        our source, or rebuilt by replaying our derivation on the stock
        tracker of our root."""
        # One stock tracker per object: per frame for a sourced object (each
        # stock wrap adds a graph input, which every subgraph can lift), per
        # graph for a derived one (replaying its steps makes graph ops, which
        # a sibling subgraph, another autograd.Function's backward, cannot use).
        cache = C.dynamo.frame_state(tx, "stock_trackers") if self.source is not None else \
            C.dynamo.tracer_state(tx, "stock_trackers")
        key = self.source if self.source is not None else (
            id(self.rebuild.root), self.rebuild.steps) if self.rebuild is not None else id(self.value)
        if key in cache:
            return cache[key]
        if self.source is not None:
            cache[key] = C.stock.stock_wrap(tx, self.source, self.value)
            return cache[key]
        if self.rebuild is None:
            cache[key] = C.stock.stock_create(tx, self.value)
            return cache[key]
        root = self.rebuild.root
        tracker = root.stock_tracker(tx) if isinstance(root, DistObjectVariable) else root
        for step in self.rebuild.steps:
            tracker = step.apply_to_tracker(tx, tracker)
        cache[key] = tracker
        return tracker

    def as_proxy(self) -> Any:
        # Only reached when the object itself must be a graph value (an
        # argument to a DTensor op): give it exactly the form stock gives it.
        return self.stock_tracker(C.dynamo.current_tx()).as_proxy()

    # -- reconstruction ----------------------------------------------------
    def reconstruct(self, codegen: Any) -> None:
        # An escaping object is made again as its type declares.
        tracked_types.declaration(self.value).rebuild(self, codegen)

    # -- members -----------------------------------------------------------
    def vt_getattr(self, tx: Any, name: str) -> Any:
        if name == "__class__":  # the class tracker ``type(obj)`` gives
            cls = type(self.value)
            if self.source is not None:
                return C.dynamo.wrap_sourced(tx, C.dynamo.attr_source(self.source, name), cls)
            return C.dynamo.SourcelessBuilder.create(tx, cls)
        member = self.MEMBERS.get(name)
        if member is None:
            return self.unknown_member(tx, name, None)
        if member.method:
            return C.dynamo.method_of(self, name, py_type=type(getattr(type(self.value), name, None)))
        return self.apply_member(tx, name, member, [], {})

    def call_method(self, tx: Any, name: str, args: list, kwargs: dict) -> Any:
        member = self.MEMBERS.get(name)
        if member is not None and member.method:
            return self.apply_member(tx, name, member, args, kwargs)
        if name.startswith("__") and name.endswith("__"):
            return super().call_method(tx, name, args, kwargs)
        return self.unknown_member(tx, name, (args, kwargs))

    def apply_member(self, tx: Any, name: str, member: Member, args: list, kwargs: dict) -> Any:
        """Dispatch a table row to the handler of its Kind."""
        return self.KIND_HANDLERS[member.kind](self, tx, name, member, args, kwargs)

    def evaluate(self, tx: Any, name: str, method: bool, args: list, kwargs: dict) -> Any:
        """Evaluate ``value.name(*args)`` on the real object and wrap the answer."""
        what = f"{type(self.value).__name__}.{name}"
        pargs, pkwargs = constant_args(tx, what, args, kwargs)
        try:
            attr = getattr(self.value, name)
            result = attr(*pargs, **pkwargs) if method else attr
        except Exception as e:
            raise_like_eager(tx, e)
        if method:
            step = CallMethod(name, tuple(pargs), tuple(sorted(pkwargs.items())))
            call = ", ".join([*map(repr, pargs), *(f"{k}={v!r}" for k, v in pkwargs.items())])
            what = f"{what}({call})"
        else:
            step = GetAttr(name)
        log.debug("folded %s -> %s", what, short_repr(result))
        return wrap_value(tx, result, step_for(self, step), what)

    def runtime_rank_member(self, tx: Any, name: str, args: list, kwargs: dict) -> Any:
        return self.evaluate(tx, name, True, args, kwargs)

    def unknown_member(self, tx: Any, name: str, call: tuple | None) -> Any:
        """Members not in our table, handled the way stock torch would:
        missing -> AttributeError as in eager; members stock evaluates on the
        real object -> folded; members stock traces -> inlined; else a clean
        break."""
        cls = type(self.value)
        if name in self.FOLDED_PRIVATE and call is None:
            return self.evaluate(tx, name, False, [], {})
        if not hasattr(self.value, name):
            C.dynamo.raise_observed(AttributeError, tx, [f"'{cls.__name__}' object has no attribute '{name}'"])
        static = inspect.getattr_static(self.value, name, None)
        if call is None and callable(static) and not isinstance(static, property):
            # A method: decide at call time, when the arguments are known.
            return C.dynamo.method_of(self, name)
        stock_kind = C.stock.stock_member_kind(cls, name)
        if stock_kind == "inlined" and inspect.isfunction(static):
            return C.dynamo.inline_call(tx, static, [self, *call[0]], call[1])
        if call is not None:
            if stock_kind == "use_real" or isinstance(static, property):
                return self.evaluate(tx, name, True, *call)
        else:
            value = getattr(self.value, name)
            if (stock_kind == "use_real" or isinstance(static, property)) and foldable(value):
                return self.evaluate(tx, name, False, [], {})
            # Another attribute (``mesh._layout``, ``mesh._pg_registry``): read
            # it as Dynamo reads any Python object's attribute, guarded at its
            # source, so such code is never worse than on stock.
            if self.source is not None:
                return C.dynamo.wrap_sourced(tx, C.dynamo.attr_source(self.source, name), value)
            if stock_kind is not None:
                return C.slots.slot_method(self.stock_tracker(tx), "vt_getattr")(tx, name)
        what = f"{cls.__name__}.{name}"
        graph_break(Break.UNKNOWN_MEMBER, context=what, label=self.LABEL, what=what,
                    members=", ".join(sorted(self.MEMBERS)))
