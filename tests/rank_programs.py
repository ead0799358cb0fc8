"""Functions run on each rank of a spawned gloo world (must be importable)."""

import torch
import torch.distributed as dist

from devtools.clients import run_driver


def rank_queries(x, mesh):
    c = mesh.get_coordinate()
    out = x + mesh.get_local_rank("tp") * 10 + c[0] + mesh.get_rank() * 100
    out = out + mesh.get_group("tp").rank() * 1000 + dist.get_rank(mesh.get_group("dp")) * 10000
    return out + dist.get_rank() * 100000


def compile_on_one_rank_check():
    """Compile rank_queries with compile_on_one_rank on; return (graph code, compiled, eager)."""
    import dynamo_dist
    from dynamo_dist import _compat as C
    from dynamo_dist.testing import compile_and_run, distributed_objects_in, make_mesh

    dynamo_dist.install()
    dist_config = C.distributed.one_rank_config()  # torch.compiler.config on 2.14+
    dist_config.compile_on_one_rank = True
    mesh = make_mesh((1, 2), ("dp", "tp"))
    run = compile_and_run(rank_queries, torch.zeros(1), mesh)
    leaked = distributed_objects_in(run.graphs[0])
    dist_config.compile_on_one_rank = False
    torch._dynamo.reset()
    folded = compile_and_run(rank_queries, torch.zeros(1), mesh)
    return {
        "code": run.graphs[0].code,
        "compiled": run.compiled.item(),
        "eager": run.eager.item(),
        "leaked": leaked,
        "folded_code": folded.graphs[0].code,
        "folded": folded.compiled.item(),
    }



def stale_plan_values(plugin, small, big):
    """Partial on both dims of a (dp=2, tp=2) mesh, to Replicate: compiled
    code that keeps an older plan (the greedy one after the min-cost switch;
    the traced size's with a dynamic size past the min-cost crossover) against
    eager, which plans afresh. Integer-valued data, so every reduction order
    sums exactly. Returns ``{case: compiled equals eager}`` and the number
    of steps of the min-cost plan at each size."""
    import dynamo_dist
    from dynamo_dist._compat import observe as O
    from dynamo_dist.testing import make_mesh
    from torch.distributed.tensor import DTensor
    from torch.distributed.tensor.placement_types import Partial, Replicate

    if plugin:
        dynamo_dist.install()
    mesh = make_mesh((2, 2), ("dp", "tp"))

    def fn(local):
        d = DTensor.from_local(local, mesh, [Partial(), Partial()], run_check=False)
        return d.redistribute(mesh, [Replicate(), Replicate()]).to_local() * 2

    def data(rows, dynamic=False):
        x = (torch.arange(rows * 64, dtype=torch.float32).reshape(rows, 64) % 7) + dist.get_rank()
        if dynamic:
            torch._dynamo.mark_dynamic(x, 0)
        return x

    def fresh():
        torch._dynamo.reset()
        O.forget_dtensor_plans()
        return torch.compile(fn, backend="aot_eager", fullgraph=True)

    same = {}
    cfn = fresh()
    cfn(data(big))
    with O.use_min_cost_plan(True):
        O.forget_dtensor_plans()
        same["min-cost switched on after the compile"] = torch.equal(cfn(data(big)), fn(data(big)))
        for traced, called in ((small, big), (big, small)):
            cfn = fresh()
            cfn(data(traced, dynamic=True))
            same[f"min-cost, traced {traced} rows, called with {called}"] = torch.equal(
                cfn(data(called, dynamic=True)), fn(data(called)))
    steps = {n: len(O.redistribute_plan(mesh, (Partial(), Partial()), (Replicate(), Replicate()), (n, 64), True))
             for n in (small, big)}
    return same, steps


def changing_lengths(model_name, shapes, modes=("automatic", "mark_dynamic", "dynamic=True")):
    """With the plugin, train-step a tensor/sequence-parallel model (compiled
    forward, eager backward) on inputs of changing (batch, seq_len): with
    automatic dynamic shapes ("automatic"), with batch and sequence marked
    dynamic ("mark_dynamic") and compiled with ``dynamic=True``, as ``modes``
    lists. Returns {how: (frames compiled, largest |compiled - eager| over outputs and
    gradients)}."""
    import dynamo_dist
    from dynamo_dist._compat import observe as O
    from dynamo_dist.demo.models import SIZES, build_model, local_input
    from dynamo_dist.testing import make_mesh

    dynamo_dist.install()
    mesh = make_mesh((dist.get_world_size(),), ("tp",))
    config = SIZES["tiny"]
    found = {}
    for how in modes:
        mark_dynamic = how == "mark_dynamic"
        O.reset_dynamo()
        eager = build_model(model_name, config, mesh=mesh)
        model = build_model(model_name, config, mesh=mesh)
        counter = O.compile_counter("aot_eager")
        compiled = torch.compile(model, backend=counter, dynamic=True if how == "dynamic=True" else None)
        worst = 0.0
        for batch, seq in shapes:
            full = torch.randn(batch, seq, config.dim, generator=torch.Generator().manual_seed(seq))
            x = local_input(model_name, full, mesh)
            if mark_dynamic:
                torch._dynamo.mark_dynamic(x, 0)
                torch._dynamo.mark_dynamic(x, 1)
            outs = []
            for m in (eager, compiled):
                out = m(x)
                local = out.to_local() if hasattr(out, "to_local") else out
                local.sum().backward()
                outs.append(local.detach())
            worst = max(worst, (outs[0] - outs[1]).abs().max().item())
            for pe, pc in zip(eager.parameters(), model.parameters()):
                ge, gc = (g.full_tensor() if hasattr(g, "full_tensor") else g for g in (pe.grad, pc.grad))
                worst = max(worst, (ge - gc).abs().max().item())
                pe.grad = pc.grad = None
        found[how] = (counter.frame_count, worst)
    dynamo_dist.uninstall()
    return found


