"""The per-call cost of a frame loaded by torch's precompile, stock torch vs the plugin.

Under ``TORCH_CACHING_PRECOMPILE=1`` a restart loads a frame from Dynamo's
cache and rebuilds its guards from their saved form; the plugin saves some
guards in its own form (a guard on a module constant or a config entry as
"the value is this constant", the mesh and DTensor-spec guards as
descriptions: ``dynamo_dist/precompile/``), rebuilt as Python checks.
This measures what a call of the loaded frame costs (guard evaluation,
frame evaluation and the compiled graph) in four kinds of fresh process:

- **stock loaded** / **plugin loaded**: a restart that loads the frames
  (a copy of the side's first-run cache dir, Dynamo's entries included);
- **stock traced** / **plugin traced**: the same flag and the same compile
  caches without Dynamo's entries: Dynamo traces the frames in the process
  (the FX-graph cache answers), as in the first run.

Cases (inductor, one frame each, the fake 8-rank world seen from rank 3):
a module constant (``x * _flags.SCALE + 1 if _flags.FLAG else x - 1``), a
config entry (``compile_on_one_rank``), a DTensor and its mesh. A process
checks how many frames it traced (0 when loaded) and that timing recompiled
nothing, then times ``calls`` calls per sample (CPU time, collector off),
medians of ``samples``; the processes alternate in ABBA rounds and each
figure is the median over rounds, each ratio the median of per-round ratios.
A process that cannot load or run a case reports the error instead (each
failed process's message is kept, its case left out of that round).

    python -m devtools.bench.guard_cost_loaded [--repeats N] [--calls N] [--json PATH]
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
from typing import Any, Callable

import torch
from torch._dynamo.utils import counters
from torch.distributed.tensor import DTensor, Replicate, Shard

from dynamo_dist.worlds import fake_world, make_mesh

from . import _flags
from . import _timing as T
from .warm_start import _child_env

WORLD = (8, 3)
CASES = ("module constant", "config entry", "DTensor + mesh")
SIDES = ("stock loaded", "plugin loaded", "plugin traced", "stock traced")
# The config module holding this release's canonical ``compile_on_one_rank``.
ONE_RANK = torch.compiler.config if hasattr(torch.compiler.config, "compile_on_one_rank") else torch.distributed.config


def module_constant(x):
    return x * _flags.SCALE + 1 if _flags.FLAG else x - 1


def config_entry(x):
    return x * 2 + 1 if ONE_RANK.compile_on_one_rank else x - 1


def dtensor_mesh(d, mesh):
    return (d * mesh.size(1) + mesh.get_local_rank("tp")).to_local()


def _cases() -> dict[str, tuple[Callable[..., Any], tuple]]:
    mesh = make_mesh((2, 4), ("dp", "tp"))
    local = torch.arange(8, dtype=torch.float32).reshape(2, 4)
    dtensor = DTensor.from_local(local, mesh, [Shard(0), Replicate()], run_check=False)
    x = torch.ones(4)
    return {
        "module constant": (module_constant, (x,)),
        "config entry": (config_entry, (x,)),
        "DTensor + mesh": (dtensor_mesh, (dtensor, mesh)),
    }


def _time(compiled: Callable[..., Any], args: tuple, calls: int, samples: int) -> list[float]:
    """CPU microseconds per call of each of ``samples`` loops of ``calls``."""
    T.time_calls(compiled, [args], min(calls, 1000), time.process_time)  # warm-up
    with T.no_gc():
        return [T.time_calls(compiled, [args], calls, time.process_time) / calls * 1e6 for _ in range(samples)]


def child_main(side: str, save: bool, calls: int, samples: int) -> dict[str, Any]:
    """Each case compiled, checked against eager and timed in this (fresh)
    process; Dynamo's entries saved after them with ``save``."""
    torch.set_num_threads(1)  # as every benchmark process
    T.use(T.PLUGIN if side.startswith("plugin") else T.STOCK)
    result: dict[str, Any] = {}
    with fake_world(*WORLD), torch.no_grad():
        for name, (fn, args) in _cases().items():
            before, hits = counters["stats"]["unique_graphs"], dict(counters["dynamo_cache"])
            try:
                compiled = torch.compile(fn, backend="inductor", fullgraph=True)
                torch.testing.assert_close(compiled(*args), fn(*args))
                traced = counters["stats"]["unique_graphs"] - before
                loops = _time(compiled, args, calls, samples)
            except Exception as e:  # a side that cannot load or run the frame
                result[name] = {"error": f"{type(e).__name__}: {str(e).strip().splitlines()[0][:300]}"}
                continue
            if counters["stats"]["unique_graphs"] - before != traced:
                raise RuntimeError(f"{side}, {name}: recompiled while timing")
            cache = {k: v - hits.get(k, 0) for k, v in counters["dynamo_cache"].items() if v - hits.get(k, 0)}
            result[name] = {"us": T.median(loops), "loops_us": loops, "traced": traced, "dynamo_cache": cache}
        if save:
            torch.compiler.save_cache_artifacts()
    return result


