"""DTensor's modes entered inside a compiled region: ``with loss_parallel():``.

A mode changes how DTensor dispatches ops for the code it wraps (process-wide
state, set by a context manager). Dynamo inlines the context manager and
records the state change as a side effect to replay after the graph, but
traces the ops inside with fake DTensors dispatched *without* it: under
``loss_parallel()`` the loss ops of a class-sharded DTensor then fail in
Dynamo's fake propagation ("got mixed torch.Tensor and DTensor") on torch
2.11-2.13, and on 2.14+ trace only as far as an untraceable builtin inside
them. Entering the mode is a clean graph break instead (``Kind.BREAK``): the
``with`` runs eagerly, and Dynamo resumes inside it with the mode on, so the
code inside compiles with DTensor's own handling of it, on every release.

``implicit_replication()`` turns on a switch DTensor's dispatch reads, a
C++ one Dynamo cannot trace: stock breaks inside the ``with``'s enter, and
where the graph before it holds a single call (a mesh the plugin folded)
Dynamo runs the whole frame eagerly and compiles the torch functions it calls
as frames of their own. The plugin traces the ``with`` as that switch
(``Kind.SWITCH``): set at trace time, so Dynamo's fake propagation of the ops
inside sees it, and as a node in the graph, so AOTAutograd's replay does;
restored at its exit, entered again where a break resumes inside it.
"""

from __future__ import annotations

import contextlib
import functools
import types
from typing import Any, Callable, ClassVar, Iterator, Mapping

import torch.distributed.tensor.experimental as dtensor_experimental
import torch.distributed.tensor.parallel as tensor_parallel

from .. import _compat as C
from ..tracked_types import TrackedType, declare
from .breaks import Break, graph_break
from .importable import ImportableObjectVariable
from .members import Kind, Member, MemberTable
from .rebuild import by_import

_OUTSIDE = ("Keep the `with` where it is for right results: the code inside it compiles with the mode on. For "
            "one graph, enter `with {name}():` around the compiled call instead, and call it under the mode every "
            "time (the compiled function is not guarded on the mode).")

# mode -> (why it matters, the row). The modules the functions are found in: ``_MODULES``.
_WHY = {
    "loss_parallel": "the loss ops of a class-sharded DTensor: cross_entropy, nll_loss, log_softmax",
    "implicit_replication": "plain tensors mixed with DTensors are taken as replicated",
}
DTENSOR_MODES = MemberTable("DTensor modes", {
    "loss_parallel": Member(Kind.BREAK, method=True, hint=_OUTSIDE.format(name="loss_parallel")),
    "implicit_replication": Member(Kind.SWITCH, method=True),
}, calls_only=True)
_MODULES = (tensor_parallel, dtensor_experimental)


@functools.cache
def _public_names() -> dict[Any, str]:
    """The context-manager functions of ``DTENSOR_MODES`` -> the name users import them by."""
    found = {}
    for name in DTENSOR_MODES:
        module = next((m for m in _MODULES if hasattr(m, name)), None)
        if module is not None:
            found[getattr(module, name)] = f"{module.__name__}.{name}"
    return found


def mode_functions() -> dict[Any, str]:
    """The context-manager functions of ``DTENSOR_MODES``, mapped to their row."""
    return {fn: public.rpartition(".")[2] for fn, public in _public_names().items()}


def mode_break(vt: DTensorModeVariable, tx: Any, member: Member, args: list, kwargs: dict) -> Any:
    """BREAK: entered eagerly, with the row's hint."""
    what = f"{_public_names()[vt.value]}()"
    graph_break(Break.DTENSOR_MODE, context=what, what=what, why=_WHY[vt.name], hint=member.hint)


def mode_switch(vt: DTensorModeVariable, tx: Any, member: Member, args: list, kwargs: dict) -> Any:
    """SWITCH: the context manager, traced as the switch it turns on."""
    if args or kwargs:
        what = f"{_public_names()[vt.value]}(...)"
        graph_break(Break.DTENSOR_MODE, context=what, what=what, why="it takes no arguments",
                    hint="Call it as `with implicit_replication():`.")
    return DTensorSwitchVariable(vt.value)


class DTensorSwitchVariable(C.dynamo.ContextWrappingVariable):
    """``with implicit_replication():`` as the switch it turns on: on at
    enter, its value before restored at exit, at trace time and in the graph
    (the value the switch had where the graph entered the block, read by the
    graph, so a replay under the switch leaves it on), and
    ``implicit_replication()`` made again where a break resumes inside the
    block."""

    _nonvar_fields = {"fn", "before", "before_node", *C.dynamo.ContextWrappingVariable._nonvar_fields}

    def __init__(self, fn: Any, **rest: Any) -> None:
        super().__init__(target_values=None, **rest)
        self.fn, self.before, self.before_node = fn, None, None

    def enter(self, tx: Any) -> Any:
        # The nodes whatever the switch is now: the graph may run where it is off.
        get, set_ = C.distributed.implicit_replication_switch()
        self.before = get()
        self.before_node = C.dynamo.graph_state_call(tx, get)
        C.dynamo.graph_state_call(tx, set_, True)
        set_(True)
        self.set_cleanup_hook(tx, lambda: self._restore(tx))
        return C.dynamo.constant(None)

    def _restore(self, tx: Any) -> None:
        if self.before_node is not None:
            set_ = C.distributed.implicit_replication_switch()[1]
            C.dynamo.graph_state_call(tx, set_, self.before_node)
            set_(self.before)
            self.before_node = None

    def module_name(self) -> str:
        return self.fn.__module__

    def fn_name(self) -> str:
        return self.fn.__name__

    def reconstruct(self, codegen: Any) -> None:
        C.dynamo.emit_call_import(codegen, self.fn.__module__, self.fn.__name__)

    def python_type(self) -> type:
        return contextlib.AbstractContextManager


@contextlib.contextmanager
def compiled_under_switch(gm: Any) -> Iterator[None]:
    """Compile ``gm`` with the switch on where the graph turns it on: the
    backend traces the backward of the ops inside the block after the
    forward, where the graph's own restore (to the value it read at the
    block's entry: on, here) leaves it on, so DTensor's dispatch of those
    gradients reads it as eager's backward does under the mode. The switch
    only lets through what would otherwise raise (Dynamo's fake propagation
    already ran every forward op under the program's own state)."""
    get, set_ = C.distributed.implicit_replication_switch()
    if get() or not any(n.op == "call_function" and n.target is set_ and n.args == (True,) for n in gm.graph.nodes):
        yield
        return
    set_(True)
    try:
        yield
    finally:
        set_(False)


class DTensorModeVariable(ImportableObjectVariable):
    STATE = ("name",)
    KIND_HANDLERS: ClassVar[Mapping[Kind, Callable[..., Any]]] = {Kind.BREAK: mode_break, Kind.SWITCH: mode_switch}

    def __init__(self, value: Any, name: str, **kwargs: Any) -> None:
        super().__init__(value, **kwargs)
        self.name = name

    def call_function(self, tx: Any, args: list, kwargs: dict) -> Any:
        member = DTENSOR_MODES[self.name]
        return self.KIND_HANDLERS[member.kind](self, tx, member, args, kwargs)


DTENSOR_MODES.require_handlers(DTensorModeVariable.KIND_HANDLERS, "DTensorModeVariable.KIND_HANDLERS")

DTENSOR_MODE = declare(TrackedType(
    name="DTensor mode", python_type=types.FunctionType, objects=mode_functions,
    tracker=DTensorModeVariable, members=DTENSOR_MODES, guard=C.dynamo.guard_identity, rebuild=by_import))
