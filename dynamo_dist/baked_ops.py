"""Graph calls with folded distributed arguments, as nodes the compile caches can key.

``variables/dtensor.py`` turns ``DTensor.from_local(x, mesh, [Shard(0)])``
(and ``redistribute``, ``distribute_tensor``...) into one graph call whose
mesh and placements are baked in. A closure over them would be invisible to
the AOTAutograd cache key, which therefore refuses any graph calling one (a
cache *bypass*, every run compiles again). Instead the node is

    call("DTensor.from_local(...) #<digest>", x)

``call`` is importable and marked cacheable while the plugin is installed
(``_hooks``), and its first argument spells out every baked-in value
(``cache_keys.constant_identity``: the mesh with its groups, placements,
options), so it is part of the graph's code, hence of the cache key. The key
finds the function in this process's table, filled when the call was traced:
Dynamo traces every frame in every process, so a graph never runs before its
calls are registered here.
"""

from __future__ import annotations

import functools
import inspect
from typing import Any, Callable

from . import cache_keys
from .cache_keys import digest

_CALLS: dict[str, Callable[..., Any]] = {}


def bake(op: Callable[..., Any], what: str, identity: tuple | None) -> str | None:
    """Register ``op`` under a key naming ``what`` it does and everything baked
    into it; None when ``identity`` could not be described (the caller puts
    ``op`` itself in the graph)."""
    if identity is None:
        return None
    key = f"{what} #{digest(repr(identity))}"
    # Equal keys describe the same computation on equal objects; the newest
    # wins, so a world torn down and built again (same group names) never
    # runs an op holding the old world's mesh.
    _CALLS[key] = op
    return key


def call(key: str, *tensors: Any) -> Any:
    """The graph node's target: run the call registered under ``key``."""
    try:
        op = _CALLS[key]
    except KeyError:
        raise RuntimeError(
            f"dynamo_dist: the graph calls {key!r}, which this process never traced. The graph "
            "was loaded without Dynamo tracing its frame here (a precompiled artifact?); trace the "
            "function once in this process with dynamo_dist installed, or compile it without "
            "dynamo_dist."
        ) from None
    return op(*tensors)


QUALNAME = f"{call.__module__}.{call.__qualname__}"


@functools.cache
def code_version(*builders: Any) -> str:
    """A digest of the code that keys the baked calls and of the modules
    that build them (``builders``): part of every cache key of a graph calling
    them (through inductor's config), so a dynamo_dist that bakes differently
    never reuses an older entry."""
    modules = (cache_keys, inspect.getmodule(call), *builders)
    return digest("".join(inspect.getsource(m) for m in modules))
