"""Programs written with spmd_types (a TP step, well and ill typed), and what
each rank of a gloo world runs to compare them compiled and eager under its
type checker (importable by module name)."""

from __future__ import annotations

import contextlib
from typing import Any

import torch

spmd = None  # spmd_types, imported by ``load()`` (an optional dependency)


def load() -> Any:
    global spmd
    import spmd_types

    spmd = spmd_types
    return spmd_types


def tp_step(x, w1, w2, a2a=True):
    """Column-parallel then row-parallel matmul, each collective once:
    ``all_reduce(P -> I)``, ``reduce_scatter(P -> S(0))``, ``all_to_all``
    (S(0) -> S(1)) and ``all_gather`` back to I."""
    h = torch.relu(torch.mm(x, w1))                                   # R @ V -> V
    y = torch.mm(h, w2)                                               # V @ V -> P
    r = spmd.all_reduce(y, "tp", src=spmd.P, dst=spmd.I)
    s = spmd.reduce_scatter(y, "tp", src=spmd.P, dst=spmd.S(0))
    if a2a:
        s = spmd.all_to_all(s, "tp", src=spmd.S(0), dst=spmd.S(1))
        g = spmd.all_gather(s, "tp", src=spmd.S(1), dst=spmd.I)
    else:
        g = spmd.all_gather(s, "tp", src=spmd.S(0), dst=spmd.I)
    return (r * g).sum()


def input_types(local: bool, tp: Any) -> tuple[dict, dict, dict]:
    """x replicated, w1 column-sharded, w2 row-sharded: local types in the
    checker's local mode, PartitionSpec-style shards in its global mode."""
    if local:
        return {tp: spmd.R}, {tp: spmd.V}, {tp: spmd.V}
    return {tp: spmd.R}, {tp: spmd.S(1)}, {tp: spmd.S(0)}


def bad_collective(x, w):
    """An R tensor given to ``all_reduce(src=P)``."""
    y = torch.mm(x, w)
    return spmd.all_reduce(y, "tp", src=spmd.P, dst=spmd.R)


def bad_assert(x, w):
    """``assert_type`` of an R tensor as V."""
    y = torch.mm(x, w)
    spmd.assert_type(y, {spmd.current_mesh_names()["tp"]: spmd.V})
    return y


def bad_mix(x, w):
    """I + R, after a collective (the checker's rule for add)."""
    i = spmd.all_reduce(torch.mm(x, w), "tp", src=spmd.V, dst=spmd.I)
    return i + x


ILL_TYPED = ("bad_collective", "bad_assert", "bad_mix")


Scaled = None  # made by ``registered_function()`` once spmd_types is loaded


def registered_function() -> type:
    """An ``autograd.Function`` registered with the checker by its
    ``typecheck_forward``, as torchtitan's vocab-parallel loss (a class of
    the module, applied as ``Scaled.apply``): eager's checker runs
    ``typecheck_forward`` (S(0) in, S(0) out) instead of the Function, and
    never sees inside ``forward``, whose ``x * 2 + r`` mixes a sharded
    tensor with an R one (what the checker's rule for add refuses)."""
    global Scaled
    if Scaled is None:
        class Scaled(torch.autograd.Function):  # noqa: F811 (the module's class, made once)
            @staticmethod
            def typecheck_forward(x, axis):
                spmd.assert_type(x, {axis: spmd.S(0)})
                out = Scaled.apply(x, axis)
                spmd.assert_type(out, {axis: spmd.S(0)})
                return out

            @staticmethod
            def forward(ctx, x, axis):
                r = torch.ones_like(x)
                spmd.assert_type(r, {axis: spmd.R})
                return x * 2 + r

            @staticmethod
            def backward(ctx, grad):
                return grad * 2, None

        Scaled.__qualname__ = "Scaled"
        Scaled = spmd.register_autograd_function(Scaled)
    return Scaled


def registered_step(x, axis):
    return Scaled.apply(torch.relu(x), axis) * 3


def checker(mode: str) -> Any:
    """``typecheck()`` in ``mode`` ("local" or "global"), or no checker ("off")."""
    from spmd_types.checker import typecheck

    return contextlib.nullcontext() if mode == "off" else typecheck(local=mode == "local")


def tp_inputs(mode: str, tp: Any, seed: int = 0, grad: bool = True) -> tuple[torch.Tensor, ...]:
    """The TP step's inputs (the same on every rank for x, this rank's shard
    for the weights), typed as the checker in ``mode`` expects."""
    g = torch.Generator().manual_seed(seed)
    rank = torch.distributed.get_rank()
    with spmd.no_typecheck():
        x = torch.randn(4, 8, generator=g)
        w1 = torch.randn(2, 8, 6, generator=g)[rank % 2]
        w2 = torch.randn(2, 6, 8, generator=g)[rank % 2]
        out = tuple(t.clone().requires_grad_(grad) for t in (x, w1, w2))
    if mode != "off":
        for t, ty in zip(out, input_types(mode == "local", tp)):
            spmd.assert_type(t, ty)
    return out


