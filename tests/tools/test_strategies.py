"""The public strategies (``dynamo_dist.testing.strategies``) check every
argument when they are called, as hypothesis' own do: a bad one raises
``InvalidArgument`` naming it and what it may be, before anything is drawn.
Importing them registers nothing with hypothesis."""

import subprocess
import sys

import pytest
import torch
from hypothesis import find, settings
from hypothesis.errors import InvalidArgument
from torch.distributed.tensor.placement_types import Replicate, Shard

from dynamo_dist.fuzzing.specs import DTensorSpec, GroupArg, MeshArg, MeshSpec, QueryInputs, World
from dynamo_dist.testing import strategies as S

INPUTS = QueryInputs(MeshArg(MeshSpec((2,))), (Shard(0),), GroupArg())
SPEC = DTensorSpec(MeshSpec((2,)), (Shard(0),), (4,))

# (call, the argument the message names, what it says it may be)
INVALID = [
    # worlds
    (lambda: S.worlds(()), "sizes", "non-empty tuple or list"),
    (lambda: S.worlds(8), "sizes", "non-empty tuple or list"),
    (lambda: S.worlds((2, 0)), r"sizes\[1\]", "integer >= 1"),
    (lambda: S.worlds((2.0,)), r"sizes\[0\]", "integer >= 1"),
    # mesh_shapes
    (lambda: S.mesh_shapes(0), "world_size", "integer >= 1"),
    (lambda: S.mesh_shapes(-4), "world_size", "integer >= 1"),
    (lambda: S.mesh_shapes(2.0), "world_size", "integer >= 1"),
    (lambda: S.mesh_shapes(True), "world_size", "integer >= 1"),
    (lambda: S.mesh_shapes(8, max_ndim=0), "max_ndim", "integer from 1 to 4"),
    (lambda: S.mesh_shapes(8, max_ndim=5), "max_ndim", "integer from 1 to 4"),
    # meshes
    (lambda: S.meshes(0), "world", "integer >= 1"),
    (lambda: S.meshes("8"), "world", "a World or a world size"),
    (lambda: S.meshes(World(0)), r"world\.size", "integer >= 1"),
    (lambda: S.meshes(World(4, 4)), r"world\.rank", "integer from 0 to 3"),
    (lambda: S.meshes(World(4, -1)), r"world\.rank", "integer from 0 to 3"),
    (lambda: S.meshes(8, max_ndim=5), "max_ndim", "integer from 1 to 4"),
    (lambda: S.meshes(8, max_ndim=0), "max_ndim", "integer from 1 to 4"),
    (lambda: S.meshes(8, names=1), "names", "True or False or None"),
    (lambda: S.meshes(8, rank_maps=None), "rank_maps", "True or False"),
    (lambda: S.meshes(8, subsets="yes"), "subsets", "True or False"),
    # placements
    (lambda: S.placements(-1, 2), "mesh_ndim", "integer >= 1"),
    (lambda: S.placements(0, 2), "mesh_ndim", "integer >= 1"),
    (lambda: S.placements(2, -1), "tensor_ndim", "integer >= 0"),
    (lambda: S.placements(2, 2, partial=None), "partial", "True or False"),
    (lambda: S.placements(2, 2, strided=1), "strided", "True or False"),
    (lambda: S.placements(2, 2, reduce_ops=()), "reduce_ops", "non-empty tuple or list of items from"),
    (lambda: S.placements(2, 2, reduce_ops=("sum", "mean")), "reduce_ops", "non-empty tuple or list of items"),
    (lambda: S.placements(2, 2, reduce_ops="sum"), "reduce_ops", "non-empty tuple or list of items"),
    (lambda: S.placements(2, 2, user=None), "user", "True or False"),
    # dtensor_specs
    (lambda: S.dtensor_specs(0), "world", "integer >= 1"),
    (lambda: S.dtensor_specs(max_tensor_ndim=0), "max_tensor_ndim", "integer >= 1"),
    (lambda: S.dtensor_specs(max_dim_size=-1), "max_dim_size", "integer >= 0"),
    (lambda: S.dtensor_specs(dtypes=()), "dtypes", "non-empty tuple or list of real torch dtypes"),
    (lambda: S.dtensor_specs(dtypes=("float32",)), "dtypes", "real torch dtypes"),
    (lambda: S.dtensor_specs(dtypes=(torch.complex64,)), "dtypes", "real torch dtypes"),
    (lambda: S.dtensor_specs(partial=None), "partial", "True or False"),
    (lambda: S.dtensor_specs(strided=None), "strided", "True or False"),
    # query_inputs
    (lambda: S.query_inputs(2), "world", "a World"),
    (lambda: S.query_inputs(World(2, 2)), r"world\.rank", "integer from 0 to 1"),
    (lambda: S.query_inputs(World(2), subsets=None), "subsets", "True or False"),
    # programs
    (lambda: S.programs(2, INPUTS), "world", "a World"),
    (lambda: S.programs(World(2), None), "inputs", "a QueryInputs"),
    (lambda: S.programs(World(2), INPUTS, 0), "tensor_ndim", "integer >= 1"),
    (lambda: S.programs(World(2), INPUTS, kind="loud"), "kind", r"one of \('query', 'escapes', 'wild'\)"),
    (lambda: S.programs(World(2), INPUTS, max_statements=0), "max_statements", "integer >= 1"),
    # dtensor_programs
    (lambda: S.dtensor_programs(None), "spec", "a DTensorSpec"),
    (lambda: S.dtensor_programs(SPEC, max_ops=0), "max_ops", "integer >= 1"),
    (lambda: S.dtensor_programs(SPEC, ops=()), "ops", "non-empty tuple or list of items from"),
    (lambda: S.dtensor_programs(SPEC, ops=("sum", "nope")), "ops", "non-empty tuple or list of items from"),
    # query_examples
    (lambda: S.query_examples("loud"), "kind", "one of"),
    (lambda: S.query_examples(world=4), "world", "a World"),
    # dtensor_examples
    (lambda: S.dtensor_examples(0), "world", "integer >= 1"),
    (lambda: S.dtensor_examples(ops=()), "ops", "non-empty tuple or list of items from"),
    (lambda: S.dtensor_examples(strided=1), "strided", "True or False or None"),
    (lambda: S.dtensor_examples(backward="yes"), "backward", "True or False or None"),
    (lambda: S.dtensor_examples(max_mesh_ndim=5), "max_mesh_ndim", "integer from"),
    (lambda: S.dtensor_specs(max_mesh_ndim=0), "max_mesh_ndim", "integer from"),
    # collectives_examples
    (lambda: S.collectives_examples(()), "sizes", "non-empty tuple or list"),
    (lambda: S.collectives_examples(ops=("nope",)), "ops", "non-empty tuple or list of items from"),
    (lambda: S.collectives_examples(strided=2), "strided", "True or False or None"),
    (lambda: S.collectives_examples(max_mesh_ndim=0), "max_mesh_ndim", "integer from"),
    # user_programs
    (lambda: S.user_programs(MeshSpec((4,)), 2), "mesh", "one of"),
    (lambda: S.user_programs(MeshSpec((2,)), 4), "ndim", "integer from 0 to 3"),
    (lambda: S.user_programs(MeshSpec((2,)), 2, max_statements=0), "max_statements", "integer >= 1"),
    (lambda: S.user_programs(MeshSpec((2,)), 2, statements=("nope",)), "statements",
     "non-empty tuple or list of items from"),
    (lambda: S.user_programs(MeshSpec((2,)), 2, dist_calls=()), "dist_calls", "non-empty tuple or list"),
    (lambda: S.user_programs(MeshSpec((2,)), 2, model="nope"), "model", "None or one of"),
    (lambda: S.user_programs(MeshSpec((2,)), 1, model="tensor-parallel MLP"), "ndim", r"one of \(2, 3\)"),
    # stock_examples
    (lambda: S.stock_examples(max_calls=5), "max_calls", "integer from 1 to 4"),
    (lambda: S.stock_examples(models=1), "models", "True or False"),
    (lambda: S.stock_examples(dynamic=("never",)), "dynamic", "non-empty tuple or list of items from"),
]


