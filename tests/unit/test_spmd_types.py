"""spmd_types' type checker under torch.compile, in a fake world of 2: a
compiled frame checks its SPMD types while it is traced (the checker's own
rules on the traced values), gives the graph it gives with the checker off,
raises eager's SpmdTypeError for an ill-typed program, leaves eager's types
on its outputs, and recompiles only when the types it read change. Values
are judged on gloo in ``tests/spawned/test_spmd_types_values.py``."""

from __future__ import annotations

import traceback

import pytest
import torch
from torch._dynamo.backends.common import aot_autograd
from torch._dynamo.utils import counters

import spmd_programs as P
from dynamo_dist.testing import fake_world, make_mesh

spmd = pytest.importorskip("spmd_types", reason="spmd_types is in the `clients` extra")
P.load()
MODES = ("local", "global")


@pytest.fixture
def tp_mesh():
    with fake_world(2, 0):
        mesh = make_mesh((2,), ("tp",))
        with spmd.set_current_mesh(mesh):
            yield spmd.current_mesh_names()["tp"]


class Recorder:
    """A backend that keeps Dynamo's graphs and AOTAutograd's forward and
    backward graphs (as code), then runs them as aot_eager does."""

    def __init__(self) -> None:
        self.graphs: list[str] = []

    def __call__(self, gm, example_inputs):
        self.graphs.append(gm.code)

        def keep(g, _):
            self.graphs.append(g.code)
            return g

        return aot_autograd(fw_compiler=keep, bw_compiler=keep)(gm, example_inputs)


def compiled_tp_step(mode: str, tp, a2a: bool = False) -> dict:
    torch._dynamo.reset()
    counters.clear()
    rec = Recorder()
    with P.checker(mode):
        x, w1, w2 = P.tp_inputs(mode, tp)
        out = torch.compile(P.tp_step, backend=rec)(x, w1, w2, a2a)
        out_type = spmd.get_local_type(out) if mode != "off" else None
        spec = getattr(out, "_partition_spec", None)
        out.backward()
        ex, ew1, ew2 = P.tp_inputs(mode, tp)
        eager = P.tp_step(ex, ew1, ew2, a2a)
        eager_type = spmd.get_local_type(eager) if mode != "off" else None
    return {"graphs": rec.graphs, "breaks": dict(counters["graph_break"]), "type": out_type,
            "eager_type": eager_type, "spec": spec, "eager_spec": getattr(eager, "_partition_spec", None)}


@pytest.mark.release
@pytest.mark.parametrize("mode", MODES)
def test_well_typed_step_compiles_to_the_unchecked_graph(plugin, tp_mesh, mode):
    off = compiled_tp_step("off", tp_mesh)
    on = compiled_tp_step(mode, tp_mesh)
    assert on["breaks"] == {} and off["breaks"] == {}
    # Dynamo's graph, AOTAutograd's forward and backward: the checker in none of them.
    assert len(on["graphs"]) == 3
    assert on["graphs"] == off["graphs"]
    assert on["type"] == on["eager_type"] and on["type"]  # the output's types as eager's checker leaves them
    assert on["spec"] == on["eager_spec"]


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("a2a", [False, True], ids=["step", "all_to_all_step"])
def test_the_checker_adds_no_break(plugin, tp_mesh, mode, a2a):
    off = compiled_tp_step("off", tp_mesh, a2a=a2a)
    on = compiled_tp_step(mode, tp_mesh, a2a=a2a)
    assert set(on["breaks"]) <= set(off["breaks"])  # no kind of break of its own
    assert on["type"] == on["eager_type"] and on["type"]


@pytest.mark.parametrize("mode", MODES)
def test_checked_graphs_run_without_the_checker(plugin, tp_mesh, mode):
    """No runtime cost: once compiled, a call runs no rule of the checker."""
    from spmd_types._checker import _SpmdTypeMode

    calls = []
    original = _SpmdTypeMode.__torch_function__

    def counting(self, *args, **kwargs):
        if not torch.compiler.is_compiling():
            calls.append(args[0])
        return original(self, *args, **kwargs)

    f = torch.compile(P.tp_step, backend="aot_eager")
    with P.checker(mode):
        f(*P.tp_inputs(mode, tp_mesh), False)
        inputs = P.tp_inputs(mode, tp_mesh)
        _SpmdTypeMode.__torch_function__ = counting
        try:
            out = f(*inputs, False)
        finally:
            _SpmdTypeMode.__torch_function__ = original
        assert spmd.get_local_type(out)
    assert calls == []


