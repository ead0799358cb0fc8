"""Tracker behaviours under our own names, bound to the slot names of the
running torch in ONE place.

A tracker defines ``vt_richcompare``, ``vt_str`` ... once; subclassing
``Tracker`` binds each to the method name Dynamo calls in this release
(``richcompare_impl`` on 2.13, ``tp_richcompare_impl`` on 2.14+). Porting to
another release adds a table here, not a branch in the trackers. Declared
``STATE`` fields become Dynamo's non-variable fields (values it must not
treat as nested trackers).

2.11 / 2.12 predate most slot methods: Dynamo reaches comparison, ``str``,
``repr`` (and ``bool`` / ``[]`` on 2.11) by calling the dunder method on the
tracker (its polyfills run ``a.__eq__(b)``), and dict keys through
``is_python_hashable`` / ``get_python_hash``. That family's table maps those
behaviours to dunder names (``DUNDERS``), which ``Tracker.call_method``
routes; the other families' dunder tables are empty.

The family is chosen by feature detection (which slot names the installed
``VariableTracker`` has), never by the version string; the version string only
decides whether ``install()`` accepts this torch at all (``_compat.release.check_supported``).
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


# our name -> the 2.11 / 2.12 method name: only these three are slots there.
SLOTS_2_11: dict[str, str] = {
    "vt_hasattr": "call_obj_hasattr",
    "vt_getattr": "var_getattr",
    "vt_python_equal": "is_python_equal",
}
# Slots 2.12 added to that family (2.11 reaches them as dunders).
SLOTS_2_12_EXTRA: dict[str, str] = {
    "vt_bool": "bool_impl",
    "vt_getitem": "mp_subscript_impl",
}

_COMPARISONS = ("__eq__", "__ne__", "__lt__", "__le__", "__gt__", "__ge__")

# dunder method name -> our behaviour, for the 2.11 family.
DUNDERS_2_11: dict[str, str] = {
    **{op: "vt_richcompare" for op in _COMPARISONS},
    "__str__": "vt_str",
    "__repr__": "vt_repr",
    "__bool__": "vt_bool",
    "__getitem__": "vt_getitem",
}


def _family() -> tuple[str, dict[str, str], dict[str, str]]:
    if hasattr(VariableTracker, "tp_richcompare_impl"):
        return "2.14", SLOTS_2_14, {}
    if hasattr(VariableTracker, "richcompare_impl"):
        return "2.13", SLOTS_2_13, {}
    extra = {ours: slot for ours, slot in SLOTS_2_12_EXTRA.items() if hasattr(VariableTracker, slot)}
    dunders = {name: ours for name, ours in DUNDERS_2_11.items() if ours not in extra}
    return "2.11", {**SLOTS_2_11, **extra}, dunders


FAMILY, SLOTS, DUNDERS = _family()

# The TensorVariable method Dynamo calls for ``tensor.attr`` (``_hooks``
# wraps it for a DTensor's ``placements`` / ``device_mesh``).
TENSOR_GETATTR_SLOT = SLOTS["vt_getattr"]

# ``BuiltinVariable`` handlers (``call_<builtin>``) that never reach a
# tracker in this family, -> the behaviour ``_hooks`` routes ours to:
# 2.11-2.13's ``call_str`` is a special-case chain (2.14+'s ``generic_str``
# calls ``tp_str_impl``); 2.11 / 2.12 have no ``call_hash`` at all (``hash()``
# of any tracker breaks), a ``call_repr`` for user objects only, and an ``is``
# that cannot tell two trackers of one type apart (``vt_is``: not a tracker
# behaviour, answered by ``variables.base.fold_builtin`` with identity guards).
BUILTIN_HOOKS_BY_FAMILY: dict[str, dict[str, str]] = {
    "2.11": {"call_str": "vt_str", "call_repr": "vt_repr", "call_hash": "vt_hash",
             "call_is_": "vt_is", "call_is_not": "vt_is"},
    "2.13": {"call_str": "vt_str"},
    "2.14": {},
}
BUILTIN_HOOKS: dict[str, str] = BUILTIN_HOOKS_BY_FAMILY[FAMILY]

# The tracer's conditional jumps (``InstructionTranslatorBase.<opcode>``) ->
# (the truth that takes the jump, whether the tested value stays on the stack
# when it does), where they never ask a tracker for its truth: 2.11 / 2.12
# jump on a Python constant, a tensor, a user object's ``__bool__`` and
# little else, so ``group or dist.group.WORLD`` (in ``dist.all_reduce``) or
# ``if mesh:`` broke on any of our trackers (2.13+ call ``bool_impl`` /
# ``nb_bool_impl``).
JUMP_HOOKS_BY_FAMILY: dict[str, dict[str, tuple[bool, bool]]] = {
    "2.11": {"POP_JUMP_IF_FALSE": (False, False), "POP_JUMP_IF_TRUE": (True, False),
             "JUMP_IF_FALSE_OR_POP": (False, True), "JUMP_IF_TRUE_OR_POP": (True, True),
             "POP_JUMP_FORWARD_IF_TRUE": (True, False), "POP_JUMP_BACKWARD_IF_TRUE": (True, False),
             "POP_JUMP_FORWARD_IF_FALSE": (False, False), "POP_JUMP_BACKWARD_IF_FALSE": (False, False)},
    "2.13": {},
    "2.14": {},
}
JUMP_HOOKS: dict[str, tuple[bool, bool]] = JUMP_HOOKS_BY_FAMILY[FAMILY]


def missing_slots() -> list[str]:
    """The slot names this family binds that the running torch lacks."""
    missing = [slot for slot in SLOTS.values() if not hasattr(VariableTracker, slot)]
    if TENSOR_GETATTR_SLOT not in TensorVariable.__dict__:
        missing.append(f"TensorVariable.{TENSOR_GETATTR_SLOT}")
    return missing


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

    # -- the 2.11 family: behaviours reached as dunder calls and hash protocol --
    def call_method(self, tx: Any, name: str, args: list, kwargs: dict) -> Any:
        ours = DUNDERS.get(name)
        if ours is not None and not kwargs and hasattr(self, ours):
            if ours == "vt_richcompare" and len(args) == 1:
                return self.vt_richcompare(tx, args[0], name)
            if ours == "vt_getitem" and len(args) == 1:
                return self.vt_getitem(tx, args[0])
            if not args and ours != "vt_getitem":
                return getattr(self, ours)(tx)
        return super().call_method(tx, name, args, kwargs)

    def is_python_hashable(self) -> bool:
        if hasattr(self, "vt_hash"):
            return True
        return super().is_python_hashable()

    def get_python_hash(self) -> int:
        if hasattr(self, "vt_hash"):
            return self.vt_hash(None)[0]
        return super().get_python_hash()


class ValueTracker(Tracker):
    """A tracker of one known Python object (``value``), typed as it."""

    STATE = ("value",)

    def __init__(self, value: Any, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.value = value

    def python_type(self) -> type:
        return type(self.value)


def slot_method(vt: VariableTracker, ours: str) -> Any:
    """The bound slot method Dynamo calls for our behaviour ``ours`` (on any
    tracker, stock ones included)."""
    return getattr(vt, SLOTS[ours])


def base_slot(cls: type, vt: VariableTracker, ours: str) -> Any:
    """``super(cls, vt)``'s slot method for ``ours`` (a tracker deferring to
    its base class)."""
    return getattr(super(cls, vt), SLOTS[ours])
