"""The README coverage tables, generated from the member tables and from the
measured outcomes of ``dynamo_dist.coverage.cases`` on stock torch."""

from __future__ import annotations

import re
from typing import Iterable

from ..variables.members import ALL_TABLES, Kind


def _stock_by_member(stock: Iterable) -> dict[str, str]:
    from .cases import CASES

    status = {o.case: o.status for o in stock}
    out: dict[str, str] = {}
    for case in CASES:
        for member in case.members:
            if case.name in status:
                out[member] = status[case.name]
    return out


def member_table(stock: Iterable | None = None) -> str:
    """Markdown: every member of every tracked type, how we handle it, and
    (when measured) what stock torch 2.13 did in the same case."""
    stock_of = _stock_by_member(stock or [])
    lines = [
        "| type | member | dynamo_dist | stock torch 2.13 |",
        "| --- | --- | --- | --- |",
    ]
    for type_name, table in ALL_TABLES.items():
        for name, member in table.items():
            shown = f"`{name}()`" if member.method else f"`{name}`"
            ours = member.kind.value
            if member.kind is Kind.BREAK:
                ours = f"graph break, hint: {member.hint.split(':')[0].split('. ')[0].rstrip('.')}"
            lines.append(f"| {type_name} | {shown} | {ours} | {stock_of.get(f'{type_name}.{name}', 'not measured')} |")
    return "\n".join(lines)


def differences_table(plugin: Iterable, stock: Iterable) -> str:
    """Markdown: each case, its outcome with the plugin and with stock."""
    stock_of = {o.case: o for o in stock}
    lines = ["| case | dynamo_dist | stock torch 2.13 |", "| --- | --- | --- |"]
    for o in plugin:
        s = stock_of.get(o.case)
        stock_text = "—" if s is None else s.status + (f" ({_short(s.detail)})" if s.status != "ok" else "")
        lines.append(f"| {o.case} | {o.status} | {stock_text} |")
    return "\n".join(lines)


def _short(detail: str) -> str:
    detail = detail.replace("|", "/").replace("InternalTorchDynamoError: ", "")
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
