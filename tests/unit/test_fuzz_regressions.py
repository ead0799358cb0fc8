"""Failures the fuzzer found (``python -m dynamo_dist fuzz``), each as its
shrunk example, checked by the property that found it."""

import pytest
from torch.distributed.tensor.placement_types import Partial, Replicate, Shard

from dynamo_dist.fuzzing.properties import check_guards, check_query, check_wild
from dynamo_dist.fuzzing.specs import (
    GroupArg,
    GuardExample,
    MeshArg,
    MeshSpec,
    Program,
    QueryExample,
    QueryInputs,
    TaggedShard,
    World,
)

pytestmark = pytest.mark.release


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


def test_uninstall_restores_builtin_handlers():
    from torch._dynamo.variables.builtin import BuiltinVariable

    import dynamo_dist
    from dynamo_dist import _compat as C

    names = sorted({name for family in C.slots.BUILTIN_HOOKS_BY_FAMILY.values() for name in family})
    before = {name: BuiltinVariable.__dict__.get(name) for name in names}
    with dynamo_dist.enabled():
        # 2.11-2.13 need hooks (str; repr and hash on 2.11 / 2.12); 2.14+'s
        # builtins dispatch to the tracker's slots themselves.
        hooked = {name for name in names if BuiltinVariable.__dict__.get(name) is not before[name]}
        assert hooked == set(C.slots.BUILTIN_HOOKS)
    assert {name: BuiltinVariable.__dict__.get(name) for name in names} == before


def guard(world, inputs_a, inputs_b, body):
    """Compile with A, call with B; ``body``: (line, inputs the line reads)."""
    lines = ["def f(x, mesh, ps, pg):", "    x = x + 1"]
    touches = []
    for line, reads in body:
        lines.append(f"    {line}")
        if reads:
            touches.append((len(lines), frozenset(reads)))
    return GuardExample(world, inputs_a, world, inputs_b, Program("\n".join(lines) + "\n", tuple(touches)))


# `guards`: a user-defined placement (a Shard subclass with its own state,
# inheriting Shard.__eq__, which compares dim only) was guarded by __eq__
# alone, so an answer read from its state went stale: compiled for
# TaggedShard(0, tag=0), called with TaggedShard(0, tag=1), it returned tag 0
# (stock recompiles). Fixed: the guard also compares the instance state.
_MESH = MeshArg(MeshSpec((1,), ("dp",)))
_TAG0 = QueryInputs(_MESH, (TaggedShard(0, tag=0),), GroupArg())
_TAG1 = QueryInputs(_MESH, (TaggedShard(0, tag=1),), GroupArg())
USER_PLACEMENT_STATE = [
    # The fuzzer's shrunk example (the frame rule: ps[0]'s value was read).
    guard(World(1, 0), _TAG0, _TAG1, [
        ("v1 = []", ()),
        ("for p in ps:", ("ps", "ps[*]")),
        ("    if p.is_shard():", ("ps", "ps[*]")),
        ("        v1.append(p.dim)", ("ps", "ps[*]")),
        ("return x, (v1,)", ()),
    ]),
    # The stale answer itself: state read directly and through a user method.
    guard(World(1, 0), _TAG0, _TAG1, [
        ("v0 = ps[0].tag", ("ps", "ps[0]")),
        ("v1 = ps[0].weight()", ("ps", "ps[0]")),
        ("x = x + v1", ()),
        ("return x, (v0, v1)", ()),
    ]),
]


@pytest.mark.parametrize("example", USER_PLACEMENT_STATE, ids=["shrunk", "stale tag"])
def test_user_placement_state_is_guarded(example):
    check_guards(example)


# `wild` under compile_on_one_rank: a negative mesh dim reached the runtime
# coordinate op unnormalised, which fails at run time ("Runtime assertion
# failed for expression u0 <= 0"). Fixed: the dim is normalised first.
NEGATIVE_DIM_ONE_RANK = [
    QueryExample(World(2, 1), QueryInputs(MeshArg(MeshSpec((2,))), (Replicate(),), GroupArg()),
                 Program("def f(x, mesh, ps, pg):\n    x = x + 1\n    v0 = mesh.get_local_rank(-1)\n"
                         "    return x, (v0,)\n"), one_rank=True),
    QueryExample(World(8, 6), QueryInputs(MeshArg(MeshSpec((2, 4))), (Replicate(),), GroupArg()),
                 Program("def f(x, mesh, ps, pg):\n    x = x + 1\n    v0 = mesh.get_group(-1).rank()\n"
                         "    x = x + v0 + mesh.get_local_rank(mesh_dim=-1) * 10\n    return x, (v0,)\n"),
                 one_rank=True),
]


@pytest.mark.parametrize("example", NEGATIVE_DIM_ONE_RANK, ids=["shrunk", "get_group(-1).rank()"])
def test_negative_mesh_dim_under_compile_on_one_rank(example):
    check_wild(example)


