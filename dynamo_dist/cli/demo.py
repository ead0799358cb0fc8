"""Train a tensor-parallel transformer block on a real multi-rank world,
compiled with dynamo_dist and with stock torch, and show where they differ:
graph breaks, recompiles, the collectives in each captured graph, whether
losses and gradients match eager on every rank, step times; then, measured
in the same run, what stock gets wrong or slow: the job's compiles per graph
under compile once, a second job restarting from the caches the first
filled, and stock's stale answer and crash on the block's code. A summary
table puts stock beside dynamo_dist and says where they are equal.

With no arguments it starts a local world: 4 gloo ranks on CPU, or one NCCL
rank per GPU when GPUs are present. Launched by torchrun
(``torchrun --nproc-per-node 4 -m dynamo_dist demo``) it joins that world
instead (the restart, a second job, is then left out). ``--quick``: the
training comparison only. Exit status 1 if a compiled run does not match
eager (or a dynamo_dist run fails), 2 on bad options.
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
# stock's faults the contrasts show (dynamo_dist.demo.contrasts), as the summary names them
FAULTS = ("a batch split over another group", "a sequence-sharded activation returned as tokens")

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
    parser.add_argument("--quick", action="store_true",
                        help="the training comparison only: no compile once, restart or stock's faults (about half "
                             "the time)")


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
    quick: bool = False  # the training comparison only
    cache_root: str | None = None  # inductor's cache dir of the contrasts (shared by a machine's ranks)

    @property
    def contrasts(self) -> bool:
        """Whether the run measures stock's faults, compile once and the restart."""
        return self.stock and not self.quick


@dataclass
class RankSummary:
    """One rank's results, without tensors."""

    rank: int
    runs: dict[str, Any] = field(default_factory=dict)  # label -> TrainRun (grads dropped)
    matches: dict[str, tuple[bool, float, float]] = field(default_factory=dict)  # label -> compare()
    groups: dict[str, str] = field(default_factory=dict)  # group name -> mesh dim name
    threads: int = 1  # intra-op threads of this rank
    cpus: int = 1  # CPUs of this rank's machine
    once: dict[str, Any] = field(default_factory=dict)  # side -> contrasts.ForwardCompile (a cold job)
    restart: dict[str, Any] = field(default_factory=dict)  # side -> contrasts.ForwardCompile (a second job)
    faults: dict[str, list[Any]] = field(default_factory=dict)  # fault -> [contrasts.FaultOutcome per side]
    contrasts_error: str | None = None  # why the contrasts could not run here


def _progress(rank: int):
    def say(line: str) -> None:
        if rank == 0:
            print(f"[demo] {line}", flush=True)
    return say


