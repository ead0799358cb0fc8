"""Graph breaks and the user-facing text around them.

Every break dynamo_dist makes has a ``gb_type`` starting with ``dynamo_dist:``,
an explanation and at least one hint that says what to do.
"""

from __future__ import annotations

import builtins
import logging
from typing import Any

from .. import _compat as C

GB_PREFIX = "dynamo_dist:"
log = logging.getLogger("dynamo_dist.fold")
break_log = logging.getLogger("dynamo_dist.breaks")


def graph_break(gb_type: str, context: str, explanation: str, hints: list[str]) -> Any:
    """A clean, explained graph break. ``gb_type`` never carries per-call data."""
    break_log.debug("graph break %s %s (%s): %s Hint: %s", GB_PREFIX, gb_type, context, explanation,
                    " Hint: ".join(hints))
    C.break_graph(f"{GB_PREFIX} {gb_type}", context, explanation, hints)


def raise_like_eager(tx: Any, exc: BaseException) -> Any:
    """Re-raise an exception the real object raised, as the user's program
    would see it in eager mode."""
    exc_type = type(exc)
    if getattr(builtins, exc_type.__name__, None) is exc_type:
        C.raise_observed(exc_type, tx, [str(a) for a in exc.args] or [str(exc)])
    graph_break(
        "query raised a non-builtin exception",
        f"{exc_type.__name__}: {exc}",
        f"The query raised {exc_type.__name__}: {exc}. Dynamo can only re-raise "
        "builtin exception types inside a compiled region.",
        ["Fix the call so it does not raise, or make it outside the compiled function."],
    )


def describe(value: Any) -> str:
    """Short, user-facing text for a folded value."""
    if isinstance(value, C.ProcessGroup):
        return f"ProcessGroup(name={value.group_name!r}, size={value.size()})"
    if isinstance(value, (list, tuple)) and any(isinstance(v, C.ProcessGroup) for v in value):
        return f"[{', '.join(describe(v) for v in value)}]"
    return repr(value)


def describe_call(pargs: list, pkwargs: dict) -> str:
    """``1, 'tp', dim=0`` for the arguments of a folded call."""
    return ", ".join([*map(describe, pargs), *(f"{k}={describe(v)}" for k, v in pkwargs.items())])
