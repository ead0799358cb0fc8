"""Section 4 of the benchmarks: training-step time on real multi-process worlds.

For each model (``dynamo_dist.demo.models``: the tensor-parallel MLP and
transformer block, parallelized on a 1-D mesh over the whole world) and each
world (gloo on CPU, 2 and 4 ranks; NCCL on GPUs when there are at least 2):

- ``eager``: the DTensor model, eager;
- ``stock`` / ``plugin``: the DTensor model's step compiled with stock torch /
  with the plugin;
- ``handwritten``: the same model written with local tensors and explicit
  functional collectives (``handwritten.py``), compiled with the same backend:
  the lower bound.

A step is forward, ``sum()`` loss, backward and clearing the gradients. Every
rank runs the same schedule (compile each variant once, then alternating
rounds, each timing ``steps`` steps after a barrier); a sample is the slowest
rank's time per step, in wall time (the figure) and in CPU time (steadier on a
busy machine, but blind to time spent waiting for other ranks). Figures are medians; ratios are to ``handwritten``,
taken per round. Before timing, the hand-written model is checked against the
DTensor model (loss and every local gradient, eager), and every compiled
variant's loss against eager.
"""

from __future__ import annotations

import sys
import time
from typing import Any, Callable

import torch
import torch.distributed as dist
from torch.distributed.device_mesh import init_device_mesh

from dynamo_dist.demo.models import build_model, local_input, make_input
from dynamo_dist.worlds import run_in_world

from . import _timing as T
from ._models import model_config, train_step
from ._timing import Task
from .handwritten import check_matches, from_dtensor_model

EAGER, HANDWRITTEN = "eager", "handwritten"


def _one_step(fn: Callable[..., Any], model: torch.nn.Module, x: torch.Tensor) -> torch.Tensor:
    loss = fn(model, x)
    loss.backward()
    model.zero_grad(set_to_none=True)
    return loss


def rank_main(name: str, size: str, backends: list[str], repeats: int, steps: int, device: str,
              progress_prefix: str = "") -> dict[str, Any]:
    """One rank's part (module level: run in a spawned process). Rank 0
    prints progress lines starting with ``progress_prefix`` to stderr."""


    torch.set_num_threads(1)  # ranks share the machine's cores
    if device == "cuda":
        torch.cuda.set_device(dist.get_rank() % torch.cuda.device_count())
    mesh = init_device_mesh(device, (dist.get_world_size(),), mesh_dim_names=("tp",))
    config = model_config(size)
    model = build_model(name, config, mesh=mesh, device=device)
    local = from_dtensor_model(name, model, mesh)
    x = local_input(name, make_input(config, device=device), mesh)
    check_matches(model, local, x)
    with torch.no_grad():
        out = model(x)
    want = out.sum()
    # A loss sums ~numel values: compiled kernels may round each differently
    # (inductor reorders), so the tolerance scales with the sum of magnitudes.
    loss_atol = 1e-4 + 1e-5 * float(out.abs().sum())

    variants: dict[str, Callable[[], Any]] = {EAGER: lambda: _one_step(train_step, model, x)}
    counters: list[T.FrameCounter] = []
    for backend in backends:
        for side, target in ((T.STOCK, model), (T.PLUGIN, model), (HANDWRITTEN, local)):
            if progress_prefix and dist.get_rank() == 0:
                print(f"{progress_prefix} compiling {side} {backend}", file=sys.stderr, flush=True)
            T.switch_keeping_caches(T.PLUGIN if side == T.PLUGIN else T.STOCK)
            counter = T.FrameCounter(backend)
            compiled = torch.compile(T.clone_function(train_step, f"{side}_{backend}"), backend=counter,
                                     fullgraph=True)
            for _ in range(2):  # compile (forward and backward), then one warm step
                got = _one_step(compiled, target, x).detach()
            torch.testing.assert_close(got, want, atol=loss_atol, rtol=1e-4,
                                       msg=lambda m, v=f"{side} {backend}": f"{v}: loss differs from eager: {m}")
            counters.append(counter)
            variants[f"{side} {backend}"] = lambda c=compiled, t=target: _one_step(c, t, x)
    T.switch_keeping_caches(T.STOCK)
    frames = [c.frame_count for c in counters]

    samples: dict[str, dict[str, list[float]]] = {"wall": {}, "cpu": {}}
    for r, label in T.rounds(list(variants), repeats):
        if progress_prefix and dist.get_rank() == 0:
            print(f"{progress_prefix} {label} {r + 1}/{repeats}", file=sys.stderr, flush=True)
        dist.barrier()
        with T.no_gc():
            start, cpu = time.perf_counter(), time.process_time()
            for _ in range(steps):
                variants[label]()
            if device == "cuda":
                torch.cuda.synchronize()
            samples["wall"].setdefault(label, []).append((time.perf_counter() - start) / steps)
            samples["cpu"].setdefault(label, []).append((time.process_time() - cpu) / steps)
    if [c.frame_count for c in counters] != frames or any(f != 1 for f in frames):
        raise RuntimeError(f"recompiled while timing: frames {frames} -> {[c.frame_count for c in counters]}")
    return samples