@pytest.mark.parametrize("call,argument,allowed", INVALID,
                         ids=[f"{i}-{a}" for i, (_, a, _) in enumerate(INVALID)])
def test_a_bad_argument_is_invalid_when_the_strategy_is_made(call, argument, allowed):
    with pytest.raises(InvalidArgument, match=rf"^{argument}=.* must be .*{allowed}"):
        call()


def test_every_public_strategy_is_checked():
    """Each strategy in ``__all__`` has a bad-argument case above (or none
    to check: ``guard_examples`` takes no argument)."""
    strategies = {n for n in S.__all__ if callable(getattr(S, n)) and n != "register_profiles"}
    checked = {next(name for name in call.__code__.co_names if name in strategies) for call, _, _ in INVALID}
    assert strategies - checked == {"guard_examples"}, strategies - checked


def test_good_arguments_draw_what_the_docstrings_say():
    assert find(S.meshes(8, max_ndim=2), lambda m: m.ndim == 2).ndim == 2
    assert find(S.meshes(World(8, 7), max_ndim=3), lambda m: m.ndim == 3).ndim == 3
    assert find(S.mesh_shapes(1), lambda s: True) == (1,)
    assert find(S.placements(2, 0), lambda ps: True) in ((Replicate(), Replicate()),)  # no Shard of a 0-D tensor
    assert len(find(S.placements(3, 2), lambda ps: True)) == 3
    assert find(S.dtensor_specs(4, dtypes=[torch.int32]), lambda s: True).dtype == torch.int32
    S.programs(World(2), INPUTS, 1, kind="wild", max_statements=1)
    S.dtensor_programs(SPEC, max_ops=1, ops=["sum"])
    S.query_examples("escapes", World(4, 1))
    S.dtensor_examples(World(2, 1), ops=("sum",), strided=False)
    assert find(S.meshes(16, max_ndim=4), lambda m: m.ndim == 4).ndim == 4
    # backward applies to floating dtypes only (an integer example has no gradient)
    assert find(S.dtensor_examples(backward=True), lambda e: e.spec.dtype.is_floating_point).backward
    assert not find(S.dtensor_examples(backward=True), lambda e: not e.spec.dtype.is_floating_point).backward
    assert find(S.collectives_examples((16,)), lambda e: e.spec.mesh.ndim == 4).world.size == 16
    model = find(S.user_programs(MeshSpec((2,), ("tp",)), 3, model="sequence-parallel block"), lambda p: True)
    assert "def model_of(mesh):" in model.source and "SequenceParallel()" in model.source
    assert "dist.barrier" in find(S.user_programs(MeshSpec((2,)), 1, statements=("dist",),
                                                  dist_calls=("dist.barrier",)), lambda p: True).source
    assert find(S.stock_examples(dynamic=["mark_dynamic"]), lambda e: len(e.lengths) == 2).dynamic == "mark_dynamic"