def _run(side: str, cache_dir: str, save: bool, calls: int, samples: int, timeout: float) -> dict[str, Any]:
    cmd = [sys.executable, "-m", "devtools.bench.guard_cost_loaded", "child", side, "save" if save else "run",
           str(calls), str(samples)]
    proc = subprocess.run(cmd, env=_child_env(cache_dir, (("TORCH_CACHING_PRECOMPILE", "1"),)),
                          capture_output=True, text=True, timeout=timeout)
    lines = [line for line in proc.stdout.splitlines() if line.startswith("{")]
    if proc.returncode != 0 or not lines:
        raise RuntimeError(f"{' '.join(cmd[2:])} exited {proc.returncode}:\n{proc.stderr[-3000:]}")
    return json.loads(lines[-1])


def _sample(root: str, side: str, label: Any, calls: int, samples: int, timeout: float) -> dict[str, Any]:
    """One process of ``side`` on its own copy of the side's first-run
    caches (without Dynamo's entries for a traced side)."""
    first = os.path.join(root, "first-" + side.split()[0])
    cache_dir = os.path.join(root, f"{side.replace(' ', '-')}-{label}")
    shutil.copytree(first, cache_dir, ignore=None if side.endswith("loaded") else shutil.ignore_patterns("dynamo"))
    try:
        return _run(side, cache_dir, False, calls, samples, timeout)
    finally:
        shutil.rmtree(cache_dir, ignore_errors=True)


def measure(repeats: int, calls: int, samples: int, timeout: float = 900,
            progress: Callable[[str], None] = lambda line: print(line, file=sys.stderr, flush=True)) -> dict[str, Any]:
    """A first run per side (tracing and saving), then ``repeats`` rounds of
    the four processes; a row per case: per side the median of each process
(``us``, its samples) and every timed loop of every process (``loops_us``)."""
    names = list(CASES)
    per_case = {name: T.Comparison() for name in names}
    traced: dict[str, dict[str, list[int]]] = {name: {side: [] for side in SIDES} for name in names}
    loops: dict[str, dict[str, list[list[float]]]] = {name: {side: [] for side in SIDES} for name in names}
    cache: dict[str, dict[str, Any]] = {name: {} for name in names}
    errors: dict[str, dict[str, list[str]]] = {name: {} for name in names}  # one message per failed process
    first: dict[str, Any] = {}
    with tempfile.TemporaryDirectory(prefix="dynamo_dist_guard_cost_") as root:
        for side in (T.STOCK, T.PLUGIN):
            progress(f"guard_cost_loaded: first run, {side}")
            first[side] = _run(side, os.path.join(root, f"first-{side}"), True, calls, samples, timeout)
        for r, side in T.rounds(SIDES, repeats):
            progress(f"guard_cost_loaded: {side} {r + 1}/{repeats}")
            got = _sample(root, side, r, calls, samples, timeout)
            for name in names:
                if "error" in got[name]:
                    errors[name].setdefault(side, []).append(got[name]["error"])
                    continue
                per_case[name].add(side, got[name]["us"])
                traced[name][side].append(got[name]["traced"])
                loops[name][side].append(got[name]["loops_us"])
                cache[name][side] = got[name]["dynamo_cache"]

    def ratio(name: str, a: str, b: str) -> float | None:
        c = per_case[name]
        return c.ratio(a, b) if c.samples.get(a) and c.samples.get(b) else None

    pairs = (("plugin loaded", "stock loaded"), ("plugin loaded", "plugin traced"),
             ("stock loaded", "stock traced"), ("plugin traced", "stock traced"))
    return {"repeats": repeats, "calls": calls, "samples": samples, "first": first, "rows": [
        {"name": name, "us": per_case[name].as_dict("us"), "loops_us": loops[name], "traced": traced[name],
         "dynamo_cache": cache[name],
         "errors": errors[name], "ratios": {f"{a} / {b}": ratio(name, a, b) for a, b in pairs}}
        for name in names]}


