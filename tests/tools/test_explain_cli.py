"""``python -m dynamo_dist explain SCRIPT``: single process (with
TORCH_LOGS switching on the plugin's logger), under torchrun, and the
script's own exit status."""

import json
import os
import pathlib
import socket
import subprocess
import sys
import textwrap

import torch

import dynamo_dist
from dynamo_dist.cli import main
import pytest

pytestmark = pytest.mark.slow

ROOT = pathlib.Path(__file__).resolve().parents[2]
DEMO = ROOT / "examples" / "explain_demo.py"


def demo_line(text: str) -> int:
    return next(i for i, line in enumerate(DEMO.read_text().splitlines(), 1) if text in line)


def test_demo_script_report_and_torch_logs(tmp_path):
    out = tmp_path / "report.json"
    env = dict(os.environ, TORCH_LOGS="+dynamo_dist")
    proc = subprocess.run([sys.executable, "-m", "dynamo_dist", "explain", "--json", str(out), str(DEMO)],
                          capture_output=True, text=True, env=env, cwd=ROOT, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    report = json.loads(out.read_text())
    assert report["counts"] == {"graphs": 5, "graph breaks": 2, "recompiles": 4, "compile failures": 0,
                                "collectives": 4}
    assert [(b["line"], b["origin"], b["gb_type"]) for b in report["breaks"]] == [
        (demo_line('print("step done")'), "stock Dynamo", "Failed to trace builtin operator"),
        (demo_line("tp.barrier()"), "dynamo_dist", "dynamo_dist: torch.distributed barrier"),
    ]
    reasons = [r["reason"] for r in report["recompiles"]]
    assert reasons[0] == "`placements[0]` changed from Shard(dim=0) to Replicate()"
    assert reasons[1].startswith("`mesh` has different process groups on dims 'dp', 'tp'")
    assert reasons[2].startswith("`tp` is a different process group")
    assert reasons[3] == "placements of `t` changed from (Shard(dim=0),) to (Replicate(),)"
    ops = [(c["op"], c["shape"], c["ranks"]) for g in report["graphs"] for c in g["collectives"]]
    assert ops[0] == ("all_reduce", [4, 8], [0, 1, 2, 3]) and ops[-1] == ("all_gather_into_tensor", [2, 8],
                                                                           [0, 1, 2, 3])
    assert "Graph breaks (2)" in proc.stdout and "Recompiles (4)" in proc.stdout
    # TORCH_LOGS="+dynamo_dist" shows the plugin's decisions, through torch's log formatting
    assert "folded ProcessGroup.size() -> 4" in proc.stderr
    assert "guard dynamo_dist: `L['mesh']`" in proc.stderr
    assert "graph break dynamo_dist: torch.distributed barrier" in proc.stderr


def test_under_torchrun_rank0_prints_and_compares(tmp_path):
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    out = tmp_path / "r.json"
    proc = subprocess.run(
        [sys.executable, "-m", "torch.distributed.run", "--nproc-per-node", "2", "--master-port", str(port),
         "-m", "dynamo_dist", "explain", "--compare-stock", "--json", str(out),
         str(ROOT / "examples" / "explain_ranks.py")],
        capture_output=True, text=True, cwd=ROOT, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert proc.stdout.count("dynamo_dist explain (rank 0 of 2") == 1  # only rank 0 prints
    assert "rank 1 of 2" not in proc.stdout
    assert "Differences between ranks (1)" in proc.stdout and "Side by side with stock torch" in proc.stdout
    r0, r1 = (json.loads((tmp_path / f"r.rank{r}.json").read_text()) for r in (0, 1))
    assert (r0["rank"], r1["rank"]) == (0, 1)
    [difference] = r0["rank_differences"]
    assert "`mul = total * 1` vs `mul = total * 2`" in difference and r1["rank_differences"] == []
    assert r0["stock"]["counts"]["graphs"] == 1


SCRIPT = """
import sys, torch

def f(x):
    x = x + 1
    print("inside")
    return x * 2

torch.compile(f)(torch.ones(2))
{ending}
"""


def test_script_status_and_report_survive_its_failure(tmp_path, capsys):
    was = dynamo_dist.is_installed()
    for ending, status in [("sys.exit(3)", 3), ("raise ValueError('boom')", 1), ("", 0)]:
        script = tmp_path / "prog.py"
        script.write_text(textwrap.dedent(SCRIPT.format(ending=ending)))
        assert main(["explain", "--backend", "eager", str(script)]) == status
        out = capsys.readouterr().out
        assert out.startswith("inside\n") and "Graph breaks (1)" in out and "prog.py:6" in out
        assert ("the compiled program raised ValueError: boom" in out) == (status == 1)
    assert dynamo_dist.is_installed() == was and torch.compile.__module__ == "torch"
