"""Declarative member tables: one row per member of a tracked distributed type.

The same tables drive the trackers (``variables/*.py``), the README coverage
table (``python -m dynamo_dist coverage``) and the tests that walk them. A
member not listed here is handled by the fallback described in
``base.DistObjectVariable.unknown_member``: members stock torch evaluates on
the real object are folded the same way, everything else is a clean
``dynamo_dist:`` graph break.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass


class Kind(enum.Enum):
    FOLD = "folds to a constant"
    RANK = "folds (rank-dependent; runtime op under compile_on_one_rank)"
    MESH = "tracked mesh (no graph node)"
    GROUP = "tracked process group"
    GROUPS = "tuple/list of tracked process groups"
    PLACEMENT = "tracked placement"
    BREAK = "graph break with hint"


@dataclass(frozen=True)
class Member:
    kind: Kind
    method: bool = False
    # How stock torch 2.13 behaves, measured by tests/test_stock_baseline.py
    # and summarised here for the coverage table.
    stock: str = ""
    # For BREAK rows: what the user should do instead.
    hint: str = ""

    @property
    def explanation(self) -> str:
        return self.kind.value


MOVE_OUT = "Compute it outside the compiled function and pass the result in."

DEVICE_MESH_MEMBERS: dict[str, Member] = {
    "ndim": Member(Kind.FOLD, stock="folds; crashes on recompile when ndim changes"),
    "shape": Member(Kind.FOLD, stock="folds"),
    "size": Member(Kind.FOLD, method=True, stock="folds"),
    "mesh_dim_names": Member(Kind.FOLD, stock="folds"),
    "device_type": Member(Kind.FOLD, stock="folds"),
    "get_rank": Member(Kind.RANK, method=True, stock="folds"),
    "get_local_rank": Member(Kind.RANK, method=True, stock="folds"),
    "get_coordinate": Member(Kind.RANK, method=True, stock="folds"),
    "__getitem__": Member(Kind.MESH, method=True, stock="mesh placeholder + getitem node in graph"),
    "_flatten": Member(Kind.MESH, method=True, stock="traced"),
    "get_group": Member(Kind.GROUP, method=True, stock="traced"),
    "get_all_groups": Member(Kind.GROUPS, method=True, stock="crashes"),
    "mesh": Member(
        Kind.BREAK,
        stock="baked tensor constant",
        hint="Use mesh.shape, mesh.size(i) or mesh.get_coordinate() inside the "
        "compiled function, or read mesh.mesh outside it and pass the tensor in.",
    ),
}

PLACEMENT_MEMBERS: dict[str, Member] = {
    "is_shard": Member(Kind.FOLD, method=True, stock="folds"),
    "is_replicate": Member(Kind.FOLD, method=True, stock="folds"),
    "is_partial": Member(Kind.FOLD, method=True, stock="folds"),
    "dim": Member(Kind.FOLD, stock="folds"),
    "reduce_op": Member(Kind.FOLD, stock="folds"),
    "split_factor": Member(Kind.FOLD, stock="crashes (unregistered member)"),
}

PROCESS_GROUP_MEMBERS: dict[str, Member] = {
    "rank": Member(Kind.RANK, method=True, stock="folds; stale for another group"),
    "size": Member(Kind.FOLD, method=True, stock="folds; stale for another group"),
    "group_name": Member(Kind.FOLD, stock="folds"),
    "group_desc": Member(Kind.FOLD, stock="folds"),
    "_get_backend_name": Member(Kind.FOLD, method=True, stock="folds"),
    "name": Member(Kind.FOLD, method=True, stock="unregistered: hard error"),
    **{
        op: Member(
            Kind.BREAK,
            method=True,
            stock="unregistered: hard error",
            hint="Use the functional collectives, which compile into the graph: "
            "torch.distributed._functional_collectives.all_reduce(t, 'sum', pg), "
            "all_gather_tensor, reduce_scatter_tensor, all_to_all_single.",
        )
        for op in ("allreduce", "allgather", "broadcast", "reduce_scatter", "alltoall", "barrier", "send", "recv")
    },
}

# torch.distributed functions that fold when given tracked groups.
DIST_FUNCTIONS: dict[str, Member] = {
    "get_rank": Member(Kind.RANK, method=True, stock="folds"),
    "get_world_size": Member(Kind.FOLD, method=True, stock="folds; stale for another group"),
    "get_process_group_ranks": Member(Kind.FOLD, method=True, stock="folds; stale for another group"),
    "get_backend": Member(Kind.FOLD, method=True, stock="graph break"),
    "is_initialized": Member(Kind.FOLD, method=True, stock="folds"),
    "get_group_rank": Member(Kind.FOLD, method=True, stock="graph break"),
    "get_global_rank": Member(Kind.FOLD, method=True, stock="graph break"),
    "init_device_mesh": Member(
        Kind.BREAK,
        method=True,
        stock="crashes",
        hint="Create the mesh once, outside the compiled function, and pass it in "
        "(or read it from a global).",
    ),
    "new_group": Member(
        Kind.BREAK,
        method=True,
        stock="graph break",
        hint="Create process groups outside the compiled function and pass them in.",
    ),
}

ALL_TABLES: dict[str, dict[str, Member]] = {
    "DeviceMesh": DEVICE_MESH_MEMBERS,
    "Placement": PLACEMENT_MEMBERS,
    "ProcessGroup": PROCESS_GROUP_MEMBERS,
    "torch.distributed": DIST_FUNCTIONS,
}
