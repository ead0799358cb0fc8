"""What compiled DTensor code runs when the redistribute planner's state
changes after the compile, beside what eager runs then (docs/guards.md,
"Left out").

DTensor plans a redistribution when it is traced, and compiled code runs
that plan. Eager plans per call (from a cache keyed by the two specs). Three
things a plan depends on can change after the compile:

- a ``_flatten`` of the mesh's root: the plugin's mesh guard holds the root's
  flattened meshes, so the frame recompiles to eager's plan (stock keeps the
  old one);
- the min-cost planner switched on (``use_min_cost_redistribution_plan``):
  not guarded; compiled code keeps the greedy plan;
- with the min-cost planner, a dynamic size past the planner's cost
  crossover: not guarded (the planner orders costs by the size's hint without
  a guard); compiled code keeps the plan of the size it was traced with.

Observed in a recording world (rank 0 of 8): each collective by its kind and
its group's ranks, in order. The values are the same either way (every plan
redistributes to the same placements); collectives move no data here.
"""

from __future__ import annotations

import contextlib

import pytest
import torch
import torch.distributed as dist
from torch._dynamo.testing import CompileCounterWithBackend
from torch.distributed.tensor import DTensor
from torch.distributed.tensor.placement_types import Partial, Replicate, Shard

import dynamo_dist
from dynamo_dist._compat import observe as O
from dynamo_dist.worlds import Collective, make_mesh, recording_world, run_in_world

pytestmark = pytest.mark.release

SIDES = ("stock", "plugin")
COLUMNS = 64
SMALL, BIG = 16, 8192  # rows of a (rows, 64) float32 tensor, either side of the crossover below

needs_min_cost_switch = pytest.mark.skipif(not O.min_cost_plan_switch_exists(),
                                           reason="this release's planner has no min-cost switch")


@contextlib.contextmanager
def world(side: str):
    """Rank 0 of a recording world of 8 under ``side``, DTensor's cached
    plans forgotten before and after (they outlive the world's groups)."""
    O.forget_dtensor_plans()
    try:
        with dynamo_dist.enabled() if side == "plugin" else contextlib.nullcontext(), \
                recording_world(8, 0) as log:
            yield log
    finally:
        O.forget_dtensor_plans()


def ran(log, fn, *args) -> list[Collective]:
    log.take()
    fn(*args)
    return log.take()


def ranks(mesh, dim: str) -> tuple[int, ...]:
    return tuple(sorted(dist.get_process_group_ranks(mesh.get_group(dim))))


def compiled(fn):
    counter = CompileCounterWithBackend("aot_eager")
    return torch.compile(fn, backend=counter, fullgraph=True), counter


def rows(n: int, dynamic: bool = False) -> torch.Tensor:
    x = torch.ones(n, COLUMNS)
    if dynamic:
        torch._dynamo.mark_dynamic(x, 0)
    return x


# -- the program: a Partial on "tp" of a (dp=2, tp=4) mesh, to Replicate ---------

def reduce_over_tp(mesh):
    def fn(local):
        d = DTensor.from_local(local, mesh, [Replicate(), Partial()], run_check=False)
        return d.redistribute(mesh, [Replicate(), Replicate()]).to_local() + 1

    return fn


def plans(mesh) -> dict[str, list[Collective]]:
    """What each plan of ``reduce_over_tp`` runs on rank 0. ``greedy``: one
    all_reduce over tp. ``min_cost`` (the min-cost planner, past its
    crossover): shard the tensor over dp first (a local chunk), all_reduce
    the half over tp, all_gather it over dp."""
    tp, dp = ranks(mesh, "tp"), ranks(mesh, "dp")
    return {"greedy": [Collective("all_reduce(sum)", tp)],
            "min_cost": [Collective("all_reduce(sum)", tp), Collective("all_gather_into_tensor", dp)]}


@needs_min_cost_switch
def test_the_min_cost_plan_depends_on_the_size():
    """The planner's steps behind ``plans``: the greedy plan is one step at
    any size; the min-cost plan is that step below its crossover and three
    above it, in a fake CPU world (no GPUs: torch's cost model takes every
    mesh dim as inter-host)."""
    with world("stock"):
        mesh = make_mesh((2, 4), ("dp", "tp"))
        src, dst = (Replicate(), Partial()), (Replicate(), Replicate())
        one_step = [(1, Partial(), Replicate())]
        three_steps = [(0, Replicate(), Shard(0)), (1, Partial(), Replicate()), (0, Shard(0), Replicate())]
        for n in (SMALL, BIG):
            assert O.redistribute_plan(mesh, src, dst, (n, COLUMNS), min_cost=False) == one_step
        assert O.redistribute_plan(mesh, src, dst, (SMALL, COLUMNS), min_cost=True) == one_step
        assert O.redistribute_plan(mesh, src, dst, (BIG, COLUMNS), min_cost=True) == three_steps


def test_the_crossover_is_between_3010_and_3011_rows():
    """Where docs/guards.md says it is, on the newest torch: 3,010 rows of 64
    float32 (753 KiB) plan one all_reduce, 3,011 rows plan three steps."""
    with world("stock"):
        mesh = make_mesh((2, 4), ("dp", "tp"))
        src, dst = (Replicate(), Partial()), (Replicate(), Replicate())
        assert len(O.redistribute_plan(mesh, src, dst, (3010, COLUMNS), min_cost=True)) == 1
        assert len(O.redistribute_plan(mesh, src, dst, (3011, COLUMNS), min_cost=True)) == 3


