"""The one writer of the saved results (``benchmarks/results/*.json``).

Every tool that saves a result (``python -m dynamo_dist fuzz --json``, and
the checkout's ``python -m devtools bench``, ``python -m
devtools.bench.guard_cost_loaded``, ``python -m devtools.bench.precompile``,
``python -m devtools.clients.restart``) stamps it here and writes it here,
whole, in one format::

    {"meta": {"date", "command", "dynamo_dist", "machine": {...}, "config", "seconds"}, ...the tool's fields}

- ``command``: the canonical command line that produced the file (run from
  the repository root), which names the file as its ``--json`` output;
- ``machine``: the CPU, cores, platform, Python, torch, GPUs and the load
  average when the run started and when it ended (the machines are shared:
  a figure is read with its load);
- ``config``: every setting the run used (the suite's ``Config``, or a
  standalone tool's options);
- ``seconds``: how long the run took.

The figures themselves are the tool's: every sample is saved beside the
medians and ratios made of them. ``tests/tools/test_results.py`` checks that
every file under ``benchmarks/results/`` is in this format, that its command
parses with the tool's current options and names that file.
"""

from __future__ import annotations

import datetime
import json
import os
import platform
import shlex
import time
from typing import Any, Sequence

META_FIELDS = ("date", "command", "dynamo_dist", "machine", "config", "seconds")
MACHINE_FIELDS = ("cpu", "cores", "platform", "python", "torch", "gpus", "load_average_start",
                  "load_average_end")


def load_average() -> list[float] | None:
    return [round(v, 2) for v in os.getloadavg()] if hasattr(os, "getloadavg") else None


def machine() -> dict[str, Any]:
    """What the figures are taken on (the load average as the run starts)."""
    import torch

    cpu = platform.processor() or platform.machine()
    try:
        with open("/proc/cpuinfo") as f:
            cpu = next(line.split(":", 1)[1].strip() for line in f if line.startswith("model name"))
    except (OSError, StopIteration):
        pass
    return {
        "cpu": cpu,
        "cores": os.cpu_count(),
        "platform": platform.platform(),
        "python": platform.python_version(),
        "torch": torch.__version__,
        "gpus": [torch.cuda.get_device_name(i) for i in range(torch.cuda.device_count())]
        if torch.cuda.is_available() else [],
        "load_average_start": load_average(),
    }


def command_line(module: str, argv: Sequence[str]) -> str:
    """``python -m MODULE ARGS...`` as a shell line."""
    return shlex.join(["python", "-m", module, *argv])


class Run:
    """One run of a tool: stamped when made, finished when written."""

    def __init__(self, command: str, config: dict[str, Any]) -> None:
        import dynamo_dist

        self._start = time.perf_counter()
        self.meta: dict[str, Any] = {
            "date": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
            "command": command,
            "dynamo_dist": dynamo_dist.__version__,
            "machine": machine(),
            "config": dict(config),
        }

    def finish(self) -> dict[str, Any]:
        """The meta, with the load average and the seconds so far (a run
        written after each of its parts is finished again each time)."""
        self.meta["machine"]["load_average_end"] = load_average()
        self.meta["seconds"] = round(time.perf_counter() - self._start, 1)
        return self.meta

    def result(self, fields: dict[str, Any]) -> dict[str, Any]:
        """The whole result: the finished meta, then the tool's fields."""
        if "meta" in fields:
            raise ValueError("a tool's fields cannot be called 'meta'")
        return {"meta": self.finish(), **fields}


def write(path: str, result: dict[str, Any]) -> None:
    """Write ``result`` (made by ``Run.result``) to ``path``, whole."""
    missing = [k for k in META_FIELDS if k not in result.get("meta", {})]
    if missing:
        raise ValueError(f"{path}: a result's meta lacks {missing}")
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    tmp = f"{path}.partial"
    with open(tmp, "w") as f:
        json.dump(result, f, indent=1)
        f.write("\n")
    os.replace(tmp, path)
