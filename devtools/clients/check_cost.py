"""What spmd_types' type checker costs, eager and compiled: torchtitan's
training step on its ``spmd_types`` backend, with ``--debug.spmd_typechecking``
off and on.

Each sample is a fresh process that spawns the row's gloo world (TP=2); every
rank trains ``steps`` steps eagerly, then compiled on one side (``stock`` or
``plugin``) with ``backend`` (``aot_eager`` by default: the first compiled step
is Dynamo's trace and AOTAutograd's, where the checker runs under the plugin,
and no kernel compile), from the same weights and batches. Per sample: the
slowest rank's first compiled step (trace and compile and the step), the median
of its later compiled steps and of its eager steps after the first (wall
seconds), the frames traced, the graph breaks, the largest ``|loss - eager|``
and ``|grad - eager|``, or the error's last line. Sides and checker modes
alternate sample by sample, so load drifts over both alike.

    python -m devtools.clients.check_cost [--samples N] [--steps N] [--backend B] [--json PATH]

With the checker on, the plugin runs its rules while Dynamo traces and the
graphs run without it: the compiled steps' medians are to be equal with and
without it, and the difference of the first steps is the type check's compile
cost. Stock fails to compile torchtitan's checked step (its error is the row's).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import statistics
import subprocess
import sys
import time
from typing import Any, Sequence

import torch

import dynamo_dist
from devtools import PLUGIN, STOCK, error_line
from devtools.bench import warm_clients
from devtools.bench.warm_start import _child_env
from devtools.clients import run_driver
from dynamo_dist.worlds import run_in_world

SIDES = (PLUGIN, STOCK)
# Checker off and on: the rows of devtools.bench.warm_clients.ROWS.
MODES = {"off": "torchtitan TP=2, spmd_types, no AC", "on": "torchtitan TP=2, spmd_types type-checked, no AC"}


def sample_on_rank(side: str, mode: str, steps: int, backend: str) -> dict[str, Any]:
    """This rank's eager and compiled steps (module level: run in a spawned rank)."""
    torch.set_num_threads(1)  # the ranks share the machine's cores
    row = warm_clients.ROWS[MODES[mode]]
    with dynamo_dist.enabled() if side == PLUGIN else contextlib.nullcontext():
        eager, compiled = run_driver(row.client, "run_case", row.case, steps=steps, modes=("eager", side),
                                     backend=backend, explain=False)
    error = eager.error or compiled.error
    return {"eager_s": eager.step_seconds, "compiled_s": compiled.step_seconds, "traced": compiled.frames_traced,
            "breaks": compiled.graph_breaks, "loss_diff": compiled.max_loss_diff,
            "grad_diff": compiled.max_grad_diff, "error": error_line(error) if error else None}


def over_ranks(ranks: Sequence[dict[str, Any]]) -> dict[str, Any]:
    """One sample: per step the slowest rank's time; the most frames and
    breaks and the largest diffs over the ranks; the first error."""
    errors = [r["error"] for r in ranks if r["error"]]
    if errors or not ranks:
        return {"error": errors[0] if errors else "no rank answered", "ranks": list(ranks)}

    def slowest(key: str) -> list[float]:
        return [max(step) for step in zip(*(r[key] for r in ranks))]

    eager, compiled = slowest("eager_s"), slowest("compiled_s")
    return {"first_compiled_s": compiled[0], "compiled_step_s": statistics.median(compiled[1:]),
            "eager_step_s": statistics.median(eager[1:]), "traced": max(r["traced"] for r in ranks),
            "breaks": max(r["breaks"] for r in ranks), "loss_diff": max(r["loss_diff"] for r in ranks),
            "grad_diff": max(r["grad_diff"] for r in ranks), "error": None, "ranks": list(ranks)}


def sample_main(side: str, mode: str, steps: int, backend: str, timeout: float) -> dict[str, Any]:
    """One sample: the world in this (fresh) process."""
    torch.set_num_threads(1)
    world = warm_clients.ROWS[MODES[mode]].case.world_size
    return over_ranks(run_in_world(sample_on_rank, world, side, mode, steps, backend, timeout=timeout))


def run_sample(side: str, mode: str, steps: int, backend: str, timeout: float) -> dict[str, Any]:
    """One sample in a fresh process; its failure or timeout is the sample's error."""
    import tempfile

    cmd = [sys.executable, "-m", MODULE, "sample", side, mode, str(steps), backend, str(timeout)]
    with tempfile.TemporaryDirectory(prefix="dynamo_dist_check_cost_") as cache:
        try:
            proc = subprocess.run(cmd, env=_child_env(cache, ()), capture_output=True, text=True,
                                  timeout=timeout + 60)
        except subprocess.TimeoutExpired:
            return {"error": f"timed out after {timeout + 60:.0f} s", "ranks": []}
    lines = [line for line in proc.stdout.splitlines() if line.startswith("{")]
    if proc.returncode != 0 or not lines:
        return {"error": f"exited {proc.returncode}: {error_line(proc.stderr)}", "ranks": []}
    return json.loads(lines[-1])


