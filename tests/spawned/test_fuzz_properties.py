"""The fuzzing properties, on a bounded CI profile.

Derandomized (the same examples on every machine, no example database), a
few dozen examples per property; ``python -m dynamo_dist fuzz`` runs the long
profile. Each test calls the same check the CLI and the reproducer scripts
call (``dynamo_dist.fuzzing.properties``).
"""

import contextlib

import pytest
import torch
from hypothesis import given, reject, settings
from torch.distributed.tensor.placement_types import Shard

import dynamo_dist
from dynamo_dist import _compat as C
from dynamo_dist.testing import strategies as S
from dynamo_dist.fuzzing.properties import (
    PROPERTIES,
    InvalidExample,
    check_collectives,
    check_dtensor,
    check_escapes,
    check_guards,
    check_query,
    check_stock,
    check_wild,
    gloo_pool,
)
from dynamo_dist.fuzzing.specs import (
    CollectivesExample,
    DTensorExample,
    DTensorSpec,
    GroupArg,
    GuardExample,
    MeshArg,
    MeshSpec,
    Program,
    QueryInputs,
    StockExample,
    World,
)

pytestmark = pytest.mark.slow


def ci(prop: str):
    return settings(settings.get_profile(S.CI_PROFILE), max_examples=PROPERTIES[prop].ci_examples)


@ci("query")
@given(S.query_examples("query"))
def test_query_programs_compile_like_eager(example):
    check_query(example)


@ci("escapes")
@given(S.query_examples("escapes"))
def test_escaping_objects_equal_eager(example):
    check_escapes(example)


@ci("guards")
@given(S.guard_examples())
def test_guards_recompile_exactly_when_a_folded_answer_changes(example):
    check_guards(example)


@ci("wild")
@given(S.query_examples("wild"))
def test_no_internal_dynamo_error_whatever_is_generated(example):
    check_wild(example)


@pytest.fixture(scope="module")
def gloo2():
    with gloo_pool(2) as pool:
        yield pool


@ci("dtensor")
@given(example=S.dtensor_examples())
def test_dtensor_numerics_on_two_gloo_ranks(gloo2, example):
    try:
        check_dtensor(example)
    except InvalidExample:
        reject()


@ci("stock")
@given(example=S.stock_examples())
def test_programs_users_write_compile_no_worse_than_stock_on_two_gloo_ranks(gloo2, example):
    try:
        check_stock(example)
    except InvalidExample:
        reject()


@ci("collectives")
@given(example=S.collectives_examples())
def test_dtensor_programs_run_eagers_collectives_on_meshes_of_up_to_four_dims(example):
    try:
        check_collectives(example)
    except InvalidExample:
        reject()


def test_collectives_property_catches_a_collective_eager_does_not_run():
    # Compiled code that gathers once more than eager must fail the property
    # like a wrong value, naming both sides' collectives.
    extra = CollectivesExample(World(8, 3), DTensorSpec(MeshSpec((2, 4), ("dp", "tp")), (Shard(0), Shard(1)), (4, 8)),
                               Program("def f(d, mesh):\n    if torch.compiler.is_compiling():\n"
                                       "        d = d.redistribute(mesh, [Shard(0), Replicate()])\n"
                                       "        d = d.redistribute(mesh, [Shard(0), Shard(1)])\n"
                                       "    return d.full_tensor(), d.to_local(), d.placements\n"))
    with pytest.raises(AssertionError, match="compiled ran other collectives than eager") as info:
        check_collectives(extra)
    assert "all_gather_into_tensor over [0, 1, 2, 3]" in str(info.value)


# Found by the dtensor property's gradients: from_local(run_check=True)'s traced
# broadcast had no autograd kernel, and a backward through it did not compile.
RUN_CHECK_GRADIENT = DTensorExample(
    DTensorSpec(MeshSpec((1, 2)), (Shard(0), Shard(0)), (2,)),
    Program("def f(d, mesh):\n    d = d.redistribute(mesh, [Shard(0), Replicate()])\n"
            "    d = DTensor.from_local(d.to_local(), mesh, d.placements, run_check=True, shape=d.shape, "
            "stride=d.stride())\n    return d.full_tensor(), d.placements\n"),
    backward=True,
)


def test_gradient_through_from_local_run_check(gloo2):
    check_dtensor(RUN_CHECK_GRADIENT)


