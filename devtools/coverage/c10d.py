"""The torch.distributed calls a user can put in a compiled region, each in a
small compiled step, run on the plugin and on stock torch side by side: the
measured column of the coverage page's torch.distributed table.

Each case compiles its step with ``fullgraph=True`` in a fake 4-rank world
(rank 1), so a graph break is reported with its reason and nothing runs
eagerly around it; a step that compiles must give eager's shapes (a fake
world's collectives move no data: values are judged on gloo, in
``tests/spawned/test_c10d_values.py``) and, for a collective, hold a
functional collective in its graph. ``member`` names the row of the code's
tables (``variables.ALL_TABLES``) the case exercises.
"""

from __future__ import annotations

import contextlib
import datetime
import traceback
from dataclasses import dataclass
from typing import Any, Callable

import torch
import torch.distributed as dist

import dynamo_dist
from dynamo_dist._compat import observe as O
from dynamo_dist.diagnostics.compare import difference
from dynamo_dist.diagnostics.graphs import collectives_in
from dynamo_dist.worlds import fake_world

OK = "ok"
CLEAN_BREAK = "clean graph break"
NOT_IN_RELEASE = "not in this release"

# What a case expects with the plugin: compiled, with functional collectives
# in the graph, or compiled (a query), or a clean dynamo_dist break; or, for
# a call traced as stock traces it, stock's ``ok`` where stock compiles it
# and a clean break where stock does not.
TRACED, FOLDED, AS_STOCK = "traced", "folded", "as stock"


@dataclass(frozen=True)
class CallCase:
    name: str
    member: str  # "torch.distributed.broadcast", "ProcessGroup.allreduce", "Work.wait"
    # -> (step, args) in the fake world; called twice (eager, compiled).
    build: Callable[[], tuple[Callable[..., Any], tuple]]
    expect: str = TRACED  # TRACED, FOLDED or CLEAN_BREAK
    # With torch's switch for point-to-point tracing on.
    p2p: bool = False
    # Whether the fake backend runs the step eagerly (its values are judged
    # on gloo either way).
    eager_runs: bool = True


def expected_status(case: CallCase, stock: "CallOutcome") -> str:
    """The status a case must have with the plugin (``stock``: the same
    case's outcome on stock torch)."""
    if case.expect == AS_STOCK:
        return OK if stock.status == OK else CLEAN_BREAK
    return CLEAN_BREAK if case.expect == CLEAN_BREAK else OK


def as_expected(case: CallCase, outcome: "CallOutcome", stock: "CallOutcome") -> bool:
    """Whether the plugin's outcome meets the case (a call this release lacks
    meets every case)."""
    return outcome.status in (expected_status(case, stock), NOT_IN_RELEASE)


@dataclass
class CallOutcome:
    case: str
    status: str  # ok | clean graph break | graph break | crash | wrong shapes | no collective | not in this release
    detail: str = ""
    collectives: int = 0


@contextlib.contextmanager
def _p2p_switch(on: bool):
    config = O.dynamo_config()
    was = getattr(config, O.P2P_SWITCH)
    setattr(config, O.P2P_SWITCH, on)
    try:
        yield
    finally:
        setattr(config, O.P2P_SWITCH, was)


def _first_line(e: BaseException) -> str:
    text = str(e).strip().splitlines()
    if len(text) > 1 and text[0].startswith("backend=") and text[0].endswith(" raised:"):
        text = text[1:]
    return text[0][:160] if text else type(e).__name__


