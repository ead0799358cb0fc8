"""Cache-stable identities of the distributed values a compiled graph depends on.

torch's compile caches (inductor's FX graph cache, the AOTAutograd cache)
key a graph by pickling what it depends on. For distributed programs that key
is wrong both ways (measured on 2.13, see docs/BENCHMARKS.md "Warm start"):

- unstable: a ``DeviceMesh`` pickles with its cached ``hash()``, which
  changes with every process (``PYTHONHASHSEED``), so a second process never
  hits;
- unsound: stock's ``DeviceMesh._stable_hash`` (what the AOTAutograd key
  reads for a DTensor input) leaves out the process groups behind each mesh
  dim and this rank's coordinate, both of which AOTAutograd's trace bakes into
  the graph (group names in collectives, this rank's shard offsets).

The identity here is the mesh guard's fingerprint (``guards.mesh``): the
fields ``DeviceMesh.__eq__`` compares, the group names per dim and this rank's
coordinate, unless rank answers are runtime ops (``compile_on_one_rank``, where
every rank traces the same graph and one cache entry serves them all). Two
meshes with the same identity give the same folded answers, which is what
makes reusing a graph, or a cache entry, sound.
"""

from __future__ import annotations

import hashlib
from typing import Any

import torch

from . import _compat as C
from .guards.mesh import mesh_fingerprint

_PLAIN = (type(None), bool, int, float, str)
_TORCH_VALUES = (torch.dtype, torch.device, torch.layout, torch.memory_format)


def digest(text: str) -> str:
    return hashlib.blake2b(text.encode(), digest_size=16).hexdigest()


def mesh_identity(mesh: Any) -> str:
    """The mesh's identity as stable text (the same in every process that
    builds the same mesh over the same groups)."""
    cls, *rest = mesh_fingerprint(mesh)
    return repr((f"{cls.__module__}.{cls.__qualname__}", *rest))


def mesh_cache_hash(mesh: Any) -> str:
    """Replaces ``DeviceMesh._stable_hash`` while installed (see the module doc)."""
    return digest(mesh_identity(mesh))


def constant_identity(value: Any) -> tuple | None:
    """A stable, complete description of a constant baked into a graph call,
    or None when there is none (the call then stays uncacheable: correct,
    only slower to warm up)."""
    if isinstance(value, _PLAIN):
        return (type(value).__name__, repr(value))
    if isinstance(value, _TORCH_VALUES):
        return (type(value).__name__, str(value))
    if isinstance(value, (tuple, list)):  # torch.Size included
        items = [constant_identity(v) for v in value]
        return None if any(i is None for i in items) else (type(value).__name__, *items)
    if isinstance(value, dict):
        if not all(isinstance(k, str) for k in value):
            return None
        items = {k: constant_identity(v) for k, v in value.items()}
        return None if None in items.values() else ("dict", *sorted(items.items()))
    if isinstance(value, C.DeviceMesh):
        return ("mesh", mesh_identity(value))
    if isinstance(value, C.Placement) and C.is_builtin_placement_type(type(value)):
        args, kwargs = C.constructor_call(value)
        inner = constant_identity((args, kwargs))
        return None if inner is None else (f"{type(value).__module__}.{type(value).__qualname__}", inner)
    if isinstance(value, C.ProcessGroup):
        return ("group", value.group_name)
    return None