# Found by the stock property's long run (torch 2.14.1): a redistribute that
# splits a size marked dynamic into pieces of 1 fixed that size, and the
# frame failed with ConstraintViolationError where stock breaks earlier and
# runs it like eager.
MARKED_SIZE_SPLIT = StockExample(
    mesh=MeshSpec(shape=(2,)),
    program=Program(source="def f(x, mesh):\n    d = DTensor.from_local(x, mesh, [Replicate()], run_check=False)\n"
                    "    d = d.redistribute(d.device_mesh, [Shard(1)])\n"
                    "    v1 = torch.arange(d.shape[0]) % d.shape[1]\n"
                    "    with loss_parallel():\n        d = torch.nn.functional.cross_entropy(d, v1)\n    return d\n"),
    shape=(2, 2), vary=1, dynamic="mark_dynamic", requires_grad=False)


def test_a_split_that_fixes_a_size_marked_dynamic_is_no_worse_than_stock(gloo2):
    check_stock(MARKED_SIZE_SPLIT)


# Found by the stock property's long run (torch 2.12.1): the plugin breaks on
# ``distribute_tensor`` of a tensor that requires grad and runs it eagerly,
# where 2.12's Dynamo compiled distribute_tensor's own frame and broke three
# more times in it (stock: one break). Every release: the call's frame must
# stay uncompiled wherever Dynamo would otherwise compile it.
DISTRIBUTE_REQUIRING_GRAD = StockExample(
    mesh=MeshSpec(shape=(2,)),
    program=Program(source="def f(x, mesh):\n    d = distribute_tensor(x, mesh, [Replicate()])\n    return d\n"),
    shape=(2,), requires_grad=True)


@pytest.mark.release
def test_distribute_tensor_of_a_tensor_requiring_grad_breaks_no_more_than_stock(gloo2):
    check_stock(DISTRIBUTE_REQUIRING_GRAD)


# Found by the stock property's long run (torch 2.12.1): ``implicit_replication()``
# after a ``from_local`` on a folded ``mesh["dp"]``. Its C++ switch is a break
# inside the ``with``'s enter; with a single call in the graph before it, Dynamo
# ran the frame eagerly and compiled ``from_local``'s own frames (plugin 6
# breaks, stock 1). The plugin traces the ``with`` as the switch (one graph, no
# break: tests/unit/test_dtensor_outputs.py); here values and gradients on
# gloo, sizes changing (the switch set again in the recompiled frame).
IMPLICIT_REPLICATION_ON_A_SUBMESH = StockExample(
    mesh=MeshSpec(shape=(1, 2), names=("dp", "tp")),
    program=Program(source="def f(x, mesh):\n"
                    "    d = DTensor.from_local(x, mesh['dp'], [Replicate()], run_check=False)\n"
                    "    with implicit_replication():\n"
                    "        d = d * torch.arange(d.shape[-1], dtype=d.dtype) + 1\n    return d\n"),
    shape=(2,), lengths=(3, 5), requires_grad=True)


@pytest.mark.release
def test_implicit_replication_after_a_folded_submesh_is_no_worse_than_stock(gloo2):
    check_stock(IMPLICIT_REPLICATION_ON_A_SUBMESH)


# The guard property has teeth: on stock torch it finds the stale answer for
# another process group (a known stock fault).

STALE_GROUP = GuardExample(
    world_a=World(8, 3),
    inputs_a=QueryInputs(MeshArg(MeshSpec((2, 4))), (), GroupArg(MeshArg(MeshSpec((2, 4))), 0)),
    world_b=World(8, 3),
    inputs_b=QueryInputs(MeshArg(MeshSpec((2, 4))), (), GroupArg(MeshArg(MeshSpec((2, 4))), 1)),
    program=Program("def f(x, mesh, ps, pg):\n    x = x + 1\n    v0 = pg.size()\n    x = x + v0\n"
                    "    return x, (v0,)\n", ((3, frozenset({"pg"})),)),
)


def test_guard_property_passes_with_the_plugin():
    check_guards(STALE_GROUP)


def test_guard_property_catches_stock_stale_group_answer(monkeypatch):
    monkeypatch.setattr(dynamo_dist, "enabled", contextlib.nullcontext)
    assert not dynamo_dist.is_installed()
    if not C.distributed.STOCK_MESH_OPAQUE:
        # 2.11's in-tree ProcessGroupVariable guards groups by identity: no stale answer.
        check_guards(STALE_GROUP)
        return
    with pytest.raises(AssertionError, match="compiled != eager"):
        check_guards(STALE_GROUP)
    torch._dynamo.reset()
