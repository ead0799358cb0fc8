"""DeviceMesh: its member table, its tracker (``DeviceMeshVariable``, a mesh
whose queries fold at trace time) and its declaration (``DEVICE_MESH``)."""

from __future__ import annotations

from typing import Any, Callable, ClassVar, Mapping

import torch.distributed as dist

from .. import _compat as C
from ..caching import keys
from ..guards import install_mesh_guard
from ..tracked_types import TrackedType, declare
from .base import DistObjectVariable, Handler, group_member
from .breaks import Break, raise_like_eager
from .classes import DistClassVariable
from .folding import constant_args
from .members import TRACKED_GROUPS, TRACKED_MESH, Kind, Member, MemberTable
from .rebuild import replay_derivation
from .runtime_rank import runtime_coordinate, runtime_rank_in

DEVICE_MESH_MEMBERS = MemberTable("DeviceMesh", {
    "ndim": Member(Kind.FOLD),
    "shape": Member(Kind.FOLD),
    "size": Member(Kind.FOLD, method=True),
    "mesh_dim_names": Member(Kind.FOLD),
    "device_type": Member(Kind.FOLD),
    "get_rank": Member(Kind.RANK, method=True),
    "get_local_rank": Member(Kind.RANK, method=True),
    "get_coordinate": Member(Kind.RANK, method=True),
    "__getitem__": Member(Kind.FOLD, method=True, outcome=TRACKED_MESH),
    "_flatten": Member(Kind.FOLD, method=True, outcome=TRACKED_MESH),
    "get_group": Member(Kind.GROUP, method=True),
    "get_all_groups": Member(Kind.FOLD, method=True, outcome=TRACKED_GROUPS),
    "mesh": Member(Kind.TENSOR),
})


def known_meshes(tx: Any) -> dict[int, "DeviceMeshVariable"]:
    """Meshes tracked in the frame being traced, by identity of the real mesh."""
    return C.dynamo.frame_state(tx, "meshes")


def mesh_group_member(vt: "DeviceMeshVariable", tx: Any, name: str, member: Member, args: list,
                      kwargs: dict) -> Any:
    """GROUP on a mesh: the group of a mesh dim, which remembers that dim, so
    its rank can be computed from the mesh's rank table under
    compile_on_one_rank (identical on every rank) rather than from this
    rank's own group members."""
    result = group_member(vt, tx, name, member, args, kwargs)
    dim = (list(args) + list(kwargs.values()) or [None])[0]
    index = dim.as_python_constant() if dim is not None else 0
    if isinstance(index, str):
        index = C.distributed.mesh_dim_index(vt.value, index)
    elif isinstance(index, int):
        index %= vt.value.ndim  # get_group(-1): the runtime op needs a dim >= 0
    result.mesh_dim = (vt.value, index) if group_follows_mesh(vt.value, index) else None
    return result


def runtime_global_rank(vt: "DeviceMeshVariable", tx: Any, args: list, kwargs: dict) -> Any:
    return runtime_rank_in(tx, list(range(dist.get_world_size())))


def runtime_mesh_coordinate(vt: "DeviceMeshVariable", tx: Any, args: list, kwargs: dict) -> Any:
    mesh = vt.value
    if mesh.get_coordinate() is None:  # this rank is not in the mesh: None, as in eager
        return C.dynamo.constant(None)
    full = C.distributed.mesh_full_tensor_list(mesh)
    return C.dynamo.make_tuple([runtime_coordinate(tx, full, i) for i in range(mesh.ndim)])


def runtime_local_rank(vt: "DeviceMeshVariable", tx: Any, args: list, kwargs: dict) -> Any:
    # get_local_rank(mesh_dim=None): validate and resolve the dim eagerly
    # (same errors as eager), only the rank itself is computed at run time.
    mesh = vt.value
    full = C.distributed.mesh_full_tensor_list(mesh)
    pargs, pkwargs = constant_args(tx, "DeviceMesh.get_local_rank", args, kwargs)
    dim = pargs[0] if pargs else pkwargs.get("mesh_dim")
    try:
        mesh.get_local_rank(dim)  # raises like eager on a bad dim
        index = 0 if dim is None else (
            C.distributed.mesh_dim_index(mesh, dim) if isinstance(dim, str) else dim % mesh.ndim
        )
    except Exception as e:
        raise_like_eager(tx, e)
    if not group_follows_mesh(mesh, index):
        return runtime_rank_in(tx, dist.get_process_group_ranks(mesh.get_group(index)))
    return runtime_coordinate(tx, full, index)