def backward_inside_compiled_mlp():
    """A TP MLP step whose ``loss.backward()`` runs inside the compiled
    function, with the plugin: (frames Dynamo compiled, graph-break reasons,
    largest |compiled - eager| over loss and gradients, both calls)."""
    import dynamo_dist
    from dynamo_dist._compat import observe as O
    from dynamo_dist.demo.models import SIZES, build_model, make_input
    from dynamo_dist.testing import make_mesh
    from helpers import compile_counting_frames

    dynamo_dist.install()
    mesh = make_mesh((dist.get_world_size(),), ("tp",))
    model = build_model("mlp", SIZES["tiny"], mesh=mesh)
    x = make_input(SIZES["tiny"])

    def step(x):
        loss = model(x).sum()
        loss.backward()
        return loss.detach()

    def run(fn):
        loss = fn(x)
        grads = [p.grad.full_tensor() for p in model.parameters()]
        for p in model.parameters():
            p.grad = None
        return [loss, *grads]

    eager = run(step)
    compiled, compiled_frames = compile_counting_frames(step)
    worst = 0.0
    for _ in range(2):
        got = run(compiled)
        worst = max(worst, max((a - b).abs().max().item() for a, b in zip(got, eager)))
    frames = compiled_frames()
    reasons = sorted(O.graph_break_reasons())
    dynamo_dist.uninstall()
    return frames, reasons, worst


def torchtitan_world(cases, steps, eager_only):
    """torchtitan's ``cases`` trained ``steps`` steps in every mode, then
    each of ``eager_only`` one step eagerly (what fails, fails there): the
    RunResults of this rank."""
    return (run_driver("torchtitan", "run_cases", cases, steps)
            + run_driver("torchtitan", "run_cases", eager_only, 1, ("eager",)))


def programs_users_write():
    """With the plugin, on this rank: DTensors made from plain tensors that
    require grad and returned, ``loss_parallel`` and ``implicit_replication``
    entered inside the compiled function, an ``AsyncCollectiveTensor`` input
    that requires grad. Each compiled (aot_eager) and run eagerly; returns
    {program: largest |compiled - eager| over its result and the gradient of
    its input, or the error compiled raised}."""
    import dynamo_dist
    from dynamo_dist._compat import observe as O
    from dynamo_dist.testing import make_mesh
    from torch.distributed.tensor import DTensor, Replicate, Shard
    from torch.distributed.tensor.experimental import implicit_replication
    from torch.distributed.tensor.parallel import loss_parallel

    dynamo_dist.install()
    mesh = make_mesh((dist.get_world_size(),))
    rank = dist.get_rank()
    gen = torch.Generator().manual_seed(0)
    logits = torch.randn(8, 8 * mesh.size(), generator=gen)
    target = torch.randint(0, 8 * mesh.size(), (8,), generator=gen)
    wide = torch.randn(4 * mesh.size(), 4, generator=gen)

    def local(x):
        return x.to_local() if isinstance(x, DTensor) else x

    def loss_inside(x):
        with loss_parallel():
            loss = torch.nn.functional.cross_entropy(DTensor.from_local(x, mesh, [Shard(1)]), target)
            loss.backward()
        return loss.detach()

    def loss_returned(x):
        with loss_parallel():
            return torch.nn.functional.cross_entropy(DTensor.from_local(x, mesh, [Shard(1)]), target)

    def implicit(x):
        with implicit_replication():
            return (DTensor.from_local(x, mesh, [Shard(0)]) * wide + 1).to_local()

    def async_input(t):
        return t.sin().sin()

    def async_collective(x):
        return DTensor.from_local(x, mesh, [Shard(0)]).redistribute(mesh, [Replicate()], async_op=True).to_local()

    shard = logits.chunk(mesh.size(), 1)[rank]
    programs = {  # name -> (function, its input, how its input is made from the leaf, backward's mode)
        "from_local Replicate, returned": (lambda x: DTensor.from_local(x, mesh, [Replicate()]), None, None),
        "from_local Shard(0), returned": (lambda x: DTensor.from_local(x, mesh, [Shard(0)]), None, None),
        "from_local, then * 2, returned": (lambda x: DTensor.from_local(x, mesh, [Replicate()]) * 2, None, None),
        "loss_parallel inside, backward inside": (loss_inside, shard, None),
        "loss_parallel inside, backward outside": (loss_returned, shard, loss_parallel),
        "implicit_replication inside": (implicit, None, implicit_replication),
        "AsyncCollectiveTensor input that requires grad": (async_input, None, async_collective),
    }
    found = {}
    for name, (fn, base, mode) in programs.items():
        O.reset_dynamo()
        leaf_value = (base if base is not None else torch.randn(4, 4, generator=gen))
        results = []
        for compile_it in (False, True):
            leaf = leaf_value.clone().requires_grad_()
            x = mode(leaf) if mode is async_collective else leaf
            run = torch.compile(fn, backend="aot_eager") if compile_it else fn
            try:
                out = run(x)
                if out.requires_grad:
                    if mode in (loss_parallel, implicit_replication):
                        with mode():
                            local(out).sum().backward()
                    else:
                        local(out).sum().backward()
            except Exception as e:
                results.append(f"{type(e).__name__}: {str(e).strip().splitlines()[0][:200]}")
                break
            results.append((local(out).detach(), leaf.grad))
        if any(isinstance(r, str) for r in results):
            found[name] = next(r for r in results if isinstance(r, str))
            continue
        (want, want_grad), (got, got_grad) = results
        if (want_grad is None) != (got_grad is None):
            found[name] = f"gradient of the input: eager {want_grad is not None}, compiled {got_grad is not None}"
            continue
        worst = (want - got).abs().max().item()
        if want_grad is not None:
            worst = max(worst, (want_grad - got_grad).abs().max().item())
        found[name] = worst
    dynamo_dist.uninstall()
    return found


