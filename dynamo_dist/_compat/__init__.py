"""The one boundary between dynamo_dist and torch's internals.

Only this package imports torch's private modules or reads private
attributes of torch objects (``tests/test_structure.py`` checks it). It is
split by job:

- ``dynamo``: Dynamo's tracer, trackers, codegen and guards as small named
  functions;
- ``slots``: tracker behaviours under our names, bound to this release's
  slot names in one table (``Tracker``);
- ``stock``: stock Dynamo's tracker builders, bypassing our hooks;
- ``distributed``: private facts of meshes, DTensors and placements;
- ``observe``: what diagnostics read (logs, metrics, compile hooks).

torch 2.13 facts encoded here:
- VariableTrackers use CPython-slot-style methods (``hash_impl``,
  ``richcompare_impl``, ``mp_subscript_impl``, ``call_obj_hasattr``); older
  releases used ``is_python_hashable`` / ``get_python_hash``.
- Distributed types are registered as opaque objects, with per-member tables
  in ``torch._library.opaque_object``.
"""

from __future__ import annotations

import torch
import torch.distributed.config as _dist_config

from . import stock  # noqa: F401
from .distributed import (  # noqa: F401
    BUILTIN_PLACEMENTS,
    PLACEMENT_TYPES,
    DeviceMesh,
    Placement,
    PlacementFields,
    ProcessGroup,
    assert_async,
    constructor_call,
    dtensor_local,
    funcol,
    is_builtin_placement_type,
    mesh_dim_group_names,
    mesh_dim_index,
    mesh_full_tensor_list,
    mesh_layout_key,
    mesh_rank_map,
    placement_fields,
    runtime_coordinate_op,
)
from .dynamo import (  # noqa: F401
    BuiltinVariable,
    SourcelessBuilder,
    TensorVariable,
    VariableBuilder,
    VariableTracker,
    aot_runtime_wrappers,
    attr_source,
    constant,
    current_compile_id,
    current_tx,
    default_group_source,
    dynamo_disable,
    emit_call_import,
    emit_import,
    example_value,
    frame_state,
    break_graph,
    graph_call,
    guard_attr_equals,
    guard_build_hook,
    guard_identity,
    guard_predicate,
    guard_type,
    inline_call,
    is_literal,
    is_tensor,
    is_tracker,
    list_items,
    make_list,
    make_tuple,
    method_of,
    raise_observed,
    reset,
    user_method,
    wrap_sourced,
)
# The names this module exported before it was split (kept for callers
# outside the core).
from .dynamo import (  # noqa: F401,E402
    AttrSource,
    BaseListVariable,
    ConstantVariable,
    GetAttrVariable,
    GuardBuilder,
    create_call_function,
    install_guard,
    raise_observed_exception,
    unimplemented,
    wrap_fx_proxy,
)
from .slots import SLOTS, Tracker, base_slot, has_slots, slot_method  # noqa: F401
from .stock import stock_create, stock_wrap  # noqa: F401

TORCH_VERSION = torch.__version__.split("+")[0]
SUPPORTED = TORCH_VERSION.startswith("2.13.")


def check_supported() -> None:
    """dynamo_dist hooks Dynamo internals that change between releases."""
    if not SUPPORTED or not has_slots():
        raise RuntimeError(
            f"dynamo_dist supports torch 2.13.x, found torch {torch.__version__}. "
            "Install torch==2.13.0, or leave dynamo_dist uninstalled on this torch."
        )


def stock_member_kind(cls: type, name: str) -> str | None:
    """How stock torch treats ``cls.name`` when it is a registered opaque type.

    Returns "use_real" (evaluated on the real object and baked), "inlined"
    (traced), or None when stock does not list the member.
    """
    try:
        from torch._library.opaque_object import MemberType, get_member_type
    except ImportError:  # pragma: no cover - older torch
        return None
    for klass in cls.__mro__:
        try:
            kind = get_member_type(klass, name)
        except Exception:
            kind = None
        if kind is not None:
            return {MemberType.USE_REAL: "use_real", MemberType.INLINED: "inlined"}.get(
                kind, str(kind).lower()
            )
    return None


def compile_on_one_rank() -> bool:
    return bool(getattr(_dist_config, "compile_on_one_rank", False))
