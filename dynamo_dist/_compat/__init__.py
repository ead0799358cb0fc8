"""The one boundary between dynamo_dist and torch's internals.

Only this package imports torch's private modules or reads private
attributes of torch objects (``tests/unit/test_structure.py`` checks it). It is
split by job:

- ``dynamo``: Dynamo's tracer, trackers, codegen and guards as small named
  functions;
- ``slots``: tracker behaviours under our names, bound to this release's
  slot names in one table (``Tracker``);
- ``stock``: stock Dynamo's tracker builders, bypassing our hooks;
- ``distributed``: private facts of meshes, DTensors and placements;
- ``observe``: what diagnostics read (logs, metrics, compile hooks);
- ``caches``: the compile caches (keys, lookups, artifacts) and the job's store;
- ``packages``: Dynamo's packages (torch's precompile), made and installed for compile once;
- ``aot``: AOTAutograd's partitioner, as the RNG-state fix needs it;
- ``collective``: the ``AsyncCollectiveTensor`` backport (only where torch lacks the fix);
- ``c10d``: torch.distributed's calls as functional collectives (their traced
  forms) and the facts of c10d their trackers need;
- ``dynamo_logs``: what Dynamo's logs say, read back.

Supported torch: ``>=2.11,<2.16`` (``SUPPORTED_RANGE``), three slot families
(``slots.FAMILY``, chosen by feature detection, never by the version string,
which only gates ``install()``):
- dunder (2.11, 2.12): few slot methods; comparison, ``str``, ``repr`` arrive
  as dunder calls on the tracker, dict keys through ``is_python_hashable``;
  2.11 tracks meshes and placements with in-tree trackers, 2.12 as opaque objects;
- slot-style (2.13): ``richcompare_impl``, ``str_impl``, ``var_getattr``,
  ``is_python_equal``...; ``compile_on_one_rank`` lives in
  ``torch.distributed.config``; DeviceMesh's ``__eq__`` compares 5 fields;
- CPython-style (2.14, 2.15): ``tp_richcompare_impl``, ``tp_getattro_impl``...
  (``is_python_equal`` gone); the canonical ``compile_on_one_rank`` is
  ``torch.compiler.config``'s; 2.15's ``DeviceMesh.__eq__`` adds
  ``_preserve_rank_order``.
"""

from __future__ import annotations

