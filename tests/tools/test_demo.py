"""``python -m dynamo_dist demo``: a small configuration end to end (local
spawn and torchrun), the report's verdict logic, and bad options."""

from __future__ import annotations

import os
import subprocess
import sys

from dynamo_dist.cli import main
from dynamo_dist.cli.demo import DemoOptions, RankSummary, render_report
from dynamo_dist.demo.models import SIZES
from dynamo_dist.demo.training import TrainRun
import pytest

pytestmark = pytest.mark.slow

SMALL = ["--size", "tiny", "--steps", "3"]


def _demo(*args: str, launcher: list[str] | None = None) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if k not in ("RANK", "WORLD_SIZE", "LOCAL_RANK", "MASTER_ADDR")}
    command = (launcher or [sys.executable, "-m"]) + ["dynamo_dist", "demo", *args]
    return subprocess.run(command, capture_output=True, text=True, timeout=300, env=env)


def test_local_world_trains_and_matches_eager():
    """The whole demo on 2 ranks: the training comparison, then compile once,
    the restart (a second job) and stock's faults, each stock beside
    dynamo_dist in the summary."""
    proc = _demo("--ranks", "2", *SMALL)
    out = proc.stdout
    assert proc.returncode == 0, out + proc.stderr
    assert "[demo] starting 2 gloo ranks on CPU" in out
    assert "[demo] dynamo_dist: compiling (first step)" in out and "[demo] stock: step 3/3" in out
    assert "launched by local spawn" in out
    table = {line.split("  ")[0]: line.split()[-2:] for line in out.splitlines()
             if line.startswith(("graph breaks", "recompiles"))}
    assert table == {"graph breaks": ["0", "0"], "recompiles (steps 2+)": ["0", "0"]}
    # The transformer's Rowwise outputs (forward) and Colwise input grads (backward) on the tp group.
    assert "forward  graph 0: all_reduce[tp group '0'] x2; 2 wait_tensor" in out
    assert "backward graph 0: all_reduce[tp group '0'] x4; 4 wait_tensor" in out
    assert "(the two eager runs agree on every rank: yes)" in out
    for rank in (0, 1):
        assert f"rank {rank}: dynamo_dist: match" in out
    assert "Result: OK" in out
    summary = _summary_rows(out)
    assert summary["training: graph breaks, graphs, recompiles"] == ["0, 1, 0", "0, 1, 0", "equal"]
    assert summary["training: losses and gradients vs eager"] == ["match", "match", "equal"]
    assert summary["training: step time over eager's, median"][2].startswith("equal: the same graphs")
    # Every rank compiles stock's graph; with dynamo_dist one rank does, the other loads it.
    assert summary["compile once: compiles per graph (2 ranks)"][:2] == ["2.0", "1.0"]
    assert summary["restart: cache lookups that hit"] == ["0 of 2", "2 of 2", "differ"]
    assert summary["a batch split over another group"] == ["stale (2 rows, eager 4)", "matches eager", "differ"]
    assert summary["a sequence-sharded activation returned as tokens"] == ["crash (ValueError)", "matches eager",
                                                                            "differ"]
    assert "[demo] restart: starting a new job of 2 ranks" in out


def _summary_rows(out: str) -> dict[str, list[str]]:
    """The summary table: row name -> [stock, dynamo_dist, verdict] (columns
    are two or more spaces apart)."""
    import re

    lines = out.split("Summary: stock torch beside dynamo_dist")[1].split("Result:")[0].splitlines()[2:]
    return {cells[0]: cells[1:] for cells in (re.split(r"\s{2,}", line.strip()) for line in lines if line.strip())}


def test_joins_a_torchrun_world():
    proc = _demo("--no-stock", "--quick", *SMALL, launcher=[sys.executable, "-m", "torch.distributed.run",
                                                            "--nproc-per-node", "2", "-m"])
    out = proc.stdout
    assert proc.returncode == 0, out + proc.stderr
    assert "launched by torchrun" in out and "[demo] starting" not in out
    assert out.count("dynamo_dist demo: tensor-parallel transformer") == 1  # rank 0 reports
    assert "rank 1: dynamo_dist: match" in out and "stock" not in out.split("dynamo_dist demo:")[1]
    assert "Compile once" not in out and "Summary" not in out  # --quick, and nothing to put beside


def _summary(rank: int, compiled_loss: float) -> RankSummary:
    import torch

    eager = TrainRun("eager", losses=[1.0, 0.5], step_ms=[10, 1])
    run = TrainRun("dynamo_dist", losses=[1.0, compiled_loss], step_ms=[900, 1], compiles=1,
                   forward=[["all_reduce[0]", "wait_tensor"]], backward=[[]])
    from dynamo_dist.demo.training import compare

    eager.grads = run.grads = [[torch.ones(2)], [torch.ones(2)]]
    return RankSummary(rank, runs={"eager": eager, "dynamo_dist": run},
                       matches={"dynamo_dist": compare(run, eager)}, groups={"0": "tp"})


