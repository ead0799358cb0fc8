"""Section 2 of the benchmarks: the per-call cost of a compiled function over its bare graph.

A compiled function taking a mesh, placements, a process group and two
DTensors is called many times. Its *bare graph* is what the backend compiled
(captured by a ``FrameCounter(record=True)``), called directly with the
arguments Dynamo last gave it. Overhead per call = compiled call - bare call:
guard evaluation, frame evaluation, argument extraction and output handling.

Set-up: a fake 8-rank world seen from rank 3 (guards never talk to other
ranks, so a fake world measures exactly what a real one would), a (2, 4)
("dp", "tp") mesh, backend ``eager``. More cases: the same mesh, placements
and group with plain tensors (our guards without the DTensor ones); an equal
*new* submesh object on every call (the mesh guard's fingerprint path); the
forward of the tensor-parallel transformer block (``aot_eager``; guards on
the module tree and the DTensor parameters). Each side compiles its own copy
once; samples then alternate stock / plugin, each sample timing ``calls``
compiled calls and ``calls`` bare calls interleaved in four chunks. Times are
CPU time of this (single-threaded) process: the same as wall time on an idle
machine, but not inflated when a busy machine preempts the loop.
"""

from __future__ import annotations

import time
from typing import Any, Callable

import torch
import torch.distributed as dist
from torch.distributed.tensor import distribute_tensor
from torch.distributed.tensor.placement_types import Replicate, Shard

from dynamo_dist.demo.models import SIZES, build_model, make_input
from dynamo_dist.worlds import fake_world, make_mesh

from . import _timing as T
from ._timing import Task

WORLD = (8, 3)


def with_dtensors(x, y, mesh, placements, pg):

    scale = mesh["tp"].size() + dist.get_world_size(pg)
    if placements[0].is_shard():
        scale = scale + placements[0].dim
    return x.to_local() * scale + y.to_local()


def with_tensors(x, y, mesh, placements, pg):

    scale = mesh["tp"].size() + dist.get_world_size(pg)
    if placements[0].is_shard():
        scale = scale + placements[0].dim
    return x * scale + y


def tp_block_forward(model, x):
    return model(x)


def _query_args(dtensors: bool) -> tuple:


    mesh = make_mesh((2, 4), ("dp", "tp"))
    placements = (Shard(0), Replicate())
    x, y = torch.randn(8, 4), torch.randn(8, 4)
    if dtensors:
        x, y = distribute_tensor(x, mesh, placements), distribute_tensor(y, mesh, placements)
    return x, y, mesh, placements, mesh.get_group("dp")


def new_submesh_each_call(x, mesh):
    return x * mesh.size() + mesh.get_local_rank()


def _submesh_args() -> list[tuple]:

    root = make_mesh((2, 4), ("dp", "tp"))
    x = torch.randn(4)
    return [(x, root["tp"]) for _ in range(1000)]  # equal meshes, 1000 distinct objects


def _block_args() -> tuple:

    mesh = make_mesh((2, 4), ("dp", "tp"))
    return build_model("transformer", SIZES["tiny"], mesh=mesh["tp"]), make_input(SIZES["tiny"])


# name -> (function, its argument tuples (called in turn), backend).
# "new equal submesh each call": mesh["tp"] sliced afresh for every call, as
# a training loop that slices outside the compiled step does; the plugin's
# mesh guard then takes its fingerprint path instead of the identity check.
# The TP block (8 DTensor and 4 plain parameters behind module attributes,
# forward under no_grad) shows the guards a real model's step pays; its bare
# graph is AOTAutograd's runtime wrapper, which unwraps the DTensor parameters.
CASES: dict[str, tuple[Callable[..., Any], Callable[[], list[tuple]], str]] = {
    "mesh+placements+group+2 DTensors": (with_dtensors, lambda: [_query_args(True)], "eager"),
    "mesh+placements+group+2 tensors": (with_tensors, lambda: [_query_args(False)], "eager"),
    "new equal submesh each call": (new_submesh_each_call, _submesh_args, "eager"),
    "TP transformer block forward": (tp_block_forward, lambda: [_block_args()], "aot_eager"),
}


