"""Plain-text rendering of an ExplainReport (no dependencies)."""

from __future__ import annotations

import os
import textwrap
from typing import TYPE_CHECKING, Any

from .rank_lists import ranks_text

if TYPE_CHECKING:  # render only reads a report; report.py imports render
    from .report import ExplainReport


def _short(path: str) -> str:
    """A path as the user wrote it: relative to the working directory when inside it."""
    try:
        rel = os.path.relpath(path)
    except ValueError:
        return path
    return path if rel.startswith("..") else rel


WIDTH = 110


def table_rows(headers: list[str], rows: list[list[Any]], indent: str = "  ") -> tuple[list[str], list[list[str]]]:
    """(header lines, lines of each row): columns padded, the last one wrapped."""
    cells = [[str(c) for c in row] for row in rows]
    widths = [max([len(h), *(len(r[i]) for r in cells)]) for i, h in enumerate(headers)]
    widths[-1] = max(len(headers[-1]), min(widths[-1], WIDTH - sum(widths[:-1]) - 2 * len(widths)))

    def line(row: list[str]) -> list[str]:
        lead = indent + "".join(c.ljust(w) + "  " for c, w in zip(row[:-1], widths[:-1]))
        last = textwrap.wrap(row[-1], widths[-1], break_long_words=False, break_on_hyphens=False) or [""]
        return [(lead + last[0]).rstrip()] + [(" " * len(lead) + more).rstrip() for more in last[1:]]

    head = line(list(headers)) + [indent + "  ".join("-" * w for w in widths)]
    return head, [line(row) for row in cells]


def table(headers: list[str], rows: list[list[Any]], indent: str = "  ") -> list[str]:
    head, body = table_rows(headers, rows, indent)
    return head + [text for row in body for text in row]


def _detail(label: str, text: str, indent: str = "       ") -> list[str]:
    return textwrap.wrap(text, WIDTH, initial_indent=f"{indent}{label}: ", break_long_words=False,
                         break_on_hyphens=False, subsequent_indent=indent + " " * (len(label) + 2)) if text else []


def _where(file: str, line: int) -> str:
    return f"{_short(file)}:{line}"


def render(report: ExplainReport) -> str:
    return "\n".join(_lines(report)).rstrip() + "\n"


def _lines(r: ExplainReport, with_stock: bool = True) -> list[str]:
    who = f"rank {r.rank} of {r.world_size}, " if r.rank is not None else ""
    c = r.counts()
    out = [f"{r.mode} explain ({who}backend {r.backend}): {c['graphs']} graphs, {c['graph breaks']} graph breaks, "
           f"{c['recompiles']} recompiles, {c['compile failures']} compile failures, {c['collectives']} collectives"]
    if r.error:
        out.append(f"  the compiled program raised {r.error}")
    out += ["", f"Graph breaks ({len(r.breaks)})"]
    if not r.breaks:
        out.append("  none")
    head, body = table_rows(["#", "where", "function", "from", "type"],
                            [[i, b.where, b.function, b.origin, b.gb_type] for i, b in enumerate(r.breaks, 1)])
    out += head if r.breaks else []
    for b, row in zip(r.breaks, body):
        out += row
        if b.code:
            out.append(f"       code: {b.code}")
        out += _detail("inside", b.inside)
        out += _detail("effect", f"{b.effect} (compiles {', '.join(b.compile_ids)})")
        out += _detail("why", b.explanation)
        for hint in b.hints:
            out += _detail("hint", hint)
    out += ["", f"Recompiles ({len(r.recompiles)})"]
    out += table(["#", "function", "compile", "reason"],
                 [[i, f"{x.function} ({_where(x.file, x.line)})", f"{x.previous} -> {x.compile_id}", x.reason]
                  for i, x in enumerate(r.recompiles, 1)]) if r.recompiles else ["  none"]
    if r.failures:
        out += ["", f"Compile failures ({len(r.failures)}) - these frames ran eagerly"]
        out += table(["compile", "function", "error"],
                     [[f.compile_id, f"{f.function} ({_where(f.file, f.line)})", f.error] for f in r.failures])
    out += ["", f"Graphs ({len(r.graphs)})"]
    cached = r.backend == "inductor"  # only inductor consults the compile caches: else no cache column
    out += table(["graph", "function", "inputs", "outputs", "ops", "seen", "collectives"] + ["cache"] * cached,
                 [[g.compile_id, f"{g.function} ({_where(g.file, g.line)})", g.inputs, g.outputs, g.ops,
                   "+".join(g.stages), len(g.collectives)] + [_cache_summary(g.cache)] * cached
                  for g in r.graphs]) if r.graphs else ["  none"]
    notes = [f"  {g.compile_id}: {g.note}" for g in r.graphs if g.note]
    out += notes
    if cached:
        rows = [[g.compile_id, _CACHE_NAMES.get(o.cache, o.cache), o.stage or "both", _outcome(o)]
                for g in r.graphs for o in g.cache]
        out += ["", f"Compile caches ({len(rows)} lookups; cache dir {r.cache_dir}; compile once: "
                f"{r.compile_once or 'on'})"]
        out += table(["graph", "cache", "stage", "outcome"], rows) if rows else ["  none logged"]
    if r.precompile:
        out += _frames(r)
    rows = [[g.compile_id, x.stage, x.op, x.group, ranks_text(x.ranks), _shape(x.shape), x.dtype,
             "?" if x.bytes_per_rank is None else x.bytes_per_rank] for g in r.graphs for x in g.collectives]
    out += ["", f"Collectives ({len(rows)}; bytes each rank sends, ring algorithm)"]
    out += table(["graph", "stage", "op", "group", "ranks", "shape", "dtype", "bytes/rank"], rows) if rows \
        else ["  none"]
    out += _spmd(r)
    if r.rank_differences:
        out += ["", f"Differences between ranks ({len(r.rank_differences)})"]
        for d in r.rank_differences:
            out += textwrap.wrap(d, WIDTH, initial_indent="  - ", subsequent_indent="    ")
    if with_stock and r.stock is not None:
        out += ["", "Side by side with stock torch (same run, plugin uninstalled)"]
        mine, stock = r.counts(), r.stock.counts()
        out += table(["", r.mode, r.stock.mode], [[k, mine[k], stock[k]] for k in mine])
        if r.stock.error:
            out.append(f"  stock torch: the compiled program raised {r.stock.error}")
        out += ["", "-" * 40, ""] + _lines(r.stock, with_stock=False)
    return out


