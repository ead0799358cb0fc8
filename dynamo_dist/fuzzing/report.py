"""A fuzz run's results as JSON (``python -m dynamo_dist fuzz --json FILE``),
and the long runs' table of docs/benchmarks.md ("Reliability") generated
from those files.

``python -m dynamo_dist.fuzzing.report PAGE FILE...`` writes the table of
the runs in ``FILE...`` into ``PAGE`` between its ``fuzz-long:begin`` and
``fuzz-long:end`` markers (``tests/tools/test_fuzz_reliability.py`` checks
that the page holds exactly that).
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any



from . import stock

MARKER = "fuzz-long"


def add(properties: dict[str, Any], report: Any, target: int) -> None:
    """Add one property's ``driver.PropertyReport`` (``target`` examples asked for)."""
    properties[report.name] = {
        "status": "interrupted" if report.interrupted else ("failed" if report.failures else "ok"),
        "examples": target, "passed": report.passed, "discarded": report.invalid, "calls": report.calls,
        "seconds": round(report.seconds, 1),
        "outcomes": dict(sorted(report.outcomes.items())),
        "notes": {k: dict(v.most_common()) for k, v in sorted(report.notes.items())},
        "failures": [{"error": f.error[:4000], "reproducer": str(f.reproducer) if f.reproducer else None}
                     for f in report.failures],
    }


# ---------------------------------------------------------------------------
# The Reliability table.


def _release(result: dict[str, Any]) -> str:
    return result["meta"]["machine"]["torch"].split("+")[0]


def _minutes(seconds: float) -> str:
    return f"{seconds / 60:.0f} min" if seconds >= 90 else f"{seconds:.0f} s"


def _stock_cell(notes: dict[str, dict[str, int]]) -> str:
    """Stock's failures where the plugin is like eager: the commonest few, counted."""
    found = notes.get(stock.STOCK_FAILS, {})
    if not found:
        return "none"
    items = sorted(found.items(), key=lambda kv: (-kv[1], kv[0]))
    shown = "; ".join(f"{n} × `{_cell(text[:90])}`" for text, n in items[:3])
    more = len(items) - 3
    return shown + (f"; {more} other kinds" if more > 0 else "")


def _cell(text: str) -> str:
    """Text that stays inside one cell of a markdown table (and its code span)."""
    return text.replace("|", "/").replace("`", "'")


def table(results: list[dict[str, Any]], prop: str = "stock") -> str:
    """The long runs of ``prop``, one row per run (by release): programs
    checked, time, distinct failures, and each outcome counted."""
    head = ["release", "seed", "programs", "time", "ended", "failures", stock.SAME, stock.PLUGIN_BETTER,
            stock.STOCK_FAILS, stock.BOTH_FAIL, "discarded", "stock fails (commonest)"]
    rows = []
    for r in sorted(results, key=lambda r: tuple(int(p) for p in _release(r).split("."))):
        p = r["properties"][prop]
        o = p["outcomes"]
        ended = {"interrupted": "at its time limit", "ok": "all examples",
                 "failed": "at its first failure (shrunk)"}.get(p["status"], p["status"])
        rows.append([_release(r), str(r["meta"]["config"]["seed"]), f"{p['passed']:,}", _minutes(p["seconds"]), ended,
                     str(len(p["failures"])), *(str(o.get(k, 0)) for k in head[6:10]), str(p["discarded"]),
                     _stock_cell(p["notes"])])
    lines = ["| " + " | ".join(head) + " |", "|" + " --- |" * len(head)]
    lines += ["| " + " | ".join(row) + " |" for row in rows]
    return "\n".join(lines) + "\n"


def block(results: list[dict[str, Any]]) -> str:
    """The text between the page's markers: the table, then each run's
    command, date, machine and load."""
    lines = [table(results)]
    for r in sorted(results, key=lambda r: tuple(int(p) for p in _release(r).split("."))):
        m = r["meta"]
        load = m["machine"].get("load_average_start", ["?"])[0], m["machine"].get("load_average_end", ["?"])[0]
        lines.append(f"- torch {_release(r)}: `{m['command']}` ({m['date']}, {m['machine']['cpu']}, "
                     f"{m['machine']['cores']} cores, load average {load[0]} at the start, {load[1]} at the end)")
    return "\n".join(lines) + "\n"


def update(page: str | Path, files: list[str | Path]) -> None:
    """Write the table of the runs in ``files`` into ``page`` between its markers."""
    page = Path(page)
    text = page.read_text()
    begin, end = f"<!-- {MARKER}:begin -->\n", f"<!-- {MARKER}:end -->"
    if begin not in text or end not in text:
        raise SystemExit(f"{page}: no {begin.strip()} ... {end} markers")
    results = [json.loads(Path(f).read_text()) for f in files]
    head, rest = text.split(begin, 1)
    _, tail = rest.split(end, 1)
    page.write_text(head + begin + block(results) + end + tail)


if __name__ == "__main__":
    update(sys.argv[1], sys.argv[2:])
