"""The classes of tracked objects: ``DeviceMesh``, ``ProcessGroup`` and
every placement class (built-in or a user's subclass), however they are
reached: a global (``Shard``), ``type(p)``, ``p.__class__``. Each tracked
type's declaration names the tracker of its class (``class_tracker``):
``DistClassVariable`` or, for placements, a subclass that builds them.

Identity and equality of a class are its own (``type(p) is Shard``,
``type(mesh) == DeviceMesh``, ``type(p) in (Shard, Replicate)``) and fold to
constants on every release; stock 2.11 / 2.12 answered them wrongly for a
placement built in the region, and every release breaks on ``==`` of two
classes. Everything else a program does with the class (calling it, its
class methods and other attributes) is what stock does with it: the class's
stock tracker answers.
"""

from __future__ import annotations

import importlib
from typing import Any

from .. import _compat as C
from .importable import ImportableObjectVariable
from .rebuild import by_import


def _importable(cls: type) -> bool:
    # Rebuilt by import only where the import finds this very class.
    try:
        found = importlib.import_module(cls.__module__)
        for part in cls.__qualname__.split("."):
            found = getattr(found, part)
    except (ImportError, AttributeError):
        return False
    return found is cls


class DistClassVariable(ImportableObjectVariable):
    """A tracked object's class. Compared by identity; the rest is stock's."""

    def vt_richcompare(self, tx: Any, other: Any, op: str) -> Any:
        other_value = C.dynamo.known_value(other)
        # ``type.__eq__`` is identity (a metaclass could say otherwise).
        if op in ("__eq__", "__ne__") and other_value is not C.dynamo.NO_KNOWN_VALUE \
                and type(type(self.value)).__eq__ is type.__eq__:
            eq = self.value is other_value
            return C.dynamo.constant(eq if op == "__eq__" else not eq)
        return C.dynamo.constant(NotImplemented)

    def vt_getattr(self, tx: Any, name: str) -> Any:
        if C.slots.DUNDERS.get(name) == "vt_richcompare":
            # 2.11 / 2.12 polyfills compare as ``a.__eq__(b)``: the class's
            # comparison (``type.__eq__``), not its instances' ``__eq__``.
            return C.dynamo.method_of(self, name)
        value = getattr(self.value, name, None)
        if name.startswith("__") and C.dynamo.is_literal(value):  # __name__, __qualname__, __module__
            return C.dynamo.constant(value)
        return C.slots.slot_method(self.stock_tracker(tx), "vt_getattr")(tx, name)

    def call_function(self, tx: Any, args: list, kwargs: dict) -> Any:
        return self.stock_tracker(tx).call_function(tx, args, kwargs)

    def call_method(self, tx: Any, name: str, args: list, kwargs: dict) -> Any:
        if name in C.slots.DUNDERS:  # 2.11 / 2.12: ``==`` arrives as ``__eq__``
            return super().call_method(tx, name, args, kwargs)
        return self.stock_tracker(tx).call_method(tx, name, args, kwargs)

    def stock_tracker(self, tx: Any) -> Any:
        """The tracker stock Dynamo has for this class (one per frame)."""
        cache = C.dynamo.frame_state(tx, "stock_classes")
        key = self.source if self.source is not None else self.value
        if key not in cache:
            cache[key] = (C.stock.stock_wrap(tx, self.source, self.value) if self.source is not None
                          else C.stock.stock_create(tx, self.value))
        return cache[key]

    def reconstruct(self, codegen: Any) -> None:
        # By import where that finds this very class, else as stock would.
        if _importable(self.value):
            return by_import(self, codegen)
        return self.stock_tracker(codegen.tx).reconstruct(codegen)
