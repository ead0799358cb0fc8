"""Process-group guards: a group is identified by the object itself.

Stock 2.13 guards a ProcessGroup by type only and so reuses stale
``size()``/ranks for another group; identity is both sound and the cheapest
guard Dynamo has (C++ ``ID_MATCH``).
"""

from __future__ import annotations

from typing import Any

from .. import _compat as C


def install_group_guard(source: Any) -> None:
    C.install_guard(source.make_guard(C.GuardBuilder.ID_MATCH))


def install_default_group_guard(tx: Any) -> None:
    """Guard the answers of ``dist.get_rank()`` etc. called without a group on
    the identity of the default (WORLD) group: re-initialising the world
    recompiles."""
    module = tx.import_source("torch.distributed.distributed_c10d")
    world = C.AttrSource(C.AttrSource(module, "GroupMember"), "WORLD")
    C.install_guard(world.make_guard(C.GuardBuilder.ID_MATCH))
