"""torch's precompile with the plugin installed: ``caching_precompile``
(``TORCH_CACHING_PRECOMPILE=1``) and ``aot_compile``.

Under ``caching_precompile`` torch drops every ``ID_MATCH`` from the live
guards: the plugin's identity guards are its own checks, which stay. Where
torch saves a frame's guards, each plugin guard is saved as a picklable
description of what it checks (a group's name, ranks and backend; a mesh's
fingerprint; a spec's placements) and rebuilt against the loading process's
own objects: a restart loads the frame instead of tracing it, and a process
whose groups, mesh, world or plugin version differ traces it again. A guard
with no saved form declines the frame's package.
"""

from __future__ import annotations

import contextvars
import functools
import json
import os
import shutil
import pickle
import subprocess
import sys

import pytest
import torch
import torch.distributed as dist

import dynamo_dist
from dynamo_dist.testing import fake_world, make_mesh, run_in_world

import precompile_programs
from test_compile_caches import ROOT, run_fresh



@pytest.fixture
def precompile_caching(tmp_path, monkeypatch):
    """``caching_precompile`` on, its entries in a fresh cache dir."""
    monkeypatch.setenv("TORCHINDUCTOR_CACHE_DIR", str(tmp_path))
    with dynamo_dist.enabled(), torch._dynamo.config.patch(caching_precompile=True):
        torch._dynamo.reset()
        yield
    torch._dynamo.reset()


@pytest.mark.release
def test_a_group_guard_stays_live_under_caching_precompile(precompile_caching):
    """torch drops ID_MATCH from the live guards under the flag (stock's
    answer is stale: 8 twice); the plugin's group guard is its own check."""
    with fake_world(8, rank=0):
        pair = dist.new_group([0, 1])

        def f(x, group):
            return x * group.size()

        compiled = torch.compile(f, backend="eager")
        x = torch.ones(2)
        assert compiled(x, dist.group.WORLD).tolist() == [8.0, 8.0]
        assert compiled(x, pair).tolist() == [2.0, 2.0]
        assert compiled(x, dist.group.WORLD).tolist() == [8.0, 8.0]


@pytest.mark.release
def test_the_default_group_guard_stays_live_under_caching_precompile(precompile_caching):
    """``dist.get_world_size()`` without a group is guarded on WORLD's
    identity: a world made again recompiles."""

    def f(x):
        return x * dist.get_world_size()

    compiled = torch.compile(f, backend="eager")
    with fake_world(8, rank=0):
        assert compiled(torch.ones(1)).item() == 8.0
    with fake_world(4, rank=0):
        assert compiled(torch.ones(1)).item() == 4.0


@pytest.mark.release
def test_a_mesh_guard_stays_live_under_caching_precompile(precompile_caching):
    with fake_world(8, rank=0):
        mesh = make_mesh((2, 4), ("dp", "tp"))

        def f(x, m):
            return x * m.size(0) + m.get_local_rank(0)

        compiled = torch.compile(f, backend="eager", fullgraph=True)
        x = torch.ones(1)
        assert compiled(x, mesh["dp"]).item() == 2.0
        assert compiled(x, mesh["tp"]).item() == 4.0


@pytest.mark.release
def test_a_guard_without_a_saved_form_declines_the_package(precompile_caching, monkeypatch):
    """A group c10d does not know (no name to find it by in another process)
    has no saved form: the frame is not packaged, with the reason (torch's
    ``PackageError`` under ``strict_precompile``), and runs right."""
    from dynamo_dist._compat import distributed as distributed_compat

    monkeypatch.setattr(distributed_compat, "group_identity", lambda group: None)
    with fake_world(8, rank=0):
        pair = dist.new_group([0, 1])

        def f(x, group):
            return x * group.size()

        with torch._dynamo.config.patch(strict_precompile=True), pytest.raises(Exception) as refused:
            torch.compile(f, backend="eager")(torch.ones(2), pair)
        assert "dynamo_dist: this frame's guards on L['group']" in str(refused.value)
        torch._dynamo.reset()
        assert torch.compile(f, backend="eager")(torch.ones(2), pair).tolist() == [2.0, 2.0]


@pytest.mark.release
@pytest.mark.skipif(not hasattr(torch.compiler.config, "compile_on_one_rank"),
                    reason="this release's torch.compiler.config has no compile_on_one_rank to read")
