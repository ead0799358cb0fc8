"""Cache-stable identities of the distributed values a compiled graph depends on.

torch's compile caches (inductor's FX graph cache, the AOTAutograd cache)
key a graph by pickling what it depends on. For distributed programs that key
is wrong both ways (measured on 2.13, see docs/benchmarks.md "Warm start"):

- unstable: a ``DeviceMesh`` pickles with its cached ``hash()``, which
  changes with every process (``PYTHONHASHSEED``), so a second process never
  hits;
- unsound: stock's ``DeviceMesh._stable_hash`` (what the AOTAutograd key
  reads for a DTensor input) leaves out the process groups behind each mesh
  dim and this rank's coordinate, both of which AOTAutograd's trace bakes into
  the graph (group names in collectives, this rank's shard offsets).

A mesh's identity here is the mesh guard's fingerprint (``guards.mesh``)
without the coordinate: the fields ``DeviceMesh.__eq__`` compares (a long
rank map as its digest, so a key's size does not grow with the world), the
group names per dim, and the flattened meshes of its root mesh (name, layout,
group): DTensor's redistribute planner merges collectives over mesh dims that
a flattened mesh covers and bakes that mesh's group into the graph. The rank
enters every key once, through :func:`process_tag` (inductor's
``cache_key_tag``), unless rank answers are runtime ops
(``compile_on_one_rank``, where every rank traces the same graph and one
entry serves them all), and so do the redistribute planner's switches. So
graphs stay the same text on every rank (``explain`` compares them) while a
cache entry is never served to a rank whose coordinates, groups or planner
could have changed the trace. docs/guards.md ("What a key holds, and why
that is everything") gives the whole argument: what a compiled DTensor graph
depends on, and what is left out and why that is sound.
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import hashlib
import inspect
import weakref
from typing import Any, Iterator

import torch

from .. import _compat as C
from .. import tracked_types
from ..guards.mesh import known_fingerprint

# Values whose ``repr`` is their whole, stable description, and torch's
# value types described by ``str`` (both describers use these).
PLAIN = (type(None), bool, int, float, complex, str, bytes)
TORCH_VALUES = (torch.dtype, torch.device, torch.layout, torch.memory_format)


def digest(text: str) -> str:
    return hashlib.blake2b(text.encode(), digest_size=16).hexdigest()


def source_digest(*objects: Any) -> str:
    """The digest of the source code of ``objects`` (modules, functions),
    in order: a version that changes whenever that code does."""
    return digest("".join(inspect.getsource(o) for o in objects))


def mesh_identity(mesh: Any, flattened: bool = True) -> str:
    """The mesh's identity as stable text (the same in every process that
    builds the same mesh over the same groups and flattens the same meshes of
    its root); without the flattened meshes with ``flattened=False``."""
    fingerprint = known_fingerprint(mesh, with_coordinate=False)
    cls = fingerprint.mesh_type
    parts = (f"{cls.__module__}.{cls.__qualname__}", fingerprint.eq_fields, fingerprint.group_names,
             fingerprint.coordinate)
    return repr((*parts, fingerprint.flattened) if flattened else parts)


# Meshes of this process whose identity went into a key, by identity without
# the flattened meshes (a pickled mesh does not carry its root's flatten
# table; the key that found the entry held it): a cached graph that holds a
# mesh as a constant (2.13+ under ``compile_on_one_rank``:
# ``mesh_get_process_group(mesh, dim)`` at run time) gets this process's mesh
# back instead of the pickled copy of the mesh of the rank that compiled it
# (see ``live_mesh``). A graph can be loaded before any key of this process
# named its mesh: torch's precompile installs saved frames at
# ``torch.compile``, and compile once installs a frame another rank traced.
# Then the meshes this process holds are looked for once (``C.distributed.live_meshes``).
_LIVE_MESHES: "weakref.WeakValueDictionary[str, Any]" = weakref.WeakValueDictionary()


# The lists of the key computations under way that note the meshes they key
# (``key_parts.noting``).
_NOTING: list[list[Any]] = []


@contextlib.contextmanager
def keying_meshes(into: list[Any]) -> Iterator[None]:
    """Append each mesh keyed inside the block to ``into`` (once each)."""
    _NOTING.append(into)
    try:
        yield
    finally:
        _NOTING.remove(into)


def remember_mesh(mesh: Any) -> None:
    """Give ``mesh`` back to the cached graphs that hold a mesh of its
    identity (``live_mesh``)."""
    _LIVE_MESHES[mesh_identity(mesh, flattened=False)] = mesh


def keyed_mesh_identity(mesh: Any) -> str:
    """``mesh_identity`` of a live mesh going into a key; remembers the mesh."""
    remember_mesh(mesh)
    for meshes in _NOTING:
        if not any(m is mesh for m in meshes):
            meshes.append(mesh)
    return mesh_identity(mesh)


def live_mesh_count() -> int:
    """Meshes of this process remembered for cached graphs (while they live)."""
    return len(_LIVE_MESHES)


def remembers(mesh: Any) -> bool:
    """``mesh`` is the mesh remembered for its identity (an equal mesh made
    later, after a world was made again and group names repeat, replaces it)."""
    return _LIVE_MESHES.get(mesh_identity(mesh, flattened=False)) is mesh


def mesh_cache_hash(mesh: Any) -> str:
    """Replaces ``DeviceMesh._stable_hash`` while installed (see the module doc)."""
    return digest(keyed_mesh_identity(mesh))


def live_mesh(stored: Any) -> Any:
    """This process's mesh with the identity of ``stored`` (a mesh unpickled
    from a cache entry, possibly another rank's)."""
    identity = mesh_identity(stored, flattened=False)
    mesh = _LIVE_MESHES.get(identity)
    if mesh is None:
        for found in C.distributed.live_meshes():
            remember_mesh(found)
        mesh = _LIVE_MESHES.get(identity)
    if mesh is None:
        raise RuntimeError(
            f"dynamo_dist: a cached graph needs the mesh {identity}, which this process has not "
            "built; build the same mesh (same groups) before calling it, or clear the inductor "
            "cache (TORCHINDUCTOR_CACHE_DIR)."
        )
    return mesh


