"""Sharded views across the compiled boundary, on a real 2-rank gloo world.

A sequence-parallel activation ``(b, s, h)`` sharded on ``s`` and flattened
to tokens (``x.view(-1, h)``) is ``_StridedShard(0, sf=b)`` in eager DTensor
(2.12+; 2.11's eager refuses to flatten a sharded dim). Its spec keeps a set
shard order with ``_StridedShard`` placements, which DTensor's own
``__tensor_unflatten__`` refuses: returned from a compiled function or passed
into one, it fails (stock alike). With the plugin each crosses like eager:
the same placements, the same values on every rank, forward and backward.
"""

from __future__ import annotations

import pytest
import torch
from torch.distributed.tensor import DTensor, Replicate, Shard, distribute_tensor

import dynamo_dist
from dynamo_dist import _compat as C
from dynamo_dist.testing import make_mesh, run_in_world

pytestmark = [
    pytest.mark.skipif(not C.distributed.UNFLATTEN_LOSES_SHARD_ORDER_FLAG,
                       reason="this torch's eager DTensor refuses to view a sharded dim as merged"),
    pytest.mark.release,
]


def _same(want, got) -> str | None:
    """None when equal (placements and full values), else what differs."""
    if isinstance(want, DTensor):
        if not isinstance(got, DTensor):
            return f"eager returned a DTensor, compiled a {type(got).__name__}"
        if tuple(want.placements) != tuple(got.placements):
            return f"placements: eager {tuple(want.placements)}, compiled {tuple(got.placements)}"
        want, got = want.full_tensor(), got.full_tensor()
    return None if torch.allclose(want, got) else f"values differ by {float((want - got).abs().max())}"


def _views_on_rank() -> dict[str, str | None]:
    dynamo_dist.install()
    mesh = make_mesh((2,), ("tp",))
    torch.manual_seed(0)
    x = distribute_tensor(torch.randn(2, 8, 4), mesh, [Shard(1)])
    w = distribute_tensor(torch.randn(4, 4), mesh, [Replicate()])
    programs = {
        "returned": lambda x: x.view(-1, 4) * 2,
        "gathered": lambda x: (x.view(-1, 4) @ w).redistribute(mesh, [Replicate()]).to_local().sum(),
        "viewed back": lambda x: x.view(-1, 4).view(2, 8, 4).full_tensor(),
        "passed in": lambda y: y.full_tensor() * 2,
        "passed in, returned": lambda y: y + 1,
    }
    found = {}
    for name, fn in programs.items():
        arg = x.view(-1, 4) if name.startswith("passed in") else x
        torch._dynamo.reset()
        found[name] = _same(fn(arg), torch.compile(fn, backend="aot_eager", fullgraph=True)(arg))
    # Backward through a view that leaves the graph: the input's gradient has
    # eager's values. (Its placement is the input's, Shard(1), where eager's
    # backward of the view replicates it: AOTAutograd's tangent, not the plugin's.)
    leaf = distribute_tensor(torch.randn(2, 8, 4), mesh, [Shard(1)]).requires_grad_()
    grads = []
    for f in (lambda t: t.view(-1, 4) * 3, torch.compile(lambda t: t.view(-1, 4) * 3, backend="aot_eager")):
        leaf.grad = None
        f(leaf).sum().backward()
        grads.append(leaf.grad.full_tensor())
    found["backward"] = _same(*grads)
    dynamo_dist.uninstall()
    return found


@pytest.mark.slow
def test_sharded_views_cross_the_compiled_boundary_like_eager():
    for rank, found in enumerate(run_in_world(_views_on_rank, 2)):
        assert found == dict.fromkeys(found), f"rank {rank}: {found}"
