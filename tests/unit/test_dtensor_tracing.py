"""DTensor APIs traced in a fake world under fullgraph=True: no graph break, no
distributed object in the Dynamo graph, compiled == eager, and the post-AOT
forward graph holds the functional collectives DTensor needs, naming the
group of the right mesh dim. Numerics on real worlds: test_dtensor_numerics*.py."""

import pytest
import torch
from torch.distributed.tensor import DTensor, distribute_tensor
from torch.distributed.tensor.placement_types import Partial, Replicate, Shard, _StridedShard

import dynamo_dist
from dynamo_dist import _compat as C
from helpers import assert_close_in_fake_world, distribute_defined, strided_shard_1d_supported
from dynamo_dist.testing import compile_and_run, distributed_objects_in, fake_world, make_mesh
from dynamo_dist.testing import CaptureBackend

pytestmark = pytest.mark.release


@pytest.fixture
def mesh2d(plugin):
    with fake_world(8, 3):
        yield make_mesh((2, 4), ("dp", "tp"))


def shard_to_replicate(x, mesh):
    d = DTensor.from_local(x, mesh["tp"], [Shard(0)])
    return d.redistribute(mesh["tp"], [Replicate()]).to_local()


def partial_to_replicate(x, mesh):
    d = DTensor.from_local(x, mesh["tp"], (Partial(),), run_check=False)
    return d.redistribute(placements=[Replicate()]).to_local()


def partial_to_shard(x, mesh):
    d = DTensor.from_local(x, device_mesh=mesh["tp"], placements=[Partial()])
    return d.redistribute(mesh["tp"], [Shard(0)], async_op=True).to_local() + 1


def shard0_to_shard1(x, mesh):
    d = DTensor.from_local(x, mesh["tp"], [Shard(0)])
    return d.redistribute(mesh["tp"], [Shard(1)]).to_local()


def two_dims(x, mesh):
    d = DTensor.from_local(x, mesh, [Shard(0), Partial()])
    return d.redistribute(mesh, [Replicate(), Replicate()]).to_local()


def strided_to_replicate(x, mesh):
    d = DTensor.from_local(x, mesh["tp"], [_StridedShard(0, split_factor=2)])
    return d.redistribute(mesh["tp"], [Replicate()]).to_local()


def full_tensor_with_grad_placements(x, mesh):
    d = DTensor.from_local(x, mesh["tp"], [Shard(0)], shape=torch.Size([16, 8]), stride=(8, 1))
    return d.full_tensor(grad_placements=[Shard(0)]) * 2


def run_check_true(x, mesh):
    return DTensor.from_local(x, mesh, [Replicate(), Shard(1)], run_check=True).to_local() + 1


def distribute_inside(x, mesh):
    return distribute_tensor(x, mesh, [Replicate(), Shard(0)]).to_local().shape


def to_local_grad_placements(x, mesh):
    d = DTensor.from_local(x, mesh["tp"], [Replicate()])
    return d.to_local(grad_placements=[Partial()]) * 3


def placements_built_and_branched(x, mesh):
    tp = mesh["tp"]
    placements = [Shard(0)] if tp.size() > 1 else [Replicate()]
    d = DTensor.from_local(x, tp, placements)
    y = d.redistribute(tp, [Replicate()])
    if y.placements[0].is_replicate() and d.placements[0].is_shard(0):
        return y.to_local() * y.device_mesh.size()
    return y.to_local()


# program, input, {mesh dim name: collectives expected on that dim's group}
PROGRAMS = [
    (shard_to_replicate, (2, 8), {"tp": {"all_gather_into_tensor"}}),
    (partial_to_replicate, (2, 8), {"tp": {"all_reduce"}}),
    (partial_to_shard, (8, 8), {"tp": {"reduce_scatter_tensor"}}),
    # On CPU DTensor does Shard(0) -> Shard(1) as all-gather + local chunk
    # (all-to-all, through _dtensor.shard_dim_alltoall, is its CUDA path).
    (shard0_to_shard1, (2, 8), {"tp": {"all_gather_into_tensor"}}),
    (two_dims, (2, 8), {"dp": {"all_gather_into_tensor"}, "tp": {"all_reduce"}}),
    (strided_to_replicate, (4, 8), {"tp": {"all_gather_into_tensor"}}),
    (full_tensor_with_grad_placements, (4, 8), {"tp": {"all_gather_into_tensor"}}),
    (run_check_true, (2, 8), {"dp": {"broadcast"}, None: {"all_gather_into_tensor"}}),
    (to_local_grad_placements, (2, 8), {}),
    (placements_built_and_branched, (2, 8), {"tp": {"all_gather_into_tensor"}}),
]


