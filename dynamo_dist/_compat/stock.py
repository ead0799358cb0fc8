"""Stock Dynamo's own tracker builders, bypassing dynamo_dist's hooks.

The trackers use ``stock_wrap``/``stock_create`` where a tracked object must
become a graph value exactly the way stock makes it one. While installed,
each hook keeps the builder it replaced as ``__wrapped__``, and our entries
of the sourceless type table are marked ``__dynamo_dist_handler__``
(``_hooks/core.py``): that is how the originals are found here, with no
second record of them.
"""

from __future__ import annotations

from typing import Any

from torch._dynamo.variables.builder import SourcelessBuilder, VariableBuilder


def stock_wrap(tx: Any, source: Any, value: Any) -> Any:
    """The tracker stock Dynamo builds for ``value`` at ``source`` (bypassing
    ours): used where a tracked object must become a graph value the way stock
    makes it one (e.g. a mesh passed to a DTensor op)."""
    wrap = VariableBuilder._wrap
    original = getattr(wrap, "__wrapped__", wrap)
    return original(VariableBuilder(tx, source), value)


def stock_create(tx: Any, value: Any) -> Any:
    """Stock SourcelessBuilder.create, bypassing ours."""
    create = SourcelessBuilder.__dict__["create"]
    original = getattr(create.__func__, "__wrapped__", create)
    table = SourcelessBuilder._type_handlers
    ours = {t: h for t, h in table.items() if getattr(h, "__dynamo_dist_handler__", False)}
    for t in ours:
        del table[t]
    try:
        return original.__func__(tx, value)
    finally:
        table.update(ours)
