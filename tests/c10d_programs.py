"""torch.distributed calls in compiled functions, run on every rank of a real
gloo world: eager, compiled with the plugin and compiled with stock torch,
side by side (``run_programs``, which ``tests/spawned/test_c10d_values.py``
hands to ``run_in_world``).

Each program is a user's compiled step around one call (or a pattern of
calls: ``async_op=True`` and ``wait()``, a ``Work`` returned, a custom
``autograd.Function`` whose forward and backward call collectives). Its
inputs differ per rank; it returns tensors (a ``Work`` among them is replaced
by what its ``wait()`` returns). A program marked ``grad`` is also checked
backward: the gradient of its input. ``breaks`` is how many graph breaks the
plugin takes (0: compiled with ``fullgraph=True``).
"""

from __future__ import annotations

import contextlib
import traceback
from dataclasses import dataclass
from typing import Any, Callable

import torch
import torch.distributed as dist

import dynamo_dist
from dynamo_dist import _compat as C
from dynamo_dist._compat import observe as O
from dynamo_dist.diagnostics.compare import difference


@dataclass(frozen=True)
class Program:
    name: str
    fn: Callable[..., Any]
    # The gradient of the input is checked too.
    grad: bool = False
    # Graph breaks the plugin takes.
    breaks: int = 0
    # An autograd.Function whose forward calls a collective: one more break
    # where torch loses such a function's gradient (2.11), which runs eagerly.
    function_forward: bool = False
    # World sizes it runs in (4: on a pair of ranks too; the calls whose
    # group matters most).
    worlds: tuple[int, ...] = (2,)
    # Its input, from the rank: a (2 * world, 3) float tensor by default.
    make_input: Callable[[int, int], torch.Tensor] | None = None
    # The context it runs in (eager and compiled), from its group.
    context: Callable[[Any], Any] | None = None
    # The groups it runs on: the world, a pair of ranks (4 ranks and up),
    # a pair this rank is not in ("outside": the call does nothing, as eager).
    groups: tuple[str, ...] = ("world", "pair")


@dataclass
class Result:
    """What one rank saw for one program, with the plugin and with stock."""

    program: str
    group: str
    plugin: str | None  # None: equal to eager; else where it differs, or its error
    plugin_breaks: int
    stock: str | None
    stock_breaks: int
    # Why the program did not run here (this release's gloo cannot run it eagerly).
    skipped: str | None = None


def _size(g):
    return dist.get_world_size(g)


def _last(g):
    return dist.get_global_rank(g, _size(g) - 1) if g is not None else dist.get_world_size() - 1


# -- the programs ----------------------------------------------------------------

def all_reduce(x, g):
    t = x * 2
    dist.all_reduce(t, group=g)
    return t + 1


def all_reduce_max(x, g):
    t = x * 2
    dist.all_reduce(t, op=dist.ReduceOp.MAX, group=g)
    return t


def all_reduce_gradient(x, g):
    # eager: the gradient passes the collective's tensor unchanged
    t = x * 2
    dist.all_reduce(t, group=g)
    return t.sin()


def all_reduce_of_input(x, g):
    dist.all_reduce(x, group=g)  # the caller's tensor, changed in place
    return x * 2


def all_reduce_outside(x, g):
    t = x * 2
    dist.all_reduce(t, group=g)  # eager: nothing (and a warning)
    out = x.new_zeros(2 * x.shape[0], x.shape[1])
    dist.all_gather_into_tensor(out, t, group=g)
    return t + 1, out


def all_reduce_complex(x, g):
    c = torch.complex(x, x * 2)
    dist.all_reduce(c, group=g)
    return torch.view_as_real(c)


def all_reduce_async(x, g):
    t = x * 2
    work = dist.all_reduce(t, group=g, async_op=True)
    y = x.sin()  # free to overlap: it does not read t
    done = work.wait()
    return t + y, torch.tensor(float(done))


def all_reduce_work_returned(x, g):
    t = x * 2
    return t, dist.all_reduce(t, group=g, async_op=True)


def all_reduce_wait_after_break(x, g):
    t = x * 2
    work = dist.all_reduce(t, group=g, async_op=True)
    torch._dynamo.graph_break()
    work.wait()
    return t + 1


def broadcast(x, g):
    t = x * 2
    dist.broadcast(t, src=_last(g), group=g)
    return t


def broadcast_async(x, g):
    t = x * 2
    dist.broadcast(t, src=_last(g), group=g, async_op=True).wait()
    return t


def all_gather(x, g):
    outs = [torch.empty_like(x) for _ in range(_size(g))]
    dist.all_gather(outs, x * 2, group=g)
    return torch.stack(outs)


def all_gather_async(x, g):
    outs = [torch.empty_like(x) for _ in range(_size(g))]
    work = dist.all_gather(outs, x * 2, group=g, async_op=True)
    work.wait()
    return torch.stack(outs)


