"""DeviceMesh guard: identity fast path, semantic fingerprint otherwise.

An equal mesh that is a new object (equal under this release's
``DeviceMesh.__eq__`` and the same process groups behind each dim) reuses the graph; a mesh
with the same shape but other groups, or another ndim, recompiles cleanly.
"""

from __future__ import annotations

import weakref
from typing import Any

from .. import _compat as C
from ._lambda import install_predicate
from ._notes import note


def mesh_fingerprint(mesh: Any, with_coordinate: bool | None = None) -> tuple:
    """Everything a folded mesh answer can depend on. This rank's coordinate
    counts unless rank answers are runtime ops (``compile_on_one_rank``);
    ``with_coordinate`` decides it without reading that config."""
    if with_coordinate is None:
        with_coordinate = not C.compile_on_one_rank()
    coordinate = mesh.get_coordinate() if with_coordinate else None
    return (
        type(mesh),
        # Every field this release's DeviceMesh.__eq__ compares (layout, rank
        # map, device type, dim names, thread id; 2.15: _preserve_rank_order).
        C.mesh_eq_key(mesh),
        C.mesh_dim_group_names(mesh),
        coordinate,
    )


def describe_mesh(mesh: Any) -> str:
    names = mesh.mesh_dim_names
    dims = ", ".join(
        f"{names[i] if names else i}={size}" for i, size in enumerate(mesh.shape)
    )
    return f"{mesh.device_type} mesh ({dims}) on groups {list(C.mesh_dim_group_names(mesh))}"


def install_mesh_guard(source: Any, mesh: Any) -> None:
    def make_check(mesh_now: Any):
        # Decided once, as the graph was: reading the config on every call
        # cost more than the rest of the fingerprint (~2.5 us).
        with_coordinate = not C.compile_on_one_rank()
        expected = mesh_fingerprint(mesh_now, with_coordinate)
        same = weakref.ref(mesh_now)
        mesh_type = type(mesh_now)

        def check(m: Any) -> bool:
            # `is` first: the common case (same mesh object every step) costs
            # one comparison; a rebuilt-but-equal mesh pays for the fingerprint.
            return m is same() or (type(m) is mesh_type and mesh_fingerprint(m, with_coordinate) == expected)

        return check

    install_predicate(
        source,
        make_check,
        f"dynamo_dist: `{source.name}` is the same {describe_mesh(mesh)}",
    )
    note(source, "mesh")
