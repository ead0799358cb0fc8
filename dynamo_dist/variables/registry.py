"""Which tracker a value gets. Called from the Dynamo hooks in ``_hooks/core.py``.

Sourceless values go through the type -> tracker table in ``wrap.py`` (each
tracker module registers its type); sourced values get their guard here.
"""

from __future__ import annotations

import inspect
from typing import Any

from .. import _compat as C
from .. import guards
from .breaks import Break, graph_break
from .classes import DistClassVariable, is_tracked_class
from .device_mesh import DeviceMeshVariable
from .dtensor import DTensorFunctionVariable, dtensor_functions
from .functions import DistFunctionVariable, dist_functions
from .placement import PlacementClassVariable, PlacementVariable, UserPlacementClassVariable
from .process_group import ProcessGroupVariable, WorldHolderVariable
from .wrap import tracker_for as _instance_tracker_for


# A tracked class (``is_tracked_class``) -> its tracker: the first row whose
# test the class passes.
CLASS_TRACKERS: tuple[tuple[Any, type], ...] = (
    (lambda cls: issubclass(cls, C.Placement) and C.is_builtin_placement_type(cls), PlacementClassVariable),
    (lambda cls: issubclass(cls, C.Placement), UserPlacementClassVariable),
    (lambda cls: True, DistClassVariable),
)


def class_tracker(value: type, source: Any = None) -> Any:
    """The tracker of a tracked class."""
    tracker = next(kind for test, kind in CLASS_TRACKERS if test(value))
    return tracker(value, source=source)


def tracker_for(value: Any) -> Any:
    """A tracker for a value built or derived during tracing (the hooks'
    entry point for sourceless values), or None to leave it to stock."""
    if is_tracked_class(value):
        return class_tracker(value)
    return _instance_tracker_for(value)


def sourceless_types() -> list[type]:
    """Exact types registered in SourcelessBuilder's fast table."""
    return [C.DeviceMesh, C.ProcessGroup, *C.PLACEMENT_TYPES]


def tracker_for_source(tx: Any, source: Any, value: Any) -> Any:
    """A tracker for a value read from ``source`` (argument, global, attribute),
    with its guard installed; None to let stock Dynamo handle the value."""
    if isinstance(value, C.DeviceMesh):
        try:
            guards.known_fingerprint(value, not C.compile_on_one_rank())
        except Exception:
            # A mesh still being constructed: Dynamo is tracing DeviceMesh's
            # own __init__ (init_device_mesh ran after a graph break). Stock
            # crashes here; we let that frame run eagerly.
            graph_break(Break.MESH_UNDER_CONSTRUCTION, context=type(value).__name__)
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
    if is_tracked_class(value):
        guards.install_identity_guard(source)
        return class_tracker(value, source)
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