def all_gather_into_tensor(x, g):
    out = x.new_empty(_size(g) * x.shape[0], *x.shape[1:])
    dist.all_gather_into_tensor(out, x * 2, group=g)
    return out


def reduce_scatter(x, g):
    ins = [t * (j + 1) for j, t in enumerate((x * 2).chunk(_size(g)))]
    out = torch.empty_like(ins[0])
    dist.reduce_scatter(out, ins, group=g)
    return out


def all_reduce_coalesced(x, g):
    a, b = x * 2, x[:2] + 1
    dist.all_reduce_coalesced([a, b], group=g)
    return a, b


def all_gather_coalesced(x, g):
    # outs[rank][i]: input i of ``rank``
    outs = [[torch.empty_like(x), torch.empty_like(x[0])] for _ in range(_size(g))]
    dist.all_gather_coalesced(outs, [x * 2, x[0] + 1], group=g)
    return torch.stack([o[0] for o in outs]), torch.stack([o[1] for o in outs])


def reduce_scatter_tensor(x, g):
    out = x.new_empty(x.shape[0] // _size(g), *x.shape[1:])
    dist.reduce_scatter_tensor(out, x * 2, group=g)
    return out


def reduce_scatter_tensor_async(x, g):
    out = x.new_empty(x.shape[0] // _size(g), *x.shape[1:])
    dist.reduce_scatter_tensor(out, x * 2, group=g, async_op=True).wait()
    return out


def all_to_all_single(x, g):
    out = torch.empty_like(x)
    dist.all_to_all_single(out, x * 2, group=g)
    return out


def all_to_all_single_uneven(x, g):
    # Rank r sends j + 1 rows to rank j and gets r + 1 rows from each.
    n, r = _size(g), dist.get_rank(g)
    inp = torch.cat([x[:1] * (j + 1) for j in range(n) for _ in range(j + 1)])
    out = x.new_empty(n * (r + 1), *x.shape[1:])
    dist.all_to_all_single(out, inp, [r + 1] * n, [j + 1 for j in range(n)], group=g)
    return out


def all_to_all(x, g):
    # (gloo's all_to_all takes tensors of one shape only)
    ins = [t.t() * (j + 1) for j, t in enumerate((x * 2).chunk(_size(g)))]
    outs = [torch.empty_like(t) for t in ins]
    dist.all_to_all(outs, ins, group=g)
    return torch.stack(outs)


def all_to_all_async(x, g):
    n = _size(g)
    ins = list((x * 2).chunk(n))
    outs = [torch.empty_like(t) for t in ins]
    dist.all_to_all(outs, ins, group=g, async_op=True).wait()
    return torch.cat(outs)


def group_allreduce(x, g):
    t = x * 2
    g.allreduce([t]).wait()
    return t


def group_allreduce_op(x, g):
    t = x * 2
    g.allreduce([t], dist.ReduceOp.MAX).wait()
    return t


def group_broadcast(x, g):
    t = x * 2
    g.broadcast(t, _size(g) - 1).wait()
    return t


def group_allgather(x, g):
    outs = [torch.empty_like(x) for _ in range(_size(g))]
    g.allgather([outs], [x * 2]).wait()
    return torch.stack(outs)


def group_alltoall_base(x, g):
    out = torch.empty_like(x)
    n = _size(g)
    g.alltoall_base(out, x * 2, [x.shape[0] // n] * n, [x.shape[0] // n] * n).wait()
    return out


class _Transpose(torch.autograd.Function):
    """A user's all-to-all with its own backward (dist.all_to_all lists both
    ways), as spmd_types writes its collectives."""

    @staticmethod
    def forward(ctx, x, group):
        ctx.group = group
        ins = list(x.chunk(dist.get_world_size(group)))
        outs = [torch.empty_like(t) for t in ins]
        dist.all_to_all(outs, ins, group=group)
        return torch.cat(outs)

    @staticmethod
    def backward(ctx, grad):
        ins = list(grad.contiguous().chunk(dist.get_world_size(ctx.group)))
        outs = [torch.empty_like(t) for t in ins]
        dist.all_to_all(outs, ins, group=ctx.group)
        return torch.cat(outs), None


class _Sum(torch.autograd.Function):
    """A user's all-reduce with its own backward (broadcast of the gradient
    from the last rank: a row that has no stock rewrite)."""

    @staticmethod
    def forward(ctx, x, group):
        ctx.group = group
        t = x.clone()
        dist.all_reduce(t, group=group)
        return t

    @staticmethod
    def backward(ctx, grad):
        g = grad.clone()
        dist.all_reduce(g, group=ctx.group)
        dist.broadcast(g, src=_last(ctx.group), group=ctx.group)
        return g, None


def autograd_all_to_all(x, g):
    return _Transpose.apply(x * 2, g) * 3


def autograd_all_reduce(x, g):
    return _Sum.apply(x * 2, g).sin()


def _spmd():
    import spmd_types  # the clients extra; programs that use it run where it is installed

    return spmd_types


def spmd_all_to_all_stack(x, g):
    # V -> V: dim 0 is the mesh axis's size
    spmd = _spmd()
    return spmd.all_to_all(x.reshape(_size(g), -1) * 2, g, src=spmd.V, dst=spmd.V).sin()


def spmd_all_to_all_shard(x, g):
    spmd = _spmd()
    return spmd.all_to_all(x * 2, g, src=spmd.S(0), dst=spmd.S(1)).sin()


def spmd_all_to_all_mesh_axis(x, g):
    # The axis by name, from the current mesh (``_spmd_mesh``)
    spmd = _spmd()
    return spmd.all_to_all(x.reshape(_size(g), -1) * 2, "ep", src=spmd.V, dst=spmd.V).sin()


_MESHES: dict = {}


def _spmd_mesh(group):
    """The current mesh of spmd_types, set around the compiled call (as
    torchtitan sets it): a 1-D mesh "ep" over all ranks."""
    from torch.distributed.device_mesh import init_device_mesh

    world = dist.get_world_size()
    if world not in _MESHES:
        _MESHES[world] = init_device_mesh("cpu", (world,), mesh_dim_names=("ep",))
    return _spmd().set_current_mesh(_MESHES[world])


def _square_input(rank: int, world: int) -> torch.Tensor:
    return (torch.arange(4 * world * world, dtype=torch.float32).reshape(2 * world, 2 * world) / 8
            + rank).requires_grad_()


def _grad_input(rank: int, world: int) -> torch.Tensor:
    return (torch.arange(2 * world * 3, dtype=torch.float32).reshape(2 * world, 3) / 8 + rank).requires_grad_()


PROGRAMS: dict[str, Program] = {p.name: p for p in [
    Program("all_reduce", all_reduce, worlds=(2, 4)),
    Program("all_reduce(op=MAX)", all_reduce_max),
    Program("all_reduce of an input", all_reduce_of_input),
    Program("all_reduce, the gradient through it", all_reduce_gradient, grad=True),
    Program("all_reduce complex", all_reduce_complex),
    Program("all_reduce, all_gather_into_tensor on a group without this rank", all_reduce_outside, worlds=(4,),
            groups=("outside",)),
    Program("all_reduce async_op=True, wait()", all_reduce_async, worlds=(2, 4)),
    Program("all_reduce async_op=True, Work returned", all_reduce_work_returned),
    Program("all_reduce async_op=True, wait() after a graph break", all_reduce_wait_after_break, breaks=1),
    Program("broadcast", broadcast, worlds=(2, 4)),
    Program("broadcast async_op=True", broadcast_async),
    Program("all_gather", all_gather, worlds=(2, 4)),
    Program("all_gather async_op=True", all_gather_async),
    Program("all_gather_into_tensor", all_gather_into_tensor),
    Program("reduce_scatter", reduce_scatter),
    Program("reduce_scatter_tensor", reduce_scatter_tensor, worlds=(2, 4)),
    Program("all_reduce_coalesced", all_reduce_coalesced),
    Program("all_gather_coalesced", all_gather_coalesced),
    Program("reduce_scatter_tensor async_op=True", reduce_scatter_tensor_async),
    Program("all_to_all_single", all_to_all_single),
    Program("all_to_all_single uneven", all_to_all_single_uneven, worlds=(2, 4)),
    Program("all_to_all", all_to_all, worlds=(2, 4)),
    Program("all_to_all async_op=True", all_to_all_async),
    Program("pg.allreduce([t]).wait()", group_allreduce, worlds=(2, 4)),
    Program("pg.allreduce([t], MAX).wait()", group_allreduce_op),
    Program("pg.broadcast(t, root).wait()", group_broadcast, worlds=(2, 4)),
    Program("pg.allgather([outs], [t]).wait()", group_allgather),
    Program("pg.alltoall_base(...).wait()", group_alltoall_base),
    Program("autograd.Function: all_to_all both ways", autograd_all_to_all, grad=True, function_forward=True,
            worlds=(2, 4)),
    Program("autograd.Function: all_reduce, broadcast in backward", autograd_all_reduce, grad=True,
            function_forward=True),
    Program("spmd_types.all_to_all(V -> V)", spmd_all_to_all_stack, grad=True, function_forward=True, worlds=(2, 4)),
    Program("spmd_types.all_to_all(S(0) -> S(1))", spmd_all_to_all_shard, grad=True, make_input=_square_input,
            function_forward=True, worlds=(2, 4)),
    Program("spmd_types.all_to_all(V -> V), the axis named by the current mesh", spmd_all_to_all_mesh_axis,
            grad=True, context=_spmd_mesh, groups=("world",), function_forward=True),
]}

# The programs that need the spmd_types package.
SPMD_TYPES_PROGRAMS = tuple(name for name in PROGRAMS if name.startswith("spmd_types."))


# -- running them -----------------------------------------------------------------

def _input(program: Program, rank: int, world: int) -> torch.Tensor:
    if program.make_input is not None:
        return program.make_input(rank, world)
    if program.grad:
        return _grad_input(rank, world)
    # Sums of these are exact in any order (collectives reduce in their own).
    return torch.arange(2 * world * 3, dtype=torch.float32).reshape(2 * world, 3) / 8 + rank


def _plain(value: Any) -> Any:
    """Outputs as comparable values: a Work as what its wait() returns."""
    if isinstance(value, dist.Work):
        return torch.tensor(float(value.wait()))
    if isinstance(value, (tuple, list)):
        return tuple(_plain(v) for v in value)
    return value


def _run(program: Program, fn: Callable[..., Any], group: Any, rank: int, world: int) -> tuple:
    x = _input(program, rank, world)
    with program.context(group) if program.context is not None else contextlib.nullcontext():
        out = _plain(fn(x, group))
    grad = None
    if program.grad:
        outs = out if isinstance(out, tuple) else (out,)
        sum((o * (i + 1.5)).sum() for i, o in enumerate(outs)).backward()
        grad = x.grad
    return out, x.detach(), grad


def expected_breaks(program: Program) -> int:
    """The graph breaks the plugin takes in ``program`` on this release."""
    return program.breaks + (program.function_forward and C.dynamo.INPLACE_IN_FUNCTION_FORWARD_LOSES_GRAD)


def _compiled(program: Program, group: Any, rank: int, world: int, plugin: bool) -> tuple[Any, int]:
    (dynamo_dist.install if plugin else dynamo_dist.uninstall)()
    O.reset_dynamo()
    counter = O.compile_counter("aot_eager")
    breaks_before = O.graph_break_count()
    fn = torch.compile(program.fn, backend=counter, fullgraph=plugin and expected_breaks(program) == 0)
    try:
        return _run(program, fn, group, rank, world), O.graph_break_count() - breaks_before
    finally:
        O.reset_dynamo()
        dynamo_dist.uninstall()


def _judge(eager: Any, got: Any) -> str | None:
    if isinstance(eager, BaseException):
        if isinstance(got, BaseException) and (type(got) is type(eager) or f"{type(eager).__name__}:" in str(got)):
            return None  # raised as eager did (Dynamo may wrap it, naming it)
        return f"eager raised {type(eager).__name__}: {eager}"[:300] + f"; compiled: {_judge(None, got)}"
    if isinstance(got, BaseException):
        return f"{type(got).__name__}: {str(got).strip().splitlines()[0][:200] if str(got).strip() else ''}"
    return difference(eager, got, rtol=0, atol=0)


def run_programs(names: list[str], subgroups: bool = True, stock: bool = True) -> list[Result]:
    """On one rank of an initialised world: each named program eager, with
    the plugin and (``stock``) with stock torch, on the world group and (4
    ranks and up, ``subgroups``) on a pair of ranks; one ``Result`` per
    program and group."""
    rank, world = dist.get_rank(), dist.get_world_size()
    groups = {"world": dist.group.WORLD}
    if subgroups and world >= 4:
        pairs = [dist.new_group([i, i + 1]) for i in range(0, world, 2)]  # every rank makes every group
        groups["pair"] = pairs[rank // 2]
        groups["outside"] = pairs[1 - rank // 2 % 2]
    results = []
    was = dynamo_dist.is_installed()
    try:
        for name in names:
            program = PROGRAMS[name]
            if world not in program.worlds:
                continue
            for label, group in groups.items():
                if label not in program.groups:
                    continue
                try:
                    eager = _run(program, program.fn, group, rank, world)
                except Exception as e:  # compiled must raise it too
                    eager = e
                    if "does not support" in str(e):  # this backend's gap (2.11's gloo has no all_to_all)
                        results.append(Result(name, label, None, -1, None, -1, skipped=str(e)[:200]))
                        continue
                seen = {}
                seen[False] = (None, -1)
                for plugin in (True, False) if stock else (True,):
                    where = ""
                    try:
                        got, breaks = _compiled(program, group, rank, world, plugin)
                    except Exception as e:
                        got, breaks, where = e, -1, traceback.format_exc()[-1500:]
                    wrong = _judge(eager, got)
                    seen[plugin] = (wrong and wrong + ("\n" + where if plugin else ""), breaks)
                results.append(Result(name, label, *seen[True], *seen[False]))
    finally:
        (dynamo_dist.install if was else dynamo_dist.uninstall)()
    return results
