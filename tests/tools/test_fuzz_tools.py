"""The fuzzing tools: strategies cover what they promise, specs print as
source, the runner shrinks and writes a reproducer script that fails on its
own (checked with a deliberately broken oracle), and the CLI command."""

import pytest
import os
import subprocess
import sys
import textwrap
from math import prod

import torch
from hypothesis import find, given, settings
from hypothesis import strategies as st
from torch.distributed.tensor.placement_types import Partial, Replicate, Shard, _StridedShard

import dynamo_dist
from dynamo_dist.testing import strategies as S
from dynamo_dist.fuzzing.driver import run_property
from dynamo_dist.fuzzing.properties import Property
from dynamo_dist.fuzzing.specs import REDUCE_OPS, MeshSpec, World, code_of

CI = settings(settings.get_profile(S.CI_PROFILE), max_examples=100)


@CI
@given(st.data())
def test_meshes_multiply_to_the_world_size(data):
    world = data.draw(S.worlds())
    assert 0 <= world.rank < world.size
    spec = data.draw(S.meshes(world))
    assert 1 <= spec.ndim <= 3 and prod(spec.shape) == world.size
    assert spec.names is None or len(spec.names) == spec.ndim


def test_strategies_reach_every_kind():
    # Each of these must be generated (find raises if it never is).
    find(S.meshes(World(8)), lambda m: m.ndim == 3 and m.names is not None)
    find(S.meshes(World(8)), lambda m: m.ndim == 2 and m.names is None)
    for op in REDUCE_OPS:
        find(S.placements(2, 2), lambda ps, op=op: Partial(op) in ps)
    find(S.placements(1, 3), lambda ps: isinstance(ps[0], _StridedShard) and ps[0].split_factor > 1)
    find(S.placements(2, 3), lambda ps: ps == (Shard(2), Replicate()))
    find(S.dtensor_specs(), lambda s: any(n % 2 for n in s.shape) and Shard(0) in s.placements)  # uneven
    find(S.dtensor_specs(), lambda s: 0 in s.shape)  # zero-size dim
    find(S.dtensor_specs(), lambda s: s.dtype == torch.int64 and Partial("bxor") in s.placements)
    program = find(S.query_examples(), lambda e: "if " in e.program.source and "Shard(" in e.program.source)
    assert callable(program.program.function())


@CI
@given(S.guard_examples())
def test_examples_print_as_source(example):
    from dynamo_dist.fuzzing import specs

    namespace = {name: getattr(specs, name) for name in dir(specs)}
    namespace.update(torch=torch, Shard=Shard, Replicate=Replicate, Partial=Partial, _StridedShard=_StridedShard)
    assert eval(code_of(example), namespace) == example


BROKEN_ORACLE = '''
"""A deliberately broken oracle: it calls any answer that is True a mismatch."""
import dynamo_dist
from dynamo_dist.testing import assert_compiles_like_eager, difference
from dynamo_dist.fuzzing.specs import world_objects


def broken_same(eager, compiled):
    if any(v is True for v in eager[1]):
        return "broken oracle: an answer is True"
    return difference(eager, compiled)


def check(example):
    fn = example.program.function()
    with dynamo_dist.enabled(), world_objects(example.world) as objects:
        assert_compiles_like_eager(fn, *objects.query_args(example.inputs), same=broken_same)
'''


INTERRUPTED_ORACLE = '''
calls = []


def check(example):
    calls.append(example)
    if len(calls) == 3:
        raise KeyboardInterrupt
'''


def test_an_interrupted_run_counts_no_failure(tmp_path, monkeypatch):
    """A run stopped at its time limit (SIGINT, as ``timeout -s INT`` sends)
    is interrupted; the example it stopped in is neither passed nor failed."""
    (tmp_path / "interrupted_oracle.py").write_text(INTERRUPTED_ORACLE)
    monkeypatch.syspath_prepend(str(tmp_path))
    prop = Property("stopped", "an oracle interrupted on its third example",
                    lambda: S.query_examples(world=World(4, 1)), "interrupted_oracle:check", ci_examples=0)
    report = run_property(prop, examples=10, seed=0, out_dir=tmp_path / "out")
    assert report.interrupted and not report.failures
    assert report.passed == 2 and "failed" not in report.outcomes, report.outcomes


@pytest.mark.slow
def test_reproducer_fails_on_its_own_for_a_broken_oracle(tmp_path, monkeypatch):
    (tmp_path / "broken_oracle.py").write_text(BROKEN_ORACLE)
    monkeypatch.syspath_prepend(str(tmp_path))
    prop = Property("broken", "a broken oracle", lambda: S.query_examples(world=World(4, 1)),
                    "broken_oracle:check", ci_examples=0)
    report = run_property(prop, examples=60, seed=0, out_dir=tmp_path / "out")
    assert len(report.failures) == 1, [f.error for f in report.failures]
    failure = report.failures[0]
    assert "broken oracle" in failure.error
    # Shrunk to a statement computing a True answer, with at most one other
    # left beside it (Hypothesis's shrinker does not promise the minimum: an
    # all-zero statement such as ``v0 = Shard(0)`` before the failing one can
    # survive, depending on the seed and the grammar).
    assert failure.example.program.source.count("\n    v") <= 2, failure.example.program.source
    script = failure.reproducer
    assert script is not None and script.exists()
    # The package under test (installed or on PYTHONPATH) must be importable by the script.
    root = os.path.dirname(os.path.dirname(dynamo_dist.__file__))
    env = {"PYTHONPATH": os.pathsep.join([str(tmp_path), root]), "PATH": "/usr/bin:/bin"}
    ran = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, env=env,
                         cwd=tmp_path, timeout=300)
    assert ran.returncode == 1, ran.stdout + ran.stderr
    assert "AssertionError: compiled != eager: broken oracle" in ran.stderr
    # The same script with the real oracle passes: the failure is the oracle's.
    fixed = script.read_text().replace("from broken_oracle import check as check",
                                       "from dynamo_dist.fuzzing.properties import check_query as check")
    assert fixed != script.read_text()
    (tmp_path / "fixed.py").write_text(fixed)
    ran = subprocess.run([sys.executable, str(tmp_path / "fixed.py")], capture_output=True, text=True, env=env,
                         cwd=tmp_path, timeout=300)
    assert ran.returncode == 0, ran.stdout + ran.stderr
    assert "passed" in ran.stdout


@pytest.mark.slow
def test_fuzz_cli_runs_a_short_profile(tmp_path):
    ran = subprocess.run(
        [sys.executable, "-m", "dynamo_dist", "fuzz", "--examples", "5", "--seed", "1", "--property", "query",
         "--property", "guards", "--out", str(tmp_path)],
        capture_output=True, text=True, timeout=600,
    )
    assert ran.returncode == 0, ran.stdout + ran.stderr
    assert "query: ok: 5 examples passed" in ran.stdout
    assert "guards: ok: 5 examples passed" in ran.stdout
    assert "[query]" in ran.stderr  # progress display


def test_mesh_spec_source_form():
    assert code_of(MeshSpec((2, 4), ("dp", "tp"))) == "MeshSpec(shape=(2, 4), names=('dp', 'tp'))"
    assert code_of((Partial("max"), _StridedShard(1, split_factor=3))) == \
        "(Partial('max'), _StridedShard(1, split_factor=3))"
    assert textwrap.dedent(code_of(World(8, 3))) == "World(size=8, rank=3)"
