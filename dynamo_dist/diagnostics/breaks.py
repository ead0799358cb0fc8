"""Graph breaks, read from torch's own ``graph_breaks`` log artifact.

Dynamo writes every graph break it handles to that logger (the one
``TORCH_LOGS=graph_breaks`` shows), including breaks it cannot resume from
(the frame then runs eagerly; ``torch._dynamo.explain`` misses those). Each
message names the user location and carries the break's formatted text
(``torch._dynamo.exc.format_graph_break_message``): gb_type, explanation,
hints and developer context. This module turns one message into a
``GraphBreak``.
"""

from __future__ import annotations

import linecache
import os
import textwrap

import torch

from .._compat import dynamo_logs as L
from .._compat import spmd as S
from .render import _short
from .report import PLUGIN, STOCK_DYNAMO, GraphBreak

_PACKAGE_DIR = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))  # dynamo_dist/

# What Dynamo does after each kind of break, in the user's words.
_EFFECTS = {
    L.CANNOT_RESUME: "graph ends here; the rest of the function runs eagerly",
    L.NOT_GRACEFUL: "the whole function runs eagerly (not compiled)",
}
RESUMES = "graph split here; compiled code resumes after it"


def _internal_roots() -> tuple[str, ...]:
    """Where no user code lives: torch, dynamo_dist, the standard library,
    and spmd_types once the program imported it (a break inside its
    collectives is placed at the user's call)."""
    spmd_types = S.package_dir()
    return (
        os.path.dirname(torch.__file__) + os.sep,
        _PACKAGE_DIR + os.sep,
        os.path.dirname(os.__file__) + os.sep,  # the standard library (runpy, ...)
    ) + ((spmd_types,) if spmd_types else ())


def _origin(gb_type: str) -> str:
    """Whose break it is: the plugin's (its ``dynamo_dist:`` gb_types) or stock Dynamo's."""
    return PLUGIN if gb_type.startswith("dynamo_dist:") else STOCK_DYNAMO


def is_user_file(path: str) -> bool:
    return not path.startswith("<") and not path.startswith(_internal_roots())


def parse_log(text: str, compile_id: str, memo: dict) -> GraphBreak | None:
    """One ``graph_breaks`` log message -> GraphBreak (None if not one).

    ``memo`` maps (gb_type, file, line) as Dynamo located the break to the
    user location found in an earlier full message: Dynamo suppresses the
    stack of repeated breaks.
    """
    parsed = L.parse_graph_break_log(text)
    if parsed is None:
        return None
    gb_type, explanation, hints, context = parsed.gb_type, parsed.explanation, list(parsed.hints), parsed.context
    effect = _EFFECTS.get(parsed.after, RESUMES)
    file, line, frames = parsed.file, parsed.line, parsed.frames
    user_frames = [f for f in frames if is_user_file(f[0])]
    key = (gb_type, file, line)
    if user_frames:
        where = user_frames[-1]
        memo[key] = where
    elif key in memo:
        where = memo[key]
    else:
        where = (file, line, frames[-1][2] if frames else "?")
    ufile, uline, fn = where
    # Dynamo stopped inside a library the user's line called: that frame is the detail.
    inside = ""
    if (ufile, uline) != (file, line) and not is_user_file(file):
        library = next((f[2] for f in reversed(frames) if (f[0], f[1]) == (file, line)), None)
        library = memo.setdefault(("in", *key), library) if library else memo.get(("in", *key))
        inside = f"{_short(file)}:{line}" + (f" in {library}" if library else "")
    return GraphBreak(
        file=ufile,
        line=uline,
        function=L.user_function(fn),
        gb_type=gb_type,
        explanation=explanation,
        hints=hints,
        context=textwrap.shorten(context, 300) if context else "",
        origin=_origin(gb_type),
        effect=effect,
        code=linecache.getline(ufile, uline).strip(),
        compile_ids=[compile_id],
        inside=inside,
    )


def from_failure(fail_reason: str, file: str | None, line: int | None, function: str,
                 compile_id: str) -> GraphBreak:
    """A break that failed the whole compile instead of being logged:
    Dynamo raised it to the caller (``fullgraph=True``) or ran the frame
    eagerly (e.g. the recompile limit)."""
    gb_type, explanation, hints, context = L.parse_break_message(fail_reason)
    if "recompile limit" in gb_type:
        effect = "no more recompiles: the function runs eagerly for inputs no cached graph accepts"
    else:
        effect = "frame not compiled: an error for the caller under fullgraph=True, else it ran eagerly"
    file = file or "?"
    line = line or 0
    return GraphBreak(
        file=file, line=line, function=L.user_function(function), gb_type=gb_type,
        explanation=explanation, hints=hints, context=textwrap.shorten(context, 300) if context else "",
        origin=_origin(gb_type),
        effect=effect,
        code=linecache.getline(file, line).strip() if line else "", compile_ids=[compile_id],
    )


def merge(breaks: list[GraphBreak]) -> list[GraphBreak]:
    """One entry per (place, type), listing every compile that hit it."""
    merged: dict[tuple, GraphBreak] = {}
    for b in breaks:
        key = (b.file, b.line, b.gb_type)
        if key in merged:
            seen = merged[key]
            seen.compile_ids += [c for c in b.compile_ids if c not in seen.compile_ids]
            seen.effect = b.effect  # the latest compile's outcome
        else:
            merged[key] = b
    return list(merged.values())
