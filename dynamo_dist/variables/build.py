"""``build``: which tracker a value gets, the one entry point of every Dynamo
hook (``_hooks/core.py``: sourced values, values built during tracing, the
sourceless fast table) and of the trackers' own answers.

It dispatches on the declared tracked types (``dynamo_dist.tracked_types``):
the record of the value's type, or of its class, gives the tracker; for a
sourced value also the check that it can be tracked now and its guard.
Anything no record covers goes to stock Dynamo unchanged.
"""

from __future__ import annotations

from typing import Any

from .. import _compat as C
from .. import tracked_types
from .breaks import graph_break
from .rebuild import Rebuild


def build(tx: Any, value: Any, source: Any = None, rebuild: Rebuild | None = None) -> Any:
    """The tracker of ``value``, or None to leave it to stock Dynamo.

    - ``source``: read from a source (argument, global, attribute): every
      declared type; the object's guard is installed;
    - ``rebuild``: the answer of a query on a tracked object, recreated in
      bytecode by that recipe: the types tracked without a source, not classes;
    - neither: built during tracing: the types tracked without a source, and
      their classes.
    """
    if rebuild is None and isinstance(value, type):
        record = tracked_types.find_class(value)
        if record is not None:
            if source is not None:
                C.dynamo.guard_identity(source)  # a class is guarded as itself
            return record.class_tracker(value, source=source)
    record = tracked_types.find(value, sourced=source is not None)
    if record is None:
        return None
    named = (record.objects()[value],) if record.objects is not None else ()
    if source is None:
        return record.tracker(value, *named) if rebuild is None else record.tracker(value, *named, rebuild=rebuild)
    if record.ready is not None and not record.ready(value):
        # An object still being built (a mesh whose constructor Dynamo is
        # tracing): stock crashes here; the frame runs eagerly.
        graph_break(record.not_ready, context=type(value).__name__)
    if record.guard is not None:
        record.guard(source, value)
    return record.tracker(value, *named, source=source)
