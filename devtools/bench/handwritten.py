"""The hand-written lower bound for the step-time benchmark.

The same models as ``dynamo_dist.demo.models`` after their
``parallelize_*`` plan, written by hand with local tensors and explicit
functional collectives (Megatron style): no DTensor, no mesh, no placement;
the process group is named by its string name, as in the graphs DTensor
produces. Each collective mirrors one that DTensor issues, so the bound
measures DTensor + compile overhead, not a different communication plan:

- ``copy_to_tp`` (identity forward, all-reduce backward) where a
  ``ColwiseParallel`` linear makes its replicated input a DTensor
  (``from_local``; one per linear, as DTensor does: three for q/k/v);
- ``reduce_from_tp`` (all-reduce forward, identity backward) where a
  ``RowwiseParallel`` linear turns its partial output into a replicated one.

``from_dtensor_model`` copies the local shards out of a parallelized model,
so the numerics check (``check_matches``) compares the exact same weights.
"""

from __future__ import annotations

from typing import Any

import torch
import torch.nn as nn
import torch.nn.functional as F

from dynamo_dist._compat.observe import funcol


class _CopyToTP(torch.autograd.Function):
    @staticmethod
    def forward(ctx: Any, x: torch.Tensor, group: str) -> torch.Tensor:
        ctx.group = group
        return x.view_as(x)

    @staticmethod
    def backward(ctx: Any, grad: torch.Tensor) -> tuple[torch.Tensor, None]:
        return funcol.all_reduce(grad.contiguous(), "sum", ctx.group), None


class _ReduceFromTP(torch.autograd.Function):
    @staticmethod
    def forward(ctx: Any, x: torch.Tensor, group: str) -> torch.Tensor:
        return funcol.all_reduce(x, "sum", group)

    @staticmethod
    def backward(ctx: Any, grad: torch.Tensor) -> tuple[torch.Tensor, None]:
        return grad, None


def copy_to_tp(x: torch.Tensor, group: str) -> torch.Tensor:
    return _CopyToTP.apply(x, group)


def reduce_from_tp(x: torch.Tensor, group: str) -> torch.Tensor:
    return _ReduceFromTP.apply(x, group)


def _local(p: Any) -> nn.Parameter:
    """A parameter's local shard (a DTensor's ``to_local()``), as a new leaf."""
    t = p.to_local() if hasattr(p, "to_local") else p
    return nn.Parameter(t.detach().clone())


class LocalMLP(nn.Module):
    """``w2(gelu(w1(x)))`` with ``w1`` split by rows, ``w2`` by columns."""

    def __init__(self, mlp: nn.Module, group: str) -> None:
        super().__init__()
        self.group = group
        self.w1_weight, self.w1_bias = _local(mlp.w1.weight), _local(mlp.w1.bias)
        self.w2_weight, self.w2_bias = _local(mlp.w2.weight), _local(mlp.w2.bias)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = F.gelu(F.linear(copy_to_tp(x, self.group), self.w1_weight, self.w1_bias))
        return reduce_from_tp(F.linear(h, self.w2_weight), self.group) + self.w2_bias


class LocalAttention(nn.Module):
    """Causal attention over this rank's heads."""

    def __init__(self, attention: nn.Module, group: str) -> None:
        super().__init__()
        self.group, self.head_dim = group, attention.head_dim
        self.wq, self.wk, self.wv, self.wo = (_local(getattr(attention, n).weight) for n in ("wq", "wk", "wv", "wo"))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        bsz, seq, _ = x.shape
        q, k, v = (F.linear(copy_to_tp(x, self.group), w).view(bsz, seq, -1, self.head_dim).transpose(1, 2)
                   for w in (self.wq, self.wk, self.wv))
        out = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        return reduce_from_tp(F.linear(out.transpose(1, 2).reshape(bsz, seq, -1), self.wo), self.group)


class LocalTransformerBlock(nn.Module):
    """``h = x + attention(norm1(x)); h + mlp(norm2(h))``; norms replicated."""

    def __init__(self, block: nn.Module, group: str) -> None:
        super().__init__()
        # Same registration order as TransformerBlock (check_matches pairs
        # gradients by parameter order).
        self.norm1 = nn.LayerNorm(block.norm1.normalized_shape)
        self.attention = LocalAttention(block.attention, group)
        self.norm2 = nn.LayerNorm(block.norm2.normalized_shape)
        self.mlp = LocalMLP(block.mlp, group)
        self.norm1.load_state_dict(block.norm1.state_dict())
        self.norm2.load_state_dict(block.norm2.state_dict())

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = x + self.attention(self.norm1(x))
        return h + self.mlp(self.norm2(h))


HANDWRITTEN = {"mlp": LocalMLP, "transformer": LocalTransformerBlock}


def from_dtensor_model(name: str, model: nn.Module, mesh: Any) -> nn.Module:
    """The hand-written twin of the parallelized ``model`` (same local weights)."""
    return HANDWRITTEN[name](model, mesh.get_group().group_name)


def _grads(model: nn.Module) -> list[torch.Tensor]:
    out = []
    for p in model.parameters():
        g = p.grad
        out.append(g.to_local() if hasattr(g, "to_local") else g)
    return out


def check_matches(model: nn.Module, local: nn.Module, x: torch.Tensor, atol: float = 1e-5) -> None:
    """Same loss and same local gradients (in parameter order) for one step of
    both, eager; raises AssertionError otherwise. Leaves the grads cleared."""
    want = model(x)
    want.sum().backward()
    got = local(x)
    got.sum().backward()
    torch.testing.assert_close(got, want, atol=atol, rtol=1e-4)
    want_grads, got_grads = _grads(model), _grads(local)
    assert len(want_grads) == len(got_grads), (len(want_grads), len(got_grads))
    for i, (g, w) in enumerate(zip(got_grads, want_grads)):
        torch.testing.assert_close(g, w, atol=atol, rtol=1e-4, msg=lambda m, i=i: f"grad {i}: {m}")
    model.zero_grad(set_to_none=True)
    local.zero_grad(set_to_none=True)
