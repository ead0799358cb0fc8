"""Run a Python script unchanged with dynamo_dist installed and explanation
recording on, then print its graph breaks, recompiles and collectives.

Every torch.compile in the script is covered: it gets a recording backend
that lowers graphs like aot_eager (so the collectives DTensor inserts are
visible; --backend inductor compiles with inductor and also reports each
graph's FX graph and AOTAutograd cache outcome), in place of the script's own
backend. Under torchrun each rank
records its own report; rank 0 prints it with the differences between the
ranks' graphs. Exit status: the script's, or 1 if it raised.

examples:
  python -m dynamo_dist explain train.py --steps 2
  python -m dynamo_dist explain --json report.json --compare-stock train.py
  torchrun --nproc-per-node 2 -m dynamo_dist explain --json report.json train.py
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import runpy
import sys
import traceback
from typing import Any, Iterator

from dynamo_dist.cli.arguments import existing_file, positive_float


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--json", metavar="FILE",
                        help="also write the report as JSON (under torchrun: FILE with .rankN per rank)")
    parser.add_argument("--compare-stock", action="store_true",
                        help="run the script a second time with stock torch and show both side by side")
    parser.add_argument("--backend", choices=("aot_eager", "eager", "inductor"), default="aot_eager",
                        help="how recorded graphs run (eager: faster, no post-AOTAutograd collectives; "
                             "inductor: also each graph's compile-cache hit/miss/bypass)")
    parser.add_argument("--rank-timeout", type=positive_float, default=300.0, metavar="S",
                        help="how long rank 0 waits for the other ranks' reports (default 300)")
    parser.add_argument("script", type=existing_file, help="the Python script to run")
    parser.add_argument("script_args", nargs=argparse.REMAINDER, help="its arguments")


def run(args: argparse.Namespace) -> int:
    from dynamo_dist.diagnostics.ranks import compare_ranks, gather, launcher_world

    status, report = _run_script(args.script, args.script_args, plugin=True, backend=args.backend)
    rank, world = launcher_world()
    if args.compare_stock:
        with _separate_rendezvous("dynamo_dist_explain_stock/"):
            _, report.stock = _run_script(args.script, args.script_args, plugin=False, backend=args.backend)
    if report.rank is None and world > 1:
        report.rank, report.world_size = rank, world
    reports = gather(report.to_dict(), args.rank_timeout)
    if reports is not None:
        report.rank_differences = compare_ranks(reports)
    if args.json:
        path = _rank_path(args.json, rank) if world > 1 else args.json
        with open(path, "w") as f:
            json.dump(report.to_dict(), f, indent=1)
    if rank == 0:
        if reports is None and world > 1:
            report.rank_differences = [f"not compared: no torchrun store to collect the {world} ranks' reports "
                                       "(each rank's --json file has its own)"]
        print(report, flush=True)
    return status


@contextlib.contextmanager
def _separate_rendezvous(prefix: str) -> Iterator[None]:
    """Run the script's second pass in its own namespace of the launcher's
    store: the first pass left its process group's keys (peer addresses)
    there, and a second init_process_group under the same names would read
    them and connect to closed sockets."""
    from dynamo_dist import _hooks

    patches = _hooks.rendezvous_patches(prefix)
    try:
        yield
    finally:
        patches.restore()


def _rank_path(path: str, rank: int) -> str:
    stem, ext = os.path.splitext(path)
    return f"{stem}.rank{rank}{ext}"


def _run_script(script: str, script_args: list[str], *, plugin: bool, backend: str) -> tuple[int, Any]:
    """Run ``script`` as ``__main__`` inside an explaining() block; the
    script's own failure is printed and reflected in the status, and never
    stops the report."""
    import torch.distributed as dist

    from dynamo_dist.diagnostics.explain import explaining

    saved_argv, saved_path = sys.argv[:], sys.path[:]
    sys.argv = [script, *script_args]
    sys.path.insert(0, os.path.dirname(os.path.abspath(script)))
    was_initialized = dist.is_available() and dist.is_initialized()
    status, error = 0, None
    try:
        with explaining(plugin=plugin, backend=backend) as session:
            try:
                runpy.run_path(script, run_name="__main__")
            except SystemExit as e:
                status = e.code if isinstance(e.code, int) else (0 if e.code is None else 1)
            except Exception as e:
                traceback.print_exc()
                status, error = 1, e
    finally:
        sys.argv, sys.path[:] = saved_argv, saved_path
        if not was_initialized and dist.is_available() and dist.is_initialized():
            dist.destroy_process_group()  # the script left its world up: a second run must init again
    if error is not None:
        from dynamo_dist.diagnostics.explain import first_line

        session.report.error = f"{type(error).__name__}: {first_line(error)}"
    return status, session.report
