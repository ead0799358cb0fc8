"""Every public torch.distributed call (and ProcessGroup's and Work's
methods) in a compiled region does what its row declares, stock beside the
plugin: traced as functional collectives, folded, torch's own tracing, or a
clean ``dynamo_dist:`` break that names the call (``devtools/coverage/c10d.py``
runs one compiled step per call in a fake world; values are judged on gloo in
``tests/spawned/test_c10d_values.py``)."""

from __future__ import annotations

import functools
import importlib.util
import pathlib

import pytest
import torch
import torch.distributed as dist

import dynamo_dist
from devtools.coverage.c10d import CALL_CASES, CLEAN_BREAK, OK, CallOutcome, as_expected, run_call_case
from devtools.coverage.tables import NOT_MEASURED, parse_table, read_block, stock_column
from dynamo_dist import _compat as C
from dynamo_dist._compat import observe as O
from dynamo_dist.diagnostics.graphs import collectives_in
from dynamo_dist.testing import fake_world
from dynamo_dist.variables import ALL_TABLES
from dynamo_dist.variables.members import Kind

pytestmark = pytest.mark.release


COVERAGE_PAGE = pathlib.Path(__file__).resolve().parents[2] / "docs" / "coverage.md"


def _outcome(case, plugin: bool):
    was = dynamo_dist.is_installed()
    (dynamo_dist.install if plugin else dynamo_dist.uninstall)()
    try:
        return run_call_case(case)
    finally:
        (dynamo_dist.install if was else dynamo_dist.uninstall)()


@functools.cache
def _stock_on_the_page() -> dict[str, str]:
    """Stock's outcome of each case on this release, as the coverage page
    records it (``tests/tools/test_stock_baseline.py`` keeps the page equal to a
    fresh measurement)."""
    table = parse_table(read_block(COVERAGE_PAGE.read_text(), "c10d"), 1)
    column = table.get(stock_column(C.release.torch_version()), {})
    return {name: cell for (name,), cell in column.items() if cell != NOT_MEASURED}


def _stock(case):
    """Stock's outcome: from the page where it has this release's column
    (one compile per case, not two), else measured now."""
    cell = _stock_on_the_page().get(case.name)
    if cell is None:
        return _outcome(case, plugin=False)
    status, _, detail = cell.partition(" (")
    return CallOutcome(case.name, status, detail.rstrip(")"))


@pytest.mark.parametrize("case", CALL_CASES, ids=[c.name for c in CALL_CASES])
def test_every_call_does_what_its_row_declares_and_never_worse_than_stock(case):
    ours, stock = _outcome(case, plugin=True), _stock(case)
    assert as_expected(case, ours, stock), (ours, stock)
    if ours.status == CLEAN_BREAK:
        assert ours.detail.startswith("dynamo_dist:"), ours
    if stock.status == OK:
        assert ours.status == OK, (ours, stock)


def test_every_call_row_has_a_case():
    """Every row of torch.distributed's and Work's tables, and every
    ProcessGroup method that is a collective or a break, is one of the cases
    (the coverage page's torch.distributed table)."""
    covered = {case.member for case in CALL_CASES}
    rows = {f"{t}.{n}" for t in ("torch.distributed", "Work") for n in ALL_TABLES[t]}
    rows |= {f"ProcessGroup.{n}" for n, m in ALL_TABLES["ProcessGroup"].items()
             if m.kind in (Kind.COLLECTIVE, Kind.BREAK)}
    assert rows <= covered, sorted(rows - covered)


# -- graphs --------------------------------------------------------------------

def _graphs(fn, *args, plugin=True, fullgraph=True):
    was = dynamo_dist.is_installed()
    (dynamo_dist.install if plugin else dynamo_dist.uninstall)()
    O.reset_dynamo()
    try:
        counter = O.compile_counter("eager")
        out = torch.compile(fn, backend=counter, fullgraph=fullgraph)(*args)
        return out, counter.graphs
    finally:
        O.reset_dynamo()
        (dynamo_dist.install if was else dynamo_dist.uninstall)()


def all_reduce(x):
    t = x * 2
    dist.all_reduce(t)
    return t + 1


def all_gather(x):
    outs = [torch.empty_like(x) for _ in range(4)]
    dist.all_gather(outs, x * 2)
    return torch.stack(outs)


def all_gather_into_tensor(x):
    out = x.new_empty(4 * x.shape[0], *x.shape[1:])
    dist.all_gather_into_tensor(out, x * 2)
    return out


