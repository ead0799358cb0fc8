"""Facts about torch.distributed's objects that are not public API: private
attributes of meshes and DTensors, private modules, and the built-in
placement types with the fields that define them."""

from __future__ import annotations

import contextlib
import gc
import inspect
import logging
import operator
import re
from dataclasses import dataclass
from typing import Any, Callable

import torch
import torch.distributed._functional_collectives as funcol  # noqa: F401  (re-exported)
import torch.distributed.tensor.placement_types as _pt
from torch.distributed import ProcessGroup  # noqa: F401  (re-exported)
from torch.distributed.device_mesh import DeviceMesh  # noqa: F401  (re-exported)
import torch.distributed.tensor._redistribute as _redistribute
from torch.distributed.device_mesh import init_device_mesh as _init_device_mesh
import torch._dynamo.variables.distributed as _stock_dist_trackers
from torch.distributed import distributed_c10d as _c10d
from torch.distributed.distributed_c10d import _WorldMeta
from torch.distributed.tensor.placement_types import Placement  # noqa: F401  (re-exported)
from torch.distributed.tensor.debug import _clear_sharding_prop_cache
from torch.distributed.tensor._dtensor_spec import DTensorSpec as _DTensorSpec
from torch.distributed.tensor._dtensor_spec import TensorMeta as _TensorMeta
import torch.distributed.config as _dist_config

try:  # 2.14+: the canonical home of compile_on_one_rank
    import torch.compiler.config as _compiler_config
except ImportError:  # pragma: no cover - older torch
    _compiler_config = None

def _dynamo_distributed_has(name: str) -> bool:
    return hasattr(_stock_dist_trackers, name)


# Whether a class is registered with Dynamo as an opaque object: 2.14+ name
# it ``is_custom_class`` (``is_opaque_type`` still answers there, with a
# deprecation warning on every call); 2.12 / 2.13 ``is_opaque_type``; 2.11
# has no registry.
try:
    from torch._library import opaque_object as _opaque_object
except ImportError:  # pragma: no cover - 2.11
    _opaque_object = None
_is_opaque_type = getattr(_opaque_object, "is_custom_class", None) or getattr(_opaque_object, "is_opaque_type", None)

assert_async = torch._assert_async

# The single-tensor gather / reduce-scatter of functional collectives: 2.12
# named them ``all_gather_single`` / ``reduce_scatter_single`` (the
# ``*_tensor`` names are deprecated since); 2.11 has only the ``*_tensor``
# names. Same arguments. User-style programs (coverage cases, fuzz programs)
# spell the name this release has.
ALL_GATHER_SINGLE = "all_gather_single" if hasattr(funcol, "all_gather_single") else "all_gather_tensor"
REDUCE_SCATTER_SINGLE = "reduce_scatter_single" if hasattr(funcol, "reduce_scatter_single") else "reduce_scatter_tensor"
all_gather_single = getattr(funcol, ALL_GATHER_SINGLE)
reduce_scatter_single = getattr(funcol, REDUCE_SCATTER_SINGLE)


def register_device_mesh_ops() -> None:
    """Register torch's ``device_mesh::*`` custom ops, where this release has
    them. torch imports them only while it traces under
    ``compile_on_one_rank``; a graph loaded from a cache calls them
    (``_get_flattened_submesh``, ``_runtime_compute_coordinate_on_dim``)
    in a process that may have traced nothing."""
    try:
        from torch.distributed._ops import device_mesh as _ops  # noqa: F401  (registers; imports DTensor ops)
    except ImportError:  # pragma: no cover - a release without them
        pass


def runtime_coordinate_op() -> Any:
    """The custom op stock uses to compute a mesh coordinate at run time."""
    register_device_mesh_ops()
    return torch.ops.device_mesh._runtime_compute_coordinate_on_dim


def clear_sharding_propagation_cache() -> None:
    """Forget DTensor's cached sharding propagations. The cache is keyed by
    specs, and equal meshes are equal keys: a model parallelized again on new
    meshes equal to earlier ones gets output specs that name the earlier mesh
    objects, which FSDP2 rejects (it checks that a parameter's mesh *is* the
    mesh it was given)."""
    _clear_sharding_prop_cache()


def quiet_redistribute_warnings() -> None:
    """Silence DTensor's warning that a redistribute runs several sequential
    collectives (logged per plan; generated programs make such plans on purpose)."""
    logging.getLogger(_redistribute.__name__).setLevel(logging.ERROR)


# -- DeviceMesh ---------------------------------------------------------------

def _stock_mesh_is_opaque() -> bool:
    return _is_opaque_type is not None and bool(_is_opaque_type(DeviceMesh))


