"""ProcessGroup: its member table, its tracker (``ProcessGroupVariable``, a
process group whose queries fold at trace time) and its declaration
(``PROCESS_GROUP``); and the holders of the default group on 2.11 / 2.12
(``WORLD_HOLDER``)."""

from __future__ import annotations

from typing import Any

import torch.distributed as dist

from .. import _compat as C
from ..caching import keys
from ..guards import install_group_guard
from ..tracked_types import TrackedType, declare
from .base import DistObjectVariable
from .breaks import Break, check_causes
from .collectives import group_collective
from .classes import DistClassVariable
from .identity import Identity
from .members import Kind, Member, MemberTable
from .rebuild import replay_derivation
from .runtime_rank import runtime_coordinate, runtime_rank_in

PROCESS_GROUP_MEMBERS = MemberTable("ProcessGroup", {
    "rank": Member(Kind.RANK, method=True),
    "size": Member(Kind.FOLD, method=True),
    "group_name": Member(Kind.FOLD),
    "group_desc": Member(Kind.FOLD),
    "_get_backend_name": Member(Kind.FOLD, method=True),
    "name": Member(Kind.FOLD, method=True),
    # Its collectives: traced as torch.distributed's (always asynchronous:
    # the Work they return waits where its wait() is).
    **{op: Member(Kind.COLLECTIVE, method=True) for op in (
        "allreduce", "allreduce_coalesced", "broadcast", "allgather", "reduce_scatter", "alltoall", "alltoall_base",
        "allgather_into_tensor_coalesced", "reduce_scatter_tensor_coalesced")},
    **{op: Member(Kind.BREAK, method=True, cause=Break.NO_FUNCTIONAL_COLLECTIVE,
                  hint="Use torch.distributed's all_reduce, all_gather_into_tensor or broadcast (or this group's "
                  "allreduce, allgather, broadcast), which are traced, or call it outside the compiled function.")
       for op in ("reduce", "gather", "scatter")},
    **{op: Member(Kind.BREAK, method=True, cause=Break.BACKEND_CALL,
                  hint="Use torch.distributed.isend / irecv with TORCHDYNAMO_ENABLE_P2P_COMPILATION=1 (torch traces "
                  "them), or call it outside the compiled function.")
       for op in ("send", "recv", "recv_anysource")},
    **{op: Member(Kind.BREAK, method=True, cause=Break.HOST_BARRIER,
                  hint="Call it outside the compiled function, before or after the call. Inside, the collectives "
                  "order the ranks through the tensors they produce.")
       for op in ("barrier", "monitored_barrier")},
    **{op: Member(Kind.BREAK, method=True, cause=Break.HOST_STATE_CALL,
                  hint="Call it outside the compiled function.")
       for op in ("abort", "shutdown", "set_timeout")},
})


check_causes(PROCESS_GROUP_MEMBERS)
PROCESS_GROUP_MEMBERS.require_named_handlers(C.c10d.GROUP_METHOD_FORMS, "_compat.c10d.GROUP_METHOD_FORMS",
                                             rows=lambda name, member: member.kind is Kind.COLLECTIVE)


class WorldHolderVariable(C.slots.ValueTracker):
    """``dist.group`` / ``dist.GroupMember`` on 2.11 / 2.12: its ``WORLD`` is
    read at its source, so the group is identity-guarded there and reloads
    from it (stock's tracker drops the source: ``pg is dist.group.WORLD`` and
    returning it broke). Other attributes are stock's."""

    def vt_getattr(self, tx: Any, name: str) -> Any:
        if name == "WORLD":
            return C.dynamo.wrap_sourced(tx, C.dynamo.attr_source(self.source, name), self.value.WORLD)
        return C.slots.slot_method(C.stock.stock_wrap(tx, self.source, self.value), "vt_getattr")(tx, name)

    def identity(self) -> Identity:
        return Identity.PINNED  # identity-guarded at its source


class ProcessGroupVariable(DistObjectVariable):
    MEMBERS = PROCESS_GROUP_MEMBERS
    LABEL = "ProcessGroup"
    STATE = ("mesh_dim",)
    KIND_HANDLERS = {**DistObjectVariable.KIND_HANDLERS, Kind.COLLECTIVE: group_collective}

    def __init__(self, value: Any, mesh_dim: tuple | None = None, **kwargs: Any) -> None:
        super().__init__(value, **kwargs)
        # (mesh, dim) when the group came from mesh.get_group(dim).
        self.mesh_dim = mesh_dim

    def identity(self) -> Identity:
        # Passed in: ID_MATCH. Taken from a mesh: the mesh guard holds the
        # group's name, which resolves to one live group.
        return Identity.PINNED if self.source is not None or self.rebuild is not None else Identity.BY_VALUE

    def vt_hash(self, tx: Any) -> tuple[int, bool]:
        # ProcessGroup hashes by identity: usable as a dict key inside the
        # region, but the number must not be baked into bytecode.
        return hash(self.value), True

    def runtime_rank_member(self, tx: Any, name: str, args: list, kwargs: dict) -> Any:
        return runtime_group_rank(tx, self)


def runtime_group_rank(tx: Any, group: ProcessGroupVariable) -> Any:
    """This rank's rank in ``group``, computed in the graph. A group that is a
    mesh dim uses the mesh's full rank table, so the graph is the same on
    every rank; a free-standing group can only use its own member list."""
    if group.mesh_dim is not None:
        mesh, index = group.mesh_dim
        return runtime_coordinate(tx, C.distributed.mesh_full_tensor_list(mesh), index)
    return runtime_rank_in(tx, dist.get_process_group_ranks(group.value))


PROCESS_GROUP = declare(TrackedType(
    name="ProcessGroup",
    python_type=C.distributed.ProcessGroup,
    tracker=ProcessGroupVariable,
    members=PROCESS_GROUP_MEMBERS,
    # Identity (C++ ID_MATCH): a different group recompiles.
    guard=install_group_guard,
    # Its name (caching/keys.py).
    key_identity=keys.group_key_identity,
    # Held by a graph (``compile_on_one_rank``): keyed and saved by name and
    # size, loaded as this process's group of that name (caching/keys.py).
    key_pickle=keys.group_key_pickle,
    cache_save=keys.saved_group,
    saved_as=keys.SavedGroup,
    on_cache_load=keys.saved_group_here,
    # A mesh dim's group: replayed on its mesh (``mesh.get_group(1)``).
    rebuild=replay_derivation,
    fast_types=(C.distributed.ProcessGroup,),
    sourceless=True,
    class_tracker=DistClassVariable,
))

if C.distributed.STOCK_TRACKS_WORLD_HOLDERS:  # where stock has a tracker of its own for them
    WORLD_HOLDER = declare(TrackedType(
        name="dist.group / dist.GroupMember",
        python_type=C.distributed.WORLD_HOLDER_TYPE,
        # Only as read from a source, with no guard of its own: its ``WORLD``
        # is identity-guarded where it is read, and reloads from it.
        tracker=WorldHolderVariable,
    ))
