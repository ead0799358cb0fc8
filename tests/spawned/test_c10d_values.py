"""torch.distributed calls in compiled functions give eager's values on real
gloo worlds: every traced row (the collectives, their ``async_op=True`` forms
and ``Work.wait()``, the list forms, ProcessGroup methods) on 2 ranks, beside
stock torch, and the calls whose group matters most on 4 ranks, on the world
group and on a pair of ranks; forward and, through ``autograd.Function``s
whose forward and backward call collectives (as spmd_types writes its
collectives), backward. Each program compiles with ``fullgraph=True`` under
the plugin (or takes the breaks it declares) (``tests/c10d_programs.py``)."""

from __future__ import annotations

import importlib.util

import pytest

from c10d_programs import PROGRAMS, SPMD_TYPES_PROGRAMS, expected_breaks, run_programs
from dynamo_dist.testing import run_in_world

pytestmark = pytest.mark.slow

HAS_SPMD_TYPES = importlib.util.find_spec("spmd_types") is not None
NAMES = [n for n in PROGRAMS if HAS_SPMD_TYPES or n not in SPMD_TYPES_PROGRAMS]
WORLDS = (2, 4)
CASES = [(n, name) for n in WORLDS for name in NAMES if n in PROGRAMS[name].worlds]

# One of each kind of row, in a 2-rank world: what `-m release` runs on every release.
RELEASE_NAMES = ["all_reduce", "all_reduce, the gradient through it", "all_reduce async_op=True, wait()",
                 "all_reduce async_op=True, Work returned", "broadcast", "all_gather", "reduce_scatter", "all_to_all",
                 "pg.allreduce([t]).wait()", "autograd.Function: all_to_all both ways"]


@pytest.fixture(scope="module")
def world_results():
    """Each world spawned once, on first use: its Results, by (program, group)."""
    cache: dict[int, dict] = {}

    def get(n: int) -> dict:
        if n not in cache:
            names = [name for name in NAMES if n in PROGRAMS[name].worlds]
            # stock beside the plugin in the 2-rank world (the 4-rank world adds the pair groups)
            per_rank = run_in_world(run_programs, n, names, True, n == 2, timeout=1200)
            cache[n] = {}
            for rank, results in enumerate(per_rank):
                for r in results:
                    cache[n].setdefault((r.program, r.group), []).append((rank, r))
        return cache[n]

    return get


def _failures(ranked: list, program) -> list[str]:
    found = []
    for rank, r in ranked:
        if r.skipped is not None:
            continue
        if r.plugin is not None:
            found.append(f"rank {rank}, group {r.group}: {r.plugin}")
        elif r.plugin_breaks != expected_breaks(program):
            found.append(f"rank {rank}, group {r.group}: {r.plugin_breaks} graph breaks, the program declares "
                         f"{expected_breaks(program)}")
    return found


@pytest.mark.parametrize("world, name", CASES, ids=[f"w{n}-{name}" for n, name in CASES])
def test_compiled_equals_eager_on_every_rank(world, name, world_results):
    results = world_results(world)
    program = PROGRAMS[name]
    groups = [g for (p, g) in results if p == name]
    assert groups, f"{name} did not run"
    failures = [f for g in groups for f in _failures(results[(name, g)], program)]
    assert not failures, "\n\n".join(failures)
    skipped = {r.skipped for g in groups for _, r in results[(name, g)] if r.skipped}
    if skipped:
        pytest.skip(f"eager cannot run it on this release's gloo: {skipped.pop()}")


@pytest.mark.release
def test_one_of_each_kind_equals_eager_on_2_ranks():
    """The per-release set: one program of each kind of row, 2 ranks."""
    per_rank = run_in_world(run_programs, 2, RELEASE_NAMES, False, False, timeout=600)  # the plugin only
    failures = []
    for rank, results in enumerate(per_rank):
        assert {r.program for r in results} == set(RELEASE_NAMES)
        for r in results:
            failures += _failures([(rank, r)], PROGRAMS[r.program])
    assert not failures, "\n\n".join(failures)


@pytest.mark.skipif(not HAS_SPMD_TYPES, reason="spmd_types is not installed (the clients extra)")
def test_spmd_types_all_to_all_stays_in_one_graph(world_results):
    """spmd_types' all_to_all (an autograd.Function calling dist.all_to_all
    with lists, both ways) compiles with fullgraph=True, values and grads
    equal eager, on 2 and 4 ranks; stock breaks the graph around it."""
    for n in WORLDS:
        results = world_results(n)
        for name in SPMD_TYPES_PROGRAMS:
            for (program, group), ranked in results.items():
                if program != name:
                    continue
                assert not _failures(ranked, PROGRAMS[name]), (n, name, group)
                assert all(r.plugin_breaks == 0 for _, r in ranked), (n, name, group)
                assert all(r.stock is None and r.stock_breaks > 0 for _, r in ranked if r.stock_breaks >= 0), \
                    (n, name, group)
