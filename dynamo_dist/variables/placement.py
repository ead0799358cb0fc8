"""Placements: their member table, the trackers of instances (Shard(0),
Partial("max"), ...) and of the placement classes themselves (so ``Shard(1)``
and ``isinstance`` trace), and two declarations: built-in placements
(``BUILTIN_PLACEMENT``) and users' (``USER_PLACEMENT``).

Which placements are built in, and the fields that rebuild and guard them,
is one table: ``_compat.distributed.BUILTIN_PLACEMENTS``.
"""

from __future__ import annotations

import inspect
from typing import Any

from .. import _compat as C
from ..caching import keys
from ..guards import install_placement_guard
from ..tracked_types import TrackedType, declare
from .base import DistObjectVariable
from .breaks import raise_like_eager
from .folding import constant_args
from .identity import Identity
from .classes import DistClassVariable
from .members import Kind, Member, MemberTable
from .rebuild import replay_derivation

PLACEMENT_MEMBERS = MemberTable("Placement", {
    "is_shard": Member(Kind.FOLD, method=True),
    "is_replicate": Member(Kind.FOLD, method=True),
    "is_partial": Member(Kind.FOLD, method=True),
    "dim": Member(Kind.FOLD),
    "reduce_op": Member(Kind.FOLD),
    "split_factor": Member(Kind.FOLD),
})

# Kept importable from here (callers outside the core use these names).
constructor_call = C.distributed.constructor_call
is_builtin_placement_type = C.distributed.is_builtin_placement_type


class PlacementVariable(DistObjectVariable):
    MEMBERS = PLACEMENT_MEMBERS
    LABEL = "Placement"
    STATE = ("fresh",)

    def __init__(self, value: Any, fresh: bool = False, **kwargs: Any) -> None:
        super().__init__(value, **kwargs)
        # Built by its constructor inside the region: a new object.
        self.fresh = fresh

    def identity(self) -> Identity:
        return Identity.FRESH if self.fresh else Identity.BY_VALUE

    def is_python_constant(self) -> bool:
        # Placements are immutable values (stock registers them as opaque
        # *value* types): as constants they work in str(), f-strings, `in`,
        # dict keys and constant-folded builtins.
        return True

    def as_proxy(self) -> Any:
        # A placement argument to a graph op is a constant in the node's
        # arguments, as in stock (value-type opaque objects).
        return self.value

    def unknown_member(self, tx: Any, name: str, call: tuple | None) -> Any:
        # A user-defined Placement subclass: its own pure-Python methods are
        # inlined (so they fold through our members); plain instance attributes
        # fold (the placement guard pins equality).
        cls = type(self.value)
        if not C.distributed.is_builtin_placement_type(cls):
            fn = inspect.getattr_static(cls, name, None)
            owner = next((k for k in cls.__mro__ if name in k.__dict__), None)
            if inspect.isfunction(fn) and owner is not None and not C.distributed.is_builtin_placement_type(owner):
                if call is None:
                    return C.dynamo.user_method(fn, self)
                args, kwargs = call
                return C.dynamo.inline_call(tx, fn, [self, *args], kwargs)
            if call is None and name in getattr(self.value, "__dict__", {}):
                return self.evaluate(tx, name, False, [], {})
        return super().unknown_member(tx, name, call)


class PlacementClassVariable(DistClassVariable):
    """A built-in placement class: ``Shard(1)`` builds a tracked placement at
    trace time."""

    def vt_getattr(self, tx: Any, name: str) -> Any:
        value = getattr(self.value, name, None)
        if C.dynamo.is_literal(value):
            return C.dynamo.constant(value)
        return C.slots.base_slot(PlacementClassVariable, self, "vt_getattr")(tx, name)

    def call_function(self, tx: Any, args: list, kwargs: dict) -> Any:
        cls = self.value
        pargs, pkwargs = constant_args(tx, f"{cls.__name__}(...)", args, kwargs)
        try:
            placement = cls(*pargs, **pkwargs)
        except Exception as e:  # Shard("x") raises TypeError in eager too
            raise_like_eager(tx, e)
        return PlacementVariable(placement, fresh=True)


class UserPlacementClassVariable(DistClassVariable):
    """A user's placement class (a ``Shard`` subclass, say): built as stock
    builds it (its ``__init__`` traced), then tracked as a placement when
    stock built a constant (2.11's in-tree tracker; 2.12+'s opaque value)."""

    def call_function(self, tx: Any, args: list, kwargs: dict) -> Any:
        built = super().call_function(tx, args, kwargs)
        if isinstance(built, PlacementVariable) or not built.is_python_constant():
            return built
        return PlacementVariable(built.as_python_constant(), fresh=True)


# -- how an escaping placement is made again ------------------------------------

def by_constructor(vt: PlacementVariable, codegen: Any) -> None:
    """Its constructor called in bytecode (``Shard(1)``), where its arguments
    are literals; else its recipe, if it has one."""
    cls = type(vt.value)
    try:
        args, kwargs = C.distributed.constructor_call(vt.value)
        if not all(C.dynamo.is_literal(v) for v in (*args, *kwargs.values())):
            raise TypeError("non-literal constructor argument")
    except Exception:
        return replay_derivation(vt, codegen)
    C.dynamo.emit_call_import(codegen, cls.__module__, cls.__qualname__, args, kwargs)


def by_recipe_or_constructor(vt: PlacementVariable, codegen: Any) -> None:
    """A user's placement: by its recipe when it was derived from a tracked
    object (its class may not be importable), else by its constructor."""
    if vt.rebuild is not None:
        return vt.rebuild(codegen)
    return by_constructor(vt, codegen)


def builtin_placement(value: Any, source: Any = None, rebuild: Any = None) -> PlacementVariable:
    """A built-in placement's tracker: it rebuilds by its constructor, so
    the recipe of a derived one is not kept."""
    return PlacementVariable(value, source=source)


def is_user_placement_type(cls: type) -> bool:
    return not C.distributed.is_builtin_placement_type(cls)


BUILTIN_PLACEMENT = declare(TrackedType(
    name="built-in placement",
    python_type=C.distributed.Placement,
    class_test=C.distributed.is_builtin_placement_type,
    tracker=builtin_placement,
    members=PLACEMENT_MEMBERS,
    # Exact type and the fields that define it, C++ guards only
    # (guards/placement.py; torch's other built-ins: their own equality).
    guard=install_placement_guard,
    # Its class and constructor call.
    key_identity=keys.placement_key_identity,
    rebuild=by_constructor,
    fast_types=C.distributed.PLACEMENT_TYPES,
    sourceless=True,
    class_tracker=PlacementClassVariable,
))

USER_PLACEMENT = declare(TrackedType(
    name="user placement",
    python_type=C.distributed.Placement,
    class_test=is_user_placement_type,
    tracker=PlacementVariable,
    members=PLACEMENT_MEMBERS,
    # Exact type, its own equality and equal instance state.
    guard=install_placement_guard,
    # No key identity: its class is the user's code, which a key does not hold.
    rebuild=by_recipe_or_constructor,
    sourceless=True,
    class_tracker=UserPlacementClassVariable,
))