def nccl_skip_reason(world_size: int) -> str | None:
    """Why the NCCL worlds cannot run here, or None if they can."""
    if not torch.cuda.is_available():
        return "no CUDA GPU"
    if not torch.distributed.is_nccl_available():
        return "torch built without NCCL"
    if torch.cuda.device_count() < world_size:
        return f"{world_size} ranks need {world_size} GPUs, found {torch.cuda.device_count()}"
    return None


def measure(name: str, world: int, comm: str, cfg: Any, progress: Callable[[str], None]) -> dict[str, Any]:

    row: dict[str, Any] = {"model": name, "world": world, "comm": comm, "size": cfg.step_size, "steps": cfg.step_steps,
                           "repeats": cfg.step_repeats, "backends": list(cfg.step_backends)}
    if comm == "nccl":
        reason = nccl_skip_reason(world)
        if reason:
            row["skipped"] = reason
            return row
    progress(f"spawning {world} ranks ({comm}), compiling {3 * len(cfg.step_backends)} variants, "
             f"{cfg.step_repeats} rounds of {cfg.step_steps} steps")
    prefix = "" if getattr(progress, "quiet", False) else getattr(progress, "prefix", lambda: "")()
    per_rank = run_in_world(rank_main, world, name, cfg.step_size, list(cfg.step_backends), cfg.step_repeats,
                                 cfg.step_steps, "cpu" if comm == "gloo" else "cuda", prefix,
                                 timeout=cfg.step_timeout, backend=comm)
    # A sample is the slowest rank's: the step is done when every rank is.
    for metric in ("wall", "cpu"):
        per_label = per_rank[0][metric]
        slowest = {label: [max(r[metric][label][i] for r in per_rank) for i in range(len(per_label[label]))]
                   for label in per_label}
        times = T.Comparison(slowest)
        key = "" if metric == "wall" else "cpu_"
        row[f"{key}ms"] = {label: times.median(label) * 1e3 for label in slowest}
        row[f"{key}ratio_to_handwritten"] = {
            backend: {side: times.ratio(f"{side} {backend}" if side != EAGER else EAGER, f"{HANDWRITTEN} {backend}")
                      for side in (EAGER, T.STOCK, T.PLUGIN, HANDWRITTEN)}
            for backend in cfg.step_backends
        }
        row[f"{key}samples_ms"] = {label: [v * 1e3 for v in vs] for label, vs in slowest.items()}
    return row


def tasks(cfg: Any) -> list[Task]:
    out = []
    for comm, worlds in (("gloo", cfg.worlds), ("nccl", cfg.nccl_worlds)):
        for world in worlds:
            for name in cfg.models:
                out.append(Task(f"step_time {name} {comm} {world} ranks",
                                lambda progress, name=name, world=world, comm=comm: measure(
                                    name, world, comm, cfg, progress)))
    return out