# `wild` under compile_on_one_rank, meshes with their own rank order: for a
# dim spanning the whole world torch reuses the default group even when the
# mesh orders the ranks otherwise, and eager answers get_local_rank() and
# group.rank() from that group (0 on rank 0 of DeviceMesh("cpu", [1, 0]))
# while the runtime op answered the coordinate (1). Fixed: such a dim's rank
# is computed from the group's member list.
_PERMUTED = QueryInputs(MeshArg(MeshSpec((2,), ("dp",), ranks=(1, 0))), (Replicate(),), GroupArg())
PERMUTED_WORLD_MESH_ONE_RANK = [
    QueryExample(World(2, 0), _PERMUTED, Program(
        "def f(x, mesh, ps, pg):\n    x = x + 1\n    v0 = mesh.get_local_rank(0)\n    return x, (v0,)\n"),
        one_rank=True),
    QueryExample(World(2, 0), _PERMUTED, Program(
        "def f(x, mesh, ps, pg):\n    x = x + 1\n    v0 = mesh.get_group(0).rank()\n"
        "    v1 = mesh.get_coordinate()\n    return x + v0, (v0, v1)\n"), one_rank=True),
]


@pytest.mark.parametrize("example", PERMUTED_WORLD_MESH_ONE_RANK, ids=["shrunk", "group rank"])
def test_rank_in_reused_world_group_under_compile_on_one_rank(example):
    check_wild(example)


# `wild` under compile_on_one_rank, a mesh without this rank:
# mesh.get_coordinate() is None in eager, but went to the runtime op, which
# fails while tracing. Fixed: folds to None, as eager (and stock) answer.
NOT_IN_MESH_ONE_RANK = QueryExample(
    World(2, 0), QueryInputs(MeshArg(MeshSpec((1,), ("dp",), ranks=(1,))), (Replicate(),), GroupArg()),
    Program("def f(x, mesh, ps, pg):\n    x = x + 1\n    v0 = mesh.get_coordinate()\n    return x, (v0,)\n"),
    one_rank=True)


def test_coordinate_of_a_mesh_without_this_rank_under_compile_on_one_rank():
    check_wild(NOT_IN_MESH_ONE_RANK)


# `query` on 2.11 / 2.12 (stock too): the class of a placement built inside
# the region was not its class: ``type(Shard(0)) is Shard`` compiled to False.
# Fixed: the plugin owns the classes of tracked objects (``variables/classes.py``)
# and ``is`` (``variables/identity.py``) on every release.
_DP_TP = QueryInputs(MeshArg(MeshSpec((1, 1), ("dp", "tp")), copy=True), (Partial("sum"),), GroupArg())
CLASS_OF_BUILT_PLACEMENT = [
    query(World(1, 0), _DP_TP.mesh, _DP_TP.placements, _DP_TP.group,
          ["v0 = type(Shard(0)) is Shard", "return x, (v0,)"]),
    query(World(1, 0), _DP_TP.mesh, _DP_TP.placements, _DP_TP.group,
          ["v0 = type(Replicate()) is Replicate", "v1 = Partial().__class__ is Partial",
           "v2 = type(ps[0]) is type(Partial())", "return x, (v0, v1, v2)"]),
]


@pytest.mark.parametrize("example", CLASS_OF_BUILT_PLACEMENT, ids=["shrunk", "__class__, type of an input"])
def test_class_of_a_placement_built_inside(example):
    check_query(example)


# `guards` on 2.11 / 2.12: an identity test whose answer cannot change
# (``mesh.get_group(0) is pg``) pinned the mesh object, so an equal new mesh
# recompiled (stock 2.11 does not). Fixed: a group taken from a guarded mesh
# is fixed by the mesh guard's group names; only the answer's own inputs are
# guarded (``variables/identity.py``).
GROUP_OF_EQUAL_NEW_MESH = guard(World(1, 0), _DP_TP, _DP_TP, [
    ("if mesh.get_group(0) is pg:", ("mesh", "pg")),
    ("    v0 = Shard(0)", ()),
    ("else:", ()),
    ("    v0 = Shard(0)", ()),
    ("    x = x * 1", ()),
    ("return x, (v0,)", ()),
])


def test_identity_with_a_group_of_an_equal_new_mesh_does_not_recompile():
    check_guards(GROUP_OF_EQUAL_NEW_MESH)