def run_call_case(case: CallCase) -> CallOutcome:
    """Compile and call ``case`` in a fresh fake world; classify what happened."""
    owner, name = case.member.rsplit(".", 1)
    if not hasattr({"torch.distributed": dist, "ProcessGroup": dist.ProcessGroup, "Work": dist.Work}[owner], name) \
            or case.p2p and not O.HAS_P2P_SWITCH:
        return CallOutcome(case.name, NOT_IN_RELEASE)
    O.reset_dynamo()
    with fake_world(4, 1), _p2p_switch(case.p2p) if O.HAS_P2P_SWITCH else contextlib.nullcontext():
        try:
            fn, args = case.build()
            counter = O.compile_counter("eager")
            try:
                got = torch.compile(fn, backend=counter, fullgraph=True)(*args)
            except O.Unsupported as e:
                line = _first_line(e)
                status = CLEAN_BREAK if line.startswith("dynamo_dist:") else "graph break"
                return CallOutcome(case.name, status, line)
            except Exception as e:
                return CallOutcome(case.name, "crash", f"{type(e).__name__}: {_first_line(e)}")
            collectives = sum(len(collectives_in(gm)) for gm in counter.graphs)
            if case.expect == TRACED and not collectives:
                return CallOutcome(case.name, "no collective", "compiled without a collective in its graph")
            if not case.eager_runs:
                return CallOutcome(case.name, OK, "", collectives)
            fn, args = case.build()
            try:
                want = fn(*args)
            except Exception as e:
                return CallOutcome(case.name, "crash", f"eager raised {type(e).__name__}, compiled did not")
            wrong = difference(want, got, values=case.expect != FOLDED)
            if wrong is not None:
                return CallOutcome(case.name, "wrong shapes", wrong[:160], collectives)
            return CallOutcome(case.name, OK, "", collectives)
        finally:
            O.reset_dynamo()


def run_all_calls(plugin: bool) -> list[CallOutcome]:
    """Every case with the plugin installed (or not); restores the prior state."""
    was = dynamo_dist.is_installed()
    (dynamo_dist.install if plugin else dynamo_dist.uninstall)()
    try:
        outcomes = []
        for case in CALL_CASES:
            try:
                outcomes.append(run_call_case(case))
            except Exception as e:  # a failure outside the compiled call itself
                outcomes.append(CallOutcome(case.name, "crash", f"{type(e).__name__}: {e}"[:200]))
                traceback.print_exc()
        return outcomes
    finally:
        (dynamo_dist.install if was else dynamo_dist.uninstall)()


# ---------------------------------------------------------------------------
# The steps. Each ``build`` runs inside the fake world (4 ranks, rank 1).

def _x():
    return torch.arange(8.0).reshape(4, 2)


def _step(body: Callable[..., Any], *extra: Callable[[], Any]) -> Callable[[], tuple]:
    """A case's build: ``body(x, *extra())`` on a fresh input."""
    def build():
        return body, (_x(), *(make() for make in extra))
    return build


def _world():
    return dist.group.WORLD


# -- queries --

def _get_rank(x):
    return x + dist.get_rank()


def _get_world_size(x):
    return x + dist.get_world_size()


def _get_process_group_ranks(x, g):
    return x + dist.get_process_group_ranks(g)[-1]


def _get_backend(x):
    return x + len(dist.get_backend())


def _is_initialized(x):
    return x + dist.is_initialized()


def _get_group_rank(x, g):
    return x + dist.get_group_rank(g, 1)


def _get_global_rank(x, g):
    return x + dist.get_global_rank(g, 1)


def _get_backend_config(x):
    return x + len(dist.get_backend_config())


def _get_default_backend_for_device(x):
    return x + len(dist.get_default_backend_for_device("cpu"))


def _supports_complex(x):
    return x + dist.supports_complex(dist.ReduceOp.MAX)


def _is_available(x):
    return x + dist.is_available()


def _is_backend_available(x):
    return x + dist.is_backend_available("gloo")


def _backend_available(backend: str) -> Callable[..., Any]:
    def step(x):
        return x + getattr(dist, f"is_{backend}_available")()
    step.__name__ = f"_is_{backend}_available"
    return step


def _is_torchelastic_launched(x):
    return x + dist.is_torchelastic_launched()


def _get_node_local_rank(x):
    return x + dist.get_node_local_rank(fallback_rank=3)


# -- collectives with a functional form --

def _all_reduce(x):
    t = x * 2
    dist.all_reduce(t)
    return t + 1


def _all_reduce_max(x):
    t = x * 2
    dist.all_reduce(t, op=dist.ReduceOp.MAX)
    return t + 1