def summary(samples: Sequence[dict[str, Any]]) -> dict[str, Any]:
    """A row's medians over its samples that ran; the first error of any."""
    ran = [s for s in samples if s["error"] is None]
    errors = [s["error"] for s in samples if s["error"]]

    def median(key: str) -> float | None:
        return statistics.median(s[key] for s in ran) if ran else None

    return {"first_compiled_s": median("first_compiled_s"), "compiled_step_s": median("compiled_step_s"),
            "eager_step_s": median("eager_step_s"), "traced": max((s["traced"] for s in ran), default=None),
            "breaks": max((s["breaks"] for s in ran), default=None),
            "loss_diff": max((s["loss_diff"] for s in ran), default=None),
            "grad_diff": max((s["grad_diff"] for s in ran), default=None),
            "samples": len(samples), "ran": len(ran), "error": errors[0] if errors else None}


def _seconds(value: float | None, digits: int = 2) -> str:
    return "" if value is None else f"{value:.{digits}f}"


def _count(value: int | None) -> str:
    return "" if value is None else str(value)


def _number(value: float | None) -> str:
    return "" if value is None else f"{value:.2g}"


def _ratio(a: float | None, b: float | None) -> str:
    return "" if a is None or b is None or not b else f"x{a / b:.2f}"


def table(rows: Sequence[dict[str, Any]]) -> str:
    """Per side and checker mode: the medians; then, per side, checked over
    unchecked (the type check's cost)."""
    lines = ["| side | checker | first compiled step (s) | compiled step (s) | eager step (s) | frames traced "
             "| graph breaks | max loss diff | max grad diff | samples ran | error |", "|" + " --- |" * 11]
    by = {(r["side"], r["mode"]): r["summary"] for r in rows}
    for row in rows:
        s = row["summary"]
        lines.append(f"| {row['side']} | {row['mode']} | {_seconds(s['first_compiled_s'])} | "
                     f"{_seconds(s['compiled_step_s'], 3)} | {_seconds(s['eager_step_s'], 3)} | "
                     f"{_count(s['traced'])} | {_count(s['breaks'])} | {_number(s['loss_diff'])} | "
                     f"{_number(s['grad_diff'])} | {s['ran']} of {s['samples']} | "
                     f"{s['error'] or ''} |")
    lines += ["", "| side | checker on / off: first compiled step | compiled step | eager step |", "|" + " --- |" * 4]
    for side in dict.fromkeys(r["side"] for r in rows):
        on, off = by.get((side, "on")), by.get((side, "off"))
        if on is None or off is None:
            continue
        lines.append(f"| {side} | {_ratio(on['first_compiled_s'], off['first_compiled_s'])} | "
                     f"{_ratio(on['compiled_step_s'], off['compiled_step_s'])} | "
                     f"{_ratio(on['eager_step_s'], off['eager_step_s'])} |")
    return "\n".join(lines)


MODULE = "devtools.clients.check_cost"
# The fields of a saved result beside its meta (dynamo_dist.cli.results).
FIELDS = ("rows",)


def parser() -> argparse.ArgumentParser:
    out = argparse.ArgumentParser(prog=f"python -m {MODULE}", description=__doc__.split("\n\n")[0])
    out.add_argument("--samples", type=int, default=3, help="fresh processes per side and checker mode (default 3)")
    out.add_argument("--steps", type=int, default=5, help="training steps per mode and sample (default 5)")
    out.add_argument("--backend", default="aot_eager", help="torch.compile's backend (default aot_eager)")
    out.add_argument("--sides", nargs="+", default=list(SIDES), choices=SIDES)
    out.add_argument("--timeout", type=float, default=900, help="seconds a sample's world may take (default 900)")
    out.add_argument("--json", metavar="PATH", help="write the rows, with the machine and command, here")
    return out


def main(argv: list[str] | None = None) -> int:
    from dynamo_dist.cli import results

    words = sys.argv[1:] if argv is None else argv
    cli = parser()
    args = cli.parse_args(words)
    if args.steps < 2 or args.samples < 1:
        cli.error("--steps must be at least 2 (the first compiled step and a later one) and --samples at least 1")
    reason = warm_clients.skip_reason(MODES["on"])
    if reason:
        cli.error(f"cannot run here: {reason}")
    run = results.Run(results.command_line(MODULE, words),
                      {"samples": args.samples, "steps": args.steps, "backend": args.backend,
                       "sides": list(args.sides), "timeout": args.timeout})
    samples: dict[tuple[str, str], list[dict[str, Any]]] = {(s, m): [] for s in args.sides for m in MODES}
    order = list(samples)
    for index in range(args.samples):
        for side, mode in order if index % 2 == 0 else reversed(order):
            start = time.perf_counter()
            sample = run_sample(side, mode, args.steps, args.backend, args.timeout)
            samples[side, mode].append(sample)
            outcome = (f"error: {sample['error']}" if sample["error"] else
                       f"first compiled step {sample['first_compiled_s']:.2f} s")
            print(f"check_cost: sample {index + 1}/{args.samples}, {side}, checker {mode}: "
                  f"{time.perf_counter() - start:.0f} s, {outcome}", file=sys.stderr, flush=True)
    rows = [{"side": side, "mode": mode, "row": MODES[mode], "summary": summary(found), "samples": found}
            for (side, mode), found in samples.items()]
    print(table(rows))
    if args.json:
        results.write(args.json, run.result({"rows": rows}))
    return 0


if __name__ == "__main__":
    if sys.argv[1:2] == ["sample"]:
        # python -m devtools.clients.check_cost sample SIDE MODE STEPS BACKEND TIMEOUT
        side, mode, steps, backend, timeout = sys.argv[2:7]
        print(json.dumps(sample_main(side, mode, int(steps), backend, float(timeout))), flush=True)
    else:
        sys.exit(main())