def reduce_scatter_tensor(x):
    out = x.new_empty(x.shape[0] // 4, *x.shape[1:])
    dist.reduce_scatter_tensor(out, x * 2)
    return out


def all_to_all_single(x):
    out = torch.empty_like(x)
    dist.all_to_all_single(out, x * 2)
    return out


def _writes(graphs) -> int:
    return sum(1 for gm in graphs for n in gm.graph.nodes if n.target == "copy_")


@pytest.mark.parametrize("fn", [all_reduce, all_gather, all_gather_into_tensor, reduce_scatter_tensor,
                                all_to_all_single], ids=lambda f: f.__name__)
def test_where_stock_rewrites_the_call_the_graph_has_its_collectives_and_writes(fn):
    """Where stock already rewrites a call into functional collectives, the
    plugin's graph holds the same collectives on the same group, waited, and
    writes back into the same tensors (stock's behaviour kept)."""
    with fake_world(4, 1):
        x = torch.arange(8.0).reshape(4, 2)
        _, ours = _graphs(fn, x)
        _, stock = _graphs(fn, x, plugin=False)
    assert [c for gm in ours for c in collectives_in(gm)] == [c for gm in stock for c in collectives_in(gm)]
    assert _writes(ours) == _writes(stock) > 0


def overlapped(x):
    t = x * 2
    work = dist.all_reduce(t, async_op=True)
    y = x.sin()  # between the call and the wait: free to overlap
    work.wait()
    return t + y


def _order(gm) -> list[str]:
    names = []
    for n in gm.graph.nodes:
        if n.op in ("call_function", "call_method"):
            names.append(getattr(n.target, "__name__", str(n.target)))
    return names


def test_async_op_work_waits_where_the_program_waits():
    with fake_world(4, 1):
        _, graphs = _graphs(overlapped, torch.ones(4))
    [gm] = graphs
    order = _order(gm)
    collective, compute, wait = order.index("all_reduce"), order.index("sin"), order.index("wait_tensor")
    assert collective < compute < wait < order.index("copy_"), order


def returned(x):
    t = x * 2
    return t, dist.all_reduce(t, async_op=True)


def test_a_work_that_leaves_the_graph_is_finished():
    with fake_world(4, 1):
        (t, work), graphs = _graphs(returned, torch.ones(4))
    [gm] = graphs
    order = _order(gm)
    assert order.index("all_reduce") < order.index("wait_tensor") < order.index("copy_"), order
    assert isinstance(work, dist.Work) and isinstance(work, C.c10d.CompletedWork)
    assert work.wait() is True and work.is_completed()


def waited_after_a_break(x):
    t = x * 2
    work = dist.all_reduce(t, async_op=True)
    torch._dynamo.graph_break()
    work.wait()
    return t + 1


def test_a_work_waited_after_a_graph_break_was_finished_by_its_graph():
    with fake_world(4, 1):
        O.reset_dynamo()
        breaks = O.graph_break_count()
        out, graphs = _graphs(waited_after_a_break, torch.ones(4), fullgraph=False)
        assert O.graph_break_count() - breaks == 1  # only the program's own
    assert torch.equal(out, torch.full((4,), 3.0))
    first = _order(graphs[0])
    assert first.index("all_reduce") < first.index("wait_tensor") < first.index("copy_"), first


def waits_on_eager_work(x, work):
    work.wait()
    return x + 1


def test_waiting_on_a_work_made_outside_is_a_clean_break():
    with fake_world(4, 1):
        work = dist.all_reduce(torch.ones(1), async_op=True)
        with pytest.raises(O.Unsupported, match="dynamo_dist: wait on a collective started outside the graph"):
            _graphs(waits_on_eager_work, torch.ones(1), work)


def premul_sum(x, op):
    t = x * 2
    dist.all_reduce(t, op=op)
    return t


def test_a_reduce_op_without_a_functional_form_is_a_clean_break():
    with fake_world(4, 1):
        with pytest.raises(O.Unsupported, match="dynamo_dist: .*\n.*torch.distributed.all_reduce"):
            _graphs(premul_sum, torch.ones(4), dist._make_nccl_premul_sum(2.0))


def group_allreduce_opts(x, pg, opts):
    t = x * 2
    pg.allreduce([t], opts).wait()
    return t


def test_group_methods_read_their_option_structs():
    with fake_world(4, 1):
        opts = dist.AllreduceOptions()
        opts.reduceOp = dist.ReduceOp.MAX
        _, graphs = _graphs(group_allreduce_opts, torch.ones(4), dist.group.WORLD, opts)
    [reduce] = [n for gm in graphs for n in gm.graph.nodes if getattr(n.target, "__name__", "") == "all_reduce"]
    assert reduce.args[1] == "max", reduce.args


def group_broadcast_opts(x, pg, opts):
    t = x * 2
    pg.broadcast([t], opts).wait()
    return t


def test_an_option_without_a_functional_form_is_a_clean_break():
    with fake_world(4, 1):
        opts = dist.BroadcastOptions()
        opts.rootTensor = 1
        with pytest.raises(O.Unsupported, match="dynamo_dist: collective option without a functional form"):
            _graphs(group_broadcast_opts, torch.ones(4), dist.group.WORLD, opts)


def test_a_traced_form_dynamo_cannot_trace_breaks_naming_the_call(monkeypatch):
    """A failure inside a traced form is reported as the call's, never in
    Dynamo's words about torch's internals."""
    def untraceable(tensor, op="sum", group=None, async_op=False):
        torch._dynamo.graph_break()  # Dynamo's own break, in its own words

    monkeypatch.setitem(C.c10d.TRACED_FORMS, "all_reduce", untraceable)
    with fake_world(4, 1):
        with pytest.raises(O.Unsupported, match="dynamo_dist: torch.distributed collective not traced here") as e:
            _graphs(all_reduce, torch.ones(4))
    assert "torch.distributed.all_reduce" in str(e.value)


# -- what explain shows ------------------------------------------------------------

def step_with_host_calls(x):
    t = x * 2
    objs = [None] * dist.get_world_size()
    dist.all_gather_object(objs, 3)
    dist.broadcast_object_list(objs, src=0)
    dist.barrier()
    dist.group.WORLD.barrier()
    return t + 1


def test_explain_gives_the_reason_of_every_torch_distributed_call_in_plain_words():
    """The calls stock reports as ``pybind11_type.__new__`` (or crashes on)
    are breaks that name the call, at the user's line."""
    with fake_world(1, 0):
        report = dynamo_dist.explain(step_with_host_calls, backend="eager")(torch.ones(2))
    assert len(report.breaks) == 4, report.breaks
    for brk in report.breaks:
        text = " ".join([brk.gb_type, brk.explanation, *brk.hints])
        assert brk.origin == "dynamo_dist" and "pybind11" not in text and brk.file == __file__, brk


# -- spmd_types --------------------------------------------------------------------

def spmd_all_to_all(x, pg):
    import spmd_types as spmd

    return spmd.all_to_all(x * 2, pg, src=spmd.V, dst=spmd.V).sin()


@pytest.mark.skipif(importlib.util.find_spec("spmd_types") is None,
                    reason="spmd_types is not installed (the clients extra)")
def test_spmd_types_all_to_all_compiles_into_one_graph_forward_and_backward():
    from dynamo_dist.diagnostics.backend import CaptureBackend

    with fake_world(2, 1):
        dynamo_dist.install()
        O.reset_dynamo()
        try:
            backend = CaptureBackend("aot_eager")
            x = torch.ones(2, 3, requires_grad=True)
            torch.compile(spmd_all_to_all, backend=backend, fullgraph=True)(x, dist.group.WORLD).sum().backward()
        finally:
            O.reset_dynamo()
            dynamo_dist.uninstall()
    found = {stage: [c.op for graph in graphs for c in graph] for stage, graphs in backend.collectives().items()}
    assert "all_to_all_single" in found["forward"] and "all_to_all_single" in found["backward"], found


class _ReduceInForward(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x):
        t = x.clone()
        dist.all_reduce(t)
        return t

    @staticmethod
    def backward(ctx, grad):
        return grad * 3


def reduce_in_forward(x):
    return _ReduceInForward.apply(x * 2).sin()


def test_an_autograd_function_whose_forward_calls_a_collective_keeps_its_gradient():
    """torch 2.11 loses such a function's gradient (zeros, stock alike) when
    its compiled forward returns a tensor changed in place: there the plugin
    runs the function eagerly (one break); later releases compile it whole."""
    with fake_world(4, 1):
        x = torch.arange(3.0, requires_grad=True)
        reduce_in_forward(x).sum().backward()
        want, x.grad = x.grad, None
        O.reset_dynamo()
        breaks = O.graph_break_count()
        _graphs(reduce_in_forward, x, fullgraph=False)[0].sum().backward()
        taken = O.graph_break_count() - breaks
    torch.testing.assert_close(x.grad, want)
    assert taken == (1 if C.dynamo.INPLACE_IN_FUNCTION_FORWARD_LOSES_GRAD else 0)
