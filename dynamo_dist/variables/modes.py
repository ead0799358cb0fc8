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

``implicit_replication()`` is a mode of the same kind; from 2.12 Dynamo
traces it (a C++ switch Dynamo's fake propagation sees), so its row exists
only where it does not (``C.distributed.IMPLICIT_REPLICATION_TRACED``).
"""

from __future__ import annotations

import functools
import types
from typing import Any, Callable, ClassVar, Mapping

import torch.distributed.tensor.experimental as dtensor_experimental
import torch.distributed.tensor.parallel as tensor_parallel

from .. import _compat as C
from ..guards import install_identity_guard
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
    name: Member(Kind.BREAK, method=True, hint=_OUTSIDE.format(name=name))
    for name in ("loss_parallel", *(() if C.distributed.IMPLICIT_REPLICATION_TRACED else ("implicit_replication",)))
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


class DTensorModeVariable(ImportableObjectVariable):
    STATE = ("name",)
    KIND_HANDLERS: ClassVar[Mapping[Kind, Callable[..., Any]]] = {Kind.BREAK: mode_break}

    def __init__(self, value: Any, name: str, **kwargs: Any) -> None:
        super().__init__(value, **kwargs)
        self.name = name

    def call_function(self, tx: Any, args: list, kwargs: dict) -> Any:
        member = DTENSOR_MODES[self.name]
        return self.KIND_HANDLERS[member.kind](self, tx, member, args, kwargs)


DTENSOR_MODES.require_handlers(DTensorModeVariable.KIND_HANDLERS, "DTensorModeVariable.KIND_HANDLERS")

DTENSOR_MODE = declare(TrackedType(
    name="DTensor mode", python_type=types.FunctionType, objects=mode_functions,
    tracker=DTensorModeVariable, members=DTENSOR_MODES, guard=install_identity_guard, rebuild=by_import))
