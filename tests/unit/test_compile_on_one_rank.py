"""compile_on_one_rank: rank-dependent answers are runtime ops, and the graph
is identical on every rank."""

import warnings

import pytest
import torch

from dynamo_dist import _compat as C

from dynamo_dist.testing import compile_and_run, make_mesh, run_in_world
from rank_programs import compile_on_one_rank_check, rank_queries

pytestmark = pytest.mark.release

RUNTIME_OP = "_runtime_compute_coordinate_on_dim"


# Where a user may switch the mode on: torch.compiler.config (2.14+'s
# canonical flag) and torch.distributed.config (2.13's; a deprecated alias on
# 2.14+). Each must give the runtime-op graphs.
FLAG_MODULES = C.distributed.one_rank_flag_modules()


@pytest.fixture(params=FLAG_MODULES, ids=[m.__name__ for m in FLAG_MODULES])
def one_rank_mode(request):
    config = request.param
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", FutureWarning)  # the deprecated alias warns on 2.14+
        saved = config.compile_on_one_rank
        config.compile_on_one_rank = True
        try:
            assert C.distributed.compile_on_one_rank()
            yield
        finally:
            config.compile_on_one_rank = saved


@pytest.mark.usefixtures("plugin", "one_rank_mode")
def test_fake_world_graphs_identical_across_ranks():
    from dynamo_dist.testing import fake_world

    codes = []
    for rank in (0, 5):
        with fake_world(8, rank):
            run = compile_and_run(rank_queries, torch.zeros(1), make_mesh((2, 4), ("dp", "tp")))
            torch.testing.assert_close(run.compiled, run.eager)
            codes.append(run.graphs[0].code)
    assert RUNTIME_OP in codes[0]
    assert codes[0] == codes[1]


@pytest.mark.usefixtures("plugin")
def test_default_mode_folds_rank_to_constant(world8):
    run = compile_and_run(rank_queries, torch.zeros(1), make_mesh((2, 4), ("dp", "tp")))
    assert RUNTIME_OP not in run.graphs[0].code
    torch.testing.assert_close(run.compiled, run.eager)


@pytest.mark.slow
def test_real_two_rank_world_graphs_identical():
    results = run_in_world(compile_on_one_rank_check, 2)
    for r in results:
        assert r["leaked"] == []
        assert r["compiled"] == r["eager"] == r["folded"]
    assert results[0]["eager"] != results[1]["eager"]  # the answers are rank-dependent
    assert RUNTIME_OP in results[0]["code"]
    assert results[0]["code"] == results[1]["code"]
    # Default mode bakes each rank's answer: the graphs differ.
    assert results[0]["folded_code"] != results[1]["folded_code"]


class _AllReduceGradient(torch.autograd.Function):
    """As HF transformers' tensor-parallel Functions: the group kept on ctx,
    a collective on it in backward."""

    @staticmethod
    def forward(ctx, x, group):
        ctx.group = group
        return x * 1

    @staticmethod
    def backward(ctx, grad):
        import torch.distributed as dist

        dist.all_reduce(grad, group=ctx.group)
        return grad, None


def _two_functions_on_a_mesh_group(mesh):
    def step(x, w):
        group = mesh.get_group()  # derived from the mesh: a graph op under compile_on_one_rank (2.14+)
        return _AllReduceGradient.apply(x, group) * _AllReduceGradient.apply(w, group)

    return step


@pytest.mark.usefixtures("plugin", "one_rank_mode")
def test_a_group_derived_in_one_functions_backward_is_made_again_in_the_next():
    """Each Function's backward is a subgraph of its own: a group made there
    (from the mesh) is not reachable from the next one's, which makes its own."""
    from torch._dynamo.testing import CompileCounterWithBackend

    from dynamo_dist.testing import fake_world

    with fake_world(2, 1):
        step = _two_functions_on_a_mesh_group(make_mesh((2,), ("tp",)))
        x, w = torch.arange(4.0, requires_grad=True), torch.ones(4, requires_grad=True)
        counter = CompileCounterWithBackend("eager")
        out = torch.compile(step, backend=counter, fullgraph=True)(x, w)
        torch.testing.assert_close(out, step(x, w))
        assert counter.frame_count == 1