def test_a_torch_guard_on_a_config_override_is_saved(precompile_caching):
    """torch saves its guard on a config override read in the frame as a
    value it cannot rebuild (the next process's torch.compile raises); the
    plugin saves it as what it checks, so the frame is packaged (strict
    precompile refuses any frame it cannot package) and runs right. The
    next process: ``config`` in test_each_plugin_guard_is_saved_and_rebuilt_in_the_next_process."""

    def f(x):
        return x + 1 if torch.compiler.config.compile_on_one_rank else x - 1

    with torch._dynamo.config.patch(strict_precompile=True):
        assert torch.compile(f, backend="inductor")(torch.ones(2)).tolist() == [0.0, 0.0]


@pytest.mark.release
def test_a_rebuilt_config_check_answers_as_the_config_module(monkeypatch):
    """The rebuilt check of a saved config-override guard answers as the
    config module does, with the override unset and set; unset, it compares
    the entry's fixed fallback (its default here), without the module's
    lookup (microseconds in Python on every call of a loaded frame)."""
    from dynamo_dist.precompile.torch_guards import config_value_check

    module, key = precompile_programs.one_rank_config(), "compile_on_one_rank"
    entry = module._config[key]
    checks = {value: config_value_check((module.__name__, key, value)) for value in (False, True)}
    lookups = []
    lookup = type(module).__getattr__
    monkeypatch.setattr(type(module), "__getattr__", lambda self, name: lookups.append(name) or lookup(self, name))

    # 2.15 holds an entry's override in a ContextVar; earlier releases, as a plain attribute.
    in_a_context_var = isinstance(entry.user_override, contextvars.ContextVar)

    def override():
        return entry.user_override.get() if in_a_context_var else entry.user_override

    def answers() -> dict:
        return {value: check(override()) for value, check in checks.items()}

    from torch.utils._config_module import _UNSET_SENTINEL

    if override() is not _UNSET_SENTINEL:  # set by an earlier test (a patch leaves it set)
        unset_override = contextvars.ContextVar(key, default=_UNSET_SENTINEL) if in_a_context_var else _UNSET_SENTINEL
        monkeypatch.setattr(entry, "user_override", unset_override)
    unset = answers()
    assert lookups == []  # the fallback was compared when the check was built
    assert unset == {value: lookup(module, key) is value for value in checks}
    with module.patch(**{key: True}):
        assert answers() == {False: False, True: True}
    with module.patch(**{key: False}):
        assert answers() == {False: True, True: False}


class ShardedLater(torch.nn.Module):
    """A module class no module of which is sharded before its saved guard loads."""

    def __init__(self) -> None:
        super().__init__()
        self.linear = torch.nn.Linear(4, 4)


class _FSDPClassOf:
    """Pickles as torch's guard pickler saves FSDP2's class of a module of
    ``cls`` (``GuardsStatePickler.reducer_override``)."""

    def __init__(self, cls: type) -> None:
        self.cls = cls

    def __reduce__(self):
        from torch._dynamo.guards import GuardsStatePickler
        return GuardsStatePickler._unpickle_fsdp_module_type, (self.cls,)


def test_a_saved_fsdp_class_loads_before_fully_shard_makes_it():
    """torch saves FSDP2's class of a module (made by ``fully_shard``) as the
    module's own class and rebuilds it from the classes ``fully_shard`` made
    so far: KeyError inside torch.compile where a block is loaded before it
    is sharded (torchtitan compiles each block, then shards it). With the
    plugin the class is made there as ``fully_shard`` makes it, and
    ``fully_shard`` gives the module that class later: the rebuilt guard
    checks the class the module will have."""
    from torch.distributed.fsdp import FSDPModule, fully_shard

    payload = pickle.dumps(_FSDPClassOf(ShardedLater))
    with pytest.raises(KeyError):
        pickle.loads(payload)
    with dynamo_dist.enabled():
        made = pickle.loads(payload)
        assert made.__mro__[1:3] == (FSDPModule, ShardedLater)
        assert pickle.loads(pickle.dumps(_FSDPClassOf(ShardedLater))) is made
    with fake_world(2, rank=0):
        block = fully_shard(ShardedLater(), mesh=make_mesh((2,), ("dp",)))
    assert type(block) is made