def _uneven_loss_parallel(x, mesh):
    from torch.distributed.tensor import DTensor, Shard
    from torch.distributed.tensor.parallel import loss_parallel

    d = DTensor.from_local(x * 2, mesh, [Shard(0)], run_check=False)
    d = d.redistribute(d.device_mesh, [Shard(1)])
    target = torch.arange(d.shape[0]) % d.shape[1]
    with loss_parallel():
        loss = torch.nn.functional.cross_entropy(d, target)
    return loss * 2


def _uneven_redistribute(x, mesh):
    from torch.distributed.tensor import DTensor, Shard

    d = DTensor.from_local(x * 2, mesh, [Shard(0)], run_check=False)
    d = d.redistribute(d.device_mesh, [Shard(1)])
    return d, torch.arange(d.shape[0]) % d.shape[1]


def _uneven_distribute(x, mesh):
    from torch.distributed.tensor import Shard, distribute_tensor

    return distribute_tensor(x, mesh, [Shard(2)])


# Programs whose dynamic sizes split unevenly over the ranks, with the
# shapes of their successive calls (the local input of each rank).
UNEVEN_DYNAMIC = {
    "loss_parallel": (_uneven_loss_parallel, [(5, 2), (5, 4), (5, 7)]),
    "redistribute": (_uneven_redistribute, [(5, 2), (5, 4), (5, 7)]),
    "distribute_tensor": (_uneven_distribute, [(2, 2, 2), (2, 2, 4), (2, 2, 7)]),
}


def uneven_dynamic_sizes(names, plugin, calls=None):
    """Compile each of ``UNEVEN_DYNAMIC[name]`` for ``names`` with
    ``dynamic=True`` (with the plugin, or stock) and call it on its shapes
    (the first ``calls``). Returns {name: {"graphs": the code of each graph
    compiled, "wrong": the largest |compiled - eager| over the calls,
    "error": the first call's error (then its calls stop)}}."""
    from dynamo_dist._compat import observe as O
    from dynamo_dist.testing import make_mesh
    import dynamo_dist

    aot_eager = torch._dynamo.lookup_backend("aot_eager")
    mesh = make_mesh((dist.get_world_size(),))
    if plugin:
        dynamo_dist.install()
    results = {}
    for name in names:
        fn, shapes = UNEVEN_DYNAMIC[name]
        O.reset_dynamo()
        graphs = []

        def backend(gm, inputs):
            graphs.append(gm.code.strip())
            return aot_eager(gm, inputs)

        compiled = torch.compile(fn, backend=backend, dynamic=True)
        found = results[name] = {"graphs": graphs, "wrong": 0.0, "error": None}
        for call, shape in enumerate(shapes[:calls]):
            x = torch.randn(shape, generator=torch.Generator().manual_seed(call)) + 0.5 * dist.get_rank()
            want = fn(x, mesh)
            try:
                got = compiled(x, mesh)
            except Exception as e:
                found["error"] = f"call {call}: {type(e).__name__}: {str(e).strip().splitlines()[0][:200]}"
                break
            for w, g in zip(torch.utils._pytree.tree_leaves(want), torch.utils._pytree.tree_leaves(got)):
                # Each rank's piece: no collective, as a peer may have failed.
                w, g = (t.to_local() if hasattr(t, "to_local") else t for t in (w, g))
                found["wrong"] = max(found["wrong"], (w.float() - g.float()).abs().max().item())
    O.reset_dynamo()
    dynamo_dist.uninstall()
    return results
