"""Small, deterministic tensor-parallel models and their parallelize functions.

Used by the multi-rank numerics tests, ``python -m dynamo_dist demo`` and the
benchmarks. Every model is built from a seed (the same weights on every rank,
as tensor parallelism requires), is CPU-friendly at the default sizes, and
has a ``parallelize_*(model, mesh)`` function that applies the usual
``torch.distributed.tensor.parallel`` plan on a 1-D tensor-parallel mesh
(pass ``mesh["tp"]`` of a 2-D mesh):

- :class:`MLP` with :func:`parallelize_mlp`: ``w1`` ColwiseParallel, ``w2``
  RowwiseParallel. Input and output are replicated (plain tensors); forward
  has one all-reduce, backward one.
- :class:`SequenceParallelBlock` with :func:`parallelize_sequence_parallel_block`:
  ``x + mlp(norm(x))`` with ``norm`` under SequenceParallel; the input and
  output are each rank's shard of the sequence dimension (dim 1), so the MLP
  all-gathers its input and reduce-scatters its output.
- :class:`TransformerBlock` with :func:`parallelize_transformer_block`:
  pre-norm causal self-attention (heads split across ranks) and an MLP, both
  Colwise -> Rowwise, applied with one ``parallelize_module`` call.

:data:`MODELS` names them (``"mlp"``, ``"sp_block"``, ``"transformer"``) with
how to build, parallelize and feed each; :data:`SIZES` holds configs the demo
and benchmarks scale with (``"tiny"``, ``"small"``, ``"medium"``).
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Callable

import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.distributed.tensor import Replicate, Shard
from torch.distributed.tensor.parallel import (
    ColwiseParallel,
    PrepareModuleInput,
    RowwiseParallel,
    SequenceParallel,
    parallelize_module,
)

__all__ = [
    "ModelConfig",
    "SIZES",
    "MLP",
    "SequenceParallelBlock",
    "Attention",
    "TransformerBlock",
    "parallelize_mlp",
    "parallelize_sequence_parallel_block",
    "parallelize_transformer_block",
    "ModelSpec",
    "MODELS",
    "build_model",
    "make_input",
    "local_input",
]


@dataclass(frozen=True)
class ModelConfig:
    """Sizes of the test models. ``hidden`` and ``n_heads`` must be divisible
    by the tensor-parallel degree, and so must ``seq_len`` for the
    sequence-parallel block. ``dim`` must be divisible by ``n_heads``."""

    dim: int = 32
    hidden: int = 64
    n_heads: int = 4
    seq_len: int = 8
    batch: int = 2

    @property
    def head_dim(self) -> int:
        return self.dim // self.n_heads

    def check(self, tp: int) -> None:
        """Raise ``ValueError`` if this config cannot be split ``tp`` ways."""
        bad = [f"{name}={getattr(self, name)}" for name in ("hidden", "n_heads", "seq_len")
               if getattr(self, name) % tp]
        if self.dim % self.n_heads:
            bad.append(f"dim={self.dim} not divisible by n_heads={self.n_heads}")
        if bad:
            raise ValueError(f"model config {self} cannot be split over {tp} tensor-parallel ranks: {bad}")

    def scaled(self, **changes: int) -> "ModelConfig":
        """A copy with some sizes changed."""
        return dataclasses.replace(self, **changes)


SIZES: dict[str, ModelConfig] = {
    "tiny": ModelConfig(dim=16, hidden=32, n_heads=4, seq_len=8, batch=2),
    "small": ModelConfig(dim=32, hidden=64, n_heads=4, seq_len=8, batch=2),
    "medium": ModelConfig(dim=64, hidden=256, n_heads=8, seq_len=32, batch=4),
}


class MLP(nn.Module):
    """``w2(gelu(w1(x)))``."""

    def __init__(self, config: ModelConfig) -> None:
        super().__init__()
        self.w1 = nn.Linear(config.dim, config.hidden)
        self.w2 = nn.Linear(config.hidden, config.dim)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.w2(F.gelu(self.w1(x)))


class SequenceParallelBlock(nn.Module):
    """``x + mlp(norm(x))``: a LayerNorm and an MLP with a residual."""

    def __init__(self, config: ModelConfig) -> None:
        super().__init__()
        self.norm = nn.LayerNorm(config.dim)
        self.mlp = MLP(config)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x + self.mlp(self.norm(x))


class Attention(nn.Module):
    """Causal multi-head self-attention. The head count is inferred from the
    projection's (local) width, so the same code runs with heads split
    across tensor-parallel ranks."""

    def __init__(self, config: ModelConfig) -> None:
        super().__init__()
        self.head_dim = config.head_dim
        self.wq = nn.Linear(config.dim, config.dim, bias=False)
        self.wk = nn.Linear(config.dim, config.dim, bias=False)
        self.wv = nn.Linear(config.dim, config.dim, bias=False)
        self.wo = nn.Linear(config.dim, config.dim, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        bsz, seq, _ = x.shape
        q, k, v = (w(x).view(bsz, seq, -1, self.head_dim).transpose(1, 2) for w in (self.wq, self.wk, self.wv))
        out = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        return self.wo(out.transpose(1, 2).reshape(bsz, seq, -1))


class TransformerBlock(nn.Module):
    """Pre-norm block: ``h = x + attention(norm1(x)); h + mlp(norm2(h))``."""

    def __init__(self, config: ModelConfig) -> None:
        super().__init__()
        self.norm1 = nn.LayerNorm(config.dim)
        self.attention = Attention(config)
        self.norm2 = nn.LayerNorm(config.dim)
        self.mlp = MLP(config)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = x + self.attention(self.norm1(x))
        return h + self.mlp(self.norm2(h))


def _plan_mlp(prefix: str = "") -> dict:

    return {f"{prefix}w1": ColwiseParallel(), f"{prefix}w2": RowwiseParallel()}


def parallelize_mlp(model: MLP, mesh) -> MLP:
    """ColwiseParallel ``w1``, RowwiseParallel ``w2`` on the 1-D ``mesh``."""

    return parallelize_module(model, mesh, _plan_mlp())


def parallelize_sequence_parallel_block(model: SequenceParallelBlock, mesh) -> SequenceParallelBlock:
    """SequenceParallel ``norm`` (input: this rank's sequence shard, dim 1);
    the MLP all-gathers its input (Shard(1) -> Replicate) and its
    RowwiseParallel ``w2`` reduce-scatters back to Shard(1), returned as the
    local shard."""

    plan = {
        "norm": SequenceParallel(),
        "mlp": PrepareModuleInput(input_layouts=(Shard(1),), desired_input_layouts=(Replicate(),)),
        "mlp.w1": ColwiseParallel(),
        "mlp.w2": RowwiseParallel(output_layouts=Shard(1)),
    }
    return parallelize_module(model, mesh, plan)


def parallelize_transformer_block(model: TransformerBlock, mesh) -> TransformerBlock:
    """Attention ``wq/wk/wv`` Colwise and ``wo`` Rowwise (heads split across
    ranks), MLP Colwise -> Rowwise; norms replicated. One ``parallelize_module``."""

    plan = {
        "attention.wq": ColwiseParallel(),
        "attention.wk": ColwiseParallel(),
        "attention.wv": ColwiseParallel(),
        "attention.wo": RowwiseParallel(),
        **_plan_mlp("mlp."),
    }
    return parallelize_module(model, mesh, plan)


@dataclass(frozen=True)
class ModelSpec:
    """How to build, parallelize and feed one test model.

    ``seq_sharded``: the parallelized model takes (and returns) each rank's
    shard of the sequence dimension (dim 1) instead of the full input.
    """

    name: str
    cls: Callable[[ModelConfig], nn.Module]
    parallelize: Callable[[nn.Module, object], nn.Module]
    seq_sharded: bool = False


MODELS: dict[str, ModelSpec] = {
    "mlp": ModelSpec("mlp", MLP, parallelize_mlp),
    "sp_block": ModelSpec("sp_block", SequenceParallelBlock, parallelize_sequence_parallel_block, seq_sharded=True),
    "transformer": ModelSpec("transformer", TransformerBlock, parallelize_transformer_block),
}


def build_model(name: str, config: ModelConfig = SIZES["small"], *, seed: int = 0, mesh=None,
                device: str | torch.device = "cpu") -> nn.Module:
    """The model ``name`` (a key of :data:`MODELS`) with weights drawn from
    ``seed`` (same on every rank; the global RNG is left untouched), moved to
    ``device``, and parallelized on the 1-D ``mesh`` when one is given."""
    spec = MODELS[name]
    if mesh is not None:
        config.check(mesh.size())
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        model = spec.cls(config)
        for p in model.parameters():  # non-trivial norm weights too (same on every rank)
            if p.dim() == 1:
                with torch.no_grad():
                    p.add_(torch.randn_like(p) * 0.1)
    model = model.to(device)
    return spec.parallelize(model, mesh) if mesh is not None else model


def make_input(config: ModelConfig = SIZES["small"], *, seed: int = 1,
               device: str | torch.device = "cpu") -> torch.Tensor:
    """The full (global) input ``(batch, seq_len, dim)``, the same on every rank."""
    gen = torch.Generator().manual_seed(seed)
    return torch.randn(config.batch, config.seq_len, config.dim, generator=gen).to(device)


def local_input(name: str, x: torch.Tensor, mesh) -> torch.Tensor:
    """What this rank feeds the parallelized model ``name``: ``x`` itself, or
    its shard of the sequence dimension for sequence-parallel models."""
    if not MODELS[name].seq_sharded:
        return x
    return x.chunk(mesh.size(), dim=1)[mesh.get_local_rank()].contiguous()
