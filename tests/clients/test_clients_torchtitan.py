"""torchtitan trained through its own code (``devtools.clients``):

- llama3 (debugmodel, 2 blocks: its model, ParallelDims, ``parallelize_llama``:
  tensor parallelism, selective activation checkpointing, per-block
  ``torch.compile(fullgraph=True)``, FSDP2; its loss and input preparation) on
  every ``parallelism.spmd_backend``: ``partial_dtensor`` and ``full_dtensor``
  put DTensors in the block graphs, ``spmd_types`` (torchtitan's default)
  plain tensors and functional collectives;
- SimpleFSDP (graph_trainer's llama3: every parameter a ``Shard(0)`` DTensor
  redistributed inside the whole-model compile), FSDP on 2 ranks, dp2 x tp2;
- expert parallelism (deepseek_v3's debugmodel, 3 blocks: ``all_to_all_single``
  on the EP group inside the MoE blocks' graphs), EP=2;
- context parallelism (CP=2: ``DTensor.from_local`` on the CP mesh inside each
  block) with SDPA's math backend, the one that runs on CPU; torchtitan's
  ring attention needs GPUs.

One spawned 2-rank world runs every 2-rank case, one 4-rank world dp2 x tp2.
On every rank, the plugin's run must match eager step by step (losses,
gradients), break and recompile no more than stock, report no
``dynamo_dist:`` break or failed compile under ``explain``, and capture the
same collectives as stock."""

from __future__ import annotations

import pytest
import torch

from devtools.clients import TitanCase
from devtools.clients.cases import PARALLELISMS, SPMD_BACKENDS, CPCase, MoECase, SimpleFSDPCase
from devtools.clients.runs import RunResult, failures_against_stock
from dynamo_dist.testing import run_in_world
from helpers import torchtitan_marks
from rank_programs import torchtitan_world

pytestmark = torchtitan_marks()

STEPS = 3
LOSS_TOL = GRAD_TOL = 1e-5  # float32 parameters, aot_eager: the same aten ops as eager
LOSS_FILE = "torchtitan/components/loss.py"  # the compiled loss; every other graph is the model's or a block's

LLAMA3 = [TitanCase(p, b) for p in PARALLELISMS for b in SPMD_BACKENDS]
SIMPLE_FSDP = [SimpleFSDPCase("fsdp"), SimpleFSDPCase("dp_tp")]
MOE = MoECase()
CP = CPCase(attention="math")
RING = CPCase(attention="ring")
CASES = [pytest.param(c, id=c.id) for c in (*LLAMA3, *SIMPLE_FSDP, MOE, CP)]
# torchtitan's --debug.spmd_typechecking, with its default (selective)
# activation checkpointing: each checkpointed block is checked op by op.
TYPECHECKED = TitanCase("tp", "spmd_types", spmd_typechecking=True)

# Why torchtitan's default context parallelism cannot run here (measured on
# torch 2.15.0, eagerly too: see test_ring_attention_has_no_cpu_sharding_strategy).
RING_ON_CPU = ("SDPA on CPU dispatches to aten._scaled_dot_product_flash_attention_for_cpu.default, which has no "
               "DTensor sharding strategy (NotImplementedError); torchtitan's ring attention needs SDPA's flash, "
               "efficient or cuDNN kernels: 2 GPUs (NCCL)")


@pytest.fixture(scope="module")
def world_results():
    """Spawn each world once, on first use: ``world_results(n)`` is a list
    (per rank) of RunResults of every case of that world size (in the 2-rank
    world, also the ring attention's eager step)."""
    cache: dict[int, list[list[RunResult]]] = {}

    def get(n: int) -> list[list[RunResult]]:
        if n not in cache:
            cases = [c for c in (*(p.values[0] for p in CASES), TYPECHECKED) if c.world_size == n]
            eager_only = [RING] if RING.world_size == n else []
            cache[n] = run_in_world(torchtitan_world, n, cases, STEPS, eager_only, timeout=1200)
        return cache[n]

    return get


def _modes(results: list[RunResult], case) -> dict[str, RunResult]:
    return {r.mode: r for r in results if r.case == case.id}


def _plugin_runs(case, world_results) -> list[RunResult]:
    return [_modes(results, case)["plugin"] for results in world_results(case.world_size)]


def _assert_trains_like_eager_and_stock(per_rank: list[list[RunResult]], case) -> None:
    assert len(per_rank) == case.world_size
    failures = failures_against_stock((_modes(results, case) for results in per_rank), LOSS_TOL, GRAD_TOL)
    assert not failures, "\n\n".join(failures)


@pytest.mark.parametrize("case", CASES)
def test_plugin_trains_like_eager_and_stock(case, world_results):
    _assert_trains_like_eager_and_stock(world_results(case.world_size), case)


@pytest.mark.parametrize("case", [pytest.param(c, id=c.id) for c in LLAMA3])
def test_one_block_graph_with_the_expected_collectives(case: TitanCase, world_results):
    """Per-block compile shares one graph between the blocks; TP's sequence
    parallelism all-gathers and reduce-scatters in it, FSDP2's collectives
    stay outside (its hooks run eagerly)."""
    for plugin in _plugin_runs(case, world_results):
        blocks = plugin.collectives(LOSS_FILE)
        assert len(blocks) == 1, plugin.report()
        tp = PARALLELISMS[case.parallelism][1] > 1
        ops = set(blocks[0])
        assert ops == ({"all_gather_into_tensor", "reduce_scatter_tensor"} if tp else set()), plugin.report()


