"""``python -m dynamo_dist COMMAND``: one module per command in this package.

Each command module has a docstring (its first paragraph is the help text),
``add_arguments(parser)`` and ``run(args) -> int`` (the exit status), and
may declare ``NEEDS`` (optional packages, see ``preflight``). Adding a
command is adding a module and a line to ``COMMANDS``.

Help must answer at once: a command module imports torch (and anything that
imports it) inside ``run`` only, never at module level or in
``add_arguments`` (``tests/test_cli_help.py`` checks it).
"""

from __future__ import annotations

import argparse
import importlib
import sys

from . import preflight

# name -> module in dynamo_dist.cli; the first entry is the default command.
COMMANDS: dict[str, str] = {
    "example": "example",
    "coverage": "coverage",
    "demo": "demo",
    "bench": "bench",
    "explain": "explain",
    "fuzz": "fuzz",
}
DEFAULT = "example"


def _load(name: str):
    return importlib.import_module(f"dynamo_dist.cli.{COMMANDS[name]}")


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m dynamo_dist",
                                     description="dynamo_dist: torch.compile for distributed PyTorch.")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    for name in COMMANDS:
        module = _load(name)
        doc = (module.__doc__ or "").strip()
        summary = " ".join(doc.split("\n\n")[0].split())
        cmd = sub.add_parser(name, help=summary, description=doc,
                             formatter_class=argparse.RawDescriptionHelpFormatter)
        module.add_arguments(cmd)
    return parser


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if not argv or argv[0].startswith("-") and argv[0] not in ("-h", "--help"):
        argv.insert(0, DEFAULT)
    args = build_parser().parse_args(argv)
    command = _load(args.command)
    problem = preflight.problem(command)
    if problem:
        print(f"python -m dynamo_dist {args.command}: {problem}", file=sys.stderr)
        return 2
    return int(command.run(args) or 0)
