"""What ``install()`` changes in torch's compile caches: stable, sound keys
for distributed programs (``caching/``).

- Meshes pickle as their identity in the FX-graph and AOTAutograd cache keys
  (``caching.keys``), and ``DeviceMesh._stable_hash`` (the AOTAutograd key of
  a DTensor input) is that identity's digest.
- Every key holds this rank (``caching.keys.rank_tag``), unless
  ``compile_on_one_rank`` makes the graphs the same on every rank.
- A graph loaded from the cache gets its mesh constants back as this
  process's meshes (stock leaves them ``None``).
- ``baked_ops.call`` and the calls of ``with sdpa_kernel(...)``
  (``caching/sdpa.py``) are cacheable graph call targets.
"""

from __future__ import annotations

from typing import Any

from .. import _compat as C
from ..caching import baked_ops, keys, sdpa
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


def cache_key_patches(p: Patches, *builders: Any) -> None:
    """The key changes of the module docstring; ``builders`` are the modules
    whose code decides what a baked call bakes (part of its version)."""
    details = C.caches.hash_details()
    original_details_init = details.__dict__["__init__"]

    def details_init(self: Any, *args: Any, **kwargs: Any) -> None:
        original_details_init(self, *args, **kwargs)
        tag = keys.rank_tag()
        if tag is not None:
            self.cache_key_tag = f"{self.cache_key_tag}|{tag}"

    p.set(details, "__init__", details_init)
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
