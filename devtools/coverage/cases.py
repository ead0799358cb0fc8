"""Named compile cases, run on the plugin and on stock torch side by side.

Each case builds a function and one or more argument lists in a fake world;
``run_case`` compiles it with ``fullgraph=True`` and classifies the outcome.
The tests require every case to be ``ok`` with the plugin; the coverage
page's "where dynamo_dist differs from stock" table (docs/coverage.md) is the
stock outcomes of the same cases.
"""

from __future__ import annotations

import traceback
from dataclasses import dataclass, field
from typing import Any, Callable

import torch
import torch.distributed as dist
from torch.distributed.device_mesh import init_device_mesh
from torch.distributed.tensor import DTensor, distribute_tensor
from torch.distributed.tensor.placement_types import Partial, Replicate, Shard, _StridedShard

import dynamo_dist
from dynamo_dist._compat import observe as O
from dynamo_dist._compat.observe import all_gather_single as gather_single
from dynamo_dist._compat.observe import funcol
from dynamo_dist.diagnostics.compare import difference
from dynamo_dist.diagnostics.graphs import distributed_objects_in
from dynamo_dist.worlds import fake_world, make_mesh

OK = "ok"
CLEAN_BREAK = "clean graph break"


@dataclass(frozen=True)
class Case:
    name: str
    build: Callable[[], tuple[Callable[..., Any], list[tuple]]]
    members: tuple[str, ...] = ()  # "DeviceMesh.size", ... for the coverage table
    # Calls after the first that must reuse the graph (an equal input).
    reuse_calls: tuple[int, ...] = ()
    # Calls that must recompile: an input the graph baked in (a group name
    # inside a collective) changed, though the returned values may not show it.
    recompile_calls: tuple[int, ...] = ()
    # The expected outcome with the plugin: "ok", or CLEAN_BREAK for members
    # that cannot run inside a compiled region.
    expect: str = "ok"
    # Dynamo backend; "aot_eager" where AOTAutograd's handling is the point.
    backend: str = "eager"
    # False where the program has graph breaks with the plugin too (a DTensor
    # mode entered inside): the outcome is then the values alone.
    fullgraph: bool = True


@dataclass
class Outcome:
    case: str
    status: str  # ok | graph break | crash | wrong answer | stale answer | leaks into graph
    detail: str = ""
    frames: int = 0
    leaks: list[str] = field(default_factory=list)


def run_case(case: Case, world: tuple[int, int] = (8, 3)) -> Outcome:
    """Compile and call ``case`` in a fresh fake world; classify what happened."""
    O.reset_dynamo()
    with fake_world(*world):
        fn, calls = case.build()
        counter = O.compile_counter(case.backend)
        compiled = torch.compile(fn, backend=counter, fullgraph=case.fullgraph)
        for i, args in enumerate(calls):
            try:
                want = fn(*args)
            except Exception as e:  # a bad-input case: compiled must raise the same type
                want = e
            frames_before = counter.frame_count
            try:
                got = compiled(*args)
            except O.Unsupported as e:
                if isinstance(want, Exception) and f"{type(want).__name__}(" in str(e):
                    continue  # the eager exception, observed inside Dynamo
                line = _first_line(e)
                status = CLEAN_BREAK if line.startswith("dynamo_dist:") else "graph break"
                return Outcome(case.name, status, line, counter.frame_count)
            except Exception as e:
                if isinstance(want, Exception) and type(e) is type(want):
                    continue
                return Outcome(case.name, "crash", f"{type(e).__name__}: {_first_line(e)}", counter.frame_count)
            if isinstance(want, Exception):
                return Outcome(case.name, "wrong answer", f"eager raised {type(want).__name__}, compiled did not")
            found = difference(want, got, rtol=0.0, atol=0.0)
            if found:
                status = "stale answer" if counter.frame_count == frames_before and i else "wrong answer"
                shown = f"eager {want!r}, compiled {got!r}" if "tensors differ" in found else found
                return Outcome(case.name, status, f"call {i}: {shown}", counter.frame_count)
            if i in case.reuse_calls and counter.frame_count != frames_before:
                return Outcome(case.name, "needless recompile", f"call {i} recompiled", counter.frame_count)
            if i in case.recompile_calls and counter.frame_count == frames_before:
                return Outcome(case.name, "stale graph", f"call {i} reused a graph built for other inputs",
                               counter.frame_count)
        leaks = [leak for gm in counter.graphs for leak in distributed_objects_in(gm)]
        O.reset_dynamo()
        if leaks:
            return Outcome(case.name, "leaks into graph", "; ".join(leaks[:2]), counter.frame_count, leaks)
        return Outcome(case.name, OK, "", counter.frame_count)