def _guard_pickled(value, *guarded):
    """``value`` saved and loaded as torch's guard pickler saves a frame's
    local that a guard reads (and the ``guarded`` values inside it)."""
    import inspect
    import io
    from torch._dynamo.guards import GuardsStatePickler

    # The tracked-value dicts before the file (2.13: three, 2.15: four).
    tracked = [p for p in inspect.signature(GuardsStatePickler.__init__).parameters.values()
               if p.kind is p.POSITIONAL_OR_KEYWORD][1:]
    buf = io.BytesIO()
    GuardsStatePickler({id(v): v for v in (value, *guarded)}, *({} for _ in tracked[1:]), buf).dump(value)
    return pickle.loads(buf.getvalue())


@pytest.mark.release
def test_a_saved_fsdp_module_loads_with_its_fsdp_class():
    """A frame's FSDP2 module (a block torchtitan compiles and shards) is
    saved by pickle's default, which rebuilds it through
    ``FSDPModule.__new__``: torch loads it as the module's original class, so
    the rebuilt guard on its class never passes on the live module (a
    restart traces the block again). With the plugin it loads with its FSDP
    class, its state kept."""
    from torch.distributed.fsdp import fully_shard

    with fake_world(2, rank=0):
        block = fully_shard(ShardedLater(), mesh=make_mesh((2,), ("dp",)))
    assert type(_guard_pickled(block)) is ShardedLater
    with dynamo_dist.enabled():
        loaded = _guard_pickled(block, block.linear)
    assert type(loaded) is type(block)
    assert type(loaded.linear) is torch.nn.Linear and loaded.linear.in_features == 4


@pytest.mark.release
def test_frames_without_plugin_guards_are_still_packaged(precompile_caching, monkeypatch):
    """Only frames with a plugin guard are declined."""
    from torch._dynamo.package import DynamoCache

    recorded = []
    record = DynamoCache.record_package
    monkeypatch.setattr(DynamoCache, "record_package", lambda package: recorded.append(package) or record(package))

    def plain(x):
        return x.sin() + 1

    torch.compile(plain, backend="eager")(torch.ones(3))
    assert any(entry.guarded_codes for package in recorded for entry in package._codes.values())


def _precompile_process(cache_dir, **options) -> subprocess.CompletedProcess:
    env = {**os.environ, "TORCHINDUCTOR_CACHE_DIR": str(cache_dir), "TORCH_CACHING_PRECOMPILE": "1",
           "PYTHONPATH": os.pathsep.join([str(ROOT / "tests"), str(ROOT), os.environ.get("PYTHONPATH", "")])}
    return subprocess.run([sys.executable, str(ROOT / "tests" / "precompile_programs.py"), json.dumps(options)],
                          env=env, capture_output=True, text=True, timeout=600)


