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


def stock_member_kind(cls: type, name: str) -> str | None:
    """How stock torch treats ``cls.name`` when it is a registered opaque type.

    Returns "use_real" (evaluated on the real object and baked), "inlined"
    (traced), or None when stock does not list the member.
    """
    try:
        from torch._library.opaque_object import MemberType, get_member_type
    except ImportError:  # pragma: no cover - older torch
        return None
    for klass in cls.__mro__:
        try:
            member_type = get_member_type(klass, name)
        except Exception:
            member_type = None
        if member_type is not None:
            return {MemberType.USE_REAL: "use_real", MemberType.INLINED: "inlined"}.get(
                member_type, str(member_type).lower()
            )
    return None
