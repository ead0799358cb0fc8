"""Selective activation checkpointing policies as AOTAutograd cache keys.

For ``checkpoint(fn, ..., context_fn=context_fn)`` in a compiled region,
Dynamo puts ``fn``'s graph in a subgraph and keeps ``context_fn`` in that
subgraph's meta. The AOTAutograd cache keys a policy only by a
``cache_hash`` attribute its author sets on ``context_fn``, and bypasses the
graph without one (torchtitan's selective AC passes a bare lambda): every
process traces and compiles such a graph again.

While the plugin is installed, a ``context_fn`` without ``cache_hash`` gets
one for the duration of the key's computation: the digest of its description
(``describe.py``: its code, the values it closes over, the globals it
reads and what it imports in its body, recursively). One the describer cannot describe keeps stock's bypass,
with the reason (``aot_key.py`` adds it to the cache's message, which
``explain`` shows). So does a checkpointed region the key does not hold
whole (``subgraphs.refusal``: the cache checks the call targets of the
top-level graph only; a graph it newly stores is held to that rule
throughout). A ``context_fn`` that has a ``cache_hash`` is its author's word
and is left alone.

Why a description taken when the key is computed is sound:

- When the policy runs. AOTAutograd calls ``context_fn()`` and the policy it
  returns while it traces the graph: once per operator of the checkpointed
  region, to tag each as saved or recomputed; the partitioner turns the tags
  into the forward and backward graphs. The compiled graphs never call it. So
  what a cached entry depends on is the policy's answers during that trace,
  and the trace starts right after the key is computed, in the same thread
  (``AOTAutogradCache`` computes the key, misses, traces, stores under that
  key): the values the key describes are the values the trace starts from.
- What the answers depend on. A policy is code: given its arguments (the
  operator, whether it recomputes, the traced tensors, whose shapes and types
  the key holds) its answers are fixed by its code and by the values it
  reads, which the description names: the cells it closes over, the globals
  its code loads and the names it imports in its body (``from cfg import
  SAVE_OPS`` by the module, the name and its value; and the attribute paths
  it reads from modules: an op overload by its registered name, a config
  value by its value), the defaults. Values it creates itself (torchtitan's per-call ``meta`` counts)
  are part of its code. Two processes with equal descriptions therefore
  trace the same tags.
- Mutable values (a list of ops, a set of shapes, a dict, a dataclass
  config, frozen or not) are described by the value they hold when the key
  is computed, which is the value the trace starts from. A counter the
  policy advances as it runs starts the trace at the described value, and
  the trace's answers follow from it deterministically. A counter the
  training loop advances each step changes nothing in a compiled graph
  (stock traces the policy once and keeps its answers); a later compile
  (a recompile, another block) is keyed by the value it would trace with.
  On a hit the policy does not run, so whatever it would have changed stays
  as it was: the next key describes that state, which is the state its
  trace would start from.
- What is refused. Anything whose behaviour is not in its description:
  objects of arbitrary classes, C functions not known to be pure (``id``,
  ``hash``: an address, a hash seed), modules used as values, generators,
  closure cells not assigned yet. Python functions of other libraries are
  described by their code, so one that reads the process's state (random
  numbers, the world size) reaches an undescribable object and is refused.

Limits: a policy whose answers depend on the iteration order of a set
(which, for strings, follows the process's hash seed) is described by the
set's contents; values read through a thread other than the compiling one
are assumed not to change while a graph compiles.
"""

from __future__ import annotations

import contextlib
import functools
from dataclasses import dataclass
from typing import Any, Callable, Iterator

from .. import _compat as C
from .keys import digest, source_digest
from . import describe, subgraphs


class DescribedPolicy:
    """Stands in for a ``context_fn`` while the AOTAutograd key is computed:
    the cache reads its ``cache_hash``, and pickles it (inside the subgraph's
    meta) as that text."""

    __slots__ = ("cache_hash",)

    def __init__(self, cache_hash: str) -> None:
        self.cache_hash = cache_hash

    def __reduce__(self) -> tuple:
        return (str, (self.cache_hash,))


@functools.cache
def _describer_version() -> str:
    # A describer that describes differently never shares entries with this one.
    return source_digest(describe, _describer_version)


def policy_cache_hash(context_fn: Callable[[], Any]) -> str:
    """The ``cache_hash`` a described ``context_fn`` gets; raises
    ``describe.Undescribable`` with the reason."""
    description = describe.describe(context_fn)
    return f"dynamo_dist selective AC policy {digest(repr(description))} ({_describer_version()})"


@dataclass
class Policies:
    """The policies of one graph: the first one that could not be described, and why."""

    refusal: str | None = None


@contextlib.contextmanager
def described(gm: Any) -> Iterator[Policies]:
    """Within the block, every checkpointed subgraph of ``gm`` whose
    ``context_fn`` has no ``cache_hash`` and can be described holds a
    ``DescribedPolicy`` instead; the functions are put back after."""
    policies = Policies()
    swapped: list[tuple[Any, Any]] = []
    for module in gm.modules():
        context_fn = C.caches.checkpoint_context_fn(module) if hasattr(module, "meta") else None
        if context_fn is None or hasattr(context_fn, "cache_hash"):
            continue
        region = subgraphs.refusal(module, "the checkpointed region")
        if region:
            policies.refusal = policies.refusal or region
            continue
        try:
            cache_hash = policy_cache_hash(context_fn)
        except describe.Undescribable as e:
            policies.refusal = policies.refusal or str(e)
            continue
        except Exception as e:  # any failure here must only cost the cache entry
            policies.refusal = policies.refusal or f"describing it failed ({type(e).__name__}: {e})"
            continue
        C.caches.set_checkpoint_context_fn(module, DescribedPolicy(cache_hash))
        swapped.append((module, context_fn))
    try:
        yield policies
    finally:
        for module, context_fn in swapped:
            C.caches.set_checkpoint_context_fn(module, context_fn)
