"""dynamo_dist's VariableTrackers, one module per tracked type.

Each of those modules defines its type's member table and tracker and
declares the type (``dynamo_dist.tracked_types.declare``); ``build`` is the
one entry point that dispatches on the declarations. Importing the package
imports every one of them, in this order (the order of ``ALL_TABLES``).
"""

from .. import tracked_types
from .device_mesh import DEVICE_MESH_MEMBERS, DeviceMeshVariable
from .placement import PLACEMENT_MEMBERS, PlacementClassVariable, PlacementVariable
from .collectives import WORK_MEMBERS, WorkVariable
from .process_group import PROCESS_GROUP_MEMBERS, ProcessGroupVariable
from .functions import DIST_FUNCTIONS, DistFunctionVariable
from .dtensor import DTENSOR_MEMBERS, DTensorFunctionVariable
from .modes import DTENSOR_MODES, DTensorModeVariable
from .spmd import SpmdCheckerVariable, SpmdFunctionVariable
from .members import MemberTable

tracked_types.all_declared()

# The member tables users meet, by type (the coverage page's tables, in its
# order; the c10d helpers functional collectives call are internal).
ALL_TABLES: dict[str, MemberTable] = {
    table.name: table
    for table in (DEVICE_MESH_MEMBERS, PLACEMENT_MEMBERS, PROCESS_GROUP_MEMBERS, DIST_FUNCTIONS, WORK_MEMBERS,
                  DTENSOR_MEMBERS, DTENSOR_MODES)
}

__all__ = [
    "ALL_TABLES",
    "DeviceMeshVariable",
    "DistFunctionVariable",
    "DTensorFunctionVariable",
    "DTensorModeVariable",
    "PlacementClassVariable",
    "PlacementVariable",
    "ProcessGroupVariable",
    "WorkVariable",
    "SpmdCheckerVariable",
    "SpmdFunctionVariable",
]