from . import aot, c10d, caches, collective, packages, spmd, stock  # noqa: F401
from .distributed import (  # noqa: F401
    compile_on_one_rank,
    folded_rank,
    one_rank_config,
    one_rank_flag_modules,
    ALL_GATHER_SINGLE,
    FOLDED_PRIVATE_MESH_ATTRIBUTES,
    REDUCE_SCATTER_SINGLE,
    all_gather_single,
    reduce_scatter_single,
    BUILTIN_PLACEMENTS,
    RUNTIME_ONLY_FUNCTIONS,
    DTENSOR_UNFLATTEN_POINT,
    UNFLATTEN_LOSES_SHARD_ORDER_FLAG,
    dtensor_unflatten,
    MESH_CONSTRUCTION_FUNCTIONS,
    STOCK_MESH_OPAQUE,
    STOCK_TRACKS_WORLD_HOLDERS,
    WORLD_HOLDER_TYPE,
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
    MESH_EQ_FIELDS,
    mesh_dim_index,
    as_coordinate,
    splits_by_coordinate,
    mesh_eq_key,
    live_meshes,
    mesh_flatten_mapping,
    mesh_flatten_state,
    mesh_hash_key,
    mesh_is_constructed,
    redistribute_planner_flags,
    register_device_mesh_ops,
    mesh_full_tensor_list,
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
    AOT_CODEGEN_HOOK_POINT,
    AOT_RUNTIME_CALL_TREES,
    AUTOGRAD_APPLY_POINT,
    DTENSOR_SPEC_GUARD_POINT,
    IDENTITY_HOOK_POINTS,
    NO_KNOWN_VALUE,
    STOCK_TO_LOCAL_IS_CLOSURE,
    attr_source,
    constant,
    current_compile_id,
    current_tx,
    tracing_tx,
    default_group_source,
    dynamo_disable,
    emit_call_import,
    emit_import,
    constrained_dims,
    marked_sizes,
    fixed_sizes,
    example_value,
    frame_state,
    scope_state,
    in_autograd_function_forward,
    INPLACE_IN_FUNCTION_FORWARD_LOSES_GRAD,
    graph_mark,
    move_to_end,
    nodes_since,
    opcode_number,
    opcode_tables,
    stack_top,
    take_jump,
    tracer_state,
    break_graph,
    graph_call,
    graph_state_call,
    run_on_fakes,
    has_symbolic_size,
    guard_attr_equals,
    guard_build_hook,
    guard_identity,
    GUARD_SERIALIZATION_POINT,
    precompile_caching,
    precompile_caching_set,
    save_plugin_guards,
    INSTALL_GLOBAL_POINT,
    install_global_unbound,
    FSDP_TYPE_UNPICKLE_POINT,
    GUARD_STATE_PICKLE_POINT,
    autograd_function_of_ctx,
    ctx_holds_tensors,
    guarded_values,
    new_ctx_of,
    fsdp_type_made_on_load,
    FSDP_MODULE_PICKLE_POINT,
    fsdp_module_keeps_class,
    guard_predicate,
    guard_same_object,
    predicate_guard,
    guard_type,
    inline_call,
    is_literal,
    is_tensor,
    is_tracker,
    known_value,
    object_value,
    as_list,
    list_items,
    make_list,
    make_tuple,
    method_of,
    raise_observed,
    reset,
    skip_frames_recursively,
    skip_top_level_frames,
    unskip_top_level_frames,
    user_method,
    wrap_sourced,
    BACKEND_CALL_POINT,
    TORCH_FUNCTION_HANDLER,
    TORCH_FUNCTION_QUERIES,
    TorchFunctionModeVariable,
    build_value,
    consume_skip_next,
    delete_attribute,
    dict_items,
    bound_descriptor,
    call_autograd_apply,
    dispatch_to_mode,
    frame_codes,
    graph_input_value,
    module_source,
    is_deleted,
    pending_attribute,
    pending_attributes_by_node,
    set_attribute,
    symbolic_value,
    top_mode_tracker,
    call_builtin,
    operator_behind,
    is_activation_checkpoint,
    call_operator_undispatched,
    mode_pushed,
    dataclass_fields,
    ContextWrappingVariable,
    frame_modes,
    graph_modes,
)
from .dynamo import Unsupported  # noqa: F401,E402  (the exception a fold catches)
from .slots import (  # noqa: F401
    BUILTIN_HOOKS,
    JUMP_HOOKS,
    DUNDERS,
    FAMILY,
    SLOTS,
    SLOTS_2_13,
    SLOTS_2_14,
    TENSOR_GETATTR_SLOT,
    Tracker,
    ValueTracker,
    base_slot,
    missing_slots,
    slot_method,
)
from .stock import stock_create, stock_wrap  # noqa: F401

# Functions skipped as frames together with every frame they call while
# installed (``_hooks``): runtime code that a compiled function's graph break
# or ``.backward()`` runs with Dynamo's callback live.
RUNTIME_ONLY_CALL_TREES: tuple = (*MESH_CONSTRUCTION_FUNCTIONS, *AOT_RUNTIME_CALL_TREES)

from .._supported import SUPPORTED_RANGE, SUPPORTED_TEXT, torch_version, unsupported, version_supported  # noqa: E402,F401

TORCH_VERSION = torch_version()


def check_supported() -> None:
    """dynamo_dist hooks Dynamo internals that change between releases:
    refuse (before anything is patched) a torch outside the supported range,
    or one whose hook points moved."""
    missing = missing_slots() if version_supported() else []
    if not version_supported() or missing:
        raise unsupported(f" (its Dynamo lacks {', '.join(missing)})" if missing else "")


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