def _precompile_run(cache_dir, **options) -> dict:
    done = _precompile_process(cache_dir, **options)
    assert done.returncode == 0, done.stderr[-4000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


def _traced(run: dict) -> set:
    assert all(kind["same_as_eager"] for kind in run.values()), run
    return {name for name, kind in run.items() if kind["traced"]}


@pytest.mark.slow
def test_each_plugin_guard_is_saved_and_rebuilt_in_the_next_process(tmp_path):
    """Each kind of plugin guard in a frame of its own: the second process
    loads every frame (traces none); a process that differs traces exactly
    the frames whose guards read what differs, and each gives eager's answer."""
    saved = tmp_path / "saved"
    first = _precompile_run(saved)
    assert _traced(first) == set(first), first
    assert _traced(_precompile_run(saved)) == set()
    kinds = set(first)
    perturbed = {
        # The pair of ranks (0, 1) is still group "1" and holds the same ranks.
        "world": ({"world": 4}, {"world", "mesh", "spec"}),
        # Every group but WORLD has another name.
        "shift": ({"shift": True}, {"group", "mesh", "spec", "same_object"}),
        # The mesh's root has a flattened mesh the saved fingerprints do not hold.
        "flatten": ({"flatten": True}, {"mesh", "spec"}),
        # A registry torch guards by position holds fewer entries: the saved
        # guard cannot be rebuilt (stock raises IndexError in torch.compile).
        "registered": ({"registered": False}, {"registry"}),
        # compile_on_one_rank set: rank answers become graph operations, so
        # no frame saved with rank 0 folded in runs (the compile caches'
        # keys change alike), and the saved override guard ("unset") fails.
        "one_rank": ({"one_rank": True}, kinds),
        # torch saves a module by reference and rebuilds a guard on a value
        # read through it against the loading process's own value (stock runs
        # the loaded frame: the saved process's answer).
        "scale": ({"scale": 3}, {"module"}),
        "version": ({"version": "0.0.0+another"}, kinds),
        # The planner's switches choose a traced redistribute's collectives.
        "planner": ({"no_transform": True}, kinds),
    }
    for name, (options, expected) in perturbed.items():
        cache = tmp_path / name
        shutil.copytree(saved, cache)
        assert _traced(_precompile_run(cache, **options)) == expected, name


@pytest.mark.slow
@pytest.mark.release
def test_an_entry_saved_under_the_former_names_of_the_saved_forms_is_traced_again_once(tmp_path):
    """Saved guards name their builders by qualified name. An entry saved
    by a plugin that kept them elsewhere (inside ``_compat/dynamo.py``)
    does not load here: every frame is traced again, with eager's values,
    and the entry that trace writes replaces the unloadable variants, so
    the next process loads every frame."""
    only = ["group", "mesh", "spec", "class", "same_object", "config", "module"]
    first = _precompile_run(tmp_path, only=only, former_names=True)
    assert _traced(first) == set(only), first
    entry = next((tmp_path / "dynamo").rglob("entry")).read_bytes()
    assert b"dynamo_dist._compat.dynamo" in entry  # saved under the former names
    assert _traced(_precompile_run(tmp_path, only=only)) == set(only)
    assert _traced(_precompile_run(tmp_path, only=only)) == set()


@pytest.mark.slow
@pytest.mark.release
def test_a_frame_reading_a_mesh_the_program_sets_after_compiling_restarts_without_tracing(tmp_path):
    """torch rebuilds a loaded frame's guards when ``torch.compile`` wraps
    the function, reading each guarded value then. A frame that reads the
    current mesh from a stack the program makes later (torchtitan's
    ``_MESH_TLS.mesh_stack``) is saved with what it read: the next process
    loads it at wrap time and checks the stack at each call, so it traces
    nothing, and answers as eager."""
    assert _traced(_precompile_run(tmp_path, current=True)) == {"current_mesh"}
    assert _traced(_precompile_run(tmp_path, current=True)) == set()


@pytest.mark.slow
def test_a_loaded_frame_reading_a_stack_of_another_depth_or_a_mesh_of_another_shape_is_traced_again(tmp_path):
    """The saved checks of the current-mesh frame read the stack at each
    call: a stack of another depth, or a mesh of another shape, fails them,
    and the frame is traced again with eager's answer. (The saved forms are
    the plugin's own, the same on every release; the restart above runs on
    each.)"""
    saved = tmp_path / "saved"
    assert _traced(_precompile_run(saved, current=True)) == {"current_mesh"}
    for name, options in {"depth": {"depth": 2}, "world": {"world": 4}}.items():
        cache = tmp_path / name
        shutil.copytree(saved, cache)
        assert _traced(_precompile_run(cache, current=True, **options)) == {"current_mesh"}, name


@pytest.mark.slow
def test_stock_fails_to_compile_a_loaded_frame_reading_a_mesh_set_later(tmp_path):
    """Stock rebuilds the frame's guard on the stack's length against the
    stack when ``torch.compile`` wraps the function: the program has not
    made it yet, and ``torch.compile`` raises (the restart crashes). Stock
    on a pinned release does not change: the newest is asserted."""
    assert _traced(_precompile_run(tmp_path, current=True, plugin=False)) == {"current_mesh"}
    done = _precompile_process(tmp_path, current=True, plugin=False)
    assert done.returncode != 0 and "AttributeError" in done.stderr and "mesh_stack" in done.stderr, \
        done.stderr[-4000:]


@pytest.mark.slow
@pytest.mark.release
def test_ranks_sharing_a_cache_dir_each_run_and_restart_from_their_own_variants(tmp_path):
    """Without ``compile_on_one_rank`` a trace folds this rank into the frame
    (``dist.get_rank()``; the default group's saved guard is its name, ranks
    and backend, the same on every rank). Ranks 0 then 1 save into one cache
    dir (torch's default on a host): rank 1 must not run what rank 0 saved
    (it answered ``x * 2``, rank 0's, before the saved frames held the rank),
    so it traces both frames; its save keeps rank 0's variants beside its own
    (torch keeps the last writer's), so rank 0's restart traces nothing."""
    for rank in (0, 1):
        assert _traced(_precompile_run(tmp_path, ranked=True, rank=rank)) == {"rank", "coordinate"}, rank
    assert _traced(_precompile_run(tmp_path, ranked=True, rank=0)) == set()


@pytest.mark.slow
@pytest.mark.release
def test_a_saved_frame_of_another_function_with_the_same_key_is_traced_again(tmp_path):
    """torch keys Dynamo's cache by qualified name and first line: of two
    functions ``twin`` on the same line of two modules, the one saved last
    holds the entry. The next process loads it for the other function too;
    the plugin sees the saved code is not that function's and traces it
    (stock 2.15 raises NameError calling it: it binds the saved globals in
    the other module; the plugin binds them in the function's own, where
    without the check it would run the other function's code)."""
    first = _precompile_run(tmp_path, twins=True)
    assert _traced(first) == {"twin_a", "twin_b"}, first
    assert _traced(_precompile_run(tmp_path, twins=True)) == {"twin_a"}


@pytest.mark.slow
@pytest.mark.release
def test_a_function_compiled_through_two_wrappers_loads_both_variants(tmp_path):
    """Two modules of one class, each compiled through its own wrapper, each
    its own variant of ``forward`` (deepseek_v3's dense and MoE blocks under
    torchtitan): torch records one entry per function, the wrapper recorded
    last winning, so the next process loaded one variant and traced the
    other; the plugin saves both."""
    first = _precompile_run(tmp_path, wrappers=True)
    assert _traced(first) == {"dense", "moe"}, first
    assert _traced(_precompile_run(tmp_path, wrappers=True)) == set()


@pytest.mark.slow
@pytest.mark.release
def test_a_wrapped_frame_returning_a_dict_loads_in_the_next_process(tmp_path):
    """A frame whose code is a ``functools.wraps`` wrapper of another module
    and whose output rebuilds an ``OrderedDict``: the next process loads it
    (stock torch binds its compiled code in the wrapped function's module and
    loads ``collections`` through a global it never saves: ``NameError``)."""
    first = _precompile_run(tmp_path, only=["wrapped"])
    assert _traced(first) == {"wrapped"}, first
    assert _traced(_precompile_run(tmp_path, only=["wrapped"])) == set()


@pytest.mark.slow
def test_a_restart_with_caching_precompile_traces_nothing(tmp_path):
    """A TP MLP compiled with inductor under the flag, then a second process:
    it loads the frame from Dynamo's cache (traces nothing) and runs it."""
    env = {"TORCH_CACHING_PRECOMPILE": "1"}
    first = run_fresh(tmp_path, env=env, program="tp_mlp", rank=3, save_artifacts=str(tmp_path / "artifacts"))
    assert first["traced"] == 1 and "dynamo_dist: this frame's guards" not in first["stderr"]
    second = run_fresh(tmp_path, env=env, program="tp_mlp", rank=3)
    assert second["traced"] == 0, second["stderr"][-3000:]
    assert second["same_as_eager"] is not False
    other = run_fresh(tmp_path, env=env, program="tp_mlp", rank=3, extra_groups=1)
    assert other["traced"] == 1  # the mesh over other groups fails the loaded guards


@pytest.mark.slow
def test_aot_compile_saves_and_loads_on_a_gloo_world(tmp_path, monkeypatch):
    """aot_compile of a TP MLP on 2 gloo ranks, saved in one world and
    loaded in the next: the same loss as eager on each rank; a mesh over
    another group fails the loaded guard (with the plugin's reason), never
    a wrong answer."""
    monkeypatch.setenv("TORCHINDUCTOR_CACHE_DIR", str(tmp_path / "cache"))
    for run in run_in_world(precompile_programs.aot_rank_run, 2, str(tmp_path), True):
        assert run["guard_failed"] is None and run["loss"] == pytest.approx(run["eager"], rel=1e-5), run
    for run in run_in_world(precompile_programs.aot_rank_run, 2, str(tmp_path), False):
        assert run["guard_failed"] is None and run["loss"] == pytest.approx(run["eager"], rel=1e-5), run
    for run in run_in_world(functools.partial(precompile_programs.aot_rank_run, other_group=True), 2,
                                 str(tmp_path), False):
        assert run["loss"] is None and "dynamo_dist: `L['self']" in run["guard_failed"], run