@pytest.mark.parametrize("case", [pytest.param(c, id=c.id) for c in LLAMA3 if c.spmd_backend == "spmd_types"])
def test_spmd_types_has_no_dtensor_in_its_graphs(case: TitanCase, world_results):
    """torchtitan's default backend compiles plain tensors: the plugin guards no
    DTensor (only the mesh torchtitan's loss reads its TP group from)."""
    for plugin in _plugin_runs(case, world_results):
        assert not [g for g in plugin.distributed_guards if "DTensor" in g], plugin.distributed_guards


@pytest.mark.parametrize("case", [pytest.param(c, id=c.id) for c in SIMPLE_FSDP])
def test_simple_fsdp_compiles_the_whole_model_with_its_parameters_as_dtensors(case: SimpleFSDPCase, world_results):
    """One graph for the whole model (no break, no recompile): every
    parameter, a Shard(0) DTensor on the FSDP mesh (2-D with TP), is
    all-gathered inside it and its gradient reduce-scattered; the plugin
    guards the parameters and the FSDP mesh SimpleFSDP redistributes on."""
    fsdp, tp = PARALLELISMS[case.parallelism]
    for plugin in _plugin_runs(case, world_results):
        assert plugin.graph_breaks == 0 and plugin.recompiles == 0, plugin.report()
        (model,) = plugin.collectives(LOSS_FILE)
        assert {"all_gather_into_tensor", "reduce_scatter_tensor"} <= set(model), plugin.report()
        parameters = [g for g in plugin.distributed_guards if "_parameters[" in g and "DTensor" in g]
        assert parameters and all(g.endswith(f"on mesh (fsdp={fsdp}, tp={tp})" if tp > 1 else
                                             f"(Shard(dim=0),) on mesh (fsdp={fsdp})") for g in parameters), \
            plugin.distributed_guards
        assert any(f"mesh (fsdp={fsdp})" in g and "device_mesh" in g for g in plugin.distributed_guards), \
            plugin.distributed_guards


def test_expert_parallel_blocks_exchange_tokens_on_the_ep_group(world_results):
    """The MoE blocks (two, sharing one graph after the dense block's) send
    token counts and tokens to the experts' ranks and back with
    all_to_all_single (forward and backward) on the EP mesh the plugin
    guards; the dense block's graph has no collective."""
    for plugin in _plugin_runs(MOE, world_results):
        blocks = plugin.collectives(LOSS_FILE)
        assert len(blocks) == 2 and plugin.recompiles == 1, plugin.report()  # dense, then MoE
        assert blocks[0] == [] and set(blocks[1]) == {"all_to_all_single"} and len(blocks[1]) >= 3, \
            plugin.report()
        assert any(g.startswith("`self._modules['moe']._modules['routed_experts'].token_dispatcher.ep_mesh`")
                   and f"mesh (ep={MOE.ep})" in g for g in plugin.distributed_guards), \
            plugin.distributed_guards


def test_context_parallel_blocks_build_dtensors_on_the_cp_mesh(world_results):
    """torchtitan's CP wrapper makes q, k and v ``Shard(1)`` DTensors on the
    CP mesh inside the compiled block: the plugin guards that mesh and that
    placement (folded into the graph), and DTensor's math attention
    all-gathers what it needs in the block's graph."""
    for plugin in _plugin_runs(CP, world_results):
        (block,) = plugin.collectives(LOSS_FILE)
        assert "all_gather_into_tensor" in block, plugin.report()
        guards = plugin.distributed_guards
        assert any("inner_attention" in g and f"mesh (cp={CP.cp})" in g for g in guards), guards
        assert any("inner_attention" in g and g.endswith(": Shard(dim=1)") for g in guards), guards


def test_ring_attention_has_no_cpu_sharding_strategy(world_results):
    """What keeps torchtitan's default context parallelism off CPU: its
    eager step fails on every rank, in DTensor's sharding propagation (so
    the ring test below is skipped here for this reason, not assumed)."""
    for results in world_results(RING.world_size):
        eager = _modes(results, RING)["eager"]
        assert eager.error and "aten._scaled_dot_product_flash_attention_for_cpu.default does not have a " \
                               "sharding strategy registered" in eager.error, eager.report()


@pytest.mark.skipif(torch.cuda.device_count() < RING.world_size, reason=RING_ON_CPU)
def test_ring_attention_trains_like_eager_and_stock_on_gpus():
    per_rank = run_in_world(torchtitan_world, RING.world_size, [RING], STEPS, [], timeout=1200,
                                 backend="nccl")
    _assert_trains_like_eager_and_stock(per_rank, RING)


def test_spmd_type_checking_trains_like_eager_where_stock_crashes(world_results):
    """torchtitan's default backend with its SPMD type checks on (the
    checker in its global mode around each step): the plugin checks the
    types while tracing and trains as eager does, every frame whole (the
    vocab-parallel loss is checked by its ``typecheck_forward``, as eager
    checks it); stock crashes in the trace on the checker's mesh."""
    for results in world_results(TYPECHECKED.world_size):
        runs = _modes(results, TYPECHECKED)
        eager, stock, plugin = runs["eager"], runs["stock"], runs["plugin"]
        assert eager.error is None, eager.report()
        assert plugin.error is None and not plugin.failures, plugin.report()
        assert plugin.graph_breaks == 0, plugin.report()
        assert plugin.max_loss_diff <= LOSS_TOL and plugin.max_grad_diff <= GRAD_TOL, plugin.report()
        assert stock.error and "Opaque object of type" in stock.error, stock.report()
