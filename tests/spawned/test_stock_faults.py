"""Stock torch's faults that the README and docs/guards.md state, each run on
stock torch (the plugin uninstalled) and asserted: a test here fails when
stock stops doing what the docs say it does, and the docs must then change.
The plugin's side of each is tested beside the feature
(``tests/spawned/test_precompile.py``).

Under torch's precompile (``TORCH_CACHING_PRECOMPILE=1``):

- the live process drops its identity guards: a function reading a group's
  size answers the first group's size for another group;
- a frame reading a module constant, saved with one value and loaded where
  the module holds another, runs with the saved process's answer;
- a TP MLP's frame, saved and then loaded in a process whose mesh is over
  other groups, is loaded and run untraced (its graph names the saving
  process's groups);
- a frame reading a config entry (``compile_on_one_rank``) is saved with a
  guard the next process cannot rebuild: its ``torch.compile`` raises;
- of two functions with the same qualified name and first line, the next
  process runs the other's saved entry (``NameError``);
- a loaded frame whose guards fail crashes stock's trace of it (2.11-2.14).

And, on a release where it differs: ``type(Shard(0)) is Shard`` is ``False``
in stock 2.11 and 2.12's compiled code.
"""

from __future__ import annotations

import os
import subprocess
import sys

import pytest
import torch
import torch.distributed as dist

import dynamo_dist
from dynamo_dist.testing import fake_world

from test_compile_caches import ROOT, run_fresh
from test_precompile import _precompile_run

# Marked ``release`` where stock differs between releases (CI runs those on
# every release); the rest run with the whole suite on the newest.
RELEASE = tuple(int(p) for p in torch.__version__.split("+")[0].split(".")[:2])


@pytest.fixture
def stock_precompile(tmp_path, monkeypatch):
    monkeypatch.setenv("TORCHINDUCTOR_CACHE_DIR", str(tmp_path))
    was = dynamo_dist.is_installed()
    dynamo_dist.uninstall()
    with torch._dynamo.config.patch(caching_precompile=True):
        torch._dynamo.reset()
        yield
    torch._dynamo.reset()
    if was:
        dynamo_dist.install()


def test_stock_answers_the_first_groups_size_for_another_group(stock_precompile):
    """docs/guards.md: "stock answers `pg.size()` for the first group it saw
    (8, then 8 again for a 2-rank group)"."""
    with fake_world(8, rank=0):
        pair = dist.new_group([0, 1])

        def f(x, group):
            return x * group.size()

        compiled = torch.compile(f, backend="eager")
        x = torch.ones(2)
        assert compiled(x, dist.group.WORLD).tolist() == [8.0, 8.0]
        assert f(x, pair).tolist() == [2.0, 2.0]
        assert compiled(x, pair).tolist() == [8.0, 8.0]  # stale: the first group's size


@pytest.mark.slow
def test_stock_runs_a_loaded_frame_with_the_saved_module_value(tmp_path):
    """docs/guards.md: a frame returning a module constant's product, saved
    with one value and loaded with another, "runs the loaded frame with the
    saved process's answer" (torch saves the module by reference)."""
    first = _precompile_run(tmp_path, only=["module"], plugin=False)
    assert first["module"] == {"traced": 1, "same_as_eager": True}, first
    loaded = _precompile_run(tmp_path, only=["module"], plugin=False, scale=3)
    assert loaded["module"] == {"traced": 0, "same_as_eager": False}, loaded


@pytest.mark.release
@pytest.mark.slow
def test_stock_loads_a_frame_saved_for_other_groups(tmp_path):
    """docs/guards.md: "Stock, on the same TP MLP restarted with its mesh over
    other groups ... loads the frame and runs it untraced"."""
    env = {"TORCH_CACHING_PRECOMPILE": "1"}
    first = run_fresh(tmp_path, env=env, program="tp_mlp", rank=3, plugin=False,
                      save_artifacts=str(tmp_path / "artifacts"))
    assert first["traced"] == 1
    other = run_fresh(tmp_path, env=env, program="tp_mlp", rank=3, plugin=False, extra_groups=1)
    # 2.11's in-tree trackers guard the mesh's groups: it traces the frame again.
    assert other["traced"] == (1 if RELEASE <= (2, 11) else 0), other["stderr"][-3000:]


