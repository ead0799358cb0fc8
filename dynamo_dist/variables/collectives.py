"""torch.distributed collectives in a compiled region: the handlers of the
rows that trace a call as functional collectives (``Kind.COLLECTIVE``) or
hand it to torch's own point-to-point tracing (``Kind.P2P``), and the
``Work`` such a call returns (``WORK_MEMBERS``, its tracker and the
declarations ``COMPLETED_WORK`` and ``LIVE_WORK``).

A traced call is inlined as its form in ``_compat/c10d.py``: the collective,
its wait and the write-back into the call's tensors, as stock's rewrite of
``dist.all_reduce`` does. With ``async_op=True`` (and a ProcessGroup's
methods, which always return a ``Work``) the operations from the wait on are
remembered, and ``work.wait()`` moves them to where it is called: the graph
issues the collective where the program did and waits where the program
waits, with what runs between free to overlap, as in eager. A work that is
not waited in its graph (returned, stored, alive at a graph break, waited in
another subgraph, or dropped) waits where it was made, so the graph has
finished every collective it issued when it returns; such a work leaves the
graph as a finished ``CompletedWork`` (``wait()`` is True).

A ``Work`` made outside the compiled region (the backend's handle) cannot be
waited in a graph: its ``wait()`` is a clean break (``Break.LIVE_WORK``).
"""

from __future__ import annotations

import inspect
from typing import Any

from .. import _compat as C
from ..tracked_types import TrackedType, declare
from .base import DistObjectVariable, unsupported_member
from .breaks import GB_PREFIX, Break, first_line, graph_break
from .folding import NO_VALUE, real_value
from .members import Kind, Member, MemberTable

# -- calls -------------------------------------------------------------------


def _bound(tx: Any, fn: Any, args: list, kwargs: dict) -> dict:
    """The call's arguments by parameter name, as ``fn`` binds them (a wrong
    call raises eager's ``TypeError``)."""
    try:
        return dict(inspect.signature(fn).bind(*args, **kwargs).arguments)
    except TypeError as e:
        C.dynamo.raise_observed(TypeError, tx, [str(e)])


def _known(vt: Any) -> Any:
    """An argument's Python value now (a flag, a reduce op, an options
    struct), or NO_VALUE."""
    value = real_value(vt)
    if value is NO_VALUE:
        value = C.dynamo.object_value(vt)
    return NO_VALUE if value is C.dynamo.NO_KNOWN_VALUE else value


def _value(tx: Any, what: str, vt: Any) -> Any:
    value = _known(vt)
    if value is NO_VALUE:
        graph_break(Break.ARGUMENT_NOT_CONSTANT, context=f"{what}: {vt}", what=what)
    return value


def _op_name(tx: Any, what: str, vt: Any) -> str:
    op = _value(tx, what, vt)
    name = C.c10d.reduce_op_name(op)
    if name is None:
        graph_break(Break.REDUCE_OP_NOT_TRACEABLE, context=f"{what}: {op!r}", what=what, op=repr(op))
    return name


def traced_call(tx: Any, what: str, form: Any, args: list, kwargs: dict, asynchronous: bool) -> Any:
    """Inline ``form``; an asynchronous call answers a ``Work`` whose
    ``wait()`` is where the graph waits, a synchronous one None."""
    if C.dynamo.INPLACE_IN_FUNCTION_FORWARD_LOSES_GRAD and C.dynamo.in_autograd_function_forward(tx):
        graph_break(Break.INPLACE_IN_FUNCTION_FORWARD, context=what, what=what)
    mark = C.dynamo.graph_mark(tx)
    try:
        C.dynamo.inline_call(tx, form, args, kwargs)
    except C.dynamo.Unsupported as e:  # Dynamo's own words would name torch's internals, not the call
        if str(e).startswith(GB_PREFIX):
            raise
        reason = first_line(e)
        graph_break(Break.FORM_NOT_TRACED, context=f"{what}: {reason}", what=what, reason=reason)
    if not asynchronous:
        return C.dynamo.constant(None)
    graph, made = C.dynamo.nodes_since(tx, mark)
    first_wait = next((i for i, node in enumerate(made) if C.c10d.is_wait(node)), len(made))
    return WorkVariable(C.c10d.completed_work(), graph=graph, deferred=made[first_wait:], what=what)


def collective_call(vt: Any, tx: Any, member: Member, args: list, kwargs: dict) -> Any:
    """COLLECTIVE (a torch.distributed function): its traced form, with the
    call's arguments (the reduce op as the functional collectives name it)."""
    what = f"torch.distributed.{vt.name}"
    bound = _bound(tx, vt.value, args, kwargs)
    asynchronous = "async_op" in bound and bool(_value(tx, what, bound["async_op"]))
    if "op" in bound:
        bound["op"] = C.dynamo.constant(_op_name(tx, what, bound["op"]))
    return traced_call(tx, what, C.c10d.TRACED_FORMS[vt.name], [], bound, asynchronous)