def _error(fn, *args):
    try:
        fn(*args)
    except Exception as e:  # noqa: BLE001 - the verdict is what is compared
        user_lines = [f.lineno for f in traceback.extract_tb(e.__traceback__) if f.filename == P.__file__]
        return type(e), str(e), user_lines[-1:]
    return None


@pytest.mark.release
@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("name", P.ILL_TYPED)
def test_ill_typed_program_raises_eagers_error(plugin, tp_mesh, mode, name):
    fn = getattr(P, name)
    with P.checker(mode):
        x, w = torch.randn(4, 4), torch.randn(4, 4)
        spmd.assert_type(x, {tp_mesh: spmd.R})
        spmd.assert_type(w, {tp_mesh: spmd.R})
        eager = _error(fn, x, w)
        compiled = _error(torch.compile(fn, backend="aot_eager"), x, w)
    assert eager is not None and eager[0] is spmd.SpmdTypeError
    assert compiled == eager  # same class, message and user line


class _Double(torch.autograd.Function):
    """An autograd.Function whose forward breaks the graph (as spmd_types'
    all_to_all does where its list form is not traced)."""

    @staticmethod
    def forward(ctx, x):
        torch._dynamo.graph_break()
        return x * 2

    @staticmethod
    def backward(ctx, g):
        return g * 2


@pytest.mark.release
@pytest.mark.parametrize("mode", MODES)
def test_graph_break_inside_a_function_under_the_checker(plugin, tp_mesh, mode):
    """A graph break inside an autograd.Function's forward under the checker,
    with grads: the checker (which dispatches the Function) runs eagerly at
    the break; its code was compiled frame by frame, and crashed:
    "'_AutogradApplyDescriptor' object has no attribute '__name__'"."""
    spmd.register_local_autograd_function(_Double)

    def step(x, w1, w2):
        y = torch.mm(torch.relu(torch.mm(x, w1)), w2)
        r = spmd.all_reduce(y, "tp", src=spmd.P, dst=spmd.I)
        return _Double.apply(r).sum()

    with P.checker(mode):
        out = torch.compile(step, backend="aot_eager")(*P.tp_inputs(mode, tp_mesh))
        out.backward()
        eager = step(*P.tp_inputs(mode, tp_mesh))
        assert spmd.get_local_type(out) == spmd.get_local_type(eager)


class _Triple(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x):
        return x * 3

    @staticmethod
    def backward(ctx, g):
        return g * 3


@pytest.mark.release
@pytest.mark.parametrize("mode", MODES)
def test_a_registered_function_under_the_checker(plugin, tp_mesh, mode):
    """A user's autograd.Function under the checker (which dispatches its
    apply through a descriptor of its own; the trace crashed on it): traced,
    its call checked eagerly behind a clean dynamo_dist: break, eager's types
    on the output."""
    spmd.register_local_autograd_function(_Triple)

    def step(x, w1, w2):
        r = spmd.all_reduce(torch.mm(torch.relu(torch.mm(x, w1)), w2), "tp", src=spmd.P, dst=spmd.I)
        return _Triple.apply(r).sum()

    breaks = {}
    for m in ("off", mode):
        torch._dynamo.reset()
        counters.clear()
        with P.checker(m):
            out = torch.compile(step, backend="aot_eager")(*P.tp_inputs(m, tp_mesh))
            out.backward()
            if m != "off":
                assert spmd.get_local_type(out) == spmd.get_local_type(step(*P.tp_inputs(m, tp_mesh)))
        breaks[m] = set(counters["graph_break"])
    assert all(b.startswith("dynamo_dist:") for b in breaks[mode] - breaks["off"])


def _typed_pair(mode, tp):
    """x and w, typed so that ``x @ w`` is V (row-sharded in global mode)."""
    x, w = torch.randn(4, 8), torch.randn(8, 8)
    if mode == "local":
        spmd.assert_type(x, {tp: spmd.R})
        spmd.assert_type(w, {tp: spmd.V})
    else:
        spmd.assert_type(x, {tp: spmd.S(0)})
        spmd.assert_type(w, {tp: spmd.R})
    return x, w


