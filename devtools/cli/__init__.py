"""``python -m devtools COMMAND``: the contributor's commands (made like
``python -m dynamo_dist``'s, see ``dynamo_dist.cli``)."""

from __future__ import annotations

COMMANDS: dict[str, str] = {
    "bench": "devtools.cli.bench",
    "coverage": "devtools.cli.coverage",
    "graph": "devtools.cli.graph",
}
PROG = "python -m devtools"
DESCRIPTION = "dynamo_dist's contributor tools (from a source checkout): benchmarks, coverage tables, module graph."
