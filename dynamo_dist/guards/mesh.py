"""DeviceMesh guard: identity fast path, semantic fingerprint otherwise.

An equal mesh that is a new object (equal under this release's
``DeviceMesh.__eq__`` and the same process groups behind each dim) reuses the graph; a mesh
with the same shape but other groups, or another ndim, recompiles cleanly.
"""

from __future__ import annotations

import hashlib
import weakref
from typing import Any, Callable

from .. import _compat as C
from ._lambda import install_predicate
from ._notes import note


# A rank map longer than this enters a fingerprint as its digest, so that
# comparing and keying fingerprints costs the same on 8 ranks as on 65,536.
_LONG = 32


def _compact(value: Any) -> Any:
    if isinstance(value, tuple) and len(value) > _LONG:
        return ("digest", len(value), hashlib.blake2b(repr(value).encode(), digest_size=16).hexdigest())
    return value


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
        tuple(_compact(v) for v in C.mesh_eq_key(mesh)),
        C.mesh_dim_group_names(mesh),
        coordinate,
    )


# The fingerprint of each live mesh object, computed once: a mesh does not
# change after construction, and a guard that meets an equal new mesh on every
# call (a submesh sliced each step) then pays for its fields once per object.
_KNOWN: dict[tuple[int, bool], tuple] = {}


def known_fingerprint(mesh: Any, with_coordinate: bool) -> tuple:
    """``mesh_fingerprint`` of a constructed mesh, remembered while it lives."""
    key = (id(mesh), with_coordinate)
    found = _KNOWN.get(key)
    if found is None:
        found = _KNOWN[key] = mesh_fingerprint(mesh, with_coordinate)
        weakref.finalize(mesh, _KNOWN.pop, key, None)
    return found


def fingerprinted_mesh_ids() -> list[int]:
    """The ``id`` of each live mesh whose fingerprint is remembered (one
    entry per mesh and coordinate choice)."""
    return [mesh_id for mesh_id, _ in _KNOWN]


def same_mesh_check(mesh_now: Any) -> Callable[[Any], bool]:
    """The per-call test that a mesh is ``mesh_now`` or equal to it with the
    same groups (coordinate included unless ``compile_on_one_rank``, decided
    now, as the graph was): one ``is`` when it is the same object."""
    with_coordinate = not C.compile_on_one_rank()
    expected = known_fingerprint(mesh_now, with_coordinate)
    same = weakref.ref(mesh_now)
    mesh_type = type(mesh_now)

    def check(m: Any) -> bool:
        return m is same() or (type(m) is mesh_type and known_fingerprint(m, with_coordinate) == expected)

    return check


def describe_mesh(mesh: Any) -> str:
    names = mesh.mesh_dim_names
    dims = ", ".join(
        f"{names[i] if names else i}={size}" for i, size in enumerate(mesh.shape)
    )
    return f"{mesh.device_type} mesh ({dims}) on groups {list(C.mesh_dim_group_names(mesh))}"


def install_mesh_guard(source: Any, mesh: Any) -> None:
    install_predicate(
        source,
        same_mesh_check,
        f"dynamo_dist: `{source.name}` is the same {describe_mesh(mesh)}",
    )
    note(source, "mesh")