def _first_line(e: BaseException) -> str:
    text = str(e).strip().splitlines()
    # A backend's failure opens with the backend object's repr (an address
    # that changes every run): the error it raised is on the next line.
    if len(text) > 1 and text[0].startswith("backend=") and text[0].endswith(" raised:"):
        text = text[1:]
    return text[0][:160] if text else type(e).__name__


# ---------------------------------------------------------------------------
# The cases. Each ``build`` runs inside the fake world (8 ranks, rank 3).


def _mesh2d():

    return make_mesh((2, 4), ("dp", "tp"))


def _x():
    return torch.zeros(1)


def _mesh_queries():
    def fn(x, m):
        return x + m.ndim, (m.shape, m.size(), m.size(1), m.size(mesh_dim=0), m.mesh_dim_names,
                            m.device_type, len(m.shape), m == m, m != m, hash(m) == hash(m))

    m = _mesh2d()
    return fn, [(_x(), m)]


def _mesh_ranks():
    def fn(x, m):
        return x + m.get_rank(), (m.get_local_rank("tp"), m.get_local_rank(0), m.get_local_rank(mesh_dim="dp"),
                                  m.get_coordinate())

    return fn, [(_x(), _mesh2d())]


def _submesh():
    def fn(x, m):
        return x + m["tp"].size(), m["dp", "tp"].shape, m[("dp", "tp")].mesh_dim_names

    return fn, [(_x(), _mesh2d())]


def _flatten():
    def fn(x, m):
        f = m._flatten("dp_tp")
        return x + f.size(), f.mesh_dim_names

    return fn, [(_x(), _mesh2d())]


def _mesh_groups():
    def fn(x, m):
        g = m.get_group("tp")
        return x + g.size(), (g.rank(), m.get_group(0).size(), len(m.get_all_groups()))

    return fn, [(_x(), _mesh2d())]


def _submesh_escapes():
    def fn(x, m):
        return x + 1, m["tp"]

    return fn, [(_x(), _mesh2d())]


def _placements_built():

    def fn(x):
        ps = [Shard(0), Shard(dim=1), Replicate(), Partial(), Partial("max")]
        return x + 1, tuple((p.is_shard(), p.is_shard(1), p.is_replicate(), p.is_partial()) for p in ps), \
            ps[0].dim, ps[4].reduce_op, ps[0] == Shard(0), ps[0] != ps[1], isinstance(ps[0], Shard)

    return fn, [(_x(),)]


def _strided_shard():

    def fn(x):
        s = _StridedShard(0, split_factor=2)
        return x + s.split_factor, s.dim, s.is_shard()

    return fn, [(_x(),)]


def _placement_escapes():

    def fn(x):
        return x + 1, Shard(1), Partial("max"), _StridedShard(0, split_factor=2)

    return fn, [(_x(),)]


def _placement_in_and_dict():

    def fn(x, ps):
        d = {Shard(0): 1, Replicate(): 2}
        return x + d[ps[0]], Shard(0) in ps, ps.index(Replicate()), hash(ps[0]) == hash(Shard(0))

    return fn, [(_x(), (Shard(0), Replicate()))]


def _placement_change():

    def fn(x, p):
        return x + (p.dim if p.is_shard() else -1)

    return fn, [(_x(), Shard(0)), (_x(), Shard(0)), (_x(), Shard(1)), (_x(), Replicate())]


def _pg_queries():

    def fn(x, pg):
        return x + pg.size(), (pg.rank(), pg.group_name, pg._get_backend_name(), dist.get_rank(pg),
                               dist.get_world_size(pg), dist.get_process_group_ranks(pg))

    return fn, [(_x(), _mesh2d().get_group("tp"))]


def _pg_change():

    def fn(x, pg):
        return x + pg.size() + dist.get_world_size(pg) * 10 + dist.get_process_group_ranks(pg)[-1] * 100

    m = _mesh2d()
    return fn, [(_x(), m.get_group("dp")), (_x(), m.get_group("tp"))]


def _world_queries():

    def fn(x):
        return x + dist.get_rank(), dist.get_world_size(), dist.group.WORLD.size()

    return fn, [(_x(),)]