# Whether stock Dynamo treats meshes and placements as opaque objects (2.12+:
# a mesh passed to a DTensor op becomes a graph input) or with its in-tree
# trackers (2.11: ``DeviceMeshVariable`` & co. fold them, no graph value).
STOCK_MESH_OPAQUE: bool = _stock_mesh_is_opaque()


# Private mesh attributes torch's own traced code reads and that fold like a
# public member: functional collectives resolve a ``(mesh, dim)`` group through
# ``_dim_group_names`` (2.12+ stock folds it from its opaque member table; 2.11
# has none). The mesh guard covers it (its fingerprint holds the group names).
FOLDED_PRIVATE_MESH_ATTRIBUTES: tuple[str, ...] = ("_dim_group_names",)


def mesh_dim_group_names(mesh: Any) -> tuple[str, ...]:
    return tuple(mesh._dim_group_names)


def mesh_rank_map(mesh: Any) -> tuple[int, ...]:
    # DeviceMesh.__init__ keeps the rank map as a tuple already (for its
    # hash): reading it costs nothing, converting the tensor ~0.7 us, which
    # the mesh guard's fingerprint path pays on every equal new mesh object.
    flat = getattr(mesh, "_flatten_rank_map", None)
    return flat if isinstance(flat, tuple) else tuple(mesh._rank_map.tolist())


# The attributes ``DeviceMesh.__eq__`` compares (and ``_hash_key`` hashes):
# 2.13 / 2.14 compare these five; 2.15 adds ``_preserve_rank_order``. Read
# from the running torch's ``__eq__`` once, so the mesh guard's fingerprint
# follows the release (the next field torch adds is picked up, or fails
# ``tests/unit/test_guards.py`` instead of giving a stale answer).
_MESH_EQ_FIELDS_2_13 = ("_flatten_rank_map", "_layout", "_device_type", "_mesh_dim_names", "_thread_id")


def _read_mesh_eq_fields() -> tuple[str, ...]:
    try:
        source = inspect.getsource(DeviceMesh.__eq__)
    except (OSError, TypeError):  # pragma: no cover - no source shipped
        return _MESH_EQ_FIELDS_2_13
    fields = tuple(dict.fromkeys(re.findall(r"self\.(\w+)\s*==\s*other\.\1\b", source)))
    return fields or _MESH_EQ_FIELDS_2_13


MESH_EQ_FIELDS: tuple[str, ...] = _read_mesh_eq_fields()
_mesh_eq_getter = operator.attrgetter(*MESH_EQ_FIELDS)


def mesh_eq_key(mesh: Any) -> tuple:
    """The values ``DeviceMesh.__eq__`` compares, in this release."""
    return _mesh_eq_getter(mesh)


# What a finished ``DeviceMesh.__init__`` has set (2.11 to 2.15), beyond the
# fields ``__eq__`` compares: its root, the group behind each dim, and this
# rank's coordinate, the last of them; the root's flatten table comes with the
# root. A submesh's or flattened mesh's maker sets the groups after
# ``__init__`` (``_init_backend=False``), so a mesh that has them is finished.
_SET_BY_CONSTRUCTION: tuple[str, ...] = ("_root_mesh", "_dim_group_names", "_coordinate_on_dim")


_CONSTRUCTED = (*MESH_EQ_FIELDS, *_SET_BY_CONSTRUCTION)


def mesh_is_constructed(mesh: Any) -> bool:
    """Whether ``mesh``'s construction has finished: every field its
    fingerprint and its members read is set. Dynamo meets an unfinished mesh
    only when it traces mesh construction (a frame inside
    ``DeviceMesh.__init__``); a few ``hasattr`` (no fingerprint computed)."""
    return all(hasattr(mesh, name) for name in _CONSTRUCTED) and \
        hasattr(mesh._get_root_mesh(), "_flatten_mapping")


def mesh_hash_key(mesh: Any) -> tuple | None:
    """``DeviceMesh._hash_key()`` (what ``hash(mesh)`` hashes), if this release has it."""
    key = getattr(mesh, "_hash_key", None)
    return key() if key is not None else None


def live_meshes() -> list[Any]:
    """Every ``DeviceMesh`` this process holds now. torch keeps no registry
    of its meshes (``_mesh_resources`` holds only the ``with mesh:`` stack),
    so they are found among the objects the garbage collector tracks: a scan
    of every object, for the rare moment a saved graph needs this process's
    mesh before anything here named it (0.14 s for 375,000 objects on 2.15;
    by exact type, as ``isinstance`` runs torch's custom-class instance
    check on each object)."""
    kinds, todo = set(), [DeviceMesh]
    while todo:
        cls = todo.pop()
        kinds.add(cls)
        todo += [sub for sub in type.__subclasses__(cls) if sub not in kinds]
    return [obj for obj in gc.get_objects() if type(obj) in kinds]


