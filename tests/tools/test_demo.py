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


def test_joins_a_torchrun_world():
    proc = _demo("--no-stock", *SMALL, launcher=[sys.executable, "-m", "torch.distributed.run",
                                                 "--nproc-per-node", "2", "-m"])
    out = proc.stdout
    assert proc.returncode == 0, out + proc.stderr
    assert "launched by torchrun" in out and "[demo] starting" not in out
    assert out.count("dynamo_dist demo: tensor-parallel transformer") == 1  # rank 0 reports
    assert "rank 1: dynamo_dist: match" in out and "stock" not in out.split("dynamo_dist demo:")[1]


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