# `wild` on 2.12 under compile_on_one_rank, a mesh without this rank:
# ``funcol.all_reduce(x, "sum", (mesh, 0))`` raises IndexError in eager; 2.12's
# funcol resolves the group through ``_dtensor.mesh_get_process_group``, whose
# fake run raises the same IndexError, which Dynamo re-raises as a
# TorchRuntimeError. Not a fault (Dynamo wraps every op's own error met on fake
# tensors so); the oracle now accepts a TorchRuntimeError caused by eager's
# exception type, and still rejects any other.
COLLECTIVE_ON_A_MESH_WITHOUT_THIS_RANK_ONE_RANK = QueryExample(
    World(2, 0), QueryInputs(MeshArg(MeshSpec((1,), ("dp",), ranks=(1,))), (Shard(0),), GroupArg()),
    Program("def f(x, mesh, ps, pg):\n    x = x + 1\n    v0 = x + funcol.all_reduce(x, 'sum', (mesh, 0))\n"
            "    x = x + v0.sum()\n    return x, (v0,)\n", line_touches=((3, frozenset(["mesh"])),)),
    one_rank=True)


def test_collective_on_a_mesh_without_this_rank_under_compile_on_one_rank():
    check_wild(COLLECTIVE_ON_A_MESH_WITHOUT_THIS_RANK_ONE_RANK)


# Shrunk from the guards property (2.15.0, seed 4054327298): call B flattens
# A's mesh in the compiled program; A's graph then no longer fits A's mesh
# (its flattened meshes are part of the mesh guard), so calling A again
# compiles anew, where the oracle had expected a cache hit.
FLATTEN_IN_CALL_B = GuardExample(
    world_a=World(size=1),
    inputs_a=QueryInputs(mesh=MeshArg(spec=MeshSpec(shape=(1, 1), names=("dp", "tp"))),
                         placements=(Shard(0), Replicate()), group=GroupArg()),
    world_b=World(size=1),
    inputs_b=QueryInputs(mesh=MeshArg(spec=MeshSpec(shape=(1, 1), names=("dp", "tp"))),
                         placements=(Replicate(), Replicate()), group=GroupArg()),
    program=Program(source=(
        "def f(x, mesh, ps, pg):\n    x = x + 1\n    if ps[0].is_replicate():\n"
        "        v0 = mesh['dp']._flatten('f_dp').get_all_groups()\n    else:\n        v0 = Shard(0)\n"
        "        x = x * 1\n    v1 = mesh.ndim\n    return x, (v0, v1)\n"),
        line_touches=((3, frozenset(["ps", "ps[0]"])), (4, frozenset(["mesh"])), (8, frozenset(["mesh"])))),
)


def test_a_program_that_flattens_the_mesh_in_call_b_may_recompile_call_a():
    check_guards(FLATTEN_IN_CALL_B)


# The `guards` oracle itself (seed 606128, torch 2.15.0): in
# `any(p.is_partial() for p in ps)` with ps = (Partial(), TaggedShard(0, tag)),
# `any` stops at ps[0], so ps[1] (whose tag differs between calls A and B) is
# never read and no recompile is right; the oracle counted every item of `ps`
# on that line as folded and demanded one. Fixed: a run records the items of
# `ps` it reads (specs.ReadRecordingTuple); a recompile is required when one
# of those differs, and allowed when only an item the line touches differs.
_ANY = [("v1 = any(p.is_partial() for p in ps)", {"ps", "ps[*]"}), ("return x, (v1,)", ())]
SHORT_CIRCUIT = [
    guard(World(1, 0), QueryInputs(_MESH, (Partial(), TaggedShard(0, tag=0)), GroupArg()),
          QueryInputs(_MESH, (Partial(), TaggedShard(0, tag=1)), GroupArg()), _ANY),
    # ps[0] read and changed: the recompile is still required.
    guard(World(1, 0), QueryInputs(_MESH, (Partial(), TaggedShard(0, tag=0)), GroupArg()),
          QueryInputs(_MESH, (Replicate(), Partial()), GroupArg()), _ANY),
]


@pytest.mark.parametrize("example", SHORT_CIRCUIT, ids=["unread item changed", "read item changed"])
def test_the_guards_oracle_judges_the_items_a_run_read(example):
    check_guards(example)


def test_a_run_records_the_items_of_ps_it_reads():
    from dynamo_dist.fuzzing.specs import Program

    def run(body, ps):
        program = Program(f"def f(x, mesh, ps, pg):\n    return {body}\n", ((2, frozenset({"ps", "ps[*]"})),))
        return program.touches(program.function(), None, None, ps, None).items

    ps = (Partial(), Shard(0), Replicate())
    assert run("any(p.is_partial() for p in ps)", ps) == {0}
    assert run("all(p.is_partial() for p in ps)", ps) == {0, 1}
    assert run("Shard(0) in ps", ps) == {0, 1}
    assert run("ps[-1]", ps) == {2}
    assert run("len(ps)", ps) == set()
    assert run("hash(ps)", ps) == run("ps.count(Replicate())", ps) == run("sorted(str(p) for p in ps)", ps) == {0, 1, 2}
