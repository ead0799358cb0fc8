"""Declarative member tables: one row per member of a tracked distributed type.

The same tables drive the trackers (``variables/*.py``), the README coverage
table (``python -m dynamo_dist coverage``) and the tests that walk them. A
member not listed here is handled by the fallback described in
``base.DistObjectVariable.unknown_member``; each ``Kind`` selects one
handler (``base.DistObjectVariable.KIND_HANDLERS``, the DTensor handlers in
``dtensor.py``, ``functions.DistFunctionVariable.KIND_HANDLERS``): members stock torch evaluates on
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
    TENSOR = "tensor built in the graph from the folded rank table"
    DTENSOR_OP = "one graph call, mesh and placements (any sequence) folded in"
    BREAK = "graph break with hint"


@dataclass(frozen=True)
class Member:
    kind: Kind
    method: bool = False
    # For BREAK rows: what the user should do instead.
    hint: str = ""


DEVICE_MESH_MEMBERS: dict[str, Member] = {
    "ndim": Member(Kind.FOLD),
    "shape": Member(Kind.FOLD),
    "size": Member(Kind.FOLD, method=True),
    "mesh_dim_names": Member(Kind.FOLD),
    "device_type": Member(Kind.FOLD),
    "get_rank": Member(Kind.RANK, method=True),
    "get_local_rank": Member(Kind.RANK, method=True),
    "get_coordinate": Member(Kind.RANK, method=True),
    "__getitem__": Member(Kind.MESH, method=True),
    "_flatten": Member(Kind.MESH, method=True),
    "get_group": Member(Kind.GROUP, method=True),
    "get_all_groups": Member(Kind.GROUPS, method=True),
    "mesh": Member(Kind.TENSOR),
}

PLACEMENT_MEMBERS: dict[str, Member] = {
    "is_shard": Member(Kind.FOLD, method=True),
    "is_replicate": Member(Kind.FOLD, method=True),
    "is_partial": Member(Kind.FOLD, method=True),
    "dim": Member(Kind.FOLD),
    "reduce_op": Member(Kind.FOLD),
    "split_factor": Member(Kind.FOLD),
}

PROCESS_GROUP_MEMBERS: dict[str, Member] = {
    "rank": Member(Kind.RANK, method=True),
    "size": Member(Kind.FOLD, method=True),
    "group_name": Member(Kind.FOLD),
    "group_desc": Member(Kind.FOLD),
    "_get_backend_name": Member(Kind.FOLD, method=True),
    "name": Member(Kind.FOLD, method=True),
    **{
        op: Member(
            Kind.BREAK,
            method=True,
            hint="Use the functional collectives, which compile into the graph: "
            "torch.distributed._functional_collectives.all_reduce(t, 'sum', pg), "
            "all_gather_tensor, reduce_scatter_tensor, all_to_all_single.",
        )
        for op in ("allreduce", "allgather", "broadcast", "reduce_scatter", "alltoall", "barrier", "send", "recv")
    },
}

# torch.distributed functions that fold when given tracked groups.
DIST_FUNCTIONS: dict[str, Member] = {
    "get_rank": Member(Kind.RANK, method=True),
    "get_world_size": Member(Kind.FOLD, method=True),
    "get_process_group_ranks": Member(Kind.FOLD, method=True),
    "get_backend": Member(Kind.FOLD, method=True),
    "is_initialized": Member(Kind.FOLD, method=True),
    "get_group_rank": Member(Kind.FOLD, method=True),
    "get_global_rank": Member(Kind.FOLD, method=True),
    "init_device_mesh": Member(
        Kind.BREAK,
        method=True,
        hint="Create the mesh once, outside the compiled function, and pass it in "
        "(or read it from a global).",
    ),
    "new_group": Member(
        Kind.BREAK,
        method=True,
        hint="Create process groups outside the compiled function and pass them in.",
    ),
}

# c10d helpers that functional collectives call on the group they are given
# (stock folds them only for its own group tracker). Internal: not in the
# coverage table; the funcol cases exercise them.
C10D_GROUP_HELPERS: dict[str, Member] = {
    name: Member(Kind.FOLD, method=True)
    for name in ("_get_group_size_by_name", "_get_group_tag", "_rank_not_in_group",
                 "_resolve_group_name_by_ranks_and_tag")
}

# DTensor members and functions. Attributes are read through the trackers
# above; the operations become one graph call each (variables/dtensor.py).
DTENSOR_MEMBERS: dict[str, Member] = {
    "placements": Member(Kind.FOLD),
    "device_mesh": Member(Kind.MESH),
    "_spec": Member(Kind.FOLD),
    "from_local": Member(Kind.DTENSOR_OP, method=True),
    "to_local": Member(Kind.DTENSOR_OP, method=True),
    "redistribute": Member(Kind.DTENSOR_OP, method=True),
    "full_tensor": Member(Kind.DTENSOR_OP, method=True),
    "distribute_tensor": Member(Kind.DTENSOR_OP, method=True),
}

ALL_TABLES: dict[str, dict[str, Member]] = {
    "DeviceMesh": DEVICE_MESH_MEMBERS,
    "Placement": PLACEMENT_MEMBERS,
    "ProcessGroup": PROCESS_GROUP_MEMBERS,
    "torch.distributed": DIST_FUNCTIONS,
    "DTensor": DTENSOR_MEMBERS,
}
