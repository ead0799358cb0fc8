"""Multi-rank numerics on real gloo worlds (2 and 4 ranks, 1-D and 2-D
meshes): tensor-parallel models and DTensor programs compiled with the
plugin under aot_eager (all) and inductor (a subset), forward and backward,
equal to eager on every rank, with the expected collectives in the captured
graphs. One spawned world per size runs the whole batch
(``devtools.numerics``); each check is reported as its own test."""

from __future__ import annotations

import pytest

from dynamo_dist.testing import run_in_world
from devtools.numerics import Check, CheckResult, checks_for_world, run_checks

pytestmark = pytest.mark.slow

WORLDS = (2, 4)
CHECKS = [(n, check) for n in WORLDS for check in checks_for_world(n)]


@pytest.fixture(scope="module")
def world_results():
    """Spawn each world once, on first use; ``world_results(n)`` is a list
    (per rank) of lists of CheckResult."""
    cache: dict[int, list[list[CheckResult]]] = {}

    def get(n: int) -> list[list[CheckResult]]:
        if n not in cache:
            cache[n] = run_in_world(run_checks, n, checks_for_world(n), timeout=600)
        return cache[n]

    return get


@pytest.mark.parametrize("world, check", CHECKS, ids=[f"w{n}-{c.id}" for n, c in CHECKS])
def test_compiled_equals_eager_on_every_rank(world: int, check: Check, world_results):
    per_rank = world_results(world)
    assert len(per_rank) == world
    failures = []
    for rank, results in enumerate(per_rank):
        (result,) = [r for r in results if r.check == check]
        assert result.rank == rank
        if not result.ok:
            failures.append(result.report())
    assert not failures, "\n\n".join(failures)


def test_batches_cover_the_issue():
    """Every world runs every model under aot_eager, and both worlds run
    inductor; the 4-rank world has the 2-D mesh; the programs cover the
    listed redistributions."""
    from dynamo_dist.demo.models import MODELS
    from devtools.numerics import PROGRAMS

    for n in WORLDS:
        checks = checks_for_world(n)
        assert {c.name for c in checks if c.kind == "model" and c.backend == "aot_eager"} == set(MODELS)
        assert any(c.backend == "inductor" for c in checks)
        assert {c.mesh for c in checks} == ({"1d", "2d"} if n == 4 else {"1d"})
    assert {"shard_to_replicate", "partial_to_replicate", "partial_to_shard", "shard0_to_shard1",
            "strided_shard_to_replicate", "strided_shard_2d", "shard_partial_2d"} <= set(PROGRAMS)


def test_2d_collectives_name_each_dims_group(world_results):
    """On the 2-D mesh the dp and tp groups differ, and the captured graphs
    name both (each collective the group of the mesh dim it runs over)."""
    results = {r.check.id: r for r in world_results(4)[0]}
    r = results[Check("program", "shard_partial_2d", "2d", "aot_eager").id]
    dp, tp = r.groups["dp"], r.groups["tp"]
    assert dp != tp
    assert sorted(r.forward[0]) == sorted(["all_gather_into_tensor[%s]" % dp, "reduce_scatter_tensor[%s]" % tp,
                                           "wait_tensor", "wait_tensor"])
    model = results[Check("model", "transformer", "2d", "aot_eager").id]
    assert {c for g in model.forward + model.backward for c in g if c != "wait_tensor"} == {f"all_reduce[{tp}]"}


def test_collective_check_flags_wrong_group_and_missing_wait():
    """The graph check itself (no world): a collective on the wrong mesh
    dim's group, or one nobody waits on, is a problem."""
    from types import SimpleNamespace

    from dynamo_dist.testing import Collective
    from devtools.numerics import AG, AR, _check_collectives

    result = CheckResult(Check("program", "p", "2d", "aot_eager"), 0, groups={"dp": "1", "tp": "3"})
    capture = SimpleNamespace(
        forward_collectives=[[Collective(AR, "3", True), Collective("wait_tensor", None)]],
        backward_collectives=[[Collective(AG, "1", False)]])
    _check_collectives(result, capture, (((AR, "dp"),), ((AG, "dp"),)))
    assert len(result.problems) == 2, result.problems
    assert "forward collectives [('all_reduce', '3')] != expected [('all_reduce', '1')]" in result.problems[0]
    assert "backward collectives without wait_tensor: ['all_gather_into_tensor[1]']" in result.problems[1]
    ok = CheckResult(Check("program", "p", "2d", "aot_eager"), 0, groups={"dp": "1", "tp": "3"})
    _check_collectives(ok, capture, (((AR, "tp"),), ()))
    assert ok.problems == ["backward collectives [('all_gather_into_tensor', '1')] != expected [] "
                           "(groups: {'dp': '1', 'tp': '3'})",
                           "backward collectives without wait_tensor: ['all_gather_into_tensor[1]']"]
