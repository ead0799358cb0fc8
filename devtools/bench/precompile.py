"""Restart with torch's precompile, stock torch vs the plugin.

The warm start's TP model (the fake 8-rank world seen from rank 3, a
``(2, 4)`` mesh, the model on ``mesh["tp"]``), its training step compiled
with inductor, restarted four ways:

- **stock** / **plugin**: a warm restart (a copy of a first run's cache dir):
  the FX-graph and AOTAutograd caches answer, Dynamo traces the frame again;
- **stock+precompile** / **plugin+precompile**: the same with
  ``TORCH_CACHING_PRECOMPILE=1``, the first run having saved Dynamo's
  entries (``torch.compiler.save_cache_artifacts()``): ``torch.compile``
  loads the frame instead of tracing it.

A sample is timed from the ``torch.compile`` call (where precompile loads)
to the end of the first step (forward and backward), in a fresh process;
sides alternate (ABBA rounds), each warm sample from its own copy of its
side's first-run cache dir. Each sample also reports the frames Dynamo
traced in it (0: loaded).

``--clients NAME...`` adds rows of the client warm start
(``devtools.bench.warm_clients.ROWS``: torchtitan, HF transformers): a
sample is a fresh process that spawns the case's gloo world, each rank with
its own cache dir (ranks compile frames whose guards are their own), timed
on each rank from the start of the model's build (the client's own setup and
its ``torch.compile`` calls, where precompile loads) to the end of the first
training step; the slowest rank's time. A side whose restart fails reports
the error in place of its times.

    python -m devtools.bench.precompile [--repeats N] [--size S] [--clients NAME...] [--json PATH]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from typing import Any

import torch
from torch._dynamo.utils import counters

from dynamo_dist.demo.models import build_model, local_input, make_input
from dynamo_dist.worlds import fake_world, make_mesh, run_in_world
from devtools.clients import run_driver
from devtools.clients.runs import rank_caches
from . import _timing as T
from . import warm_clients
from ._models import model_config, train_step
from .warm_start import FAKE_WORLD, _child_env

SIDES = ("stock", "stock+precompile", "plugin", "plugin+precompile")


def child_main(side: str, size: str, save: bool) -> dict[str, Any]:
    """One first step in this (fresh) process: wall and CPU seconds from the
    ``torch.compile`` call to the end of the backward, frames traced."""
    torch.set_num_threads(1)  # as every benchmark process
    T.use(T.PLUGIN if side.startswith("plugin") else T.STOCK)
    config = model_config(size)
    with fake_world(*FAKE_WORLD):
        mesh = make_mesh((2, 4), ("dp", "tp"))["tp"]
        model = build_model("mlp", config, mesh=mesh)
        x = local_input("mlp", make_input(config), mesh)
        start, cpu = time.perf_counter(), T.cpu_seconds()
        compiled = torch.compile(train_step, backend="inductor", fullgraph=True)
        compiled(model, x).backward()
        wall, cpu = time.perf_counter() - start, T.cpu_seconds() - cpu
        if save:
            torch.compiler.save_cache_artifacts()
    return {"wall": wall, "cpu": cpu, "traced": counters["stats"]["unique_graphs"]}


def client_on_rank(side: str, name: str, cache_root: str) -> dict[str, Any]:
    """This rank's build and first training step of client row ``name``
    (module level: run in a spawned rank), its caches in its own dir under
    ``cache_root``, Dynamo's entries saved there after the step."""
    torch.set_num_threads(1)  # the ranks share the machine's cores
    row = warm_clients.ROWS[name]
    mode = T.PLUGIN if side.startswith("plugin") else T.STOCK
    with rank_caches(cache_root):
        [result] = run_driver(row.client, "run_case", row.case, steps=1, modes=(mode,), backend="inductor",
                              explain=False)
    if result.error:
        return {"error": result.error.strip().splitlines()[-1]}
    return {"wall": result.build_seconds + result.step_seconds[0],
            "cpu": result.build_cpu_seconds + result.step_cpu_seconds[0], "traced": result.frames_traced}


def client_main(side: str, name: str, cache_root: str, timeout: float = 900) -> dict[str, Any]:
    """One sample of client row ``name``: its gloo world in this (fresh)
    process; the slowest rank's times, the most frames a rank traced."""
    torch.set_num_threads(1)
    ranks = run_in_world(client_on_rank, warm_clients.ROWS[name].case.world_size, side, name, cache_root,
                         timeout=timeout)
    errors = [r["error"] for r in ranks if "error" in r]
    if errors:
        return {"error": errors[0]}
    return {key: max(r[key] for r in ranks) for key in ("wall", "cpu", "traced")}


def _run(side: str, program: str, cache_dir: str, save: bool, timeout: float) -> dict[str, Any]:
    """One sample in a fresh process: ``program`` is a model size (the TP
    block) or a client row's name."""
    extra = (("TORCH_CACHING_PRECOMPILE", "1" if side.endswith("precompile") else "0"),)
    if program in warm_clients.ROWS:
        cmd = [sys.executable, "-m", "devtools.bench.precompile", "client", side, program, cache_dir]
    else:
        cmd = [sys.executable, "-m", "devtools.bench.precompile", side, program, "save" if save else "load"]
    proc = subprocess.run(cmd, env=_child_env(cache_dir, extra), capture_output=True, text=True, timeout=timeout)
    lines = [line for line in proc.stdout.splitlines() if line.startswith("{")]
    if proc.returncode != 0 or not lines:
        raise RuntimeError(f"{' '.join(cmd[2:])} exited {proc.returncode}:\n{proc.stderr[-3000:]}")
    return json.loads(lines[-1])


