"""DTensors made in a graph from plain tensors and returned, and the other
programs users write whose gradients AOTAutograd used to lose or never reach.

- ``DTensor.from_local(x, mesh, ...)`` on a plain tensor that requires grad,
  returned: with the plugin (the mesh folded, no graph input) AOTAutograd's
  partitioner refused the graph ("Node tangents_2 was invalid, but is
  output"); stock compiles it. Every graph that ends just after a
  tensor-parallel input hook on an activation that requires grad meets it.
- The same output when nothing requires grad: its ``device_mesh`` was the
  fake wrapper the graph was traced with, and inductor's FX-graph cache could
  not save the graph. Stock returns the mesh itself.
- A tensor-parallel MLP with a dynamic size, forward and backward: a
  ``RecursionError`` in AOTAutograd's joint trace (stock 2.13-2.15 alike).
- An ``AsyncCollectiveTensor`` input that requires grad: the compiled output
  required no grad and the backward never reached the leaf (stock 2.12-2.15
  alike, silently).

Fake 2-rank world: ``from_local`` and its backward move no data here, so
values and gradients are compared; the collectives' values are the gloo
tests' part (``tests/spawned/test_user_programs.py``).
"""

from __future__ import annotations

import pytest
import torch
import torch.nn as nn
from torch.distributed.device_mesh import DeviceMesh
from torch.distributed.tensor import DTensor, Replicate, Shard
from torch.distributed.tensor.experimental import implicit_replication
from torch.distributed.tensor.parallel import ColwiseParallel, RowwiseParallel, parallelize_module

import dynamo_dist
from dynamo_dist import _compat
from dynamo_dist._compat import observe as O
from dynamo_dist.testing import fake_world, make_mesh

from helpers import TORCH_RELEASE, compile_counting_frames

pytestmark = pytest.mark.release


@pytest.fixture
def mesh(plugin, tmp_path, monkeypatch):
    """A 1-D mesh of a fresh fake world, with fresh compile caches and no
    sharding answers remembered from an earlier world's equal mesh."""
    monkeypatch.setenv("TORCHINDUCTOR_CACHE_DIR", str(tmp_path))
    _compat.distributed.clear_sharding_propagation_cache()
    with fake_world(2, 0):
        yield make_mesh((2,))


def _from_local_cases(mesh):
    return {
        "Replicate": lambda x: DTensor.from_local(x, mesh, [Replicate()]),
        "Shard(0)": lambda x: DTensor.from_local(x, mesh, [Shard(0)]),
        "Replicate, then * 2": lambda x: DTensor.from_local(x, mesh, [Replicate()]) * 2,
    }


@pytest.mark.parametrize("case", ["Replicate", "Shard(0)", "Replicate, then * 2"])
@pytest.mark.parametrize("backend", ["aot_eager", "inductor"])
def test_from_local_of_a_tensor_that_requires_grad_returned_compiles_like_eager(mesh, case, backend):
    fn = _from_local_cases(mesh)[case]
    x = torch.randn(4, 4, requires_grad=True)
    want = fn(x)
    want.to_local().pow(2).sum().backward()
    want_grad, x.grad = x.grad, None
    got = torch.compile(fn, backend=backend, fullgraph=True)(x)
    assert isinstance(got, DTensor) and got.requires_grad
    assert got.placements == want.placements and type(got.device_mesh) is DeviceMesh and got.device_mesh == mesh
    torch.testing.assert_close(got.to_local(), want.to_local())
    got.to_local().pow(2).sum().backward()
    torch.testing.assert_close(x.grad, want_grad)


@pytest.mark.parametrize("requires_grad", [False, True])
@pytest.mark.parametrize("backend", ["aot_eager", "inductor"])
def test_a_dtensor_made_in_the_graph_and_returned_holds_the_mesh_itself(mesh, requires_grad, backend):
    fn = _from_local_cases(mesh)["Replicate"]
    got = torch.compile(fn, backend=backend, fullgraph=True)(torch.randn(4, 4, requires_grad=requires_grad))
    assert type(got.device_mesh) is DeviceMesh and got.device_mesh is mesh
    # DTensor code on it runs as on eager's output.
    assert got.redistribute(mesh, [Shard(0)]).placements == (Shard(0),)


