"""A tracked type is declared in one place: the design doc's toy ``Tile``,
run as written, folds, guards, keys and rebuilds through that one record;
and the declarations are the table the hooks dispatch on."""

from __future__ import annotations

import dataclasses
import pathlib
import re

import pytest
import torch
from torch._dynamo.exc import Unsupported
from torch.distributed.tensor import Replicate, Shard

from dynamo_dist import _compat as C
from dynamo_dist import tracked_types
from dynamo_dist.caching import describe, keys
from dynamo_dist.testing import make_mesh

pytestmark = [pytest.mark.usefixtures("plugin"), pytest.mark.release]

DESIGN = pathlib.Path(__file__).resolve().parents[2] / "docs" / "design.md"


def _design_example() -> str:
    """The block the design doc's "Adding a tracked type" shows, as written."""
    found = re.findall(r'<!-- skip: next "tests/unit/test_tracked_types.py[^"]*" -->\n```python\n(.*?)```',
                       DESIGN.read_text(), re.S)
    assert len(found) == 1, "docs/design.md shows one tracked-type module for this test to run"
    return found[0]


@pytest.fixture
def tile_module():
    """The design doc's module, imported (its type declared) for one test."""
    namespace = {"__name__": "tile_example"}
    exec(compile(_design_example(), str(DESIGN), "exec"), namespace)
    try:
        yield namespace
    finally:
        tracked_types.retract(namespace["TILE"])


def _spied(module: dict, *fields: str) -> dict[str, list]:
    """The module's record, declared again with ``fields`` recording their calls."""
    record, calls = module["TILE"], {f: [] for f in fields}

    def spy(field):
        real = getattr(record, field)
        return lambda *args: calls[field].append(args) or real(*args)

    tracked_types.retract(record)
    module["TILE"] = tracked_types.declare(dataclasses.replace(record, **{f: spy(f) for f in fields}))
    return calls


def _graph_values(counter) -> list:
    return [n.meta.get("example_value") for gm in counter.graphs for n in gm.graph.nodes if n.op == "placeholder"]


def test_a_declared_type_folds_and_is_guarded_by_its_record(tile_module):
    Tile = tile_module["Tile"]
    calls = _spied(tile_module, "guard")

    def fn(x, tile):
        return x * tile.size() + tile.rows

    counter = torch._dynamo.testing.CompileCounterWithBackend("eager")
    compiled = torch.compile(fn, backend=counter, fullgraph=True)
    x = torch.ones(2)
    torch.testing.assert_close(compiled(x, Tile(2, 3)), fn(x, Tile(2, 3)))
    assert not any(isinstance(v, Tile) for v in _graph_values(counter))  # folded: no Tile in the graph
    compiled(x, Tile(2, 3))  # an equal new tile passes its guard
    assert counter.frame_count == 1
    torch.testing.assert_close(compiled(x, Tile(3, 2)), fn(x, Tile(3, 2)))  # another recompiles
    assert counter.frame_count == 2
    assert [tile for _, tile in calls["guard"]] == [Tile(2, 3), Tile(3, 2)]  # its record's guard, each compile


def test_a_derived_object_of_a_declared_type_is_rebuilt_as_its_record_says(tile_module):
    Tile = tile_module["Tile"]
    calls = _spied(tile_module, "rebuild")

    def fn(x, tile):
        return x + 1, tile.transposed()

    counter = torch._dynamo.testing.CompileCounterWithBackend("eager")
    tile = Tile(2, 3)
    out, flipped = torch.compile(fn, backend=counter, fullgraph=True)(torch.ones(2), tile)
    assert type(flipped) is Tile and flipped == Tile(3, 2) and flipped is not tile
    assert not any(isinstance(v, Tile) for v in _graph_values(counter))
    # Its record's rebuild made it (Dynamo may emit the bytecode more than once).
    assert calls["rebuild"] and all(vt.value == Tile(3, 2) for vt, _ in calls["rebuild"])


def test_a_declared_types_key_identity_and_members_are_its_records(tile_module):
    Tile = tile_module["Tile"]
    assert keys.constant_identity(Tile(2, 3)) == ("Tile", 2, 3)
    assert describe.describe(Tile(2, 3)) == ("distributed", ("Tile", 2, 3))

    def fn(x, tile):
        # Not a row of its table, and no source to read it from: the tracker's own break.
        return x + tile.transposed().__dict__["rows"]

    with pytest.raises(Unsupported, match="dynamo_dist: unsupported Tile member"):
        torch.compile(fn, backend="eager", fullgraph=True)(torch.ones(1), Tile(2, 3))