@pytest.mark.parametrize("program,shape,expected", PROGRAMS, ids=[p[0].__name__ for p in PROGRAMS])
def test_dtensor_program_compiles_whole_with_its_collectives(mesh2d, program, shape, expected):
    import torch.distributed as dist

    x = torch.arange(float(torch.Size(shape).numel())).reshape(shape)
    scatters = "reduce_scatter_tensor" in set().union(*expected.values())
    if program is strided_to_replicate and not strided_shard_1d_supported(mesh2d["tp"]):
        # torch 2.11 rejects this program eagerly; compiled must fail the same way.
        with pytest.raises(Exception, match="shard_order"):
            torch.compile(program, backend="eager", fullgraph=True)(x, mesh2d)
        return
    run = compile_and_run(program, x, mesh2d, backend="eager")
    assert_close_in_fake_world(run.compiled, run.eager, scatters)
    assert run.frame_count == 1 and run.graph_breaks == 0
    assert distributed_objects_in(run.graphs[0]) == []

    torch._dynamo.reset()
    capture = CaptureBackend("aot_eager")
    compiled = torch.compile(program, backend=capture, fullgraph=True)(x, mesh2d)
    assert_close_in_fake_world(compiled, program(x, mesh2d), scatters)
    found = [c for graph in capture.forward_collectives for c in graph]
    groups = {None if dim is None else mesh2d.get_group(dim).group_name: ops for dim, ops in expected.items()}
    groups = {dist.group.WORLD.group_name if g is None else g: ops for g, ops in groups.items()}
    for group, ops in groups.items():
        seen = {c.op for c in found if c.group == group}
        assert ops <= seen, f"expected {ops} on group {group}, graph has {[str(c) for c in found]}"
    named = {c.group for c in found if c.op != "wait_tensor"}
    assert named <= set(groups), f"collectives on unexpected groups: {[str(c) for c in found]}"
    if any(c.op != "wait_tensor" for c in found):
        assert all(c.waited for c in found if c.op != "wait_tensor"), [str(c) for c in found]


def test_distribute_tensor_moves_data_with_broadcasts_on_each_dim(mesh2d):
    capture = CaptureBackend("aot_eager")
    torch.compile(distribute_inside, backend=capture, fullgraph=True)(torch.ones(8, 3), mesh2d)
    ops = [(c.op, c.group) for graph in capture.forward_collectives for c in graph if c.op != "wait_tensor"]
    assert ops == [("broadcast", mesh2d.get_group(0).group_name), ("broadcast", mesh2d.get_group(1).group_name)]


def test_distribute_tensor_of_a_parameter_is_a_clean_break(mesh2d):
    from torch._dynamo.exc import Unsupported

    with pytest.raises(Unsupported, match="dynamo_dist: distribute_tensor of a tensor that requires grad"):
        torch.compile(distribute_inside, backend="eager", fullgraph=True)(torch.ones(8, 3, requires_grad=True), mesh2d)
    # Without fullgraph it breaks there and still runs like eager.
    torch._dynamo.reset()
    got = torch.compile(distribute_inside, backend="eager")(torch.ones(8, 3, requires_grad=True), mesh2d)
    assert got == distribute_inside(torch.ones(8, 3, requires_grad=True), mesh2d)


def test_dtensor_attributes_fold_and_a_placement_branch_has_no_break(mesh2d):
    d = distribute_defined(torch.arange(32.0).reshape(8, 4), mesh2d, [Replicate(), Shard(0)])

    def fn(d):
        spec = d._spec
        rank = d.device_mesh.get_local_rank("tp")
        if d.placements[1].is_shard():
            return d.to_local() * (rank + len(spec.placements)), d.placements
        return d.to_local(), d.placements

    run = compile_and_run(fn, d, backend="eager")
    torch.testing.assert_close(run.compiled[0], run.eager[0])
    assert run.compiled[1] == run.eager[1] == (Replicate(), Shard(0))
    assert distributed_objects_in(run.graphs[0]) == []
    # Another placement recompiles (guarded), and answers like eager.
    other = distribute_tensor(torch.arange(32.0).reshape(8, 4), mesh2d, [Replicate(), Replicate()])
    torch.testing.assert_close(run.compiled_fn(other)[0], fn(other)[0])