def mesh_flatten_mapping(mesh: Any) -> dict:
    """The live ``name -> flattened mesh`` table of ``mesh``'s root mesh: every
    ``_flatten`` of the root or of any of its submeshes adds to this one dict
    (made with the root, on 2.11 to 2.15)."""
    return mesh._get_root_mesh()._flatten_mapping


def mesh_flatten_state(mesh: Any) -> tuple:
    """What the flattened meshes of ``mesh``'s root are, as plain data sorted
    by name: each one's name, layout (which root dims it merges) and process
    group. DTensor's redistribute planner bakes the group of a flattened mesh
    whose layout covers the dims it merges into the collectives it plans."""
    return tuple(sorted(
        (name, repr(flat._layout), mesh_dim_group_names(flat))
        for name, flat in mesh_flatten_mapping(mesh).items()
    ))


# The redistribute planner's process-wide switches, where this release has
# them: which plan it makes (the min-cost graph search or the greedy one) and
# whether it merges collectives onto flattened meshes. They change which
# collectives a DTensor program runs, not its values.
_PLANNER_FLAGS = ("_FORCE_MIN_COST_REDISTRIBUTION_PLAN", "_DISABLE_REDISTRIBUTE_TRANSFORM_OPTIMIZATION")


def redistribute_planner_flags() -> tuple:
    """``(name, value)`` of each planner switch this release has, now."""
    return tuple((name, getattr(_redistribute, name)) for name in _PLANNER_FLAGS if hasattr(_redistribute, name))


def mesh_full_tensor_list(mesh: Any) -> list:
    """The (batch, *mesh.shape) rank tensor stock feeds the runtime op."""
    return mesh._layout.remap_to_tensor(mesh._rank_map).tolist()


def mesh_dim_index(mesh: Any, name: str) -> int:
    """The index of the mesh dim called ``name`` (raises like eager)."""
    return mesh._get_mesh_dim_by_name(name)


def splits_by_coordinate(p: Any) -> bool:
    """Whether a placement gives each coordinate its own piece of a dim
    (``Shard`` and ``_StridedShard``, which is not a ``Shard`` subclass)."""
    return isinstance(p, (_pt.Shard, _pt._StridedShard))


@contextlib.contextmanager
def as_coordinate(mesh: Any, coordinate: tuple[int, ...]) -> Any:
    """Run DTensor's code as the rank at ``coordinate`` of ``mesh`` would:
    its coordinate (``get_coordinate``, ``_sym_get_coordinate``) and its
    rank in each mesh dim's group (``get_local_rank``, which asks the
    group itself). For fake tensors only (the groups stay this rank's).
    The redistribution plans cached by spec hold per-rank shapes, so the
    cache is emptied on entry and on exit (no plan made as another rank
    outlives the block). Not a hook: it changes one mesh object for the
    length of the block, on fakes, and puts every value back on the way out
    (the instance's ``get_local_rank`` is removed again, the class's shows)."""
    saved = mesh._coordinate_on_dim
    coordinate = tuple(coordinate)

    def local_rank(mesh_dim: int | str | None = None) -> int:
        if isinstance(mesh_dim, str):
            mesh_dim = mesh_dim_index(mesh, mesh_dim)
        return coordinate[mesh_dim or 0]

    _redistribute._gen_transform_infos.cache_clear()
    mesh._coordinate_on_dim = coordinate
    mesh.get_local_rank = local_rank
    try:
        yield
    finally:
        mesh._coordinate_on_dim = saved
        del mesh.get_local_rank
        _redistribute._gen_transform_infos.cache_clear()


# -- the WORLD holders ----------------------------------------------------------

# The class of ``dist.group`` / ``dist.GroupMember`` (whose ``WORLD`` is the
# default group): each is a class of this metaclass.
WORLD_HOLDER_TYPE: type = _WorldMeta


# 2.11 / 2.12 stock tracks those with an in-tree ``WorldMetaClassVariable``
# that hands ``WORLD`` on without its source (a group that cannot be reloaded
# or compared by identity); 2.13+ reads it as any class attribute.
STOCK_TRACKS_WORLD_HOLDERS: bool = _dynamo_distributed_has("WorldMetaClassVariable")


# -- DTensor's modes ----------------------------------------------------------

