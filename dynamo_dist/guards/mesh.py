"""DeviceMesh guard: identity fast path, semantic fingerprint otherwise.

An equal mesh that is a new object (equal under this release's
``DeviceMesh.__eq__`` and the same process groups behind each dim) reuses the graph; a mesh
with the same shape but other groups, or another ndim, recompiles cleanly.
"""

from __future__ import annotations

import hashlib
import weakref
from dataclasses import dataclass, field
from typing import Any, Callable

from .. import _compat as C
from ._notes import note


# A rank map longer than this enters a fingerprint as its digest, so that
# comparing and keying fingerprints costs the same on 8 ranks as on 65,536.
_LONG = 32


def _compact(value: Any) -> Any:
    if isinstance(value, tuple) and len(value) > _LONG:
        return ("digest", len(value), hashlib.blake2b(repr(value).encode(), digest_size=16).hexdigest())
    return value


class _WeaklyReferenced:
    __slots__ = ("__weakref__",)


@dataclass(frozen=True, slots=True, eq=False, init=False)
class MeshFingerprint(_WeaklyReferenced):
    """Everything a folded mesh answer can depend on, as a frozen value whose
    hash is computed once. Equal fingerprints of live meshes are one object
    (``known_fingerprint`` interns them), so the mesh guard compares them
    with ``is``; ``==`` compares the hash first, then the fields."""

    # The mesh's class.
    mesh_type: type
    # Every field this release's DeviceMesh.__eq__ compares (rank map, layout,
    # device type, dim names, thread id; 2.15: _preserve_rank_order), a long
    # rank map as its digest.
    eq_fields: tuple
    # The process group behind each mesh dim, by name.
    group_names: tuple[str, ...]
    # This rank's coordinate in the mesh; None when rank answers do not
    # depend on it (``compile_on_one_rank``) or this rank is not in the mesh.
    coordinate: tuple[int, ...] | None
    # The flattened meshes of the mesh's root (name, layout, group): slicing
    # by a flattened name folds to one, and DTensor's redistribute planner
    # bakes the group of one that covers the dims it merges into a graph.
    flattened: tuple = ()
    # hash of the fields above, computed once.
    _hash: int = field(repr=False, compare=False, default=0)

    def __init__(self, mesh_type: type, eq_fields: tuple, group_names: tuple[str, ...],
                 coordinate: tuple[int, ...] | None, flattened: tuple = ()) -> None:
        # Frozen: fields are set once, here (a mesh seen for the first time
        # pays for this on its first guard check).
        init = object.__setattr__
        init(self, "mesh_type", mesh_type)
        init(self, "eq_fields", eq_fields)
        init(self, "group_names", group_names)
        init(self, "coordinate", coordinate)
        init(self, "flattened", flattened)
        init(self, "_hash", hash((mesh_type, eq_fields, group_names, coordinate, flattened)))

    def __hash__(self) -> int:
        return self._hash

    def __eq__(self, other: object) -> bool:
        if self is other:
            return True
        if type(other) is not MeshFingerprint:
            return NotImplemented
        return (self._hash == other._hash and self.mesh_type is other.mesh_type
                and self.eq_fields == other.eq_fields and self.group_names == other.group_names
                and self.coordinate == other.coordinate and self.flattened == other.flattened)

    def __reduce__(self) -> tuple:
        # Made again from its fields (the hash is this process's own).
        return MeshFingerprint, (self.mesh_type, self.eq_fields, self.group_names, self.coordinate,
                                 self.flattened)


def mesh_fingerprint(mesh: Any, with_coordinate: bool | None = None) -> MeshFingerprint:
    """Everything a folded mesh answer can depend on. This rank's coordinate
    counts unless rank answers are runtime ops (``compile_on_one_rank``);
    ``with_coordinate`` decides it without reading that config."""
    if with_coordinate is None:
        with_coordinate = not C.distributed.compile_on_one_rank()
    coordinate = mesh.get_coordinate() if with_coordinate else None
    return MeshFingerprint(
        type(mesh),
        tuple(_compact(v) for v in C.distributed.mesh_eq_key(mesh)),
        C.distributed.mesh_dim_group_names(mesh),
        None if coordinate is None else tuple(coordinate),
        C.distributed.mesh_flatten_state(mesh),
    )


# The fingerprint of each live mesh object, computed once, with its root's
# flatten table and that table's size then: a mesh does not change after
# construction but its root gains flattened meshes (``_flatten`` only adds
# entries), so an entry holds while the table keeps its size. A guard that
# meets an equal new mesh on every call (a submesh sliced each step) then pays
# for its fields once per object.
_KNOWN: dict[tuple[int, bool], tuple[MeshFingerprint, dict, int]] = {}
# One object per distinct fingerprint while any mesh or guard holds it, so
# that equal fingerprints are the same object.
_INTERNED: "weakref.WeakValueDictionary[MeshFingerprint, MeshFingerprint]" = weakref.WeakValueDictionary()


