"""Train a tensor-parallel transformer block on a real multi-rank world,
compiled with dynamo_dist, and report graph breaks and recompiles (with the
plugin and with stock torch), the collectives in each captured graph, whether
losses and gradients match eager on every rank, and step times.

With no arguments it starts a local world: 4 gloo ranks on CPU, or one NCCL
rank per GPU when GPUs are present. Launched by torchrun
(``torchrun --nproc-per-node 4 -m dynamo_dist demo``) it joins that world
instead. Exit status 1 if a compiled run does not match eager (or the plugin's
run fails), 2 on bad options.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from dataclasses import dataclass, field
from typing import Any

from dynamo_dist.cli.arguments import positive_int
from dynamo_dist.cli.process import under_torchrun

RTOL, ATOL = 1e-4, 1e-5

# What --help offers, written out so that help needs no torch (the models
# import it); tests/tools/test_cli_help.py keeps them equal to dynamo_dist.demo.models.
MODEL_NAMES = ("mlp", "sp_block", "transformer")
SIZE_NAMES = ("medium", "small", "tiny")
DEFAULT_SIZE = "small"
DEFAULT_SIZE_TEXT = "dim 32, hidden 64, 4 heads, seq 8, batch 2"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--ranks", type=positive_int, default=None,
                        help="ranks of the local world (default: 4 on CPU, one per GPU); ignored under torchrun")
    parser.add_argument("--steps", type=int, default=6, help="training steps per run (default 6)")
    parser.add_argument("--backend", choices=("aot_eager", "inductor", "eager"), default="aot_eager",
                        help="torch.compile backend (default aot_eager: the same graphs and collectives as "
                             "inductor, compiled in seconds; inductor compiles C++ per rank, minutes on a "
                             "small CPU box)")
    parser.add_argument("--size", choices=SIZE_NAMES, default=DEFAULT_SIZE,
                        help=f"model size preset (default {DEFAULT_SIZE}: {DEFAULT_SIZE_TEXT})")
    parser.add_argument("--dim", type=positive_int, help="override the model width")
    parser.add_argument("--hidden", type=positive_int, help="override the MLP hidden width")
    parser.add_argument("--heads", type=positive_int, help="override the number of attention heads")
    parser.add_argument("--seq-len", type=positive_int, help="override the sequence length")
    parser.add_argument("--batch", type=positive_int, help="override the batch size")
    parser.add_argument("--model", choices=MODEL_NAMES, default="transformer",
                        help="which tensor-parallel model to train (default transformer)")
    parser.add_argument("--device", choices=("auto", "cpu", "cuda"), default="auto",
                        help="auto: CUDA with NCCL when GPUs are present, else CPU with gloo")
    parser.add_argument("--no-stock", action="store_true", help="skip the stock-torch compiled run")


def _config_text(config) -> str:
    return (f"dim {config.dim}, hidden {config.hidden}, {config.n_heads} heads, "
            f"seq {config.seq_len}, batch {config.batch}")


@dataclass
class DemoOptions:
    """What every rank needs to know (picklable)."""

    model: str
    config: Any
    steps: int
    backend: str
    device_type: str
    stock: bool = True
    launcher: str = "local"


@dataclass
class RankSummary:
    """One rank's results, without tensors."""

    rank: int
    runs: dict[str, Any] = field(default_factory=dict)  # label -> TrainRun (grads dropped)
    matches: dict[str, tuple[bool, float, float]] = field(default_factory=dict)  # label -> compare()
    groups: dict[str, str] = field(default_factory=dict)  # group name -> mesh dim name
    threads: int = 1  # intra-op threads of this rank
    cpus: int = 1  # CPUs of this rank's machine


def _progress(rank: int):
    def say(line: str) -> None:
        if rank == 0:
            print(f"[demo] {line}", flush=True)
    return say