def group_collective(vt: Any, tx: Any, name: str, member: Member, args: list, kwargs: dict) -> Any:
    """COLLECTIVE (a ProcessGroup method, which always returns a Work): its
    traced form on this group. Its tensors go as they are; its options (a
    reduce op, a root, an options struct, a timeout) are read now."""
    what = f"ProcessGroup.{name}"
    data, options = [], []
    for a in [*args, *kwargs.values()]:
        if C.dynamo.is_tensor(a) or C.dynamo.list_items(a) is not None:  # tensors, lists of them, split sizes
            if options:  # data after an option: not a form the traced methods know
                graph_break(Break.ARGUMENT_NOT_CONSTANT, context=f"{what}: {a}", what=what)
            data.append(a)
            continue
        value = _known(a)
        if value is NO_VALUE or not C.c10d.is_group_method_option(value):
            graph_break(Break.ARGUMENT_NOT_CONSTANT, context=f"{what}: {a}", what=what)
        options.append(value)
    try:
        decoded = C.c10d.group_method_options(options)
    except C.c10d.UnsupportedOption as e:
        graph_break(Break.OPTION_NOT_TRACEABLE, context=f"{what}: {e}", what=what, option=str(e))
    return traced_call(tx, what, C.c10d.GROUP_METHOD_FORMS[name], [vt, *data],
                       {k: C.dynamo.constant(v) for k, v in decoded.items()}, asynchronous=True)


def stock_call(vt: Any, tx: Any, member: Member, args: list, kwargs: dict) -> Any:
    """STOCK: the call as stock Dynamo traces it; where stock cannot, a
    break that names the call."""
    what = f"torch.distributed.{vt.name}"
    stock = C.stock.stock_wrap(tx, vt.source, vt.value) if vt.source is not None else C.stock.stock_create(tx, vt.value)
    try:
        return stock.call_function(tx, args, kwargs)
    except C.dynamo.Unsupported as e:
        reason = first_line(e)
        graph_break(Break.NOT_TRACED_BY_TORCH, context=f"{what}: {reason}", what=what, reason=reason)


def p2p_call(vt: Any, tx: Any, member: Member, args: list, kwargs: dict) -> Any:
    """P2P: torch's own tracing when its switch is on, else a clean break."""
    what = f"torch.distributed.{vt.name}"
    if not C.c10d.HAS_P2P_SWITCH:
        graph_break(Break.P2P_NOT_TRACED, context=what, what=what)
    if not C.c10d.p2p_compilation():
        graph_break(Break.P2P_SWITCH_OFF, context=what, what=what)
    return stock_call(vt, tx, member, args, kwargs)


# -- Work --------------------------------------------------------------------

_NOT_IN_A_GRAPH = ("Call wait() instead (the graph waits there), or read it outside the compiled function: it "
                   "asks the backend about a collective at run time.")

WORK_MEMBERS = MemberTable("Work", {
    "wait": Member(Kind.WAIT, method=True),
    **{name: Member(Kind.BREAK, method=True, hint=_NOT_IN_A_GRAPH)
       for name in ("is_completed", "is_success", "exception", "get_future", "get_future_result", "result",
                    "source_rank", "synchronize", "block_current_stream")},
})


def wait_member(vt: Any, tx: Any, name: str, member: Member, args: list, kwargs: dict) -> Any:
    """WAIT (a Work made in the graph): the graph waits here for its
    collective; a second wait, or one of a work from elsewhere, waits for
    nothing more (eager's ``wait()`` is True)."""
    if vt.deferred and C.dynamo.move_to_end(tx, vt.graph, vt.deferred):
        vt.deferred = []
    return C.dynamo.constant(True)


def live_wait(vt: Any, tx: Any, name: str, member: Member, args: list, kwargs: dict) -> Any:
    """WAIT (the backend's handle, made outside the graph): a clean break."""
    what = f"{type(vt.value).__name__}.{name}"
    graph_break(Break.LIVE_WORK, context=what, what=what)


class WorkVariable(DistObjectVariable):
    """A ``Work`` made in the graph (``async_op=True``), or a finished one
    (``CompletedWork``) read from a source: ``wait()`` is where the graph
    waits. ``deferred``: the operations (of ``graph``) from the collective's
    wait on, which ``wait()`` moves to where it is called."""

    MEMBERS = WORK_MEMBERS
    LABEL = "Work"
    KIND_HANDLERS = {Kind.WAIT: wait_member, Kind.BREAK: unsupported_member}
    STATE = ("graph", "deferred", "what")

    def __init__(self, value: Any, graph: Any = None, deferred: list | None = None, what: str = "",
                 **kwargs: Any) -> None:
        super().__init__(value, **kwargs)
        self.graph = graph
        self.deferred = list(deferred or [])
        self.what = what

    def __repr__(self) -> str:
        return f"WorkVariable({self.what or self.value!r})"


class LiveWorkVariable(DistObjectVariable):
    """The backend's ``Work`` of a collective started outside the graph."""

    MEMBERS = WORK_MEMBERS
    LABEL = "Work"
    KIND_HANDLERS = {Kind.WAIT: live_wait, Kind.BREAK: unsupported_member}


def _guard_type(source: Any, value: Any) -> None:
    C.dynamo.guard_type(source)  # a finished work and the backend's handle are handled apart


def _new_completed_work(vt: Any, codegen: Any) -> None:
    C.dynamo.emit_call_import(codegen, C.c10d.__name__, "completed_work")


COMPLETED_WORK = declare(TrackedType(
    name="Work (made in a compiled region)",
    python_type=C.c10d.CompletedWork,
    tracker=WorkVariable,
    members=WORK_MEMBERS,
    guard=_guard_type,
    # Finished when it leaves the graph: made again as a finished work.
    rebuild=_new_completed_work,
    sourceless=True,
))

LIVE_WORK = declare(TrackedType(
    name="Work",
    python_type=C.c10d.WORK_TYPE,
    tracker=LiveWorkVariable,
    members=WORK_MEMBERS,
    guard=_guard_type,
))
