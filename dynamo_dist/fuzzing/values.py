"""Hypothesis strategies for single placements, below both the program
grammar (``programs.py``) and the public strategies (``strategies.py``)."""

from __future__ import annotations

from typing import Any

from hypothesis import strategies as st
from torch.distributed.tensor.placement_types import Partial, Replicate, Shard, _StridedShard

from .specs import REDUCE_OPS, TaggedShard


def _placement(tensor_ndim: int, partial: bool, strided: bool,
               reduce_ops: tuple[str, ...], user: bool = False) -> st.SearchStrategy[Any]:
    options: list[st.SearchStrategy[Any]] = [st.just(Replicate())]
    if tensor_ndim > 0:
        dims = st.integers(0, tensor_ndim - 1)
        options.insert(0, dims.map(Shard))
        if strided:
            options.append(st.builds(lambda d, f: _StridedShard(d, split_factor=f), dims, st.integers(1, 4)))
        if user:
            options.append(st.builds(TaggedShard, dims, st.integers(0, 2)))
    if partial:
        options.append(st.sampled_from(reduce_ops).map(Partial))
    return st.one_of(options)


def placements(
    mesh_ndim: int,
    tensor_ndim: int,
    *,
    partial: bool = True,
    strided: bool = True,
    reduce_ops: tuple[str, ...] = REDUCE_OPS,
    user: bool = False,
) -> st.SearchStrategy[tuple[Any, ...]]:
    """One placement per mesh dim for a ``tensor_ndim``-D tensor:
    ``Shard(d)``, ``Replicate()``, ``Partial(op)`` for each op in
    ``reduce_ops`` (all of ``torch``'s by default), ``_StridedShard(d, f)``,
    and with ``user=True`` a user-defined subclass (``specs.TaggedShard``)."""
    one = _placement(tensor_ndim, partial, strided, reduce_ops, user)
    return st.tuples(*[one] * mesh_ndim)