def _through_an_alias(x, w):
    y = torch.mm(x, w)
    z = y.float()  # a float tensor's .float() is the tensor itself
    return z.reshape(z.shape[0], -1, 2)


@pytest.mark.parametrize("mode", MODES)
def test_a_tensor_and_its_alias_carry_one_set_of_types(plugin, tp_mesh, mode):
    """``x.float()`` of a float tensor returns the tensor itself: Dynamo
    traces it as a second value of the same fake tensor, which had no types
    of its own, and the checker's rule for ``reshape`` raised a false
    "missing axis" error (torchtitan's RoPE, ``query.float().reshape``)."""
    counters.clear()
    with P.checker(mode):
        x, w = _typed_pair(mode, tp_mesh)
        eager = _through_an_alias(x, w)
        out = torch.compile(_through_an_alias, backend="aot_eager", fullgraph=True)(x, w)
    assert spmd.get_local_type(out) == spmd.get_local_type(eager) == {tp_mesh: spmd.V}
    assert getattr(out, "_partition_spec", None) == getattr(eager, "_partition_spec", None)
    assert dict(counters["graph_break"]) == {}


def _ill_typed_alias(x, w):
    z = torch.mm(x, w).float()
    return spmd.all_reduce(z, "tp", src=spmd.P, dst=spmd.R)


@pytest.mark.parametrize("mode", MODES)
def test_an_ill_typed_alias_raises_eagers_error(plugin, tp_mesh, mode):
    """The alias keeps its tensor's types for the checker's verdict: an R
    tensor reduced as P raises eager's SpmdTypeError, compiled as eagerly."""
    with P.checker(mode):
        x, w = torch.randn(4, 4), torch.randn(4, 4)
        spmd.assert_type(x, {tp_mesh: spmd.R})
        spmd.assert_type(w, {tp_mesh: spmd.R})
        eager = _error(_ill_typed_alias, x, w)
        compiled = _error(torch.compile(_ill_typed_alias, backend="aot_eager"), x, w)
    assert eager is not None and eager[0] is spmd.SpmdTypeError
    assert compiled[:2] == eager[:2]


def _retyped_alias(x, w):
    y = torch.mm(x, w)
    z = y.float()
    spmd.mutate_type(y, spmd.current_mesh_names()["tp"], src=spmd.R, dst=spmd.I)
    return z * 2


@pytest.mark.parametrize("mode", MODES)
def test_types_written_on_a_tensor_reach_its_alias(plugin, tp_mesh, mode):
    """Types the frame writes on one value of a tensor after the alias was
    made are the alias's too (eager has one tensor): R mutated to I on ``y``
    leaves ``y.float() * 2`` I, not R."""
    with P.checker(mode):
        x, w = torch.randn(4, 4), torch.randn(4, 4)
        spmd.assert_type(x, {tp_mesh: spmd.R})
        spmd.assert_type(w, {tp_mesh: spmd.R})
        eager = _retyped_alias(x, w)
        out = torch.compile(_retyped_alias, backend="aot_eager", fullgraph=True)(x, w)
    assert spmd.get_local_type(eager) == {tp_mesh: spmd.I}
    assert spmd.get_local_type(out) == spmd.get_local_type(eager)


