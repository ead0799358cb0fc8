"""A long job that builds and drops meshes and compiles function after
function: what the plugin keeps (its tables of baked DTensor calls, mesh
fingerprints and live meshes) lives exactly as long as the compiled graphs
that need it, and it keeps no mesh alive that stock torch would let go."""

import gc
import types

import torch
import torch._dynamo
from torch.distributed.device_mesh import DeviceMesh
from torch.distributed.tensor import Replicate, Shard, distribute_tensor

import dynamo_dist
from dynamo_dist import _compat as C
from dynamo_dist import baked_ops, cache_keys
from dynamo_dist.guards import mesh as mesh_guards
from dynamo_dist.testing import make_mesh


def step(x, mesh):
    # A folded query (the mesh guard), a baked DTensor call holding the mesh
    # (redistribute), a DTensor input (its spec guard).
    y = x.redistribute(mesh, [Replicate(), Replicate()]).to_local()
    return y * mesh.size(1)


def _new_function():
    # A new code object, as a job compiling many functions has: Dynamo keeps
    # compiled code per code object, and drops it with the code object.
    code = step.__code__.replace(co_name=f"step_{id(object())}")
    return types.FunctionType(code, step.__globals__)


def _live_meshes() -> int:
    gc.collect()
    return sum(isinstance(o, DeviceMesh) for o in gc.get_objects())


def _job(iterations: int) -> list[int]:
    """Build a mesh, compile a new function on it, drop both; live meshes
    after each iteration (Dynamo keeps every compiled function's code and
    graphs until ``torch._dynamo.reset()``, stock and plugin alike)."""
    live = []
    for _ in range(iterations):
        mesh = make_mesh((2, 4), ("dp", "tp"))  # new process groups each time
        x = distribute_tensor(torch.ones(8, 4), mesh, [Shard(0), Replicate()])
        torch.compile(_new_function(), backend="eager", fullgraph=True)(x, mesh)
        del x, mesh
        live.append(_live_meshes())
    return live


def _plugin_tables() -> tuple[int, int, int]:
    return len(baked_ops._CALLS), len(mesh_guards._KNOWN), len(cache_keys._LIVE_MESHES)


def test_building_and_dropping_meshes_keeps_nothing(world8):
    torch._dynamo.reset()
    before = _live_meshes()
    stock = _job(6)
    torch._dynamo.reset()
    stock_after = _live_meshes()
    with dynamo_dist.enabled():
        plugin = _job(6)
        tables = _plugin_tables()
        torch._dynamo.reset()  # the compiled graphs go, and what the plugin kept for them
        plugin_after = _live_meshes()
        calls, fingerprints, meshes = _plugin_tables()
    # While the graphs live, one entry per live graph: its baked call, its
    # mesh's fingerprint with and without this rank's coordinate (the guard's
    # and the cache key's), its mesh; and fewer meshes kept than stock (whose
    # DTensor spec guard keeps a deep copy of each input's mesh).
    # (2.11 also bakes the argument-less ``to_local()``: one more key, shared.)
    assert tables[0] == 6 + C.STOCK_TO_LOCAL_IS_CLOSURE and tables[1:] == (12, 6), tables
    assert plugin[-1] - plugin[0] <= stock[-1] - stock[0], (plugin, stock)
    # After: no baked call, and entries only for meshes something else keeps
    # (Dynamo's last trace); no mesh kept that stock would have let go.
    assert calls == 0 and meshes <= plugin_after and fingerprints <= 2 * plugin_after, _plugin_tables()
    assert plugin_after - stock_after <= stock_after - before, (before, stock_after, plugin_after)
