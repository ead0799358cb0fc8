"""Section 1 of the benchmarks: trace + compile time, stock torch vs the plugin.

(a) Mesh / placement / group query functions (backend ``eager``: tracing is
    the whole cost), in a fake 8-rank world.
(b) The tensor-parallel MLP and the transformer block of
    ``dynamo_dist.demo.models`` (forward and backward of one step), in a
    fake world, with backends ``eager``, ``aot_eager`` and ``inductor``.

One sample is one cold compile: Dynamo is reset, then the first call of a
freshly compiled function is timed (trace + compile + one run; the run is
negligible next to compiling), in wall time and in CPU time (this process
and the compiler processes it waits for; on a busy machine the CPU ratio is
the steadier one). Inductor's FX-graph and AOT-autograd caches
are switched off so every sample really compiles; its on-disk kernel cache
stays on (both sides generate the same kernels, and one warm-up compile per
side fills it before sampling starts).
"""

from __future__ import annotations

import contextlib
import gc
import time
from typing import Any, Callable, Iterator

import torch
import torch.distributed as dist
from torch.distributed.tensor.placement_types import Partial, Replicate, Shard

from dynamo_dist import _hooks
from dynamo_dist._compat.observe import funcol, reset_dynamo
from dynamo_dist.demo.models import build_model, local_input, make_input
from dynamo_dist.worlds import fake_world, make_mesh

from . import _timing as T
from ._models import model_config, train_step
from ._timing import Task

WORLD = (8, 3)  # fake world: 8 ranks, seen from rank 3


# ---------------------------------------------------------------------------
# (a) query functions. Each compiles with fullgraph=True on stock torch too
# (members stock crashes on are left out: they cannot be timed on stock).


def mesh_queries(x, mesh):
    tp = mesh["tp"]
    out = x * mesh.ndim + mesh.size() + mesh.size(1) + tp.size()
    out = out + mesh.get_local_rank("tp") + mesh.get_local_rank(0) + sum(mesh.get_coordinate())
    if mesh.mesh_dim_names == ("dp", "tp") and mesh.device_type == "cpu":
        out = out + mesh.shape[0]
    return out


def placement_queries(x, placements):

    out = x
    for i, p in enumerate(placements):
        if p.is_shard():
            out = out + p.dim * (i + 1)
        elif p.is_partial():
            out = out * 2
        elif p.is_replicate():
            out = out - 1
    if Shard(0) in placements and placements[-1] == Replicate():
        out = out + 10
    return out, isinstance(placements[0], Shard), Partial("sum").is_partial()


def group_queries(x, pg):

    out = x + pg.size() * 10 + pg.rank() + dist.get_world_size(pg) + dist.get_rank(pg)
    ranks = dist.get_process_group_ranks(pg)
    return out + ranks[-1] + dist.get_world_size() + dist.get_rank(), pg.group_name


def funcol_on_mesh(x, mesh, pg):

    y = funcol.all_reduce(x, "sum", (mesh, 1))
    return funcol.all_reduce(y * mesh.size(0), "sum", pg)


def _query_args() -> dict[str, tuple[Callable[..., Any], tuple]]:


    mesh = make_mesh((2, 4), ("dp", "tp"))
    x = torch.ones(4)
    return {
        "mesh queries": (mesh_queries, (x, mesh)),
        "placement queries": (placement_queries, (x, (Shard(0), Replicate()))),
        "group queries": (group_queries, (x, mesh.get_group("tp"))),
        "funcol on mesh/group": (funcol_on_mesh, (x, mesh, mesh.get_group("dp"))),
    }


QUERY_NAMES = ("mesh queries", "placement queries", "group queries", "funcol on mesh/group")


# ---------------------------------------------------------------------------
# Cold compiles.


@contextlib.contextmanager
def no_compile_caches() -> Iterator[None]:

    # One compile thread: the compile's CPU time stays in this process (and
    # the compiler processes it waits for), where cpu_seconds() sees it.
    patches = _hooks.config_patches(inductor__fx_graph_cache=False, inductor__fx_graph_remote_cache=False,
                                    inductor__compile_threads=1, functorch__enable_autograd_cache=False)
    try:
        yield
    finally:
        patches.restore()


def cold_compile_seconds(side: str, fn: Callable[..., Any], args: tuple, backend: str) -> dict[str, float]:
    """Reset Dynamo, compile ``fn`` under ``side`` and time its first call
    (and the first backward, when it returns a loss): wall and CPU seconds."""

    T.use(side)
    reset_dynamo()
    counter = T.FrameCounter(backend)
    compiled = torch.compile(fn, backend=counter, fullgraph=True)
    gc.collect()  # a full collection left over from the last sample is not this compile's
    start, cpu = time.perf_counter(), T.cpu_seconds()
    out = compiled(*args)
    if isinstance(out, torch.Tensor) and out.requires_grad:
        out.backward()  # the backward graph compiles on its first call
    seconds, cpu = time.perf_counter() - start, T.cpu_seconds() - cpu
    if counter.frame_count != 1:
        raise RuntimeError(f"{getattr(fn, '__name__', fn)}: expected 1 compiled frame, got {counter.frame_count}")
    return {"wall": seconds, "cpu": cpu}


def _compare_compiles(name: str, kind: str, backend: str, make: Callable[[], tuple[Callable[..., Any], tuple]],
                      repeats: int, progress: Callable[[str], None]) -> dict[str, Any]:

    with fake_world(*WORLD), no_compile_caches():
        fn, args = make()
        for side in (T.STOCK, T.PLUGIN):  # warm-up: imports, lazy inits, kernel cache
            progress(f"{side} warm-up")
            cold_compile_seconds(side, fn, args, backend)
        result = T.compare((T.STOCK, T.PLUGIN), repeats,
                           lambda side: cold_compile_seconds(side, fn, args, backend), progress)
        T.use(T.STOCK)
    wall, cpu = result["wall"], result["cpu"]
    return {"name": name, "kind": kind, "backend": backend, "repeats": repeats,
            **wall.as_dict("s"), "ratio": wall.ratio(T.PLUGIN, T.STOCK),
            "cpu": cpu.as_dict("s"), "cpu_ratio": cpu.ratio(T.PLUGIN, T.STOCK)}


def _model_case(name: str, size: str) -> tuple[Callable[..., Any], tuple]:

    mesh = make_mesh((2, 4), ("dp", "tp"))
    config = model_config(size)
    model = build_model(name, config, mesh=mesh["tp"])
    x = local_input(name, make_input(config), mesh["tp"])
    return train_step, (model, x)


def tasks(cfg: Any) -> list[Task]:
    """One task per (function or model, backend)."""
    out: list[Task] = []
    for name in QUERY_NAMES:
        def run(progress, name=name):
            return _compare_compiles(name, "queries", "eager", lambda: _query_args()[name],
                                     cfg.compile_repeats, progress)

        out.append(Task(f"compile_time {name} eager", run))
    for model in cfg.models:
        for backend in cfg.backends:
            def run(progress, model=model, backend=backend):
                return _compare_compiles(model, "model", backend, lambda: _model_case(model, cfg.compile_size),
                                         cfg.model_compile_repeats, progress)

            out.append(Task(f"compile_time {model} {backend}", run))
    return out
