"""The coverage tables (docs/coverage.md), generated from the member tables and from the
measured outcomes of ``devtools.coverage.cases`` on stock torch.

Stock differs between torch releases, so each table has one stock column per
tested release (``TESTED_VERSIONS``). A measurement fills only the running
release's column and keeps the others as they are in the page (run the
generator once on each release to fill them all).
"""

from __future__ import annotations

import re
from typing import Any, Iterable

from dynamo_dist._compat import observe as O
from dynamo_dist.variables import ALL_TABLES

from .c10d import CALL_CASES
from .cases import CASES

# The releases whose stock outcomes the coverage page records, one column each.
TESTED_VERSIONS: tuple[str, ...] = ("2.11.0", "2.12.1", "2.13.0", "2.14.1", "2.15.0")
NOT_MEASURED = "not measured"


def stock_column(version: str) -> str:
    return f"stock torch {version}"


def _columns(running: str) -> list[str]:
    versions = list(TESTED_VERSIONS)
    if running not in versions:
        versions.append(running)
        versions.sort(key=lambda v: tuple(int(p) if p.isdigit() else 0 for p in v.split(".")))
    return [stock_column(v) for v in versions]


def parse_table(block: str | None, key_columns: int) -> dict[str, dict[tuple[str, ...], str]]:
    """A markdown table as ``{column header: {row key: cell}}`` (the row key
    is the first ``key_columns`` cells)."""
    if not block:
        return {}
    rows = [[c.strip() for c in line.strip().strip("|").split(" | ")] for line in block.splitlines()
            if line.startswith("|")]
    if len(rows) < 2:
        return {}
    header, body = rows[0], rows[2:]
    out: dict[str, dict[tuple[str, ...], str]] = {h: {} for h in header[key_columns:]}
    for row in body:
        if len(row) != len(header):
            continue
        key = tuple(row[:key_columns])
        for h, cell in zip(header[key_columns:], row[key_columns:]):
            out[h][key] = cell
    return out


def _render(header: list[str], rows: list[list[str]]) -> str:
    lines = ["| " + " | ".join(header) + " |", "| " + " | ".join("---" for _ in header) + " |"]
    lines += ["| " + " | ".join(r) + " |" for r in rows]
    return "\n".join(lines)


def _stock_cells(running_cells: dict[tuple[str, ...], str], keys: list[tuple[str, ...]],
                 previous: str | None, key_columns: int, version: str | None) -> tuple[list[str], list[list[str]]]:
    """Per row, the cell of every stock column: the running release's from
    ``running_cells``, every other one from the ``previous`` table."""
    running = version or O.torch_version()
    columns = _columns(running)
    old = parse_table(previous, key_columns)
    cells = []
    for key in keys:
        row = []
        for column in columns:
            if column == stock_column(running):
                row.append(running_cells.get(key, NOT_MEASURED))
            else:
                row.append(old.get(column, {}).get(key, NOT_MEASURED))
        cells.append(row)
    return columns, cells


def _stock_by_member(stock: Iterable) -> dict[str, str]:

    status = {o.case: o.status for o in stock}
    out: dict[str, str] = {}
    for case in CASES:
        for member in case.members:
            if case.name in status:
                out[member] = status[case.name]
    return out


def member_table(stock: Iterable | None = None, previous: str | None = None, version: str | None = None) -> str:
    """Markdown: every member of every tracked type, how we handle it, and
    (when measured) what stock torch did in the same case, one column per
    tested release: the running one's from ``stock``, the others kept from
    ``previous`` (the page's current table)."""
    stock_of = _stock_by_member(stock or [])
    keys, ours_of, running = [], {}, {}
    in_calls = {case.member for case in CALL_CASES}  # their own table: ``c10d_table``
    for type_name, table in ALL_TABLES.items():
        for name, member in table.items():
            if f"{type_name}.{name}" in in_calls:
                continue
            shown = f"`{name}()`" if member.method else f"`{name}`"
            ours = member.coverage_text()
            key = (type_name, shown)
            keys.append(key)
            ours_of[key] = ours
            running[key] = stock_of.get(f"{type_name}.{name}", NOT_MEASURED)
    columns, cells = _stock_cells(running, keys, previous, 2, version)
    rows = [[*key, ours_of[key], *row] for key, row in zip(keys, cells)]
    return _render(["type", "member", "dynamo_dist", *columns], rows)


