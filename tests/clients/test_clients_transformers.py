"""Hugging Face transformers tensor parallelism: a tiny Llama, Qwen3-MoE and
Mixtral each saved once and loaded on 2 gloo ranks with
``from_pretrained(path, distributed_config=DistributedConfig(tp_size=2))``
(DTensor weights sharded by the model's own TP plan; the experts by its
``moe_tp_experts`` style), the whole model ``torch.compile``d and trained a
few steps with its own loss (``devtools.clients``); one spawned
world runs the three. On every rank the plugin's run must match eager step
by step, break and recompile no more than stock, report no ``dynamo_dist:``
break or failed compile under ``explain``, and capture the same collectives
as stock."""

from __future__ import annotations

import functools

import pytest

from devtools.clients import HFCase, missing, run_driver
from devtools.clients.runs import RunResult, failures_against_stock
from dynamo_dist.testing import run_in_world

pytestmark = [
    pytest.mark.skipif(bool(missing("transformers")), reason="transformers / accelerate are not "
                       f"installed ({', '.join(missing('transformers'))}; pip install 'dynamo-dist[clients]')"),
    pytest.mark.slow,
]

STEPS = 3
LOSS_TOL = GRAD_TOL = 1e-5
LLAMA = HFCase(tp_size=2)
MOE_FAMILIES = ("qwen3_moe", "mixtral")
CASES = [LLAMA, *(HFCase(tp_size=2, family=f) for f in MOE_FAMILIES)]
WORLD_SIZE = 2
assert all(case.world_size == WORLD_SIZE for case in CASES)


@pytest.fixture(scope="module")
def runs() -> dict[str, list[dict[str, RunResult]]]:
    """Case id -> per rank: mode -> RunResult."""
    per_rank = run_in_world(run_driver, WORLD_SIZE, "transformers", "run_cases", CASES, STEPS, timeout=900)
    return {case.id: [{r.mode: r for r in results if r.case == case.id} for results in per_rank]
            for case in CASES}


@pytest.mark.parametrize("case", CASES, ids=lambda c: c.id)
def test_plugin_trains_like_eager_and_stock(case, runs):
    failures = failures_against_stock(runs[case.id], LOSS_TOL, GRAD_TOL)
    assert not failures, "\n\n".join(failures)


def test_the_model_compiles_to_one_graph_with_its_tp_collectives(runs):
    """Row-parallel layers all-reduce, the vocabulary-parallel head gathers."""
    for rank_runs in runs[LLAMA.id]:
        plugin = rank_runs["plugin"]
        (graph,) = plugin.collectives()
        assert {"all_reduce", "all_gather_into_tensor"} <= set(graph), plugin.report()
        assert plugin.graph_breaks == 0 and plugin.recompiles == 0, plugin.report()


@pytest.mark.parametrize("family", MOE_FAMILIES)
def test_moe_experts_are_sharded_dtensors_reduced_like_a_dense_mlp(family, runs):
    """transformers' ``moe_tp_experts`` gives each rank a slice of every
    expert (``gate_up_proj`` packed column-wise: a ``_StridedShard``
    DTensor; ``down_proj`` row-wise: ``Shard(2)``), whose partial outputs
    are all-reduced where the dense Llama all-reduces its MLP's: each graph
    has Llama's collectives, with no graph break. The plugin guards both
    expert weights of every layer."""
    case = HFCase(tp_size=2, family=family)
    for moe_runs, llama_runs in zip(runs[case.id], runs[LLAMA.id]):
        plugin, (llama_graph,) = moe_runs["plugin"], llama_runs["plugin"].collectives()
        assert plugin.graph_breaks == 0, plugin.report()
        assert all(graph == llama_graph for graph in plugin.collectives()), plugin.report()
        for layer in range(case.layers):
            experts = (f"`self._modules['model']._modules['layers']._modules['{layer}']"
                       "._modules['mlp']._modules['experts']")
            for weight, placement in (("gate_up_proj", "_StridedShard(dim=1, sf=2)"), ("down_proj", "Shard(dim=2)")):
                guard = f"{experts}._parameters['{weight}']`: DTensor ({placement},) on mesh (tp={case.tp_size})"
                assert guard in plugin.distributed_guards, plugin.distributed_guards


def test_a_restart_with_torchs_precompile_loads_the_model(tmp_path, monkeypatch):
    """The Llama compiled with inductor under torch's precompile
    (``TORCH_CACHING_PRECOMPILE=1``, a cache dir per rank), then the same job
    restarted in a fresh world on the same dirs: on every rank the restart
    loads every frame from Dynamo's cache (traces none) and trains like
    eager. (The model's frame is a ``functools.wraps`` wrapper, transformers'
    ``deprecate_kwarg``, whose globals are another module's than its
    ``__module__``: stock raises NameError on a restart.)"""
    monkeypatch.setenv("TORCH_CACHING_PRECOMPILE", "1")
    runs = []
    for _ in range(2):
        driver = functools.partial(run_driver, explain=False, precompile=str(tmp_path))
        per_rank = run_in_world(driver, WORLD_SIZE, "transformers", "run_cases", [LLAMA], STEPS,
                                ("eager", "plugin"), "inductor", timeout=1500)
        runs.append([{r.mode: r for r in results} for results in per_rank])
    job, restart = runs
    for rank_runs in job:
        plugin = rank_runs["plugin"]
        assert plugin.error is None and plugin.frames_traced, plugin.report()
    for rank_runs in restart:
        plugin = rank_runs["plugin"]
        assert plugin.error is None and plugin.frames_traced == 0, plugin.report()
        assert plugin.max_loss_diff <= LOSS_TOL and plugin.max_grad_diff <= GRAD_TOL, plugin.report()