def test_a_graph_returning_a_dtensor_made_inside_is_saved_in_the_fx_graph_cache(mesh):
    fn = _from_local_cases(mesh)["Replicate, then * 2"]
    x = torch.randn(4, 4)
    before = _compat.caches.outcome_counts()["fx_graph"]
    torch.compile(fn, backend="inductor", fullgraph=True)(x)
    torch._dynamo.reset()
    got = torch.compile(fn, backend="inductor", fullgraph=True)(x)
    after = _compat.caches.outcome_counts()["fx_graph"]
    assert after["miss"] - before["miss"] == 1 and after["hit"] - before["hit"] == 1, (before, after)
    assert type(got.device_mesh) is DeviceMesh and got.device_mesh == mesh


class MLP(nn.Module):
    def __init__(self, dim: int = 16) -> None:
        super().__init__()
        self.up, self.down = nn.Linear(dim, 4 * dim), nn.Linear(4 * dim, dim)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.down(torch.relu(self.up(x)))


@pytest.mark.parametrize("how", ["automatic", "mark_dynamic", "dynamic=True"])
def test_a_tp_mlp_with_a_dynamic_sequence_length_compiles_forward_and_backward(mesh, how):
    torch.manual_seed(0)
    model = parallelize_module(MLP(), mesh, {"up": ColwiseParallel(), "down": RowwiseParallel()})
    counter = O.compile_counter("aot_eager")
    compiled = torch.compile(model, backend=counter, dynamic=True if how == "dynamic=True" else None)
    for seq in (8, 12, 16, 20):
        x = torch.randn(2, seq, 16)
        if how == "mark_dynamic":
            torch._dynamo.mark_dynamic(x, 1)
        compiled(x).sum().backward()
        assert all(p.grad is not None for p in model.parameters())
        model.zero_grad()
    # The static-to-dynamic step recompiles once with automatic dynamic shapes; nothing after.
    assert counter.frame_count == (2 if how == "automatic" else 1)


def test_an_async_collective_input_that_requires_grad_keeps_its_gradient(mesh):
    x = torch.randn(4, 4, requires_grad=True)

    def make():
        d = DTensor.from_local(x, mesh, [Shard(0)], run_check=False)
        return d.redistribute(mesh, [Replicate()], async_op=True).to_local()

    def fn(t):
        return t.sin().sin()

    t = make()
    assert type(t).__name__ == "AsyncCollectiveTensor" and t.requires_grad
    out = torch.compile(fn, backend="aot_eager", fullgraph=True)(t)
    assert out.requires_grad, "the compiled output lost the input's gradient"
    out.sum().backward()
    assert x.grad is not None and x.grad.shape == x.shape


def test_stock_loses_the_gradient_of_an_async_collective_input_where_it_resolves_them():
    """Stock's fault, asserted so the docs may state it: 2.12+ resolve the
    input before tracing and drop its gradient (2.11 does not resolve it)."""
    dynamo_dist.uninstall()
    with fake_world(2, 0):
        mesh = make_mesh((2,))
        x = torch.randn(4, 4, requires_grad=True)
        t = DTensor.from_local(x, mesh, [Shard(0)], run_check=False).redistribute(
            mesh, [Replicate()], async_op=True).to_local()
        out = torch.compile(lambda t: t.sin(), backend="aot_eager", fullgraph=True)(t)
    resolves = TORCH_RELEASE >= (2, 12)
    assert out.requires_grad is (not resolves)


def _loss_parallel_program(mesh):
    from torch.distributed.tensor.parallel import loss_parallel

    target = torch.randint(0, 16, (8,))

    def fn(x):
        with loss_parallel():
            return torch.nn.functional.cross_entropy(DTensor.from_local(x, mesh, [Shard(1)]), target)

    return fn, torch.randn(8, 8, requires_grad=True)


def _implicit_replication_program(mesh):
    from torch.distributed.tensor.experimental import implicit_replication

    wide = torch.randn(8, 4)

    def fn(x):
        with implicit_replication():
            return (DTensor.from_local(x, mesh, [Shard(0)]) * wide + 1).to_local()

    return fn, torch.randn(4, 4, requires_grad=True)


MODES = {"loss_parallel": _loss_parallel_program, "implicit_replication": _implicit_replication_program}
# Releases whose stock Dynamo fails inside the mode (its fake propagation runs without it).
STOCK_FAILS_INSIDE = {"loss_parallel": TORCH_RELEASE < (2, 14), "implicit_replication": TORCH_RELEASE < (2, 12)}
MODE_BREAK = "dynamo_dist: DTensor mode entered inside the compiled region"


