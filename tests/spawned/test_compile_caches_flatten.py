"""Flattened meshes and the redistribute planner across processes: a graph
whose collectives DTensor's planner merged onto a flattened mesh names that
mesh's group, so a process whose root mesh flattened other dims (where that
name is another group, or no group) must not load it; nor may a process
whose planner switches differ (it would run other collectives than its
peers). Each run is a fresh process on a fake 8-rank world with a (2, 2, 2)
mesh ``a, b, c`` (``cache_programs.cube_world_run``); inductor compiles.
Collectives compared by the ranks of their groups: ``tests/spawned/test_fuzz_processes.py``.
"""

from __future__ import annotations

import pytest
from test_compile_caches import assert_all_hit, assert_all_miss, run_fresh

pytestmark = pytest.mark.slow


def cube(cache, **options) -> dict:
    return run_fresh(cache, world="cube", program="planned", **options)


def assert_traced_anew(run: dict) -> None:
    """The AOTAutograd entry (keyed by the Dynamo graph, before DTensor's
    planner runs) misses: this process plans its own collectives. Its FX
    graphs (keyed by their text, which names this process's groups) may hit
    an entry another state made with the same text: same code, same groups."""
    aot = run["outcomes"]["aot_autograd"]
    assert (aot["hit"], aot["miss"], aot["bypass"]) == (0, 1, 0), run["outcomes"]
    assert run["outcomes"]["fx_graph"]["bypass"] == 0, run["outcomes"]


@pytest.fixture(scope="module")
def flattened_ac(tmp_path_factory):
    """A cache dir holding the program compiled where ``a, c`` is flattened."""
    cache = tmp_path_factory.mktemp("inductor_cache")
    assert_all_miss(cube(cache, flatten=[["a", "c"]]))
    return cache


def test_a_process_that_flattened_other_dims_misses(flattened_ac):
    # Here the name of A's ``ac`` group is the group of ``a, b``.
    assert_traced_anew(cube(flattened_ac, flatten=[["a", "b"]]))


def test_a_process_that_flattened_nothing_misses(flattened_ac):
    assert_traced_anew(cube(flattened_ac))


def test_the_same_flattened_meshes_hit(flattened_ac):
    assert_all_hit(cube(flattened_ac, flatten=[["a", "c"]]))


def test_other_planner_switches_miss(flattened_ac):
    assert_traced_anew(cube(flattened_ac, flatten=[["a", "c"]],
                            planner={"_DISABLE_REDISTRIBUTE_TRANSFORM_OPTIMIZATION": True}))


def test_compile_on_one_rank_loads_the_flattened_mesh_op(tmp_path):
    """Under ``compile_on_one_rank`` the graph finds the flattened mesh at run
    time (``device_mesh::_get_flattened_submesh``), an op torch registers only
    while tracing: a process that loads the graph registers it too."""
    assert_all_miss(cube(tmp_path, flatten=[["a", "c"]], one_rank=True))
    # (The same rank: in a fake world the groups of a mesh dim are named per
    # subgroup, so another rank's dims have other names, and other keys.)
    assert_all_hit(cube(tmp_path, flatten=[["a", "c"]], one_rank=True))
    assert_traced_anew(cube(tmp_path, flatten=[["a", "b"]], one_rank=True))
