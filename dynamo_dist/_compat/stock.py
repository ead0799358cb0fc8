"""Stock Dynamo's own tracker builders, bypassing dynamo_dist's hooks.

``_hooks.apply`` records the originals here (``remember``); the trackers use
``stock_wrap``/``stock_create`` where a tracked object must become a graph
value exactly the way stock makes it one. This sits below both ``_hooks``
and ``variables``.
"""

from __future__ import annotations

from typing import Any

from torch._dynamo.variables.builder import SourcelessBuilder, VariableBuilder

_originals: dict[str, Any] = {}


def remember(wrap: Any, create: Any, hooked_types: list) -> None:
    _originals.update(wrap=wrap, create=create, types=tuple(hooked_types))


def forget() -> None:
    _originals.clear()


def stock_wrap(tx: Any, source: Any, value: Any) -> Any:
    """The tracker stock Dynamo builds for ``value`` at ``source`` (bypassing
    ours): used where a tracked object must become a graph value the way stock
    makes it one (e.g. a mesh passed to a DTensor op)."""
    original = _originals.get("wrap", VariableBuilder._wrap)
    return original(VariableBuilder(tx, source), value)


def stock_create(tx: Any, value: Any) -> Any:
    """Stock SourcelessBuilder.create, bypassing ours."""
    original = _originals.get("create", SourcelessBuilder.__dict__["create"])
    table = SourcelessBuilder._type_handlers
    saved = {t: table.pop(t) for t in _originals.get("types", ()) if t in table}
    try:
        return original.__func__(tx, value)
    finally:
        table.update(saved)
