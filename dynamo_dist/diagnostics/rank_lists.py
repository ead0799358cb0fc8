"""Rank lists in a report: listed when short, a range when long and evenly
spaced, so a report's size does not grow with the world."""

from __future__ import annotations

# A group's ranks are listed up to this many; a longer, evenly spaced list
# (a world-spanning group of 65,536 ranks) is reported as its range, so a
# report's size does not grow with the world.
RANKS_LISTED = 64


def compact_ranks(ranks: list[int] | None) -> list[int] | dict[str, int] | None:
    """``ranks``, or ``{"start", "stop", "step", "count"}`` for a long evenly spaced list."""
    if ranks is None or len(ranks) <= RANKS_LISTED:
        return ranks
    step = ranks[1] - ranks[0]
    if step <= 0 or any(b - a != step for a, b in zip(ranks, ranks[1:])):
        return ranks
    return {"start": ranks[0], "stop": ranks[-1] + step, "step": step, "count": len(ranks)}


def ranks_text(ranks: list[int] | dict[str, int] | None) -> str:
    """A rank list (or ``compact_ranks``' range) as the report prints it."""
    if ranks is None:
        return "?"
    if isinstance(ranks, dict):
        step = f", step {ranks['step']}" if ranks["step"] != 1 else ""
        return f"{ranks['start']}..{ranks['stop'] - ranks['step']}{step} ({ranks['count']} ranks)"
    return "[" + ",".join(map(str, ranks)) + "]"
