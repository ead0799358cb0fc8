"""Scale: what the plugin costs per call, per trace and per restart as the
world grows to 65,536 ranks and the model to many compiled blocks.

Worlds are fake (one process, rank W-1 of W: guards and traces never talk
to other ranks, so a fake world measures what a real one would), with a 1-D
(W), 2-D (W/8, 8) and 3-D (W/64, 8, 8) mesh. For each, stock and plugin in
the same run, alternating:

- guard overhead per call (compiled call minus its bare graph, CPU time) of a
  function reading a mesh, placements, a group and two DTensors; of one that
  takes one DTensor; of one that takes one mesh;
- trace + compile time of the first (backend ``eager``);
- what the plugin does per trace: mesh fingerprints computed, and the size a
  mesh adds to a compile-cache key (the plugin's identity text vs the pickled
  mesh stock keys with);
- memory a compiled function keeps (traced by ``tracemalloc``: guards, their
  copies of specs), and the plugin's own tables after it;
- the size of ``explain``'s report (JSON) on the first function.

Blocks: N identical tensor-parallel transformer blocks, each compiled on its
own (``torch.compile(block)``, as torchtitan does), on the smallest and the
largest world: frames compiled, compile time, and the guard overhead of one
block's call.
"""

from __future__ import annotations

import copy
import gc
import json
import pickle
import time
import tracemalloc
from typing import Any, Callable

import torch
import torch.distributed as dist
from torch.distributed.tensor import Replicate, Shard, distribute_tensor

from dynamo_dist import _hooks
from dynamo_dist.caching import baked_ops, keys
from dynamo_dist.demo.models import ModelConfig, build_model, make_input
from dynamo_dist.diagnostics.explain import explain
from dynamo_dist.guards import mesh as mesh_guards
from dynamo_dist.worlds import fake_world, make_mesh
from . import _timing as T
from . import guard_cost
from ._timing import Task
from .compile_time import cold_compile_seconds

WORLDS = (8, 512, 4096, 16384, 65536)
QUICK_WORLDS = (8, 512)
BLOCKS = (1, 2, 4, 8, 16, 32)
QUICK_BLOCKS = (1, 4)
# A tiny block whose heads split over the 8-rank "tp" dim of every world.
BLOCK = ModelConfig(dim=32, hidden=64, n_heads=8, seq_len=8, batch=2)


