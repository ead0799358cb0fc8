"""Changing batch and sequence lengths stay cheap (upstream #152963 reports
recompiles here: DTensor's spec keeps raw sizes). A sequence-parallel block
(norm on each rank's sequence shard, tensor-parallel MLP) and a
tensor-parallel MLP over 2 gloo ranks, trained through a compiled forward on
four (batch, seq_len) shapes: with automatic dynamic shapes each compiles
twice (static, then dynamic), with batch and sequence marked dynamic once,
with ``dynamic=True`` at most twice (the MLP's input hook, a ``Shard(1)`` to
``Replicate`` redistribute, specializes the first sequence length, stock
alike), and equals eager (outputs and gradients) on every
rank. (The TP MLP's joint trace recursed forever with a dynamic size on stock
2.13-2.15: ``aot/symbol_proxies.py``.) Batches stay even: an odd batch makes DTensor's view propagation
re-decide whether the flattened (batch x seq) dim divides over the mesh (a
guard ``x.size(0) % 2 == 0``), a real change of sharding, so a recompile."""

from __future__ import annotations

from dynamo_dist.testing import run_in_world

from rank_programs import changing_lengths
import pytest


SHAPES = [(2, 16), (4, 24), (2, 32), (6, 40)]


# The most frames each way of making sizes dynamic may compile.
MOST_FRAMES = {"automatic": 2, "mark_dynamic": 1, "dynamic=True": 2}


@pytest.mark.slow
@pytest.mark.parametrize("model, modes", [("sp_block", ("automatic", "mark_dynamic")), ("mlp", tuple(MOST_FRAMES))])
def test_changing_lengths_compile_at_most_twice_and_match_eager(model, modes):
    per_rank = run_in_world(changing_lengths, 2, model, SHAPES, modes, timeout=600)
    for rank, found in enumerate(per_rank):
        for how in modes:
            most = MOST_FRAMES[how]
            frames, worst = found[how]
            assert frames <= most, f"rank {rank}: {frames} compiles ({how}) for {SHAPES}"
            assert worst <= 1e-5, f"rank {rank}: compiled ({how}) differs from eager by {worst}"
