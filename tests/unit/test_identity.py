"""Class and identity questions about tracked objects, compiled == eager on
every release: ``type(p) is Shard``, ``p.__class__``, ``isinstance``,
``issubclass``, ``type(p) == T``, ``in``, and ``is`` between meshes, groups
and placements (with the recompiles each one costs)."""

import copy

import pytest
import torch
import torch.distributed as dist
from torch.distributed.device_mesh import DeviceMesh
from torch.distributed.tensor.placement_types import Partial, Placement, Replicate, Shard, _StridedShard

from dynamo_dist._compat import observe as O
from dynamo_dist.testing import make_mesh

pytestmark = pytest.mark.release


class UserShard(Shard):
    """A user's placement class (inherits Shard's fields and ``__eq__``)."""


PLACEMENTS = {
    "Shard": "Shard(0)",
    "Replicate": "Replicate()",
    "Partial": "Partial()",
    "Partial-max": 'Partial("max")',
    "_StridedShard": "_StridedShard(0, split_factor=2)",
    "UserShard": "UserShard(0)",
}
CLASSES = ["Shard", "Replicate", "Partial", "_StridedShard", "UserShard", "Placement"]
# Each asked of every placement against every class: True for some, False for others.
CONSTRUCTS = [
    "type({p}) is {T}", "type({p}) is not {T}", "{p}.__class__ is {T}", "isinstance({p}, {T})",
    "issubclass(type({p}), {T})", "type({p}) == {T}", "type({p}) != {T}", "{p}.__class__ == {T}",
    "type({p}) in ({T}, Replicate)", "{T} in (type({p}),)", "{T} is type({p})", "{T} == type({p})",
]
NAMESPACE = {
    "Shard": Shard, "Replicate": Replicate, "Partial": Partial, "_StridedShard": _StridedShard,
    "UserShard": UserShard, "Placement": Placement, "DeviceMesh": DeviceMesh, "dist": dist,
    "ProcessGroup": dist.ProcessGroup,
}


def _function(params: str, exprs: list[str]):
    source = f"def f(x, {params}):\n    return x + 1, ({', '.join(exprs)},)\n"
    namespace = dict(NAMESPACE)
    exec(source, namespace)
    return namespace["f"]


def _answers(fn, args, compiled):
    eager = fn(torch.ones(1), *args)[1]
    got = compiled(torch.ones(1), *args)[1]
    return eager, got


@pytest.mark.parametrize("origin", ["built inside", "passed in"])
@pytest.mark.parametrize("kind", list(PLACEMENTS))
def test_class_of_a_placement_is_its_class(world8, plugin, kind, origin):
    """Every class question about a placement, built in the region or passed
    in, answers as in eager (2.11 / 2.12 answered ``type(Shard(0)) is Shard``
    False, with stock too), in one graph."""
    p = PLACEMENTS[kind] if origin == "built inside" else "ps[0]"
    exprs = [c.format(p=p, T=t) for c in CONSTRUCTS for t in CLASSES]
    exprs += [f"type({p}) is type({p})", f"{p}.__class__ is type({p})", f"type({p}).__name__"]
    fn = _function("ps", exprs)
    counter = O.compile_counter("eager")
    args = ((eval(PLACEMENTS[kind], dict(NAMESPACE)),),)
    eager, got = _answers(fn, args, torch.compile(fn, backend=counter, fullgraph=True))
    wrong = [f"{e}: eager {a}, compiled {b}" for e, a, b in zip(exprs, eager, got) if a != b]
    assert not wrong, "\n".join(wrong)
    assert True in eager and False in eager  # the constructs ask both ways
    assert counter.frame_count == 1


@pytest.fixture
def meshes(world8):
    mesh = make_mesh((2, 4), ("dp", "tp"))
    return {
        "mesh": mesh,
        "copy": lambda: copy.copy(mesh),  # an equal mesh that is a new object, each call
        "other": make_mesh((2, 4), ("dp", "tp")),  # same layout, other groups
        "world": dist.group.WORLD,
        "dp": mesh.get_group("dp"),
        "group": dist.new_group(list(range(8))),  # the world's ranks, another group
    }


