"""A DTensor call on a dynamic size is traced as every coordinate it shards
over, up to a limit, past which it runs eagerly behind one explained break
(values across real ranks: ``tests/spawned/test_uneven_dynamic_sizes.py``);
a call whose split fixes a size marked dynamic runs eagerly behind another."""

from __future__ import annotations

import logging

import pytest
import torch
from torch.distributed.tensor import DTensor, Replicate, Shard

import dynamo_dist
from dynamo_dist._compat import observe as O
from dynamo_dist.testing import fake_world, make_mesh
from dynamo_dist.variables.dtensor import EVERY_COORDINATE_LIMIT

# The fake runs as other coordinates read DeviceMesh and DTensor internals
# that differ between releases.
pytestmark = pytest.mark.release


def _redistribute(d, mesh):
    return d.redistribute(mesh, [Shard(1)]) * 2


def _compile(world: int, shape: tuple, dynamic: bool, caplog) -> tuple[list[str], list[str]]:
    """Redistribute a Shard(0) DTensor to Shard(1) over a 1-D mesh of
    ``world`` fake ranks, compiled; (graph-break reasons, trace logs)."""
    with fake_world(world, rank=world - 1), dynamo_dist.enabled():
        mesh = make_mesh((world,))
        d = DTensor.from_local(torch.randn(*shape), mesh, [Shard(0)], run_check=False)
        before = dict(O.dynamo_counters()["graph_break"])
        with caplog.at_level(logging.DEBUG, logger="dynamo_dist.fold"):
            out = torch.compile(_redistribute, backend="aot_eager", dynamic=dynamic)(d, mesh)
        assert out.placements == (Shard(1),) and out.shape == d.shape
        torch._dynamo.reset()
    breaks = [r.splitlines()[0] for r, n in O.dynamo_counters()["graph_break"].items() if n > before.get(r, 0)]
    traced = [r.getMessage() for r in caplog.records if "coordinates of the mesh" in r.getMessage()]
    return breaks, traced


@pytest.mark.parametrize("world", [2, 8])
def test_a_dynamic_size_is_traced_as_every_coordinate(world, caplog):
    breaks, traced = _compile(world, (3, 2 * world + 1), True, caplog)
    assert breaks == []
    assert any(f"each of {world} coordinates" in line for line in traced), traced


def test_a_static_size_is_traced_as_this_rank_only(caplog):
    breaks, traced = _compile(8, (3, 17), False, caplog)
    assert breaks == [] and traced == []


def test_past_the_limit_the_call_runs_eagerly_behind_one_break(caplog):
    world = 2 * EVERY_COORDINATE_LIMIT
    breaks, _ = _compile(world, (3, world + 1), True, caplog)
    # (2.11 then also compiles redistribute's own frame, which breaks on its own.)
    assert "dynamo_dist: DTensor shapes of every rank under dynamic sizes" in breaks, breaks


def _split_marked(x, mesh):
    d = DTensor.from_local(x, mesh, [Replicate()], run_check=False)
    return d.redistribute(mesh, [Shard(1)]).to_local() * 2


@pytest.mark.parametrize("size, fixed", [(2, True), (8, False)])
def test_a_split_that_fixes_a_size_marked_dynamic_runs_eagerly(size, fixed):
    """``mark_dynamic`` on a size split over 2 ranks: at 2, each rank's piece
    is 1 and the trace fixes the size (Dynamo then raises
    ``ConstraintViolationError`` for the frame, as it did before this
    break); the split runs eagerly instead. At 8 nothing is fixed: one
    graph, no break."""
    with fake_world(2, rank=0), dynamo_dist.enabled():
        mesh = make_mesh((2,))
        x = torch.randn(3, size)
        torch._dynamo.mark_dynamic(x, 1)
        before = dict(O.dynamo_counters()["graph_break"])
        out = torch.compile(_split_marked, backend="aot_eager")(x, mesh)
        assert out.shape == (3, size // 2)
        torch._dynamo.reset()
    breaks = [r.splitlines()[0] for r, n in O.dynamo_counters()["graph_break"].items() if n > before.get(r, 0)]
    # (2.11 then also compiles redistribute's own frame, which breaks on its own.)
    assert ("dynamo_dist: a DTensor call fixes a size marked dynamic" in breaks) == fixed, breaks
    assert fixed or breaks == [], breaks