def _all_reduce_async(x):
    t = x * 2
    work = dist.all_reduce(t, async_op=True)
    y = x.sin()
    work.wait()
    return t + y


def _broadcast(x):
    t = x * 2
    dist.broadcast(t, src=0)
    return t + 1


def _broadcast_async(x):
    t = x * 2
    dist.broadcast(t, src=0, async_op=True).wait()
    return t + 1


def _all_gather(x):
    outs = [torch.empty_like(x) for _ in range(4)]
    dist.all_gather(outs, x * 2)
    return torch.cat(outs).shape


def _all_gather_async(x):
    outs = [torch.empty_like(x) for _ in range(4)]
    dist.all_gather(outs, x * 2, async_op=True).wait()
    return torch.cat(outs).shape


def _all_gather_into_tensor(x):
    out = x.new_empty(16, 2)
    dist.all_gather_into_tensor(out, x * 2)
    return out.shape


def _all_gather_single(x):
    out = x.new_empty(16, 2)
    dist.all_gather_single(out, x * 2)
    return out.shape


def _reduce_scatter(x):
    out = x.new_empty(1, 2)
    dist.reduce_scatter(out, list((x * 2).chunk(4)))
    return out.shape


def _reduce_scatter_tensor(x):
    out = x.new_empty(1, 2)
    dist.reduce_scatter_tensor(out, x * 2)
    return out.shape


def _reduce_scatter_single(x):
    out = x.new_empty(1, 2)
    dist.reduce_scatter_single(out, x * 2)
    return out.shape


def _all_to_all_single(x):
    out = torch.empty_like(x)
    dist.all_to_all_single(out, x * 2)
    return out.shape


def _all_to_all(x):
    ins = list((x * 2).chunk(4))
    outs = [torch.empty_like(t) for t in ins]
    dist.all_to_all(outs, ins)
    return torch.cat(outs).shape


def _all_to_all_async(x):
    ins = list((x * 2).chunk(4))
    outs = [torch.empty_like(t) for t in ins]
    dist.all_to_all(outs, ins, async_op=True).wait()
    return torch.cat(outs).shape


def _all_reduce_coalesced(x):
    a, b = x * 2, x + 1
    dist.all_reduce_coalesced([a, b])
    return a + b


def _all_gather_coalesced(x):
    outs = [torch.empty_like(x) for _ in range(4)]
    dist.all_gather_coalesced([outs], [x * 2])
    return torch.cat(outs).shape


# -- point-to-point --

def _isend(x):
    t = x * 2
    dist.isend(t, dst=0).wait()
    return t + 1


def _irecv(x):
    t = torch.empty_like(x)
    dist.irecv(t, src=0).wait()
    return t.shape


def _send(x):
    t = x * 2
    dist.send(t, dst=0)
    return t + 1


def _recv(x):
    t = torch.empty_like(x)
    dist.recv(t, src=0)
    return t.shape


def _batch_isend_irecv(x):
    t, r = x * 2, torch.empty_like(x)
    for work in dist.batch_isend_irecv([dist.P2POp(dist.isend, t, 0), dist.P2POp(dist.irecv, r, 0)]):
        work.wait()
    return r.shape


# -- no functional form --

def _reduce(x):
    t = x * 2
    dist.reduce(t, dst=0)
    return t


def _gather(x):
    dist.gather(x * 2, None, dst=0)
    return x


def _gather_into_tensor(x):
    dist.gather_into_tensor(x * 2, None, dst=0)
    return x


def _gather_single(x):
    dist.gather_single(x * 2, None, dst=0)
    return x


def _scatter(x):
    out = torch.empty_like(x)
    dist.scatter(out, None, src=0)
    return out


def _all_gather_object(x):
    objs = [None] * 4
    dist.all_gather_object(objs, 1)
    return x + 1


def _gather_object(x):
    dist.gather_object(1, None, dst=0)
    return x + 1


def _broadcast_object_list(x):
    objs = [1]
    dist.broadcast_object_list(objs, src=0)
    return x + objs[0]


