"""Write a failing fuzz example as a standalone reproducer script.

The script holds the shrunk example as plain data (world, mesh and
placement specs, the program's source verbatim) and calls the property's
check, imported by its ``module:function`` path. It needs torch and
dynamo_dist only (no hypothesis, no test files): it exits 1 with the
property's ``AssertionError`` while the failure is present, 0 once fixed.
"""

from __future__ import annotations

import textwrap
from pathlib import Path
from typing import Any

from .specs import code_of

_IMPORTS = """\
import sys

import torch
from torch.distributed.tensor.placement_types import Partial, Replicate, Shard, _StridedShard

from dynamo_dist.fuzzing.specs import (
    DTensorExample,
    DTensorSpec,
    GroupArg,
    GuardExample,
    MeshArg,
    MeshSpec,
    ProcessesExample,
    ProcessState,
    Program,
    QueryExample,
    QueryInputs,
    StockExample,
    TaggedShard,
    World,
)
from dynamo_dist.fuzzing.spmd import SpmdExample
"""


def _source_literal(source: str) -> str:
    if '"""' in source or "\\" in source:
        return repr(source)
    return '"""\\\n' + source + '"""'


def _sources(example: Any) -> list[tuple[str, str]]:
    """``(variable, source)`` of the example's program (``SOURCE``) or
    programs (``SOURCE_0``, ``SOURCE_1``, ...), written out verbatim."""
    program = getattr(example, "program", None)
    if getattr(program, "source", None) is not None:
        return [("SOURCE", program.source)]
    return [(f"SOURCE_{i}", p.source) for i, p in enumerate(getattr(example, "programs", ()))]


def reproducer_source(property_name: str, check: str, example: Any, error: str = "", seed: int | None = None) -> str:
    """The text of a reproducer script for ``example`` failing ``check``
    (``"module:function"``)."""
    module, _, function = check.partition(":")
    sources = _sources(example)
    names = {id(source): name for name, source in sources}
    example_code = code_of(example, names=names)
    error_lines = "\n".join(textwrap.shorten(line, 200) for line in error.strip().splitlines()[:12])
    seed_note = f" (seed {seed})" if seed is not None else ""
    doc = (
        f'"""dynamo_dist fuzz reproducer: property `{property_name}`{seed_note}, shrunk example.\n\n'
        f"Check: {check}\n"
        "Run: python THIS_FILE.py -- exits 1 (AssertionError) while the failure is present, 0 once fixed.\n\n"
        f"Failure seen:\n{textwrap.indent(error_lines, '    ')}\n"
        '"""\n'
    )
    body = [doc, _IMPORTS]
    for name, source in sources:
        body.append(f"{name} = {_source_literal(source)}\n")
    body.append(f"EXAMPLE = {example_code}\n")
    body.append(textwrap.dedent(f"""
        def main() -> int:
            from {module} import {function} as check

            check(EXAMPLE)
            print("passed: the example no longer fails `{property_name}`")
            return 0


        if __name__ == "__main__":
            sys.exit(main())
        """))
    return "\n\n".join(part.rstrip("\n") + "\n" for part in body)


def write_reproducer(path: str | Path, property_name: str, check: str, example: Any, error: str = "",
                     seed: int | None = None) -> Path:
    """Write ``reproducer_source(...)`` to ``path``; returns the path."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(reproducer_source(property_name, check, example, error, seed))
    return path
