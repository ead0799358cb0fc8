"""Section 5 of the benchmarks: warm start, stock torch vs the plugin.

A TP model's first training step (forward, ``sum()`` loss, backward) compiled
with inductor, in a process of its own:

- **cold**: a fresh, empty ``TORCHINDUCTOR_CACHE_DIR`` (everything compiles,
  C++ kernels included);
- **warm**: a new process whose cache dir is a copy of what a cold run of the
  same side left behind. The FX-graph and AOTAutograd caches can then answer;
  how each did is read from torch's counters in that process.

The caches have in-process layers, so every sample is a fresh process:
``python -m devtools.bench.warm_start`` (``child_main``) runs one first
step and prints one JSON line. "stock" is the same program without
``dynamo_dist.install()``. Worlds: the fake 8-rank world of the compile-time
benchmark (rank 3, ``(2, 4)`` mesh, the model on ``mesh["tp"]``), and a real
2-rank gloo world (1-D mesh, each rank compiles; a sample is the slowest
rank's first step, cache outcomes are summed over ranks). A ``control`` row
compiles the unparallelized MLP: what a full hit costs with nothing
distributed in the program.

Each warm run starts from its own copy of the cold run's cache dir, so a run
that misses (and writes new entries) cannot help the next one. A child also
says why a cache bypassed a graph (the caches' own log lines, in explain's
words). ``warm_clients`` measures torchtitan and HF transformers the same way
(``measure`` with its own child and rows).
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from typing import Any, Callable

import torch
import torch.distributed as dist
from torch.distributed.device_mesh import init_device_mesh

from dynamo_dist._compat import observe as O
from dynamo_dist.diagnostics.cache_log import CacheLog
from dynamo_dist.diagnostics.report import PLUGIN, STOCK
from dynamo_dist.demo.models import build_model, local_input, make_input
from dynamo_dist.worlds import fake_world, make_mesh, run_in_world
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
    with BypassReasons(side) as bypasses:
        start, cpu = time.perf_counter(), T.cpu_seconds()
        compiled(model, x).backward()
        wall, cpu = time.perf_counter() - start, T.cpu_seconds() - cpu
    return {"wall": wall, "cpu": cpu, "frames": counter.frame_count, "caches": O.outcome_counts(),
            "bypass_reasons": bypasses.reasons}


class BypassReasons(CacheLog):
    """While in use: why the compile caches bypassed each graph, in the words
    ``explain`` uses (``reasons``, once each)."""

    def __init__(self, side: str) -> None:
        super().__init__()
        self.mode = PLUGIN if side == T.PLUGIN else STOCK

    @property
    def reasons(self) -> list[str]:
        return self.bypasses_in_words(self.mode)


def _gloo_rank(side: str, model_name: str, size: str) -> dict[str, Any]:
    """One rank of the gloo world (module level: run in a spawned process)."""
    torch.set_num_threads(1)  # the ranks share the machine's cores
    mesh = init_device_mesh("cpu", (dist.get_world_size(),), mesh_dim_names=("tp",))
    return first_step(side, model_name, size, mesh, sync=dist.barrier)


def _sum_outcomes(per_rank: list[dict[str, dict[str, int]]]) -> dict[str, dict[str, int]]:
    return {cache: {o: sum(r[cache][o] for r in per_rank) for o in OUTCOMES} for cache in per_rank[0]}


def over_ranks(ranks: list[dict[str, Any]]) -> dict[str, Any]:
    """One sample of a world from its ranks' first steps: the slowest rank's
    time, the outcomes summed, every rank's kept (``per_rank``)."""
    return {"wall": max(r["wall"] for r in ranks), "cpu": max(r["cpu"] for r in ranks),
            "frames": max(r["frames"] for r in ranks), "caches": _sum_outcomes([r["caches"] for r in ranks]),
            "bypass_reasons": sorted({b for r in ranks for b in r["bypass_reasons"]}), "per_rank": ranks}


def child_main(side: str, world: str, model_name: str, size: str) -> dict[str, Any]:
    """One sample, in this process: the first step's wall and CPU seconds and
    the cache outcomes (gloo: the slowest rank's time, outcomes summed)."""
    torch.set_num_threads(1)  # as every benchmark process
    if world == "gloo":
        ranks = run_in_world(_gloo_rank, GLOO_RANKS, side, model_name, size, timeout=900)
        return over_ranks(ranks)
    if world == NO_WORLD:
        return first_step(side, "mlp" if model_name == CONTROL else model_name, size, None)
    with fake_world(*FAKE_WORLD):
        return first_step(side, model_name, size, make_mesh((2, 4), ("dp", "tp"))["tp"])


# ---------------------------------------------------------------------------
# The parent: fresh processes, cache dirs, alternating sides.


@dataclass(frozen=True)
class Program:
    """What one row measures: the child that runs one first step
    (``python -m MODULE SIDE ARGS...``, printing one JSON line), its world and
    the environment it needs beyond the cache settings."""

    model: str  # the row's name
    world: str  # "fake", "gloo", NO_WORLD
    ranks: int
    size: str | None
    module: str
    args: tuple[str, ...]
    env: tuple[tuple[str, str], ...] = ()
    frames: int | None = 1  # compiled frames every run must show (None: any, the same in every run of a side)


