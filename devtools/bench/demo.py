"""The demo, timed: ``python -m dynamo_dist demo`` as a user runs it (a new
process from the command line, 4 gloo ranks on CPU, its default options),
several times; per run its wall time from the command to its exit, its exit
status and its summary table (stock beside dynamo_dist: the training
comparison, compile once, the restart, stock's faults), parsed from what it
prints. The README's and the benchmark page's figures of the demo come from
here."""

from __future__ import annotations

import re
import subprocess
import sys
import time
from typing import Any, Callable

from . import _timing as T
from ._timing import Task

QUICK_ARGS = ("--quick", "--ranks", "2", "--size", "tiny", "--steps", "3")
SUMMARY = "Summary: stock torch beside dynamo_dist"


def summary_rows(out: str) -> dict[str, list[str]]:
    """The demo's summary table: row -> [stock, dynamo_dist, verdict]
    (its columns are two or more spaces apart)."""
    if SUMMARY not in out:
        return {}
    lines = out.split(SUMMARY)[1].split("Result:")[0].splitlines()[2:]
    return {cells[0]: cells[1:] for cells in (re.split(r"\s{2,}", line.strip()) for line in lines if line.strip())}


def run_once(args: tuple[str, ...], timeout: float) -> dict[str, Any]:
    start = time.perf_counter()
    proc = subprocess.run([sys.executable, "-m", "dynamo_dist", "demo", *args], capture_output=True, text=True,
                          timeout=timeout)
    seconds = time.perf_counter() - start
    return {"seconds": round(seconds, 1), "status": proc.returncode, "summary": summary_rows(proc.stdout),
            "tail": proc.stdout[-400:] if proc.returncode else ""}


def measure(args: tuple[str, ...], runs: int, timeout: float,
            progress: Callable[[str], None] = lambda _: None) -> dict[str, Any]:
    samples = []
    for i in range(runs):
        progress(f"run {i + 1}/{runs}")
        samples.append(run_once(args, timeout))
    return {"task": "demo", "args": list(args), "runs": samples,
            "seconds": T.median([s["seconds"] for s in samples])}


def tasks(cfg: Any) -> list[Task]:
    args = QUICK_ARGS if cfg.quick else ()
    return [Task("demo", lambda progress: measure(args, cfg.demo_runs, cfg.demo_timeout, progress))]
