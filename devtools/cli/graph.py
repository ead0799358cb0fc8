"""Print the import graph of the dynamo_dist package (part by part, then
module by module), the graph docs/design.md's layout describes."""

from __future__ import annotations

import argparse

NEEDS_TORCH = False  # it reads the sources


def add_arguments(parser: argparse.ArgumentParser) -> None:
    pass


def run(args: argparse.Namespace) -> int:
    from devtools import module_graph  # reads sources only, no torch; here so that --help stays instant

    print(module_graph.text())
    return 0
