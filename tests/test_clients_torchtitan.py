"""torchtitan's llama3 (debugmodel, 2 blocks) trained through torchtitan's
own code (its model, ParallelDims, ``parallelize_llama``: tensor parallelism,
selective activation checkpointing, per-block ``torch.compile(fullgraph=True)``,
FSDP2; its loss and input preparation), on every ``parallelism.spmd_backend``:
``partial_dtensor`` and ``full_dtensor`` put DTensors in the block graphs,
``spmd_types`` (torchtitan's default) plain tensors and functional collectives.

One spawned 2-rank world runs TP=2 and FSDP2, one 4-rank world dp2 x tp2
(``dynamo_dist._testing.clients``). On every rank, the plugin's run must
match eager step by step (losses, gradients), break and recompile no more
than stock, report no ``dynamo_dist:`` break or failed compile under
``explain``, and capture the same collectives as stock."""

from __future__ import annotations

import pytest
import torch

from dynamo_dist._testing.clients import TitanCase, missing, run_driver
from dynamo_dist._testing.clients.cases import PARALLELISMS, SPMD_BACKENDS
from dynamo_dist._testing.clients.runs import RunResult, problems
from dynamo_dist.testing import run_in_gloo_world

TORCH = tuple(int(p) for p in torch.__version__.split("+")[0].split(".")[:2])

pytestmark = [
    pytest.mark.skipif(bool(missing("torchtitan")), reason="torchtitan is not installed "
                       "(pip install 'dynamo-dist[clients]')"),
    pytest.mark.skipif(TORCH < (2, 14), reason="torchtitan 0.3.0 needs torch >= 2.14"),
]

STEPS = 3
LOSS_TOL = GRAD_TOL = 1e-5  # float32 parameters, aot_eager: the same aten ops as eager
LOSS_FILE = "torchtitan/components/loss.py"  # the compiled loss; every other graph is a block's

CASES = [pytest.param(c, id=c.id) for c in (TitanCase(p, b) for p in PARALLELISMS for b in SPMD_BACKENDS)]


@pytest.fixture(scope="module")
def world_results():
    """Spawn each world once, on first use: ``world_results(n)`` is a list
    (per rank) of RunResults of every case of that world size."""
    cache: dict[int, list[list[RunResult]]] = {}

    def get(n: int) -> list[list[RunResult]]:
        if n not in cache:
            cases = [p.values[0] for p in CASES if p.values[0].world_size == n]
            cache[n] = run_in_gloo_world(run_driver, n, "torchtitan", "run_cases", cases, STEPS, timeout=900)
        return cache[n]

    return get


def _modes(results: list[RunResult], case: TitanCase) -> dict[str, RunResult]:
    return {r.mode: r for r in results if r.case == case.id}


@pytest.mark.parametrize("case", CASES)
def test_plugin_trains_like_eager_and_stock(case: TitanCase, world_results):
    per_rank = world_results(case.world_size)
    assert len(per_rank) == case.world_size
    failures = []
    for results in per_rank:
        runs = _modes(results, case)
        eager, stock, plugin = runs["eager"], runs["stock"], runs["plugin"]
        assert eager.error is None and stock.error is None, eager.describe() + "\n" + stock.describe()
        found = problems(plugin, stock, LOSS_TOL, GRAD_TOL)
        if plugin.collectives(LOSS_FILE) != stock.collectives(LOSS_FILE):
            found.append("the block graphs' collectives differ from stock's")
        if found:
            failures.append("\n".join(found) + "\n" + plugin.describe() + "\n" + stock.describe())
    assert not failures, "\n\n".join(failures)


@pytest.mark.parametrize("case", CASES)
def test_one_block_graph_with_the_expected_collectives(case: TitanCase, world_results):
    """Per-block compile shares one graph between the blocks; TP's sequence
    parallelism all-gathers and reduce-scatters in it, FSDP2's collectives
    stay outside (its hooks run eagerly)."""
    for results in world_results(case.world_size):
        plugin = _modes(results, case)["plugin"]
        blocks = plugin.collectives(LOSS_FILE)
        assert len(blocks) == 1, plugin.describe()
        tp = PARALLELISMS[case.parallelism][1] > 1
        ops = set(blocks[0])
        assert ops == ({"all_gather_into_tensor", "reduce_scatter_tensor"} if tp else set()), plugin.describe()


@pytest.mark.parametrize("case", [p for p in CASES if p.values[0].spmd_backend == "spmd_types"])
def test_spmd_types_has_no_dtensor_in_its_graphs(case: TitanCase, world_results):
    """torchtitan's default backend compiles plain tensors: the plugin guards no
    DTensor (only the mesh torchtitan's loss reads its TP group from)."""
    for results in world_results(case.world_size):
        plugin = _modes(results, case)["plugin"]
        assert not [g for g in plugin.distributed_guards if "DTensor" in g], plugin.distributed_guards
