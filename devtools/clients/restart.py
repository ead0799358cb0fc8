"""Restart a client's training job under torch's precompile: does the second
job trace no frame and train as eager does?

For each client row (``devtools.bench.warm_clients.ROWS``), side
(``plugin``, ``stock``) and cache-dir layout: job 1 and job 2, each a fresh
process with ``TORCH_CACHING_PRECOMPILE=1`` that spawns the row's gloo world,
the two sharing a cache root (``runs.rank_caches``): ``per-rank``, each rank
its own dir under it, or ``shared``, one dir for every rank (torch's default
``TORCHINDUCTOR_CACHE_DIR`` is one per user on a host, so the ranks of a host
share it). Every rank of a job trains ``steps`` steps eagerly, then compiled
on the side with inductor, and saves Dynamo's entries (job 1's are what job 2
loads). Per job: the frames the compiled mode traced (the most on a rank; 0
where every frame loaded), its Dynamo-cache and AOTAutograd outcomes, the
slowest rank's first step, its largest ``|loss - eager|`` and ``|grad -
eager|`` over steps and ranks, or the error's last line.

    python -m devtools.clients.restart [--rows NAME ...] [--steps N] [--sides plugin stock]
        [--layouts per-rank shared] [--json PATH] [--logs DIR]

``--logs DIR`` keeps each job's stderr there (set ``TORCH_LOGS``, e.g.
``+dynamo,guards,recompiles``, to see which frame a restart traced and why).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import subprocess
import sys
import tempfile
import time
from typing import Any, Sequence

import torch

import dynamo_dist
from devtools import PLUGIN, STOCK, error_line
from devtools.bench import warm_clients
from devtools.bench.warm_start import _child_env
from devtools.clients import run_driver
from devtools.clients.runs import rank_caches
from dynamo_dist.worlds import run_in_world

SIDES = (PLUGIN, STOCK)
PER_RANK, SHARED = "per-rank", "shared"
LAYOUTS = (PER_RANK, SHARED)
JOBS = (1, 2)
PRECOMPILE = (("TORCH_CACHING_PRECOMPILE", "1"),)




def job_on_rank(side: str, name: str, cache_root: str, steps: int, layout: str = PER_RANK) -> dict[str, Any]:
    """This rank's part of one job (module level: run in a spawned rank)."""
    torch.set_num_threads(1)  # the ranks share the machine's cores
    row = warm_clients.ROWS[name]
    # Saved with the plugin installed on its side, as a program that installs it once saves.
    installed = dynamo_dist.enabled() if side == PLUGIN else contextlib.nullcontext()
    with installed, rank_caches(cache_root, shared=layout == SHARED):
        eager, compiled = run_driver(row.client, "run_case", row.case, steps=steps, modes=("eager", side),
                                     backend="inductor", explain=False)
    error = eager.error or compiled.error
    return {"traced": compiled.frames_traced, "loss_diff": compiled.max_loss_diff,
            "grad_diff": compiled.max_grad_diff, "losses": compiled.losses, "eager_losses": eager.losses,
            "dynamo_cache": compiled.dynamo_cache, "aot_autograd": compiled.cache_outcomes.get("aot_autograd", {}),
            "first_step_s": compiled.step_seconds[0] if compiled.step_seconds else None,
            "error": error_line(error) if error else None}


def over_ranks(ranks: Sequence[dict[str, Any]]) -> dict[str, Any]:
    """One job's summary: the most frames traced and the largest diffs over
    ``ranks``, the first error; ``ranks`` kept."""
    errors = [r["error"] for r in ranks if r["error"]]

    def most(key: str) -> Any:
        values = [r[key] for r in ranks if r[key] is not None]
        return max(values) if values else None

    return {"traced": most("traced"), "loss_diff": most("loss_diff"), "grad_diff": most("grad_diff"),
            "first_step_s": most("first_step_s"), "error": errors[0] if errors else None, "ranks": list(ranks)}


