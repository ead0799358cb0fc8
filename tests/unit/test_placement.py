"""Placements built and queried inside the compiled region fold; escaping
placements are rebuilt in bytecode by their constructors."""

import pytest
import torch
from torch.distributed.tensor.placement_types import (
    Partial,
    Placement,
    Replicate,
    Shard,
    _StridedShard,
)

from helpers import check_like_eager

pytestmark = [pytest.mark.usefixtures("plugin"), pytest.mark.release]

REDUCE_OPS = ["sum", "avg", "max", "min", "product"]


def queries(p):
    return (
        p.is_shard(),
        p.is_shard(0),
        p.is_shard(dim=1),
        p.is_replicate(),
        p.is_partial(),
        isinstance(p, Shard),
        isinstance(p, Replicate),
        isinstance(p, Partial),
        isinstance(p, _StridedShard),
        isinstance(p, Placement),
        p == Shard(0),
        p != Replicate(),
        hash(p) == hash(p),
        repr(p),
        str(p),
    )


def test_constructed_placements_fold_and_escape(world8):
    def fn(x):
        built = [
            Shard(0),
            Shard(dim=1),
            Replicate(),
            Partial(),
            Partial("max"),
            Partial(reduce_op="avg"),
            _StridedShard(0, split_factor=2),
            _StridedShard(dim=1, split_factor=4),
        ]
        built += [Partial(op) for op in ("sum", "min", "product")]
        out = tuple(queries(p) for p in built)
        extra = (
            built[0].dim,
            built[4].reduce_op,
            built[6].split_factor,
            built[6].dim,
            Shard(0) in built,
            built.index(Replicate()),
            {Shard(0): "s", Replicate(): "r"}[built[2]],
        )
        return x + 1, out, extra, tuple(built)

    run = check_like_eager(fn, torch.ones(2))
    # Escaping placements are real placement objects, rebuilt by constructor.
    for got, want in zip(run.compiled[3], run.eager[3]):
        assert type(got) is type(want) and got == want


@pytest.mark.parametrize(
    "p",
    [Shard(0), Shard(1), Replicate(), _StridedShard(0, split_factor=2)]
    + [Partial(op) for op in REDUCE_OPS],
    ids=repr,
)
def test_input_placement_queries(world8, p):
    def fn(x, p):
        return x + 1, queries(p), p

    run = check_like_eager(fn, torch.ones(2), p)
    assert run.compiled[2] is p  # an input escapes as itself (reloaded from its source)


def test_placement_stored_on_object_and_passed_to_graph_break(world8):
    class Box:
        pass

    box = Box()

    def fn(x, box):
        box.p = _StridedShard(1, split_factor=3)
        p = Partial("max")
        torch._dynamo.graph_break()
        return x + 1, p

    out = torch.compile(fn, backend="eager")(torch.ones(1), box)
    assert box.p == _StridedShard(1, split_factor=3)
    assert out[1] == Partial("max") and type(out[1]) is Partial


def test_bad_placement_construction_raises_like_eager(world8):
    with pytest.raises(TypeError):
        Shard("x")

    def fn(x):
        return x + Shard("x").dim

    with pytest.raises(TypeError):
        torch.compile(fn, backend="eager")(torch.ones(1))

    def caught(x):
        try:
            Shard("x")
        except TypeError:
            return x + 1
        return x

    check_like_eager(caught, torch.ones(1))


def test_partial_with_unknown_reduce_op_matches_eager(world8):
    # Eager torch 2.13 accepts any reduce_op string; compiled must agree.
    def fn(x):
        p = Partial("bogus")
        return x + 1, p.reduce_op, p

    check_like_eager(fn, torch.ones(1))


class MyPlacement(Shard):
    """A user placement: Shard with a pure helper method."""

    def describe(self):
        return f"mine:{self.dim}" if self.is_shard() else "other"

    def twice(self):
        return self.dim * 2


def test_user_defined_placement_folds_through_its_methods(world8):
    p = MyPlacement(1)

    def fn(x, p):
        return x + p.twice(), p.describe(), p.is_shard(1), isinstance(p, Shard), p.dim

    check_like_eager(fn, torch.ones(1), p)
