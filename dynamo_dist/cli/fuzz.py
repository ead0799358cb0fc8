"""Property-based fuzzing of the plugin (needs hypothesis): generated programs
compiled vs eager, with a reproducer script written for every failure.

Properties: query (compiled == eager, fullgraph, zero breaks), escapes
(returned meshes/groups/placements equal eager's), guards (compile with A,
call with B: right answer, recompile exactly when a folded answer differs),
wild (anything generated: never an internal Dynamo error), dtensor
(numerics and gradients on a spawned 2-rank gloo world), collectives
(meshes of 1 to 4 dims over 8 or 16 ranks in a recording world: eager's
collectives, group ranks and order, and layouts), processes (compiled in one
process, loaded from its caches in another in a perturbed state: the
collectives eager runs there) and stock (programs users write on a spawned
2-rank gloo world, compiled with the plugin and with stock torch: never
worse than stock) and spmd (spmd_types programs, well and ill typed, under
its type checker on a spawned 2-rank gloo world: eager's SpmdTypeError or
eager's values, gradients and types; needs spmd_types, skipped without it
unless asked for by --property). --examples is per property; processes runs a fortieth
of it (each example spawns processes that compile with inductor).
--json FILE saves the run whole (the command, date, machine, load, torch,
and every property's outcome counts).
Exit status: 0 when no property failed, 1 otherwise.
"""

from __future__ import annotations

import argparse
import importlib.util
import sys
import time
from collections import Counter

from dynamo_dist.cli.arguments import positive_int

NEEDS = {"hypothesis": "fuzz"}  # module -> the extra that installs it (cli.preflight)

# The properties --help offers, written out so that help needs no torch;
# tests/tools/test_cli_help.py keeps them equal to dynamo_dist.fuzzing.properties.PROPERTIES.
PROPERTY_NAMES = ("query", "escapes", "guards", "wild", "dtensor", "collectives", "processes", "stock", "spmd")


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--examples", type=positive_int, default=1000, metavar="N",
                        help="generated examples per property (default 1000)")
    parser.add_argument("--seed", type=int, default=None, metavar="S",
                        help="pin hypothesis' randomness (default: random)")
    parser.add_argument("--property", action="append", choices=sorted(PROPERTY_NAMES), metavar="P",
                        help=f"run only this property (repeatable): {', '.join(PROPERTY_NAMES)}")
    parser.add_argument("--out", default="fuzz-failures", metavar="DIR",
                        help="where reproducer scripts are written (default ./fuzz-failures)")
    parser.add_argument("--json", default=None, metavar="FILE",
                        help="save the run whole as JSON (written after each property)")


class _Display:
    """One status line per property: rewritten in place on a terminal,
    printed every 10% otherwise."""

    def __init__(self, stream=sys.stderr) -> None:
        self.stream = stream
        self.tty = stream.isatty()
        self.start = time.monotonic()
        self.last_step = -1

    def __call__(self, report, target: int) -> None:
        elapsed = time.monotonic() - self.start
        rate = report.calls / elapsed if elapsed > 0 else 0.0
        line = (f"[{report.name}] {report.passed}/{target} passed, {report.invalid} discarded, "
                f"{report.calls - report.passed - report.invalid} failing calls (shrinking), "
                f"{rate:.1f}/s, {elapsed:.0f}s")
        if self.tty:
            self.stream.write("\r" + line[:160].ljust(160))
            self.stream.flush()
            return
        step = report.calls * 10 // max(target, 1)
        if step != self.last_step:
            self.last_step = step
            print(line, file=self.stream, flush=True)

    def done(self) -> None:
        if self.tty:
            self.stream.write("\n")


def _command(args: argparse.Namespace) -> str:
    """The command line that makes this run, as one would type it."""
    parts = ["python -m dynamo_dist fuzz", f"--examples {args.examples}"]
    if args.seed is not None:
        parts.append(f"--seed {args.seed}")
    parts += [f"--property {p}" for p in args.property or ()]
    if args.out != "fuzz-failures":
        parts.append(f"--out {args.out}")
    if args.json:
        parts.append(f"--json {args.json}")
    return " ".join(parts)


def run(args: argparse.Namespace) -> int:
    import dynamo_dist
    from dynamo_dist.cli import results
    from dynamo_dist.fuzzing import report as saved
    from dynamo_dist.fuzzing.driver import run_property
    from dynamo_dist.fuzzing.properties import PROPERTIES

    names = args.property or list(PROPERTIES)
    run_ = results.Run(_command(args), {"examples": args.examples, "seed": args.seed, "property": args.property})
    properties: dict = {}
    print(f"dynamo_dist fuzz: {', '.join(names)}; {args.examples} examples per property; "
          f"seed {args.seed if args.seed is not None else 'random'}; reproducers in {args.out}/")
    total_start = time.monotonic()
    failed = 0
    with dynamo_dist.enabled():
        for name in names:
            prop = PROPERTIES[name]
            if prop.needs and not args.property and importlib.util.find_spec(prop.needs) is None:
                print(f"{name}: skipped: needs {prop.needs} (pip install 'dynamo_dist[clients]')")
                continue
            target = max(1, round(args.examples * prop.long_share))
            display = _Display()
            report = run_property(prop, examples=target, seed=args.seed, out_dir=args.out, progress=display)
            display.done()
            if args.json:  # saved first: what is printed below cannot lose the run
                saved.add(properties, report, target)
                results.write(args.json, run_.result({"properties": properties}))
            status = "interrupted" if report.interrupted else ("FAILED" if report.failures else "ok")
            print(f"{name}: {status}: {report.passed} examples passed, {report.invalid} discarded, "
                  f"{len(report.failures)} distinct failures, {report.seconds:.0f}s")
            if set(report.outcomes) - {"passed", "discarded", "failed"}:  # a property with finer outcomes
                for outcome, n in report.outcomes.most_common():
                    print(f"  {n} {outcome}")
                    for note, k in report.notes.get(outcome, Counter()).most_common(5):
                        print(f"      {k} x {note[:150]}")
            for failure in report.failures:
                first = failure.error.strip().splitlines()[0] if failure.error.strip() else "?"
                where = f" -> {failure.reproducer}" if failure.reproducer else ""
                print(f"  {first[:200]}{where}")
            failed += bool(report.failures)
            if report.interrupted:
                break
    print(f"total {time.monotonic() - total_start:.0f}s")
    if args.json:
        print(f"saved to {args.json}")
    return 1 if failed else 0
