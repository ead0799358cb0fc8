"""Benchmark dynamo_dist against stock torch: trace + compile time, guard cost
per call, recompiles on a varying workload, step time on real gloo worlds
against a hand-written local-tensor version, and the first step of a new
process with a cold and a warm inductor cache (``--quick``: a smoke test);
``--only scale``: the same costs on fake worlds of 8 to 65,536 ranks and
models of 1 to 32 compiled blocks.

Prints the tables; progress goes to stderr. Every figure is a median of
several runs and every comparison a ratio taken in the same run, alternating
the sides. Regenerate the published figures with:

    python -m dynamo_dist bench --json benchmarks/results/latest.json \\
        --write-doc docs/BENCHMARKS.md --update-readme README.md
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import shlex
import sys


def add_arguments(parser: argparse.ArgumentParser) -> None:
    from dynamo_dist.benchmarks.suite import SECTIONS

    parser.add_argument("--quick", action="store_true", help="tiny sizes, few repetitions, no inductor, 2 ranks")
    parser.add_argument("--json", metavar="FILE", help="write the full result (every sample) as JSON")
    parser.add_argument("--write-doc", metavar="PATH",
                        help="rewrite the generated part of this markdown file (docs/BENCHMARKS.md)")
    parser.add_argument("--update-readme", metavar="PATH", help="rewrite the benchmark summary in this README")
    parser.add_argument("--only", nargs="+", choices=SECTIONS, metavar="SECTION",
                        help=f"run only these sections ({', '.join(SECTIONS)}; scale runs only when named)")
    parser.add_argument("--warm-gloo", action="store_true",
                        help="warm_start: also the real 2-rank gloo world (each rank compiles; slow)")
    parser.add_argument("--from-json", metavar="FILE", help="do not run: report a result saved with --json")
    parser.add_argument("--note", default="", help="a line added under the stamp in the doc (e.g. the machine load)")
    parser.add_argument("--quiet", action="store_true", help="no progress lines")


def command_line(args: argparse.Namespace) -> str:
    """The canonical command that reproduces this run."""
    words = ["python", "-m", "dynamo_dist", "bench"]
    if args.quick:
        words.append("--quick")
    if args.only:
        words += ["--only", *args.only]
    if args.warm_gloo:
        words.append("--warm-gloo")
    for flag, value in (("--json", args.json), ("--write-doc", args.write_doc),
                        ("--update-readme", args.update_readme)):
        if value:
            words += [flag, value]
    return shlex.join(words)


def run(args: argparse.Namespace) -> int:
    from dynamo_dist.benchmarks import report, suite

    if args.from_json:
        with open(args.from_json) as f:
            result = json.load(f)
    else:
        cfg = suite.QUICK if args.quick else suite.FULL
        if args.warm_gloo:
            cfg = dataclasses.replace(cfg, warm_worlds=(*cfg.warm_worlds, "gloo"))
        result = suite.run(cfg, tuple(args.only or suite.DEFAULT_SECTIONS), command=command_line(args), quiet=args.quiet)
    print(report.text(result))
    if args.json and not args.from_json:
        with open(args.json, "w") as f:
            json.dump(result, f, indent=1)
    if args.write_doc:
        report.write_doc(args.write_doc, result, args.note)
    if args.update_readme:
        report.update_readme(args.update_readme, result)
    failed = suite.errors(result)
    for line in failed:
        print(f"FAILED {line.splitlines()[0]}", file=sys.stderr)
    return 1 if failed else 0
