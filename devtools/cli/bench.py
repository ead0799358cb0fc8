"""Benchmark dynamo_dist against stock torch: trace + compile time, guard cost
per call, recompiles on a varying workload, step time on real gloo worlds
against a hand-written local-tensor version, and the first step of a new
process with a cold and a warm inductor cache (``--quick``: a smoke test);
``--only scale``: the same costs on fake worlds of 8 to 65,536 ranks and
models of 1 to 32 compiled blocks; ``--only warm_start_clients``: the warm
start of torchtitan and HF transformers training steps on gloo ranks;
``--only compile_once``: what a cold job of 2 and 4 ranks pays to compile
under compile_on_one_rank (stock, the plugin, the plugin compiling once per
job), a new host with the fleet cache, and the coordination among 16 to 64
processes; ``--only compile_once_scale``: the job's store while 16 to 16,384
simulated ranks wait for one graph (a real TCPStore; the protocol against the
one it replaced; faults); ``--only planner``: the CPU time DTensor's redistribute planner
spends while a redistribution across every dim of a 2-D to 4-D mesh is
traced, greedy against min-cost; ``--only demo``: ``python -m dynamo_dist
demo`` as a user runs it, its wall time and its summary table.

Prints the tables; progress goes to stderr. Every figure is a median of
several runs and every comparison a ratio taken in the same run, alternating
the sides. Regenerate the published figures with:

    python -m devtools bench --json benchmarks/results/latest.json \\
        --write-doc docs/benchmarks.md --update-readme README.md
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import shlex
import sys
from typing import Any

from dynamo_dist.cli.arguments import existing_file, file_with_markers

# The sections --help offers, written out so that help needs no torch;
# tests/tools/test_cli_help.py keeps them equal to devtools.bench.suite.SECTIONS.
SECTIONS = ("compile_time", "guard_cost", "recompiles", "step_time", "warm_start", "warm_start_clients", "scale",
            "compile_once", "compile_once_scale", "planner", "demo")
# What runs without --only (the clients' warm start, the scale sweep, compile once, compile once at scale, the
# planner and the demo run only when named).
ONLY_WHEN_NAMED = ("warm_start_clients", "scale", "compile_once", "compile_once_scale", "planner", "demo")
DEFAULT_SECTIONS = tuple(s for s in SECTIONS if s not in ONLY_WHEN_NAMED)
# The summary blocks --update-readme rewrites (devtools.bench.report):
# a section's own block, else the main one.
SUMMARY_MARKERS = {"warm_start": "bench-warm-summary", "warm_start_clients": "bench-warm-clients-summary",
                   "scale": "bench-scale-summary", "compile_once": "bench-compile-once-summary",
                   "compile_once_scale": "bench-compile-once-scale-summary", "planner": "bench-planner-summary",
                   "demo": "bench-demo-summary"}
MAIN_SUMMARY_MARKER = "bench-summary"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--quick", action="store_true", help="tiny sizes, few repetitions, no inductor, 2 ranks")
    parser.add_argument("--json", metavar="FILE", help="write the full result (every sample) as JSON")
    parser.add_argument("--write-doc", metavar="PATH",
                        help="rewrite the generated part of this markdown file (docs/benchmarks.md)")
    parser.add_argument("--update-readme", metavar="PATH", type=existing_file,
                        help="rewrite the benchmark summary blocks in this file (README.md)")
    parser.add_argument("--only", nargs="+", choices=SECTIONS, metavar="SECTION",
                        help=f"run only these sections ({', '.join(SECTIONS)}; "
                             f"{' and '.join(ONLY_WHEN_NAMED)} run only when named)")
    parser.add_argument("--warm-gloo", action="store_true",
                        help="warm_start: also the real 2-rank gloo world (each rank compiles; slow)")
    parser.add_argument("--from-json", metavar="FILE", type=existing_file,
                        help="do not run: report a result saved with --json")
    parser.add_argument("--note", default="", help="a line added under the stamp in the doc (e.g. the machine load)")
    parser.add_argument("--quiet", action="store_true", help="no progress lines")
    parser.add_argument("--client-rows", nargs="+", metavar="ROW",
                        help="warm_start_clients and compile_once: only these client rows (their names as the "
                             "table prints them; compile_once then runs no other row)")
    parser.add_argument("--client-warm-runs", type=int, metavar="N",
                        help="warm_start_clients: warm runs per side and row (default 3)")


def command_line(args: argparse.Namespace) -> str:
    """The canonical command that reproduces this run."""
    words = ["python", "-m", "devtools", "bench"]
    if args.quick:
        words.append("--quick")
    if args.only:
        words += ["--only", *args.only]
    if args.warm_gloo:
        words.append("--warm-gloo")
    if args.client_rows:
        words += ["--client-rows", *args.client_rows]
    if args.client_warm_runs:
        words += ["--client-warm-runs", str(args.client_warm_runs)]
    for flag, value in (("--json", args.json), ("--write-doc", args.write_doc),
                        ("--update-readme", args.update_readme)):
        if value:
            words += [flag, value]
    return shlex.join(words)


def _summary_blocks_missing(args: argparse.Namespace) -> str | None:
    """Checked before a run of many minutes: --update-readme's file must
    hold the block of every section family the run will report."""
    if not args.update_readme or args.from_json:
        return None
    sections = args.only or DEFAULT_SECTIONS
    markers = {SUMMARY_MARKERS.get(s, MAIN_SUMMARY_MARKER) for s in sections}
    try:
        file_with_markers(*sorted(markers), home="README.md")(args.update_readme)
    except argparse.ArgumentTypeError as e:
        return str(e)
    return None


def config(args: argparse.Namespace) -> Any:
    """The suite's ``Config`` these options run (``devtools.bench.suite``),
    or what is wrong with them."""
    from devtools.bench import suite

    cfg = suite.QUICK if args.quick else suite.FULL
    if args.warm_gloo:
        cfg = dataclasses.replace(cfg, warm_worlds=(*cfg.warm_worlds, "gloo"))
    if args.client_rows:
        unknown = [r for r in args.client_rows if r not in suite.warm_clients.ROWS]
        if unknown:
            return f"--client-rows: no row {unknown[0]!r}; the rows: " + "; ".join(suite.warm_clients.ROWS)
        cfg = dataclasses.replace(cfg, warm_clients=tuple(args.client_rows), once_clients=tuple(args.client_rows),
                                  once_worlds=(), once_sim_processes=())
    if args.client_warm_runs is not None:
        if args.client_warm_runs < 1:
            return "--client-warm-runs: give 1 or more"
        cfg = dataclasses.replace(cfg, warm_clients_repeats=args.client_warm_runs)
    return cfg


def run(args: argparse.Namespace) -> int:
    missing = _summary_blocks_missing(args)
    if missing:
        print(f"python -m devtools bench: --update-readme: {missing}", file=sys.stderr)
        return 2
    from devtools.bench import report, suite

    if args.from_json:
        with open(args.from_json) as f:
            result = json.load(f)
    else:
        cfg = config(args)
        if isinstance(cfg, str):
            print(f"python -m devtools bench: {cfg}", file=sys.stderr)
            return 2
        result = suite.run(cfg, tuple(args.only or suite.DEFAULT_SECTIONS), command=command_line(args),
                           quiet=args.quiet)
    print(report.text(result))
    if args.json and not args.from_json:
        from dynamo_dist.cli import results

        results.write(args.json, result)
    if args.write_doc:
        report.write_doc(args.write_doc, result, args.note)
    if args.update_readme:
        report.update_readme(args.update_readme, result, doc=args.write_doc or report.DOC_PATH)
    failed = suite.errors(result)
    for line in failed:
        print(f"FAILED {line.splitlines()[0]}", file=sys.stderr)
    return 1 if failed else 0
