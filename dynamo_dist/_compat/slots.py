"""Tracker behaviours under our own names, bound to the slot names of the
running torch in ONE place.

A tracker defines ``vt_richcompare``, ``vt_str`` ... once; subclassing
``Tracker`` binds each to the method name Dynamo calls in this release
(``richcompare_impl`` on 2.13, ``tp_richcompare_impl`` on 2.14+). Porting to
another release adds a table here, not a branch in the trackers. Declared
``STATE`` fields become Dynamo's non-variable fields (values it must not
treat as nested trackers).

The family is chosen by feature detection (which slot names the installed
``VariableTracker`` has), never by the version string; the version string only
decides whether ``install()`` accepts this torch at all (``_compat.check_supported``).
"""

from __future__ import annotations

from typing import Any, ClassVar

from torch._dynamo.variables.base import VariableTracker
from torch._dynamo.variables.tensor import TensorVariable

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
    # dict-key / set equality (2.13 only).
    "vt_python_equal": "is_python_equal",
}

# our name -> the 2.14 / 2.15 method name (CPython-slot names, torch PRs
# #191011 #189428 #190415). ``is_python_equal`` is gone: dict keys compare
# through ``tp_richcompare_impl``. ``vt_bool`` must always return a tracker
# (2.15 does not accept None).
SLOTS_2_14: dict[str, str] = {
    "vt_richcompare": "tp_richcompare_impl",
    "vt_str": "tp_str_impl",
    "vt_repr": "tp_repr_impl",
    "vt_bool": "nb_bool_impl",
    "vt_hash": "hash_impl",
    "vt_getitem": "mp_subscript_impl",
    "vt_hasattr": "call_obj_hasattr",
    "vt_getattr": "tp_getattro_impl",
}


def _family() -> tuple[str, dict[str, str]]:
    if hasattr(VariableTracker, "tp_richcompare_impl"):
        return "2.14", SLOTS_2_14
    return "2.13", SLOTS_2_13


FAMILY, SLOTS = _family()

# The TensorVariable method Dynamo calls for ``tensor.attr`` (``_hooks``
# wraps it for a DTensor's ``placements`` / ``device_mesh``).
TENSOR_GETATTR_SLOT = SLOTS["vt_getattr"]

# 2.13's ``BuiltinVariable.call_str`` is a special-case chain that never calls
# a tracker's ``str_impl``; 2.14+'s is ``generic_str``, which does.
NEEDS_CALL_STR_HOOK = FAMILY == "2.13"


def missing_slots() -> list[str]:
    """The slot names this family binds that the running torch lacks."""
    missing = [slot for slot in SLOTS.values() if not hasattr(VariableTracker, slot)]
    if TENSOR_GETATTR_SLOT not in TensorVariable.__dict__:
        missing.append(f"TensorVariable.{TENSOR_GETATTR_SLOT}")
    return missing


def has_slots() -> bool:
    """Whether the running torch has the slots this table binds."""
    return not missing_slots()


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
