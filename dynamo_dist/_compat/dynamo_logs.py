"""Dynamo's graph-break log messages, read back into plain fields.

The explain report (``diagnostics/breaks.py``) reads torch's ``graph_breaks``
log artifact; the format of those messages is Dynamo's, so its knowledge
lives here, behind the boundary: a torch release that changes the text is a
change to this module only. Anything not recognised returns None and is
reported raw, never an error in the user's program.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

__all__ = ["ParsedBreak", "parse_graph_break_log", "parse_break_message", "user_function", "resume_point",
           "CANNOT_RESUME", "NOT_GRACEFUL", "RESUMED"]

_HEAD = re.compile(
    r"^Graph break (?:\(user stack suppressed due to duplicate graph break\) )?"
    r"in user code at (?P<file>.+?):(?P<line>\d+)\nGraph Break Reason: ",
)
_FRAME = re.compile(r'^  File "(?P<file>[^"]+)", line (?P<line>\d+), in (?P<fn>\S+)$', re.M)
_RESUME = re.compile(r"^torch_dynamo_resume_in_(?P<fn>.+)_at_(?P<line>\d+)$")
_REASON_END = re.compile(r"\n(?:Stack variable source attribution|User code traceback):\n")

# What Dynamo did after the break, from the reason's opening words.
CANNOT_RESUME, NOT_GRACEFUL, RESUMED = "cannot_resume", "not_graceful", "resumed"
_AFTER = (
    ("Encountered graph break that we cannot resume from", CANNOT_RESUME),
    ("Failed to handle graph break gracefully", NOT_GRACEFUL),
)


@dataclass(frozen=True)
class ParsedBreak:
    file: str            # where Dynamo located the break
    line: int
    frames: tuple        # (file, line, function) of the user stack Dynamo printed, outermost first
    gb_type: str
    explanation: str
    hints: tuple
    context: str
    after: str           # CANNOT_RESUME, NOT_GRACEFUL or RESUMED


def parse_graph_break_log(text: str) -> ParsedBreak | None:
    """One ``graph_breaks`` log message, or None if it is not one."""
    head = _HEAD.match(text)
    if head is None:
        return None
    rest = text[head.end():]
    reason = _REASON_END.split(rest)[0]
    gb_type, explanation, hints, context = parse_break_message(reason)
    after = next((k for prefix, k in _AFTER if reason.startswith(prefix)), RESUMED)
    frames = tuple((f.group("file"), int(f.group("line")), f.group("fn")) for f in _FRAME.finditer(rest))
    return ParsedBreak(head.group("file"), int(head.group("line")), frames, gb_type, explanation,
                       tuple(hints), context, after)


def user_function(name: str) -> str:
    """``torch_dynamo_resume_in_step_at_12`` -> ``step`` (Dynamo's resume
    functions continue the user's function after a break)."""
    m = _RESUME.match(name)
    return m.group("fn") if m else name


def resume_point(name: str) -> tuple[str, int] | None:
    """``torch_dynamo_resume_in_step_at_12`` -> ``("step", 12)``: the
    function and line a resume frame Dynamo made after a graph break
    continues; None for any other code name."""
    found = _RESUME.match(name)
    return (found.group("fn"), int(found.group("line"))) if found else None


def parse_break_message(gb_type_text: str) -> tuple[str, str, list[str], str]:
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
