"""What ``install()`` changes in torch's compile caches: stable, sound keys
for distributed programs (``caching/``).

- Tracked objects pickle in the FX-graph cache key as their type declares
  (``key_pickle``: a mesh as its identity, ``caching.keys``), and
  ``DeviceMesh._stable_hash`` (the AOTAutograd key of a DTensor input) is a
  mesh identity's digest.
- Every key holds the redistribute planner's switches, and this rank
  unless ``compile_on_one_rank`` makes the graphs the same on every rank
  (``caching.keys.process_tag``).
- A graph saved to the cache stores its constants of a tracked type as that
  type declares (``cache_save``: a process group as its name and size; stock
  cannot pickle a group and saves nothing), and loaded gets them back as it
  declares (``on_cache_load``: a mesh as this process's mesh, a group as this
  process's group of that name; stock leaves them ``None``), and torch's mesh
  ops it may call are registered (torch registers them only while tracing).
- Under ``compile_on_one_rank``, a tensor on the current accelerator enters
  the keys without its device index where inductor's code is device-agnostic
  (``keys.key_device``), so the ranks of one node share keys.
- ``baked_ops.call`` and the calls of ``with sdpa_kernel(...)``
  (``caching/sdpa.py``) are cacheable graph call targets.
- The AOTAutograd key describes selective-AC policies and admits the custom
  ``autograd.Function``s it can key, per graph (``caching/aot_key.py``).
- Compile once per job (``compile_once/``): the rows of
  ``compile_once/hooks.py`` (lookups through the job's store, saves that
  publish, compile scopes, frames shipped under torch's precompile, a lost
  Redis server said once).
"""

from __future__ import annotations

import dataclasses
from typing import Any, Callable

import torch

from .. import _compat as C
from .. import tracked_types
from ..caching import aot_key, baked_ops, keys, sdpa
from ..compile_once import hooks as compile_once_hooks
from .patches import Patches


def _with_live_objects(unwrap: Any) -> Any:
    """A graph loaded from the cache gets its constants of a tracked type
    back as that type's declaration says (``on_cache_load``: a mesh is this
    process's mesh of that identity, ``keys.live_mesh``); stock leaves them
    ``None``."""
    def constants(self: Any, graph: Any) -> Any:
        values = unwrap(self, graph)
        for name, stored in C.caches.stored_opaque_constants(graph).items():
            live = tracked_types.loaded_from_cache(stored) if name not in values else None
            if live is not None:
                values[name] = live
        return values

    return constants


def _saved_constants(prepare: Any) -> Any:
    """A graph saved to the cache stores its constants of a tracked type as
    that type's declaration says (``cache_save``: a process group as its
    name); stock fails to pickle a group ("cannot pickle ProcessGroup") and
    saves nothing. ``prepare`` runs on the copy being saved."""
    def stored(value: Any) -> Any:
        real = C.aot.fake_object_of(value)
        obj = value if real is None else real
        saved = tracked_types.saved_for_cache(obj)
        return value if saved is obj else saved  # not a tracked type's: as stock saves it

    def prepare_for_serialization(self: Any) -> None:
        prepare(self)
        constants = C.caches.stored_opaque_constants(self)
        if constants:
            C.caches.set_stored_opaque_constants(self, {name: stored(v) for name, v in constants.items()})

    return prepare_for_serialization


def _device_agnostic_metadata(extract: Callable[..., Any]) -> Callable[..., Any]:
    def extract_tensor_metadata_for_cache_key(t: Any) -> Any:
        meta = extract(t)
        device = getattr(meta, "device", None)
        if isinstance(device, torch.device):
            keyed = keys.device_for_key(device)
            if keyed != device:
                meta = dataclasses.replace(meta, device=keyed)
        return meta

    return extract_tensor_metadata_for_cache_key


def cache_key_patches(p: Patches, *builders: Any) -> None:
    """The key changes of the module docstring; ``builders`` are the modules
    whose code decides what a baked call bakes (part of its version)."""
    C.distributed.register_device_mesh_ops()  # cached graphs may call them before anything traced here
    details = C.caches.hash_details()
    original_details_init = details.__dict__["__init__"]

    def details_init(self: Any, *args: Any, **kwargs: Any) -> None:
        original_details_init(self, *args, **kwargs)
        self.cache_key_tag = f"{self.cache_key_tag}|{keys.process_tag()}"
        index = getattr(self, "default_cuda_device_index", None)  # a graph without tensor inputs
        current = C.caches.current_accelerator()
        if index is not None and current is not None and \
                keys.device_for_key(torch.device(current.type, index)).index is None:
            self.default_cuda_device_index = None

    p.set(details, "__init__", details_init)
    owner, name = C.caches.tensor_metadata_point()
    p.set(owner, name, _device_agnostic_metadata(getattr(owner, name)))
    for loader in C.caches.constants_loaders():
        p.set(loader, "unwrap", _with_live_objects(loader.__dict__["unwrap"]))
    saved = C.caches.compiled_graph_class()
    p.set(saved, "prepare_for_serialization", _saved_constants(saved.__dict__["prepare_for_serialization"]))
    pickler = C.caches.fx_cache_pickler()
    original_init = pickler.__dict__["__init__"]

    def __init__(self: Any, *args: Any, **kwargs: Any) -> None:
        original_init(self, *args, **kwargs)
        self.dispatch_table.update(tracked_types.key_picklers())

    p.set(pickler, "__init__", __init__)
    if C.caches.MESH_STABLE_HASH is not None:
        p.set(*C.caches.MESH_STABLE_HASH, keys.mesh_cache_hash)
    config = C.caches.inductor_config()
    marked = {**config.unsafe_marked_cacheable_functions, baked_ops.QUALNAME: baked_ops.code_version(*builders),
              **sdpa.marked_cacheable()}
    p.set(config, "unsafe_marked_cacheable_functions", marked)
    owner, name = C.caches.aot_key_hook_point()
    p.set(owner, name, aot_key.keyed_graphs(getattr(owner, name)))


def compile_once_patches(p: Patches) -> None:
    """Compile once's changes (``compile_once/hooks.py``)."""
    for owner, name, replacement in compile_once_hooks.rows():
        p.set(owner, name, replacement)