def mesh_shape(world: int, ndim: int) -> tuple[int, ...]:
    """(W), (W/8, 8) or (W/64, 8, 8); on 8 ranks, (2, 2, 2) for 3-D."""
    if ndim == 1:
        return (world,)
    if ndim == 2:
        return (world // 8, 8)
    return (2, 2, 2) if world < 64 else (world // 64, 8, 8)


def reads_everything(x, y, mesh, placements, pg):
    scale = mesh.size(-1) + dist.get_world_size(pg)
    if placements[0].is_shard():
        scale = scale + placements[0].dim
    return x.to_local() * scale + y.to_local()


def one_dtensor(x):
    return x.to_local() + 1


def one_mesh(x, mesh):
    return x * mesh.size(-1)


def _inputs(shape: tuple[int, ...]) -> dict[str, tuple]:
    mesh = make_mesh(shape, [f"d{i}" for i in range(len(shape))])
    placements = (Shard(0), *([Replicate()] * (len(shape) - 1)))
    rows = 2 * shape[0]
    x = distribute_tensor(torch.randn(rows, 4), mesh, placements)
    y = distribute_tensor(torch.randn(rows, 4), mesh, placements)
    return {
        "mesh, placements, group, 2 DTensors": (reads_everything, (x, y, mesh, placements, mesh.get_group(0))),
        "one DTensor": (one_dtensor, (x,)),
        "one mesh": (one_mesh, (torch.randn(4), mesh)),
    }


FUNCTIONS = ("mesh, placements, group, 2 DTensors", "one DTensor", "one mesh")


def _count_fingerprints() -> tuple[list[int], _hooks.Patches]:
    """Count ``mesh_fingerprint`` computations (each reads the whole rank map)."""
    count = [0]
    original = mesh_guards.mesh_fingerprint

    def counted(*args: Any, **kwargs: Any) -> tuple:
        count[0] += 1
        return original(*args, **kwargs)

    patches = _hooks.Patches()
    patches.set(mesh_guards, "mesh_fingerprint", counted)
    return count, patches


def _kept_bytes(side: str, fn: Callable[..., Any], args: tuple) -> dict[str, Any]:
    """Memory a fresh compile of ``fn`` keeps (Python allocations, after a
    collection), and the plugin's tables after it."""
    T.use(side)
    gc.collect()
    tracemalloc.start()
    try:
        before = tracemalloc.get_traced_memory()[0]
        compiled = torch.compile(T.clone_function(fn, f"{side}_memory"), backend="eager", fullgraph=True)
        with torch.no_grad():
            compiled(*args)
        gc.collect()
        kept = tracemalloc.get_traced_memory()[0] - before
    finally:
        tracemalloc.stop()
    return {"kept_bytes": kept, "known_fingerprints": len(mesh_guards.fingerprinted_mesh_ids()),
            "live_meshes": keys.live_mesh_count(), "baked_calls": baked_ops.registered_count()}


def _trace_work(args: tuple) -> dict[str, Any]:
    """Fingerprints the plugin computes in a trace that meets a mesh object it
    has not seen, and in the next trace; the size a mesh adds to a key."""
    mesh = copy.copy(args[2])  # an equal mesh, a new object
    args = (*args[:2], mesh, *args[3:])
    count, patches = _count_fingerprints()
    try:
        cold_compile_seconds(T.PLUGIN, reads_everything, args, "eager")
        first = count[0]
        count[0] = 0
        cold_compile_seconds(T.PLUGIN, reads_everything, args, "eager")  # the mesh is known now
        again = count[0]
    finally:
        patches.restore()
    return {
        "fingerprints_first_trace": first,
        "fingerprints_next_trace": again,
        "key_bytes": {T.PLUGIN: len(keys.mesh_identity(mesh).encode()), T.STOCK: len(pickle.dumps(mesh))},
    }


def _explain_bytes(args: tuple) -> int:
    report = explain(reads_everything, backend="eager")(*args)
    return len(json.dumps(report.to_dict()))


def measure_world(world: int, ndim: int, cfg: Any, progress: Callable[[str], None]) -> dict[str, Any]:
    shape = mesh_shape(world, ndim)
    row: dict[str, Any] = {"world": world, "mesh": list(shape)}
    with fake_world(world, world - 1), torch.no_grad():
        cases = _inputs(shape)
        row["guard_overhead_us"], row["guard_overhead_samples_us"] = {}, {}
        for name in FUNCTIONS:
            progress(f"guards: {name}")
            fn, args = cases[name]
            found = guard_cost.overhead(fn, [args], "eager", cfg.scale_guard_calls, cfg.scale_repeats,
                                        lambda _: None)
            row["guard_overhead_us"][name] = found["overhead_us"]
            row["guard_overhead_samples_us"][name] = found["samples_overhead_us"]
        fn, args = cases[FUNCTIONS[0]]
        progress("trace + compile")
        compiles = T.compare((T.STOCK, T.PLUGIN), cfg.scale_repeats,
                             lambda side: cold_compile_seconds(side, fn, args, "eager"))
        row["compile_s"] = {side: compiles["cpu"].median(side) for side in (T.STOCK, T.PLUGIN)}
        row["compile_samples_s"] = compiles["cpu"].samples
        progress("per-trace work, memory, explain")
        row.update(_trace_work(args))
        row["memory"] = {side: _kept_bytes(side, fn, args) for side in (T.STOCK, T.PLUGIN)}
        row["explain_bytes"] = _explain_bytes(args)
        T.use(T.STOCK)
    return row


class _Blocks(torch.nn.Module):
    """``n`` identical TP transformer blocks, each compiled on its own."""

    def __init__(self, n: int, mesh: Any) -> None:
        super().__init__()
        self.blocks = torch.nn.ModuleList(build_model("transformer", BLOCK, mesh=mesh) for _ in range(n))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        for block in self.blocks:
            x = block(x)
        return x


def _block_sample(side: str, n: int, mesh: Any, calls: int) -> dict[str, float]:
    """Build and compile ``n`` blocks afresh under ``side``; the frames
    compiled, the compile's CPU seconds, and the per-call overhead of the
    last block (its guards over its bare graph, CPU time)."""
    T.use(side)
    model = _Blocks(n, mesh)
    counter = T.FrameCounter("aot_eager", record=True)
    for block in model.blocks:
        block.forward = torch.compile(block.forward, backend=counter, fullgraph=True)
    x = make_input(BLOCK)
    start = T.cpu_seconds()
    model(x)
    compile_s = T.cpu_seconds() - start
    frames = counter.frame_count
    last, graph = model.blocks[-1], counter.compiled[-1]
    with T.no_gc():
        full = T.time_calls(last, [(x,)], calls, time.process_time)
        bare = T.time_calls(graph, [graph.args], calls, time.process_time)
    if counter.frame_count != frames:
        raise RuntimeError("recompiled while timing a block")
    return {"frames": frames, "compile_s": compile_s, "overhead_us": (full - bare) / calls * 1e6}


def measure_blocks(world: int, n: int, cfg: Any, progress: Callable[[str], None]) -> dict[str, Any]:
    with fake_world(world, world - 1), torch.no_grad():
        mesh = make_mesh(mesh_shape(world, 2), ("dp", "tp"))["tp"]
        found = T.compare((T.STOCK, T.PLUGIN), cfg.scale_repeats,
                          lambda side: _block_sample(side, n, mesh, cfg.scale_block_calls), progress)
        T.use(T.STOCK)
    metrics = ("frames", "compile_s", "overhead_us")
    return {"world": world, "blocks": n,
            **{metric: {side: found[metric].median(side) for side in (T.STOCK, T.PLUGIN)} for metric in metrics},
            "samples": {metric: found[metric].samples for metric in metrics}}


def tasks(cfg: Any) -> list[Task]:
    worlds = QUICK_WORLDS if cfg.quick else WORLDS
    out = [Task(f"scale {w} ranks {ndim}-D", lambda progress, w=w, ndim=ndim: measure_world(w, ndim, cfg, progress))
           for ndim in (1, 2, 3) for w in worlds]
    for w in (worlds[0], worlds[-1]):
        for n in (QUICK_BLOCKS if cfg.quick else BLOCKS):
            out.append(Task(f"scale {n} blocks on {w} ranks",
                            lambda progress, w=w, n=n: measure_blocks(w, n, cfg, progress)))
    return out