def test_a_type_taken_out_of_the_table_is_stocks_again(tile_module):
    Tile = tile_module["Tile"]
    tracked_types.retract(tile_module["TILE"])
    try:
        assert tracked_types.find(Tile(1, 1), sourced=True) is None
        assert keys.constant_identity(Tile(1, 1)) is None
    finally:
        tracked_types.declare(tile_module["TILE"])


# -- the plugin's own declarations ------------------------------------------------

def test_every_object_is_covered_by_exactly_one_declaration(world8):
    """Lookups take the first record that covers a value; the records of the
    plugin's types never overlap, so their order does not decide."""
    import torch.distributed as dist
    from torch.distributed.device_mesh import DeviceMesh
    from torch.distributed.tensor import DTensor, distribute_tensor

    class MyShard(Shard):
        pass

    mesh = make_mesh((2, 4), ("dp", "tp"))
    objects = [mesh, mesh["tp"], mesh.get_group(0), Shard(0), Replicate(), MyShard(1), dist.get_rank,
               DTensor.from_local, distribute_tensor, DeviceMesh, Shard, MyShard, dist.ProcessGroup, torch.ones(1),
               3, "tp", (Shard(0),), dist.group]
    for value in objects:
        covering = [r for r in tracked_types.records() if r.covers(value)]
        covering += [r for r in tracked_types.records() if isinstance(value, type) and r.covers_class(value)]
        expected = 0 if isinstance(value, (torch.Tensor, int, str, tuple)) else 1
        if value is dist.group:
            expected = int(C.distributed.STOCK_TRACKS_WORLD_HOLDERS)
        assert len(covering) == expected, (value, [r.name for r in covering])


def test_built_in_and_user_placements_are_two_types(world8):
    class MyShard(Shard):
        pass

    assert tracked_types.find(Shard(0)).name == "built-in placement"
    assert tracked_types.find(MyShard(0)).name == "user placement"
    assert tracked_types.find_class(Shard).class_tracker.__name__ == "PlacementClassVariable"
    assert tracked_types.find_class(MyShard).class_tracker.__name__ == "UserPlacementClassVariable"
    # A user's placement has no key identity: a key cannot hold its class's code.
    assert keys.constant_identity(Shard(0)) is not None and keys.constant_identity(MyShard(0)) is None


def test_the_sourceless_fast_table_is_the_declared_exact_types():
    # spmd_types' values are declared once the program imported spmd_types.
    spmd_values = list(C.spmd.value_classes()) if C.spmd.facts() is not None else []
    expected = [C.distributed.DeviceMesh, *C.distributed.PLACEMENT_TYPES, C.distributed.ProcessGroup, *spmd_values]
    assert sorted(tracked_types.fast_types(), key=repr) == sorted(expected, key=repr)
    table = C.dynamo.SourcelessBuilder._type_handlers
    assert all(getattr(table[t], "__dynamo_dist_handler__", False) for t in expected)


def test_a_record_that_contradicts_itself_fails_when_declared():
    from dynamo_dist.variables.device_mesh import DEVICE_MESH_MEMBERS, DeviceMeshVariable
    from dynamo_dist.variables.placement import PLACEMENT_MEMBERS

    with pytest.raises(TypeError, match="'Widget': members is .* but its tracker reads"):
        tracked_types.TrackedType("Widget", C.distributed.DeviceMesh, DeviceMeshVariable, members=PLACEMENT_MEMBERS)
    with pytest.raises(TypeError, match="ready and not_ready go together"):
        tracked_types.TrackedType("Widget", C.distributed.DeviceMesh, DeviceMeshVariable, members=DEVICE_MESH_MEMBERS,
                                  ready=C.distributed.mesh_is_constructed)
    with pytest.raises(TypeError, match="cache_save and saved_as go together"):
        tracked_types.TrackedType("Widget", C.distributed.DeviceMesh, DeviceMeshVariable, members=DEVICE_MESH_MEMBERS,
                                  cache_save=repr)
    with pytest.raises(ValueError, match="'DeviceMesh' is declared already"):
        tracked_types.declare(tracked_types.TrackedType("DeviceMesh", C.distributed.DeviceMesh, DeviceMeshVariable))