# A weak reference to each mesh in ``_KNOWN``, whose callback forgets it.
_WATCHED: dict[tuple[int, bool], weakref.ref] = {}


def _forget(key: tuple[int, bool]) -> Callable[[Any], None]:
    def forget(_: Any) -> None:
        _KNOWN.pop(key, None)
        _WATCHED.pop(key, None)

    return forget


def known_fingerprint(mesh: Any, with_coordinate: bool) -> MeshFingerprint:
    """``mesh_fingerprint`` of a constructed mesh, remembered while it lives;
    equal fingerprints are one object."""
    key = (id(mesh), with_coordinate)
    entry = _KNOWN.get(key)
    if entry is not None and len(entry[1]) == entry[2]:
        return entry[0]
    flattened = C.distributed.mesh_flatten_mapping(mesh)
    computed = mesh_fingerprint(mesh, with_coordinate)
    found = _INTERNED.setdefault(computed, computed)
    _KNOWN[key] = (found, flattened, len(flattened))
    if key not in _WATCHED:
        _WATCHED[key] = weakref.ref(mesh, _forget(key))
    return found


def fingerprinted_mesh_ids() -> list[int]:
    """The ``id`` of each live mesh whose fingerprint is remembered (one
    entry per mesh and coordinate choice)."""
    return [mesh_id for mesh_id, _ in _KNOWN]


def same_mesh_check(mesh_now: Any) -> Callable[[Any], bool]:
    """The per-call test that a mesh is ``mesh_now`` or equal to it with the
    same groups and flattened meshes (coordinate included unless
    ``compile_on_one_rank``, decided now, as the graph was): one ``is`` and
    one ``len`` of its root's flatten table when it is the same object."""
    with_coordinate = not C.distributed.compile_on_one_rank()
    expected = known_fingerprint(mesh_now, with_coordinate)
    same = weakref.ref(mesh_now)
    flattened = C.distributed.mesh_flatten_mapping(mesh_now)
    count = len(flattened)
    mesh_type = type(mesh_now)

    def check(m: Any) -> bool:
        # Interned: an equal fingerprint is ``expected`` itself. A later
        # ``_flatten`` on the root grows its table: the fingerprint is made again.
        return (m is same() and len(flattened) == count) or (
            type(m) is mesh_type and known_fingerprint(m, with_coordinate) is expected)

    return check


@dataclass(frozen=True)
class MeshExpected:
    """What a mesh guard expects, as picklable data: the compile-time mesh's
    fingerprint and whether its coordinate counts. ``live`` (a weak
    reference to that mesh, not pickled) is the compiling process's
    shortcut to the identity fast path."""

    fingerprint: MeshFingerprint
    with_coordinate: bool
    live: Any = field(default=None, compare=False, repr=False)

    def __reduce__(self) -> tuple:
        return MeshExpected, (self.fingerprint, self.with_coordinate)


def mesh_expected(mesh: Any) -> MeshExpected:
    with_coordinate = not C.distributed.compile_on_one_rank()
    return MeshExpected(known_fingerprint(mesh, with_coordinate), with_coordinate, weakref.ref(mesh))


def mesh_check(expected: MeshExpected) -> Callable[[Any], bool]:
    """The per-call mesh test: ``same_mesh_check`` of the compile-time mesh
    where it is alive, else (a guard torch's precompile loaded) a mesh whose
    fingerprint, computed once per mesh object, is the expected one."""
    mesh = expected.live() if expected.live is not None else None
    if mesh is not None:
        return same_mesh_check(mesh)
    fingerprint = _INTERNED.setdefault(expected.fingerprint, expected.fingerprint)
    with_coordinate, mesh_type = expected.with_coordinate, fingerprint.mesh_type
    # The mesh that matched last, then ``same_mesh_check``'s identity test:
    # (a weak reference to it, its root's flatten table, that table's size).
    matched: list[Any] = [None, None, -1]

    def check(m: Any) -> bool:
        last = matched[0]
        if last is not None and m is last() and len(matched[1]) == matched[2]:
            return True
        if type(m) is mesh_type and known_fingerprint(m, with_coordinate) is fingerprint:
            flattened = C.distributed.mesh_flatten_mapping(m)
            matched[:] = [weakref.ref(m), flattened, len(flattened)]
            return True
        return False

    return check


def describe_mesh(mesh: Any) -> str:
    names = mesh.mesh_dim_names
    dims = ", ".join(
        f"{names[i] if names else i}={size}" for i, size in enumerate(mesh.shape)
    )
    flattened = [name for name, _, _ in C.distributed.mesh_flatten_state(mesh)]
    text = f"{mesh.device_type} mesh ({dims}) on groups {list(C.distributed.mesh_dim_group_names(mesh))}"
    return f"{text}, flattened {flattened}" if flattened else text


def install_mesh_guard(source: Any, mesh: Any) -> None:
    C.dynamo.guard_predicate(
        source,
        mesh_expected,
        mesh_check,
        f"dynamo_dist: `{source.name}` is the same {describe_mesh(mesh)}",
    )
    note(source, "mesh")
