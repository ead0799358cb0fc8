"""dynamo_dist's VariableTrackers, one module per tracked type."""

from .device_mesh import DeviceMeshVariable
from .functions import DistFunctionVariable
from .placement import PlacementClassVariable, PlacementVariable
from .process_group import ProcessGroupVariable

__all__ = [
    "DeviceMeshVariable",
    "DistFunctionVariable",
    "PlacementClassVariable",
    "PlacementVariable",
    "ProcessGroupVariable",
]
