"""The spmd_types TP step under torch's precompile (``TORCH_CACHING_PRECOMPILE=1``)
on a gloo world of 2 whose ranks share one cache dir (torch's default on a
host): a first world compiles it with the checker off and under
``typecheck(local=False)`` and saves; the next world loads both variants
(traces nothing) and gives eager's output, gradients and types; a world
whose current mesh is over another group, or whose checker is in another
mode, traces the step again rather than run a saved variant (every frame
that reads them; values and types still eager's).

Cost: 4 worlds of 2 ranks (the first compiles with inductor), about 60-80 s on
spmd_types 0.2.3."""

from __future__ import annotations

import functools
import shutil

import pytest
import torch

import spmd_programs
from dynamo_dist.testing import run_in_world

pytest.importorskip("spmd_types", reason="spmd_types is in the `clients` extra")

pytestmark = pytest.mark.slow

MODES = ["off", "global"]


def _world(monkeypatch, cache, modes, **options) -> list[dict]:
    monkeypatch.setenv("TORCHINDUCTOR_CACHE_DIR", str(cache))
    monkeypatch.setenv("TORCH_CACHING_PRECOMPILE", "1")
    return run_in_world(functools.partial(spmd_programs.rank_restart, **options), 2, modes, timeout=600)


def _same_as_eager(ranks: list[dict]) -> None:
    for rank in ranks:
        for mode, run in rank.items():
            eager, compiled = run["eager"], run["compiled"]
            torch.testing.assert_close(torch.tensor(compiled["out"]), torch.tensor(eager["out"]))  # float32 values
            for c, e in zip(compiled["grads"], eager["grads"]):
                torch.testing.assert_close(torch.tensor(c), torch.tensor(e))
            assert compiled["types"] == eager["types"], mode


@pytest.fixture(scope="module")
def saved(tmp_path_factory):
    cache = tmp_path_factory.mktemp("precompile")
    with pytest.MonkeyPatch.context() as monkeypatch:
        first = _world(monkeypatch, cache, MODES)
    _same_as_eager(first)
    assert all(run["compiled"]["traced"] >= 1 for rank in first for run in rank.values()), first
    return cache, _traced(first)


def _traced(ranks: list[dict]) -> list[int]:
    """Graphs traced for the compiled step, per rank and mode."""
    return [run["compiled"]["traced"] for rank in ranks for run in rank.values()]


def test_a_restart_loads_the_step_and_traces_nothing(saved, monkeypatch, tmp_path):
    """Both variants (checker off, checker on) load in the next world."""
    cache = tmp_path / "cache"
    shutil.copytree(saved[0], cache)
    second = _world(monkeypatch, cache, MODES)
    _same_as_eager(second)
    traced = dict(zip(MODES * 2, _traced(second)))
    assert traced["global"] == 0, second
    assert _traced(second) == [0] * 4, second


def test_a_restart_that_differs_traces_the_step_again(saved, monkeypatch, tmp_path):
    """The current mesh over another group (the same ranks, another name)
    fails the saved state guard of every variant; the checker in its local
    mode, which no saved variant was traced under, fails their switches:
    each is traced again and gives eager's answer."""
    cache = tmp_path / "cache"
    shutil.copytree(saved[0], cache)
    other = _world(monkeypatch, cache, MODES, other_group=True)
    _same_as_eager(other)
    assert all(_traced(other)), other
    local = _world(monkeypatch, cache, ["local"])
    _same_as_eager(local)
    assert all(_traced(local)), local