def job_main(side: str, name: str, cache_root: str, steps: int, timeout: float,
             layout: str = PER_RANK) -> dict[str, Any]:
    """One job: the row's world in this (fresh) process."""
    torch.set_num_threads(1)
    ranks = run_in_world(job_on_rank, warm_clients.ROWS[name].case.world_size, side, name, cache_root, steps,
                         layout, timeout=timeout)
    return over_ranks(ranks)


def run_job(side: str, name: str, cache_root: str, steps: int, timeout: float,
            log: str | None = None, layout: str = PER_RANK) -> dict[str, Any]:
    """One job in a fresh process; a failure or timeout of the process is
    the job's error. ``log``: a file for the process's stderr."""
    cmd = [sys.executable, "-m", "devtools.clients.restart", "job", side, name, cache_root, str(steps), str(timeout),
           layout]
    env = _child_env(cache_root, (*PRECOMPILE, *warm_clients.ROWS[name].env))
    try:
        proc = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=timeout + 60)
    except subprocess.TimeoutExpired:
        return over_ranks([]) | {"error": f"timed out after {timeout + 60:.0f} s"}
    if log:
        with open(log, "w") as f:
            f.write(proc.stderr)
    lines = [line for line in proc.stdout.splitlines() if line.startswith("{")]
    if proc.returncode != 0 or not lines:
        return over_ranks([]) | {"error": f"exited {proc.returncode}: {error_line(proc.stderr)}"}
    return json.loads(lines[-1])


def restart(name: str, side: str, steps: int = 2, timeout: float = 900, logs: str | None = None,
            progress: Any = None, layout: str = PER_RANK) -> dict[str, Any]:
    """Job 1 then job 2 of row ``name`` on ``side``, sharing a fresh cache
    root laid out as ``layout`` (``per-rank`` or ``shared``)."""
    row: dict[str, Any] = {"row": name, "side": side, "layout": layout, "steps": steps}
    with tempfile.TemporaryDirectory(prefix="dynamo_dist_restart_") as root:
        for job in JOBS:
            if progress:
                progress(f"{name}, {side}, {layout}: job {job}")
            start = time.perf_counter()
            log = os.path.join(logs, f"{_slug(name)}-{side}-{layout}-job{job}.log") if logs else None
            row[f"job{job}"] = run_job(side, name, root, steps, timeout, log, layout)
            row[f"job{job}"]["seconds"] = time.perf_counter() - start
            if progress:
                progress(f"{name}, {side}, {layout}: job {job} done in {row[f'job{job}']['seconds']:.0f} s: "
                         f"{_cells(row[f'job{job}'])}")
    return row


def _slug(name: str) -> str:
    return "".join(c if c.isalnum() else "_" for c in name).strip("_")


def _number(value: float | None) -> str:
    return "" if value is None else f"{value:.2g}"


def _cells(job: dict[str, Any]) -> str:
    return f"traced {job['traced']}, loss {_number(job['loss_diff'])}, grad {_number(job['grad_diff'])}" + (
        f", error: {job['error']}" if job["error"] else "")


def _outcomes(counts: dict[str, int], names: Sequence[str]) -> str:
    """``6 hit, 2 miss`` summed over the ranks, the outcomes in ``names`` that occurred."""
    return ", ".join(f"{counts[n]} {n}" for n in names if counts.get(n)) or "-"


def _summed(job: dict[str, Any], field_: str) -> dict[str, int]:
    total: dict[str, int] = {}
    for rank in job.get("ranks", []):
        for outcome, n in (rank.get(field_) or {}).items():
            total[outcome] = total.get(outcome, 0) + n
    return total


