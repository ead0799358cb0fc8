"""Process-group guards: a group is identified by the object itself.

Stock 2.13 guards a ProcessGroup by type only and so reuses stale
``size()``/ranks for another group; identity is both sound and the cheapest
guard Dynamo has (C++ ``ID_MATCH``).
"""

from __future__ import annotations

import logging
from typing import Any

from .. import _compat as C
from ._notes import note

log = logging.getLogger("dynamo_dist.guards")


def install_group_guard(source: Any, group: Any = None) -> None:
    """The group at ``source`` is the same object (``group``, the group now,
    is not needed: its identity is the whole guard)."""
    log.debug("guard dynamo_dist: `%s` is the same ProcessGroup object (ID_MATCH)", source.name)
    C.dynamo.guard_identity(source)
    note(source, "process_group")


def install_default_group_guard(tx: Any) -> None:
    """Guard the answers of ``dist.get_rank()`` etc. called without a group on
    the identity of the default (WORLD) group: re-initialising the world
    recompiles."""
    world = C.dynamo.default_group_source(tx)
    log.debug("guard dynamo_dist: the default (WORLD) group is the same object (ID_MATCH)")
    C.dynamo.guard_identity(world)
    note(world, "world")
