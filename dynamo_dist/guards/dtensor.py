"""The guard on a DTensor input's spec, in place of stock's ``DTENSOR_SPEC_MATCH``.

Stock deep-copies the spec when it builds that guard, so on every call its
``DTensorSpec._check_equals`` compares the live mesh with the copy, misses
``DeviceMesh.__eq__``'s identity fast path and compares the whole rank map:
O(world size) per DTensor input per call. This guard checks the same facts,
the mesh (by identity, else by its fingerprint, computed once per mesh object,
which also holds the process groups stock's comparison leaves out), the
placements, the shard order and the dtype (shapes are the local tensor's own
guards), at a cost that does not grow with the world.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable

from .. import _compat as C
from .mesh import MeshExpected, describe_mesh, mesh_check, mesh_expected


def _dtype(spec: Any) -> Any:
    meta = spec.tensor_meta
    return None if meta is None else meta.dtype


@dataclass(frozen=True)
class SpecExpected:
    """What a DTensor input's spec must be, as picklable data."""

    mesh: MeshExpected
    placements: tuple
    shard_order: Any
    dtype: Any


def spec_expected(spec_now: Any) -> SpecExpected:
    return SpecExpected(mesh_expected(spec_now.mesh), tuple(spec_now.placements), spec_now.shard_order,
                        _dtype(spec_now))


def spec_check(expected: SpecExpected) -> Callable[[Any], bool]:
    """The per-call test that a spec is the expected one (as stock's
    ``_check_equals(skip_shapes=True)``, the mesh's groups included)."""
    same_mesh = mesh_check(expected.mesh)
    placements, shard_order, dtype = expected.placements, expected.shard_order, expected.dtype

    # The placements tuple that matched last: the same tuple again is equal
    # (as ``==`` of two tuples takes an identical element as equal), without
    # a Python ``__eq__`` per placement, which a loaded guard's unpickled
    # copies would otherwise pay on every call.
    matched = [placements]

    def check(spec: Any) -> bool:
        if not same_mesh(spec.mesh):
            return False
        now = spec.placements
        if now is not matched[0]:
            if not now == placements:
                return False
            matched[0] = now
        return spec.shard_order == shard_order and _dtype(spec) == dtype

    return check


def describe_spec(name: str, spec: Any) -> str:
    return (f"dynamo_dist: `{name}` has placements {tuple(spec.placements)}, dtype {_dtype(spec)} "
            f"on the same {describe_mesh(spec.mesh)}")


# What ``_hooks`` puts at ``C.dynamo.DTENSOR_SPEC_GUARD_POINT`` while installed.
DTENSOR_SPEC_GUARD = C.dynamo.predicate_guard(spec_expected, spec_check, describe_spec)
