"""Failures the fuzzer found (``python -m dynamo_dist fuzz``), each as its
shrunk example, checked by the property that found it."""

import pytest
from torch.distributed.tensor.placement_types import Replicate

from dynamo_dist.testing.properties import check_query
from dynamo_dist.testing.specs import GroupArg, MeshArg, MeshSpec, Program, QueryExample, QueryInputs, World


def query(world, mesh, placements, group, body):
    source = "def f(x, mesh, ps, pg):\n    x = x + 1\n" + "".join(f"    {line}\n" for line in body)
    return QueryExample(world, QueryInputs(mesh, placements, group), Program(source))


# `query`: str() of a tracked mesh or group was a stock "Failed to trace
# builtin operator" graph break under fullgraph (stock itself returns the text
# of a FakeScriptObject). Fixed: builtin str folds through the tracker's str_impl.
STR_OF_TRACKED_OBJECTS = [
    query(World(1, 0), MeshArg(MeshSpec((1,), ("dp",))), (Replicate(),), GroupArg(),
          ["v0 = str(mesh)", "return x, (v0,)"]),
    query(World(8, 3), MeshArg(MeshSpec((2, 4), ("dp", "tp"))), (Replicate(),), GroupArg(),
          ["v0 = str(mesh['tp'])", "v1 = str(mesh.get_group(0))", "v2 = '%s' % (mesh,)", "return x, (v0, v1, v2)"]),
]


@pytest.mark.parametrize("example", STR_OF_TRACKED_OBJECTS, ids=["str(mesh)", "str(submesh, group), %"])
def test_str_of_tracked_objects_folds(example):
    check_query(example)


def test_uninstall_restores_builtin_str():
    from torch._dynamo.variables.builtin import BuiltinVariable

    import dynamo_dist

    before = BuiltinVariable.__dict__["call_str"]
    with dynamo_dist.enabled():
        assert BuiltinVariable.__dict__["call_str"] is not before
    assert BuiltinVariable.__dict__["call_str"] is before