def _loaded_frames_process(cache_dir, mode: str) -> dict:
    """The frames of ``devtools.bench.guard_cost_loaded`` (a module constant,
    the config entry ``compile_on_one_rank``, a DTensor and its mesh) compiled
    by stock torch in a fresh process under the flag: ``save`` saves Dynamo's
    entries, ``run`` loads them. Per frame: frames traced, or the error."""
    import json

    env = {**os.environ, "TORCHINDUCTOR_CACHE_DIR": str(cache_dir), "TORCH_CACHING_PRECOMPILE": "1",
           "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")])}
    done = subprocess.run([sys.executable, "-m", "devtools.bench.guard_cost_loaded", "child", "stock loaded", mode,
                           "100", "1"], env=env, capture_output=True, text=True, timeout=600, cwd=ROOT)
    assert done.returncode == 0, done.stderr[-4000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


@pytest.mark.release
@pytest.mark.slow
@pytest.mark.skipif(not hasattr(torch.compiler.config, "compile_on_one_rank"),
                    reason="the config entry moved to torch.compiler.config in 2.14; 2.13 stock loads the frame")
def test_stock_cannot_rebuild_its_saved_config_override_guard(tmp_path):
    """docs/guards.md: a frame reading ``compile_on_one_rank`` gets torch's
    guard on the entry's override, "which stock saves by value and cannot
    rebuild (... the next process's `torch.compile` raises `AssertionError:
    Unexpected type <class 'object'>`)"; the frames beside it load."""
    first = _loaded_frames_process(tmp_path, "save")
    assert all(frame.get("traced") == 1 for frame in first.values()), first
    loaded = _loaded_frames_process(tmp_path, "run")
    assert loaded["config entry"] == {"error": "AssertionError: Unexpected type <class 'object'>"}, loaded
    assert loaded["module constant"]["traced"] == 0 and loaded["DTensor + mesh"]["traced"] == 0, loaded


@pytest.mark.release
def test_stock_identity_of_a_placement_class():
    """docs/guards.md: "on 2.11 and 2.12 stock answers `type(Shard(0)) is
    Shard` with `False`" (2.13 and later answer as eager)."""
    from torch.distributed.tensor import Shard

    was = dynamo_dist.is_installed()
    dynamo_dist.uninstall()
    try:
        with fake_world(8, rank=0):
            def f(x):
                return x + (type(Shard(0)) is Shard)

            got = torch.compile(f, backend="eager")(torch.zeros(1)).item()
    finally:
        torch._dynamo.reset()
        if was:
            dynamo_dist.install()
    assert got == (0.0 if RELEASE <= (2, 12) else 1.0)


@pytest.mark.slow
def test_stock_runs_another_functions_saved_entry_with_the_same_key(tmp_path):
    """docs/guards.md: torch keys Dynamo's cache by qualified name and first
    line; of two such functions in two modules the next process loads the
    entry saved last for the other too: "Stock 2.15 then raises `NameError`
    on the call"."""
    _precompile_run(tmp_path, twins=True, plugin=False)
    env = {**os.environ, "TORCHINDUCTOR_CACHE_DIR": str(tmp_path), "TORCH_CACHING_PRECOMPILE": "1",
           "PYTHONPATH": os.pathsep.join([str(ROOT / "tests"), str(ROOT), os.environ.get("PYTHONPATH", "")])}
    done = subprocess.run([sys.executable, str(ROOT / "tests" / "precompile_programs.py"),
                           '{"twins": true, "plugin": false}'], env=env, capture_output=True, text=True, timeout=600)
    assert done.returncode != 0 and "NameError" in done.stderr, (done.stdout, done.stderr[-3000:])


FAILING_GUARD = '''
import json, sys
import torch
from torch._dynamo.utils import counters


def f(x):
    return x * len(x) + abs(x)


n = int(sys.argv[1])
try:
    out = torch.compile(f, backend="inductor")(torch.ones(n))
    print(json.dumps({"traced": counters["stats"]["unique_graphs"], "ok": out.tolist() == f(torch.ones(n)).tolist()}))
except Exception as e:
    print(json.dumps({"error": f"{type(e).__name__}: {str(e).splitlines()[0]}"}))
torch.compiler.save_cache_artifacts()
'''


@pytest.mark.release
@pytest.mark.slow
def test_stock_crashes_tracing_a_loaded_frame_whose_guards_fail(tmp_path):
    """docs/guards.md: "On 2.11-2.14 a loaded frame whose guards fail crashes
    stock's trace of it (an `AssertionError`: on 2.13 and 2.14 `Name
    '__builtins_dict___0' already exists in scope`)"; 2.15 traces it again.
    A frame saved for a 2-element tensor, loaded for a 3-element one."""
    import json

    program = tmp_path / "failing_guard.py"
    program.write_text(FAILING_GUARD)
    env = {**os.environ, "TORCHINDUCTOR_CACHE_DIR": str(tmp_path / "cache"), "TORCH_CACHING_PRECOMPILE": "1"}

    def run(n: int) -> dict:
        done = subprocess.run([sys.executable, str(program), str(n)], env=env, capture_output=True, text=True,
                              timeout=600)
        return json.loads(done.stdout.strip().splitlines()[-1])

    assert run(2) == {"traced": 1, "ok": True}
    loaded = run(3)
    if (2, 13) <= RELEASE <= (2, 14):
        assert loaded == {"error": "AssertionError: Name '__builtins_dict___0' already exists in scope"}, loaded
    elif RELEASE <= (2, 12):
        assert loaded.get("error", "").startswith("AssertionError"), loaded
    else:
        assert loaded == {"traced": 1, "ok": True}, loaded