def rank_tp_values(cases: list[tuple[str, bool, str]]) -> dict:
    """On a gloo rank, with dynamo_dist installed: for each (checker mode,
    all_to_all or not, backend), the TP step (forward and backward) eager and
    compiled under the checker; the output, gradients and output types of
    each (as plain numbers: tensors would be shared with the caller through
    files the rank removes when it ends), and the graph breaks."""
    import dynamo_dist
    from dynamo_dist.testing import make_mesh
    from torch._dynamo.utils import counters

    load()
    dynamo_dist.install()
    mesh = make_mesh((2,), ("tp",))
    results = {}
    for mode, a2a, backend in cases:
        torch._dynamo.reset()
        result = results[mode, a2a, backend] = {}
        with spmd.set_current_mesh(mesh), checker(mode):
            tp = spmd.current_mesh_names()["tp"]
            for name, fn in (("eager", tp_step), ("compiled", torch.compile(tp_step, backend=backend))):
                counters.clear()
                x, w1, w2 = tp_inputs(mode, tp)
                out = fn(x, w1, w2, a2a)
                out.backward()
                with spmd.no_typecheck():
                    result[name] = {
                        "out": out.item(), "grads": [t.grad.tolist() for t in (x, w1, w2)],
                        "types": [repr(spmd.get_local_type(t)) if mode != "off" else None
                                  for t in (out, x.grad, w1.grad, w2.grad)],
                        "breaks": sum(counters["graph_break"].values()),
                    }
    return results


def rank_restart(modes: list[str], other_group: bool = False, plugin: bool = True) -> dict:
    """On a gloo rank under ``TORCH_CACHING_PRECOMPILE=1``: the TP step
    (forward and backward) eager and compiled with inductor under each
    checker mode in turn (one function, a variant per mode), then Dynamo's
    cache entries saved. For each mode, eager's and the compiled step's
    output, gradients and output types, and the graphs traced in this
    process for the compiled call (0 where the frame was loaded).
    ``other_group``: the current mesh over a group made in this process
    (another name than WORLD's, with the same ranks). ``plugin``: False
    runs stock torch."""
    import dynamo_dist
    from torch._dynamo.utils import counters
    from torch.distributed.device_mesh import DeviceMesh

    load()
    if plugin:
        dynamo_dist.install()
    group = torch.distributed.new_group([0, 1]) if other_group else torch.distributed.group.WORLD
    mesh = DeviceMesh.from_group(group, "cpu", mesh_dim_names=("tp",))
    results = {}
    for mode in modes:
        result = results[mode] = {}
        with spmd.set_current_mesh(mesh), checker(mode):
            tp = spmd.current_mesh_names()["tp"]
            # torch builds a loaded frame's guards when torch.compile wraps
            # the function, reading the spmd_types state then: wrapped here.
            for name, fn in (("eager", tp_step), ("compiled", torch.compile(tp_step))):
                before = counters["stats"]["unique_graphs"]
                x, w1, w2 = tp_inputs(mode, tp)
                out = fn(x, w1, w2)
                out.backward()
                with spmd.no_typecheck():
                    result[name] = {
                        "out": out.item(), "grads": [t.grad.tolist() for t in (x, w1, w2)],
                        "types": [repr(spmd.get_local_type(t)) if mode != "off" else None
                                  for t in (out, x.grad, w1.grad, w2.grad)],
                        "traced": counters["stats"]["unique_graphs"] - before,
                    }
    torch.compiler.save_cache_artifacts()
    return results


def rank_group_constants(sides: list[str], other_group: bool = False) -> dict:
    """On a gloo rank under ``compile_on_one_rank``, for each side in turn
    ("stock", then "plugin": installed after stock ran): the TP step
    (forward and backward, no all_to_all) eager and compiled with inductor;
    eager's and the compiled step's output and gradients, and the FX-graph
    cache's outcomes of the compiled call (``hit``, ``miss``, and
    ``unsaved``: graphs it failed to pickle); for stock, the error its
    compiled step raised instead of the values, if any. Its graphs hold the mesh
    axis's group as an object (torch passes the group itself to functional
    collectives under ``compile_on_one_rank``). ``other_group``: the current
    mesh over a group made in this process (another name than WORLD's, the
    same ranks)."""
    import dynamo_dist
    from torch._dynamo.utils import counters
    from torch.distributed.device_mesh import DeviceMesh

    load()
    torch.compiler.config.compile_on_one_rank = True
    group = torch.distributed.new_group([0, 1]) if other_group else torch.distributed.group.WORLD
    mesh = DeviceMesh.from_group(group, "cpu", mesh_dim_names=("tp",))
    results = {}
    for side in sides:
        if side == "plugin":
            dynamo_dist.install()
        torch._dynamo.reset()
        result = results[side] = {}
        with spmd.set_current_mesh(mesh):
            for name, fn in (("eager", tp_step), ("compiled", torch.compile(tp_step))):
                counters.clear()
                x, w1, w2 = tp_inputs("off", None)
                try:
                    out = fn(x, w1, w2, False)
                    out.backward()
                except Exception as e:  # stock: its backward fails (asserted by the test)
                    if side == "plugin" or name == "eager":
                        raise
                    result[name] = {"error": f"{type(e).__name__}: {e}"}
                else:
                    result[name] = {"out": out.item(), "grads": [t.grad.tolist() for t in (x, w1, w2)]}
                result[name].update(hit=counters["inductor"]["fxgraph_cache_hit"],
                                    miss=counters["inductor"]["fxgraph_cache_miss"],
                                    unsaved=counters["inductor"]["fxgraph_cache_pickle_error"])
    return results
