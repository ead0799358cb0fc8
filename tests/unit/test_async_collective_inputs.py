"""Inputs that are sometimes an AsyncCollectiveTensor.

A function called with the ACT a functional collective returns and then with
a plain tensor (or with a DTensor whose local tensor is sometimes an ACT)
compiles twice on stock 2.13 (upstream #187073: the guard
``___check_type_id(x, AsyncCollectiveTensor)``); 2.14 fixed it. With the
plugin both kinds share one graph on every supported torch, the graph only
ever receives resolved plain tensors (the ACT is waited before it), results
equal eager, and code that looks at the class still sees the right one.
Fake 2-rank world, backend aot_eager behind a recorder of the graph's
runtime inputs."""

from __future__ import annotations

import pytest
import torch
import torch.distributed as dist
import torch.distributed._functional_collectives as funcol
from torch._dynamo.backends.registry import lookup_backend
from torch._dynamo.testing import CompileCounterWithBackend
from torch.distributed.tensor import DTensor, Replicate

import dynamo_dist
from dynamo_dist import _compat
from dynamo_dist.testing import fake_world, make_mesh

import torch._dynamo.source as _source

pytestmark = pytest.mark.release

UPSTREAM_FIX = hasattr(_source, "UnwrapCollectiveTensorSource")  # 2.14+
# 2.11 / 2.12: neither upstream's fix nor the backport (built for 2.13's guard builder).
shares = pytest.mark.xfail(
    not (UPSTREAM_FIX or _compat.collective.NEEDS_BACKPORT), strict=True,
    reason="torch 2.11 / 2.12: an ACT input and a plain one still compile two frames (docs/torch-releases.md)")

ACT = funcol.AsyncCollectiveTensor


@pytest.fixture
def world2():
    with fake_world(2, 0):
        yield


class Recorder:
    """aot_eager that records the types each compiled graph receives at run time."""

    def __init__(self) -> None:
        self.runtime_inputs: list[list[type]] = []

    def __call__(self, gm, example_inputs):
        compiled = lookup_backend("aot_eager")(gm, example_inputs)

        def run(*args):
            self.runtime_inputs.append([type(a) for a in args if isinstance(a, torch.Tensor)])
            return compiled(*args)

        return run


def _collective(t):
    return funcol.all_reduce(t, "sum", dist.group.WORLD)


def _compile(fn):
    recorder = Recorder()
    counter = CompileCounterWithBackend(recorder)
    torch._dynamo.reset()
    return torch.compile(fn, backend=counter), counter, recorder


def affine(x):
    return x * 2 + 1


def _frames_act_then_plain(fn, make_inputs):
    """Eager and compiled results for each input of ``make_inputs()`` (built
    twice: eager consumes its ACTs), the frames compiled and the recorder."""
    eager = [fn(x) for x in make_inputs()]
    compiled, counter, recorder = _compile(fn)
    got = [compiled(x) for x in make_inputs()]
    return eager, got, counter.frame_count, recorder


def _tensor_inputs():
    return [_collective(torch.arange(4.0)), torch.arange(4.0) + 5]


def _dtensor_inputs():
    mesh = make_mesh((2,), ("tp",))
    return [DTensor.from_local(local, mesh, [Replicate()], run_check=False)
            for local in (_collective(torch.arange(4.0)), torch.arange(4.0) + 5)]


@shares
def test_act_then_plain_tensor_share_one_graph(world2, plugin):
    inputs = _tensor_inputs()
    assert type(inputs[0]) is ACT and type(inputs[1]) is torch.Tensor
    eager, got, frames, recorder = _frames_act_then_plain(affine, _tensor_inputs)
    assert frames == 1
    for e, g in zip(eager, got):
        torch.testing.assert_close(g, e)
    if _compat.collective.NEEDS_BACKPORT:
        # The backport waits the ACT before the backend's graph: it reads
        # resolved tensors only. (2.14+ passes the ACT on; AOTAutograd's
        # runtime wrapper waits it before the graph.)
        assert recorder.runtime_inputs == [[torch.Tensor], [torch.Tensor]]


