"""The benchmark suite: configurations, the task list and the run."""

from __future__ import annotations

import dataclasses
import sys
import traceback
from dataclasses import dataclass
from typing import Any

import torch

import dynamo_dist
from dynamo_dist.cli import results

from . import _timing as T
from . import (compile_once, compile_once_scale, compile_time, demo, guard_cost, planner, recompiles, scale,
               step_time, warm_clients, warm_start)

SECTIONS = ("compile_time", "guard_cost", "recompiles", "step_time", "warm_start", "warm_start_clients", "scale",
            "compile_once", "compile_once_scale", "planner", "demo")
# ``bench`` with no ``--only``: every section but those that run only when
# named: the clients' warm start (torchtitan and transformers, about 45
# minutes), the scale sweep (fake worlds up to 65,536 ranks, about half an
# hour), compile once (cold jobs of 2 and 4 ranks, about half an hour), compile
# once at scale (the store protocol among 16 to 16,384 simulated ranks, about
# ten minutes), the redistribute planner's cost on 2-D to 4-D meshes (a few
# minutes) and the demo as a user runs it (a few minutes).
ONLY_WHEN_NAMED = ("warm_start_clients", "scale", "compile_once", "compile_once_scale", "planner", "demo")
DEFAULT_SECTIONS = tuple(s for s in SECTIONS if s not in ONLY_WHEN_NAMED)
MODULES = {"compile_time": compile_time, "guard_cost": guard_cost, "recompiles": recompiles,
           "step_time": step_time, "warm_start": warm_start, "warm_start_clients": warm_clients, "scale": scale,
           "compile_once": compile_once, "compile_once_scale": compile_once_scale, "planner": planner, "demo": demo}


@dataclass(frozen=True)
class Config:
    """How much of everything to run. ``FULL`` for the figures, ``QUICK`` as a
    smoke test of every section's code path (tiny sizes, one sample per
    figure where one suffices, one backend per model, 2-rank world, inductor
    only where the section is about it: warm start). Its numbers say nothing
    about performance; they only have to be there and be sane."""

    quick: bool
    compile_size: str  # model size (_models.model_config) for the compile-time benchmark
    step_size: str  # ... and for the step time
    models: tuple[str, ...]
    compile_repeats: int  # rounds of cold compiles per query function
    model_compile_repeats: int  # rounds per (model, backend)
    backends: tuple[str, ...]  # compile-time backends for the models
    guard_calls: int  # calls per guard-cost sample
    guard_repeats: int
    worlds: tuple[int, ...]  # gloo world sizes for the step time
    nccl_worlds: tuple[int, ...]
    step_backends: tuple[str, ...]
    step_repeats: int
    step_steps: int  # steps per step-time sample
    step_timeout: float  # seconds a spawned world may take
    # Warm start: one fresh process per sample, so few samples (cold ones cost most).
    warm_size: str
    warm_models: tuple[str, ...]
    warm_worlds: tuple[str, ...]  # "fake" and/or "gloo" (bench --warm-gloo adds it)
    warm_control: bool  # also the unparallelized MLP, in no world
    warm_cold_repeats: int
    warm_repeats: int
    warm_timeout: float  # seconds one sample's process may take
    # Warm start of the clients (warm_clients.ROWS): the cold runs as warm_cold_repeats.
    warm_clients: tuple[str, ...]
    warm_clients_repeats: int
    # Scale: fake worlds up to 65,536 ranks, models of up to 32 blocks.
    scale_guard_calls: int
    scale_block_calls: int
    scale_repeats: int
    # Compile once: cold jobs per side and world, the fleet cache, the coordination alone.
    once_model: str
    once_size: str
    once_worlds: tuple[int, ...]
    once_repeats: int
    once_timeout: float
    once_sim_processes: tuple[int, ...]
    once_sim_keys: int
    once_sim_compile_s: float
    once_sim_payload: int
    once_clients: tuple[str, ...]  # compile_once.CLIENT_ROWS
    once_client_repeats: int
    # Compile once at scale: (ranks, payload bytes, protocols) per group of rows; simulated ranks
    # (threads) per process; each graph's simulated compile; stale_s (a tick every third); repeats of
    # the groups up to once_scale_repeat_up_to ranks (one run each above); the fault rows' size and stale_s.
    once_scale_grid: tuple[tuple[int, int, tuple[str, ...]], ...]
    once_scale_threads: int
    once_scale_compile_s: float
    once_scale_stale_s: float
    once_scale_repeats: int
    once_scale_repeat_up_to: int
    once_scale_fault_size: tuple[int, int]
    once_scale_fault_stale_s: float
    # The redistribute planner: rounds of cold compiles per mesh, redistribution and planner.
    planner_repeats: int
    # The demo: runs of `python -m dynamo_dist demo` (its defaults; --quick's small run when quick).
    demo_runs: int
    demo_timeout: float


