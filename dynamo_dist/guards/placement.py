"""Placement guards: exact type plus equality of the fields that define it.

Built-in placements are guarded with C++ guards only (``TYPE_MATCH`` and an
``EQUALS_MATCH`` per field); other placements with their own ``__eq__`` and
equal instance state (``__dict__``).
"""

from __future__ import annotations

import copy
import logging
from typing import Any

from .. import _compat as C
from ._lambda import install_predicate
from ._notes import note

log = logging.getLogger("dynamo_dist.guards")

# Fields that fully determine a built-in placement's value, by exact type name.
_FIELDS = {
    "Shard": ("dim",),
    "_StridedShard": ("dim", "split_factor"),
    "Replicate": (),
    "Partial": ("reduce_op",),
}


def install_placement_guard(source: Any, placement: Any) -> None:
    log.debug("guard dynamo_dist: `%s` == %r (TYPE_MATCH + field EQUALS_MATCH)", source.name, placement)
    C.install_guard(source.make_guard(C.GuardBuilder.TYPE_MATCH))
    note(source, "placement")
    cls = type(placement)
    fields = _FIELDS.get(cls.__name__) if cls.__module__.startswith("torch.") else None
    if fields is not None:
        for field in fields:
            C.install_guard(C.AttrSource(source, field).make_guard(C.GuardBuilder.EQUALS_MATCH))
        return

    def make_check(p_now: Any):
        # Its __eq__ may ignore state its members read (a Shard subclass with
        # its own fields inherits Shard.__eq__, which compares dim only): the
        # instance state must match too.
        state = getattr(p_now, "__dict__", {})
        try:
            state = copy.deepcopy(state)
        except Exception:
            state = dict(state)

        def check(p: Any) -> bool:
            try:
                return bool(p == p_now) and getattr(p, "__dict__", {}) == state
            except Exception:
                return False

        return check

    install_predicate(source, make_check, f"dynamo_dist: `{source.name}` == {placement!r}")