def _scatter_object_list(x):
    out = [None]
    dist.scatter_object_list(out, None, src=0)
    return x + 1


def _send_object_list(x):
    dist.send_object_list([1], dst=0)
    return x + 1


def _recv_object_list(x):
    objs = [None]
    dist.recv_object_list(objs, src=0)
    return x + 1


def _barrier(x):
    dist.barrier()
    return x + 1


def _monitored_barrier(x):
    dist.monitored_barrier()
    return x + 1


def _breakpoint(x):
    dist.breakpoint()
    return x + 1


def _get_backend_impl(x):
    dist.get_backend_impl()
    return x + 1


def _get_pg_count(x):
    return x + dist.get_pg_count()


def _get_debug_level(x):
    return x + (dist.get_debug_level() == dist.DebugLevel.OFF)


def _set_timeout(x, timeout):
    dist.set_timeout(timeout)
    return x + 1


def _minute():
    return datetime.timedelta(seconds=60)


def _record_comm(x):
    with dist.record_comm("step"):
        t = x * 2
        dist.all_reduce(t)
    return t


def _init_device_mesh(x):
    return x + dist.init_device_mesh("cpu", (4,)).ndim


def _new_group(x):
    return x + dist.new_group([0, 1]).size()


def _new_subgroups(x):
    dist.new_subgroups(group_size=2)
    return x + 1


def _new_subgroups_by_enumeration(x):
    dist.new_subgroups_by_enumeration([[0, 1], [2, 3]])
    return x + 1


def _split_group(x):
    dist.split_group(split_ranks=[[0, 1], [2, 3]])
    return x + 1


def _shrink_group(x):
    dist.shrink_group([3])
    return x + 1


def _init_process_group(x):
    dist.init_process_group("fake", rank=1, world_size=4)
    return x + 1


def _destroy_process_group(x):
    dist.destroy_process_group()
    return x + 1


# -- Work --

def _work_member(name: str) -> Callable[..., Any]:
    def step(x):
        t = x * 2
        work = dist.all_reduce(t, async_op=True)
        getattr(work, name)()
        return t + 1
    step.__name__ = f"_work_{name}"
    return step


def _live_work(x, work):
    work.wait()
    return x + 1


def _eager_work():
    return dist.all_reduce(torch.ones(1), async_op=True)


# -- ProcessGroup methods --

def _pg_allreduce(x, g):
    t = x * 2
    g.allreduce([t]).wait()
    return t + 1


def _pg_allreduce_max(x, g):
    t = x * 2
    g.allreduce([t], dist.ReduceOp.MAX).wait()
    return t + 1


def _pg_allreduce_coalesced(x, g):
    a, b = x * 2, x + 1
    g.allreduce_coalesced([a, b]).wait()
    return a + b


def _pg_broadcast(x, g):
    t = x * 2
    g.broadcast(t, 0).wait()
    return t + 1


def _pg_allgather(x, g):
    outs = [torch.empty_like(x) for _ in range(4)]
    g.allgather([outs], [x * 2]).wait()
    return torch.cat(outs).shape


def _pg_reduce_scatter(x, g):
    out = x.new_empty(1, 2)
    g.reduce_scatter([out], [list((x * 2).chunk(4))]).wait()
    return out.shape


def _pg_alltoall(x, g):
    ins = list((x * 2).chunk(4))
    outs = [torch.empty_like(t) for t in ins]
    g.alltoall(outs, ins).wait()
    return torch.cat(outs).shape


def _pg_alltoall_base(x, g):
    out = torch.empty_like(x)
    g.alltoall_base(out, x * 2, [1, 1, 1, 1], [1, 1, 1, 1]).wait()
    return out.shape


def _pg_allgather_into_tensor_coalesced(x, g):
    out = x.new_empty(16, 2)
    g.allgather_into_tensor_coalesced([out], [x * 2]).wait()
    return out.shape


def _pg_reduce_scatter_tensor_coalesced(x, g):
    out = x.new_empty(1, 2)
    g.reduce_scatter_tensor_coalesced([out], [x * 2]).wait()
    return out.shape


