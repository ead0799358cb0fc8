"""Compile once per job, on real gloo ranks with inductor: under
``compile_on_one_rank`` one rank compiles each graph and the others load it
through the job's store; faults (a compiling rank that raises or dies, ranks
whose graphs differ, damaged artifacts, a slow or vanished store) end in a
local compile and the right result, never a hang.

Every rank has its own ``TORCHINDUCTOR_CACHE_DIR`` unless said (as on
separate hosts: the artifacts travel through the store, not the disk). The
programs are the TP MLP and a collective-free DTensor program (a world with
a dead rank can run it; a program that reads this rank's coordinate under
``compile_on_one_rank`` meets an inductor failure on 2.15 with stock torch
too). The protocol itself, faster and on every release:
``test_compile_once_protocol.py``.
"""

from __future__ import annotations

import pytest

from compile_once_programs import KILLED, rank_run, spawn_world

pytestmark = pytest.mark.slow

FX_PER_FRAME = 2  # the forward and backward FX graphs of one Dynamo graph


def _cache(run: dict, cache: str) -> tuple[int, int, int]:
    o = run["outcomes"][cache]
    return o["hit"], o["miss"], o["bypass"]


def _compiled(run: dict) -> bool:
    """This rank lowered the graph itself (its AOTAutograd lookup missed)."""
    return _cache(run, "aot_autograd")[1] == 1


@pytest.mark.release
def test_one_rank_compiles_and_the_other_loads_its_artifacts(tmp_path):
    """...and ``explain`` says on each rank where its graph came from."""
    runs = spawn_world(rank_run, 2, str(tmp_path), explain=True)
    assert all(run["same_as_eager"] for run in runs.values())
    compilers = [r for r, run in runs.items() if _compiled(run)]
    assert len(compilers) == 1, {r: run["outcomes"] for r, run in runs.items()}
    compiler, loader = runs[compilers[0]], runs[1 - compilers[0]]
    assert _cache(compiler, "fx_graph") == (0, FX_PER_FRAME, 0)
    assert compiler["stats"]["compiled_shared"] == 1 and compiler["stats"]["bytes_sent"] > 0
    # The other rank waited for it, loaded its bundle and hit every lookup.
    assert _cache(loader, "aot_autograd") == (1, 0, 0) and _cache(loader, "fx_graph") == (FX_PER_FRAME, 0, 0)
    assert loader["stats"]["loaded"] == 1
    assert loader["stats"]["bytes_loaded"] == compiler["stats"]["bytes_sent"]
    assert not compiler["warnings"] and not loader["warnings"]
    for run in runs.values():
        assert run["explained"]["compile_once"] == "on"
    aot = {r: next(o for o in run["explained"]["outcomes"] if o[0] == "aot_autograd") for r, run in runs.items()}
    assert aot[compilers[0]][2] == "miss" and aot[compilers[0]][3].startswith("compiled here, shared with the job (")
    assert aot[1 - compilers[0]][2] == "hit"
    assert aot[1 - compilers[0]][3].startswith(f"loaded from rank {compilers[0]} through the job's store (waited ")