def run_rank(options: DemoOptions) -> list[RankSummary]:
    """The demo on this rank of the initialised world; every rank's summary is
    gathered on every rank and returned.

    An unmeasured warm-up compile with the same backend comes first (one-time
    costs would otherwise fall on whichever compiled run goes first). Then two
    phases, each stepping an eager trainer and a compiled one in turn: with
    the plugin installed, then (unless ``stock=False``) with stock torch.
    Unless ``quick``, the contrasts follow (``dynamo_dist.demo.contrasts``):
    the block's forward compiled by a cold job under compile once, each side,
    and stock's faults on the block's code."""
    import torch
    import torch.distributed as dist

    from dynamo_dist import _hooks

    rank, world = dist.get_rank(), dist.get_world_size()
    say = _progress(rank)
    device = _device(options)
    if device.type == "cpu":  # ranks on one machine share its cores
        local_ranks = int(os.environ.get("LOCAL_WORLD_SIZE", world))
        torch.set_num_threads(max(1, (os.cpu_count() or 1) // local_ranks))
    patches = _hooks.config_patches(inductor__fx_graph_cache=False) if options.backend == "inductor" \
        else _hooks.Patches()  # a cache hit would make the second compile look cheap
    try:
        summary = _run_rank(options, rank, world, say, device)
    finally:
        patches.restore()
    if options.contrasts:
        _contrasts(options, summary, world, say, device)
    gathered: list[Any] = [None] * world
    dist.all_gather_object(gathered, summary)
    return gathered


def _device(options: DemoOptions) -> Any:
    import torch

    return torch.device("cuda", torch.cuda.current_device()) if options.device_type == "cuda" \
        else torch.device("cpu")


def _run_rank(options: DemoOptions, rank: int, world: int, say: Any, device: Any) -> RankSummary:
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
    return summary


def _contrasts(options: DemoOptions, summary: RankSummary, world: int, say: Any, device: Any) -> None:
    """A cold job's compiles of the block's forward under compile once, per
    side, and stock's faults on the block's code, into ``summary``."""
    from torch.distributed.device_mesh import init_device_mesh

    import dynamo_dist
    from dynamo_dist.demo import contrasts as K
    from dynamo_dist.demo.training import ticking

    was_installed = dynamo_dist.is_installed()
    mesh = init_device_mesh(options.device_type, (world,), mesh_dim_names=("tp",))
    own = options.cache_root is None  # under torchrun: each rank's own (removed after)
    root = options.cache_root or _own_cache_root()
    try:
        say(f"compile once: warm-up ({K.BACKEND}, stock, caches off; not measured) ...")
        with ticking(say, "warm-up: still compiling"):
            K.warm_up_kernels(options.model, options.config, mesh, root, device)
        for side in (K.PLUGIN, K.STOCK):
            say(f"compile once: a cold job, {side} ({K.BACKEND}, compile_on_one_rank) ...")
            with ticking(say, f"{side}: still compiling"):
                summary.once[side] = K.compile_forward(side, options.model, options.config, mesh, root, device)
        say("stock's faults on the block's code ...")
        summary.faults[FAULTS[0]] = K.stale_group_answer(world, options.device_type)
        summary.faults[FAULTS[1]] = K.sharded_view_returned(options.config, mesh)
    except Exception as e:  # e.g. no C++ compiler for inductor: the training comparison still stands
        import traceback

        summary.contrasts_error = f"{type(e).__name__}: {e}".splitlines()[0][:300]
        traceback.print_exc()
    finally:
        (dynamo_dist.install if was_installed else dynamo_dist.uninstall)()
        if own:
            import shutil

            shutil.rmtree(root, ignore_errors=True)


def _own_cache_root() -> str:
    import tempfile

    return tempfile.mkdtemp(prefix="dynamo_dist_demo_")


def restart_rank(options: DemoOptions) -> dict[str, Any]:
    """A second job (new processes) on the caches the first job's contrasts
    filled: each side's first call of the compiled forward."""
    import torch
    import torch.distributed as dist
    from torch.distributed.device_mesh import init_device_mesh

    from dynamo_dist.demo import contrasts as K

    world = dist.get_world_size()
    say = _progress(dist.get_rank())
    device = _device(options)
    if device.type == "cpu":
        torch.set_num_threads(max(1, (os.cpu_count() or 1) // world))
    mesh = init_device_mesh(options.device_type, (world,), mesh_dim_names=("tp",))
    assert options.cache_root is not None
    K.warm_up_inductor(os.path.join(options.cache_root, "warm-up"))
    out = {}
    for side in (K.PLUGIN, K.STOCK):
        say(f"restart: a new job on the first job's caches, {side} ...")
        out[side] = K.compile_forward(side, options.model, options.config, mesh, options.cache_root, device)
    return out


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
    eager on every rank and the plugin's run worked; 1 otherwise): a header,
    then one section each for what was traced, the collectives, the values,
    the step times, the contrasts and the summary."""
    labels = [label for label in ("dynamo_dist", "stock") if label in ranks[0].runs]
    out = [f"dynamo_dist demo: tensor-parallel {options.model} ({_config_text(options.config)})",
           f"  {world} ranks, {dist_backend} on {device_type}, launched by {options.launcher}; 1-D mesh tp={world}; "
           f"torch.compile backend {options.backend}; {options.steps} SGD steps, backward outside the compiled "
           f"region", ""]
    out += _traced_section(ranks, labels)
    out += _collectives_section(ranks, labels)
    values, status = _values_section(ranks, labels)
    out += values
    out += _step_time_section(options, ranks, labels)
    if options.contrasts:
        lines, failed = _contrasts_report(options, ranks, world)
        out += lines
        status = 1 if failed else status
    if "stock" in labels and "dynamo_dist" in labels:
        out += _summary(options, ranks, world)
    out.append("Result: " + ("OK: every compiled run matches eager on every rank" if status == 0
                             else "MISMATCH (exit status 1)"))
    return "\n".join(out), status


def _traced_section(ranks: list[RankSummary], labels: list[str]) -> list[str]:
    """Graph breaks, graphs compiled and recompiles of each compiled run
    (the values of every rank), and rank 0's break reasons."""
    width = max(len(label) for label in labels + ["eager"]) + 2
    out = [f"{'':24}" + "".join(f"{label:>{width + 6}}" for label in labels)]
    rows = [("graph breaks", "graph_breaks"), ("graphs compiled (step 1)", "compiles"),
            ("recompiles (steps 2+)", "recompiles")]
    for title, attr in rows:
        cells = []
        for label in labels:
            values = {getattr(r.runs[label], attr) for r in ranks}
            cells.append("/".join(str(v) for v in sorted(values)))
        out.append(f"{title:24}" + "".join(f"{c:>{width + 6}}" for c in cells))
    for label in labels:
        run = ranks[0].runs[label]
        if run.break_reasons:
            out.append(f"  {label} graph breaks: " + "; ".join(run.break_reasons))
    return out + [""]


def _collectives_section(ranks: list[RankSummary], labels: list[str]) -> list[str]:
    """The collectives of each captured graph of each compiled run (rank
    0's), and whether every rank captured the same."""
    first, out = ranks[0], []
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
    return out + [""]


def _values_section(ranks: list[RankSummary], labels: list[str]) -> tuple[list[str], int]:
    """Each compiled run's losses and gradients against eager's on every
    rank, and rank 0's error of a run that failed; the status so far (1
    where the plugin's run, or a compiled run that did not fail, differs)."""
    out = [f"Compiled vs eager, losses and gradients at every step (rtol {RTOL:g}, atol {ATOL:g}):"]
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
    first = ranks[0]
    if "eager (stock phase)" in first.matches:
        same = all(r.matches["eager (stock phase)"][0] for r in ranks)
        out.append(f"  (the two eager runs agree on every rank: {'yes' if same else 'NO'})")
        status = status if same else 1
    for label in labels:
        run = first.runs[label]
        if run.error is not None:
            out.append(f"\n{label} run failed on rank 0:\n{run.error}")
    return out + [""], status


def _step_time_section(options: DemoOptions, ranks: list[RankSummary], labels: list[str]) -> list[str]:
    """Each rank's median step time, eager beside each compiled run, and
    its first step (the compile)."""
    first = ranks[0]
    pairs = [(e, c) for e, c in (("eager", "dynamo_dist"), ("eager (stock phase)", "stock")) if c in labels]
    out = [f"Step time, ms: median of steps 2-{options.steps} (forward + backward + optimizer step); each "
           f"compiled run is stepped in turn with an eager one, speedup = eager / compiled. "
           f"{first.threads} thread(s) per rank, {first.cpus} CPUs on rank 0's machine: noisy when ranks "
           f"share a few cores."]
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
    return out + [""]


# ---------------------------------------------------------------------------
# The contrasts and the summary: stock beside dynamo_dist.

SIDES = ("stock", "dynamo_dist")


def _compiles_per_graph(ranks: list[RankSummary], job: str, side: str) -> float | None:
    """Graphs the job compiled (AOTAutograd misses and bypasses, summed over
    the ranks) per graph of the job (one rank's lookups)."""
    runs = [getattr(r, job).get(side) for r in ranks]
    if not runs or any(run is None or run.error for run in runs):
        return None
    graphs = sum(runs[0].lookups.values())
    return sum(run.lookups.get("miss", 0) + run.lookups.get("bypass", 0) for run in runs) / max(graphs, 1)


def _hits(ranks: list[RankSummary], job: str, side: str) -> tuple[int, int] | None:
    runs = [getattr(r, job).get(side) for r in ranks]
    if not runs or any(run is None or run.error for run in runs):
        return None
    return sum(run.lookups.get("hit", 0) for run in runs), sum(sum(run.lookups.values()) for run in runs)


def _slowest(ranks: list[RankSummary], job: str, side: str) -> float | None:
    runs = [getattr(r, job).get(side) for r in ranks]
    if not runs or any(run is None for run in runs):
        return None
    return max(run.seconds for run in runs)


def _cpu(ranks: list[RankSummary], job: str, side: str) -> float | None:
    runs = [getattr(r, job).get(side) for r in ranks]
    if not runs or any(run is None for run in runs):
        return None
    return sum(run.cpu_seconds for run in runs)


def _cpu_text(ranks: list[RankSummary], job: str, side: str) -> str:
    cpu = _cpu(ranks, job, side)
    return "" if cpu is None else f" (slowest rank), {cpu:.1f} s of CPU summed over the ranks"


def _job_cell(ranks: list[RankSummary], job: str, side: str) -> str:
    runs = [getattr(r, job).get(side) for r in ranks]
    if not runs or any(run is None for run in runs):
        return "not run"
    errors = [run.error for run in runs if run.error]
    if errors:
        return f"fails: {errors[0]}"
    if not all(run.match for run in runs):
        return "MISMATCH against eager"
    return f"{_slowest(ranks, job, side):.1f} s"


def _fault_cell(ranks: list[RankSummary], fault: str, side: str) -> str:
    outcomes = [o for r in ranks for o in r.faults.get(fault, []) if o.side == side]
    if not outcomes:
        return "not run"
    first = outcomes[0]
    statuses = {o.status for o in outcomes}
    text = first.status if len(statuses) == 1 else " / ".join(sorted(statuses))
    return f"{text} ({first.detail})" if first.detail and first.status != "matches eager" else text


def _short(cell: str) -> str:
    """``crash (ValueError: ...)`` as ``crash (ValueError)``."""
    head, _, detail = cell.partition(" (")
    if head == "crash" and ":" in detail:
        return f"crash ({detail.split(':')[0]})"
    return cell


def _contrasts_report(options: DemoOptions, ranks: list[RankSummary], world: int) -> tuple[list[str], bool]:
    """The contrasts' lines, and whether a dynamo_dist run among them failed
    (a wrong answer, a miss on restart, more than one compile per graph)."""
    error = next((r.contrasts_error for r in ranks if r.contrasts_error), None)
    if error:
        return [f"Compile once, the restart and stock's faults could not run here: {error}", ""], False
    once = {side: _compiles_per_graph(ranks, "once", side) for side in SIDES}
    out = [f"Compile once: a cold job of {world} ranks compiles the block's forward with inductor under "
           f"compile_on_one_rank, the ranks of the machine sharing inductor's cache dir (the kernels both sides use "
           f"built by an unmeasured warm-up: what one compile per job saves here is each rank's lowering; ranks on "
           f"separate hosts would each build the kernels too, as `python -m devtools bench --only compile_once` "
           f"measures):"]
    for side in SIDES:
        per = once[side]
        out.append(f"  {side:12} {'-' if per is None else f'{per:.1f}'} compiles per graph; first call "
                   f"{_job_cell(ranks, 'once', side)}{_cpu_text(ranks, 'once', side)}")
    restart = {side: _hits(ranks, "restart", side) for side in SIDES}
    if any(r.restart for r in ranks):
        out.append(f"Restart: a new job of {world} ranks (new processes) on the caches the cold job filled:")
        for side in SIDES:
            hits = restart[side]
            out.append(f"  {side:12} cache lookups hit: {'-' if hits is None else f'{hits[0]} of {hits[1]}'}; "
                       f"first call {_job_cell(ranks, 'restart', side)}{_cpu_text(ranks, 'restart', side)}")
    else:
        out.append("Restart: not run (a restart is a second job; under torchrun, run the demo again)")
    out.append("Stock's faults on the block's code, each compiled and called on every rank, against eager:")
    for fault in FAULTS:
        out.append(f"  {fault}: " + "; ".join(f"{side}: {_fault_cell(ranks, fault, side)}" for side in SIDES))
    out.append("")
    failed = any(_job_cell(ranks, job, "dynamo_dist").startswith(("fails", "MISMATCH"))
                 for job in ("once", "restart") if any(getattr(r, job) for r in ranks))
    failed = failed or (once["dynamo_dist"] is not None and once["dynamo_dist"] > 1.0)
    hits = restart["dynamo_dist"]
    failed = failed or (hits is not None and hits[0] < hits[1])
    failed = failed or any(_fault_cell(ranks, fault, "dynamo_dist") not in ("matches eager", "not run")
                           and not _fault_cell(ranks, fault, "dynamo_dist").startswith("eager raises")
                           for fault in FAULTS)
    return out, failed


def _ratio_verdict(stock: float | None, plugin: float | None, what: str = "") -> str:
    if stock is None or plugin is None or not stock > 0:
        return ""
    ratio = plugin / stock
    if 0.85 <= ratio <= 1.15:
        return f"about equal (x{ratio:.2f})"
    return f"dynamo_dist x{ratio:.2f} of stock{what}"


def _summary(options: DemoOptions, ranks: list[RankSummary], world: int) -> list[str]:
    """One row per thing measured, stock beside dynamo_dist, and a verdict
    that says where they are equal."""
    rows: list[tuple[str, str, str, str]] = []

    def same_everywhere(attr: str, label: str) -> str:
        return "/".join(str(v) for v in sorted({getattr(r.runs[label], attr) for r in ranks}))

    counts = {side: ", ".join(same_everywhere(a, side) for a in ("graph_breaks", "compiles", "recompiles"))
              for side in SIDES}
    rows.append(("training: graph breaks, graphs, recompiles", counts["stock"], counts["dynamo_dist"],
                 "equal" if counts["stock"] == counts["dynamo_dist"] else "differ"))
    match = {side: "match" if all(r.matches[side][0] for r in ranks) else "MISMATCH" for side in SIDES}
    rows.append(("training: losses and gradients vs eager", match["stock"], match["dynamo_dist"],
                 "equal" if match["stock"] == match["dynamo_dist"] else "differ"))
    same_graphs = all(r.runs["stock"].forward == r.runs["dynamo_dist"].forward
                      and r.runs["stock"].backward == r.runs["dynamo_dist"].backward for r in ranks)
    step = {side: statistics.median(_median_after_warmup(r.runs[side].step_ms) for r in ranks) for side in SIDES}
    eager = {side: statistics.median(_median_after_warmup(r.runs[e].step_ms) for r in ranks)
             for side, e in (("stock", "eager (stock phase)"), ("dynamo_dist", "eager"))}
    ratio = {side: step[side] / eager[side] if eager[side] > 0 else float("nan") for side in SIDES}
    rows.append(("training: step time over eager's, median", f"{ratio['stock']:.2f}", f"{ratio['dynamo_dist']:.2f}",
                 "equal: the same graphs and collectives (the difference is noise)" if same_graphs else
                 _ratio_verdict(ratio["stock"], ratio["dynamo_dist"])))
    first = {side: max(r.runs[side].step_ms[0] for r in ranks if r.runs[side].step_ms) / 1000 for side in SIDES}
    rows.append(("training: first step, incl. compile (slowest rank)", f"{first['stock']:.1f} s",
                 f"{first['dynamo_dist']:.1f} s", _ratio_verdict(first["stock"], first["dynamo_dist"])))
    if options.contrasts and not any(r.contrasts_error for r in ranks):
        once = {side: _compiles_per_graph(ranks, "once", side) for side in SIDES}
        cells = {side: "-" if once[side] is None else f"{once[side]:.1f}" for side in SIDES}
        rows.append((f"compile once: compiles per graph ({world} ranks)", cells["stock"], cells["dynamo_dist"],
                     "equal" if cells["stock"] == cells["dynamo_dist"] else
                     f"dynamo_dist: {cells['dynamo_dist']} (stock: every rank compiles)"))
        rows.append(("compile once: first call (slowest rank)", _job_cell(ranks, "once", "stock"),
                     _job_cell(ranks, "once", "dynamo_dist"),
                     _ratio_verdict(_slowest(ranks, "once", "stock"), _slowest(ranks, "once", "dynamo_dist"))))
        cpu = {side: _cpu(ranks, "once", side) for side in SIDES}
        rows.append(("compile once: CPU summed over the ranks", *(
            "-" if cpu[side] is None else f"{cpu[side]:.1f} s" for side in SIDES),
                     _ratio_verdict(cpu["stock"], cpu["dynamo_dist"])))
        if any(r.restart for r in ranks):
            hits = {side: _hits(ranks, "restart", side) for side in SIDES}
            cells = {side: "-" if hits[side] is None else f"{hits[side][0]} of {hits[side][1]}" for side in SIDES}
            rows.append(("restart: cache lookups that hit", cells["stock"], cells["dynamo_dist"],
                         "equal" if cells["stock"] == cells["dynamo_dist"] else "differ"))
            rows.append(("restart: first call (slowest rank)", _job_cell(ranks, "restart", "stock"),
                         _job_cell(ranks, "restart", "dynamo_dist"),
                         _ratio_verdict(_slowest(ranks, "restart", "stock"),
                                        _slowest(ranks, "restart", "dynamo_dist"))))
        for fault in FAULTS:
            cells = {side: _fault_cell(ranks, fault, side) for side in SIDES}
            rows.append((fault, _short(cells["stock"]), _short(cells["dynamo_dist"]),
                         "equal" if cells["stock"] == cells["dynamo_dist"] else "differ"))
    width = max(len(r[0]) for r in rows) + 2
    cw = max(12, *(len(r[1]) for r in rows), *(len(r[2]) for r in rows)) + 2
    out = ["Summary: stock torch beside dynamo_dist, measured above in this run",
           f"  {'':{width}}{'stock':<{cw}}{'dynamo_dist':<{cw}}verdict"]
    out += [f"  {name:{width}}{s:<{cw}}{p:<{cw}}{v}" for name, s, p, v in rows]
    out.append("")
    return out


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
                          stock=not args.no_stock, launcher="torchrun" if torchrun else "local spawn",
                          quick=args.quick)
    start = time.perf_counter()
    backend = "nccl" if use_cuda else "gloo"
    if torchrun:
        ranks = _join_torchrun_world(options)
        rank = int(os.environ["RANK"])
    else:
        import shutil
        import tempfile

        from dynamo_dist.worlds import run_in_world

        rank = 0
        print(f"[demo] starting {world} {backend} ranks on {'GPU' if use_cuda else 'CPU'} ...", flush=True)
        root = tempfile.mkdtemp(prefix="dynamo_dist_demo_") if options.contrasts else None
        options.cache_root = root
        try:
            ranks = run_in_world(run_rank, world, options, backend=backend, timeout=1800)[0]
            if options.contrasts and not any(r.contrasts_error for r in ranks):
                print(f"[demo] restart: starting a new job of {world} ranks on the first job's caches ...",
                      flush=True)
                for summary, sides in zip(ranks, run_in_world(restart_rank, world, options, backend=backend,
                                                               timeout=1800)):
                    summary.restart = sides
        finally:
            if root is not None:
                shutil.rmtree(root, ignore_errors=True)
    report, status = render_report(options, ranks, world, backend, "cuda" if use_cuda else "cpu")
    if rank == 0:
        print()
        print(report)
        print(f"(demo wall time {time.perf_counter() - start:.0f} s)")
    return status


def _join_torchrun_world(options: DemoOptions) -> list[RankSummary]:
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
