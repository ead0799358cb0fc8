"""Run the named cases with the plugin and with stock torch and print the
coverage tables (``--update-readme docs/coverage.md`` rewrites them there).

Only the running torch release's stock column is measured; the file's other
columns are kept as they are.
"""

from __future__ import annotations

import argparse

from dynamo_dist.cli.arguments import file_with_markers

# The generated blocks of the coverage page (devtools.coverage.tables).
MARKERS = ("coverage", "stock-diff", "stock-diff-counts", "c10d")


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--update-readme", metavar="PATH", type=file_with_markers(*MARKERS, home="docs/coverage.md"),
                        help="rewrite the tables between the coverage markers in this file (docs/coverage.md)")


def run(args: argparse.Namespace) -> int:
    from dynamo_dist._compat import observe as O
    from devtools.coverage.c10d import CALL_CASES, as_expected, run_all_calls
    from devtools.coverage.tables import (c10d_table, counts, counts_block, differences_table, member_table,
                                          read_block, replace_block)
    from devtools.coverage.cases import run_all

    update_readme = args.update_readme
    previous = None
    if update_readme:
        with open(update_readme) as f:
            previous = f.read()

    plugin, stock = run_all(plugin=True), run_all(plugin=False)
    # Only this release's stock column is measured; the others are kept.
    members = member_table(stock, read_block(previous, "coverage") if previous else None)
    diffs = differences_table(plugin, stock, read_block(previous, "stock-diff") if previous else None)
    calls_plugin, calls_stock = run_all_calls(plugin=True), run_all_calls(plugin=False)
    calls = c10d_table(calls_plugin, calls_stock, read_block(previous, "c10d") if previous else None)
    print(members, "\n")
    print(diffs, "\n")
    print(calls)
    from devtools.coverage.cases import CASES

    ok = sum(o.status == c.expect for o, c in zip(plugin, CASES))
    stock_ok = sum(o.status == "ok" for o in stock)
    clean = sum(c.expect == "ok" for c in CASES)
    print(f"\n{len(plugin)} cases: {ok} as expected with dynamo_dist "
          f"({clean} compile with zero breaks and match eager, the rest break cleanly); "
          f"{stock_ok} compile with zero breaks and match eager with stock torch {O.torch_version()}")
    print(f"outcomes on torch {O.torch_version()}: dynamo_dist {counts(plugin)}; stock {counts(stock)}")
    calls_as_expected = sum(as_expected(c, o, s) for o, s, c in zip(calls_plugin, calls_stock, CALL_CASES))
    print(f"{len(CALL_CASES)} torch.distributed call cases: {calls_as_expected} as expected with dynamo_dist; "
          f"stock {counts(calls_stock)}")
    if update_readme:
        text = replace_block(previous, "coverage", members)
        text = replace_block(text, "stock-diff", diffs)
        text = replace_block(text, "stock-diff-counts", counts_block(diffs))
        text = replace_block(text, "c10d", calls)
        with open(update_readme, "w") as f:
            f.write(text)
    return 0 if ok == len(plugin) and calls_as_expected == len(CALL_CASES) else 1
