"""Graph calls with folded distributed arguments, as nodes the compile caches can key.

``variables/dtensor.py`` turns ``DTensor.from_local(x, mesh, [Shard(0)])``
(and ``redistribute``, ``distribute_tensor``...) into one graph call whose
mesh and placements are baked in. A closure over them would be invisible to
the AOTAutograd cache key, which therefore refuses any graph calling one (a
cache *bypass*, every run compiles again). Instead the node is

    call("DTensor.from_local(...) #<digest>", x)

``call`` is importable and marked cacheable while the plugin is installed
(``_hooks``), and its first argument spells out every baked-in value
(``keys.constant_identity``: the mesh with its groups, placements,
options), so it is part of the graph's code, hence of the cache key. The key
finds the function in this process's table, filled when the call was traced:
Dynamo traces every frame in every process, so a graph never runs before its
calls are registered here.

The table holds its functions weakly: the graph node's key argument (a
``BakedKey``, a ``str`` that also carries its function) holds each one as
long as the graph lives, so a long job that builds and drops meshes, or
compiles function after function, does not keep every mesh (and its process
groups) it ever traced. Only the graph Dynamo captured calls the table at run
time (the ``eager`` backend); AOTAutograd traces through the call at compile
time, so its graphs (``aot_eager``, ``inductor``, cache hits) never do.
"""

from __future__ import annotations

import functools
import inspect
import weakref
from typing import Any, Callable

from . import keys
from .keys import digest, source_digest

class BakedKey(str):
    """A baked call's key as the graph node's argument: the key text (what the
    graph's code and the cache keys read; it pickles and copies as a plain
    ``str``), holding the function it names while the graph lives."""

    __slots__ = ("op", "meshes")

    def __new__(cls, key: str, op: Callable[..., Any], meshes: tuple = ()) -> "BakedKey":
        self = super().__new__(cls, key)
        self.op = op
        self.meshes = meshes  # the meshes baked in (``op`` holds them too), for ``key_parts``
        return self

    def __reduce__(self) -> tuple:
        return (str, (str(self),))


# key -> weak references to the functions registered under it, oldest first.
_CALLS: dict[str, list[weakref.ref]] = {}


def _forget(key: str) -> Callable[[weakref.ref], None]:
    def dead(ref: weakref.ref) -> None:
        refs = _CALLS.get(key)
        if refs is not None:
            refs[:] = [r for r in refs if r is not ref]
            if not refs:
                del _CALLS[key]

    return dead


def bake(op: Callable[..., Any], what: str, baked: tuple) -> BakedKey | None:
    """Register ``op`` under a key naming ``what`` it does and everything baked
    into it (``baked``, by ``keys.constant_identity``); None when a baked value
    has no stable identity (the caller puts ``op`` itself in the graph). The
    caller puts the key in the graph: it keeps ``op`` registered."""
    meshes: list[Any] = []
    with keys.keying_meshes(meshes):
        identity = keys.constant_identity(baked)
    if identity is None:
        return None
    key = f"{what} #{digest(repr(identity))}"
    _CALLS.setdefault(key, []).append(weakref.ref(op, _forget(key)))
    return BakedKey(key, op, tuple(meshes))


def registered(key: str) -> Callable[..., Any] | None:
    """The newest live function registered under ``key``. Equal keys describe
    the same computation on equal objects; the newest wins, so a world torn
    down and built again (same group names) never runs an op holding the old
    world's mesh."""
    for ref in reversed(_CALLS.get(key, ())):
        op = ref()
        if op is not None:
            return op
    return None


def registered_count() -> int:
    """Keys with a live registered call."""
    return len(_CALLS)


def call(key: str, *tensors: Any) -> Any:
    """The graph node's target: run the call registered under ``key``."""
    op = registered(key)
    if op is None:
        raise RuntimeError(
            f"dynamo_dist: the graph calls {key!r}, which this process never traced. The graph "
            "was loaded without Dynamo tracing its frame here (a precompiled artifact?); trace the "
            "function once in this process with dynamo_dist installed, or compile it without "
            "dynamo_dist."
        )
    return op(*tensors)


QUALNAME = f"{call.__module__}.{call.__qualname__}"


@functools.cache
def code_version(*builders: Any) -> str:
    """A digest of the code that keys the baked calls and of the modules
    that build them (``builders``): part of every cache key of a graph calling
    them (through inductor's config), so a dynamo_dist that bakes differently
    never reuses an older entry."""
    modules = (keys, inspect.getmodule(call), *builders)
    return source_digest(*modules)
