"""The client configurations the drivers run: plain data, importable (and
picklable) without the clients installed."""

from __future__ import annotations

from dataclasses import dataclass
from importlib.util import find_spec

# The Python packages each client needs (transformers' tensor parallelism
# loads through accelerate).
REQUIRES = {"torchtitan": ("torchtitan",), "transformers": ("transformers", "accelerate")}

PARALLELISMS = {"tp": (1, 2), "fsdp": (2, 1), "dp_tp": (2, 2)}  # name -> (FSDP degree, TP degree)
SPMD_BACKENDS = ("partial_dtensor", "full_dtensor", "spmd_types")  # torchtitan's parallelism.spmd_backend


def missing(client: str) -> list[str]:
    """The packages ``client`` needs that are not installed."""
    return [name for name in REQUIRES[client] if find_spec(name) is None]


class _OnParallelism:
    """A case whose world is its ``parallelism``'s (a key of :data:`PARALLELISMS`)."""

    parallelism: str

    @property
    def world_size(self) -> int:
        fsdp, tp = PARALLELISMS[self.parallelism]
        return fsdp * tp


@dataclass(frozen=True)
class TitanCase(_OnParallelism):
    """torchtitan's llama3 debugmodel (cut to ``n_layers`` blocks):
    ``parallelism`` a key of :data:`PARALLELISMS`, ``spmd_backend`` one of
    :data:`SPMD_BACKENDS`, ``ac`` its activation checkpointing (``selective``
    is its trainer's default), ``spmd_typechecking`` its
    ``--debug.spmd_typechecking`` (spmd_types' checker in its global mode
    around every step; ``spmd_types`` backend only)."""

    parallelism: str
    spmd_backend: str
    ac: str = "selective"
    n_layers: int = 2
    seq_len: int = 64
    local_batch_size: int = 2
    compile_loss: bool = True  # torchtitan compiles the model and the loss by default
    spmd_typechecking: bool = False

    def __post_init__(self) -> None:
        if self.spmd_typechecking and self.spmd_backend != "spmd_types":
            raise ValueError(f"spmd_typechecking=True needs spmd_backend='spmd_types', not {self.spmd_backend!r} "
                             "(torchtitan checks SPMD types only on that backend)")

    @property
    def id(self) -> str:
        checked = "-typechecked" if self.spmd_typechecking else ""
        return f"torchtitan-{self.parallelism}-{self.spmd_backend}{checked}-ac_{self.ac}"


@dataclass(frozen=True)
class SimpleFSDPCase(_OnParallelism):
    """torchtitan's graph_trainer llama3 debugmodel (cut to ``n_layers``
    blocks) with SimpleFSDP (every parameter a ``Shard(0)`` DTensor,
    redistributed inside the compiled model) and, for ``dp_tp``, tensor
    parallelism; the whole model compiled as graph_trainer's ``jit`` mode
    does. ``parallelism``: ``fsdp`` or ``dp_tp`` (:data:`PARALLELISMS`)."""

    parallelism: str
    n_layers: int = 2
    seq_len: int = 64
    local_batch_size: int = 2


    @property
    def id(self) -> str:
        return f"torchtitan-simple_fsdp-{self.parallelism}"


@dataclass(frozen=True)
class MoECase:
    """torchtitan's deepseek_v3 debugmodel (cut to ``n_layers`` blocks: the
    first dense, the rest mixture-of-experts) with expert parallelism of
    ``ep`` over ``ep`` ranks (FSDP2 on the same ranks, the experts' tokens
    exchanged with ``all_to_all_single`` on the EP group), per-block compile."""

    ep: int = 2
    n_layers: int = 3
    seq_len: int = 32
    local_batch_size: int = 2

    @property
    def world_size(self) -> int:
        return self.ep

    @property
    def id(self) -> str:
        return f"torchtitan-deepseek_v3-ep{self.ep}"


# SDPA backends of torchtitan's attention under context parallelism:
# "math" runs on CPU (DTensor decomposes it); "ring" is its default (flash,
# efficient, cuDNN: ring attention), which has no CPU kernel with a sharding
# strategy.
CP_ATTENTION = ("math", "ring")


@dataclass(frozen=True)
class CPCase:
    """torchtitan's llama3 debugmodel (cut to ``n_layers`` blocks) with
    context parallelism of ``cp`` (the sequence sharded over ``cp`` ranks,
    FSDP2 over the same ranks), per-block compile; ``attention`` one of
    :data:`CP_ATTENTION`."""

    cp: int = 2
    attention: str = "math"
    n_layers: int = 2
    seq_len: int = 64
    local_batch_size: int = 2

    @property
    def world_size(self) -> int:
        return self.cp

    @property
    def id(self) -> str:
        return f"torchtitan-llama3-cp{self.cp}-sdpa_{self.attention}"


# The transformers model families a case can build (its config's family name).
HF_FAMILIES = ("llama", "qwen3_moe", "mixtral")


@dataclass(frozen=True)
class HFCase:
    """A tiny transformers causal LM of ``family`` (one of
    :data:`HF_FAMILIES`; GQA: ``heads`` query and ``kv_heads`` key/value
    heads) sharded over ``tp_size`` ranks by its own TP plan. The
    mixture-of-experts families route each token to ``experts_per_token`` of
    ``experts`` experts of width ``expert_intermediate``."""

    tp_size: int = 2
    family: str = "llama"
    layers: int = 2
    hidden: int = 64
    intermediate: int = 128
    heads: int = 4
    kv_heads: int = 2
    vocab: int = 256
    seq_len: int = 32
    batch: int = 2
    experts: int = 4
    experts_per_token: int = 2
    expert_intermediate: int = 32

    @property
    def world_size(self) -> int:
        return self.tp_size

    @property
    def id(self) -> str:
        return f"transformers-{self.family}-tp{self.tp_size}"