# -- (a) a flatten after the compile ------------------------------------------------

@pytest.mark.parametrize("side", SIDES)
def test_a_flatten_after_the_compile(side):
    """Partial on ``a`` and ``c`` of (a, b, c) = (2, 2, 2), to Replicate: two
    all_reduces; after ``mesh["a", "c"]._flatten()`` eager runs one on the
    flattened group. The plugin recompiles and runs eager's; stock keeps the
    two."""
    with world(side) as log:
        mesh = make_mesh((2, 2, 2), ("a", "b", "c"))

        def fn(local):
            d = DTensor.from_local(local, mesh, [Partial(), Replicate(), Partial()], run_check=False)
            return d.redistribute(mesh, [Replicate()] * 3).to_local()

        cfn, counter = compiled(fn)
        x = torch.ones(4, 4)
        two = [Collective("all_reduce(sum)", ranks(mesh, "a")), Collective("all_reduce(sum)", ranks(mesh, "c"))]
        assert ran(log, fn, x) == ran(log, cfn, x) == two
        ac = mesh["a", "c"]._flatten("ac")
        one = [Collective("all_reduce(sum)", tuple(sorted(dist.get_process_group_ranks(ac.get_group()))))]
        assert ran(log, fn, x) == one
        if side == "plugin":
            assert ran(log, cfn, x) == one
            assert counter.frame_count == 2
        else:
            assert ran(log, cfn, x) == two
            assert counter.frame_count == 1


# -- (b) the min-cost planner switched on after the compile -----------------------

@needs_min_cost_switch
@pytest.mark.parametrize("side", SIDES)
def test_min_cost_switched_on_after_the_compile(side):
    with world(side) as log:
        mesh = make_mesh((2, 4), ("dp", "tp"))
        fn, plan = reduce_over_tp(mesh), plans(mesh)
        cfn, counter = compiled(fn)
        x = rows(BIG)
        assert ran(log, fn, x) == ran(log, cfn, x) == plan["greedy"]
        with O.use_min_cost_plan(True):
            # Eager takes these specs' plan from its cache, made by the greedy
            # planner (the cache's key leaves the switch out): the same as compiled.
            assert ran(log, fn, x) == ran(log, cfn, x) == plan["greedy"]
            # Planned afresh (specs it has not planned, or its cache cleared),
            # eager runs the min-cost plan; the compiled code keeps its own.
            O.forget_dtensor_plans()
            assert ran(log, fn, x) == plan["min_cost"]
            assert ran(log, cfn, x) == plan["greedy"]
            assert counter.frame_count == 1
            # A new compile traces the min-cost plan.
            torch._dynamo.reset()
            fresh, _ = compiled(fn)
            assert ran(log, fresh, x) == plan["min_cost"]


# -- (c) min-cost planner: a dynamic size past the crossover ------------------------

# Measured: on 2.11 and 2.12 the traced code holds a guard on the size, so a
# size past the crossover compiles a second graph with eager's plan; 2.13-2.15
# keep one graph with the traced size's plan.
RECOMPILES_AT_THE_CROSSOVER = tuple(int(p) for p in torch.__version__.split("+")[0].split(".")[:2]) < (2, 13)

@needs_min_cost_switch
@pytest.mark.parametrize("side", SIDES)
@pytest.mark.parametrize("traced, called", [(SMALL, BIG), (BIG, SMALL)], ids=["small-then-big", "big-then-small"])
def test_min_cost_plan_of_a_dynamic_size_is_the_traced_sizes(side, traced, called):
    with world(side) as log, O.use_min_cost_plan(True):
        mesh = make_mesh((2, 4), ("dp", "tp"))
        fn, plan = reduce_over_tp(mesh), plans(mesh)
        by_size = {SMALL: plan["greedy"], BIG: plan["min_cost"]}
        cfn, counter = compiled(fn)
        assert ran(log, cfn, rows(traced, dynamic=True)) == ran(log, fn, rows(traced)) == by_size[traced]
        if RECOMPILES_AT_THE_CROSSOVER:  # 2.11, 2.12: a guard on the size, a second graph with eager's plan
            assert ran(log, cfn, rows(called, dynamic=True)) == by_size[called]
            assert counter.frame_count == 2
        else:  # one graph for every size (no guard on the crossover): the traced size's plan
            assert ran(log, cfn, rows(called, dynamic=True)) == by_size[traced]
            assert counter.frame_count == 1
        assert ran(log, fn, rows(called)) == by_size[called]


# -- values, on a real gloo world ----------------------------------------------------

@pytest.mark.slow
@needs_min_cost_switch
@pytest.mark.parametrize("side", SIDES)
def test_compiled_code_on_an_older_plan_computes_eagers_values(side):
    """4 gloo ranks, (dp=2, tp=2), Partial on both dims to Replicate: two
    all_reduces (greedy, and min-cost below its crossover) or reduce_scatter
    over dp, all_reduce over tp, all_gather over dp (min-cost above it)."""
    from rank_programs import stale_plan_values

    results = run_in_world(stale_plan_values, 4, side == "plugin", SMALL, BIG, timeout=600)
    for rank, (same, steps) in enumerate(results):
        assert steps == {SMALL: 2, BIG: 3}, steps  # the plans differ: two steps, three steps
        assert len(same) == 3 and all(same.values()), (rank, same)