def _funcol():

    def fn(x, pg, m):
        gathered = gather_single(x, 0, pg)
        scattered = funcol.reduce_scatter_tensor(gathered, "sum", 0, pg)
        swapped = funcol.all_to_all_single(gathered, None, None, pg)
        # The reduce-scatter's values only by shape: 2.11 / 2.12's fake process
        # group leaves its output unwritten (undefined in eager and compiled).
        return (funcol.all_reduce(x, "sum", pg) + funcol.all_reduce(x, "sum", (m, 1)),
                funcol.all_gather_tensor(x, 0, pg).shape, swapped.shape, scattered.shape)

    m = _mesh2d()
    return fn, [(torch.ones(4), m.get_group("tp"), m)]


def _mesh_other_groups():

    def fn(x, m):
        return funcol.all_reduce(x, "sum", (m, 1))

    return fn, [(_x(), _mesh2d()), (_x(), _mesh2d())]


def _mesh_equal_new_object():
    def fn(x, m):
        return x + m.size() + m.get_local_rank()

    root = _mesh2d()
    return fn, [(_x(), root["tp"]), (_x(), root["tp"])]


def _mesh_ndim_change():

    def fn(x, m):
        return x + m.ndim + m.size(m.ndim - 1)

    return fn, [(_x(), make_mesh((8,))), (_x(), make_mesh((2, 4))), (_x(), make_mesh((2, 2, 2)))]


def _mesh_bad_input():
    def fn(x, m):
        return x + m.size(5)

    return fn, [(_x(), _mesh2d())]


def _bad_placement():

    def fn(x):
        return x + Shard("x").dim

    return fn, [(_x(),)]


def _user_placement():

    class Halves(Shard):
        def parts(self):
            return 2 if self.is_shard() else 1

    def fn(x, p):
        return x + p.parts() + p.dim

    return fn, [(_x(), Halves(0))]


def _mesh_tensor():
    def fn(x, m):
        return x + m.mesh.sum()

    return fn, [(_x(), _mesh2d())]


def _group_more():

    def fn(x, pg):
        return x + dist.get_group_rank(pg, dist.get_global_rank(pg, 0)), (
            pg.group_desc, pg.name(), dist.get_backend(pg), dist.is_initialized())

    return fn, [(_x(), _mesh2d().get_group("tp"))]


def _group_collective_method():
    def fn(x, pg):
        pg.barrier()
        return x + 1

    return fn, [(_x(), _mesh2d().get_group("tp"))]


def _init_mesh_inside():

    def fn(x):
        return x + init_device_mesh("cpu", (8,)).ndim

    return fn, [(_x(),)]


def _new_group_inside():

    def fn(x):
        return x + dist.new_group([0, 1]).size()

    return fn, [(_x(),)]


# -- DTensor ----------------------------------------------------------------


def _dtensor(shape=(8, 4), placements=None, mesh=None):

    mesh = mesh or _mesh2d()
    placements = placements or (Replicate(), Shard(0))
    return distribute_tensor(torch.arange(float(torch.Size(shape).numel())).reshape(shape), mesh, placements)


def _dtensor_attributes():
    def fn(d):
        scale = d.device_mesh.get_local_rank("tp") + len(d._spec.placements) + d._spec.mesh.size()
        if d.placements[1].is_shard(0):
            scale = scale + 100
        return d.to_local() * scale

    return fn, [(_dtensor(),), (_dtensor(placements=_replicated()),)]


def _replicated():

    return (Replicate(), Replicate())


def _dtensor_ops():

    def fn(x, mesh):
        tp = mesh["tp"]
        d = DTensor.from_local(x, tp, [Shard(0)], run_check=False)
        r = d.redistribute(tp, [Replicate()], async_op=False)
        p = DTensor.from_local(x, device_mesh=tp, placements=(Partial(),), shape=x.shape, stride=x.stride())
        return r.to_local(grad_placements=[Replicate()])[:2] + p.full_tensor() + r.full_tensor()[:2]

    return fn, [(torch.ones(2, 3), _mesh2d())]


class _PlacementTuple(tuple):
    """A user's tuple subclass of placements."""


class _PlacementList(list):
    """A user's list subclass of placements."""