FULL = Config(quick=False, compile_size="small", step_size="bench", models=("mlp", "transformer"),
              compile_repeats=9, model_compile_repeats=5, backends=("eager", "aot_eager", "inductor"),
              guard_calls=10_000, guard_repeats=7, worlds=(2, 4), nccl_worlds=(1, 2, 4),
              step_backends=("aot_eager", "inductor"), step_repeats=9, step_steps=20, step_timeout=1800,
              warm_size="small", warm_models=("mlp", "transformer"), warm_worlds=("fake",), warm_control=True,
              warm_cold_repeats=1, warm_repeats=5, warm_timeout=900,
              warm_clients=warm_clients.DEFAULT_ROWS, warm_clients_repeats=3,
              scale_guard_calls=4_000, scale_block_calls=1_000, scale_repeats=5,
              once_model="transformer", once_size="small", once_worlds=(2, 4), once_repeats=3, once_timeout=1800,
              once_sim_processes=(16, 32, 64), once_sim_keys=4, once_sim_compile_s=2.0, once_sim_payload=400_000,
              once_clients=compile_once.CLIENT_ROWS, once_client_repeats=1,
              once_scale_grid=((16, 2_700_000, ("new", "old")), (64, 2_700_000, ("new", "old")),
                               (256, 2_700_000, ("new", "old")), (1024, 2_700_000, ("new", "old")),
                               (4096, 2_700_000, ("new",)), (16384, 2_700_000, ("new",)),
                               (16, 50_000_000, ("new", "old")), (256, 50_000_000, ("new",)),
                               (1024, 50_000_000, ("new",))),
              once_scale_threads=256, once_scale_compile_s=10.0, once_scale_stale_s=30.0, once_scale_repeats=3,
              once_scale_repeat_up_to=256, once_scale_fault_size=(4096, 2_700_000), once_scale_fault_stale_s=6.0,
              planner_repeats=5, demo_runs=3, demo_timeout=1200)
QUICK = Config(quick=True, compile_size="tiny", step_size="tiny", models=("mlp",), compile_repeats=1,
               model_compile_repeats=1, backends=("aot_eager",), guard_calls=1_000, guard_repeats=1,
               worlds=(2,), nccl_worlds=(1, 2), step_backends=("aot_eager",), step_repeats=2, step_steps=3,
               step_timeout=300, warm_size="tiny", warm_models=("mlp",), warm_worlds=("fake",), warm_control=False,
               warm_cold_repeats=1, warm_repeats=1, warm_timeout=300,
               warm_clients=warm_clients.QUICK_ROWS, warm_clients_repeats=1,
               scale_guard_calls=300, scale_block_calls=50, scale_repeats=1,
              once_model="mlp", once_size="tiny", once_worlds=(2,), once_repeats=1, once_timeout=600,
              once_sim_processes=(4,), once_sim_keys=2, once_sim_compile_s=0.5, once_sim_payload=100_000,
              once_clients=(), once_client_repeats=1,
              once_scale_grid=((16, 100_000, ("new", "old")),), once_scale_threads=8, once_scale_compile_s=0.5,
              once_scale_stale_s=3.0, once_scale_repeats=1, once_scale_repeat_up_to=16,
              once_scale_fault_size=(16, 100_000), once_scale_fault_stale_s=1.5, planner_repeats=1,
              demo_runs=1, demo_timeout=600)


def run(cfg: Config, sections: tuple[str, ...] = DEFAULT_SECTIONS, command: str = "",
        quiet: bool = False) -> dict[str, Any]:
    """Run the chosen sections; the JSON-ready result. A task that fails
    leaves a row with its ``error`` (see ``errors``) and the run goes on."""


    tasks = [(section, task) for section in sections for task in MODULES[section].tasks(cfg)]
    progress = T.Progress(len(tasks), quiet=quiet)
    stamp = results.Run(command, dataclasses.asdict(cfg))
    result: dict[str, Any] = {section: [] for section in sections}
    was_installed, threads = dynamo_dist.is_installed(), torch.get_num_threads()
    # One intra-op thread, as each rank of the step-time worlds: CPU time then
    # measures this process's work, not idle worker threads spinning.
    torch.set_num_threads(1)
    try:
        for section, task in tasks:
            progress.task(task.label)
            hook = sys.excepthook  # init_process_group stacks a rank prefix on it, once per world
            try:
                result[section].append(task.run(progress))
            except Exception as e:  # keep the other figures of a long run
                traceback.print_exc()
                result[section].append({"task": task.label, "error": f"{type(e).__name__}: {e}"[:2000]})
            finally:
                sys.excepthook = hook
    finally:
        torch.set_num_threads(threads)
        (dynamo_dist.install if was_installed else dynamo_dist.uninstall)()
    print(f"done in {progress.elapsed():.0f}s", file=sys.stderr)
    return stamp.result(result)


def errors(result: dict[str, Any]) -> list[str]:
    """``task: error`` for every task of ``result`` that failed."""
    return [f"{row['task']}: {row['error']}" for section in SECTIONS for row in result.get(section, [])
            if "error" in row]
