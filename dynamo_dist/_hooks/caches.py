"""What ``install()`` changes in torch's compile caches: stable, sound keys
for distributed programs (``caching/``).

- Meshes pickle as their identity in the FX-graph and AOTAutograd cache keys
  (``caching.keys``), and ``DeviceMesh._stable_hash`` (the AOTAutograd key of
  a DTensor input) is that identity's digest.
- Every key holds the redistribute planner's switches, and this rank
  unless ``compile_on_one_rank`` makes the graphs the same on every rank
  (``caching.keys.process_tag``).
- A graph loaded from the cache gets its mesh constants back as this
  process's meshes (stock leaves them ``None``), and torch's mesh ops it may
  call are registered (torch registers them only while tracing).
- Under ``compile_on_one_rank``, a tensor on the current accelerator enters
  the keys without its device index where inductor's code is device-agnostic
  (``keys.key_device``), so the ranks of one node share keys.
- ``baked_ops.call`` and the calls of ``with sdpa_kernel(...)``
  (``caching/sdpa.py``) are cacheable graph call targets.
- The AOTAutograd key describes selective-AC policies and admits the custom
  ``autograd.Function``s it can key, per graph (``caching/aot_key.py``).
- Compile once per job (``caching/compile_once.py``): a lookup that misses
  locally and remotely goes through the job's store; the compiling rank's
  saves publish; every graph compile is a scope that abandons what it claimed
  and did not save; the claiming rank lowers its backward at once.
- A Redis remote cache that torch switches off (it cannot reach the server)
  is said once, in one line.
"""

from __future__ import annotations

import dataclasses
import functools
from typing import Any, Callable

import torch

from .. import _compat as C
from ..caching import aot_key, baked_ops, compile_once, keys, sdpa
from .patches import Patches


def _reduce_mesh_for_cache_key(mesh: Any) -> tuple:
    return (str, (keys.keyed_mesh_identity(mesh),))


def _with_live_meshes(unwrap: Any) -> Any:
    """A graph loaded from the cache gets its mesh constants back, as this
    process's meshes (``keys.live_mesh``); stock leaves them ``None``."""
    def constants(self: Any, graph: Any) -> Any:
        values = unwrap(self, graph)
        for name, stored in C.caches.stored_opaque_constants(graph).items():
            if name not in values and isinstance(stored, C.DeviceMesh):
                values[name] = keys.live_mesh(stored)
        return values

    return constants


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
    C.register_device_mesh_ops()  # cached graphs may call them before anything traced here
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
        p.set(loader, "unwrap", _with_live_meshes(loader.__dict__["unwrap"]))
    pickler = C.caches.fx_cache_pickler()
    original_init = pickler.__dict__["__init__"]

    def __init__(self: Any, *args: Any, **kwargs: Any) -> None:
        original_init(self, *args, **kwargs)
        self.dispatch_table[C.DeviceMesh] = _reduce_mesh_for_cache_key

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
    """The lookups, saves and compile scopes ``compile_once`` coordinates."""
    aot, fx = C.caches.aot_autograd_cache(), C.caches.fx_graph_cache()
    p.set(aot, "_lookup", staticmethod(_coordinated_lookup(
        aot.__dict__["_lookup"].__func__, compile_once.AOT, lambda found: found is not None)))
    p.set(fx, "_lookup_graph", staticmethod(_coordinated_lookup(
        fx.__dict__["_lookup_graph"].__func__, compile_once.FX, lambda found: found[0] is not None)))
    p.set(aot, "try_load", staticmethod(_claimed_lowers_backward_at_once(aot.__dict__["try_load"].__func__)))
    p.set(aot, "save", staticmethod(_publishing(aot.__dict__["save"].__func__, compile_once.AOT)))
    p.set(fx, "_save_graph", staticmethod(_publishing(fx.__dict__["_save_graph"].__func__, compile_once.FX)))
    for owner, kind in ((aot, compile_once.AOT), (fx, compile_once.FX)):
        p.set(owner, "_record_result", classmethod(_noting_hits(owner.__dict__["_record_result"].__func__, kind)))
    for owner, name in C.caches.compile_scope_points():
        p.set(owner, name, _in_scope(getattr(owner, name)))
    redis = C.caches.redis_backend()
    if redis is not None:
        for name in ("_get", "_put"):
            p.set(redis, name, _reporting_lost_server(redis.__dict__[name]))


def _coordinated_lookup(lookup: Callable[..., Any], kind: str, hit: Callable[[Any], bool]) -> Callable[..., Any]:
    def coordinated(key: str, *args: Any, **kwargs: Any) -> Any:
        again = functools.partial(lookup, key, *args, **kwargs)
        with compile_once.quiet_lookups():
            found = again()
        if hit(found):
            return found
        loaded = compile_once.after_miss(kind, key, again, hit)
        return loaded if loaded is not None else found

    return coordinated


def _claimed_lowers_backward_at_once(try_load: Callable[..., Any]) -> Callable[..., Any]:
    """A rank that claimed the graph lowers its backward with its forward, so
    the entry is saved (and published) before the forward's collectives need
    the waiting ranks."""
    def load(mod: Any, args: Any, aot_config: Any, *rest: Any, **kwargs: Any) -> Any:
        result = try_load(mod, args, aot_config, *rest, **kwargs)
        compiled_fn, config = C.caches.aot_lookup_parts(result, aot_config)
        key = C.caches.aot_cache_key(config)
        if compiled_fn is None and key is not None and compile_once.claimed_here(compile_once.AOT, key):
            return C.caches.rebuilt_try_load_result(result, compiled_fn, C.caches.with_eager_backward(config))
        return result

    return load


def _publishing(save: Callable[..., Any], kind: str) -> Callable[..., Any]:
    def saved(key: str, *args: Any, **kwargs: Any) -> Any:
        out = save(key, *args, **kwargs)
        if kind == compile_once.FX:
            compile_once.fx_key_touched(key)
        compile_once.saved(kind, key)
        return out

    return saved


def _noting_hits(record: Callable[..., Any], kind: str) -> Callable[..., Any]:
    def record_result(cls: Any, key: str, local_hit: bool, local_miss: bool, remote_hit: bool,
                      remote_miss: bool) -> Any:
        if local_hit or remote_hit:
            if kind == compile_once.FX:
                compile_once.fx_key_touched(key)
            compile_once.record_hit(kind, key, remote=remote_hit)
        return record(cls, key, local_hit, local_miss, remote_hit, remote_miss)

    return record_result


def _in_scope(compile_graph: Callable[..., Any]) -> Callable[..., Any]:
    @functools.wraps(compile_graph)
    def compile_in_scope(*args: Any, **kwargs: Any) -> Any:
        with compile_once.scope():
            return compile_graph(*args, **kwargs)

    return compile_in_scope


def _reporting_lost_server(method: Callable[..., Any]) -> Callable[..., Any]:
    """torch drops a Redis remote cache it cannot reach without a word."""
    def call(self: Any, *args: Any, **kwargs: Any) -> Any:
        had_client = not C.caches.redis_client_lost(self)
        out = method(self, *args, **kwargs)
        if had_client and C.caches.redis_client_lost(self):
            compile_once.remote_cache_lost(C.caches.remote_cache_address())
        return out

    return call