class _Block(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.w = torch.nn.Parameter(torch.randn(8, 8))

    def forward(self, x):
        return torch.relu(torch.mm(x, self.w)) * 2


def _checkpointed_block(selective: bool, tp):
    import functools

    from torch.distributed.algorithms._checkpoint.checkpoint_wrapper import checkpoint_wrapper
    from torch.utils.checkpoint import CheckpointPolicy, create_selective_checkpoint_contexts

    def policy(ctx, op, *args, **kwargs):
        return CheckpointPolicy.MUST_SAVE if op == torch.ops.aten.mm.default else CheckpointPolicy.PREFER_RECOMPUTE

    context = {"context_fn": functools.partial(create_selective_checkpoint_contexts, policy)} if selective else {}
    block = checkpoint_wrapper(_Block(), preserve_rng_state=False, **context)
    spmd.assert_type(block._checkpoint_wrapped_module.w, {tp: spmd.R})
    return block


def _checkpointed_graphs(mode: str, block, x) -> tuple[list[str], object, dict]:
    torch._dynamo.reset()
    counters.clear()
    rec = Recorder()
    with P.checker(mode):
        out = torch.compile(block, backend=rec, fullgraph=True)(x)
        return rec.graphs, out, dict(counters["graph_break"])


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("selective", [False, True], ids=["full_ac", "selective_ac"])
def test_a_checkpointed_block_under_the_checker_is_checked_op_by_op(plugin, tp_mesh, mode, selective):
    """Dynamo traces an activation-checkpointed block as the higher-order
    operator ``tag_activation_checkpoint`` and hands it to the checker as one
    call, which eager never shows it (eager's checker checks the block's
    operations as they run; its rule for the operator would run the real
    operator on the module). The block's body is traced with the checker on:
    fullgraph compiles with no break and the graph of the checker off,
    the output leaves with eager's types, and an ill-typed operation inside
    the block raises eager's SpmdTypeError (torchtitan's blocks under
    activation checkpointing and --debug.spmd_typechecking)."""
    with P.checker(mode):
        x = torch.randn(4, 8, requires_grad=True)
        spmd.assert_type(x, {tp_mesh: spmd.R})
        block = _checkpointed_block(selective, tp_mesh)
        eager = block(x)
    graphs, out, breaks = _checkpointed_graphs(mode, block, x)
    unchecked, _, _ = _checkpointed_graphs("off", block, x)
    assert breaks == {}
    assert graphs == unchecked and len(graphs) == 2  # Dynamo's graph and AOTAutograd's forward (no backward run)
    assert spmd.get_local_type(out) == spmd.get_local_type(eager) == {tp_mesh: spmd.R}
    assert torch.equal(out, eager)

    with P.checker(mode):
        bad = torch.randn(4, 8, requires_grad=True)
        spmd.assert_type(bad, {tp_mesh: spmd.P})  # relu of a partial sum: ill typed inside the block
        with pytest.raises(spmd.SpmdTypeError) as in_eager:
            block(bad)
        torch._dynamo.reset()
        with pytest.raises(spmd.SpmdTypeError) as compiled:
            torch.compile(block, backend="aot_eager")(bad)
    assert str(compiled.value) == str(in_eager.value)


def test_torch_cond_under_the_checker_is_checked_as_one_call(plugin, tp_mesh):
    """``torch.cond`` under the checker: eager's checker sees it as one call
    (torch runs it through Dynamo), and so does the compiled frame, with
    fullgraph and eager's types; with the plugin installed, eager's
    ``torch.cond`` itself runs as without it (it raised "doesn't work unless
    it is captured completely" while the checker's rule for an operator
    other than activation checkpointing broke the graph)."""

    def f(x):
        return torch.cond(x.sum() > 0, lambda t: t * 2, lambda t: t - 1, (x,))

    with P.checker("local"):
        x = torch.randn(4, 8)
        spmd.assert_type(x, {tp_mesh: spmd.R})
        eager = f(x)
        torch._dynamo.reset()
        counters.clear()
        out = torch.compile(f, backend="aot_eager", fullgraph=True)(x)
    assert torch.equal(out, eager)
    assert spmd.get_local_type(out) == spmd.get_local_type(eager) == {tp_mesh: spmd.R}
    assert dict(counters["graph_break"]) == {}


# -- guards: what a checked frame depends on ---------------------------------------

def _recompiles(f, mode, x_type, tp) -> tuple[int, object]:
    before = counters["stats"]["unique_graphs"]
    with P.checker(mode):
        x, w = torch.randn(4, 4), torch.randn(4, 4)
        others = {axis: spmd.R for axis in spmd.current_mesh_names().values() if axis != tp}
        spmd.assert_type(x, {**others, tp: x_type})
        spmd.assert_type(w, {**others, tp: spmd.R})
        out = f(x, w)
        return counters["stats"]["unique_graphs"] - before, spmd.get_local_type(out)


def _reduce(x, w):
    return spmd.all_reduce(torch.mm(x, w), "tp", src=spmd.P, dst=spmd.R) * 2


def _registered(mode: str, tp, typed, compiled: bool) -> dict:
    P.registered_function()
    torch._dynamo.reset()
    counters.clear()
    with spmd.no_typecheck():
        x = torch.arange(4.0).reshape(2, 2)
    with P.checker(mode):
        spmd.assert_type(x, {tp: typed})
        step = torch.compile(P.registered_step, backend="aot_eager") if compiled else P.registered_step
        try:
            out = step(x, tp)
        except spmd.SpmdTypeError as e:
            return {"error": str(e).splitlines()[0], "breaks": dict(counters["graph_break"])}
    return {"out": out.detach(), "type": spmd.get_local_type(out), "breaks": dict(counters["graph_break"]),
            "frames": counters["stats"]["unique_graphs"]}


@pytest.mark.release
@pytest.mark.parametrize("mode", MODES)
def test_a_registered_function_is_checked_by_its_typecheck_forward(plugin, tp_mesh, mode):
    """A Function registered with ``typecheck_forward`` (torchtitan's loss)
    is checked as eager checks it: by ``typecheck_forward``, nothing inside
    its ``forward`` (which mixes S(0) and R, as eager never sees). Compiled
    whole: 0 breaks, eager's value and type; an ill-typed input
    (R where S(0) is asserted) raises eager's error."""
    eager = _registered(mode, tp_mesh, spmd.S(0), compiled=False)
    compiled = _registered(mode, tp_mesh, spmd.S(0), compiled=True)
    assert compiled["breaks"] == {} and compiled["frames"] == 1, compiled["breaks"]
    assert torch.equal(compiled["out"], eager["out"])
    assert compiled["type"] == eager["type"] and compiled["type"]
    bad_eager = _registered(mode, tp_mesh, spmd.R, compiled=False)
    bad = _registered(mode, tp_mesh, spmd.R, compiled=True)
    assert "error" in bad_eager and bad.get("error") == bad_eager["error"], (bad, bad_eager)


@pytest.mark.release
def test_recompiles_when_an_input_type_changes_only(plugin, tp_mesh):
    counters.clear()
    f = torch.compile(_reduce, backend="aot_eager")
    assert _recompiles(f, "local", spmd.P, tp_mesh) == (1, {tp_mesh: spmd.R})
    # new tensors of the same types, a new checker with the same switches: no recompile
    assert _recompiles(f, "local", spmd.P, tp_mesh) == (0, {tp_mesh: spmd.R})
    # an input's local type differs: traced again (its rules give another verdict)
    assert _recompiles(f, "local", spmd.V, tp_mesh) == (1, {tp_mesh: spmd.R})
    assert _recompiles(f, "local", spmd.V, tp_mesh) == (0, {tp_mesh: spmd.R})
    # the checker's switches differ (global mode): traced again
    assert _recompiles(f, "global", spmd.P, tp_mesh) == (1, {tp_mesh: spmd.R})
    # the checker off: traced again, no types on the output
    with P.checker("off"):
        x, w = torch.randn(4, 4), torch.randn(4, 4)
        before = counters["stats"]["unique_graphs"]
        out = f(x, w)
        assert counters["stats"]["unique_graphs"] - before == 1
        assert not spmd.has_local_type(out)


@pytest.mark.release
def test_ill_typed_call_after_a_well_typed_one_raises(plugin, tp_mesh):
    """The guard on input types sends an ill-typed call back to the checker."""
    f = torch.compile(P.bad_collective, backend="aot_eager")
    with P.checker("local"):
        x, w = torch.randn(4, 4), torch.randn(4, 4)
        spmd.assert_type(x, {tp_mesh: spmd.P})
        spmd.assert_type(w, {tp_mesh: spmd.R})
        assert spmd.get_local_type(f(x, w)) == {tp_mesh: spmd.R}  # P @ R is P: well typed
        x2 = torch.randn(4, 4)
        spmd.assert_type(x2, {tp_mesh: spmd.R})
        eager = _error(P.bad_collective, x2, w)
        assert eager is not None and _error(f, x2, w) == eager


@pytest.mark.release
def test_without_the_checker_input_types_are_not_guarded(plugin, tp_mesh):
    """With the checker off nothing reads the types: another type on an
    input recompiles nothing."""
    counters.clear()
    f = torch.compile(_reduce, backend="aot_eager")
    assert _recompiles(f, "off", spmd.P, tp_mesh)[0] == 1
    assert _recompiles(f, "off", spmd.R, tp_mesh)[0] == 0


@pytest.mark.release
def test_recompiles_under_a_same_shape_mesh_over_other_groups(plugin):
    """The current mesh is guarded by its axes' layouts and groups: a mesh
    of the same shape over other groups traces again; the first one, back,
    does not (its entry matched already)."""
    from torch.distributed.device_mesh import DeviceMesh

    with fake_world(4, 0):
        first = make_mesh((2, 2), ("dp", "tp"))
        other = DeviceMesh("cpu", torch.arange(4).reshape(2, 2), mesh_dim_names=("dp", "tp"))
        f = torch.compile(_reduce, backend="aot_eager")
        counters.clear()
        seen = []
        for mesh in (first, first, other, first):
            with spmd.set_current_mesh(mesh):
                tp = spmd.current_mesh_names()["tp"]
                n, out_type = _recompiles(f, "local", spmd.P, tp)
                seen.append(n)
                assert out_type[tp] == spmd.R
        assert seen == [1, 0, 1, 0]


# -- stock torch.compile beside: what the docs state ---------------------------------

STOCK_FAULTS = {
    # a well-typed step: local mode fails at run time (the compiled graph's
    # Function is not registered with the checker), global mode in the trace
    ("local", "tp_step"): "CompiledFunction.apply: autograd Function is not registered for SPMD type checking",
    ("global", "tp_step"): "Opaque object of type 'torch.distributed.device_mesh.DeviceMesh'",
    # an ill-typed collective: no error at all (the checker sees the graph's ops only)
    ("local", "bad_collective"): None,
    ("global", "bad_collective"): None,
    # an ill-typed assert_type: eager's error (the call runs eagerly at its break)
    ("local", "bad_assert"): "SPMD type mismatch on axis",
    ("global", "bad_assert"): "SPMD type mismatch on axis",
}


@pytest.mark.release
@pytest.mark.skipif(not torch.__version__.startswith("2.15"), reason="stock's faults are measured on torch 2.15")
@pytest.mark.parametrize("mode, case", list(STOCK_FAULTS), ids=lambda v: str(v))
def test_stock_beside(tp_mesh, mode, case):
    """Stock torch.compile (no dynamo_dist) on the same programs, as the docs
    state it: a crash on every well-typed step, an ill-typed collective let through."""
    with P.checker(mode):
        if case == "tp_step":
            args = (*P.tp_inputs(mode, tp_mesh), False)
        else:
            args = (torch.randn(4, 4), torch.randn(4, 4))
            for t in args:
                spmd.assert_type(t, {tp_mesh: spmd.R})
        compiled = torch.compile(getattr(P, case), backend="aot_eager")

        def run(*a):
            out = compiled(*a)
            if out.requires_grad:
                out.sum().backward()

        got = _error(run, *args)
    expected = STOCK_FAULTS[mode, case]
    if expected is None:
        assert got is None
    else:
        assert got is not None and expected in got[1]


@pytest.mark.release
def test_under_compile_on_one_rank_a_backward_holding_a_group_runs(plugin, tp_mesh):
    """Under ``compile_on_one_rank`` the rank is a graph value the forward
    saves for the backward, so AOTAutograd copies the backward graph before it
    compiles it; spmd_types' all_gather backward holds its group as a graph
    constant on releases where groups are opaque objects, and the copy
    failed in ``.backward()`` ("cannot pickle ProcessGroup"). The copied
    graph holds the group itself; uninstalling takes the fix back."""
    from dynamo_dist import _compat as C

    config = C.distributed.one_rank_config()
    saved = config.compile_on_one_rank
    config.compile_on_one_rank = True
    try:
        torch._dynamo.reset()
        x, w1, w2 = P.tp_inputs("off", tp_mesh)
        out = torch.compile(P.tp_step, backend="aot_eager")(x, w1, w2, False)
        out.backward()
        assert all(t.grad is not None and t.grad.shape == t.shape for t in (x, w1, w2))
    finally:
        config.compile_on_one_rank = saved
        torch._dynamo.reset()
    group_class = C.aot.GRAPH_HELD_GROUP_CLASS
    if group_class is not None:
        import copy

        group = torch.distributed.distributed_c10d._get_default_group()
        assert copy.deepcopy(group) is group
        import dynamo_dist

        dynamo_dist.uninstall()
        assert "__deepcopy__" not in group_class.__dict__
        dynamo_dist.install()
