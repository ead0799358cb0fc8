"""Module-level classes and functions of torch.distributed as trackers."""

from __future__ import annotations

from typing import Any

from .. import _compat as C
from .. import tracked_types
from .identity import Identity


class ImportableObjectVariable(C.slots.ValueTracker):
    """A module-level class or function of torch.distributed (``Shard``,
    ``dist.get_rank``): a constant, compared by identity, rebuilt as its type
    declares (by import)."""

    def as_python_constant(self) -> Any:
        return self.value

    def is_python_constant(self) -> bool:
        return True

    def identity(self) -> Identity:
        return Identity.PINNED  # a class or function is guarded as itself

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.value.__qualname__})"

    def vt_hash(self, tx: Any) -> tuple[int, bool]:
        return hash(self.value), False

    def vt_richcompare(self, tx: Any, other: Any, op: str) -> Any:
        if op in ("__eq__", "__ne__") and other.is_python_constant():
            eq = self.value is other.as_python_constant()
            return C.dynamo.constant(eq if op == "__eq__" else not eq)
        return C.dynamo.constant(NotImplemented)

    def vt_hasattr(self, tx: Any, name: str) -> Any:
        return C.dynamo.constant(hasattr(self.value, name))

    def reconstruct(self, codegen: Any) -> None:
        # As its type declares (by import, or from its source).
        tracked_types.declaration(self.value).rebuild(self, codegen)