def test_two_hosts_of_two_download_once_per_host(tmp_path):
    """4 ranks grouped as torchrun groups 2 nodes of 2 (``LOCAL_WORLD_SIZE=2``):
    one rank compiles; its neighbour reads what it left on their host; on the
    other host one rank downloads from the store and its neighbour reads
    that. The store serves the artifacts once (the other host's download),
    and ``explain`` says on each rank how its graph came."""
    runs = spawn_world(rank_run, 4, str(tmp_path), explain=True, local_world=2)
    assert all(run["same_as_eager"] for run in runs.values())
    compilers = [r for r, run in runs.items() if _compiled(run)]
    assert len(compilers) == 1, {r: run["outcomes"] for r, run in runs.items()}
    compiler = compilers[0]
    via = {r: next(v for v in ("store", "host", "fleet") if run["stats"].get(f"via_{v}"))
           for r, run in runs.items() if r != compiler}
    assert via[compiler ^ 1] == "host"
    assert sorted(v for r, v in via.items() if r // 2 != compiler // 2) == ["host", "store"]
    sent = runs[compiler]["stats"]["bytes_sent"]
    assert sum(run["stats"].get("bytes_via_store", 0) for run in runs.values()) == sent
    words = {"store": "through the job's store", "host": "through this host's cache"}
    for r, v in via.items():
        assert not runs[r]["warnings"]
        [aot] = [o for o in runs[r]["explained"]["outcomes"] if o[0] == "aot_autograd"]
        assert aot[2] == "hit" and aot[3].startswith(f"loaded from rank {compiler} {words[v]}"), aot


@pytest.fixture(scope="module")
def precompiled_job(tmp_path_factory):
    """A job under torch's precompile and compile once: (its directory, the
    runs of its 2 ranks); each rank saves Dynamo's entries."""
    root = tmp_path_factory.mktemp("precompiled_job")
    return root, spawn_world(rank_run, 2, str(root), explain=True, precompile=True, save=True)


@pytest.mark.release
def test_under_precompile_one_rank_traces_the_frame_and_the_other_runs_it_untraced(precompiled_job):
    """With torch's precompile on, compile once ships Dynamo's entry of the
    frame: one rank traces it, the other runs it without tracing it or
    looking anything up in the compile caches, and ``explain`` says on each
    rank where the frame came from."""
    _, runs = precompiled_job
    assert all(run["same_as_eager"] for run in runs.values())
    tracers = [r for r, run in runs.items() if run["traced"]]
    assert len(tracers) == 1, {r: (run["traced"], run["stats"]) for r, run in runs.items()}
    tracer, loader = runs[tracers[0]], runs[1 - tracers[0]]
    assert tracer["traced"] == 1 and tracer["stats"]["frames_shipped"] == 1
    assert loader["traced"] == 0 and loader["stats"]["frames_loaded"] == 1
    assert _cache(loader, "aot_autograd") == (0, 0, 0) and _cache(loader, "fx_graph") == (0, 0, 0)
    assert not tracer["warnings"] and not loader["warnings"]
    [(function, origin, _)] = loader["explained"]["frames"]
    assert (function, origin) == ("forward", f"loaded from rank {tracers[0]}")
    [(function, origin, why)] = tracer["explained"]["frames"]
    assert (function, origin) == ("forward", "traced here") and "sent to the others" in why, why


def test_a_job_under_precompile_restarts_with_nothing_traced(precompiled_job):
    """What each rank of that job saved restarts it with nothing traced, the
    rank that loaded the frame from another included."""
    root, _ = precompiled_job
    restarted = spawn_world(rank_run, 2, str(root), explain=True, precompile=True)
    for run in restarted.values():
        assert run["same_as_eager"] and run["traced"] == 0 and "frames_loaded" not in run["stats"]
        assert [origin for _, origin, _ in run["explained"]["frames"]] == ["loaded from Dynamo's cache"]


def test_under_precompile_a_frame_whose_guards_differ_per_rank_is_traced_on_each(tmp_path):
    """The same code with another closure value on rank 1: the variant rank 0
    sent fails its guards there, so rank 1 traces its own, and both compute
    right."""
    runs = spawn_world(rank_run, 2, str(tmp_path), "local_shard", programs={"1": "local_shard_x3"},
                       explain=True, precompile=True)
    assert all(run["same_as_eager"] and run["traced"] == 1 for run in runs.values())
    tracers = [r for r, run in runs.items() if run["stats"].get("frames_shipped")]
    assert len(tracers) == 1, {r: run["stats"] for r, run in runs.items()}
    other = runs[1 - tracers[0]]
    assert "frames_loaded" not in other["stats"]
    [(_, origin, why)] = other["explained"]["frames"]
    assert origin == f"loaded from rank {tracers[0]}, then traced here", origin
    assert why == f"the variants rank {tracers[0]} sent do not pass their guards here"


def test_without_shared_keys_every_rank_compiles_and_none_waits(tmp_path):
    """Without compile_on_one_rank each key holds its rank: nothing to share."""
    runs = spawn_world(rank_run, 2, str(tmp_path), one_rank=False)
    for run in runs.values():
        assert run["same_as_eager"] and _compiled(run)
        assert run["inactive"] == "keys hold the rank: set compile_on_one_rank to share graphs across ranks"
        assert run["stats"].get("waited_s", 0) == 0 and "compiled_shared" not in run["stats"]


def test_ranks_whose_graphs_differ_each_compile_their_own(tmp_path):
    """Different graphs, different keys: each rank claims and compiles its own
    and never waits on a key nobody compiles."""
    runs = spawn_world(rank_run, 2, str(tmp_path), "local_shard", programs={"1": "local_shard_x3"})
    for run in runs.values():
        assert run["same_as_eager"] and _compiled(run)
        assert run["stats"]["compiled_shared"] == 1
        assert run["stats"].get("waited_s", 0) < 1


def test_a_rank_killed_mid_compile_leaves_the_others_to_compile(tmp_path):
    """The compiling rank dies in its compile: the other sees its beat stop,
    compiles itself and finishes right."""
    runs = spawn_world(rank_run, 2, str(tmp_path), "local_shard", strike="exit", stale_s=3.0)
    dead = [r for r, run in runs.items() if run == ("exit", KILLED)]
    assert len(dead) == 1, runs
    survivor = runs[1 - dead[0]]
    assert survivor["same_as_eager"] and _compiled(survivor)
    assert 3.0 <= survivor["stats"]["waited_s"] < 60
    assert survivor["stats"]["compiled_here"] >= 1
    assert any("stopped beating for 3 s" in w for w in survivor["warnings"]), survivor["warnings"]


def test_a_rank_whose_compile_raises_frees_the_others_at_once(tmp_path):
    """The compiling rank's compile raises: it abandons its claim, the other
    rank compiles at once (no stale wait), and the failed rank's next call
    compiles too; both compute right (a program without collectives: the
    failed rank runs it again from the start)."""
    runs = spawn_world(rank_run, 2, str(tmp_path), "local_shard", strike="raise")
    failed = [r for r, run in runs.items() if run["raised"]]
    assert len(failed) == 1, {r: run["raised"] for r, run in runs.items()}
    assert "the compile failed (injected)" in runs[failed[0]]["raised"]
    other = runs[1 - failed[0]]
    assert other["raised"] is None and _compiled(other)
    assert other["stats"]["waited_s"] < 25  # the abandon, not the 30 s stale limit, ended the wait
    assert any("gave up compiling it: its compile raised" in w for w in other["warnings"]), other["warnings"]
    assert all(run["same_as_eager"] for run in runs.values())


@pytest.mark.parametrize("damage", ["corrupt", "truncate"])
def test_damaged_artifacts_are_refused_with_one_warning(tmp_path, damage):
    """The waiting rank refuses what it received, says so once, compiles the
    graph itself and computes right."""
    runs = spawn_world(rank_run, 2, str(tmp_path), "local_shard", store=damage)
    refusals = {r: [w for w in run["warnings"] if "refused the compiled artifacts" in w] for r, run in runs.items()}
    loader = runs[next(r for r, found in refusals.items() if found)]
    assert sorted(len(found) for found in refusals.values()) == [0, 1], refusals
    assert loader["same_as_eager"] and _compiled(loader) and "loaded" not in loader["stats"]
    expected = "(corrupt)" if damage == "corrupt" else "(truncated)"
    assert expected in max(refusals.values())[0]


def test_a_slow_store_still_shares(tmp_path):
    runs = spawn_world(rank_run, 2, str(tmp_path), "local_shard", store="slow")
    assert all(run["same_as_eager"] for run in runs.values())
    assert sorted(run["stats"].get("loaded", 0) for run in runs.values()) == [0, 1]


def test_a_store_that_is_gone_is_said_once_and_every_rank_compiles(tmp_path):
    runs = spawn_world(rank_run, 2, str(tmp_path), "local_shard", store="gone")
    for run in runs.values():
        assert run["same_as_eager"] and _compiled(run)
        assert run["inactive"].startswith("the job's store failed")
        assert len([w for w in run["warnings"] if "compile once is off for this process" in w]) == 1


def test_ranks_of_one_host_share_the_cache_dir_too(tmp_path):
    """One cache dir for both ranks (one host): still one compile."""
    runs = spawn_world(rank_run, 2, str(tmp_path), "local_shard", shared_dir=True)
    assert sorted(_compiled(run) for run in runs.values()) == [False, True]
    assert all(run["same_as_eager"] for run in runs.values())