def measure(program: str, repeats: int, timeout: float = 900) -> dict[str, Any]:
    """A first run per side (saving its caches), then ``repeats`` warm
    restarts per side in alternating rounds; the row. A side whose restart
    fails is left out of the rounds, with its error."""
    traced: dict[str, list[int]] = {side: [] for side in SIDES}
    first: dict[str, dict[str, Any]] = {}
    errors: dict[str, str] = {}
    with tempfile.TemporaryDirectory(prefix="dynamo_dist_precompile_") as root:
        for side in SIDES:
            print(f"precompile {program}: first run, {side}", file=sys.stderr, flush=True)
            first[side] = _run(side, program, os.path.join(root, f"first-{side}"), True, timeout)
            if "error" in first[side]:
                errors[side] = f"first run: {first[side]['error']}"
            else:  # one restart before the rounds: does this side restart at all?
                probe = _restart(root, side, program, "probe", timeout)
                if "error" in probe:
                    errors[side] = f"restart: {probe['error']}"
        sides = tuple(side for side in SIDES if side not in errors)

        def sample(side: str) -> dict[str, float]:
            got = _restart(root, side, program, len(traced[side]), timeout)
            if "error" in got:
                raise RuntimeError(f"{program}, {side}: {got['error']}")
            traced[side].append(got["traced"])
            return {"wall": got["wall"], "cpu": got["cpu"]}

        warm = T.compare(sides, repeats, sample, lambda d: print(f"precompile {program}: warm {d}",
                                                                 file=sys.stderr, flush=True))

    def ratio(a: str, b: str) -> float | None:
        return warm["wall"].ratio(a, b) if a in sides and b in sides else None

    return {
        "program": program, "repeats": repeats, "first": first, "traced": traced, "errors": errors,
        "warm": warm["wall"].as_dict("s"), "warm_cpu": warm["cpu"].as_dict("s"),
        "ratios": {
            "plugin+precompile / plugin": ratio("plugin+precompile", "plugin"),
            "plugin+precompile / stock+precompile": ratio("plugin+precompile", "stock+precompile"),
            "stock+precompile / stock": ratio("stock+precompile", "stock"),
        },
    }


def _restart(root: str, side: str, program: str, label: Any, timeout: float) -> dict[str, Any]:
    """A warm restart of ``side`` from its own copy of the side's first-run caches."""
    cache_dir = os.path.join(root, f"warm-{side}-{label}")
    shutil.copytree(os.path.join(root, f"first-{side}"), cache_dir)
    try:
        return _run(side, program, cache_dir, False, timeout)
    finally:
        shutil.rmtree(cache_dir, ignore_errors=True)


def table(row: dict[str, Any]) -> str:
    lines = [f"{row['program']}:", "", "| restart | first step, wall (s) | CPU (s) | frames traced |",
             "| --- | --- | --- | --- |"]
    for side in SIDES:
        if side in row["errors"]:
            lines.append(f"| {side} | fails: {row['errors'][side]} | | |")
            continue
        lines.append(f"| {side} | {row['warm'][f'{side}_s']:.2f} | {row['warm_cpu'][f'{side}_s']:.2f} | "
                     f"{sorted(set(row['traced'][side]))} |")
    lines += ["", *(f"- {name}: {value:.2f}x" for name, value in row["ratios"].items() if value is not None)]
    return "\n".join(lines)


MODULE = "devtools.bench.precompile"
# The fields of a saved result beside its meta (dynamo_dist.cli.results).
FIELDS = ("row", "clients")


def parser() -> argparse.ArgumentParser:
    out = argparse.ArgumentParser(prog=f"python -m {MODULE}", description=__doc__.split("\n\n")[0])
    out.add_argument("--repeats", type=int, default=3, help="warm restarts per side (default 3)")
    out.add_argument("--size", default="small", help="the model size (default: the warm start's, small)")
    out.add_argument("--clients", nargs="*", default=[], metavar="NAME",
                     help="client rows to add (names of devtools.bench.warm_clients.ROWS)")
    out.add_argument("--json", metavar="PATH", help="write the rows, with the machine and command, here")
    return out


def main(argv: list[str] | None = None) -> int:
    from dynamo_dist.cli import results

    words = sys.argv[1:] if argv is None else argv
    cli = parser()
    args = cli.parse_args(words)
    unknown = [name for name in args.clients if name not in warm_clients.ROWS]
    if unknown:
        cli.error(f"unknown client rows {unknown}; choose from {sorted(warm_clients.ROWS)}")
    run = results.Run(results.command_line(MODULE, words),
                      {"repeats": args.repeats, "size": args.size, "clients": list(args.clients)})
    row = measure(args.size, args.repeats)
    print(table(row))
    clients = {}
    for name in args.clients:
        reason = warm_clients.skip_reason(name)
        clients[name] = {"skipped": reason} if reason else measure(name, args.repeats)
        print(f"{name}: skipped: {reason}" if reason else table(clients[name]), flush=True)
    if args.json:
        results.write(args.json, run.result({"row": row, "clients": clients}))
    return 0


if __name__ == "__main__":
    if len(sys.argv) == 5 and sys.argv[1] == "client":  # a child: client SIDE NAME CACHE_ROOT
        print(json.dumps(client_main(*sys.argv[2:5])))
    elif len(sys.argv) == 4 and sys.argv[1] in SIDES:  # a child: SIDE SIZE save|load
        print(json.dumps(child_main(sys.argv[1], sys.argv[2], sys.argv[3] == "save")))
    else:
        sys.exit(main())
