"""Graphs that hold a process group as an object, in inductor's FX-graph
cache: under ``compile_on_one_rank`` torch passes the group itself to the
functional collectives, so the spmd_types TP step's forward and backward hold
its mesh axis's group as a constant (torch 2.12+). On a gloo world of 2 whose
ranks share one cache dir (torch's default on a host): stock cannot pickle
the group, saves no graph and fails in the backward (AOTAutograd deep-copies
the graph); the plugin saves both by the group's name,
the next world loads both and runs them on its own group (eager's values),
and a world whose mesh is over another group (another name, the same ranks)
misses rather than run a graph saved for the first.

Cost: 3 worlds of 2 ranks compiling with inductor, about 40-60 s."""

from __future__ import annotations

import functools
import shutil

import pytest
import torch

import spmd_programs
from dynamo_dist import _compat as C
from dynamo_dist.testing import run_in_world

pytest.importorskip("spmd_types", reason="spmd_types is in the `clients` extra")

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(C.aot.GRAPH_HELD_GROUP_CLASS is None,
                       reason="a graph holds a process group as an object only on torch 2.12+"),
]


def _world(monkeypatch, cache, sides, **options) -> list[dict]:
    monkeypatch.setenv("TORCHINDUCTOR_CACHE_DIR", str(cache))
    monkeypatch.setenv("TORCHINDUCTOR_FX_GRAPH_CACHE", "1")
    return run_in_world(functools.partial(spmd_programs.rank_group_constants, **options), 2, sides, timeout=600)


def _same_as_eager(ranks: list[dict], side: str = "plugin") -> None:
    for rank in ranks:
        for run in (rank[side],):
            eager, compiled = run["eager"], run["compiled"]
            # float32 values carried as Python floats: compared as float32 (inductor's reductions
            # may round differently from eager's, by the CPU's vector width)
            torch.testing.assert_close(torch.tensor(compiled["out"]), torch.tensor(eager["out"]))
            for c, e in zip(compiled["grads"], eager["grads"]):
                torch.testing.assert_close(torch.tensor(c), torch.tensor(e))


@pytest.fixture(scope="module")
def saved(tmp_path_factory):
    cache = tmp_path_factory.mktemp("group_constants")
    with pytest.MonkeyPatch.context() as monkeypatch:
        first = _world(monkeypatch, cache, ["stock", "plugin"])
    _same_as_eager(first)
    return cache, first


def test_stock_cannot_save_a_graph_holding_a_group(saved):
    for rank in saved[1]:
        stock = rank["stock"]["compiled"]
        assert stock["hit"] == 0 and stock["unsaved"] >= 1, rank
        assert "cannot pickle" in stock["error"] and "ProcessGroup" in stock["error"], rank


def test_the_plugin_saves_it_and_the_next_world_loads_it_onto_its_own_group(saved, monkeypatch, tmp_path):
    """In the first world the ranks share the cache dir: a rank may already
    load what the other saved (the graphs are the same on every rank)."""
    graphs = _graphs(saved[1])
    for rank in saved[1]:
        assert rank["plugin"]["compiled"]["unsaved"] == 0, rank
    cache = tmp_path / "cache"
    shutil.copytree(saved[0], cache)
    second = _world(monkeypatch, cache, ["plugin"])
    _same_as_eager(second)
    for rank in second:
        compiled = rank["plugin"]["compiled"]
        assert compiled["miss"] == 0 and compiled["hit"] == graphs, rank


def _graphs(ranks: list[dict]) -> int:
    """The graphs the plugin's compiled step compiled or loaded (the same on every rank)."""
    counts = {rank["plugin"]["compiled"]["hit"] + rank["plugin"]["compiled"]["miss"] for rank in ranks}
    assert len(counts) == 1 and min(counts) >= 2, ranks  # a forward and a backward, at least
    return counts.pop()


def test_a_world_whose_group_has_another_name_misses(saved, monkeypatch, tmp_path):
    """The saved graphs name WORLD's group; this world's mesh is over a group
    of the same ranks made after it: every group-holding graph compiles anew
    (once in the world: a rank may load what its peer saved)."""
    cache = tmp_path / "cache"
    shutil.copytree(saved[0], cache)
    other = _world(monkeypatch, cache, ["plugin"], other_group=True)
    _same_as_eager(other)
    assert _graphs(other) == _graphs(saved[1]), other
    assert sum(rank["plugin"]["compiled"]["miss"] for rank in other) >= _graphs(saved[1]), other
    assert all(rank["plugin"]["compiled"]["unsaved"] == 0 for rank in other), other
