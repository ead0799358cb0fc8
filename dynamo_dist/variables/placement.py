"""Placement trackers: instances (Shard(0), Partial("max"), ...) and the
placement classes themselves (so ``Shard(1)`` and ``isinstance`` trace)."""

from __future__ import annotations

import inspect
from typing import Any

from .. import _compat as C
from .base import DistObjectVariable, ImportableObjectVariable, constant_args, raise_like_eager
from .members import PLACEMENT_MEMBERS


def constructor_call(p: Any) -> tuple[tuple, dict]:
    """The constructor arguments that rebuild ``p`` (``Shard(1)``,
    ``_StridedShard(0, split_factor=2)``, ``Partial("max")``...)."""
    name = type(p).__name__
    if name == "Replicate":
        return (), {}
    if name == "Shard":
        return (p.dim,), {}
    if name == "_StridedShard":
        return (p.dim,), {"split_factor": p.split_factor}
    if name == "Partial":
        return (p.reduce_op,), {}
    # Anything else: the keyword state pickling uses (dataclass-like placements).
    state = p.__reduce_ex__(2)[2] or {}
    return (), dict(state)


def is_builtin_placement_type(cls: type) -> bool:
    return cls.__module__.startswith("torch.distributed")


class PlacementVariable(DistObjectVariable):
    MEMBERS = PLACEMENT_MEMBERS
    LABEL = "Placement"

    def is_python_constant(self) -> bool:
        # Placements are immutable values (stock registers them as opaque
        # *value* types): as constants they work in str(), f-strings, `in`,
        # dict keys and constant-folded builtins.
        return True

    def as_proxy(self) -> Any:
        # A placement argument to a graph op is a constant in the node's
        # arguments, as in stock (value-type opaque objects).
        return self.value

    def reconstruct(self, codegen: Any) -> None:
        if self.rebuild is not None:
            return self.rebuild(codegen)
        # Escaping placement: call its constructor in bytecode.
        cls = type(self.value)
        try:
            args, kwargs = constructor_call(self.value)
            if not all(C.ConstantVariable.is_literal(v) for v in (*args, *kwargs.values())):
                raise TypeError("non-literal constructor argument")
        except Exception:
            return super().reconstruct(codegen)
        codegen.add_push_null(lambda: codegen.load_import_from(cls.__module__, cls.__qualname__))
        for a in args:
            codegen.extend_output([codegen.create_load_const(a)])
        for v in kwargs.values():
            codegen.extend_output([codegen.create_load_const(v)])
        if kwargs:
            codegen.extend_output(
                codegen.create_call_function_kw(len(args) + len(kwargs), tuple(kwargs), False)
            )
        else:
            codegen.extend_output(C.create_call_function(len(args), False))

    def unknown_member(self, tx: Any, name: str, call: tuple | None) -> C.VariableTracker:
        # A user-defined Placement subclass: its own pure-Python methods are
        # inlined (so they fold through our members); plain instance attributes
        # fold (the placement guard pins equality).
        cls = type(self.value)
        if not is_builtin_placement_type(cls):
            fn = inspect.getattr_static(cls, name, None)
            owner = next((k for k in cls.__mro__ if name in k.__dict__), None)
            if inspect.isfunction(fn) and owner is not None and not is_builtin_placement_type(owner):
                from torch._dynamo.variables.functions import UserFunctionVariable, UserMethodVariable

                if call is None:
                    return UserMethodVariable(fn, self)
                args, kwargs = call
                return UserFunctionVariable(fn).call_function(tx, [self, *args], kwargs)
            if call is None and name in getattr(self.value, "__dict__", {}):
                return self.evaluate(tx, name, False, [], {})
        return super().unknown_member(tx, name, call)


class PlacementClassVariable(ImportableObjectVariable):
    """A placement class: ``Shard(1)`` builds a tracked placement at trace time."""

    def var_getattr(self, tx: Any, name: str) -> C.VariableTracker:
        value = getattr(self.value, name, None)
        if C.ConstantVariable.is_literal(value):
            return C.ConstantVariable.create(value)
        return super().var_getattr(tx, name)

    def call_function(self, tx: Any, args: list, kwargs: dict) -> C.VariableTracker:
        cls = self.value
        pargs, pkwargs = constant_args(tx, f"{cls.__name__}(...)", args, kwargs)
        try:
            placement = cls(*pargs, **pkwargs)
        except Exception as e:  # Shard("x") raises TypeError in eager too
            raise_like_eager(tx, e)
        return PlacementVariable(placement)