def test_report_exit_status_on_mismatch():
    options = DemoOptions("transformer", SIZES["tiny"], 2, "aot_eager", "cpu", stock=False)
    ok_text, ok = render_report(options, [_summary(0, 0.5), _summary(1, 0.5)], 2, "gloo", "cpu")
    assert ok == 0 and "Result: OK" in ok_text
    text, status = render_report(options, [_summary(0, 0.5), _summary(1, 0.6)], 2, "gloo", "cpu")
    assert status == 1
    assert "rank 1: dynamo_dist: MISMATCH (max |loss diff| 0.1" in text and "rank 0: dynamo_dist: match" in text


def _full(rank: int, plugin_hits: int) -> RankSummary:
    """A rank's summary of a whole run: stock beside dynamo_dist, the cold
    job, the restart (dynamo_dist hitting ``plugin_hits`` of 1 lookup) and
    the faults."""
    from dynamo_dist.demo.contrasts import FaultOutcome, ForwardCompile
    from dynamo_dist.demo.training import compare

    summary = _summary(rank, 0.5)
    stock = TrainRun("stock", losses=[1.0, 0.5], step_ms=[800, 1], compiles=1, grads=summary.runs["eager"].grads,
                     forward=summary.runs["dynamo_dist"].forward, backward=[[]])
    summary.runs["stock"] = stock
    summary.runs["eager (stock phase)"] = summary.runs["eager"]
    summary.matches["stock"] = compare(stock, summary.runs["eager"])
    summary.matches["eager (stock phase)"] = compare(summary.runs["eager"], summary.runs["eager"])
    summary.once = {"stock": ForwardCompile("stock", 4.0, 4.0, {"hit": 0, "miss": 1, "bypass": 0}, match=True),
                    "dynamo_dist": ForwardCompile("dynamo_dist", 2.0, 2.0 if rank == 0 else 0.5,
                                                  {"hit": rank > 0, "miss": rank == 0, "bypass": 0}, match=True)}
    summary.restart = {"stock": ForwardCompile("stock", 3.0, 3.0, {"hit": 0, "miss": 1, "bypass": 0}, match=True),
                       "dynamo_dist": ForwardCompile("dynamo_dist", 1.0, 1.0,
                                                     {"hit": plugin_hits, "miss": 1 - plugin_hits, "bypass": 0},
                                                     match=True)}
    summary.faults = {
        "a batch split over another group": [FaultOutcome("stock", "stale", "2 rows, eager 4"),
                                             FaultOutcome("dynamo_dist", "matches eager")],
        "a sequence-sharded activation returned as tokens": [
            FaultOutcome("stock", "crash", "ValueError: DTensorSpec doesn't allow"),
            FaultOutcome("dynamo_dist", "matches eager")]}
    return summary


def test_report_summary_puts_stock_beside_the_plugin_and_says_where_they_are_equal():
    options = DemoOptions("transformer", SIZES["tiny"], 2, "aot_eager", "cpu")
    text, status = render_report(options, [_full(0, 1), _full(1, 1)], 2, "gloo", "cpu")
    assert status == 0, text
    rows = _summary_rows(text)
    assert rows["training: graph breaks, graphs, recompiles"] == ["0, 1, 0", "0, 1, 0", "equal"]
    assert rows["compile once: compiles per graph (2 ranks)"][:2] == ["2.0", "1.0"]
    assert rows["compile once: CPU summed over the ranks"] == ["8.0 s", "2.5 s", "dynamo_dist x0.31 of stock"]
    assert rows["restart: cache lookups that hit"] == ["0 of 2", "2 of 2", "differ"]
    assert rows["a sequence-sharded activation returned as tokens"] == ["crash (ValueError)", "matches eager",
                                                                        "differ"]
    # A restart whose lookups do not all hit with dynamo_dist fails the run.
    text, status = render_report(options, [_full(0, 1), _full(1, 0)], 2, "gloo", "cpu")
    assert status == 1 and rows != _summary_rows(text)
    # --quick: the training rows only.
    quick = DemoOptions("transformer", SIZES["tiny"], 2, "aot_eager", "cpu", quick=True)
    text, status = render_report(quick, [_full(0, 1), _full(1, 1)], 2, "gloo", "cpu")
    assert status == 0 and "Compile once" not in text
    assert list(_summary_rows(text)) == ["training: graph breaks, graphs, recompiles",
                                         "training: losses and gradients vs eager",
                                         "training: step time over eager's, median",
                                         "training: first step, incl. compile (slowest rank)"]


def test_bad_options_exit_2(capsys):
    assert main(["demo", "--ranks", "3", "--size", "tiny"]) == 2  # 4 heads do not split 3 ways
    assert "cannot be split over 3" in capsys.readouterr().err
    assert main(["demo", "--steps", "1"]) == 2


def test_progress_ticks_while_compiling():
    import time

    from dynamo_dist.demo.training import ticking

    lines: list[str] = []
    with ticking(lines.append, "x: still compiling", every=0.05):
        time.sleep(0.3)
    count = len(lines)
    time.sleep(0.15)
    assert count >= 2 and len(lines) == count  # ticks during the block, none after
    assert lines[0].startswith("x: still compiling ... ") and lines[0].endswith(" s")
