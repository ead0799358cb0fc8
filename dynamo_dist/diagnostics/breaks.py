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
import re
import textwrap

import torch

from .report import GraphBreak

_PACKAGE_DIR = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))  # dynamo_dist/

_HEAD = re.compile(
    r"^Graph break (?:\(user stack suppressed due to duplicate graph break\) )?"
    r"in user code at (?P<file>.+?):(?P<line>\d+)\nGraph Break Reason: ",
)
_FRAME = re.compile(r'^  File "(?P<file>[^"]+)", line (?P<line>\d+), in (?P<fn>\S+)$', re.M)
_RESUME = re.compile(r"^torch_dynamo_resume_in_(?P<fn>.+)_at_(?P<line>\d+)$")

# What Dynamo does after each kind of break (the message's opening words).
_EFFECTS = (
    ("Encountered graph break that we cannot resume from",
     "graph ends here; the rest of the function runs eagerly"),
    ("Failed to handle graph break gracefully",
     "the whole function runs eagerly (not compiled)"),
)
RESUMES = "graph split here; compiled code resumes after it"


def _internal_roots() -> tuple[str, ...]:
    return (
        os.path.dirname(torch.__file__) + os.sep,
        _PACKAGE_DIR + os.sep,
        os.path.dirname(os.__file__) + os.sep,  # the standard library (runpy, ...)
    )


def is_user_file(path: str) -> bool:
    return not path.startswith("<") and not path.startswith(_internal_roots())


def user_function(name: str) -> str:
    """``torch_dynamo_resume_in_step_at_12`` -> ``step`` (Dynamo's resume
    functions continue the user's function after a break)."""
    m = _RESUME.match(name)
    return m.group("fn") if m else name


def parse_message(gb_type_text: str) -> tuple[str, str, list[str], str]:
    """(gb_type, explanation, hints, context) from a formatted break message;
    the last one when breaks are chained."""
    start = gb_type_text.rfind("\n  Explanation: ")
    if start < 0:  # an unformatted (legacy) break: its first line is all there is
        first = gb_type_text.strip().splitlines()[0] if gb_type_text.strip() else ""
        return first, "", [], ""
    head = gb_type_text[:start].rstrip().splitlines()
    gb_type = head[-1].strip() if head else ""
    body = gb_type_text[start + 1:]
    explanation_lines: list[str] = []
    hints: list[list[str]] = []
    context = ""
    current: list[str] | None = None
    for line in body.splitlines():
        if line.startswith("  Explanation: "):
            current = [line[len("  Explanation: "):]]
            explanation_lines = current
        elif line.startswith("  Hint: "):
            current = [line[len("  Hint: "):]]
            hints.append(current)
        elif line.startswith("  Developer debug context: "):
            context = line[len("  Developer debug context: "):]
            current = None
        elif line.startswith("    ") and current is not None:
            current.append(line[4:])
        elif not line.strip():
            current = None
    explanation = "\n".join(explanation_lines).strip()
    return gb_type, explanation, ["\n".join(h).strip() for h in hints], context.strip()


def parse_log(text: str, compile_id: str, memo: dict) -> GraphBreak | None:
    """One ``graph_breaks`` log message -> GraphBreak (None if not one).

    ``memo`` maps (gb_type, file, line) as Dynamo located the break to the
    user location found in an earlier full message: Dynamo suppresses the
    stack of repeated breaks.
    """
    head = _HEAD.match(text)
    if head is None:
        return None
    rest = text[head.end():]
    reason = re.split(r"\n(?:Stack variable source attribution|User code traceback):\n", rest)[0]
    gb_type, explanation, hints, context = parse_message(reason)
    effect = next((e for prefix, e in _EFFECTS if reason.startswith(prefix)), RESUMES)
    file, line = head.group("file"), int(head.group("line"))
    frames = [(f.group("file"), int(f.group("line")), f.group("fn")) for f in _FRAME.finditer(rest)]
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
    return GraphBreak(
        file=ufile,
        line=uline,
        function=user_function(fn),
        gb_type=gb_type,
        explanation=explanation,
        hints=hints,
        context=textwrap.shorten(context, 300) if context else "",
        origin="dynamo_dist" if gb_type.startswith("dynamo_dist:") else "stock Dynamo",
        effect=effect,
        code=linecache.getline(ufile, uline).strip(),
        compile_ids=[compile_id],
    )


def from_failure(fail_reason: str, file: str | None, line: int | None, function: str,
                 compile_id: str) -> GraphBreak:
    """A break that failed the whole compile instead of being logged:
    Dynamo raised it to the caller (``fullgraph=True``) or ran the frame
    eagerly (e.g. the recompile limit)."""
    gb_type, explanation, hints, context = parse_message(fail_reason)
    if "recompile limit" in gb_type:
        effect = "no more recompiles: the function runs eagerly for inputs no cached graph accepts"
    else:
        effect = "frame not compiled: an error for the caller under fullgraph=True, else it ran eagerly"
    file = file or "?"
    line = line or 0
    return GraphBreak(
        file=file, line=line, function=user_function(function), gb_type=gb_type,
        explanation=explanation, hints=hints, context=textwrap.shorten(context, 300) if context else "",
        origin="dynamo_dist" if gb_type.startswith("dynamo_dist:") else "stock Dynamo",
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
