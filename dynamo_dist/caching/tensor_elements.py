"""Scalars read from a tensor's elements (``t.tolist()``, ``t[i].item()``),
admitted by the AOTAutograd cache.

With ``capture_scalar_outputs`` Dynamo traces ``t.tolist()`` as one
``t[i]`` per element and ``.item()`` on each (expert parallelism's
all-to-all split sizes, for one). It records no example value for the
``t[i]`` nodes, and the AOTAutograd cache, which accepts a method call only
on a receiver it knows to be a tensor (one with an example value), bypasses
the graph.

Such a receiver is a tensor by construction: ``operator.getitem`` of a node
whose example value is a tensor, at an index made of Python ints and slices.
For the duration of the key computation the receiver gets the example value
that indexing gives (a fake tensor of the same shape); the cache then checks
the call as it checks any tensor method (its name is in the graph's code,
hence in the key), and the graph's meta is left as Dynamo made it.
"""

from __future__ import annotations

import contextlib
import operator
from typing import Any, Iterator

import torch

from .. import _compat as C


def _index_is_constant(index: Any) -> bool:
    if isinstance(index, tuple):
        return all(_index_is_constant(i) for i in index)
    return isinstance(index, (int, slice)) and not isinstance(index, bool)


def _element_of_a_tensor(node: Any) -> Any:
    """The example value ``node`` would have: a tensor indexed by constants, or None."""
    if node.op != "call_function" or node.target is not operator.getitem or len(node.args) != 2:
        return None
    base, index = node.args
    example = C.caches.example_value(base) if isinstance(base, torch.fx.Node) else None
    if not isinstance(example, torch.Tensor) or not _index_is_constant(index):
        return None
    return example[index]


def receivers(gm: Any) -> dict[Any, Any]:
    """Receivers of method calls with no example value that are elements of a tensor -> their example value."""
    found = {}
    for node in gm.graph.nodes:
        if node.op != "call_method" or not node.args or not isinstance(node.args[0], torch.fx.Node):
            continue
        receiver = node.args[0]
        if C.caches.example_value(receiver) is None and receiver not in found:
            example = _element_of_a_tensor(receiver)
            if example is not None:
                found[receiver] = example
    return found


@contextlib.contextmanager
def known_as_tensors(gm: Any) -> Iterator[None]:
    """The graph's tensor elements carry their example values inside the block."""
    found = receivers(gm)
    for node, example in found.items():
        C.caches.set_example_value(node, example)
    try:
        yield
    finally:
        for node in found:
            C.caches.drop_example_value(node)
