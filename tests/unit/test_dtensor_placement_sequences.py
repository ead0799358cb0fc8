"""Placements in any sequence a user passes: a list, a tuple, a namedtuple, a
list or tuple subclass, or an iterable class registered as a pytree node; built
outside or inside the compiled function; positional or keyword. Every DTensor
call that takes placements folds them (fullgraph, no graph break, the mesh and
placements out of the graph), a changed sequence recompiles, and a sequence
Dynamo cannot iterate is a clean ``dynamo_dist:`` break. Stock torch breaks with
"Failed to convert args/kwargs to proxy" on the subclasses and the pytree class
(2.13-2.15)."""

import collections

import pytest
import torch
import torch.utils._pytree as pytree
from torch.distributed.tensor import DTensor, Replicate, Shard

from dynamo_dist.testing import compile_and_run, distributed_objects_in, fake_world, make_mesh

pytestmark = pytest.mark.release

Pair = collections.namedtuple("Pair", "first")


class PlacementTuple(tuple):
    pass


class PlacementList(list):
    pass


class Layout:
    """A user's container of placements, registered as a pytree node."""

    def __init__(self, placements):
        self.placements = list(placements)

    def __iter__(self):
        return iter(self.placements)

    def __len__(self):
        return len(self.placements)


pytree.register_pytree_node(Layout, lambda lay: (lay.placements, None), lambda items, _: Layout(items))

SEQUENCES = {
    "list": list,
    "tuple": tuple,
    "namedtuple": lambda items: Pair(*items),
    "tuple subclass": PlacementTuple,
    "list subclass": PlacementList,
    "pytree class": Layout,
}


@pytest.fixture
def mesh(plugin):
    with fake_world(4, 1):
        yield make_mesh((4,), ("tp",))


def _programs(mesh, make, outside):
    """(name, fn) for every DTensor call that takes placements; ``outside``
    passes the sequence in, else it is built in the compiled function."""
    shard = make([Shard(0)])

    def pl():
        return shard if outside else make([Shard(0)])

    return [
        ("from_local positional", lambda x: DTensor.from_local(x, mesh, pl()).full_tensor() + 1),
        ("from_local keyword", lambda x: DTensor.from_local(x, mesh, placements=pl()).full_tensor() + 1),
        ("redistribute positional",
         lambda x: DTensor.from_local(x, mesh, [Replicate()]).redistribute(mesh, pl()).to_local() + 1),
        ("redistribute keyword",
         lambda x: DTensor.from_local(x, mesh, [Replicate()]).redistribute(placements=pl()).to_local() + 1),
        ("to_local grad_placements",
         lambda x: DTensor.from_local(x, mesh, [Shard(0)]).to_local(grad_placements=pl()) + 1),
        ("full_tensor grad_placements",
         lambda x: DTensor.from_local(x, mesh, [Shard(0)]).full_tensor(grad_placements=pl()) + 1),
    ]


@pytest.mark.parametrize("outside", [True, False], ids=["passed in", "built inside"])
@pytest.mark.parametrize("kind", list(SEQUENCES))
def test_every_placement_call_folds_any_sequence(mesh, kind, outside):
    for name, fn in _programs(mesh, SEQUENCES[kind], outside):
        x = torch.arange(8.0).reshape(2, 4)
        run = compile_and_run(fn, x, backend="eager")  # fullgraph: a break raises
        torch.testing.assert_close(run.compiled, run.eager, msg=name)
        assert run.graph_breaks == 0 and run.frame_count == 1, name
        assert distributed_objects_in(run.graphs[0]) == [], name


@pytest.mark.parametrize("kind", ["tuple subclass", "list subclass", "pytree class"])
def test_a_changed_sequence_recompiles_and_answers_like_eager(mesh, kind):
    make = SEQUENCES[kind]
    holder = {"placements": make([Shard(0)])}

    def fn(x):
        return DTensor.from_local(x, mesh, holder["placements"]).redistribute(mesh, [Replicate()]).to_local()

    x = torch.arange(8.0).reshape(2, 4)
    run = compile_and_run(fn, x, backend="eager")
    torch.testing.assert_close(run.compiled, run.eager)
    holder["placements"] = make([Shard(1)])
    torch.testing.assert_close(run.compiled_fn(x), fn(x))
    holder["placements"] = make([Replicate()])
    torch.testing.assert_close(run.compiled_fn(x), fn(x))


class Unreadable:
    """Iterable in eager, but its ``__iter__`` breaks the graph."""

    def __iter__(self):
        torch._dynamo.graph_break()
        return iter([Shard(0)])


def test_a_sequence_dynamo_cannot_iterate_is_a_clean_break(mesh):
    from torch._dynamo.exc import Unsupported

    def fn(x, placements):
        return DTensor.from_local(x, mesh, placements).to_local() + 1

    x = torch.ones(2, 4)
    with pytest.raises(Unsupported, match="dynamo_dist: sequence argument cannot be read") as info:
        torch.compile(fn, backend="eager", fullgraph=True)(x, Unreadable())
    assert "Pass a list or tuple of placements" in str(info.value)
    # Without fullgraph it breaks there and still runs like eager.
    torch._dynamo.reset()
    torch.testing.assert_close(torch.compile(fn, backend="eager")(x, Unreadable()), fn(x, Unreadable()))