def _placement_sequences():

    def fn(x, mesh, shard):
        tp = mesh["tp"]
        d = DTensor.from_local(x, tp, shard, run_check=False)
        r = d.redistribute(tp, placements=_PlacementList([Replicate()]))
        return r.to_local(grad_placements=_PlacementTuple((Replicate(),))) + 1

    return fn, [(torch.ones(2, 3), _mesh2d(), _PlacementTuple((Shard(0),)))]


def _dtensor_run_check():

    def fn(x, mesh):
        return DTensor.from_local(x, mesh, [Replicate(), Shard(1)], run_check=True).to_local() * 2

    return fn, [(torch.ones(2, 3), _mesh2d())]


def _distribute_inside():

    def fn(x, mesh):
        # The fake world moves no data: compare what the layout decides.
        d = distribute_tensor(x, mesh, [Replicate(), Shard(0)])
        return d.to_local().shape, d.placements, d.shape

    return fn, [(torch.ones(8, 3), _mesh2d())]


def _dtensor_view_returned():
    def fn(d):
        return d.t(), d.view(-1), d.unsqueeze(0)

    return fn, [(_dtensor(),)]


def _act_inputs():
    """The same function called with the AsyncCollectiveTensor a functional
    collective returns, then with a plain tensor: one graph is enough (the
    value is waited before the graph reads it). Stock 2.13 recompiles."""

    def fn(x):
        return x * 2 + 1

    m = _mesh2d()
    return fn, [(funcol.all_reduce(torch.arange(4.0), "sum", m.get_group("tp")),), (torch.arange(4.0) + 5,)]


def _dtensor_act_local():
    """As ``_act_inputs``, with a DTensor whose local tensor is sometimes an
    AsyncCollectiveTensor."""

    def fn(d):
        return (d * 2 + 1).to_local()

    m = _mesh2d()
    act = funcol.all_reduce(torch.arange(4.0), "sum", m.get_group("tp"))
    return fn, [(DTensor.from_local(local, m, [Replicate(), Replicate()], run_check=False),)
                for local in (act, torch.arange(4.0) + 5)]


def _dtensor_mesh_other_groups():

    def fn(x, m):
        return DTensor.from_local(x, m["tp"], [Shard(0)]).redistribute(m["tp"], [Replicate()]).to_local()

    # Two meshes of the same shape: each init_device_mesh makes new groups.
    return fn, [(torch.ones(1, 2), _mesh2d()), (torch.ones(1, 2), _mesh2d())]


def _strided_shard_redistribute():

    def fn(x, mesh):
        tp = mesh["tp"]
        d = DTensor.from_local(x, tp, [_StridedShard(0, split_factor=2)], run_check=False)
        return d.redistribute(tp, [Replicate()]).to_local().shape

    return fn, [(torch.ones(4, 3), _mesh2d())]


# A sequence-parallel activation (b, s, h) sharded on s, flattened to tokens:
# eager DTensor makes x.view(-1, 4) _StridedShard(0, split_factor=2) (2.12+;
# 2.11's eager refuses to flatten a sharded dim).


def _sharded_activation():

    tp = _mesh2d()["tp"]
    return tp, _dtensor((2, 8, 4), (Shard(1),), tp)


def _sharded_view_gathered():

    tp, x = _sharded_activation()
    w = _dtensor((4, 4), (Replicate(),), tp)

    def fn(x, w):
        return (x.view(-1, 4) @ w).redistribute(tp, [Replicate()]).to_local().sum()

    return fn, [(x, w)]


def _sharded_view_returned():

    def fn(x):
        return x.view(-1, 4) * 2

    return fn, [(_sharded_activation()[1],)]


def _sharded_view_passed_in():

    def fn(y):
        return y.full_tensor() * 2

    return fn, [(_sharded_activation()[1].view(-1, 4),)]


def _sharded_view_and_back():

    def fn(x):
        return x.view(-1, 4).view(2, 8, 4).full_tensor()

    return fn, [(_sharded_activation()[1],)]


def _from_local_requires_grad_returned():
    """A DTensor made by ``from_local`` from a tensor that requires grad, and
    returned: the graph that ends just after a TP input hook."""
    tp = _mesh2d()["tp"]

    def fn(x):
        return DTensor.from_local(x, tp, [Shard(0)], run_check=False) * 2

    return fn, [(torch.ones(2, 4, requires_grad=True),)]