def _compile_counting_breaks(fn, x):
    """``torch.compile(fn)(x)`` (aot_eager): (result or the error raised, {break reason: count})."""
    before = dict(O.dynamo_counters()["graph_break"])
    try:
        got = torch.compile(fn, backend="aot_eager")(x)
    except Exception as e:  # noqa: BLE001 - stock's error is what is measured
        got = e
    breaks = {r.splitlines()[0]: n - before.get(r, 0) for r, n in O.dynamo_counters()["graph_break"].items()
              if n > before.get(r, 0)}
    return got, breaks


@pytest.mark.parametrize("mode", list(MODES))
def test_a_dtensor_mode_entered_inside_compiles_and_breaks_no_more_than_stock(mode):
    """Stock fails inside the mode where its fake propagation runs without it
    (asserted: the docs state it); the plugin compiles the code inside with
    the mode on, breaking cleanly at the mode where it must, and never breaks
    more than stock where stock compiles."""
    dynamo_dist.uninstall()
    with fake_world(2, 0):
        fn, x = MODES[mode](make_mesh((2,)))
        stock, stock_breaks = _compile_counting_breaks(fn, x)
    assert isinstance(stock, Exception) is STOCK_FAILS_INSIDE[mode], stock
    if isinstance(stock, Exception):
        assert "got mixed torch.Tensor and DTensor" in str(stock)
    torch._dynamo.reset()
    dynamo_dist.install()
    try:
        with fake_world(2, 0):
            fn, x = MODES[mode](make_mesh((2,)))
            want = fn(x)
            got, breaks = _compile_counting_breaks(fn, x)
    finally:
        dynamo_dist.uninstall()
    assert not isinstance(got, Exception), got
    assert type(got) is type(want) and got.shape == want.shape and got.requires_grad
    # loss_parallel always breaks at its `with`; implicit_replication is traced as its switch.
    assert (MODE_BREAK in breaks) is (mode == "loss_parallel"), breaks
    if mode == "implicit_replication":
        assert not breaks and not _compat.distributed.implicit_replication_switch()[0]()
    if not isinstance(stock, Exception):
        assert sum(breaks.values()) <= sum(stock_breaks.values()), (breaks, stock_breaks)


def _replicated_times_arange(x, mesh):
    d = DTensor.from_local(x, mesh["dp"], [Replicate()], run_check=False)
    with implicit_replication():
        d = d * torch.arange(d.shape[-1], dtype=d.dtype) + 1
    return d


def _broken_inside(x, mesh):
    d = DTensor.from_local(x, mesh["dp"], [Replicate()], run_check=False)
    with implicit_replication():
        d = d * torch.arange(d.shape[-1], dtype=d.dtype)
        torch._dynamo.graph_break()
        d = d + torch.ones(d.shape[-1])
    return d


@pytest.mark.parametrize("program,graphs", [(_replicated_times_arange, 1), (_broken_inside, 2)])
def test_implicit_replication_is_traced_as_its_switch(program, graphs):
    """After a ``from_local`` on a folded ``mesh["dp"]`` (a graph of one call
    before the ``with``, which Dynamo would run wholly eagerly at a break in
    the ``with``'s enter, compiling ``from_local``'s own frames): one graph,
    no break but the program's own; the gradient is eager's (AOTAutograd
    traces the backward under the switch); the switch is off again after the
    call, and entered again where the program breaks inside the block."""
    switch = _compat.distributed.implicit_replication_switch()[0]
    dynamo_dist.install()
    try:
        with fake_world(2, 0):
            mesh = make_mesh((1, 2), ("dp", "tp"))
            x, x_eager = torch.randn(4, requires_grad=True), None
            x_eager = x.detach().clone().requires_grad_()
            want = program(x_eager, mesh)
            compiled, frames = compile_counting_frames(program)
            got = compiled(x, mesh)
            assert not switch()
            breaks = dict(O.dynamo_counters()["graph_break"])
            with implicit_replication():
                want.to_local().sum().backward()
                got.to_local().sum().backward()
    finally:
        dynamo_dist.uninstall()
    forward_frames = [name for name in frames() if name is not None]  # None: a backward graph's row
    assert len(forward_frames) == graphs and sum(breaks.values()) == graphs - 1, (frames(), breaks)
    assert torch.equal(got.to_local(), want.to_local()) and got.placements == want.placements
    assert torch.equal(x.grad, x_eager.grad)


