"""Hugging Face transformers tensor parallelism: a tiny Llama saved once and
loaded on 2 gloo ranks with ``from_pretrained(path,
distributed_config=DistributedConfig(tp_size=2))`` (DTensor weights sharded by
the model's own TP plan), the whole model ``torch.compile``d and trained a
few steps with its own loss (``dynamo_dist._testing.clients``). On every
rank the plugin's run must match eager step by step, break and recompile no
more than stock, report no ``dynamo_dist:`` break or failed compile under
``explain``, and capture the same collectives as stock, in one graph."""

from __future__ import annotations

import pytest

from dynamo_dist._testing.clients import HFCase, missing, run_driver
from dynamo_dist._testing.clients.runs import RunResult, problems
from dynamo_dist.testing import run_in_gloo_world

pytestmark = pytest.mark.skipif(bool(missing("transformers")), reason="transformers / accelerate are not "
                                f"installed ({', '.join(missing('transformers'))}; pip install 'dynamo-dist[clients]')")

STEPS = 3
LOSS_TOL = GRAD_TOL = 1e-5
CASE = HFCase(tp_size=2)


@pytest.fixture(scope="module")
def runs() -> list[dict[str, RunResult]]:
    """Per rank: mode -> RunResult."""
    per_rank = run_in_gloo_world(run_driver, CASE.world_size, "transformers", "run_case", CASE, STEPS, timeout=900)
    return [{r.mode: r for r in results} for results in per_rank]


def test_plugin_trains_like_eager_and_stock(runs):
    failures = []
    for rank_runs in runs:
        eager, stock, plugin = rank_runs["eager"], rank_runs["stock"], rank_runs["plugin"]
        assert eager.error is None and stock.error is None, eager.describe() + "\n" + stock.describe()
        found = problems(plugin, stock, LOSS_TOL, GRAD_TOL)
        if plugin.collectives() != stock.collectives():
            found.append("the graphs' collectives differ from stock's")
        if found:
            failures.append("\n".join(found) + "\n" + plugin.describe() + "\n" + stock.describe())
    assert not failures, "\n\n".join(failures)


def test_the_model_compiles_to_one_graph_with_its_tp_collectives(runs):
    """Row-parallel layers all-reduce, the vocabulary-parallel head gathers."""
    for rank_runs in runs:
        plugin = rank_runs["plugin"]
        (graph,) = plugin.collectives()
        assert {"all_reduce", "all_gather_into_tensor"} <= set(graph), plugin.describe()
        assert plugin.graph_breaks == 0 and plugin.recompiles == 0, plugin.describe()
