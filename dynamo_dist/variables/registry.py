"""Which tracker a value gets. Called from the Dynamo hooks in ``_hooks.py``.

Sourceless values go through the type -> tracker table in ``wrap.py`` (each
tracker module registers its type); sourced values get their guard here.
"""

from __future__ import annotations

import inspect
from typing import Any

from .. import _compat as C
from .. import guards
from .breaks import graph_break
from .device_mesh import DeviceMeshVariable
from .dtensor import DTensorFunctionVariable, dtensor_functions
from .functions import DistFunctionVariable, dist_functions
from .placement import PlacementClassVariable, PlacementVariable
from .process_group import ProcessGroupVariable, WorldHolderVariable
from .wrap import tracker_for  # noqa: F401  (the hooks' entry point for sourceless values)


def sourceless_types() -> list[type]:
    """Exact types registered in SourcelessBuilder's fast table."""
    return [C.DeviceMesh, C.ProcessGroup, *C.PLACEMENT_TYPES]


def tracker_for_source(tx: Any, source: Any, value: Any) -> Any:
    """A tracker for a value read from ``source`` (argument, global, attribute),
    with its guard installed; None to let stock Dynamo handle the value."""
    if isinstance(value, C.DeviceMesh):
        try:
            guards.mesh_fingerprint(value)
        except Exception:
            # A mesh still being constructed: Dynamo is tracing DeviceMesh's
            # own __init__ (init_device_mesh ran after a graph break). Stock
            # crashes here; we let that frame run eagerly.
            graph_break(
                "DeviceMesh under construction",
                type(value).__name__,
                "Dynamo reached a DeviceMesh whose constructor has not finished "
                "(mesh creation running inside a compiled region).",
                ["Create meshes once, outside the compiled function, and pass them in."],
            )
        guards.install_mesh_guard(source, value)
        return DeviceMeshVariable(value, source=source)
    if C.STOCK_TRACKS_WORLD_HOLDERS and C.is_world_holder(value):
        return WorldHolderVariable(value, source=source)
    if isinstance(value, C.ProcessGroup):
        guards.install_group_guard(source)
        return ProcessGroupVariable(value, source=source)
    if isinstance(value, C.Placement):
        guards.install_placement_guard(source, value)
        return PlacementVariable(value, source=source)
    if inspect.isclass(value) and issubclass(value, C.Placement) and C.is_builtin_placement_type(value):
        guards.install_identity_guard(source)
        return PlacementClassVariable(value, source=source)
    if inspect.isfunction(value):
        dt_name = dtensor_functions().get(value)
        if dt_name is not None:
            guards.install_identity_guard(source)
            return DTensorFunctionVariable(value, dt_name, source=source)
        name = dist_functions().get(value)
        if name is not None:
            guards.install_identity_guard(source)
            return DistFunctionVariable(value, name, source=source)
    return None