@shares
def test_dtensor_with_act_local_then_plain_local_share_one_graph(world2, plugin):
    inputs = _dtensor_inputs()
    assert type(inputs[0]._local_tensor) is ACT and type(inputs[1]._local_tensor) is torch.Tensor
    eager, got, frames, recorder = _frames_act_then_plain(affine, _dtensor_inputs)
    assert frames == 1
    for e, g in zip(eager, got):
        assert type(g) is DTensor and g.placements == e.placements
        torch.testing.assert_close(g.to_local(), e.to_local())
    assert len(recorder.runtime_inputs) == 2
    if _compat.collective.NEEDS_BACKPORT:
        for seen in recorder.runtime_inputs:
            assert ACT not in seen, seen


def _frames_over_shapes(fn) -> int:
    """Frames compiled for ``fn`` called with an ACT, then a plain tensor, at 3 sizes."""
    compiled, counter, _ = _compile(fn)
    for n in (4, 6, 8):
        for x in (_collective(torch.arange(float(n))), torch.arange(float(n))):
            torch.testing.assert_close(compiled(x), fn(torch.arange(float(n))))
    return counter.frame_count


def test_a_plain_tensor_whose_shape_changes_after_an_act_recompiles_once_dynamic(world2):
    # Automatic dynamic shapes write shape guards in Python, through the
    # resolved source's name.
    stock = _frames_over_shapes(affine)
    with dynamo_dist.enabled():
        plugin = _frames_over_shapes(affine)
    if _compat.collective.NEEDS_BACKPORT:
        assert plugin == 2  # the backport: the first shape, then one dynamic graph (stock 2.13: more)
        assert stock > plugin
    else:
        # Upstream's fix (2.14, 2.15) or neither it nor the backport (2.11,
        # 2.12): the plugin compiles what stock compiles.
        assert plugin == stock


def branch_on_class(x):
    if isinstance(x, ACT):
        return x + 100
    return x - 100


def class_is_act(x):
    return x * 2 if type(x) is ACT else x * 3


def dunder_class_is_act(x):
    return x * 2 if x.__class__ is ACT else x * 3


def tensor_check(x):
    return x + 1 if isinstance(x, torch.Tensor) else x


@pytest.mark.parametrize("fn", [branch_on_class, class_is_act, dunder_class_is_act], ids=lambda f: f.__name__)
def test_observing_the_class_keeps_the_class_guard(world2, plugin, fn):
    eager, got, frames, _ = _frames_act_then_plain(fn, _tensor_inputs)
    for e, g in zip(eager, got):
        torch.testing.assert_close(g, e)
    assert frames == 2  # the class decides the result: one graph per class


@shares
def test_a_class_check_both_kinds_pass_still_shares(world2, plugin):
    eager, got, frames, _ = _frames_act_then_plain(tensor_check, _tensor_inputs)
    for e, g in zip(eager, got):
        torch.testing.assert_close(g, e)
    assert frames == 1


def test_backport_only_where_torch_lacks_the_fix():
    # 2.14+ carries upstream's fix (UnwrapCollectiveTensorSource): nothing to do.
    import torch._dynamo.source as source

    assert _compat.collective.NEEDS_BACKPORT == (
        not hasattr(source, "UnwrapCollectiveTensorSource") and _compat.slots.FAMILY == "2.13")


def test_stock_behaviour_comes_back_after_uninstall(world2):
    dynamo_dist.install()
    dynamo_dist.uninstall()
    eager, got, frames, _ = _frames_act_then_plain(branch_on_class, _tensor_inputs)
    for e, g in zip(eager, got):
        torch.testing.assert_close(g, e)
    _, _, frames, _ = _frames_act_then_plain(affine, _tensor_inputs)
    assert frames == (1 if UPSTREAM_FIX else 2)


def _act_hook_points():
    from torch._dynamo.guards import GuardBuilder, _get_closure_vars
    from torch._dynamo.variables.builtin import BuiltinVariable

    return (GuardBuilder.__dict__["get_guard_manager_from_source"], BuiltinVariable.__dict__["call_isinstance"],
            BuiltinVariable.__dict__["call_type"], _get_closure_vars().get(_compat.collective.GUARD_FN_NAME))


def test_install_patches_the_backport_hooks_only_where_needed_and_uninstall_restores_them():
    before = _act_hook_points()
    dynamo_dist.install()
    try:
        during = _act_hook_points()
    finally:
        dynamo_dist.uninstall()
    assert _act_hook_points() == before
    if _compat.collective.NEEDS_BACKPORT:
        assert all(d is not b for d, b in zip(during, before))
    else:
        assert during == before
