"""How a sourceless tracked object is recreated: a root that can itself be
reconstructed, and steps replayed on it.

Each step is frozen data with its behaviour: ``apply(obj)`` replays it on a
real object (at run time, from the bytecode Dynamo emits), and
``apply_to_tracker(tx, vt)`` replays it on a stock tracker at trace time. In
bytecode a step travels as plain data (``as_data()``: a tuple of constants,
which ``LOAD_CONST`` can hold); ``apply_steps`` replays that data through the
same ``replay`` function each step class defines.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, ClassVar

from .. import _compat as C
from .breaks import Break, graph_break


class _Replayed:
    """A step applied to a real object the way bytecode replays it: from its
    data (``as_data``), through the class's ``replay``."""

    def apply(self, obj: Any) -> Any:
        return self.replay(obj, self.as_data())  # type: ignore[attr-defined]


@dataclass(frozen=True)
class GetAttr(_Replayed):
    """``obj.name``"""

    name: str
    TAG: ClassVar[str] = "attr"

    @staticmethod
    def replay(obj: Any, data: tuple) -> Any:
        return getattr(obj, data[1])

    def as_data(self) -> tuple:
        return (self.TAG, self.name)

    def apply_to_tracker(self, tx: Any, vt: Any) -> Any:
        return C.slots.slot_method(vt, "vt_getattr")(tx, self.name)


@dataclass(frozen=True)
class CallMethod(_Replayed):
    """``obj.name(*args, **dict(kwargs))``; ``kwargs`` is a sorted tuple of pairs."""

    name: str
    args: tuple = ()
    kwargs: tuple = ()
    TAG: ClassVar[str] = "call"

    @staticmethod
    def replay(obj: Any, data: tuple) -> Any:
        return getattr(obj, data[1])(*data[2], **dict(data[3]))

    def as_data(self) -> tuple:
        return (self.TAG, self.name, self.args, self.kwargs)

    def apply_to_tracker(self, tx: Any, vt: Any) -> Any:
        return vt.call_method(
            tx, self.name, [C.dynamo.constant(a) for a in self.args], {k: C.dynamo.constant(v) for k, v in self.kwargs}
        )


@dataclass(frozen=True)
class GetItem(_Replayed):
    """``obj[index]``"""

    index: Any
    TAG: ClassVar[str] = "item"

    @staticmethod
    def replay(obj: Any, data: tuple) -> Any:
        return obj[data[1]]

    def as_data(self) -> tuple:
        return (self.TAG, self.index)

    def apply_to_tracker(self, tx: Any, vt: Any) -> Any:
        return vt.call_method(tx, "__getitem__", [C.dynamo.constant(self.index)], {})


Step = GetAttr | CallMethod | GetItem
STEPS: tuple[type, ...] = (GetAttr, CallMethod, GetItem)
_REPLAY = {cls.TAG: cls.replay for cls in STEPS}


# Run as plain Python: Dynamo must not compile the torch.distributed frames a
# replay calls (DeviceMesh.get_group ...) as frames of their own.
@C.dynamo.dynamo_disable
def apply_steps(obj: Any, steps: tuple) -> Any:
    """Replay steps given as data (``Step.as_data()``) on ``obj``. Called
    from bytecode to rebuild a submesh or group from its parent."""
    for data in steps:
        obj = _REPLAY[data[0]](obj, data)
    return obj


class Rebuild:
    """How to recreate a sourceless tracked object in bytecode: take ``root``
    (a tracker that can itself be reconstructed) and replay ``steps``."""

    __slots__ = ("root", "steps")

    def __init__(self, root: Any, steps: tuple[Step, ...]) -> None:
        self.root, self.steps = root, steps

    def then(self, step: Step) -> "Rebuild":
        return Rebuild(self.root, self.steps + (step,))

    def __call__(self, codegen: Any) -> None:
        C.dynamo.emit_call_import(codegen, __name__, "apply_steps",
                           (self.root, tuple(s.as_data() for s in self.steps)))


def step_for(tracker: Any, step: Step) -> Rebuild:
    """The recipe for ``step`` applied to ``tracker``: appended to its own
    recipe when it has no source, else starting from it."""
    rebuild = getattr(tracker, "rebuild", None)
    if tracker.source is None and rebuild is not None:
        return rebuild.then(step)
    return Rebuild(tracker, (step,))


# -- how a tracked type is rebuilt (a declaration's ``rebuild``) ---------------
# rebuild(tracker, codegen): emit the bytecode that makes the object again.

def replay_derivation(vt: Any, codegen: Any) -> None:
    """By its recipe (``mesh["tp"]`` replayed on the mesh it came from); an
    object with none (not derived from a reconstructible one) is a clean break."""
    if vt.rebuild is None:
        graph_break(Break.NOT_RECONSTRUCTIBLE, context=repr(vt.value), label=vt.LABEL)
    vt.rebuild(codegen)


def by_import(vt: Any, codegen: Any) -> None:
    """A module-level function or class: imported by its qualified name."""
    C.dynamo.emit_import(codegen, vt.value.__module__, vt.value.__qualname__)


def from_source(vt: Any, codegen: Any) -> None:
    """Loaded again from where it was read (``DTensor.from_local`` is not
    importable by its qualified name)."""
    codegen(vt.source)