def _from_local_requires_grad_submesh_inside():
    """As ``_from_local_requires_grad_returned``, on a submesh taken inside."""
    m = _mesh2d()

    def fn(x):
        return DTensor.from_local(x, m["tp"], [Shard(0)], run_check=False) * 2

    return fn, [(torch.ones(2, 4, requires_grad=True),)]


def _tp_mlp_dynamic_length():
    """A TP MLP (colwise, rowwise) on (batch, seq, dim) with the sequence
    length changing, forward with grad (AOTAutograd traces the joint graph):
    static, then dynamic, then reused."""
    from torch.distributed.tensor.parallel import ColwiseParallel, RowwiseParallel, parallelize_module

    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.ReLU(), torch.nn.Linear(16, 8))
    model = parallelize_module(model, _mesh2d()["tp"], {"0": ColwiseParallel(), "2": RowwiseParallel()})
    return model, [(torch.ones(2, seq, 8),) for seq in (4, 6, 8)]


def _act_input_requires_grad():
    """An AsyncCollectiveTensor that requires grad (``redistribute(...,
    async_op=True).to_local()``) passed in: the output requires grad."""
    m = _mesh2d()["tp"]
    x = torch.ones(2, 4, requires_grad=True)
    t = DTensor.from_local(x, m, [Shard(0)], run_check=False).redistribute(m, [Replicate()], async_op=True).to_local()

    def fn(t):
        return t.sin() * 2

    return fn, [(t,)]


def _loss_parallel_inside():
    from torch.distributed.tensor.parallel import loss_parallel

    m = _mesh2d()["tp"]
    target = torch.zeros(4, dtype=torch.int64)

    def fn(x):
        with loss_parallel():
            return torch.nn.functional.cross_entropy(DTensor.from_local(x, m, [Shard(1)], run_check=False),
                                                     target).to_local()

    return fn, [(torch.ones(4, 2, requires_grad=True),)]


def _implicit_replication_inside():
    from torch.distributed.tensor.experimental import implicit_replication

    m = _mesh2d()["tp"]
    wide = torch.ones(8, 2)

    def fn(x):
        with implicit_replication():
            return (DTensor.from_local(x, m, [Shard(0)], run_check=False) * wide + 1).to_local()

    return fn, [(torch.ones(2, 2, requires_grad=True),)]


