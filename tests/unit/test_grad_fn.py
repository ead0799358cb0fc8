"""``t.grad_fn`` inside a compiled region (``variables/grad_fn.py``): leaf
checks (``t.grad_fn is None``, ``if t.grad_fn:``) on tensors the frame
computed fold without a break, as spmd_types 0.3's collectives need; an
input's answer is guarded; what needs the node itself is a clean break."""

from __future__ import annotations

import pytest
import torch
from torch._dynamo.utils import counters


def _leaf_checks(x):
    y = x * 2
    leaf = y.requires_grad and y.grad_fn is None
    has = y.grad_fn is not None
    truthy = True if y.grad_fn else False
    return y + 1, leaf, has, truthy


@pytest.mark.release
@pytest.mark.parametrize("requires_grad", [True, False])
@pytest.mark.parametrize("grad_mode", [True, False])
def test_leaf_checks_on_a_traced_tensor_fold_without_a_break(plugin, requires_grad, grad_mode):
    x = torch.randn(4, requires_grad=requires_grad)
    with torch.set_grad_enabled(grad_mode):
        out = torch.compile(_leaf_checks, backend="aot_eager", fullgraph=True)(x)
        eager = _leaf_checks(x)
    assert out[1:] == eager[1:]
    assert torch.equal(out[0], eager[0])


@pytest.mark.release
def test_stock_breaks_at_a_traced_tensors_grad_fn():
    x = torch.randn(4, requires_grad=True)
    with pytest.raises(Exception, match="grad_fn"):
        torch.compile(_leaf_checks, backend="aot_eager", fullgraph=True)(x)


def _input_is_leaf(y):
    return y * 2, y.grad_fn is None


@pytest.mark.release
def test_an_inputs_answer_is_guarded(plugin):
    """A leaf, then a tensor with a history, then a leaf: each call answers
    as eager (the guard on the input's grad_fn recompiles once)."""
    counters.clear()
    compiled = torch.compile(_input_is_leaf, backend="aot_eager")
    a = torch.randn(4, requires_grad=True)
    answers = [compiled(t)[1] for t in (a, a * 1, a, a * 1)]
    assert answers == [True, False, True, False]
    assert not counters["graph_break"]


@pytest.mark.release
def test_stock_gives_a_leafs_answer_to_a_tensor_with_a_history():
    """Stock answers ``y.grad_fn is None`` for a leaf input as a constant
    without a guard: a later non-leaf input takes the leaf's answer."""
    compiled = torch.compile(_input_is_leaf, backend="aot_eager")
    a = torch.randn(4, requires_grad=True)
    assert compiled(a)[1] is True
    assert compiled(a * 1)[1] is True  # eager: False


def _returns_node(x):
    y = x * 2
    return y, y.grad_fn


def test_a_returned_node_is_the_tensors_own(plugin):
    counters.clear()
    x = torch.randn(4, requires_grad=True)
    y, node = torch.compile(_returns_node, backend="aot_eager")(x)
    assert node is y.grad_fn and node is not None
    assert not counters["graph_break"]


def _next_functions(x):
    return (x * 2).grad_fn.next_functions


def _split_nodes(x):
    a, b = (x * 2).split(2)
    return a.grad_fn is b.grad_fn


@pytest.mark.parametrize("fn,gb_type", [
    (_next_functions, "dynamo_dist: autograd node of a traced tensor"),
    (_split_nodes, "dynamo_dist: identity of objects not known while tracing"),
])
def test_what_needs_the_node_is_a_clean_break(plugin, fn, gb_type):
    x = torch.randn(4, requires_grad=True)
    with pytest.raises(Exception, match=gb_type):
        torch.compile(fn, backend="aot_eager", fullgraph=True)(x)
    torch._dynamo.reset()
    assert torch.compile(fn, backend="aot_eager")(x) == fn(x)