def test_escaping_mesh_and_placements_of_a_dtensor_made_inside_are_rebuilt(mesh2d):
    def fn(x, mesh):
        y = DTensor.from_local(x, mesh["tp"], [Shard(0)]).redistribute(placements=[Replicate()])
        return y.to_local(), y.placements, y.device_mesh

    run = compile_and_run(fn, torch.ones(2, 3), mesh2d)
    assert distributed_objects_in(run.graphs[0]) == []
    assert run.compiled[1] == (Replicate(),)
    assert run.compiled[2] == mesh2d["tp"]


@pytest.mark.parametrize("view", ["t", "view", "unsqueeze"])
def test_view_of_a_dtensor_input_returned_from_an_aot_graph(mesh2d, view):
    d = distribute_defined(torch.arange(32.0).reshape(8, 4), mesh2d, [Replicate(), Shard(0)])
    fns = {"t": lambda d: d.t(), "view": lambda d: d.view(-1), "unsqueeze": lambda d: d.unsqueeze(0)}
    out = torch.compile(fns[view], backend="aot_eager", fullgraph=True)(d)
    want = fns[view](d)
    assert out.placements == want.placements and out.shape == want.shape
    torch.testing.assert_close(out.to_local(), want.to_local())
    # Still a view: it shares the input's local storage, as in eager.
    assert out.to_local().untyped_storage().data_ptr() == d.to_local().untyped_storage().data_ptr()


def test_view_of_a_dtensor_input_keeps_gradients(mesh2d):
    leaf = torch.arange(8.0).reshape(2, 4).requires_grad_()

    def fn(d):
        return d.t()

    def loss_of(f):
        d = DTensor.from_local(leaf, mesh2d["tp"], [Shard(0)])
        f(d).to_local().sum().backward()
        grad = leaf.grad.clone()
        leaf.grad = None
        return grad

    torch.testing.assert_close(loss_of(torch.compile(fn, backend="aot_eager", fullgraph=True)), loss_of(fn))


def test_backward_inside_a_compiled_tp_step_breaks_cleanly(plugin):
    """Stock crashes here on recompiling (`SymNodeVariable() is not a constant`);
    with the plugin Dynamo breaks at `.backward()` and runs it eagerly. (The
    fake world moves no data, so values are compared on a real world in
    test_dtensor_numerics.)"""
    from torch._dynamo.utils import counters

    from dynamo_dist.demo.models import build_model, make_input

    with fake_world(4, 1):
        mesh = make_mesh((4,))
        model = build_model("mlp", mesh=mesh)

        def step(x):
            loss = model(x).sum()
            loss.backward()
            return loss

        counters.clear()
        torch.compile(step, backend="aot_eager")(make_input())
        assert any("backward" in reason.lower() for reason in counters["graph_break"]), dict(counters["graph_break"])
        assert all(p.grad is not None and p.grad.placements == p.placements for p in model.parameters())


def test_stock_form_is_restored_by_uninstall():
    """Uninstall gives stock's graphs back: the mesh is a graph input again
    (2.12+, where stock's meshes are opaque objects; 2.11's stock folds it)."""
    dynamo_dist.uninstall()
    with fake_world(8, 3):
        mesh = make_mesh((2, 4), ("dp", "tp"))
        run = compile_and_run(shard_to_replicate, torch.ones(2, 3), mesh)
        assert bool(distributed_objects_in(run.graphs[0])) == C.distributed.STOCK_MESH_OPAQUE


def test_strided_shard_both_ways_compile_like_eager(mesh2d):
    """Redistributing to `_StridedShard` and `full_tensor()` of a `_StridedShard`
    DTensor crash stock Dynamo (PendingUnbackedSymbolNotFound); values are
    checked on a real world in tests/spawned/test_dtensor_numerics.py's programs."""
    tp = mesh2d["tp"]
    if not strided_shard_1d_supported(tp):
        pytest.skip("torch 2.11's DTensor rejects a 1-D _StridedShard eagerly: no program to compile")
    sharded = distribute_tensor(torch.arange(16.0).reshape(8, 2), tp, [Shard(0)])
    strided = distribute_tensor(torch.arange(16.0).reshape(8, 2), tp, [_StridedShard(0, split_factor=2)])

    def to_strided(d):
        return d.redistribute(tp, [_StridedShard(0, split_factor=2)]).to_local().shape

    def from_strided(d):
        return d.full_tensor().shape

    for fn, d in ((to_strided, sharded), (from_strided, strided)):
        run = compile_and_run(fn, d, backend="aot_eager")
        assert run.compiled == run.eager and run.graph_breaks == 0
        assert distributed_objects_in(run.graphs[0]) == []