class _Side:
    """One side's compiled copy of the function and its bare graph."""

    def __init__(self, side: str, fn: Callable[..., Any], argsets: list[tuple], backend: str) -> None:
        T.switch_keeping_caches(side)
        self.counter = T.FrameCounter(backend, record=True)
        self.compiled = torch.compile(T.clone_function(fn, side), backend=self.counter, fullgraph=True)
        self.argsets = argsets
        want = fn(*argsets[0])
        got = self.compiled(*argsets[0])
        # equal_nan: the fake world's collectives leave the TP block's
        # parameters uninitialised; compiled and eager must still agree.
        torch.testing.assert_close(got, want, equal_nan=True,
                                   msg=lambda m: f"{side}: compiled differs from eager: {m}")
        self.bare = self.counter.compiled[0]
        self.bare_args = self.bare.args
        # The same loop (cycling through as many argument tuples) for both.
        self.bare_argsets = [self.bare_args] * len(argsets)

    def sample(self, calls: int) -> tuple[float, float]:
        """(compiled, bare) seconds per call."""
        full = bare = 0.0
        chunk = max(1, calls // 4)
        with T.no_gc():
            for _ in range(4):
                full += T.time_calls(self.compiled, self.argsets, chunk, time.process_time)
                bare += T.time_calls(self.bare, self.bare_argsets, chunk, time.process_time)
        if self.counter.frame_count != 1:
            raise RuntimeError("recompiled while timing guard cost")
        return full / (4 * chunk), bare / (4 * chunk)


# Cases whose call costs ~10x the others run 10x fewer calls per sample.
CALLS_DIVISOR = {"TP transformer block forward": 10}


def overhead(fn: Callable[..., Any], argsets: list[tuple], backend: str, calls: int, repeats: int,
             progress: Callable[[str], None]) -> dict[str, Any]:
    """Per-call cost of ``fn`` compiled over its bare graph, stock and plugin
    alternating, in the current world (under ``torch.no_grad`` if wanted)."""
    sides = {side: _Side(side, fn, argsets, backend) for side in (T.STOCK, T.PLUGIN)}
    for side in sides.values():  # warm-up
        side.sample(min(calls, 1000))
    full, bare, extra = T.Comparison(), T.Comparison(), T.Comparison()
    for r, side in T.rounds((T.STOCK, T.PLUGIN), repeats):
        progress(f"{side} {r + 1}/{repeats}")
        f, b = sides[side].sample(calls)
        full.add(side, f)
        bare.add(side, b)
        extra.add(side, f - b)
    graph_inputs = {s: [type(a).__name__ for a in sides[s].bare_args] for s in sides}
    del sides
    T.use(T.STOCK)
    return {
        "calls": calls,
        "repeats": repeats,
        "graph_inputs": graph_inputs,
        "full_us": {s: full.median(s) * 1e6 for s in (T.STOCK, T.PLUGIN)},
        "bare_us": {s: bare.median(s) * 1e6 for s in (T.STOCK, T.PLUGIN)},
        "overhead_us": {s: extra.median(s) * 1e6 for s in (T.STOCK, T.PLUGIN)},
        "overhead_ratio": extra.ratio(T.PLUGIN, T.STOCK),
        "full_ratio": full.ratio(T.PLUGIN, T.STOCK),
        "samples_overhead_us": {s: [v * 1e6 for v in vs] for s, vs in extra.samples.items()},
    }


def measure(name: str, calls: int, repeats: int, progress: Callable[[str], None]) -> dict[str, Any]:

    fn, make_args, backend = CASES[name]
    calls = max(100, calls // CALLS_DIVISOR.get(name, 1))
    with fake_world(*WORLD), torch.no_grad():
        return {"name": name, "backend": backend, **overhead(fn, make_args(), backend, calls, repeats, progress)}


def tasks(cfg: Any) -> list[Task]:
    return [
        Task(f"guard_cost {name}", lambda progress, name=name: measure(name, cfg.guard_calls, cfg.guard_repeats,
                                                                        progress))
        for name in CASES
    ]