def rank_tag() -> str | None:
    """This process's rank: AOTAutograd's trace reads coordinates (a shard's
    offset, whether a rank holds data) that no key field shows. None under
    ``compile_on_one_rank`` or without a world (``C.distributed.folded_rank``)."""
    rank = C.distributed.folded_rank()
    return None if rank is None else f"dynamo_dist rank {rank}"


def planner_tag() -> str:
    """The redistribute planner's switches now: they decide which collectives
    a planned redistribution runs (the min-cost plan or the greedy one; merged
    onto a flattened mesh or not). Values are the same either way, but each
    rank must run the collectives its peers run: a rank that loaded another
    job's plan while a peer traced its own would wait on collectives the peer
    never calls. So they are in every key."""
    flags = C.distributed.redistribute_planner_flags()
    return "dynamo_dist planner " + ",".join(f"{name}={value!r}" for name, value in flags)


def process_tag() -> str:
    """What of this process every compile-cache key holds: the planner's
    switches, and the rank (``rank_tag``) where the trace reads it."""
    rank = rank_tag()
    return planner_tag() if rank is None else f"{planner_tag()}|{rank}"


def key_device(device: Any, current: Any, one_rank: bool, agnostic_codegen: bool, cudagraphs: bool) -> Any:
    """The device a tensor on ``device`` enters a compile-cache key as.

    Under ``compile_on_one_rank`` on a release whose inductor code is the same
    on every device (``agnostic_codegen``: the wrapper reads the device index
    at run time; tracing refuses any accelerator but the current one), the
    current accelerator's index is dropped: ranks of one node, each on its own
    device, then share keys (and compile once per job). Not with CUDA graphs
    (the cached artifact keeps the compile-time index), not for another device
    or type, and not outside ``compile_on_one_rank`` (several devices may be
    live there and must not collide)."""
    if not (one_rank and agnostic_codegen and not cudagraphs) or current is None:
        return device
    if device.type == current.type and device.index == current.index:
        return torch.device(device.type)
    return device


def device_for_key(device: Any) -> Any:
    """``key_device`` for this process now."""
    if device.type in ("cpu", "meta"):
        return device
    return key_device(device, C.caches.current_accelerator(), C.distributed.compile_on_one_rank(),
                      _agnostic_codegen(), C.caches.cudagraphs_on())


