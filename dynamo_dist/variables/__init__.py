"""dynamo_dist's VariableTrackers, one module per tracked type.

Importing the package imports every tracker module, which registers its type
in the sourceless table (``wrap.register``).
"""

from .device_mesh import DeviceMeshVariable
from .dtensor import DTensorFunctionVariable
from .functions import DistFunctionVariable
from .placement import PlacementClassVariable, PlacementVariable
from .process_group import ProcessGroupVariable

__all__ = [
    "DeviceMeshVariable",
    "DistFunctionVariable",
    "DTensorFunctionVariable",
    "PlacementClassVariable",
    "PlacementVariable",
    "ProcessGroupVariable",
]
