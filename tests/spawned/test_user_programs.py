"""Programs users write, compiled with the plugin on a 2-rank gloo world:
values and gradients equal eager's on every rank (``rank_programs.
programs_users_write``). Each was a crash or a silent wrong answer once:
a DTensor made by ``from_local`` from a tensor that requires grad and
returned (AOTAutograd's partitioner refused the graph), ``loss_parallel``
entered inside (stock 2.11-2.13 fail in Dynamo's fake propagation),
``implicit_replication`` entered inside (2.11), an ``AsyncCollectiveTensor``
input that requires grad (its gradient was lost, stock 2.12-2.15 alike). The
fake-world tests of ``tests/unit/test_dtensor_outputs.py`` check, on every
release, that they compile and what stock does."""

from __future__ import annotations

import pytest

from dynamo_dist.testing import run_in_world

from rank_programs import programs_users_write


@pytest.mark.slow
def test_programs_users_write_compile_like_eager_on_gloo():
    per_rank = run_in_world(programs_users_write, 2, timeout=600)
    for rank, found in enumerate(per_rank):
        for name, worst in found.items():
            assert not isinstance(worst, str), f"rank {rank}, {name}: {worst}"
            assert worst <= 1e-5, f"rank {rank}, {name}: compiled differs from eager by {worst}"
