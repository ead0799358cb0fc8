"""explain speaks spmd_types, in a fake world of 2: each graph's inputs and
outputs with their SPMD types on each mesh axis as the checker sees them,
each ``spmd.*`` call with the collectives it became at the user's line, and
a break inside spmd_types placed at the user's call."""

from __future__ import annotations

import inspect
import re

import pytest
import torch

import dynamo_dist
import spmd_programs as P
from dynamo_dist.testing import fake_world, make_mesh

spmd = pytest.importorskip("spmd_types", reason="spmd_types is in the `clients` extra")
P.load()


@pytest.fixture
def tp_mesh():
    with fake_world(2, 0):
        mesh = make_mesh((2,), ("tp",))
        with spmd.set_current_mesh(mesh):
            yield spmd.current_mesh_names()["tp"]


def _explain(mode: str, tp, grad: bool = False):
    with P.checker(mode):
        x, w1, w2 = P.tp_inputs(mode, tp, grad=grad)
        report = dynamo_dist.explain(P.tp_step)(x, w1, w2, True)
        eager = P.tp_step(*P.tp_inputs(mode, tp, grad=grad), True)
        eager_type = {"tp": t.name for t in spmd.get_local_type(eager).values()}
    return report, eager_type


def _calls_in_source(fn) -> dict[str, int]:
    """spmd call name -> the first line of ``fn`` that calls it."""
    lines, first = inspect.getsourcelines(fn)
    found: dict[str, int] = {}
    for i, text in enumerate(lines):
        for name in ("all_reduce", "reduce_scatter", "all_to_all", "all_gather"):
            if f"spmd.{name}(" in text:
                found.setdefault(name, first + i)
    return found


@pytest.mark.parametrize("mode", ["local", "global"])
def test_types_per_mesh_axis_at_inputs_and_outputs(tp_mesh, mode):
    report, eager_type = _explain(mode, tp_mesh)
    [graph] = report.graphs
    assert graph.spmd.checker == mode
    inputs = {t.name: (t.types, t.spec) for t in graph.spmd.inputs}
    if mode == "local":
        assert inputs == {"x": ({"tp": "R"}, ""), "w1": ({"tp": "V"}, ""), "w2": ({"tp": "V"}, "")}
    else:  # the checker's global mode: shards are PartitionSpec entries
        assert inputs == {"x": ({"tp": "R"}, ""), "w1": ({"tp": "S(1)"}, "(None, tp)"),
                          "w2": ({"tp": "S(0)"}, "(tp, None)")}
    [out] = graph.spmd.outputs
    assert out.role == "output" and out.types == eager_type  # what eager's checker leaves on the result
    text = str(report)
    assert f"SPMD types (per mesh axis, as spmd_types' checker sees them; checker: {mode})" in text
    rows = [re.split(r"\s{2,}", line.strip()) for line in text.splitlines()]
    row = next(cells for cells in rows if cells[1:3] == ["w1", "input"])
    assert row == [graph.compile_id, "w1", "input", *(["S(1)", "(None, tp)"] if mode == "global" else ["V"])]
    assert report.to_dict()["graphs"][0]["spmd"]["inputs"][1]["types"] == inputs["w1"][0]


def test_each_spmd_call_with_its_collectives_at_the_users_line(tp_mesh):
    report, _ = _explain("local", tp_mesh)
    [graph] = report.graphs
    lines = _calls_in_source(P.tp_step)
    calls = [(c.function, c.line, [x.op for x in c.collectives], c.stage) for c in graph.spmd.calls]
    assert calls == [
        ("spmd.all_reduce", lines["all_reduce"], ["all_reduce"], "forward"),
        ("spmd.reduce_scatter", lines["reduce_scatter"], ["reduce_scatter_tensor"], "forward"),
        ("spmd.all_to_all", lines["all_to_all"], ["all_to_all_single"], "forward"),
        ("spmd.all_gather", lines["all_gather"], ["all_gather_into_tensor"], "forward"),
    ]
    # Every collective of the graph is one call's, with its group as the mesh axis and its bytes.
    assert [x for c in graph.spmd.calls for x in c.collectives] == graph.collectives
    assert all(graph.spmd.axes[x.group] == "tp" for x in graph.collectives)
    # all_reduce of a 4x8 float32 over 2 ranks: each rank sends 2(g-1)/g * 128 bytes.
    assert graph.spmd.calls[0].collectives[0].bytes_per_rank == 128
    assert all(c.file == inspect.getsourcefile(P.tp_step) for c in graph.spmd.calls)
    text = str(report)
    assert "spmd.all_reduce      all_reduce on tp (128 B)" in text
    assert "code: r = spmd.all_reduce(y, \"tp\", src=spmd.P, dst=spmd.I)" in text