# ``implicit_replication()`` turns on a switch DTensor's op dispatch reads (a
# plain tensor mixed with DTensors is taken as replicated): a C++ switch on
# every supported release, which Dynamo cannot trace (its setter is a pybind
# builtin: a break inside the ``with``'s enter). The plugin traces the
# ``with`` as that switch (``variables/modes.py``): its getter and setter.
def implicit_replication_switch() -> tuple[Callable[[], bool], Callable[[bool], None]]:
    return torch._C._get_dtensor_allow_implicit_replication, torch._C._set_dtensor_allow_implicit_replication


# -- a process group across processes -----------------------------------------

def group_identity(group: Any) -> tuple[str, tuple[int, ...], str] | None:
    """A registered group as plain data, the same in every process of a job
    that made the same groups in the same order: its name (what a compiled
    collective names it by), its global ranks and its backend. None for a
    group c10d does not know (made outside ``new_group``)."""
    name = _c10d._world.pg_names.get(group)
    if name is None:
        return None
    return name, tuple(_c10d.get_process_group_ranks(group)), str(_c10d.get_backend(group))


def live_group(identity: tuple[str, tuple[int, ...], str]) -> Any:
    """This process's group with ``identity`` (see ``group_identity``), or None."""
    group = group_named(identity[0])
    return group if group is not None and group_identity(group) == identity else None


def group_named(name: str) -> Any:
    """This process's group of that name, or None."""
    try:
        return _c10d._resolve_process_group(name)
    except Exception:  # no group of that name here
        return None


# -- DTensor ------------------------------------------------------------------

def dtensor_local(x: Any) -> Any:
    """A DTensor's local tensor, without autograd (``x._local_tensor``)."""
    return x._local_tensor


# -- placements ---------------------------------------------------------------

@dataclass(frozen=True)
class PlacementFields:
    """The fields that fully define a built-in placement: rebuilt as
    ``cls(*positional, **keyword)``, guarded by equality of each field."""

    positional: tuple[str, ...] = ()
    keyword: tuple[str, ...] = ()

    @property
    def names(self) -> tuple[str, ...]:
        return self.positional + self.keyword

    def constructor_call(self, p: Any) -> tuple[tuple, dict]:
        return tuple(getattr(p, f) for f in self.positional), {k: getattr(p, k) for k in self.keyword}


# Exact type -> fields. torch's other placements (``_MaskPartial``, ...) are
# built-in too but carry more state: they rebuild from their pickled state
# and are guarded by their own equality (see ``placement_fields``).
BUILTIN_PLACEMENTS: dict[type, PlacementFields] = {
    _pt.Replicate: PlacementFields(),
    _pt.Shard: PlacementFields(("dim",)),
    _pt._StridedShard: PlacementFields(("dim",), ("split_factor",)),
    _pt.Partial: PlacementFields(("reduce_op",)),
}

# Placement types Dynamo's sourceless fast table should send to us.
PLACEMENT_TYPES: tuple[type, ...] = (*BUILTIN_PLACEMENTS, _pt._MaskPartial)

_BUILTIN_MODULE = "torch.distributed"


def placement_fields(cls: type) -> PlacementFields | None:
    """The defining fields of a built-in placement type, else None."""
    return BUILTIN_PLACEMENTS.get(cls)


def is_builtin_placement_type(cls: type) -> bool:
    """A placement torch defines (rebuilt by its constructor, importable)."""
    return cls in BUILTIN_PLACEMENTS or cls.__module__.startswith(_BUILTIN_MODULE)


def constructor_call(p: Any) -> tuple[tuple, dict]:
    """The constructor arguments that rebuild ``p`` (``Shard(1)``,
    ``_StridedShard(0, split_factor=2)``, ``Partial("max")``...)."""
    fields = BUILTIN_PLACEMENTS.get(type(p))
    if fields is not None:
        return fields.constructor_call(p)
    # Anything else: the keyword state pickling uses (dataclass-like placements).
    state = p.__reduce_ex__(2)[2] or {}
    return (), dict(state)


# Functions torch's runtime calls outside any traced code: AOTAutograd's
# wrappers flatten and rebuild every DTensor input, output and gradient
# (``__tensor_flatten__``, ``__tensor_unflatten__``, reading ``device_mesh``).
# When that happens while Dynamo's frame callback is live (a ``.backward()``
# after a graph break in a compiled function), stock compiles each as a frame
# of its own, and breaks in ``__tensor_unflatten__`` at ``DTensor(local, spec,
# ...)``. None of them is user code worth a frame.
_DTensor = torch.distributed.tensor.DTensor