def built_in(world: str, model_name: str, size: str) -> Program:
    """A model of ``demo.models`` (or the control) in one of this module's worlds."""
    return Program(model_name, world, GLOO_RANKS if world == "gloo" else 1, size, __name__,
                   (world, model_name, size))


def _child_env(cache_dir: str, extra: tuple[tuple[str, str], ...] = ()) -> dict[str, str]:
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
    env.update(extra)
    return env


def run_child(program: Program, side: str, cache_dir: str, timeout: float) -> dict[str, Any]:
    """``program``'s child for ``side`` in a fresh Python process using ``cache_dir``."""
    cmd = [sys.executable, "-m", program.module, side, *program.args]
    proc = subprocess.run(cmd, env=_child_env(cache_dir, program.env), capture_output=True, text=True,
                          timeout=timeout)
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


def measure(program: Program, cold_repeats: int, warm_repeats: int, timeout: float,
            progress: Callable[[str], None]) -> dict[str, Any]:
    """Cold and warm samples of ``program``, stock and plugin alternating; the row."""
    sides = (T.STOCK, T.PLUGIN)
    caches, per_rank, reasons, frames = ({"cold": {}, "warm": {}} for _ in range(4))
    seeds: dict[str, str] = {}
    with tempfile.TemporaryDirectory(prefix="dynamo_dist_warm_") as root:
        def sample(phase: str, side: str) -> dict[str, float]:
            n = len(caches[phase].get(side, []))
            cache_dir = os.path.join(root, f"{phase}-{side}-{n}")
            if phase == "cold":
                seeds.setdefault(side, cache_dir)  # warm runs start from the first cold run's cache
            else:
                shutil.copytree(seeds[side], cache_dir)
            got = run_child(program, side, cache_dir, timeout)
            caches[phase].setdefault(side, []).append(got["caches"])
            frames[phase].setdefault(side, []).append(got["frames"])
            if "per_rank" in got:
                per_rank[phase].setdefault(side, []).append([r["caches"] for r in got["per_rank"]])
            known = reasons[phase].setdefault(side, [])
            known += [b for b in got["bypass_reasons"] if b not in known]
            return {"wall": got["wall"], "cpu": got["cpu"]}

        cold = T.compare(sides, cold_repeats, lambda side: sample("cold", side), lambda d: progress(f"cold {d}"))
        warm = T.compare(sides, warm_repeats, lambda side: sample("warm", side), lambda d: progress(f"warm {d}"))
    _check_frames(program, frames)
    row: dict[str, Any] = {
        "model": program.model, "world": program.world, "ranks": program.ranks, "size": program.size,
        "env": dict(program.env), "cold_repeats": cold_repeats, "warm_repeats": warm_repeats,
        "caches": caches, "bypass_reasons": reasons, "frames": frames,
    }
    if program.ranks > 1:
        row["caches_per_rank"] = per_rank
    for phase, result in (("cold", cold), ("warm", warm)):
        row[phase] = result["wall"].as_dict("s") | {"ratio": result["wall"].ratio(T.PLUGIN, T.STOCK)}
        row[f"{phase}_cpu"] = result["cpu"].as_dict("s") | {"ratio": result["cpu"].ratio(T.PLUGIN, T.STOCK)}
    row["warm_over_cold"] = {side: row["warm"][f"{side}_s"] / row["cold"][f"{side}_s"] for side in sides}
    return row


def _check_frames(program: Program, frames: dict[str, dict[str, list[int]]]) -> None:
    """Every run of a side compiled the same frames (``program.frames`` of
    them, when it says): a run that compiled more ran another program."""
    for side in (T.STOCK, T.PLUGIN):
        seen = {n for phase in frames.values() for n in phase.get(side, [])}
        expected = {program.frames} if program.frames is not None else seen
        if len(seen) != 1 or seen != expected:
            wanted = sorted(expected) if program.frames is not None else "the same in every run"
            raise RuntimeError(f"{program.model} ({side}): compiled frames per run {sorted(seen)}, expected {wanted}")


def tasks(cfg: Any) -> list[Task]:
    """One task per (world, model), then the control (no world)."""
    programs = [built_in(world, name, cfg.warm_size) for world in cfg.warm_worlds for name in cfg.warm_models]
    if cfg.warm_control:
        programs.append(built_in(NO_WORLD, CONTROL, cfg.warm_size))
    return [Task(f"warm_start {p.model} {p.world}" if p.world != NO_WORLD else "warm_start control",
                 lambda progress, p=p: measure(p, cfg.warm_cold_repeats, cfg.warm_repeats, cfg.warm_timeout, progress))
            for p in programs]


if __name__ == "__main__":
    # python -m devtools.bench.warm_start SIDE WORLD MODEL SIZE
    print(json.dumps(child_main(*sys.argv[1:5])), flush=True)
