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
AC_MODES = ("selective", "full", "none")


def missing(client: str) -> list[str]:
    """The packages ``client`` needs that are not installed."""
    return [name for name in REQUIRES[client] if find_spec(name) is None]


@dataclass(frozen=True)
class TitanCase:
    """torchtitan's llama3 debugmodel (cut to ``n_layers`` blocks):
    ``parallelism`` a key of :data:`PARALLELISMS`, ``spmd_backend`` one of
    :data:`SPMD_BACKENDS`, ``ac`` its activation checkpointing (``selective``
    is its trainer's default)."""

    parallelism: str
    spmd_backend: str
    ac: str = "selective"
    n_layers: int = 2
    seq_len: int = 64
    local_batch_size: int = 2
    compile_loss: bool = True  # torchtitan compiles the model and the loss by default

    @property
    def world_size(self) -> int:
        fsdp, tp = PARALLELISMS[self.parallelism]
        return fsdp * tp

    @property
    def id(self) -> str:
        return f"torchtitan-{self.parallelism}-{self.spmd_backend}-ac_{self.ac}"


@dataclass(frozen=True)
class HFCase:
    """A tiny transformers Llama (GQA: ``heads`` query and ``kv_heads``
    key/value heads) sharded over ``tp_size`` ranks."""

    tp_size: int = 2
    layers: int = 2
    hidden: int = 64
    intermediate: int = 128
    heads: int = 4
    kv_heads: int = 2
    vocab: int = 256
    seq_len: int = 32
    batch: int = 2

    @property
    def world_size(self) -> int:
        return self.tp_size

    @property
    def id(self) -> str:
        return f"transformers-llama-tp{self.tp_size}"
