"""Planning cost: the CPU time DTensor's redistribute planner spends while
Dynamo traces a redistribution across every mesh dim, greedy against
min-cost (``use_min_cost_redistribution_plan``), on 2-D, 3-D and 4-D meshes.

A trace plans afresh each time it meets the redistribution (DTensor's plan
cache is for eager; the rows count the calls). The planner is DTensor's own
code on either side; the plugin changes what it is handed (folded meshes,
baked calls), so stock and plugin are sampled alike, in alternating rounds,
each a cold compile (backend ``aot_eager``) in a fake world of 16 ranks
(rank 15).

Per mesh and redistribution: the planner's CPU milliseconds and calls in one
compile, the compile's CPU seconds, and the steps of each plan.
"""

from __future__ import annotations

from typing import Any, Callable

import torch
from torch.distributed.tensor import DTensor
from torch.distributed.tensor.placement_types import Partial, Replicate, Shard

from dynamo_dist import _hooks
from dynamo_dist._compat import observe as O
from dynamo_dist.worlds import fake_world, make_mesh
from . import _timing as T
from ._timing import Task

WORLD = 16
MESHES = ((4, 4), (4, 2, 2), (2, 2, 2, 2))
QUICK_MESHES = ((4, 4),)
SHAPE = (64, 64)  # the local tensor (a 2-D tensor: the planner's states grow with its dims)
PLANNERS = ("greedy", "min_cost")


def redistributions(ndim: int) -> dict[str, tuple[list[Any], list[Any]]]:
    """Source and target placements across all ``ndim`` mesh dims."""
    return {
        "Shard(0), Shard(1), ... -> Replicate": ([Shard(i % 2) for i in range(ndim)], [Replicate()] * ndim),
        "Shard(0) -> Shard(1) on every dim": ([Shard(0)] * ndim, [Shard(1)] * ndim),
        "Partial -> Replicate on every dim": ([Partial()] * ndim, [Replicate()] * ndim),
    }


def _program(mesh: Any, src: list[Any], dst: list[Any]) -> Callable[[torch.Tensor], torch.Tensor]:
    def redistribute(local: torch.Tensor) -> torch.Tensor:
        d = DTensor.from_local(local, mesh, src, run_check=False)
        return d.redistribute(mesh, dst).to_local()

    return redistribute


def _sample(side: str, fn: Callable[..., Any], min_cost: bool) -> dict[str, float]:
    """One cold compile of ``fn`` under ``side``: the planner's CPU ms and
    calls inside it, and the compile's CPU seconds."""
    T.use(side)  # resets Dynamo
    O.forget_dtensor_plans()
    spent, patches = _hooks.planner_timer()
    counter = T.FrameCounter("aot_eager")
    compiled = torch.compile(fn, backend=counter, fullgraph=True)
    try:
        with O.use_min_cost_plan(min_cost):
            start = T.cpu_seconds()
            compiled(torch.ones(SHAPE))
            compile_s = T.cpu_seconds() - start
    finally:
        patches.restore()
    if counter.frame_count != 1:
        raise RuntimeError(f"expected 1 compiled frame, got {counter.frame_count}")
    return {"planner_ms": spent[0] * 1e3, "planner_calls": spent[1], "compile_s": compile_s}


def measure_mesh(shape: tuple[int, ...], cfg: Any, progress: Callable[[str], None]) -> dict[str, Any]:
    rows = []
    with fake_world(WORLD, WORLD - 1), torch.no_grad():
        mesh = make_mesh(shape, [f"d{i}" for i in range(len(shape))])
        for name, (src, dst) in redistributions(len(shape)).items():
            fn = _program(mesh, src, dst)
            whole = list(SHAPE)  # the DTensor's shape: the local one times the mesh dims that shard it
            for dim, p in enumerate(src):
                if p.is_shard():
                    whole[p.dim] *= shape[dim]
            row: dict[str, Any] = {"redistribution": name, "steps": {
                planner: len(O.redistribute_plan(mesh, src, dst, tuple(whole), planner == "min_cost"))
                for planner in PLANNERS}}
            for planner in PLANNERS:
                progress(f"{name}, {planner}")
                found = T.compare((T.STOCK, T.PLUGIN), cfg.planner_repeats,
                                  lambda side: _sample(side, fn, planner == "min_cost"))
                metrics = ("planner_ms", "planner_calls", "compile_s")
                row[planner] = {metric: {side: found[metric].median(side) for side in (T.STOCK, T.PLUGIN)}
                                for metric in metrics}
                row[planner]["samples"] = {metric: found[metric].samples for metric in metrics}
            rows.append(row)
        T.use(T.STOCK)
        O.forget_dtensor_plans()
    return {"world": WORLD, "mesh": list(shape), "local_shape": list(SHAPE), "rows": rows}


def tasks(cfg: Any) -> list[Task]:
    return [Task(f"planner {'x'.join(map(str, shape))} mesh",
                 lambda progress, shape=shape: measure_mesh(shape, cfg, progress))
            for shape in (QUICK_MESHES if cfg.quick else MESHES)]
