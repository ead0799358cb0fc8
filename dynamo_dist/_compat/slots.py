"""Tracker behaviours under our own names, bound to the slot names of the
running torch in ONE place.

A tracker defines ``vt_richcompare``, ``vt_str`` ... once; subclassing
``Tracker`` binds each to the method name Dynamo calls in this release
(``richcompare_impl`` on 2.13, ``tp_richcompare_impl`` on 2.14+). Porting to
another release adds a table here, not a branch in the trackers. Declared
``STATE`` fields become Dynamo's non-variable fields (values it must not
treat as nested trackers).
"""

from __future__ import annotations

from typing import Any, ClassVar

from torch._dynamo.variables.base import VariableTracker

# our name -> the 2.13 method name Dynamo calls.
SLOTS_2_13: dict[str, str] = {
    "vt_richcompare": "richcompare_impl",
    "vt_str": "str_impl",
    "vt_repr": "repr_impl",
    "vt_bool": "bool_impl",
    "vt_hash": "hash_impl",
    "vt_getitem": "mp_subscript_impl",
    "vt_hasattr": "call_obj_hasattr",
    "vt_getattr": "var_getattr",
    "vt_python_equal": "is_python_equal",
}
SLOTS = SLOTS_2_13


def has_slots() -> bool:
    """Whether the running torch has the slots this table binds."""
    return all(hasattr(VariableTracker, slot) for slot in SLOTS.values())


class Tracker(VariableTracker):
    """Base class of dynamo_dist's trackers."""

    STATE: ClassVar[tuple[str, ...]] = ()

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        for ours, slot in SLOTS.items():
            if ours in cls.__dict__:
                setattr(cls, slot, cls.__dict__[ours])
        inherited = set().union(*(getattr(b, "_nonvar_fields", ()) for b in cls.__bases__))
        cls._nonvar_fields = {*cls.__dict__.get("STATE", ()), *inherited}


def slot_method(vt: VariableTracker, ours: str) -> Any:
    """The bound slot method Dynamo calls for our behaviour ``ours`` (on any
    tracker, stock ones included)."""
    return getattr(vt, SLOTS[ours])


def base_slot(cls: type, vt: VariableTracker, ours: str) -> Any:
    """``super(cls, vt)``'s slot method for ``ours`` (a tracker deferring to
    its base class)."""
    return getattr(super(cls, vt), SLOTS[ours])