# Whether a DTensorSpec says if its ``_StridedShard`` placements encode the
# shard order (2.12+): True, and ``shard_order`` is left None (derived from
# the placements); False (view propagation: a sharded dim merged by
# ``view``), and ``shard_order`` is set. ``__tensor_flatten__`` keeps
# ``shard_order`` but not the flag, and ``__tensor_unflatten__`` makes it True
# again wherever a ``_StridedShard`` is present, which refuses a set
# ``shard_order``: a sharded view (``x.view(-1, h)`` of ``Shard(1)``) cannot
# leave or enter a compiled graph. (2.11 flattens the whole spec, and its
# eager DTensor refuses to merge a sharded dim in a view.)
def _unflatten_loses_shard_order_flag() -> bool:
    if "use_strided_shard_as_shard_order" not in getattr(_DTensorSpec, "__dataclass_fields__", {}):
        return False
    try:
        return "shard_order" in inspect.getsource(_DTensor.__tensor_flatten__)
    except (OSError, TypeError):  # pragma: no cover - no source shipped
        return False


UNFLATTEN_LOSES_SHARD_ORDER_FLAG = _unflatten_loses_shard_order_flag()
# Where the unflatten below replaces DTensor's own while installed.
DTENSOR_UNFLATTEN_POINT = (_DTensor, "__tensor_unflatten__")


def dtensor_unflatten(inner_tensors: dict, flatten_spec: tuple, outer_size: Any, outer_stride: Any) -> Any:
    """``DTensor.__tensor_unflatten__`` that rebuilds the spec
    ``__tensor_flatten__`` flattened: a set ``shard_order`` means the flag was
    False (it is left None when True), so it is passed as False. The rest is
    torch's own, line for line."""
    placements, old_tensor_meta, shard_order, requires_grad = flatten_spec
    flag = {} if shard_order is None else {"use_strided_shard_as_shard_order": False}
    spec = _DTensorSpec(
        inner_tensors["device_mesh"], placements,
        tensor_meta=_TensorMeta(shape=outer_size, stride=outer_stride, dtype=old_tensor_meta.dtype),
        shard_order=shard_order, **flag,
    )
    return _DTensor(inner_tensors["_local_tensor"], spec, requires_grad=requires_grad)


# Never compiled as frames of their own (traced calls still inline them):
# DTensor's flatten hooks, and ``distribute_tensor``, which runs eagerly where
# a compiled function breaks on it (a tensor that requires grad, a size
# constraint): on 2.12 Dynamo would compile its frame there and break three
# more times inside it, where stock breaks once.
RUNTIME_ONLY_FUNCTIONS = (_DTensor.__tensor_unflatten__, _DTensor.__tensor_flatten__, _DTensor.device_mesh.fget,
                          dtensor_unflatten, torch.distributed.tensor.distribute_tensor)

# Mesh construction called eagerly from a compiled function (after the
# graph break that ``init_device_mesh`` is): none of it, down to the process
# groups it creates, is worth a frame, and on 2.11 stock crashes compiling
# its internals (``_MeshLayout``, a half-built mesh). Skipped with every
# frame they call.
MESH_CONSTRUCTION_FUNCTIONS = (_init_device_mesh, DeviceMesh.__init__)


def one_rank_config() -> Any:
    """The config module holding the canonical ``compile_on_one_rank`` flag:
    ``torch.compiler.config`` on 2.14+ (``torch.distributed.config``'s flag
    is a deprecated alias of it there), ``torch.distributed.config`` on 2.13."""
    if _compiler_config is not None and hasattr(_compiler_config, "compile_on_one_rank"):
        return _compiler_config
    return _dist_config


def one_rank_flag_modules() -> tuple[Any, ...]:
    """Every config module a user may set ``compile_on_one_rank`` on (the
    canonical one first)."""
    canonical = one_rank_config()
    return (canonical,) if canonical is _dist_config else (canonical, _dist_config)


def compile_on_one_rank() -> bool:
    return bool(getattr(one_rank_config(), "compile_on_one_rank", False))


def folded_rank() -> int | None:
    """This process's rank where what a trace compiles may hold it: a rank
    answer folded to a constant, a coordinate AOTAutograd's trace read (a
    shard's offset, whether this rank holds data). None under
    ``compile_on_one_rank`` (rank answers are operations of the graph, read
    at run time) or without a world. The compile caches' keys
    (``caching.keys.rank_tag``) and Dynamo's saved entries
    (``precompile.plugin_guards.DYNAMO_DIST_SAVED_BY``) hold it."""
    if compile_on_one_rank() or not torch.distributed.is_available() or not torch.distributed.is_initialized():
        return None
    return torch.distributed.get_rank()