def run_rank(options: DemoOptions) -> tuple[int, str | None]:
    """The demo on this rank of the initialised world; every rank's summary is
    gathered on every rank. Returns ``(exit status, report)`` (the report on
    rank 0 only).

    An unmeasured warm-up compile with the same backend comes first (one-time
    costs, such as inductor building its C++ kernels, would otherwise fall on
    whichever compiled run goes first). Then two phases, each
    stepping an eager trainer and a compiled one in turn: with the plugin
    installed, then (unless ``stock=False``) with stock torch."""
    import torch
    import torch.distributed as dist

    from dynamo_dist import _hooks

    rank, world = dist.get_rank(), dist.get_world_size()
    say = _progress(rank)
    device = torch.device("cuda", torch.cuda.current_device()) if options.device_type == "cuda" \
        else torch.device("cpu")
    if device.type == "cpu":  # ranks on one machine share its cores
        local_ranks = int(os.environ.get("LOCAL_WORLD_SIZE", world))
        torch.set_num_threads(max(1, (os.cpu_count() or 1) // local_ranks))
    patches = _hooks.config_patches(inductor__fx_graph_cache=False) if options.backend == "inductor" \
        else _hooks.Patches()  # a cache hit would make the second compile look cheap
    try:
        return _run_rank(options, rank, world, say, device)
    finally:
        patches.restore()


def _run_rank(options: DemoOptions, rank: int, world: int, say: Any, device: Any) -> tuple[int, str | None]:
    import torch
    import torch.distributed as dist
    from torch.distributed.device_mesh import init_device_mesh

    import dynamo_dist
    from dynamo_dist._compat import observe as O
    from dynamo_dist.demo.training import Trainer, compare, ticking, train_interleaved

    mesh = init_device_mesh(options.device_type, (world,), mesh_dim_names=("tp",))
    summary = RankSummary(rank, groups={mesh.get_group("tp").group_name: "tp"},
                          threads=torch.get_num_threads(), cpus=os.cpu_count() or 1)
    say(f"world of {world} ranks ({dist.get_backend()}, {device.type}), mesh tp={world}; "
        f"{options.model} ({_config_text(options.config)}), {options.steps} steps")

    def trainer(backend: str | None, label: str) -> Trainer:
        return Trainer(options.model, options.config, mesh, backend=backend, device=device, label=label)

    was_installed = dynamo_dist.is_installed()
    dynamo_dist.uninstall()
    say(f"warm-up compile ({options.backend}, stock; not measured) ...")
    warm = trainer(options.backend, "warm-up")
    with ticking(say, "warm-up: still compiling"):
        warm.step(0)
    O.reset_dynamo()
    dynamo_dist.install()
    try:
        runs = train_interleaved([trainer(None, "eager"), trainer(options.backend, "dynamo_dist")],
                                 options.steps, say)
    finally:
        dynamo_dist.uninstall()
    if options.stock:
        runs += train_interleaved([trainer(None, "eager (stock phase)"), trainer(options.backend, "stock")],
                                  options.steps, say)
        O.reset_dynamo()
    if was_installed:
        dynamo_dist.install()
    eager = runs[0]
    for run in runs[1:]:
        summary.matches[run.label] = compare(run, eager, RTOL, ATOL)
    for run in runs:
        run.grads = []  # tensors stay on the rank
        summary.runs[run.label] = run
    gathered: list[Any] = [None] * world
    dist.all_gather_object(gathered, summary)
    report, status = render_report(options, gathered, world, dist.get_backend(), device.type)
    return status, report if rank == 0 else None


def _median_after_warmup(ms: list[float]) -> float:
    timed = ms[1:] if len(ms) > 1 else ms
    return statistics.median(timed) if timed else float("nan")


def _collectives_line(collectives: list[str], groups: dict[str, str]) -> str:
    """``all_gather_into_tensor[tp group '0'], reduce_scatter_tensor[...]; 2 wait_tensor``:
    the collectives in graph order (consecutive repeats counted), then the waits."""
    names = [c for c in collectives if c != "wait_tensor"]
    waits = len(collectives) - len(names)
    if not collectives:
        return "(none)"
    runs: list[list[Any]] = []
    for name in names:
        for group, dim in groups.items():
            name = name.replace(f"[{group}]", f"[{dim} group '{group}']")
        if runs and runs[-1][0] == name:
            runs[-1][1] += 1
        else:
            runs.append([name, 1])
    text = ", ".join(f"{name} x{n}" if n > 1 else name for name, n in runs)
    return f"{text}; {waits} wait_tensor"


def render_report(options: DemoOptions, ranks: list[RankSummary], world: int, dist_backend: str,
                  device_type: str) -> tuple[str, int]:
    """The report text and the exit status (0: every compiled run matched
    eager on every rank and the plugin's run worked; 1 otherwise)."""
    first = ranks[0]
    labels = [label for label in ("dynamo_dist", "stock") if label in first.runs]
    out = [f"dynamo_dist demo: tensor-parallel {options.model} ({_config_text(options.config)})",
           f"  {world} ranks, {dist_backend} on {device_type}, launched by {options.launcher}; 1-D mesh tp={world}; "
           f"torch.compile backend {options.backend}; {options.steps} SGD steps, backward outside the compiled "
           f"region", ""]
    width = max(len(label) for label in labels + ["eager"]) + 2
    out.append(f"{'':24}" + "".join(f"{label:>{width + 6}}" for label in labels))
    rows = [("graph breaks", "graph_breaks"), ("graphs compiled (step 1)", "compiles"),
            ("recompiles (steps 2+)", "recompiles")]
    for title, attr in rows:
        cells = []
        for label in labels:
            values = {getattr(r.runs[label], attr) for r in ranks}
            cells.append("/".join(str(v) for v in sorted(values)))
        out.append(f"{title:24}" + "".join(f"{c:>{width + 6}}" for c in cells))
    for label in labels:
        run = first.runs[label]
        if run.break_reasons:
            out.append(f"  {label} graph breaks: " + "; ".join(run.break_reasons))
    out.append("")
    for label in labels:
        run = first.runs[label]
        same = all(r.runs[label].forward == run.forward and r.runs[label].backward == run.backward for r in ranks)
        out.append(f"Collectives per captured graph ({label}; "
                   f"{'the same on every rank' if same else 'DIFFERENT across ranks'}):")
        for phase, graphs in (("forward", run.forward), ("backward", run.backward)):
            for i, graph in enumerate(graphs):
                out.append(f"  {phase:8} graph {i}: {_collectives_line(graph, first.groups)}")
        if not run.forward and not run.backward:
            out.append("  (no graph captured)")
    out.append("")
    out.append(f"Compiled vs eager, losses and gradients at every step (rtol {RTOL:g}, atol {ATOL:g}):")
    status = 0
    for r in ranks:
        cells = []
        for label in labels:
            run = r.runs[label]
            match, loss_diff, grad_diff = r.matches[label]
            if run.error is not None:
                verdict = "FAILED (error)"
            else:
                verdict = "match" if match else "MISMATCH"
            if not match and (label == "dynamo_dist" or run.error is None):
                status = 1
            cells.append(f"{label}: {verdict} (max |loss diff| {loss_diff:.2g}, max |grad diff| {grad_diff:.2g})")
        out.append(f"  rank {r.rank}: " + "; ".join(cells))
    if "eager (stock phase)" in first.matches:
        same = all(r.matches["eager (stock phase)"][0] for r in ranks)
        out.append(f"  (the two eager runs agree on every rank: {'yes' if same else 'NO'})")
        status = status if same else 1
    for label in labels:
        run = first.runs[label]
        if run.error is not None:
            out.append(f"\n{label} run failed on rank 0:\n{run.error}")
    out.append("")
    pairs = [(e, c) for e, c in (("eager", "dynamo_dist"), ("eager (stock phase)", "stock")) if c in labels]
    out.append(f"Step time, ms: median of steps 2-{options.steps} (forward + backward + optimizer step); each "
               f"compiled run is stepped in turn with an eager one, speedup = eager / compiled. "
               f"{first.threads} thread(s) per rank, {first.cpus} CPUs on rank 0's machine: noisy when ranks "
               f"share a few cores.")
    head = f"  {'rank':>4}"
    for _, label in pairs:
        head += f"  {'eager':>8}  {label:>11}  {'speedup':>7}"
    out.append(head + "   first step, incl. compile")
    for r in ranks:
        line = f"  {r.rank:>4}"
        for eager_label, label in pairs:
            e, c = _median_after_warmup(r.runs[eager_label].step_ms), _median_after_warmup(r.runs[label].step_ms)
            line += f"  {e:>8.1f}  {c:>11.1f}  {e / c if c == c and c > 0 else float('nan'):>6.2f}x"
        first_steps = ", ".join(f"{label} {r.runs[label].step_ms[0] / 1000:.1f} s"
                                for _, label in pairs if r.runs[label].step_ms)
        out.append(line + f"   {first_steps}")
    out.append("")
    out.append("Result: " + ("OK: every compiled run matches eager on every rank" if status == 0
                             else "MISMATCH (exit status 1)"))
    return "\n".join(out), status


# ---------------------------------------------------------------------------
# Launching.


def _config(args: argparse.Namespace):
    from dynamo_dist.demo.models import SIZES

    changes = {name: value for name, value in (("dim", args.dim), ("hidden", args.hidden), ("n_heads", args.heads),
                                               ("seq_len", args.seq_len), ("batch", args.batch))
               if value is not None}
    return SIZES[args.size].scaled(**changes)


def run(args: argparse.Namespace) -> int:
    import torch

    use_cuda = args.device == "cuda" or (args.device == "auto" and torch.cuda.is_available())
    if args.device == "cuda" and not torch.cuda.is_available():
        print("demo: --device cuda but no CUDA GPU is available", file=sys.stderr)
        return 2
    if args.steps < 2:
        print("demo: --steps must be at least 2 (the first step compiles)", file=sys.stderr)
        return 2
    torchrun = under_torchrun()
    if torchrun:
        world = int(os.environ["WORLD_SIZE"])
    else:
        world = args.ranks or (torch.cuda.device_count() if use_cuda else 4)
        if use_cuda and world > torch.cuda.device_count():
            print(f"demo: {world} ranks but {torch.cuda.device_count()} GPUs (one rank per GPU)", file=sys.stderr)
            return 2
    config = _config(args)
    try:
        config.check(world)
    except ValueError as e:
        print(f"demo: {e}; pick --ranks or model sizes that divide", file=sys.stderr)
        return 2
    options = DemoOptions(args.model, config, args.steps, args.backend, "cuda" if use_cuda else "cpu",
                          stock=not args.no_stock, launcher="torchrun" if torchrun else "local spawn")
    start = time.perf_counter()
    if torchrun:
        status, report = _join_torchrun_world(options)
    else:
        from dynamo_dist.worlds import run_in_world

        backend = "nccl" if use_cuda else "gloo"
        print(f"[demo] starting {world} {backend} ranks on {'GPU' if use_cuda else 'CPU'} ...", flush=True)
        results = run_in_world(run_rank, world, options, backend=backend, timeout=1800)
        statuses = {status for status, _ in results}
        status, report = max(statuses), results[0][1]
    if report is not None:
        print()
        print(report)
        print(f"(demo wall time {time.perf_counter() - start:.0f} s)")
    return status


def _join_torchrun_world(options: DemoOptions) -> tuple[int, str | None]:
    import torch
    import torch.distributed as dist

    from dynamo_dist.worlds.spawned import leave_world

    if options.device_type == "cuda":
        torch.cuda.set_device(int(os.environ["LOCAL_RANK"]))
    dist.init_process_group("nccl" if options.device_type == "cuda" else "gloo")
    finished = False
    try:
        result = run_rank(options)
        finished = True
        return result
    finally:
        leave_world(finished)