# (expression, parameters, calls (argument names per call), frames compiled
# per call). Each call compares with eager; an equal new mesh (``copy``) with
# the same answer must not recompile.
IDENTITY_CASES = [
    ("m1 is m2", "m1, m2",
     [("mesh", "mesh"), ("mesh", "copy"), ("copy", "copy"), ("mesh", "mesh"), ("mesh", "other")], [1, 1, 0, 0, 1]),
    ("m1 is not m2", "m1, m2", [("mesh", "copy"), ("mesh", "mesh"), ("copy", "mesh")], [1, 1, 0]),
    ("m1 == m2", "m1, m2", [("mesh", "copy"), ("mesh", "mesh"), ("copy", "copy")], [1, 0, 0]),
    ("m1['tp'] is m1['tp']", "m1", [("mesh",), ("copy",)], [1, 0]),
    ("m1.get_group(1) is m1.get_group('tp')", "m1", [("mesh",), ("copy",)], [1, 0]),
    ("m1.get_group(0) is m2.get_group(0)", "m1, m2",
     [("mesh", "mesh"), ("mesh", "copy"), ("copy", "copy"), ("mesh", "other")], [1, 0, 0, 1]),
    # The answer stays while the mesh is an equal new one: the mesh is not pinned.
    ("m1.get_group(0) is g", "m1, g", [("mesh", "dp"), ("copy", "dp"), ("copy", "dp"), ("other", "dp")],
     [1, 0, 0, 1]),
    ("m1.get_group(0) is g", "m1, g", [("mesh", "world"), ("copy", "world"), ("copy", "world")], [1, 0, 0]),
    ("g1 is g2", "g1, g2", [("world", "world"), ("world", "group"), ("group", "group"), ("group", "world")],
     [1, 1, 1, 1]),
    ("g1 is dist.group.WORLD", "g1", [("world",), ("group",)], [1, 1]),
    ("dist.group.WORLD is g1", "g1", [("world",), ("group",)], [1, 1]),
    ("ps[0] is ps[1]", "ps", [("same",), ("equal",), ("same",)], [1, 1, 0]),
    ("Shard(0) is Shard(0)", "ps", [("same",)], [1]),
    ("ps[0] is Shard(0)", "ps", [("same",), ("equal",)], [1, 0]),
    ("type(m1) is DeviceMesh", "m1", [("mesh",), ("copy",)], [1, 0]),
    ("m1.__class__ is DeviceMesh", "m1", [("mesh",), ("copy",)], [1, 0]),
    ("type(m1) == DeviceMesh", "m1", [("mesh",), ("copy",)], [1, 0]),
    ("type(m1['tp']) is DeviceMesh", "m1", [("mesh",)], [1]),
    ("isinstance(m1['tp'], DeviceMesh)", "m1", [("mesh",)], [1]),
    ("type(g1) is ProcessGroup", "g1", [("world",), ("group",)], [1, 1]),
    ("type(m1.get_group(0)) is ProcessGroup", "m1", [("mesh",), ("copy",)], [1, 0]),
    ("m1.get_group(0).__class__ is ProcessGroup", "m1", [("mesh",), ("copy",)], [1, 0]),
    ("type(ps[0]) is type(ps[1])", "ps", [("shard_shard",), ("shard_replicate",)], [1, 1]),
]


def _argument(meshes, name):
    placements = {"same": (Shard(0),) * 2, "equal": (Shard(0), Shard(0)),
                  "shard_shard": (Shard(0), Shard(1)), "shard_replicate": (Shard(0), Replicate())}
    if name in placements:
        return placements[name]
    value = meshes[name]
    return value() if callable(value) else value


@pytest.mark.parametrize("expr, params, calls, frames", IDENTITY_CASES,
                         ids=[f"{c[0]} [{i}]" for i, c in enumerate(IDENTITY_CASES)])
def test_identity_of_tracked_objects(meshes, plugin, expr, params, calls, frames):
    """``is`` between tracked objects equals eager on every call, and
    recompiles only where the answer or a folded value changes."""
    fn = _function(params, [expr])
    counter = O.compile_counter("eager")
    compiled = torch.compile(fn, backend=counter, fullgraph=True)
    seen = []
    for names in calls:
        args = [_argument(meshes, n) for n in names]
        before = counter.frame_count
        eager, got = _answers(fn, args, compiled)
        assert got == eager, f"call {names}: eager {eager}, compiled {got}"
        seen.append(counter.frame_count - before)
    assert seen == frames
