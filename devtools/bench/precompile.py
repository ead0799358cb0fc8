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

    python -m devtools.bench.precompile [--repeats N] [--size S] [--json PATH]
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import subprocess
import sys
import tempfile
import time
from typing import Any

import torch
from torch._dynamo.utils import counters

from dynamo_dist.demo.models import build_model, local_input, make_input
from dynamo_dist.worlds import fake_world, make_mesh
from . import _timing as T
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


def _run(side: str, size: str, cache_dir: str, save: bool, timeout: float) -> dict[str, Any]:
    extra = (("TORCH_CACHING_PRECOMPILE", "1" if side.endswith("precompile") else "0"),)
    cmd = [sys.executable, "-m", "devtools.bench.precompile", side, size, "save" if save else "load"]
    proc = subprocess.run(cmd, env=_child_env(cache_dir, extra), capture_output=True, text=True, timeout=timeout)
    lines = [line for line in proc.stdout.splitlines() if line.startswith("{")]
    if proc.returncode != 0 or not lines:
        raise RuntimeError(f"{' '.join(cmd[2:])} exited {proc.returncode}:\n{proc.stderr[-3000:]}")
    return json.loads(lines[-1])


def measure(size: str, repeats: int, timeout: float = 900) -> dict[str, Any]:
    """A first run per side (saving its caches), then ``repeats`` warm
    restarts per side in alternating rounds; the row."""
    traced: dict[str, list[int]] = {side: [] for side in SIDES}
    first: dict[str, dict[str, Any]] = {}
    with tempfile.TemporaryDirectory(prefix="dynamo_dist_precompile_") as root:
        for side in SIDES:
            print(f"precompile: first run, {side}", file=sys.stderr, flush=True)
            first[side] = _run(side, size, os.path.join(root, f"first-{side}"), True, timeout)

        def sample(side: str) -> dict[str, float]:
            cache_dir = os.path.join(root, f"warm-{side}-{len(traced[side])}")
            shutil.copytree(os.path.join(root, f"first-{side}"), cache_dir)
            got = _run(side, size, cache_dir, False, timeout)
            traced[side].append(got["traced"])
            return {"wall": got["wall"], "cpu": got["cpu"]}

        warm = T.compare(SIDES, repeats, sample, lambda d: print(f"precompile: warm {d}", file=sys.stderr,
                                                                  flush=True))
    return {
        "size": size, "repeats": repeats, "first": first, "traced": traced,
        "warm": warm["wall"].as_dict("s"), "warm_cpu": warm["cpu"].as_dict("s"),
        "ratios": {
            "plugin+precompile / plugin": warm["wall"].ratio("plugin+precompile", "plugin"),
            "plugin+precompile / stock+precompile": warm["wall"].ratio("plugin+precompile", "stock+precompile"),
            "stock+precompile / stock": warm["wall"].ratio("stock+precompile", "stock"),
        },
    }


def table(row: dict[str, Any]) -> str:
    lines = ["| restart | first step, wall (s) | CPU (s) | frames traced |", "| --- | --- | --- | --- |"]
    for side in SIDES:
        lines.append(f"| {side} | {row['warm'][f'{side}_s']:.2f} | {row['warm_cpu'][f'{side}_s']:.2f} | "
                     f"{sorted(set(row['traced'][side]))} |")
    lines += ["", *(f"- {name}: {value:.2f}x" for name, value in row["ratios"].items())]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m devtools.bench.precompile", description=__doc__.split("\n\n")[0])
    parser.add_argument("--repeats", type=int, default=3, help="warm restarts per side (default 3)")
    parser.add_argument("--size", default="small", help="the model size (default: the warm start's, small)")
    parser.add_argument("--json", metavar="PATH", help="write the row, with the machine and command, here")
    args = parser.parse_args(argv)
    row = measure(args.size, args.repeats)
    print(table(row))
    if args.json:
        words = argv if argv is not None else sys.argv[1:]
        meta = {"date": time.strftime("%Y-%m-%d"), "torch": torch.__version__, "python": platform.python_version(),
                "machine": platform.machine(), "cores": os.cpu_count(),
                "command": " ".join(["python -m devtools.bench.precompile", *words])}
        with open(args.json, "w") as f:
            json.dump({"meta": meta, "row": row}, f, indent=1)
    return 0


if __name__ == "__main__":
    if len(sys.argv) == 4 and sys.argv[1] in SIDES:  # a child: SIDE SIZE save|load
        print(json.dumps(child_main(sys.argv[1], sys.argv[2], sys.argv[3] == "save")))
    else:
        sys.exit(main())