CASES: list[Case] = [
    Case("mesh shape/size/names/==/hash", _mesh_queries,
         ("DeviceMesh.ndim", "DeviceMesh.shape", "DeviceMesh.size", "DeviceMesh.mesh_dim_names",
          "DeviceMesh.device_type")),
    Case("mesh rank/local rank/coordinate", _mesh_ranks,
         ("DeviceMesh.get_rank", "DeviceMesh.get_local_rank", "DeviceMesh.get_coordinate")),
    Case("submesh mesh['tp'], mesh['dp','tp']", _submesh, ("DeviceMesh.__getitem__",)),
    Case("mesh._flatten", _flatten, ("DeviceMesh._flatten",)),
    Case("mesh.get_group / get_all_groups", _mesh_groups, ("DeviceMesh.get_group", "DeviceMesh.get_all_groups")),
    Case("submesh escapes (returned)", _submesh_escapes),
    Case("placements built and queried", _placements_built,
         ("Placement.is_shard", "Placement.is_replicate", "Placement.is_partial", "Placement.dim",
          "Placement.reduce_op")),
    Case("_StridedShard.split_factor", _strided_shard, ("Placement.split_factor",)),
    Case("placements escape (returned)", _placement_escapes),
    Case("placements: in, index, dict key", _placement_in_and_dict),
    Case("placement input changes", _placement_change, reuse_calls=(1,)),
    Case("process group queries", _pg_queries,
         ("ProcessGroup.rank", "ProcessGroup.size", "ProcessGroup.group_name", "ProcessGroup._get_backend_name",
          "torch.distributed.get_rank", "torch.distributed.get_world_size",
          "torch.distributed.get_process_group_ranks")),
    Case("different process group passed", _pg_change),
    Case("dist.get_rank()/group.WORLD", _world_queries),
    Case("functional collectives on tracked groups", _funcol),
    Case("same-shape mesh, other groups (funcol)", _mesh_other_groups, recompile_calls=(1,)),
    Case("equal new mesh object reuses graph", _mesh_equal_new_object, reuse_calls=(1,)),
    Case("mesh ndim changes across calls", _mesh_ndim_change),
    Case("bad input: mesh.size(5)", _mesh_bad_input),
    Case("bad input: Shard('x')", _bad_placement),
    Case("user-defined Placement subclass", _user_placement),
    Case("ProcessGroup.group_desc/name, dist.get_backend/...", _group_more,
         ("ProcessGroup.group_desc", "ProcessGroup.name", "torch.distributed.get_backend",
          "torch.distributed.is_initialized", "torch.distributed.get_group_rank",
          "torch.distributed.get_global_rank")),
    Case("mesh.mesh (tensor)", _mesh_tensor, ("DeviceMesh.mesh",)),
    Case("pg.barrier() (eager collective)", _group_collective_method, ("ProcessGroup.barrier",), expect=CLEAN_BREAK),
    Case("init_device_mesh inside", _init_mesh_inside, ("torch.distributed.init_device_mesh",), expect=CLEAN_BREAK),
    Case("dist.new_group inside", _new_group_inside, ("torch.distributed.new_group",), expect=CLEAN_BREAK),
    Case("DTensor placements/device_mesh/_spec", _dtensor_attributes,
         ("DTensor.placements", "DTensor.device_mesh", "DTensor._spec")),
    Case("DTensor from_local/redistribute/to_local/full_tensor", _dtensor_ops,
         ("DTensor.from_local", "DTensor.redistribute", "DTensor.to_local", "DTensor.full_tensor")),
    Case("placements in a tuple/list subclass (DTensor calls)", _placement_sequences),
    Case("DTensor.from_local(run_check=True)", _dtensor_run_check),
    Case("distribute_tensor inside", _distribute_inside, ("DTensor.distribute_tensor",)),
    Case("view of a DTensor input returned (aot_eager)", _dtensor_view_returned, backend="aot_eager"),
    Case("from_local of a tensor that requires grad, returned (aot_eager)", _from_local_requires_grad_returned,
         backend="aot_eager"),
    Case("the same on a submesh taken inside (aot_eager)", _from_local_requires_grad_submesh_inside,
         backend="aot_eager"),
    Case("TP MLP, changing sequence length, with grad (aot_eager)", _tp_mlp_dynamic_length, reuse_calls=(2,),
         backend="aot_eager"),
    Case("input an AsyncCollectiveTensor that requires grad (aot_eager)", _act_input_requires_grad,
         backend="aot_eager"),
    Case("loss_parallel entered inside (aot_eager)", _loss_parallel_inside, ("DTensor modes.loss_parallel",),
         backend="aot_eager", fullgraph=False),
    Case("implicit_replication entered inside (aot_eager)", _implicit_replication_inside,
         ("DTensor modes.implicit_replication",), backend="aot_eager", fullgraph=False),
    Case("_StridedShard -> Replicate", _strided_shard_redistribute),
    Case("sharded view gathered in the graph (aot_eager)", _sharded_view_gathered, backend="aot_eager"),
    Case("sharded view returned (aot_eager)", _sharded_view_returned, backend="aot_eager"),
    Case("sharded view passed in (aot_eager)", _sharded_view_passed_in, backend="aot_eager"),
    Case("sharded view and back (aot_eager)", _sharded_view_and_back, backend="aot_eager"),
    Case("same-shape mesh, other groups (DTensor)", _dtensor_mesh_other_groups, recompile_calls=(1,)),
    # "Needless recompile" when the plain tensor after an AsyncCollectiveTensor
    # compiles a second frame (the frame count the issue measures).
    Case("input sometimes an AsyncCollectiveTensor (aot_eager)", _act_inputs, reuse_calls=(1,), backend="aot_eager"),
    Case("DTensor local sometimes an AsyncCollectiveTensor (aot_eager)", _dtensor_act_local, reuse_calls=(1,),
         backend="aot_eager"),
]


def run_all(plugin: bool) -> list[Outcome]:
    """Every case with the plugin installed (or not); restores the prior state."""

    was = dynamo_dist.is_installed()
    (dynamo_dist.install if plugin else dynamo_dist.uninstall)()
    try:
        outcomes = []
        for case in CASES:
            try:
                outcomes.append(run_case(case))
            except Exception as e:  # a failure outside the compiled call itself
                outcomes.append(Outcome(case.name, "crash", f"{type(e).__name__}: {e}"[:200]))
                traceback.print_exc()
        return outcomes
    finally:
        (dynamo_dist.install if was else dynamo_dist.uninstall)()
