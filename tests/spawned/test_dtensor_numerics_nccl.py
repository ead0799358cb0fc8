"""The numerics checks on NCCL, one rank per GPU (the same batch as the gloo
worlds: models and DTensor programs, aot_eager and inductor, forward and
backward, collectives in the graphs). One GPU gives a one-rank NCCL world
(NCCL puts no two ranks of a communicator on one GPU): the collectives still
run on NCCL and inductor still emits CUDA kernels. Skipped without a GPU."""

from __future__ import annotations

import pytest
import torch

from dynamo_dist.testing import run_in_world
from devtools.numerics import checks_for_world, run_checks


def _world_size() -> int:
    """All GPUs when their count is 1, 2, 4 or 8, else the largest of those
    that fits (the test models split hidden sizes and heads 2, 4 or 8 ways)."""
    count = torch.cuda.device_count()
    return max(n for n in (1, 2, 4, 8) if n <= count)


@pytest.mark.skipif(not torch.cuda.is_available(),
                    reason="NCCL numerics need a CUDA GPU (one rank per GPU); none here")
def test_nccl_compiled_equals_eager_on_every_rank():
    n = _world_size()
    checks = checks_for_world(n)
    per_rank = run_in_world(run_checks, n, checks, True, "cuda", backend="nccl", timeout=900)
    failures = [r.report() for results in per_rank for r in results if not r.ok]
    assert all(len(results) == len(checks) for results in per_rank)
    assert not failures, "\n\n".join(failures)