def test_each_generated_view_makes_the_shape_the_program_assumes():
    # The view-family statements track the shape they make; eager agrees on
    # plain tensors of every shape of up to 3 dims (zero-size dims included).
    from dynamo_dist.fuzzing.programs import _reshapes

    for shape in [(0,), (5,), (4, 6), (0, 3), (2, 8, 4), (3, 0, 2), (1, 4, 9)]:
        for expr, made in _reshapes(shape):
            assert tuple(eval(expr, {"d": torch.zeros(shape)}).shape) == made, (shape, expr)
    S.guard_examples()


@pytest.mark.slow
def test_importing_the_strategies_registers_nothing():
    code = ("from hypothesis import settings\n"
            "import dynamo_dist.testing.strategies as S\n"
            "for name in (S.CI_PROFILE, S.LONG_PROFILE):\n"
            "    try:\n"
            "        settings.get_profile(name)\n"
            "    except Exception:\n"
            "        continue\n"
            "    raise SystemExit(name + ' is registered on import')\n"
            "S.register_profiles()\n"
            "assert settings.get_profile(S.CI_PROFILE).derandomize\n"
            "assert settings.get_profile(S.LONG_PROFILE).max_examples == 1000\n")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stdout + done.stderr[-3000:]


def test_the_profiles_are_registered_for_the_tests():
    # conftest.py calls register_profiles(), as the fuzz runner does.
    assert settings.get_profile(S.CI_PROFILE).database is None