class DeviceMeshVariable(DistObjectVariable):
    MEMBERS = DEVICE_MESH_MEMBERS
    LABEL = "DeviceMesh"
    FOLDED_PRIVATE = C.distributed.FOLDED_PRIVATE_MESH_ATTRIBUTES
    KIND_HANDLERS: ClassVar[Mapping[Kind, Handler]] = {
        **DistObjectVariable.KIND_HANDLERS, Kind.GROUP: mesh_group_member,
    }
    # RANK rows under compile_on_one_rank: the function computing each in the graph.
    RUNTIME_RANK: ClassVar[Mapping[str, Callable[..., Any]]] = {
        "get_rank": runtime_global_rank,
        "get_local_rank": runtime_local_rank,
        "get_coordinate": runtime_mesh_coordinate,
    }

    def __init__(self, value: Any, **kwargs: Any) -> None:
        super().__init__(value, **kwargs)
        if self.source is not None or self.rebuild is not None:
            # A DTensor made in this frame reports its mesh as a bare object;
            # this lets ``y.device_mesh`` be the tracker that knows how to
            # reload or rebuild it (see dtensor.var_getattr).
            tx = C.dynamo.current_tx()
            if tx is not None:
                known_meshes(tx).setdefault(id(value), self)

    def vt_getitem(self, tx: Any, key: Any) -> Any:
        # mesh["tp"], mesh["dp", "tp"], mesh[("dp", "tp")]: a tracked submesh
        # rebuilt as parent[key]; no graph node.
        return self.apply_member(tx, "__getitem__", self.MEMBERS["__getitem__"], [key], {})

    def runtime_rank_member(self, tx: Any, name: str, args: list, kwargs: dict) -> Any:
        return self.RUNTIME_RANK[name](self, tx, args, kwargs)


def group_follows_mesh(mesh: Any, index: int) -> bool:
    """Whether this rank's rank in the group of mesh dim ``index`` is its
    coordinate along that dim. Not always: torch reuses the default group
    for a dim spanning the whole world even when the mesh orders the ranks
    otherwise (``DeviceMesh("cpu", [1, 0])``), and eager answers
    ``get_local_rank``/``group.rank()`` from the group."""
    coordinate = mesh.get_coordinate()
    if coordinate is None:
        return True
    row = mesh.mesh[(*coordinate[:index], slice(None), *coordinate[index + 1:])].tolist()
    return dist.get_process_group_ranks(mesh.get_group(index)) == row


DEVICE_MESH_MEMBERS.require_named_handlers(DeviceMeshVariable.RUNTIME_RANK, "DeviceMeshVariable.RUNTIME_RANK",
                                           lambda name, member: member.kind is Kind.RANK)

DEVICE_MESH = declare(TrackedType(
    name="DeviceMesh",
    python_type=C.distributed.DeviceMesh,
    tracker=DeviceMeshVariable,
    members=DEVICE_MESH_MEMBERS,
    # Identity fast path, else the fingerprint (guards/mesh.py); a mesh whose
    # constructor has not finished has none: a clean break, its frame runs eagerly.
    guard=install_mesh_guard,
    ready=C.distributed.mesh_is_constructed,
    not_ready=Break.MESH_UNDER_CONSTRUCTION,
    # Its groups, layout and its root's flattened meshes (caching/keys.py).
    key_identity=keys.mesh_key_identity,
    key_pickle=keys.mesh_key_pickle,
    # A submesh or a mesh read from a DTensor made in the frame: its recipe.
    rebuild=replay_derivation,
    # A cached graph's mesh constant: this process's mesh of that identity.
    on_cache_load=keys.live_mesh,
    fast_types=(C.distributed.DeviceMesh,),
    sourceless=True,
    class_tracker=DistClassVariable,
))