@functools.cache
def _agnostic_codegen() -> bool:
    return C.caches.device_agnostic_codegen()


def constant_identity(value: Any) -> tuple | None:
    """A stable, complete description of a constant baked into a graph call,
    or None when there is none (the call then stays uncacheable: correct,
    only slower to warm up)."""
    if isinstance(value, PLAIN):
        return (type(value).__name__, repr(value))
    if isinstance(value, TORCH_VALUES):
        return (type(value).__name__, str(value))
    if isinstance(value, (tuple, list)):  # torch.Size included
        items = [constant_identity(v) for v in value]
        return None if any(i is None for i in items) else (type(value).__name__, *items)
    if isinstance(value, dict):
        if not all(isinstance(k, str) for k in value):
            return None
        items = {k: constant_identity(v) for k, v in value.items()}
        return None if None in items.values() else ("dict", *sorted(items.items()))
    record = tracked_types.find(value)  # a tracked object: as its type declares
    if record is not None and record.key_identity is not None:
        return record.key_identity(value)
    return None


# -- the key identity of each tracked type (its declaration names these) ------

def mesh_key_identity(mesh: Any) -> tuple:
    """A mesh: ``keyed_mesh_identity`` (its fingerprint as text, without the
    coordinate; see the module doc)."""
    return ("mesh", keyed_mesh_identity(mesh))


def mesh_key_pickle(mesh: Any) -> tuple:
    """A mesh in the FX-graph cache key: pickled as its identity text."""
    return (str, (keyed_mesh_identity(mesh),))


def group_key_identity(group: Any) -> tuple:
    """A process group: its name, which names one group in every process
    that made the same groups in the same order (what collectives name it by)."""
    return ("group", group.group_name)


# -- a process group a graph holds as an object ---------------------------------
# Under ``compile_on_one_rank`` (2.12+) torch passes the group object itself to
# the functional collectives (``_functional_collectives._group_or_group_name``),
# so AOTAutograd's graphs hold it as a constant, where otherwise they hold its
# name. A graph is saved with the group as ``SavedGroup`` (its name and size)
# and, loaded, runs on this process's group of that name (``saved_group_here``): what
# a graph naming the group by string runs on. So the key holds the name and the
# size (``group_key_pickle``), of a constant and of a group that is a graph input
# (torch's key pickler writes a fake script object's real object, and
# AOTAutograd's trace turns a group input into the constant its collectives
# use); nothing else of the group reaches the compiled code, which calls the
# collective on the object at run time (the rank within it is a run-time op
# under ``compile_on_one_rank``).

@dataclasses.dataclass(frozen=True)
class SavedGroup:
    """A process group as a cached graph stores it."""
    name: str
    size: int


def group_cache_identity(group: Any) -> tuple:
    """A group held by a graph, in its key: its key identity (the name) and
    its size, which the saved form checks where it loads."""
    return (*group_key_identity(group), group.size())


def group_key_pickle(group: Any) -> tuple:
    """A group in the FX-graph cache key (stock's fallback writes its bound
    ``name`` method, object address included: no two processes share it)."""
    return (str, (repr(group_cache_identity(group)),))


def saved_group(group: Any) -> SavedGroup:
    return SavedGroup(group.group_name, group.size())


def saved_group_here(stored: SavedGroup) -> Any:
    """This process's group named as ``stored``."""
    group = C.distributed.group_named(stored.name)
    if group is None or group.size() != stored.size:
        found = "none" if group is None else f"one of size {group.size()}"
        raise RuntimeError(
            f"dynamo_dist: a cached graph runs collectives on process group {stored.name!r} of size "
            f"{stored.size}, and this process has {found}; make the same groups in the same order "
            "before calling it, or clear the inductor cache (TORCHINDUCTOR_CACHE_DIR)."
        )
    return group


def placement_key_identity(placement: Any) -> tuple | None:
    """A built-in placement: its class and the constructor call that rebuilds
    it (the fields that define it)."""
    args, kwargs = C.distributed.constructor_call(placement)
    inner = constant_identity((args, kwargs))
    return None if inner is None else (f"{type(placement).__module__}.{type(placement).__qualname__}", inner)