def _scatter_gather(x, w):
    r = spmd.reduce_scatter(torch.mm(x, w), "tp", src=spmd.P, dst=spmd.S(0))
    return spmd.all_gather(r, "tp", src=spmd.S(0), dst=spmd.I).sum()


def test_a_backward_collective_is_the_call_whose_gradient_it_computes(tp_mesh):
    from dynamo_dist.diagnostics.explain import explaining

    with P.checker("local"), explaining() as session:
        x, w = torch.randn(4, 8, requires_grad=True), torch.randn(8, 8, requires_grad=True)
        spmd.assert_type(x, {tp_mesh: spmd.R})
        spmd.assert_type(w, {tp_mesh: spmd.V})
        torch.compile(_scatter_gather)(x, w).backward()
    [graph] = session.report.graphs
    line = inspect.getsourcelines(_scatter_gather)[1] + 1
    calls = [(c.stage, c.function, c.line, [x.op for x in c.collectives]) for c in graph.spmd.calls]
    assert calls == [("forward", "spmd.reduce_scatter", line, ["reduce_scatter_tensor"]),
                     ("forward", "spmd.all_gather", line + 1, ["all_gather_into_tensor"]),
                     ("backward", "spmd.reduce_scatter", line, ["all_gather_into_tensor"])]


@pytest.fixture
def breaking_inside_spmd_types(monkeypatch):
    """A helper every spmd_types collective calls, made to break the graph
    (``torch.compiler.disable``): Dynamo stops inside spmd_types' code."""
    collectives = __import__("spmd_types._collectives", fromlist=["_"])
    monkeypatch.setattr(collectives, "_process_dtype_options",
                        torch.compiler.disable(collectives._process_dtype_options))


def test_a_break_inside_an_spmd_call_is_placed_at_the_users_line(tp_mesh, breaking_inside_spmd_types):
    report, _ = _explain("local", tp_mesh, grad=True)
    lines = _calls_in_source(P.tp_step)
    places = {(b.line, b.inside.rsplit(" in ", 1)[-1]) for b in report.breaks}
    assert places == {(line, name) for name, line in lines.items()}
    for b in report.breaks:
        assert b.file == inspect.getsourcefile(P.tp_step) and b.function == "tp_step"
        assert "spmd_types" in b.inside and "_collectives.py" in b.inside
    text = str(report)
    rows = [re.split(r"\s{2,}", line.strip()) for line in text.splitlines()]
    assert any(row[:3] == ["1", report.breaks[0].where, "tp_step"] for row in rows), text
    assert f"inside: {report.breaks[0].inside}" in " ".join(text.split())  # a long path wraps


def _plain_step(x):
    y = x * 2
    print("step done")  # a graph break in the user's own code
    return y + 1


def test_a_program_without_spmd_types_renders_as_before():
    report = dynamo_dist.explain(_plain_step)(torch.ones(4))
    assert all(g.spmd is None for g in report.graphs)
    [b] = report.breaks
    assert (b.function, b.line, b.inside) == ("_plain_step", inspect.getsourcelines(_plain_step)[1] + 2, "")
    text = str(report)
    assert "SPMD types" not in text and "spmd_types calls" not in text and "inside:" not in text
