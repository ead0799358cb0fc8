"""Answers of folded queries as trackers.

Which tracker a distributed object gets is a type -> factory table that each
tracker module fills in when it is imported (``register``). This inverts the
dependency: the base tracker wraps its answers through this table without
importing the tracker modules that subclass it (``variables/__init__``
imports them all, so the table is complete before any tracing).
"""

from __future__ import annotations

from typing import Any, Callable

from .. import _compat as C
from .breaks import Break, graph_break
from .rebuild import GetItem, Rebuild

# (base type, factory(value, rebuild) -> tracker), checked with isinstance.
_FACTORIES: list[tuple[type, Callable[[Any, Any], Any]]] = []
_TYPES: tuple[type, ...] = ()


def register(cls: type, factory: Callable[[Any, Any], Any]) -> None:
    """Instances of ``cls`` built or derived during tracing get ``factory(value, rebuild)``."""
    global _TYPES
    _FACTORIES.append((cls, factory))
    _TYPES = tuple(c for c, _ in _FACTORIES)


def tracker_for(value: Any, rebuild: Rebuild | None = None) -> Any:
    """A tracker for a value with no source of its own (built or derived
    during tracing), or None if it is not a distributed object."""
    if not isinstance(value, _TYPES):  # the common case: one check
        return None
    for cls, factory in _FACTORIES:
        if isinstance(value, cls):
            return factory(value, rebuild)
    return None


def foldable(value: Any) -> bool:
    """Can ``wrap_value`` represent this answer (constants, distributed objects
    and tuples/lists of them)?"""
    if isinstance(value, (tuple, list)):
        return all(foldable(v) for v in value)
    return C.is_literal(value) or isinstance(value, _TYPES)


def wrap_value(tx: Any, value: Any, rebuild: Rebuild, what: str) -> Any:
    """Wrap a query's answer: constants fold, distributed objects stay tracked."""
    tracker = tracker_for(value, rebuild)
    if tracker is not None:
        return tracker
    if isinstance(value, (tuple, list)):
        items = [wrap_value(tx, v, rebuild.then(GetItem(i)), what) for i, v in enumerate(value)]
        return C.make_tuple(items) if isinstance(value, tuple) else C.make_list(items)
    if C.is_literal(value):
        return C.constant(value)
    graph_break(Break.NOT_FOLDABLE, context=f"{what} -> {type(value).__name__}", what=what,
                type=type(value).__name__)
