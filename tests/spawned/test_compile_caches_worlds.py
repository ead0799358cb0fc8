"""Warm start across worlds and processes: every gloo rank hits in the next
world, ``compile_on_one_rank`` serves one entry to every rank, cache
artifacts round-trip, and stock (what the plugin fixes) does not hit.

Slow (inductor compiles in fresh processes and 2-rank gloo worlds); the
fake-world core is ``test_compile_caches.py``.
"""

from __future__ import annotations

import functools

from dynamo_dist.testing import run_in_world

import cache_programs
from test_compile_caches import assert_all_hit, assert_all_miss, assert_other_groups_miss, run_fresh
import pytest

pytestmark = pytest.mark.slow


def test_stock_bypasses_or_misses(tmp_path):
    """Without the plugin the second process does not hit (what the plugin fixes)."""
    run_fresh(tmp_path, program="tp_mlp", rank=3, plugin=False)
    warm = run_fresh(tmp_path, program="tp_mlp", rank=3, plugin=False)
    assert warm["outcomes"]["aot_autograd"]["hit"] == 0


def test_save_and_load_cache_artifacts(tmp_path):
    """``torch.compiler.save_cache_artifacts()`` after a compile, loaded into a
    fresh process with an empty cache dir: every graph hits, same values."""
    artifacts = tmp_path / "artifacts.bin"
    cold = run_fresh(tmp_path / "first", program="reshard", save_artifacts=str(artifacts))
    assert artifacts.stat().st_size > 0
    warm = run_fresh(tmp_path / "second", program="reshard", load_artifacts=str(artifacts))
    assert_all_hit(warm)
    assert warm["out"] == cold["out"]


def test_every_gloo_rank_hits_in_the_next_world(tmp_path, monkeypatch):
    """Every rank hits in the next world; a world whose mesh is the same
    layout over another group (its name is in the collectives) does not, and
    computes what eager does."""
    monkeypatch.setenv("TORCHINDUCTOR_CACHE_DIR", str(tmp_path))
    for run in run_in_world(cache_programs.gloo_rank_run, 2, "tp_mlp"):
        assert_all_miss(run)
    for run in run_in_world(cache_programs.gloo_rank_run, 2, "tp_mlp"):
        assert_all_hit(run)
        assert run["same_as_eager"]
    for run in run_in_world(functools.partial(cache_programs.gloo_rank_run, own_group=True), 2, "tp_mlp"):
        assert_other_groups_miss(run)
        assert run["same_as_eager"]


def test_compile_on_one_rank_shares_one_entry(tmp_path, monkeypatch):
    """Under compile_on_one_rank the graphs are the same on every rank: rank 0
    compiles, rank 1 (started once rank 0's entries are on disk) hits them."""
    monkeypatch.setenv("TORCHINDUCTOR_CACHE_DIR", str(tmp_path))
    rank0, rank1 = run_in_world(cache_programs.gloo_rank_run, 2, "tp_mlp", True, True)
    assert_all_miss(rank0)
    assert_all_hit(rank1)
    assert len(list((tmp_path / "aotautograd").iterdir())) == 1
