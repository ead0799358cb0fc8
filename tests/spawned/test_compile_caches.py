"""Warm start in a fake world: a DTensor program compiled with the plugin
hits inductor's FX graph cache and the AOTAutograd cache in the next
process; never for a program whose mesh groups or rank coordinate differ.

Every compile runs in a fresh process (``cache_programs.py``) with its own
``TORCHINDUCTOR_CACHE_DIR``; inductor compiles, so these are slow (~10 s a
process on 2 cores). Gloo worlds, ``compile_on_one_rank``, cache artifacts:
``test_compile_caches_worlds.py``.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest


ROOT = Path(__file__).resolve().parents[2]
FORWARD_AND_BACKWARD = 2  # FX graphs per compiled frame (one AOTAutograd entry)


def run_fresh(cache_dir: Path, env: dict | None = None, **options) -> dict:
    """``cache_programs.fake_world_run(**options)`` in a new process (with
    ``env`` added to its environment); what it printed to stderr is the
    result's ``stderr``."""
    env = {**os.environ, "TORCHINDUCTOR_CACHE_DIR": str(cache_dir), **(env or {}),
           "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")])}
    done = subprocess.run([sys.executable, str(ROOT / "tests" / "cache_programs.py"), json.dumps(options)],
                          env=env, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-4000:]
    return {**json.loads(done.stdout.strip().splitlines()[-1]), "stderr": done.stderr}


def assert_all_hit(run: dict) -> None:
    fx, aot = run["outcomes"]["fx_graph"], run["outcomes"]["aot_autograd"]
    assert (fx["hit"], fx["miss"], fx["bypass"]) == (FORWARD_AND_BACKWARD, 0, 0), run["outcomes"]
    assert (aot["hit"], aot["miss"], aot["bypass"]) == (1, 0, 0), run["outcomes"]
    assert run["same_as_eager"] is not False  # None: a fake world's collectives, values undefined


def assert_all_miss(run: dict) -> None:
    """Compiled anew: no entry served (and none refused: a bypass would hide
    an unsound key as well as a sound one)."""
    fx, aot = run["outcomes"]["fx_graph"], run["outcomes"]["aot_autograd"]
    assert (aot["hit"], aot["miss"], aot["bypass"]) == (0, 1, 0), run["outcomes"]
    assert fx["hit"] == 0 and fx["bypass"] == 0, run["outcomes"]
    assert run["same_as_eager"] is not False


def assert_other_groups_miss(run: dict) -> None:
    """A mesh of the same layout over other groups: the AOTAutograd entry
    misses. The forward holds the all-reduce, naming its group: it cannot hit.
    The backward (no collective here) may, soundly: on 2.11 its code and
    inputs do not mention the mesh (2.12+ pass the mesh in, so it misses there)."""
    fx, aot = run["outcomes"]["fx_graph"], run["outcomes"]["aot_autograd"]
    assert (aot["hit"], aot["miss"], aot["bypass"]) == (0, 1, 0), run["outcomes"]
    assert fx["miss"] >= 1 and fx["bypass"] == 0, run["outcomes"]


@pytest.fixture(scope="module")
def warm_tp_mlp(tmp_path_factory) -> tuple[Path, dict]:
    """A cache dir holding the TP MLP compiled on rank 3 (its cold run)."""
    cache = tmp_path_factory.mktemp("inductor_cache")
    return cache, run_fresh(cache, program="tp_mlp", rank=3)


@pytest.mark.slow
@pytest.mark.release
def test_cold_run_misses_and_stores(warm_tp_mlp):
    assert_all_miss(warm_tp_mlp[1])


@pytest.mark.slow
@pytest.mark.release
def test_second_process_hits_every_graph(warm_tp_mlp):
    cache, _ = warm_tp_mlp
    assert_all_hit(run_fresh(cache, program="tp_mlp", rank=3))


@pytest.mark.slow
@pytest.mark.release
def test_mesh_over_other_groups_misses(warm_tp_mlp):
    """The same layout over other process groups (other group names in its
    collectives): a new compile, never the stored graph."""
    cache, _ = warm_tp_mlp
    assert_other_groups_miss(run_fresh(cache, program="tp_mlp", rank=3, extra_groups=1))


@pytest.mark.slow
def test_other_coordinate_misses_and_stays_right(tmp_path):
    """A graph that keeps this rank's rows: rank 2's process must not reuse
    rank 3's entry (it would return rank 3's rows); rank 3 again hits."""
    rank3 = run_fresh(tmp_path, program="reshard", rank=3)
    assert_all_miss(rank3)
    rank2 = run_fresh(tmp_path, program="reshard", rank=2)
    assert_all_miss(rank2)
    assert rank2["out"] != rank3["out"]
    assert_all_hit(run_fresh(tmp_path, program="reshard", rank=3))


@pytest.mark.slow
def test_other_input_placement_misses_and_stays_right(tmp_path):
    """The same code on a DTensor input with the same local tensor but another
    placement (Replicate: this rank's rows are 2 of the 8; Shard(0): all 8 are
    this rank's): a new compile, never the stored graph; the first hits its own."""
    replicate = run_fresh(tmp_path, program="replicate_input", rank=3)
    assert_all_miss(replicate)
    shard = run_fresh(tmp_path, program="shard0_input", rank=3)
    assert_all_miss(shard)
    assert len(shard["out"]) == 8 and len(replicate["out"]) == 2
    again = run_fresh(tmp_path, program="replicate_input", rank=3)
    assert_all_hit(again)
    assert again["out"] == replicate["out"]
