"""Section 5 of the benchmarks: warm start, stock torch vs the plugin.

A TP model's first training step (forward, ``sum()`` loss, backward) compiled
with inductor, in a process of its own:

- **cold**: a fresh, empty ``TORCHINDUCTOR_CACHE_DIR`` (everything compiles,
  C++ kernels included);
- **warm**: a new process whose cache dir is a copy of what a cold run of the
  same side left behind. The FX-graph and AOTAutograd caches can then answer;
  how each did is read from torch's counters in that process.

The caches have in-process layers, so every sample is a fresh process:
``python -m dynamo_dist.benchmarks.warm_start`` (``child_main``) runs one first
step and prints one JSON line. "stock" is the same program without
``dynamo_dist.install()``. Worlds: the fake 8-rank world of the compile-time
benchmark (rank 3, ``(2, 4)`` mesh, the model on ``mesh["tp"]``), and a real
2-rank gloo world (1-D mesh, each rank compiles; a sample is the slowest
rank's first step, cache outcomes are summed over ranks). A ``control`` row
compiles the unparallelized MLP: what a full hit costs with nothing
distributed in the program.

Each warm run starts from its own copy of the cold run's cache dir, so a run
that misses (and writes new entries) cannot help the next one.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from typing import Any, Callable

import torch
import torch.distributed as dist
from torch.distributed.device_mesh import init_device_mesh

from .._compat.caches import outcome_counts
from ..demo.models import build_model, local_input, make_input
from ..worlds import fake_world, make_mesh, run_in_gloo_world
from . import _timing as T
from ._models import model_config, train_step
from ._timing import Task

FAKE_WORLD = (8, 3)  # as compile_time: 8 ranks, seen from rank 3
GLOO_RANKS = 2
CONTROL = "control"  # the unparallelized MLP ...
NO_WORLD = "none"  # ... compiled in no distributed world at all
OUTCOMES = ("hit", "miss", "bypass")


# ---------------------------------------------------------------------------
# The child: one first step in this (fresh) process.


def first_step(side: str, model_name: str, size: str, mesh: Any,
               sync: Callable[[], Any] = lambda: None) -> dict[str, Any]:
    """Build the model (on ``mesh``; unparallelized when None), compile its
    training step with inductor and time the first step, forward + backward
    (``sync()`` first: on a real world every rank starts the clock together)."""
    T.use(side)
    config = model_config(size)
    if mesh is None:
        model, x = build_model(model_name, config), make_input(config)
    else:
        model = build_model(model_name, config, mesh=mesh)
        x = local_input(model_name, make_input(config), mesh)
    counter = T.FrameCounter("inductor")
    compiled = torch.compile(train_step, backend=counter, fullgraph=True)
    sync()
    start, cpu = time.perf_counter(), T.cpu_seconds()
    compiled(model, x).backward()
    wall, cpu = time.perf_counter() - start, T.cpu_seconds() - cpu
    return {"wall": wall, "cpu": cpu, "frames": counter.frame_count, "caches": outcome_counts()}


def _gloo_rank(side: str, model_name: str, size: str) -> dict[str, Any]:
    """One rank of the gloo world (module level: run in a spawned process)."""
    torch.set_num_threads(1)  # the ranks share the machine's cores
    mesh = init_device_mesh("cpu", (dist.get_world_size(),), mesh_dim_names=("tp",))
    return first_step(side, model_name, size, mesh, sync=dist.barrier)


def _sum_outcomes(per_rank: list[dict[str, dict[str, int]]]) -> dict[str, dict[str, int]]:
    return {cache: {o: sum(r[cache][o] for r in per_rank) for o in OUTCOMES} for cache in per_rank[0]}


def child_main(side: str, world: str, model_name: str, size: str) -> dict[str, Any]:
    """One sample, in this process: the first step's wall and CPU seconds and
    the cache outcomes (gloo: the slowest rank's time, outcomes summed)."""
    torch.set_num_threads(1)  # as every benchmark process
    if world == "gloo":
        ranks = run_in_gloo_world(_gloo_rank, GLOO_RANKS, side, model_name, size, timeout=900)
        return {"wall": max(r["wall"] for r in ranks), "cpu": max(r["cpu"] for r in ranks),
                "frames": max(r["frames"] for r in ranks), "caches": _sum_outcomes([r["caches"] for r in ranks]),
                "per_rank": ranks}
    if world == NO_WORLD:
        return first_step(side, "mlp" if model_name == CONTROL else model_name, size, None)
    with fake_world(*FAKE_WORLD):
        return first_step(side, model_name, size, make_mesh((2, 4), ("dp", "tp"))["tp"])


# ---------------------------------------------------------------------------
# The parent: fresh processes, cache dirs, alternating sides.


def _child_env(cache_dir: str) -> dict[str, str]:
    env = dict(os.environ)
    env["TORCHINDUCTOR_CACHE_DIR"] = cache_dir
    # Both local caches on (their defaults outside fbcode), nothing remote.
    env["TORCHINDUCTOR_FX_GRAPH_CACHE"] = "1"
    env["TORCHINDUCTOR_AUTOGRAD_CACHE"] = "1"
    for name in ("TORCHINDUCTOR_FX_GRAPH_REMOTE_CACHE", "TORCHINDUCTOR_AUTOGRAD_REMOTE_CACHE",
                 "TORCHINDUCTOR_FORCE_DISABLE_CACHES"):
        env.pop(name, None)
    # The child imports the dynamo_dist this process runs (a checkout on
    # sys.path but not installed, too): its parent folder goes first.
    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    env["PYTHONPATH"] = os.pathsep.join(p for p in (root, env.get("PYTHONPATH", "")) if p)
    return env


def run_child(side: str, world: str, model_name: str, size: str, cache_dir: str,
              timeout: float) -> dict[str, Any]:
    """``child_main`` in a fresh Python process using ``cache_dir``."""
    cmd = [sys.executable, "-m", "dynamo_dist.benchmarks.warm_start", side, world, model_name, size]
    proc = subprocess.run(cmd, env=_child_env(cache_dir), capture_output=True, text=True, timeout=timeout)
    lines = [line for line in proc.stdout.splitlines() if line.startswith("{")]
    if proc.returncode != 0 or not lines:
        raise RuntimeError(f"{' '.join(cmd[2:])} exited {proc.returncode}:\n{proc.stderr[-3000:]}")
    return json.loads(lines[-1])


def outcome_text(caches: dict[str, dict[str, int]]) -> str:
    """``FX 2/2 hit, AOT 1/1 hit`` (hits of all lookups; misses and bypasses named)."""
    parts = []
    for cache, label in (("fx_graph", "FX"), ("aot_autograd", "AOT")):
        c = caches[cache]
        text = f"{label} {c['hit']}/{sum(c.values())} hit"
        text += "".join(f", {c[o]} {o}" for o in ("miss", "bypass") if c[o])
        parts.append(text)
    return "; ".join(parts)


def measure(world: str, model_name: str, cfg: Any, progress: Callable[[str], None]) -> dict[str, Any]:
    sides = (T.STOCK, T.PLUGIN)
    caches: dict[str, dict[str, list]] = {"cold": {}, "warm": {}}
    frames: set[int] = set()
    seeds: dict[str, str] = {}
    with tempfile.TemporaryDirectory(prefix="dynamo_dist_warm_") as root:
        def sample(phase: str, side: str) -> dict[str, float]:
            n = len(caches[phase].get(side, []))
            cache_dir = os.path.join(root, f"{phase}-{side}-{n}")
            if phase == "cold":
                seeds.setdefault(side, cache_dir)  # warm runs start from the first cold run's cache
            else:
                shutil.copytree(seeds[side], cache_dir)
            got = run_child(side, world, model_name, cfg.warm_size, cache_dir, cfg.warm_timeout)
            caches[phase].setdefault(side, []).append(got["caches"])
            frames.add(got["frames"])
            return {"wall": got["wall"], "cpu": got["cpu"]}

        cold = T.compare(sides, cfg.warm_cold_repeats, lambda side: sample("cold", side),
                         lambda d: progress(f"cold {d}"))
        warm = T.compare(sides, cfg.warm_repeats, lambda side: sample("warm", side),
                         lambda d: progress(f"warm {d}"))
    if frames != {1}:
        raise RuntimeError(f"{model_name}: expected 1 compiled frame per run, got {sorted(frames)}")
    row: dict[str, Any] = {
        "model": model_name, "world": world, "ranks": GLOO_RANKS if world == "gloo" else 1,
        "size": cfg.warm_size, "cold_repeats": cfg.warm_cold_repeats, "warm_repeats": cfg.warm_repeats,
        "caches": caches,
    }
    for phase, result in (("cold", cold), ("warm", warm)):
        row[phase] = result["wall"].as_dict("s") | {"ratio": result["wall"].ratio(T.PLUGIN, T.STOCK)}
        row[f"{phase}_cpu"] = result["cpu"].as_dict("s") | {"ratio": result["cpu"].ratio(T.PLUGIN, T.STOCK)}
    row["warm_over_cold"] = {side: row["warm"][f"{side}_s"] / row["cold"][f"{side}_s"] for side in sides}
    return row


def tasks(cfg: Any) -> list[Task]:
    """One task per (world, model), then the control (no world)."""
    out = [Task(f"warm_start {name} {world}",
                lambda progress, name=name, world=world: measure(world, name, cfg, progress))
           for world in cfg.warm_worlds for name in cfg.warm_models]
    if cfg.warm_control:
        out.append(Task("warm_start control", lambda progress: measure(NO_WORLD, CONTROL, cfg, progress)))
    return out


if __name__ == "__main__":
    # python -m dynamo_dist.benchmarks.warm_start SIDE WORLD MODEL SIZE
    print(json.dumps(child_main(*sys.argv[1:5])), flush=True)
