"""A DTensor region under activation checkpointing (selective or full), with
a random op the backward recomputes (SDPA), compiled whole: forward and
backward equal eager. Stock 2.12 / 2.13 fail its first forward ("expected all
tensors_saved_with_vc_check to be Tensors": the RNG state saved for the
recompute lands after the saved mesh); torchtitan's blocks are this shape."""

import pytest
import torch
import torch.nn.functional as F
from torch.distributed.tensor import DTensor, Replicate
from torch.utils.checkpoint import CheckpointPolicy, checkpoint, create_selective_checkpoint_contexts

from dynamo_dist.testing import make_mesh

pytestmark = [pytest.mark.usefixtures("plugin"), pytest.mark.release]


def _save_matmuls(ctx, op, *args, **kwargs):
    return CheckpointPolicy.MUST_SAVE if op == torch.ops.aten.mm.default else CheckpointPolicy.PREFER_RECOMPUTE


def _selective_context():
    return create_selective_checkpoint_contexts(_save_matmuls)


def attention(x):
    t = x.to_local()  # (batch, heads, seq, head_dim)
    out = F.scaled_dot_product_attention(t, t, t, is_causal=True)
    return DTensor.from_local(out, x.device_mesh, x.placements)


def selective(x):
    return checkpoint(attention, x, use_reentrant=False, context_fn=_selective_context)


def full(x):
    return checkpoint(attention, x, use_reentrant=False)


@pytest.mark.parametrize("step", [selective, full], ids=["selective", "full"])
def test_checkpointed_dtensor_attention_compiles_like_eager(world8, step):
    mesh = make_mesh((8,), ("tp",))
    local = torch.randn(1, 2, 8, 4)
    grads = []
    for fn in (step, torch.compile(step, backend="aot_eager", fullgraph=True)):
        x = DTensor.from_local(local.clone(), mesh, [Replicate()]).requires_grad_()
        out = fn(x)
        out.to_local().sum().backward()
        grads.append((out.to_local().detach(), x.grad.to_local()))
    torch.testing.assert_close(grads[1], grads[0])