def _pg_method(name: str, *args: Any) -> Callable[..., Any]:
    def step(x, g):
        t = x * 2
        getattr(g, name)(*args)
        return t + 1
    step.__name__ = f"_pg_{name}"
    return step


_D = "torch.distributed."

CALL_CASES: list[CallCase] = [
    # queries
    CallCase("dist.get_rank()", _D + "get_rank", _step(_get_rank), FOLDED),
    CallCase("dist.get_world_size()", _D + "get_world_size", _step(_get_world_size), FOLDED),
    CallCase("dist.get_process_group_ranks(pg)", _D + "get_process_group_ranks",
             _step(_get_process_group_ranks, _world), FOLDED),
    CallCase("dist.get_backend()", _D + "get_backend", _step(_get_backend), FOLDED),
    CallCase("dist.is_initialized()", _D + "is_initialized", _step(_is_initialized), FOLDED),
    CallCase("dist.get_group_rank(pg, 1)", _D + "get_group_rank", _step(_get_group_rank, _world), FOLDED),
    CallCase("dist.get_global_rank(pg, 1)", _D + "get_global_rank", _step(_get_global_rank, _world), FOLDED),
    CallCase("dist.get_backend_config()", _D + "get_backend_config", _step(_get_backend_config), FOLDED),
    CallCase("dist.get_default_backend_for_device('cpu')", _D + "get_default_backend_for_device",
             _step(_get_default_backend_for_device), FOLDED),
    CallCase("dist.supports_complex(op)", _D + "supports_complex", _step(_supports_complex), AS_STOCK),
    CallCase("dist.is_available()", _D + "is_available", _step(_is_available), FOLDED),
    CallCase("dist.is_backend_available('gloo')", _D + "is_backend_available", _step(_is_backend_available),
             FOLDED),
    *[CallCase(f"dist.is_{b}_available()", f"{_D}is_{b}_available", _step(_backend_available(b)), FOLDED)
      for b in ("gloo", "nccl", "mpi", "ucc", "xccl")],
    CallCase("dist.is_torchelastic_launched()", _D + "is_torchelastic_launched", _step(_is_torchelastic_launched),
             FOLDED),
    CallCase("dist.get_node_local_rank(fallback_rank=3)", _D + "get_node_local_rank", _step(_get_node_local_rank),
             FOLDED),
    # collectives with a functional form
    CallCase("dist.all_reduce(t)", _D + "all_reduce", _step(_all_reduce)),
    CallCase("dist.all_reduce(t, op=ReduceOp.MAX)", _D + "all_reduce", _step(_all_reduce_max)),
    CallCase("dist.all_reduce(t, async_op=True), work.wait()", _D + "all_reduce", _step(_all_reduce_async)),
    CallCase("dist.broadcast(t, src)", _D + "broadcast", _step(_broadcast)),
    CallCase("dist.broadcast(t, src, async_op=True).wait()", _D + "broadcast", _step(_broadcast_async)),
    CallCase("dist.all_gather(list, t)", _D + "all_gather", _step(_all_gather)),
    CallCase("dist.all_gather(list, t, async_op=True).wait()", _D + "all_gather", _step(_all_gather_async)),
    CallCase("dist.all_gather_into_tensor(out, t)", _D + "all_gather_into_tensor", _step(_all_gather_into_tensor)),
    CallCase("dist.all_gather_single(out, t)", _D + "all_gather_single", _step(_all_gather_single)),
    CallCase("dist.reduce_scatter(out, list)", _D + "reduce_scatter", _step(_reduce_scatter)),
    CallCase("dist.reduce_scatter_tensor(out, t)", _D + "reduce_scatter_tensor", _step(_reduce_scatter_tensor)),
    CallCase("dist.reduce_scatter_single(out, t)", _D + "reduce_scatter_single", _step(_reduce_scatter_single)),
    CallCase("dist.all_to_all_single(out, t)", _D + "all_to_all_single", _step(_all_to_all_single)),
    CallCase("dist.all_to_all(list, list)", _D + "all_to_all", _step(_all_to_all)),
    CallCase("dist.all_to_all(list, list, async_op=True).wait()", _D + "all_to_all", _step(_all_to_all_async)),
    CallCase("dist.all_reduce_coalesced(list)", _D + "all_reduce_coalesced", _step(_all_reduce_coalesced)),
    CallCase("dist.all_gather_coalesced([list], list)", _D + "all_gather_coalesced", _step(_all_gather_coalesced),
             eager_runs=False),
    # point-to-point
    CallCase("dist.isend(t, dst).wait()", _D + "isend", _step(_isend), CLEAN_BREAK),
    CallCase("dist.irecv(t, src).wait()", _D + "irecv", _step(_irecv), CLEAN_BREAK),
    CallCase("dist.send(t, dst)", _D + "send", _step(_send), CLEAN_BREAK),
    CallCase("dist.recv(t, src)", _D + "recv", _step(_recv), CLEAN_BREAK),
    CallCase("dist.P2POp(...), dist.batch_isend_irecv(ops)", _D + "P2POp", _step(_batch_isend_irecv), CLEAN_BREAK),
    CallCase("dist.isend(t, dst).wait(), P2P switch on", _D + "isend", _step(_isend), AS_STOCK, p2p=True),
    CallCase("dist.send(t, dst), P2P switch on", _D + "send", _step(_send), AS_STOCK, p2p=True),
    CallCase("dist.recv(t, src), P2P switch on", _D + "recv", _step(_recv), AS_STOCK, p2p=True),
    CallCase("dist.batch_isend_irecv(ops), P2P switch on", _D + "batch_isend_irecv", _step(_batch_isend_irecv),
             AS_STOCK, p2p=True),
    # no functional form
    CallCase("dist.reduce(t, dst)", _D + "reduce", _step(_reduce), CLEAN_BREAK),
    CallCase("dist.gather(t, None, dst)", _D + "gather", _step(_gather), CLEAN_BREAK),
    CallCase("dist.gather_into_tensor(t, None, dst)", _D + "gather_into_tensor", _step(_gather_into_tensor),
             CLEAN_BREAK),
    CallCase("dist.gather_single(t, None, dst)", _D + "gather_single", _step(_gather_single), CLEAN_BREAK),
    CallCase("dist.scatter(out, None, src)", _D + "scatter", _step(_scatter), CLEAN_BREAK),
    # objects
    CallCase("dist.all_gather_object(objs, obj)", _D + "all_gather_object", _step(_all_gather_object), CLEAN_BREAK),
    CallCase("dist.gather_object(obj, None, dst)", _D + "gather_object", _step(_gather_object), CLEAN_BREAK),
    CallCase("dist.broadcast_object_list(objs, src)", _D + "broadcast_object_list", _step(_broadcast_object_list),
             CLEAN_BREAK),
    CallCase("dist.scatter_object_list(out, None, src)", _D + "scatter_object_list", _step(_scatter_object_list),
             CLEAN_BREAK),
    CallCase("dist.send_object_list(objs, dst)", _D + "send_object_list", _step(_send_object_list), CLEAN_BREAK),
    CallCase("dist.recv_object_list(objs, src)", _D + "recv_object_list", _step(_recv_object_list), CLEAN_BREAK),
    # barriers and host state
    CallCase("dist.barrier()", _D + "barrier", _step(_barrier), CLEAN_BREAK),
    CallCase("dist.monitored_barrier()", _D + "monitored_barrier", _step(_monitored_barrier), CLEAN_BREAK),
    CallCase("dist.breakpoint()", _D + "breakpoint", _step(_breakpoint), CLEAN_BREAK),
    CallCase("dist.get_backend_impl()", _D + "get_backend_impl", _step(_get_backend_impl), CLEAN_BREAK),
    CallCase("dist.get_pg_count()", _D + "get_pg_count", _step(_get_pg_count), AS_STOCK),
    CallCase("dist.get_debug_level()", _D + "get_debug_level", _step(_get_debug_level), CLEAN_BREAK),
    CallCase("dist.set_timeout(timedelta)", _D + "set_timeout", _step(_set_timeout, _minute), CLEAN_BREAK),
    CallCase("with dist.record_comm(name):", _D + "record_comm", _step(_record_comm), CLEAN_BREAK),
    # groups and meshes
    CallCase("dist.init_device_mesh(...)", _D + "init_device_mesh", _step(_init_device_mesh), CLEAN_BREAK),
    CallCase("dist.new_group(ranks)", _D + "new_group", _step(_new_group), CLEAN_BREAK),
    CallCase("dist.new_subgroups(group_size=2)", _D + "new_subgroups", _step(_new_subgroups), CLEAN_BREAK),
    CallCase("dist.new_subgroups_by_enumeration(ranks)", _D + "new_subgroups_by_enumeration",
             _step(_new_subgroups_by_enumeration), CLEAN_BREAK),
    CallCase("dist.split_group(split_ranks=...)", _D + "split_group", _step(_split_group), CLEAN_BREAK),
    CallCase("dist.shrink_group(ranks)", _D + "shrink_group", _step(_shrink_group), CLEAN_BREAK),
    CallCase("dist.init_process_group(...)", _D + "init_process_group", _step(_init_process_group), CLEAN_BREAK),
    CallCase("dist.destroy_process_group()", _D + "destroy_process_group", _step(_destroy_process_group),
             CLEAN_BREAK),
    # Work
    *[CallCase(f"work.{name}(), work = dist.all_reduce(t, async_op=True)", f"Work.{name}",
               _step(_work_member(name)), CLEAN_BREAK)
      for name in ("is_completed", "is_success", "exception", "get_future", "get_future_result", "result",
                   "source_rank", "synchronize", "block_current_stream")],
    CallCase("work.wait(), the work made outside", "Work.wait", _step(_live_work, _eager_work), CLEAN_BREAK),
    # ProcessGroup methods
    CallCase("pg.allreduce([t]).wait()", "ProcessGroup.allreduce", _step(_pg_allreduce, _world)),
    CallCase("pg.allreduce([t], ReduceOp.MAX).wait()", "ProcessGroup.allreduce", _step(_pg_allreduce_max, _world)),
    CallCase("pg.allreduce_coalesced(list).wait()", "ProcessGroup.allreduce_coalesced",
             _step(_pg_allreduce_coalesced, _world)),
    CallCase("pg.broadcast(t, root).wait()", "ProcessGroup.broadcast", _step(_pg_broadcast, _world)),
    CallCase("pg.allgather([list], [t]).wait()", "ProcessGroup.allgather", _step(_pg_allgather, _world)),
    CallCase("pg.reduce_scatter([out], [list]).wait()", "ProcessGroup.reduce_scatter",
             _step(_pg_reduce_scatter, _world)),
    CallCase("pg.alltoall(list, list).wait()", "ProcessGroup.alltoall", _step(_pg_alltoall, _world)),
    CallCase("pg.alltoall_base(out, t, splits, splits).wait()", "ProcessGroup.alltoall_base",
             _step(_pg_alltoall_base, _world)),
    CallCase("pg.allgather_into_tensor_coalesced([out], [t]).wait()", "ProcessGroup.allgather_into_tensor_coalesced",
             _step(_pg_allgather_into_tensor_coalesced, _world)),
    CallCase("pg.reduce_scatter_tensor_coalesced([out], [t]).wait()", "ProcessGroup.reduce_scatter_tensor_coalesced",
             _step(_pg_reduce_scatter_tensor_coalesced, _world)),
    *[CallCase(f"pg.{name}(...)", f"ProcessGroup.{name}", _step(_pg_method(name, *args), _world), CLEAN_BREAK)
      for name, args in (("reduce", ()), ("gather", ()), ("scatter", ()), ("send", ()), ("recv", ()),
                         ("recv_anysource", ()), ("barrier", ()), ("monitored_barrier", ()), ("abort", ()),
                         ("shutdown", ()), ("set_timeout", ()))],
]
