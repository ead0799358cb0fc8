"""Answers of folded queries as trackers.

A query's answer that is a tracked object stays tracked (``build`` with the
recipe that recreates it from the object queried); constants fold; tuples
and lists are wrapped item by item.
"""

from __future__ import annotations

from typing import Any

from .. import _compat as C
from .. import tracked_types
from .breaks import Break, graph_break
from .build import build
from .rebuild import GetItem, Rebuild


def foldable(value: Any) -> bool:
    """Can ``wrap_value`` represent this answer (constants, distributed objects
    and tuples/lists of them)?"""
    if isinstance(value, (tuple, list)):
        return all(foldable(v) for v in value)
    return C.dynamo.is_literal(value) or tracked_types.find(value) is not None


def wrap_value(tx: Any, value: Any, rebuild: Rebuild, what: str) -> Any:
    """Wrap a query's answer: constants fold, distributed objects stay tracked."""
    tracker = build(tx, value, rebuild=rebuild)
    if tracker is not None:
        return tracker
    if isinstance(value, (tuple, list)):
        items = [wrap_value(tx, v, rebuild.then(GetItem(i)), what) for i, v in enumerate(value)]
        return C.dynamo.make_tuple(items) if isinstance(value, tuple) else C.dynamo.make_list(items)
    if C.dynamo.is_literal(value):
        return C.dynamo.constant(value)
    graph_break(Break.NOT_FOLDABLE, context=f"{what} -> {type(value).__name__}", what=what,
                type=type(value).__name__)
