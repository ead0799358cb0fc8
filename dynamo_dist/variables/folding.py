"""Trace-time values of trackers: what can be folded, and call arguments as
Python values."""

from __future__ import annotations

from typing import Any

from .. import _compat as C
from .breaks import Break, graph_break

NO_VALUE = object()


def real_value(vt: Any) -> Any:
    """The trace-time value of a tracked object or constant, else NO_VALUE.
    A tracker whose class sets ``REAL_VALUE_KNOWN`` answers with
    ``as_python_constant`` even when it is not a Python constant to Dynamo."""
    if getattr(vt, "REAL_VALUE_KNOWN", False) or vt.is_python_constant():
        try:
            return vt.as_python_constant()
        except NotImplementedError:
            return NO_VALUE
    items = C.dynamo.list_items(vt)
    if items is not None:  # a tuple/list of placements, ...
        values = [real_value(i) for i in items]
        if all(v is not NO_VALUE for v in values):
            return vt.python_type()(values)
    return NO_VALUE


def as_readable_sequence(tx: Any, vt: Any, what: str) -> Any:
    """A sequence argument (placements, say) in a form ``real_value`` reads.
    Lists, tuples and namedtuples already are; any other iterable the user
    passes (a list or tuple subclass, a class registered as a pytree node
    that iterates over its placements) becomes Dynamo's ``list(vt)``, which
    traces the user's own ``__iter__``, so every item keeps its source and
    guards. A sequence Dynamo cannot iterate is a clean break."""
    if real_value(vt) is not NO_VALUE:
        return vt
    try:
        return C.dynamo.as_list(tx, vt)
    except C.dynamo.Unsupported as e:
        graph_break(Break.SEQUENCE_NOT_READABLE, context=f"{what}: {type(vt).__name__}", what=what,
                    got=vt.python_type().__name__ if hasattr(vt, "python_type") else "value",
                    reason=str(e).splitlines()[0])


def constants_or_none(args: list, kwargs: dict) -> tuple[list, dict] | None:
    """Python values of all arguments, or None if one is only known at run time."""
    values = [real_value(a) for a in args]
    kw_values = {k: real_value(v) for k, v in kwargs.items()}
    if any(v is NO_VALUE for v in (*values, *kw_values.values())):
        return None
    return values, kw_values


def constant_args(tx: Any, what: str, args: list, kwargs: dict) -> tuple[list, dict]:
    """Python values of call arguments; a graph break if one is only known at run time."""
    consts = constants_or_none(args, kwargs)
    if consts is not None:
        return consts
    graph_break(Break.ARGUMENT_NOT_CONSTANT, context=f"{what} args={args} kwargs={kwargs}", what=what)