def _spmd(r: ExplainReport) -> list[str]:
    """spmd_types' types at each graph's inputs and outputs, and its calls
    with the collectives each became (nothing for a program without it)."""
    graphs = [g for g in r.graphs if g.spmd is not None]
    if not graphs:
        return []
    tensors = [(g, t) for g in graphs for t in (*g.spmd.inputs, *g.spmd.outputs)]
    axes = list(dict.fromkeys(a for _, t in tensors for a in t.types))
    specs = any(t.spec for _, t in tensors)
    modes = {g.spmd.checker for g in graphs}  # one mode for all graphs, else each graph's
    checkers = modes.pop() if len(modes) == 1 else ", ".join(f"{g.compile_id} {g.spmd.checker}" for g in graphs)
    out = ["", f"SPMD types (per mesh axis, as spmd_types' checker sees them; checker: {checkers})"]
    out += table(["graph", "tensor", "role", *axes] + ["PartitionSpec"] * specs,
                 [[g.compile_id, t.name, t.role, *(t.types.get(a, "-") for a in axes)] + [t.spec or "-"] * specs
                  for g, t in tensors]) if tensors else ["  none"]
    calls = [(g, c) for g in graphs for c in g.spmd.calls]
    out += ["", f"spmd_types calls ({len(calls)}; the collectives each became, bytes each rank sends)"]
    if not calls:
        return out + ["  none"]
    head, body = table_rows(["graph", "stage", "where", "call", "collectives"],
                            [[g.compile_id, c.stage, c.where, c.function,
                              ", ".join(f"{x.op} on {g.spmd.axes.get(x.group or '', x.group)} "
                                        f"({'?' if x.bytes_per_rank is None else x.bytes_per_rank} B)"
                                        for x in c.collectives)] for g, c in calls])
    out += head
    for (_, c), row in zip(calls, body):
        out += row
        if c.code:
            out.append(f"       code: {c.code}")
    return out


def _frames(r: ExplainReport) -> list[str]:
    """Each frame's origin under torch's precompile: traced here or loaded
    from Dynamo's cache, and what became of what was traced."""
    out = ["", f"Frames under torch's precompile ({len(r.frames)}; {r.precompile}, written by "
           "torch.compiler.save_cache_artifacts())"]
    if not r.frames:
        return out + ["  none"]
    head, body = table_rows(["function", "compiles", "origin", "package"],
                            [[f"{f.function} ({_where(f.file, f.line)})", ", ".join(f.compile_ids) or "-", f.origin,
                              _package(f)] for f in r.frames])
    out += head
    for f, row in zip(r.frames, body):
        out += row
        out += _detail("traced because", f.why)
        out += _detail(f.package, f.reason)
    return out


def _package(frame: Any) -> str:
    if not frame.package:
        return "-"
    return f"{frame.package} by {frame.declined_by}" if frame.declined_by else frame.package


_CACHE_NAMES = {"aot_autograd": "AOTAutograd", "fx_graph": "FX graph"}
_STAGE_SHORT = {"forward": "fw", "backward": "bw"}


def _outcome(o: Any) -> str:
    state = f"{o.state} ({o.source})" if o.source else o.state
    return f"{state}: {o.reason}" if o.reason else state


def _cache_summary(outcomes: list[Any]) -> str:
    """``AOT miss, FX fw miss, bw miss``: one graph's lookups in a table cell."""
    aot = [o.state for o in outcomes if o.cache == "aot_autograd"]
    fx = [f"{_STAGE_SHORT.get(o.stage, o.stage)} {o.state}".strip() for o in outcomes if o.cache == "fx_graph"]
    parts = [f"AOT {'/'.join(aot)}"] * bool(aot) + [f"FX {', '.join(fx)}"] * bool(fx)
    return ", ".join(parts) or "-"


def _shape(shape: list[Any]) -> str:
    if shape and isinstance(shape[0], list):
        return " ".join(_shape(s) for s in shape)
    return "(" + ", ".join(map(str, shape)) + ("," if len(shape) == 1 else "") + ")"