def table(result: dict[str, Any]) -> str:
    lines = ["| frame (CPU us per call) | " + " | ".join(SIDES) + " | plugin / stock, loaded | "
             "plugin loaded / traced | frames traced (loaded sides) |",
             "| --- |" + " --- |" * (len(SIDES) + 3)]
    for row in result["rows"]:
        cells = []
        for side in SIDES:
            key = f"{side}_us"
            failed = row["errors"].get(side, [])
            cell = f"{row['us'][key]:.1f}" if key in row["us"] else "fails"
            if failed:
                cell += f" ({len(failed)} of {result['repeats']} processes fail: {failed[0]})"
            cells.append(cell)
        r = row["ratios"]
        fmt = lambda v: "" if v is None else f"{v:.2f}"  # noqa: E731
        loaded = {side: sorted(set(row["traced"][side])) for side in ("stock loaded", "plugin loaded")}
        lines.append(f"| {row['name']} | " + " | ".join(cells) + f" | {fmt(r['plugin loaded / stock loaded'])} | "
                     f"{fmt(r['plugin loaded / plugin traced'])} | {loaded} |")
    return "\n".join(lines)


MODULE = "devtools.bench.guard_cost_loaded"
# The fields of a saved result beside its meta (dynamo_dist.cli.results).
FIELDS = ("repeats", "calls", "samples", "first", "rows")


def parser() -> argparse.ArgumentParser:
    out = argparse.ArgumentParser(prog=f"python -m {MODULE}", description=__doc__.split("\n\n")[0])
    out.add_argument("--repeats", type=int, default=3, help="rounds of the four processes (default 3)")
    out.add_argument("--calls", type=int, default=20000, help="calls per timed loop (default 20000)")
    out.add_argument("--samples", type=int, default=5, help="timed loops per process (default 5)")
    out.add_argument("--json", metavar="PATH", help="write the rows, with the machine and command, here")
    return out


def main(argv: list[str] | None = None) -> int:
    from dynamo_dist.cli import results

    words = sys.argv[1:] if argv is None else argv
    args = parser().parse_args(words)
    run = results.Run(results.command_line(MODULE, words),
                      {"repeats": args.repeats, "calls": args.calls, "samples": args.samples})
    result = measure(args.repeats, args.calls, args.samples)
    print(table(result))
    if args.json:
        results.write(args.json, run.result({k: result[k] for k in FIELDS}))
    return 0


if __name__ == "__main__":
    if len(sys.argv) == 6 and sys.argv[1] == "child":  # a child: child SIDE save|run CALLS SAMPLES
        # The frames from the module itself, not ``__main__``: Dynamo's entries name their module.
        from devtools.bench.guard_cost_loaded import child_main as child
        print(json.dumps(child(sys.argv[2], sys.argv[3] == "save", int(sys.argv[4]), int(sys.argv[5]))))
    else:
        sys.exit(main())