def differences_table(plugin: Iterable, stock: Iterable, previous: str | None = None,
                      version: str | None = None) -> str:
    """Markdown: each case, its outcome with the plugin and with stock torch,
    one stock column per tested release (the running one measured, the others
    kept from ``previous``)."""
    stock_of = {o.case: o for o in stock}
    plugin = list(plugin)
    running = {}
    for o in plugin:
        s = stock_of.get(o.case)
        running[(o.case,)] = "—" if s is None else s.status + (f" ({_short(s.detail)})" if s.status != "ok" else "")
    keys = [(o.case,) for o in plugin]
    columns, cells = _stock_cells(running, keys, previous, 1, version)
    rows = [[o.case, o.status, *row] for o, row in zip(plugin, cells)]
    return _render(["case", "dynamo_dist", *columns], rows)


def status_of(cell: str) -> str:
    """A differences-table cell's status, without its detail."""
    return cell.split(" (", 1)[0]


def counts_block(diffs: str) -> str:
    """Markdown: for each column of the differences table (``diffs``, as the
    page has it), how many cases have each status."""
    lines = []
    for column, cells in parse_table(diffs, 1).items():
        found: dict[str, int] = {}
        for cell in cells.values():
            found[status_of(cell)] = found.get(status_of(cell), 0) + 1
        shown = ", ".join(f"{n} {status}" for status, n in sorted(found.items(), key=lambda kv: (-kv[1], kv[0])))
        lines.append(f"- {column}: {shown}")
    return "\n".join(lines)


def _cell(outcome: Any) -> str:
    if outcome is None:
        return "—"
    return outcome.status + (f" ({_short(outcome.detail)})" if outcome.status != "ok" and outcome.detail else "")


def c10d_table(plugin: Iterable, stock: Iterable, previous: str | None = None, version: str | None = None) -> str:
    """Markdown: every torch.distributed call case (``c10d.CALL_CASES``),
    the row of the code's tables it exercises and what that row declares,
    its outcome with the plugin, and with stock torch, one column per tested
    release (the running one measured, the others kept from ``previous``)."""
    ours = {o.case: o for o in plugin}
    theirs = {o.case: o for o in stock}
    keys, declared = [], {}
    for case in CALL_CASES:
        owner, name = case.member.rsplit(".", 1)
        keys.append((case.name,))
        declared[case.name] = f"`{case.member}`: {ALL_TABLES[owner][name].coverage_text()}"
    running = {(name,): _cell(theirs.get(name)) for (name,) in keys}
    columns, cells = _stock_cells(running, keys, previous, 1, version)
    rows = [[name, declared[name], _cell(ours.get(name)), *row] for (name,), row in zip(keys, cells)]
    return _render(["call", "row: what dynamo_dist declares", "dynamo_dist", *columns], rows)


def counts(outcomes: Iterable) -> dict[str, int]:
    """How many outcomes have each status."""
    out: dict[str, int] = {}
    for o in outcomes:
        out[o.status] = out.get(o.status, 0) + 1
    return out


def _short(detail: str) -> str:
    detail = " ".join(detail.replace("|", "/").replace("InternalTorchDynamoError: ", "").split())
    # Python words a RecursionError by where the limit was hit: one text for all.
    detail = re.sub(r"maximum recursion depth exceeded[^)…]*", "maximum recursion depth exceeded", detail)
    # Stock prints sets of symbols in hash order: sort them so the table is stable.
    detail = re.sub(r"\{([\w, ]+)\}", lambda m: "{" + ", ".join(sorted(m.group(1).split(", "))) + "}", detail)
    return detail[:90] + ("…" if len(detail) > 90 else "")


def replace_block(text: str, marker: str, body: str) -> str:
    """Replace the text between ``<!-- marker:begin -->`` and ``<!-- marker:end -->``."""
    begin, end = f"<!-- {marker}:begin -->", f"<!-- {marker}:end -->"
    head, rest = text.split(begin, 1)
    _, tail = rest.split(end, 1)
    return f"{head}{begin}\n{body}\n{end}{tail}"


def read_block(text: str, marker: str) -> str:
    begin, end = f"<!-- {marker}:begin -->", f"<!-- {marker}:end -->"
    return text.split(begin, 1)[1].split(end, 1)[0].strip("\n")