def table(rows: Sequence[dict[str, Any]]) -> str:
    lines = ["| row | side | cache dirs | job 1 frames traced | job 2 frames traced | job 2 Dynamo cache "
             "| job 2 AOTAutograd | job 2 first step (s) | job 2 max loss diff | job 2 max grad diff | error |",
             "|" + " --- |" * 11]
    for row in rows:
        layout = row.get("layout", PER_RANK)
        if "skipped" in row:
            lines.append(f"| {row['row']} | {row['side']} | {layout} | | | | | | | | skipped: {row['skipped']} |")
            continue
        one, two = row["job1"], row["job2"]
        errors = "; ".join(f"job {j}: {row[f'job{j}']['error']}" for j in JOBS if row[f"job{j}"]["error"])
        first = two.get("first_step_s")
        lines.append(f"| {row['row']} | {row['side']} | {layout} | {one['traced']} | {two['traced']} | "
                     f"{_outcomes(_summed(two, 'dynamo_cache'), ('hit', 'miss', 'error'))} | "
                     f"{_outcomes(_summed(two, 'aot_autograd'), ('hit', 'miss', 'bypass'))} | "
                     f"{'' if first is None else f'{first:.2f}'} | "
                     f"{_number(two['loss_diff'])} | {_number(two['grad_diff'])} | {errors} |")
    return "\n".join(lines)


MODULE = "devtools.clients.restart"
# The fields of a saved result beside its meta (dynamo_dist.cli.results).
FIELDS = ("rows",)


def parser() -> argparse.ArgumentParser:
    out = argparse.ArgumentParser(prog=f"python -m {MODULE}", description=__doc__.split("\n\n")[0])
    out.add_argument("--rows", nargs="+", default=list(warm_clients.DEFAULT_ROWS), metavar="NAME",
                     help="client rows (names of devtools.bench.warm_clients.ROWS; default: every default row)")
    out.add_argument("--steps", type=int, default=2, help="training steps per mode (default 2)")
    out.add_argument("--sides", nargs="+", default=list(SIDES), choices=SIDES)
    out.add_argument("--layouts", nargs="+", default=[PER_RANK], choices=LAYOUTS,
                     help="cache dirs: per-rank, one per rank (the default), or shared, one shared by the ranks "
                          "(torch's default on a host)")
    out.add_argument("--timeout", type=float, default=900, help="seconds a job's world may take (default 900)")
    out.add_argument("--json", metavar="PATH", help="write the rows, with the machine and command, here")
    out.add_argument("--logs", metavar="DIR", help="keep each job's stderr in DIR")
    return out


def main(argv: list[str] | None = None) -> int:
    from dynamo_dist.cli import results

    words = sys.argv[1:] if argv is None else argv
    cli = parser()
    args = cli.parse_args(words)
    unknown = [name for name in args.rows if name not in warm_clients.ROWS]
    if unknown:
        cli.error(f"unknown rows {unknown}; choose from {sorted(warm_clients.ROWS)}")
    if args.logs:
        os.makedirs(args.logs, exist_ok=True)

    def progress(message: str) -> None:
        print(f"restart: {message}", file=sys.stderr, flush=True)

    run = results.Run(results.command_line(MODULE, words),
                      {"rows": list(args.rows), "steps": args.steps, "sides": list(args.sides),
                       "layouts": list(args.layouts), "timeout": args.timeout})
    rows = []
    for name in args.rows:
        reason = warm_clients.skip_reason(name)
        for side in args.sides:
            for layout in args.layouts:
                rows.append({"row": name, "side": side, "layout": layout, "skipped": reason} if reason else
                            restart(name, side, args.steps, args.timeout, args.logs, progress, layout))
    print(table(rows))
    if args.json:
        results.write(args.json, run.result({"rows": rows}))
    return 0


if __name__ == "__main__":
    if sys.argv[1:2] == ["job"]:
        # python -m devtools.clients.restart job SIDE NAME CACHE_ROOT STEPS TIMEOUT LAYOUT
        side, name, root, steps, timeout, layout = sys.argv[2:8]
        print(json.dumps(job_main(side, name, root, int(steps), float(timeout), layout)), flush=True)
    else:
        sys.exit(main())
