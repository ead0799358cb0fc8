"""``python -m dynamo_dist COMMAND``: one module per command in this package.

Each command module has a docstring (its first paragraph is the help text),
``add_arguments(parser)`` and ``run(args) -> int`` (the exit status), and
may declare ``NEEDS`` (optional packages, see ``preflight``). Adding a
command is adding a module and a line to ``COMMANDS``. The contributor's
commands of a source checkout (``python -m devtools``: the benchmarks, the
coverage tables) are made the same way, by ``main`` with their own table.

Help must answer at once: a command module imports torch (and anything that
imports it) inside ``run`` only, never at module level or in
``add_arguments`` (``tests/tools/test_cli_help.py`` checks it).
"""

from __future__ import annotations

import argparse
import importlib
import sys

from . import preflight

# name -> module (a full module name); the first entry is the default command.
COMMANDS: dict[str, str] = {
    "example": "dynamo_dist.cli.example",
    "demo": "dynamo_dist.cli.demo",
    "explain": "dynamo_dist.cli.explain",
    "fuzz": "dynamo_dist.cli.fuzz",
}
PROG = "python -m dynamo_dist"
DESCRIPTION = "dynamo_dist: torch.compile for distributed PyTorch."


def build_parser(commands: dict[str, str] = COMMANDS, prog: str = PROG,
                 description: str = DESCRIPTION) -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog=prog, description=description)
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    for name, module_name in commands.items():
        module = importlib.import_module(module_name)
        doc = (module.__doc__ or "").strip()
        summary = " ".join(doc.split("\n\n")[0].split())
        cmd = sub.add_parser(name, help=summary, description=doc,
                             formatter_class=argparse.RawDescriptionHelpFormatter)
        module.add_arguments(cmd)
    return parser


def main(argv: list[str] | None = None, commands: dict[str, str] = COMMANDS, prog: str = PROG,
         description: str = DESCRIPTION) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if not argv or argv[0].startswith("-") and argv[0] not in ("-h", "--help"):
        argv.insert(0, next(iter(commands)))  # the default command
    args = build_parser(commands, prog, description).parse_args(argv)
    command = importlib.import_module(commands[args.command])
    problem = preflight.problem(command)
    if problem:
        print(f"{prog} {args.command}: {problem}", file=sys.stderr)
        return 2
    return int(command.run(args) or 0)
