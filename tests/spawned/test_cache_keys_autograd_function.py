"""Custom ``autograd.Function``s under the AOTAutograd cache: with the plugin
a graph whose Functions depend only on what the key holds is cached without
torch's global opt-in (``dynamo_dist/caching/autograd_functions.py`` says
what that is and why), so a Function whose forward or backward changes
misses, an equal one hits in another process, and one whose traced graphs
call code the key names only by its import path keeps the bypass, with the
reason; stock bypasses them all.

Two fresh processes share a cache dir (``cache_key_programs.py``), in a fake
world of 4 ranks; each compiles its programs in turn with inductor. In the
first, every program differs from the ones before it: an entry under an
equal key would be served (a hit), so each must miss.
"""

from __future__ import annotations

import pytest
import torch
from torch.fx import GraphModule

from cache_key_programs import CallsUserCode, Scale, run_fresh
from dynamo_dist.caching import autograd_functions

pytestmark = pytest.mark.slow


RELEASE = tuple(int(p) for p in torch.__version__.split("+")[0].split(".")[:2])


def fn(name: str, **options) -> dict:
    return {"program": "function", "function": name, **options}


GROUP = {"program": "group_on_ctx"}  # a Function keeping a process group on ctx (created first: same name)
FIRST = [GROUP, fn("Scale"), fn("ScaleForwardEdited"), fn("ScaleBackwardEdited"), fn("DoubleInPlace"),
         fn("DoubleInPlaceUnmarked"), fn("Scale", dynamic=True), fn("CallsUserCode"), fn("Scale", plugin=False)]
SECOND = [GROUP, {**GROUP, "other_group": True}, fn("Scale"), fn("DoubleInPlace"), fn("Scale", dynamic=True, size=9)]


@pytest.fixture(scope="module")
def processes(tmp_path_factory) -> tuple[dict, dict]:
    cache = tmp_path_factory.mktemp("inductor_cache")
    first, second = run_fresh(cache, FIRST), run_fresh(cache, SECOND)
    return dict(zip(map(repr, FIRST), first)), dict(zip(map(repr, SECOND), second))


def outcome(runs: dict, program: dict) -> str:
    run = runs[repr(program)]
    [aot] = run["aot"]  # one graph, one AOTAutograd lookup
    assert run["same_as_eager"] is not False, run  # None: a fake world's collective, value undefined
    assert "autograd_function_apply" in run["graphs"][0], "the Function was not traced as one op"
    return aot


def test_functions_are_stored_without_torchs_opt_in(processes):
    first, _ = processes
    assert outcome(first, fn("Scale")) == "miss"


@pytest.mark.parametrize("edited", ["ScaleForwardEdited", "ScaleBackwardEdited"])
def test_a_function_whose_forward_or_backward_changes_misses(processes, edited):
    first, _ = processes
    assert outcome(first, fn(edited)) == "miss"


def test_equal_functions_in_another_process_hit(processes):
    _, second = processes
    assert outcome(second, fn("Scale")) == "hit"


def test_mark_dirty_is_keyed_as_dynamo_records_it(processes):
    """2.13+ record ``mark_dirty`` as ``dirty_idx``; 2.11 / 2.12 record the same
    graph with or without it: the key follows the graphs, either way."""
    first, second = processes
    marked, unmarked = first[repr(fn("DoubleInPlace"))], first[repr(fn("DoubleInPlaceUnmarked"))]
    assert outcome(first, fn("DoubleInPlace")) == "miss"
    same_graphs = marked["graphs"] == unmarked["graphs"]
    assert outcome(first, fn("DoubleInPlaceUnmarked")) == ("hit" if same_graphs else "miss")
    assert ("dirty_idx" in marked["graphs"][0]) == (RELEASE >= (2, 13))
    assert outcome(second, fn("DoubleInPlace")) == "hit"  # and the input is changed in place, as eagerly


def test_dynamic_shapes_hit_for_another_size(processes):
    first, second = processes
    assert outcome(first, fn("Scale", dynamic=True)) == "miss"  # a symbolic graph: not the static one
    assert outcome(second, fn("Scale", dynamic=True, size=9)) == "hit"


def test_a_group_on_ctx_hits_for_the_same_group_and_misses_for_another(processes):
    first, second = processes
    assert "'sum', '1'" in first[repr(GROUP)]["graphs"][0]  # the backward's all-reduce names its group
    assert outcome(first, GROUP) == "miss"
    assert outcome(second, GROUP) == "hit"
    assert outcome(second, {**GROUP, "other_group": True}) == "miss"


def test_a_function_calling_code_the_key_does_not_hold_keeps_the_bypass(processes):
    first, _ = processes
    run = first[repr(fn("CallsUserCode"))]
    assert outcome(first, fn("CallsUserCode")) == "bypass"
    [explained] = run["explained"]
    assert explained.startswith("the graph calls a custom torch.autograd.Function (traced as autograd_function_apply) "
                                "whose traced graphs depend on something the cache key does not hold (a Function's "
                                "backward graph calls `__main__.scaled_by_user_code`")


def test_stock_bypasses_functions(processes):
    first, _ = processes
    assert outcome(first, fn("Scale", plugin=False)) == "bypass"


# -- which graphs are admitted, in process ---------------------------------------


def dynamo_graph(function, *inputs) -> GraphModule:
    graphs = []

    def backend(gm, example_inputs):
        graphs.append(gm)
        return gm.forward

    torch._dynamo.reset()
    torch.compile(lambda *xs: function.apply(*xs), backend=backend, fullgraph=True)(*inputs)
    [gm] = graphs
    return gm


def test_a_function_whose_graphs_hold_everything_is_admitted():
    functions = autograd_functions.examine(dynamo_graph(Scale, torch.randn(3, requires_grad=True)))
    assert (functions.calls, functions.refusal) == (1, None)


def test_a_body_calling_user_code_is_refused():
    functions = autograd_functions.examine(dynamo_graph(CallsUserCode, torch.randn(3, requires_grad=True)))
    assert functions.calls == 1
    assert functions.refusal.startswith("a Function's backward graph calls `cache_key_programs.scaled_by_user_code`")


def test_a_body_holding_a_tensor_constant_is_refused():
    """Dynamo lifts tensors a Function reads into inputs; a body that holds
    one as an attribute would be keyed by its shape alone."""
    gm = dynamo_graph(Scale, torch.randn(3, requires_grad=True))
    [body] = [m for name, m in gm.named_children() if name.startswith("bwd_body")]
    body.register_buffer("table", torch.ones(3))
    [output] = [n for n in body.graph.nodes if n.op == "output"]
    with body.graph.inserting_before(output):
        body.graph.get_attr("table")
    body.recompile()
    refusal = autograd_functions.examine(gm).refusal
    assert refusal.startswith("a Function's backward graph holds `table`, a Tensor whose value the key does not hold")
