"""Which tracker a value gets. Called from the Dynamo hooks in ``_hooks.py``."""

from __future__ import annotations

import functools
import inspect
from typing import Any

from .. import _compat as C
from .. import guards


@functools.cache
def _types() -> tuple[type, type, type]:
    from torch.distributed import ProcessGroup
    from torch.distributed.device_mesh import DeviceMesh
    from torch.distributed.tensor.placement_types import Placement

    return DeviceMesh, ProcessGroup, Placement


def tracker_for(value: Any, rebuild: Any = None) -> C.VariableTracker | None:
    """A tracker for a value with no source of its own (built or derived
    during tracing), or None if it is not a distributed object."""
    from .device_mesh import DeviceMeshVariable
    from .placement import PlacementVariable
    from .process_group import ProcessGroupVariable

    DeviceMesh, ProcessGroup, Placement = _types()
    if isinstance(value, DeviceMesh):
        return DeviceMeshVariable(value, rebuild=rebuild)
    if isinstance(value, ProcessGroup):
        return ProcessGroupVariable(value, rebuild=rebuild)
    if isinstance(value, Placement):
        # Built-in placements rebuild by constructor; others need the recipe.
        from .placement import is_builtin_placement_type

        return PlacementVariable(
            value, rebuild=None if is_builtin_placement_type(type(value)) else rebuild
        )
    return None


def sourceless_types() -> list[type]:
    """Exact types registered in SourcelessBuilder's fast table."""
    import torch.distributed.tensor.placement_types as pt

    DeviceMesh, ProcessGroup, Placement = _types()
    return [
        DeviceMesh,
        ProcessGroup,
        pt.Shard,
        pt.Replicate,
        pt.Partial,
        pt._StridedShard,
        pt._MaskPartial,
    ]


def tracker_for_source(tx: Any, source: Any, value: Any) -> C.VariableTracker | None:
    """A tracker for a value read from ``source`` (argument, global, attribute),
    with its guard installed; None to let stock Dynamo handle the value."""
    from .device_mesh import DeviceMeshVariable
    from .functions import DistFunctionVariable, dist_functions
    from .placement import PlacementClassVariable, PlacementVariable, is_builtin_placement_type
    from .process_group import ProcessGroupVariable

    DeviceMesh, ProcessGroup, Placement = _types()
    if isinstance(value, DeviceMesh):
        try:
            guards.mesh_fingerprint(value)
        except Exception:
            # A mesh still being constructed: Dynamo is tracing DeviceMesh's
            # own __init__ (init_device_mesh ran after a graph break). Stock
            # crashes here; we let that frame run eagerly.
            from .base import graph_break

            graph_break(
                "DeviceMesh under construction",
                type(value).__name__,
                "Dynamo reached a DeviceMesh whose constructor has not finished "
                "(mesh creation running inside a compiled region).",
                ["Create meshes once, outside the compiled function, and pass them in."],
            )
        guards.install_mesh_guard(source, value)
        return DeviceMeshVariable(value, source=source)
    if isinstance(value, ProcessGroup):
        guards.install_group_guard(source)
        return ProcessGroupVariable(value, source=source)
    if isinstance(value, Placement):
        guards.install_placement_guard(source, value)
        return PlacementVariable(value, source=source)
    if inspect.isclass(value) and issubclass(value, Placement) and is_builtin_placement_type(value):
        C.install_guard(source.make_guard(C.GuardBuilder.ID_MATCH))
        return PlacementClassVariable(value, source=source)
    if inspect.isfunction(value):
        from .dtensor import DTensorFunctionVariable, dtensor_functions

        dt_name = dtensor_functions().get(value)
        if dt_name is not None:
            C.install_guard(source.make_guard(C.GuardBuilder.ID_MATCH))
            return DTensorFunctionVariable(value, dt_name, source=source)
        name = dist_functions().get(value)
        if name is not None:
            C.install_guard(source.make_guard(C.GuardBuilder.ID_MATCH))
            return DistFunctionVariable(value, name, source=source)
    return None