def _stock_error(build, **options):
    """What stock torch raises compiling (aot_eager, ``options``) and calling
    ``build()``'s function on its input in a fresh fake world, or None."""
    dynamo_dist.uninstall()
    with fake_world(2, 0):
        fn, x = build(make_mesh((2,)))
        try:
            torch.compile(fn, backend="aot_eager", **options)(x)
        except Exception as e:  # noqa: BLE001 - stock's error is what is measured
            return e
    return None


def test_stock_recurses_forever_on_a_tp_mlp_with_a_dynamic_size_and_grad_on_2_13_to_2_15():
    """Stock's fault the docs state (aot/symbol_proxies.py), where it happens."""
    def build(mesh):
        model = parallelize_module(MLP(), mesh, {"up": ColwiseParallel(), "down": RowwiseParallel()})
        return model, torch.randn(2, 8, 16)

    error = _stock_error(build, dynamic=True)
    assert (error is not None) is (TORCH_RELEASE >= (2, 13)), error
    if error is not None:
        assert "maximum recursion depth exceeded" in str(error)


def test_stock_refuses_a_from_local_on_a_submesh_taken_inside_on_2_12_to_2_15():
    """Stock's fault the docs state (aot/object_constants.py): the same torch
    fault the plugin met with every folded mesh, reached by stock when the
    mesh is computed in the graph."""
    def build(mesh):
        root = make_mesh((1, 2), ("dp", "tp"))
        return (lambda x: DTensor.from_local(x, root["tp"], [Shard(0)], run_check=False) * 2,
                torch.randn(4, 4, requires_grad=True))

    error = _stock_error(build)
    assert (error is not None) is (TORCH_RELEASE >= (2, 12)), error
    if error is not None:
        assert "was invalid, but is output" in str(error)


@pytest.mark.parametrize("shape", [(2,), (3,), (2, 3), (8,)])
def test_distribute_tensor_of_a_size_marked_dynamic_breaks_as_stock_does(mesh, shape):
    """``distribute_tensor(x, mesh, [Shard(0)])`` with ``mark_dynamic(x, 0)``:
    tracing the split specialized the marked size (a shard of size 1), and
    Dynamo raised ``ConstraintViolationError`` where stock breaks the graph
    (it cannot trace distribute_tensor) and runs it like eager. The plugin
    now runs it eagerly too, behind one explained break; unmarked, the
    split is traced."""
    from torch.distributed.tensor import distribute_tensor

    def f(x):
        return distribute_tensor(x, mesh, [Shard(0)]) * 2

    x = torch.randn(*shape)
    eager = f(x)
    torch._dynamo.mark_dynamic(x, 0)
    before = dict(O.dynamo_counters()["graph_break"])
    out = torch.compile(f, backend="aot_eager")(x)
    breaks = [r.splitlines()[0] for r, n in O.dynamo_counters()["graph_break"].items() if n > before.get(r, 0)]
    # A fake world's scatter moves no data: shapes and placements are compared, not values.
    assert out.to_local().shape == eager.to_local().shape and out.placements == eager.placements
    assert breaks == ["dynamo_dist: distribute_tensor shards a dim marked dynamic"]
    torch._dynamo.reset()
    before = dict(O.dynamo_counters()["graph_break"])
    unmarked = torch.compile(f, backend="aot_eager")(torch.randn(*shape) + x)
    assert unmarked.to_local().shape == eager.to_local().shape
    assert dict(O.dynamo_counters()["graph_break"]) == before  # traced whole


@pytest.mark.parametrize("backend", ["eager", "aot_eager"])
def test_implicit_replication_compiled_under_an_outer_one_runs_without_it(backend):
    """First traced where the switch was already on (an outer
    ``implicit_replication()``), then called where it is off: the graph sets
    the switch itself around the block (with the ``eager`` backend the graph
    runs as traced), and leaves it as it found it."""
    switch = _compat.distributed.implicit_replication_switch()[0]
    dynamo_dist.install()
    try:
        with fake_world(2, 0):
            mesh = make_mesh((2,))

            def fn(x):
                with implicit_replication():
                    d = DTensor.from_local(x, mesh, [Replicate()], run_check=False) * torch.arange(4.0) + 1
                return d.to_local()

            O.reset_dynamo()
            compiled = torch.compile(fn, backend=backend)
            with implicit_replication():
                first = compiled(torch.ones(4))
                assert switch()
            assert not switch()
            second = compiled(torch.ones(4))
            assert not switch()
            want = fn(torch.ones(4))
    finally:
        dynamo_dist.uninstall()
    assert torch.equal(first, want) and torch.equal(second, want)
