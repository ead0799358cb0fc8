"""What the benchmarks compile for the models of ``dynamo_dist.demo.models``."""

from __future__ import annotations

from typing import Any

from dynamo_dist.demo.models import SIZES, ModelConfig

# Sizes beyond demo.models.SIZES. "bench": big enough that a training step
# does real work (a few ms per rank on one core), small enough for 2 cores.
BENCH_SIZES: dict[str, dict[str, int]] = {
    "bench": {"dim": 256, "hidden": 1024, "n_heads": 8, "seq_len": 64, "batch": 4},
}


def model_config(size: str) -> Any:
    """A ``ModelConfig`` by name: ``demo.models.SIZES`` or ``BENCH_SIZES``."""

    return SIZES[size] if size in SIZES else ModelConfig(**BENCH_SIZES[size])


def train_step(model, x):
    """The compiled part of a training step: forward and loss. The backward
    runs outside (the backend compiles it on its first call)."""
    return model(x).sum()
