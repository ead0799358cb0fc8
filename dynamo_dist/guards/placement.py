"""Placement guards: exact type plus equality of the fields that define it.

Built-in placements are guarded with C++ guards only (``TYPE_MATCH`` and an
``EQUALS_MATCH`` per field); other placements with their own ``__eq__`` and
equal instance state (``__dict__``).
"""

from __future__ import annotations

import copy
import logging
from typing import Any, Callable

from .. import _compat as C
from ._notes import note

log = logging.getLogger("dynamo_dist.guards")


def install_placement_guard(source: Any, placement: Any) -> None:
    log.debug("guard dynamo_dist: `%s` == %r (TYPE_MATCH + field EQUALS_MATCH)", source.name, placement)
    C.dynamo.guard_type(source)
    note(source, "placement")
    # Built-in placements: the fields that define them (one table, shared
    # with reconstruction), each a C++ EQUALS_MATCH.
    fields = C.distributed.placement_fields(type(placement))
    if fields is not None:
        for field in fields.names:
            C.dynamo.guard_attr_equals(source, field)
        return

    C.dynamo.guard_predicate(source, placement_expected, placement_check,
                             f"dynamo_dist: `{source.name}` == {placement!r}")


def placement_expected(p_now: Any) -> tuple[Any, dict]:
    """A placement and a copy of its instance state: its ``__eq__`` may
    ignore state its members read (a Shard subclass with its own fields
    inherits ``Shard.__eq__``, which compares dim only)."""
    state = getattr(p_now, "__dict__", {})
    try:
        state = copy.deepcopy(state)
    except Exception:
        state = dict(state)
    return p_now, state


def placement_check(expected: tuple[Any, dict]) -> Callable[[Any], bool]:
    p_now, state = expected

    def check(p: Any) -> bool:
        try:
            return bool(p == p_now) and getattr(p, "__dict__", {}) == state
        except Exception:
            return False

    return check
