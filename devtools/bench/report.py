"""Tables from a benchmark result: printed, written into docs/benchmarks.md
and (the summary) into the README."""

from __future__ import annotations

import math
import os
import re
import shlex
from typing import Any

from devtools.coverage.tables import replace_block
from dynamo_dist.diagnostics.caches import CACHE_NAMES

from .suite import errors
from .warm_clients import row_set
from .warm_start import outcome_text

DOC_PATH = "docs/benchmarks.md"  # the benchmark page, where every figure is
DOC_MARKER = "bench"
README_MARKER = "bench-summary"
# Warm start has blocks of its own (its own stamp): ``--only warm_start``
# rewrites them without touching the other sections' figures, and back.
WARM = "warm_start"
WARM_README_MARKER = "bench-warm-summary"
WARM_CLIENTS = "warm_start_clients"
SCALE = "scale"
ONCE = "compile_once"
ONCE_SCALE = "compile_once_scale"
PLANNER = "planner"
DEMO = "demo"
# Sections with blocks of their own (their own stamp, in the doc and the
# README): ``--only SECTION`` rewrites them without touching the others'
# figures, and back. Section -> (doc marker, README marker).
OWN_BLOCKS = {WARM: ("bench-warm", WARM_README_MARKER),
              WARM_CLIENTS: ("bench-warm-clients", "bench-warm-clients-summary"),
              SCALE: ("bench-scale", "bench-scale-summary"),
              ONCE: ("bench-compile-once", "bench-compile-once-summary"),
              ONCE_SCALE: ("bench-compile-once-scale", "bench-compile-once-scale-summary"),
              PLANNER: ("bench-planner", "bench-planner-summary"),
              DEMO: ("bench-demo", "bench-demo-summary")}
# The config field naming each section's client rows: a run of a named row
# set (``warm_clients.ROW_SETS``) writes the section's block with the set's
# name (``bench-warm-clients-spmd_types``) and no README line, leaving the
# full run's figures as they are.
ROWS_FIELD = {WARM_CLIENTS: "warm_clients", ONCE: "once_clients"}


def row_set_of(result: dict[str, Any], own: str | None) -> str | None:
    """The row set that section ``own`` of ``result`` ran, or None."""
    field = ROWS_FIELD.get(own)
    return None if field is None else row_set(result["meta"].get("config", {}).get(field))


def doc_marker(result: dict[str, Any], own: str | None) -> str:
    """The doc block section ``own`` (None: the main sections) of ``result`` writes."""
    if own is None:
        return DOC_MARKER
    named = row_set_of(result, own)
    return OWN_BLOCKS[own][0] if named is None else f"{OWN_BLOCKS[own][0]}-{named}"


# The compile-once page (beside DOC_PATH) holds a table of the cold jobs, which
# write_doc rewrites with the compile_once section.
ONCE_PAGE = "compile-once.md"
ONCE_PAGE_MARKER = "bench-compile-once-jobs"


def _f(value: Any, digits: int = 2) -> str:
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return "-"
    return f"{value:.{digits}f}"


def _table(head: list[str], rows: list[list[str]]) -> str:
    lines = ["| " + " | ".join(head) + " |", "|" + "|".join(" --- " for _ in head) + "|"]
    lines += ["| " + " | ".join(row) + " |" for row in rows]
    return "\n".join(lines)


def compile_table(rows: list[dict[str, Any]]) -> str:
    return _table(
        ["function / model", "backend", "stock (s)", "plugin (s)", "plugin / stock", "CPU: stock (s)",
         "CPU: plugin (s)", "CPU: plugin / stock", "rounds"],
        [[r["name"], r["backend"], _f(r.get("stock_s"), 3), _f(r.get("plugin_s"), 3), _f(r["ratio"]),
          _f(r["cpu"].get("stock_s"), 3), _f(r["cpu"].get("plugin_s"), 3), _f(r["cpu_ratio"]),
          str(r["repeats"])] for r in rows],
    )


def guard_table(rows: list[dict[str, Any]]) -> str:
    return _table(
        ["compiled function (CPU time)", "stock overhead (us)", "plugin overhead (us)", "plugin / stock",
         "stock call (us)", "plugin call (us)", "stock bare graph (us)", "plugin bare graph (us)", "calls x rounds"],
        [[r["name"], _f(r["overhead_us"]["stock"], 1), _f(r["overhead_us"]["plugin"], 1), _f(r["overhead_ratio"]),
          _f(r["full_us"]["stock"], 1), _f(r["full_us"]["plugin"], 1), _f(r["bare_us"]["stock"], 1),
          _f(r["bare_us"]["plugin"], 1), f"{r['calls']} x {r['repeats']}"] for r in rows],
    )


def _recompile_cell(side: dict[str, Any]) -> str:
    cell = f"{side['compiles']} compiles, {side['correct']}/{side['calls']} correct"
    if side["wrong"]:
        cell += f", {side['wrong']} wrong"
    if side["errors"]:
        cell += f", {side['errors']} raised ({side['first_error']})"
    return cell


def recompile_table(rows: list[dict[str, Any]]) -> str:
    return _table(
        ["workload", "calls", "distinct configurations", "stock", "plugin"],
        [[r["name"], str(r["calls"]), str(r["distinct_configs"]), _recompile_cell(r["stock"]),
          _recompile_cell(r["plugin"])] for r in rows],
    )


def step_table(rows: list[dict[str, Any]]) -> str:
    out = []
    skipped = []
    for r in rows:
        if "skipped" in r:
            skipped.append(f"- {r['comm']} {r['world']} ranks, {r['model']}: skipped ({r['skipped']})")
            continue
        for backend in r["backends"]:
            ms, ratio = r["ms"], r["ratio_to_handwritten"][backend]
            cpu = r["cpu_ratio_to_handwritten"][backend]
            out.append([
                r["model"], f"{r['comm']} x{r['world']}", backend,
                _f(ms["eager"]), _f(ms[f"stock {backend}"]), _f(ms[f"plugin {backend}"]),
                _f(ms[f"handwritten {backend}"]),
                _f(ratio["eager"]), _f(ratio["stock"]), _f(ratio["plugin"]),
                f"{_f(cpu['eager'])} / {_f(cpu['stock'])} / {_f(cpu['plugin'])}",
            ])
    table = _table(["model", "world", "backend", "eager DTensor (ms)", "stock (ms)", "plugin (ms)",
                    "hand-written (ms)", "eager / hw", "stock / hw", "plugin / hw",
                    "CPU: eager / stock / plugin over hw"], out) if out else ""
    return "\n\n".join(part for part in (table, "\n".join(sorted(set(skipped)))) if part)


def _world(r: dict[str, Any]) -> str:
    return {"fake": "fake x8, rank 3", "gloo": f"gloo x{r['ranks']}", "none": "none"}.get(r["world"], r["world"])


def _model(r: dict[str, Any]) -> str:
    return "control: mlp, not parallelized" if r["model"] == "control" else r["model"]


def _outcomes(runs: list[dict[str, dict[str, int]]]) -> str:
    """The cache outcomes of a side's runs (one text when every run agreed)."""

    texts = list(dict.fromkeys(outcome_text(c) for c in runs))
    return " / ".join(texts) if texts else "-"


def warm_table(rows: list[dict[str, Any]]) -> str:
    ran = [r for r in rows if "skipped" not in r]
    table = _table(
        ["model", "world", "cold: stock (s)", "cold: plugin (s)", "warm: stock (s)", "warm: plugin (s)",
         "warm: plugin / stock", "CPU: warm plugin / stock", "warm caches: stock", "warm caches: plugin",
         "runs (cold, warm)"],
        [[_model(r), _world(r), _f(r["cold"].get("stock_s")), _f(r["cold"].get("plugin_s")),
          _f(r["warm"].get("stock_s")), _f(r["warm"].get("plugin_s")), _f(r["warm"]["ratio"]),
          _f(r["warm_cpu"]["ratio"]), _outcomes(r["caches"]["warm"].get("stock", [])),
          _outcomes(r["caches"]["warm"].get("plugin", [])), f"{r['cold_repeats']}, {r['warm_repeats']}"]
         for r in ran],
    ) if ran else ""
    return "\n\n".join(p for p in (table, _bypass_notes(ran), _skipped(rows)) if p)


def _bypass_notes(rows: list[dict[str, Any]]) -> str:
    """Why a cache bypassed graphs in the warm runs (as explain words it),
    once per reason, with the rows and sides it held for."""

    where: dict[str, dict[str, list[str]]] = {}
    for r in rows:
        for side in ("stock", "plugin"):
            for reason in r.get("bypass_reasons", {}).get("warm", {}).get(side, []):
                where.setdefault(reason, {}).setdefault(_model(r), []).append(side)
    lines = []
    for reason, models in where.items():
        cache, _, words = reason.partition(": ")
        held = "; ".join(f"{model} ({', '.join(sides)})" for model, sides in models.items())
        lines.append(f"- {CACHE_NAMES.get(cache, cache)} cache: {words} — {held}")
    return "Bypasses in the warm runs, by reason:\n\n" + "\n".join(lines) if lines else ""


def _skipped(rows: list[dict[str, Any]]) -> str:
    return "\n".join(f"- {_model(r)}: skipped ({r['skipped']})" for r in rows if "skipped" in r)


def warm_releases_table(results: list[dict[str, Any]]) -> str:
    """The warm start on every release (one ``--only warm_start`` result per
    torch, without --warm-gloo), one row per model: the benchmark page's
    table of the releases, which the tests check against the saved results."""
    out = []
    for result in results:
        torch_ = result["meta"]["machine"]["torch"].split("+")[0]
        rows = [r for r in _ok(result.get(WARM, [])) if "skipped" not in r]
        control = next((r for r in rows if r["model"] == "control"), None)
        for r in rows:
            if r is control:
                continue
            out.append([torch_, r["model"], _f(r["warm"]["stock_s"]), _f(r["warm"]["plugin_s"]),
                        f"{_f(r['warm']['ratio'])}, {_f(r['warm_cpu']['ratio'])}",
                        f"{_f(control['warm']['stock_s'])}, {_f(control['warm']['plugin_s'])}" if control else "-",
                        *(_outcomes(r["caches"]["warm"].get(side, [])) for side in ("stock", "plugin")),
                        f"{_f(r['cold']['stock_s'], 1)}, {_f(r['cold']['plugin_s'], 1)}"])
    return _table(["torch", "model", "warm: stock (s)", "warm: plugin (s)", "plugin / stock (wall, CPU)",
                   "control: stock, plugin (s)", "warm caches: stock", "warm caches: plugin",
                   "cold: stock, plugin (s)"], out)


def _full_hit(runs: list[dict[str, dict[str, int]]]) -> bool:
    return bool(runs) and all(c[o] == 0 for run in runs for c in run.values() for o in ("miss", "bypass"))


def warm_summary_rows(rows: list[dict[str, Any]]) -> list[list[str]]:
    out = []
    for r in rows:
        if "skipped" in r:
            continue
        warm = r["warm"]
        figure = (f"plugin / stock {warm['ratio']:.2f} (plugin {warm['plugin_s']:.2f} s, stock "
                  f"{warm['stock_s']:.2f} s); plugin {_outcomes(r['caches']['warm'].get('plugin', []))}")
        if r["model"] == "control":
            # Nothing distributed: the row shows what a full hit costs.
            out.append([f"warm start, {_model(r)}", figure])
            continue
        out.append([f"warm start, {_model(r)}, {_world(r)}, inductor", figure])
    return out


def _kib(n: float) -> str:
    return f"{n / 1024:.1f}"


def _pair(values: dict[str, float], digits: int = 1) -> str:
    return f"{_f(values.get('stock'), digits)} / {_f(values.get('plugin'), digits)}"


def scale_table(rows: list[dict[str, Any]]) -> str:
    worlds = [r for r in rows if "blocks" not in r]
    functions = list(worlds[0]["guard_overhead_us"]) if worlds else []
    return _table(
        ["ranks", "mesh", *(f"guards: {f} (us, stock / plugin)" for f in functions),
         "trace + compile (CPU s, stock / plugin)", "fingerprints (1st / next trace)",
         "key bytes (stock / plugin)", "kept KiB (stock / plugin)", "plugin tables (meshes, baked calls)",
         "explain KiB"],
        [[f"{r['world']:,}", "x".join(map(str, r["mesh"])), *(_pair(r["guard_overhead_us"][f]) for f in functions),
          _pair(r["compile_s"], 3), f"{r['fingerprints_first_trace']} / {r['fingerprints_next_trace']}",
          f"{r['key_bytes']['stock']:,} / {r['key_bytes']['plugin']:,}",
          f"{_kib(r['memory']['stock']['kept_bytes'])} / {_kib(r['memory']['plugin']['kept_bytes'])}",
          f"{r['memory']['plugin']['known_fingerprints']}, {r['memory']['plugin']['baked_calls']}",
          _kib(r["explain_bytes"])] for r in worlds],
    )


def scale_blocks_table(rows: list[dict[str, Any]]) -> str:
    return _table(
        ["ranks", "blocks", "frames compiled (stock / plugin)", "compile (CPU s, stock / plugin)",
         "one block's guard overhead (us, stock / plugin)"],
        [[f"{r['world']:,}", str(r["blocks"]), _pair(r["frames"], 0), _pair(r["compile_s"], 2),
          _pair(r["overhead_us"])] for r in rows if "blocks" in r],
    )


def scale_slopes(rows: list[dict[str, Any]]) -> list[tuple[str, str, dict[str, float]]]:
    """(what, mesh dims, {side: cost at the largest world / at the smallest})."""
    out = []
    worlds = [r for r in rows if "blocks" not in r]
    for ndim in sorted({len(r["mesh"]) for r in worlds}):
        same = sorted((r for r in worlds if len(r["mesh"]) == ndim), key=lambda r: r["world"])
        if len(same) < 2:
            continue
        lo, hi = same[0], same[-1]
        span = f"{ndim}-D, {lo['world']:,} -> {hi['world']:,} ranks"
        for fn in lo["guard_overhead_us"]:
            out.append((f"guard overhead, {fn}", span,
                        {s: hi["guard_overhead_us"][fn][s] / lo["guard_overhead_us"][fn][s]
                                                        for s in ("stock", "plugin")}))
        out.append(("trace + compile", span, {s: hi["compile_s"][s] / lo["compile_s"][s] for s in ("stock", "plugin")}))
    return out


def scale_summary_rows(rows: list[dict[str, Any]]) -> list[list[str]]:
    return [[f"scale: {what}, {span}", f"largest / smallest: stock x{r['stock']:.2f}, plugin x{r['plugin']:.2f}"]
            for what, span, r in scale_slopes(rows)]


def _planner_rows(rows: list[dict[str, Any]]) -> list[tuple[str, dict[str, Any]]]:
    """(mesh as ``4x2x2``, row) for each redistribution of each mesh."""
    return [("x".join(map(str, mesh["mesh"])), row) for mesh in rows for row in mesh.get("rows", [])]


def planner_table(rows: list[dict[str, Any]]) -> str:
    return _table(
        ["mesh", "redistribution", "steps (greedy / min-cost)", "planner, greedy (CPU ms, stock / plugin)",
         "planner, min-cost (CPU ms, stock / plugin)", "planner calls per compile",
         "compile, greedy (CPU s, stock / plugin)", "compile, min-cost (CPU s, stock / plugin)"],
        [[mesh, r["redistribution"], f"{r['steps']['greedy']} / {r['steps']['min_cost']}",
          _pair(r["greedy"]["planner_ms"]), _pair(r["min_cost"]["planner_ms"]),
          _f(r["min_cost"]["planner_calls"]["plugin"], 0), _pair(r["greedy"]["compile_s"], 2),
          _pair(r["min_cost"]["compile_s"], 2)] for mesh, r in _planner_rows(rows)],
    )


def _demo_runs(rows: list[dict[str, Any]]) -> list[tuple[dict[str, Any], dict[str, Any]]]:
    """(row, its run of median time) for each demo row with a run."""
    out = []
    for r in rows:
        runs = sorted(r.get("runs", []), key=lambda run: run["seconds"])
        if runs:
            out.append((r, runs[(len(runs) - 1) // 2]))
    return out


def demo_table(rows: list[dict[str, Any]]) -> str:
    """The summary the demo printed in its run of median time, and every
    run's time and exit status."""
    parts = []
    for r, median_run in _demo_runs(rows):
        command = " ".join(["python -m dynamo_dist demo", *r["args"]])
        times = ", ".join(f"{run['seconds']:.0f} s (exit {run['status']})" for run in r["runs"])
        parts.append(f"`{command}`: {times}; the summary of the run of median time:\n\n" + _table(
            ["", "stock", "dynamo_dist", "verdict"],
            [[name, *cells, *[""] * (3 - len(cells))] for name, cells in median_run["summary"].items()]))
    return "\n\n".join(parts)


def demo_summary_rows(rows: list[dict[str, Any]]) -> list[list[str]]:
    return [[f"demo ({' '.join(['python -m dynamo_dist demo', *r['args']])})",
             f"{r['seconds']:.0f} s (median of {len(r['runs'])}); exit status "
             f"{'/'.join(str(s) for s in sorted({run['status'] for run in r['runs']}))}"] for r, _ in _demo_runs(rows)]


def demo_headline(row: dict[str, Any], run: dict[str, Any], cores: int) -> str:
    """The README's line of the demo: its time, and what its summary said."""
    cells = run["summary"]
    once_row = next((name for name in cells if name.startswith("compile once: compiles per graph")), "")
    ranks = re.search(r"\((\d+) ranks\)", once_row)

    def pair(name: str) -> str:
        stock, plugin = (cells.get(name) or ["-", "-"])[:2]
        return f"{plugin} with dynamo_dist, {stock} with stock"

    training = [name.split(": ", 1)[1] for name in cells if name.startswith("training: ") and
                name != "training: first step, incl. compile (slowest rank)"]
    unequal = [name for name in training if not cells[f"training: {name}"][2].startswith("equal")]
    same = ("equal in every training row" if not unequal else "different in " + ", ".join(unequal))
    return (f"The demo (`python -m dynamo_dist demo`{f', {ranks.group(1)} gloo ranks' if ranks else ''} on CPU): "
            f"{row['seconds']:.0f} s on {cores} cores (median of {len(row['runs'])} runs). Training the TP block, "
            f"stock and dynamo_dist are {same}; compiles per graph under compile once: "
            f"{pair(once_row)}; a restart's cache lookups that hit: {pair('restart: cache lookups that hit')}; "
            f"a batch split over another group: {pair('a batch split over another group')}; a sequence-sharded "
            f"activation returned as tokens: {pair('a sequence-sharded activation returned as tokens')}.")


def _planner_span(rows: list[dict[str, Any]], planner: str, side: str) -> str:
    return _range([r[planner]["planner_ms"][side] for _, r in rows])


def planner_summary_rows(rows: list[dict[str, Any]]) -> list[list[str]]:
    out = []
    for mesh in rows:
        found = _planner_rows([mesh])
        if not found:
            continue
        ratio = _range([r["min_cost"]["planner_ms"]["plugin"] / r["min_cost"]["planner_ms"]["stock"]
                        for _, r in found if r["min_cost"]["planner_ms"]["stock"] > 0])
        out.append([f"planning a redistribution across every dim, {found[0][0]} mesh",
                    f"min-cost {_planner_span(found, 'min_cost', 'stock')} ms of CPU per compile (greedy "
                    f"{_planner_span(found, 'greedy', 'stock')} ms), stock; plugin / stock {ratio}"])
    return out


ONCE_SIDES = ("stock", "plugin", "compile_once")


def _median(values: list[float]) -> float:
    values = sorted(values)
    return float("nan") if not values else (values[len(values) // 2] if len(values) % 2 else
                                            (values[len(values) // 2 - 1] + values[len(values) // 2]) / 2)


def _loading_cpu(run: dict[str, Any]) -> float:
    """CPU seconds of the ranks that loaded the graph instead of compiling it."""
    return sum(r["cpu"] for r in run["per_rank"] if r["compile_once"].get("loaded"))


def once_figures(r: dict[str, Any]) -> dict[str, float]:
    """A job row's medians: per side compiles per graph, summed CPU, slowest
    first step; the CPU bound (stock / W + loading) and the ratios."""
    runs = r["runs"]
    out = {}
    for side in ONCE_SIDES:
        out[f"{side}_compiles"] = _median(r["compiles_per_graph"].get(side, []))
        out[f"{side}_cpu"] = _median([x["cpu"] for x in runs.get(side, [])])
        out[f"{side}_wall"] = _median([x["wall"] for x in runs.get(side, [])])
    out["loading_cpu"] = _median([_loading_cpu(x) for x in runs.get("compile_once", [])])
    out["cpu_bound"] = out["stock_cpu"] / r["ranks"] + out["loading_cpu"]
    out["cpu_ratio"] = r["cpu"]["ratio"]
    out["wall_ratio"] = r["wall"]["ratio"]
    return out


def once_table(rows: list[dict[str, Any]]) -> str:
    jobs = [r for r in rows if r.get("kind") == "job" and "skipped" not in r]
    table = _table(
        ["program", "ranks", "FX compiles per graph (stock / plugin / once)", "CPU s summed (stock / plugin / once)",
         "once: CPU bound (stock / W + loading)", "slowest first step s (stock / plugin / once)",
         "once / stock: CPU, first step", "jobs per side"],
        [[_once_program(r), str(r["ranks"]), " / ".join(_f(f[f"{s}_compiles"], 1) for s in ONCE_SIDES),
          " / ".join(_f(f[f"{s}_cpu"], 1) for s in ONCE_SIDES), _f(f["cpu_bound"], 1),
          " / ".join(_f(f[f"{s}_wall"], 1) for s in ONCE_SIDES), f"{_f(f['cpu_ratio'])}, {_f(f['wall_ratio'])}",
          str(r["repeats"])] for r in jobs for f in [once_figures(r)]],
    ) if jobs else ""
    fleet = [r for r in rows if r.get("kind") == "fleet"]
    fleet_rows = []
    for r in fleet:
        for side, got in r.get("sides", {}).items():
            b = got["new_host"]
            fleet_rows.append([f"{side}, gloo x{r['ranks']}", _f(got["job_a"]["wall"], 1), _f(b["wall"], 1),
                               f"{b['hits']}/{b['lookups']}", _f(b["cpu"], 1)])
    fleet_table = ("A new host with the fleet cache (job A cold, then job B on new empty local cache dirs):\n\n"
                   + _table(["side", "job A: slowest first step s", "new host: slowest first step s",
                             "new host: cache hits", "new host: CPU s summed"], fleet_rows)) if fleet_rows else ""
    skipped = "\n".join(f"- {'fleet cache' if r.get('kind') == 'fleet' else r['model']}: skipped ({r['skipped']})"
                        for r in rows if "skipped" in r)
    failed = "\n".join(f"- {_once_program(r)}: {side} fails, and is not run again: `{line}`"
                       for r in jobs for side, line in r.get("failed", {}).items())
    sims = [r for r in rows if r.get("kind") == "coordination"]
    sim_table = ("The coordination alone (processes on one TCPStore, simulated compiles):\n\n" + _table(
        ["processes", "graphs", "compile s each", "artifact KiB", "compiles per graph",
         "median / last rank holding the bytes after the publish (s)"],
        [[str(r["processes"]), str(r["keys"]), _f(r["compile_s"], 1), _kib(r["payload_bytes"]),
          str(r["compiles_per_key"]), f"{_f(r['median_load_after_publish_s'], 3)} / "
          f"{_f(r['last_load_after_publish_s'], 3)}"] for r in sims])) if sims else ""
    return "\n\n".join(p for p in (table, failed, fleet_table, skipped, sim_table) if p)


def once_page_table(rows: list[dict[str, Any]]) -> str:
    """The compile-once page's table: each cold job, its compiles per graph
    and what compiling once took against stock, in summed CPU time and in
    the slowest rank's wall time."""
    jobs = [r for r in rows if r.get("kind") == "job" and "skipped" not in r]
    return _table(
        ["cold job (gloo, inductor)", "ranks", "FX compiles per graph (stock / once)", "summed CPU, once / stock",
         "slowest first step (wall), once / stock", "jobs per side"],
        [[_once_program(r), str(r["ranks"]), f"{_f(f['stock_compiles'], 1)} / {_f(f['compile_once_compiles'], 1)}",
          _f(f["cpu_ratio"]), _f(f["wall_ratio"]), str(r["repeats"])] for r in jobs for f in [once_figures(r)]],
    )


def _once_program(r: dict[str, Any]) -> str:
    return f"TP block ({r['model']}, {r['size']})" if r.get("size") not in (None, "-") else r["model"]


def once_summary_rows(rows: list[dict[str, Any]]) -> list[list[str]]:
    out = []
    for r in rows:
        if r.get("kind") == "job" and "skipped" not in r:
            f = once_figures(r)
            stock = "fails" if "stock" in r.get("failed", {}) else _f(f["stock_compiles"], 1)
            out.append([f"compile once, {_once_program(r)}, gloo x{r['ranks']}, inductor, cold job",
                        f"FX compiles per graph: stock {stock}, once "
                        f"{_f(f['compile_once_compiles'], 1)}; CPU summed once / stock {_f(f['cpu_ratio'])} "
                        f"(bound {_f(f['cpu_bound'] / f['stock_cpu'])}); slowest first step once / stock "
                        f"{_f(f['wall_ratio'])}"])
        elif r.get("kind") == "fleet" and "skipped" not in r:
            once, stock = r["sides"]["compile_once"]["new_host"], r["sides"]["stock"]["new_host"]
            out.append([f"compile once, new host with the fleet cache, gloo x{r['ranks']}",
                        f"once: {once['hits']}/{once['lookups']} lookups hit, first step {once['wall']:.1f} s; "
                        f"stock: {stock['hits']}/{stock['lookups']} hit, {stock['wall']:.1f} s"])
        elif r.get("kind") == "coordination":
            out.append([f"compile once, coordination, {r['processes']} processes",
                        f"{r['compiles_per_key']} compile per graph; last rank holds the bytes "
                        f"{r['last_load_after_publish_s']:.2f} s after the publish"])
    return out


def scale_once_rows(groups: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The compile_once_scale section's rows (each task holds a group)."""
    return [r for g in groups for r in g.get("rows", [])]


def _mb(n: float | None) -> str:
    return "-" if n is None else f"{n / 1e6:,.0f}" if n >= 10e6 else f"{n / 1e6:.1f}"


def _via(r: dict[str, Any]) -> str:
    return " / ".join(f"{r['via'].get(v, 0)}" for v in ("store", "host"))


def scale_once_table(groups: list[dict[str, Any]]) -> str:
    rows = [r for r in scale_once_rows(groups) if not r.get("fault")]
    rows.sort(key=lambda r: (r["payload_bytes"], r["ranks"], r["protocol"] != "old"))
    main = _table(
        ["ranks (hosts of 8)", "payload MB", "protocol", "last rank holds the bytes (s)", "last rank released (s)",
         "store served MB (bound: (hosts + 1) x payload)", "loads via store / host", "store peak MB",
         "store after: keys, bytes", "requests per rank", "requests/s while waiting", "runs"],
        [[f"{r['ranks']:,} ({r['hosts']:,})", _mb(r["payload_bytes"]), r["protocol"], _f(r["last_rank_s"]),
          _f(r.get("last_released_s")), f"{_mb(r['store_bytes_served'])} ({_mb(r['bound_bytes'])})", _via(r),
          _f(r["store_peak_mb"], 0), f"{r['store_keys_after']}, {r['store_bytes_after']:,}",
          _f(r["requests_per_rank"], 1), f"{r['requests_per_s_waiting']:,.0f}", str(r.get("repeats", 1))]
         for r in rows])
    faults = [r for r in scale_once_rows(groups) if r.get("fault")]
    if not faults:
        return main
    fault_table = _table(
        ["fault", "ranks", "outcomes (ranks)", "died", "last rank done (s, from)", "store served MB",
         "store peak MB", "store after: keys, bytes"],
        [[r["fault"], f"{r['ranks']:,}", ", ".join(f"{k} {v:,}" for k, v in sorted(r["decisions"].items())),
          str(r["died"]), f"{_f(r['last_rank_s'])} ({r['from']})", _mb(r["store_bytes_served"]),
          _f(r["store_peak_mb"], 0), f"{r['store_keys_after']}, {r['store_bytes_after']:,}"] for r in faults])
    return main + "\n\nFaults (the protocol compile once runs):\n\n" + fault_table


def _scale_pairs(groups: list[dict[str, Any]]) -> list[tuple[dict[str, Any], dict[str, Any] | None]]:
    rows = [r for r in scale_once_rows(groups) if not r.get("fault")]
    new = [r for r in rows if r["protocol"] == "new"]
    old = {(r["ranks"], r["payload_bytes"]): r for r in rows if r["protocol"] == "old"}
    return [(r, old.get((r["ranks"], r["payload_bytes"]))) for r in new]


def scale_once_summary_rows(groups: list[dict[str, Any]]) -> list[list[str]]:
    out = []
    for new, old in _scale_pairs(groups):
        text = (f"last rank {_f(new['last_rank_s'])} s after the publish, store served {_mb(new['store_bytes_served'])}"
                f" MB (bound {_mb(new['bound_bytes'])}), peak {_f(new['store_peak_mb'], 0)} MB, left "
                f"{new['store_bytes_after']:,} bytes")
        if old is not None:
            text += (f"; before: {_f(old['last_rank_s'])} s, {_mb(old['store_bytes_served'])} MB, peak "
                     f"{_f(old['store_peak_mb'], 0)} MB, left {old['store_bytes_after']:,} bytes")
        out.append([f"compile once at scale, {new['ranks']:,} ranks, {_mb(new['payload_bytes'])} MB", text])
    for r in scale_once_rows(groups):
        if r.get("fault"):
            out.append([f"compile once at scale, fault {r['fault']}, {r['ranks']:,} ranks",
                        f"{', '.join(f'{k} {v:,}' for k, v in sorted(r['decisions'].items()))}; last rank done "
                        f"{_f(r['last_rank_s'])} s after the {r['from']}"])
    return out


def scale_once_headline(groups: list[dict[str, Any]]) -> str | None:
    pairs = _scale_pairs(groups)
    if not pairs:
        return None
    big = max(pairs, key=lambda p: (p[0]["ranks"], -p[0]["payload_bytes"]))[0]
    compared = [(n, o) for n, o in pairs if o is not None]
    line = (f"Compile once at {big['ranks']:,} simulated ranks (hosts of 8, a real TCPStore): the store served "
            f"{big['store_bytes_served'] / big['payload_bytes']:,.0f} x the payload for {big['hosts']:,} hosts, "
            f"{big['requests_per_rank']:.1f} requests per rank, and kept {big['store_bytes_after']:,} bytes after")
    if compared:
        n, o = max(compared, key=lambda p: p[0]["ranks"])
        line += (f"; at {n['ranks']:,} ranks {n['store_bytes_served'] / n['payload_bytes']:,.0f} x the payload "
                 f"against {o['store_bytes_served'] / o['payload_bytes']:,.0f} x before")
    return line + "."


def _ok(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [r for r in rows if "error" not in r]


def tables(result: dict[str, Any]) -> str:
    """All sections present in ``result``, as markdown tables under headings
    (failed tasks listed after them)."""
    result = {k: _ok(v) if isinstance(v, list) else v for k, v in result.items()}
    parts = []
    if result.get("compile_time"):
        parts.append("### 1. Trace + compile time (median of cold compiles)\n\n"
                     + compile_table(result["compile_time"]))
    if result.get("guard_cost"):
        parts.append("### 2. Guard cost per call (median; overhead = compiled call - bare graph call)\n\n"
                     + guard_table(result["guard_cost"]))
    if result.get("recompiles"):
        parts.append("### 3. Recompiles and correctness\n\n" + recompile_table(result["recompiles"]))
    if result.get("step_time"):
        parts.append("### 4. Step time (median ms per training step; ratios to the hand-written version)\n\n"
                     + step_table(result["step_time"]))
    if result.get(WARM):
        parts.append("### 5. Warm start (first step of a new process, forward + backward, inductor; median s)\n\n"
                     + warm_table(result[WARM]))
    if result.get(SCALE):
        parts.append("### 6. Scale (fake worlds, rank W-1 of W; medians, stock / plugin)\n\n"
                     + scale_table(result[SCALE]) + "\n\nPer-block compile of N identical TP blocks:\n\n"
                     + scale_blocks_table(result[SCALE]))
    if result.get(ONCE):
        parts.append("### 8. Compile once per job (a cold job under compile_on_one_rank, inductor, each rank its "
                     "own empty cache dir; medians)\n\n" + once_table(result[ONCE]))
    if result.get(ONCE_SCALE):
        parts.append("### 10. Compile once at scale (one graph, simulated ranks on a real TCPStore; medians of the "
                     "runs)\n\n" + scale_once_table(result[ONCE_SCALE]))
    if result.get(PLANNER):
        parts.append("### 9. Planning a redistribution across every mesh dim (fake world of 16 ranks, one cold "
                     "compile per sample, aot_eager; medians)\n\n" + planner_table(result[PLANNER]))
    if result.get(DEMO):
        parts.append("### 11. The demo (`python -m dynamo_dist demo`, as a user runs it)\n\n"
                     + demo_table(result[DEMO]))
    if result.get(WARM_CLIENTS):
        parts.append("### 7. Warm start, clients (first training step of a new process on gloo ranks, inductor; "
                     "median s)\n\n" + warm_table(result[WARM_CLIENTS]))
    return "\n\n".join(parts)


def stamp(result: dict[str, Any]) -> str:
    meta, m = result["meta"], result["meta"]["machine"]
    load = ""
    if "load_average_start" in m:
        load = (f"; load average (1/5/15 min) {'/'.join(map(str, m['load_average_start']))} at the start, "
                f"{'/'.join(map(str, m.get('load_average_end', [])))} at the end")
    gpus = ", ".join(m["gpus"]) or "none"
    return "\n".join([
        f"- date: {meta['date']}",
        f"- machine: {m['cpu']}, {m['cores']} cores, GPUs: {gpus}{load}",
        f"- torch {m['torch']}, Python {m['python']}, dynamo_dist {meta['dynamo_dist']}, {m['platform']}",
        f"- command: `{meta['command']}` ({meta['seconds']:.0f} s)",
    ])


def _range(values: list[float]) -> str:
    values = [v for v in values if not math.isnan(v)]
    if not values:
        return "-"
    lo, hi = min(values), max(values)
    return f"{lo:.2f}" if abs(hi - lo) < 0.005 else f"{lo:.2f}-{hi:.2f}"


def summary(result: dict[str, Any]) -> str:
    """The summary table: one line per measured case, its figure. Compile
    time leads with CPU time (steady on a busy machine, equal to wall time
    on an idle one); step time with wall time (it includes waiting for
    peers)."""
    result = {k: _ok(v) if isinstance(v, list) else v for k, v in result.items()}
    rows = []
    ct = result.get("compile_time", [])
    for kind, label in (("queries", "query functions (eager)"), ("model", "TP models, all backends")):
        wall = [r["ratio"] for r in ct if r["kind"] == kind]
        cpu = [r["cpu_ratio"] for r in ct if r["kind"] == kind]
        if cpu:
            rows.append([f"trace + compile time, {label}", f"plugin / stock: CPU {_range(cpu)} (wall {_range(wall)})"])
    for r in result.get("guard_cost", []):
        o = r["overhead_us"]
        rows.append([f"guard overhead per call, {r['name']}",
                     f"stock {o['stock']:.1f} us, plugin {o['plugin']:.1f} us (x{r['overhead_ratio']:.2f})"])
    for r in result.get("recompiles", []):
        s, p = r["stock"], r["plugin"]
        rows.append([f"recompiles, {r['name']} ({r['calls']} calls, {r['distinct_configs']} configurations)",
                     f"stock {s['compiles']} compiles, {s['wrong'] + s['errors']} wrong; "
                     f"plugin {p['compiles']} compiles, {p['wrong'] + p['errors']} wrong"])
    for r in result.get("step_time", []):
        if "skipped" in r:
            continue
        for backend, ratio in r["ratio_to_handwritten"].items():
            cpu = r.get("cpu_ratio_to_handwritten", {}).get(backend, {})
            rows.append([f"step time, {r['model']}, {r['comm']} x{r['world']}, {backend}",
                         f"plugin / hand-written {ratio['plugin']:.2f} (CPU {_f(cpu.get('plugin'))}; "
                         f"stock {ratio['stock']:.2f}, eager {ratio['eager']:.2f})"])
    rows += warm_summary_rows(result.get(WARM, []))
    rows += warm_summary_rows(result.get(WARM_CLIENTS, []))
    rows += scale_summary_rows(result.get(SCALE, []))
    rows += once_summary_rows(result.get(ONCE, []))
    rows += scale_once_summary_rows(result.get(ONCE_SCALE, []))
    rows += planner_summary_rows(result.get(PLANNER, []))
    rows += demo_summary_rows(result.get(DEMO, []))
    return _table(["benchmark", "figure"], rows)


def failures(result: dict[str, Any]) -> str:

    failed = errors(result)
    return "### Failed tasks\n\n" + "\n".join(f"- {line.splitlines()[0]}" for line in failed) if failed else ""


def text(result: dict[str, Any]) -> str:
    """What the command prints."""
    if standalone_tool(result):
        return standalone_block(result) + "\n"
    return "\n\n".join(p for p in (tables(result), "### Summary\n\n" + summary(result), failures(result)) if p) + "\n"


DOC_SKELETON = """# Benchmarks

Regenerate everything between the markers with one command (it also rewrites
the README's summary table):

    python -m devtools bench --json benchmarks/results/latest.json \\
        --write-doc docs/benchmarks.md --update-readme README.md

<!-- bench:begin -->
<!-- bench:end -->
"""


def _select(result: dict[str, Any], own: str | None) -> dict[str, Any]:
    """``result`` with only the section ``own`` (one of ``OWN_BLOCKS``), or
    (None) only the sections of the main block."""
    return {k: v for k, v in result.items() if k == "meta" or (k if k in OWN_BLOCKS else None) == own}


def _has(result: dict[str, Any]) -> bool:
    return any(k != "meta" for k in result)


def doc_block(result: dict[str, Any], note: str = "") -> str:
    parts = ["## Latest run", stamp(result)]
    if note:
        parts.append(note)
    parts += ["### Summary", summary(result), tables(result), failures(result)]
    parts = [p for p in parts if p]
    return "\n\n".join(parts)


def own_doc_block(result: dict[str, Any], note: str = "") -> str:
    parts = [stamp(result), note, summary(result), tables(result), failures(result)]
    return "\n\n".join(p for p in parts if p)


def _ensure_block(text_: str, marker: str) -> str:
    if f"<!-- {marker}:begin -->" not in text_:
        text_ = text_.rstrip("\n") + f"\n\n<!-- {marker}:begin -->\n<!-- {marker}:end -->\n"
    return text_


# The standalone tools' saved results (not the suite's): each is shown on the
# benchmark page in a block of its own, named after its file
# (``result-<file stem>``), made by the tool's own table.
STANDALONE = ("devtools.bench.precompile", "devtools.bench.guard_cost_loaded", "devtools.clients.restart",
              "devtools.clients.check_cost")


def standalone_tool(result: dict[str, Any]) -> str | None:
    """The standalone tool whose command wrote ``result``, or None (the suite,
    or a result that names no command)."""
    words = shlex.split(result["meta"].get("command", ""))
    return words[2] if words[:2] == ["python", "-m"] and words[2] in STANDALONE else None


def standalone_marker(result: dict[str, Any]) -> str:
    words = shlex.split(result["meta"]["command"])
    path = words[words.index("--json") + 1]
    return "result-" + os.path.splitext(os.path.basename(path))[0]


def standalone_block(result: dict[str, Any]) -> str:
    """The stamp and the tool's tables of a standalone result."""
    tool = standalone_tool(result)
    if tool == "devtools.bench.precompile":
        from . import precompile

        tables_ = [precompile.table(result["row"])]
        tables_ += [f"{name}: skipped: {row['skipped']}" if "skipped" in row else precompile.table(row)
                    for name, row in result["clients"].items()]
    elif tool == "devtools.bench.guard_cost_loaded":
        from . import guard_cost_loaded

        tables_ = [guard_cost_loaded.table(result)]
    elif tool == "devtools.clients.check_cost":
        from devtools.clients import check_cost

        tables_ = [check_cost.table(result["rows"])]
    else:
        from devtools.clients import restart

        tables_ = [restart.table(result["rows"])]
    return "\n\n".join([stamp(result), *tables_])


def write_doc(path: str, result: dict[str, Any], note: str = "") -> None:
    """Rewrite the generated blocks of ``path`` (created from a skeleton if
    missing) for the sections ``result`` holds: the warm-start section its
    own block, the others the main one; the hand-written text around the
    markers is kept. A compile_once result also rewrites the cold jobs'
    table of the compile-once page beside ``path`` (``ONCE_PAGE``). A
    standalone tool's result rewrites its own block (``standalone_marker``)."""

    text_ = open(path).read() if os.path.exists(path) else DOC_SKELETON
    if standalone_tool(result):
        marker = standalone_marker(result)
        text_ = replace_block(_ensure_block(text_, marker), marker, standalone_block(result))
        with open(path, "w") as f:
            f.write(text_)
        return
    for own, block in ((None, doc_block), *((own, own_doc_block) for own in OWN_BLOCKS)):
        part = _select(result, own)
        if _has(part):
            marker = doc_marker(result, own)
            text_ = replace_block(_ensure_block(text_, marker), marker, block(part, note))
    os.makedirs(os.path.dirname(path) or ".", exist_ok=True)
    with open(path, "w") as f:
        f.write(text_)
    if row_set_of(result, ONCE) is None:
        _write_once_page(os.path.join(os.path.dirname(path), ONCE_PAGE), result)


def _write_once_page(path: str, result: dict[str, Any]) -> None:
    """Rewrite the cold jobs' table of the compile-once page, when ``result``
    holds the compile_once section and the page holds the block."""
    rows = _ok(result.get(ONCE, []))
    if not any(r.get("kind") == "job" and "skipped" not in r for r in rows) or not os.path.exists(path):
        return
    with open(path) as f:
        text_ = f.read()
    if f"<!-- {ONCE_PAGE_MARKER}:begin -->" not in text_:
        return
    with open(path, "w") as f:
        f.write(replace_block(text_, ONCE_PAGE_MARKER, once_page_table(rows)))


def _spread(values: list[float]) -> float:
    """Half the range of ``values`` relative to their median (how far one
    sample may sit from the figure)."""
    values = [v for v in values if v > 0]
    return (max(values) - min(values)) / 2 / _median(values) if len(values) > 1 else float("nan")


def _step_rounds(r: dict[str, Any], backend: str) -> list[float]:
    """The per-round plugin / stock step-time ratios of a row."""
    plugin, stock = r["samples_ms"][f"plugin {backend}"], r["samples_ms"][f"stock {backend}"]
    return [a / b for a, b in zip(plugin, stock)]


def headlines(result: dict[str, Any]) -> list[str]:
    """The README's lines for the sections ``result`` holds: the figure each
    section is about, in a sentence; the tables stay on the benchmark page."""
    result = {k: _ok(v) if isinstance(v, list) else v for k, v in result.items()}
    lines = []
    guards = [r["overhead_ratio"] for r in result.get("guard_cost", [])]
    if guards:
        lines.append(f"Guard overhead per call: plugin / stock x{min(guards):.2f}-x{max(guards):.2f} over "
                     f"{len(guards)} compiled programs (the same facts and the process groups too, each checked "
                     "by identity first).")
    cpu = [r["cpu_ratio"] for r in result.get("compile_time", [])]
    if cpu:
        lines.append(f"Trace + compile: plugin / stock {_range(cpu)} in CPU time (queries and TP models, "
                     "every backend).")
    recompiles = result.get("recompiles", [])
    if recompiles:
        wrong = sum(r["stock"]["wrong"] + r["stock"]["errors"] for r in recompiles)
        ours = sum(r["plugin"]["wrong"] + r["plugin"]["errors"] for r in recompiles)
        exact = all(r["plugin"]["compiles"] == r["distinct_configs"] for r in recompiles)
        lines.append(f"Recompiles: {'one compile per configuration' if exact else 'more compiles than configurations'}"
                     f", {ours} wrong answers (stock: {wrong} stale answers from reused graphs).")
    steps = [(r, b) for r in result.get("step_time", []) if "skipped" not in r for b in r["ratio_to_handwritten"]]
    if steps:
        plugin = [r["ratio_to_handwritten"][b]["plugin"] for r, b in steps]
        stock = [r["ratio_to_handwritten"][b]["stock"] for r, b in steps]
        rounds = [_step_rounds(r, b) for r, b in steps]
        noise = _median([_spread(x) for x in rounds])
        beyond = sum(abs(_median(x) - 1) > _spread(x) for x in rounds)
        verdict = ("row by row the two differ by less than the run-to-run noise" if not beyond else
                   f"in {beyond} of {len(rounds)} rows they differ by more than the run-to-run noise")
        lines.append(f"Step time over a hand-written local-tensor version: plugin {_range(plugin)}, stock "
                     f"{_range(stock)} (the same graphs: {verdict}, a median spread of {noise * 100:.0f}% with "
                     "2-4 ranks sharing 2 cores).")
    warm = [r for r in result.get(WARM, []) if "skipped" not in r and r["model"] != "control"]
    if warm:
        full = sum(_full_hit(r["caches"]["warm"].get("plugin", [])) for r in warm)
        stock = sum(_full_hit(r["caches"]["warm"].get("stock", [])) for r in warm)
        lines.append(f"Warm start (a new process's first step from the caches another filled): plugin / stock "
                     f"{_range([r['warm']['ratio'] for r in warm])} on the TP MLP and transformer block "
                     f"({', '.join(sorted({_world(r) for r in warm}))}); every lookup a hit in {full} of "
                     f"{len(warm)} rows with the plugin, in {stock} with stock.")
    clients = [r for r in result.get(WARM_CLIENTS, []) if "skipped" not in r]
    if clients:
        ratios = [r["warm"]["ratio"] for r in clients]
        full = sum(_full_hit(r["caches"]["warm"].get("plugin", [])) for r in clients)
        lines.append(f"Warm start of torchtitan and HF transformers training steps: plugin / stock {_range(ratios)} "
                     f"over {len(clients)} rows; every lookup a hit in {full} of them.")
    slopes = scale_slopes(result.get(SCALE, []))
    if slopes:
        plugin = [v["plugin"] for _, _, v in slopes]
        stock = [v["stock"] for _, _, v in slopes]
        lines.append(f"From 8 to 65,536 ranks the plugin's guard and compile costs change by x{min(plugin):.2f}-"
                     f"x{max(plugin):.2f} (stock's by x{min(stock):.2f}-x{max(stock):.2f}).")
    jobs = [r for r in result.get(ONCE, []) if r.get("kind") == "job" and "skipped" not in r]
    blocks = [(r, once_figures(r)) for r in jobs if r.get("size") not in (None, "-")]
    clients = [once_figures(r) for r in jobs if r.get("size") in (None, "-")]
    if blocks:
        def each(key: str, digits: int = 2, prefix: str = "") -> str:
            return " and ".join(prefix + _f(f[key], digits) for _, f in blocks)
        worlds = " and ".join(str(r["ranks"]) for r, _ in blocks)
        lines.append(f"Compile once, a cold job of the TP block on {worlds} ranks: "
                     f"{each('compile_once_compiles', 1)} compiles per graph (stock {each('stock_compiles', 1)}), "
                     f"summed compile CPU {each('cpu_ratio', prefix='x')} of stock's, "
                     f"slowest first step {each('wall_ratio', prefix='x')}.")
    if clients:
        lines.append(f"Compile once on {len(clients)} client programs (torchtitan, transformers; 2 ranks): "
                     f"{_range([f['compile_once_compiles'] for f in clients])} compiles per graph "
                     f"(stock {_range([f['stock_compiles'] for f in clients])}), summed compile CPU "
                     f"x{_range([f['cpu_ratio'] for f in clients])} of stock's.")
    planned = _planner_rows(result.get(PLANNER, []))
    if planned:
        meshes = sorted({mesh for mesh, _ in planned}, key=len)
        ratio = _range([r["min_cost"]["planner_ms"]["plugin"] / r["min_cost"]["planner_ms"]["stock"]
                        for _, r in planned if r["min_cost"]["planner_ms"]["stock"] > 0])
        lines.append(f"Tracing a redistribution across every dim of a {meshes[0]} to {meshes[-1]} mesh, DTensor's "
                     f"min-cost planner spends {_planner_span(planned, 'min_cost', 'stock')} ms of CPU per compile "
                     f"(greedy {_planner_span(planned, 'greedy', 'stock')} ms); with the plugin x{ratio} of that.")
    scaled = scale_once_headline(result.get(ONCE_SCALE, []))
    if scaled:
        lines.append(scaled)
    for r, run in _demo_runs(result.get(DEMO, [])):
        lines.append(demo_headline(r, run, result["meta"]["machine"]["cores"]))
    for r in result.get(ONCE, []):
        if r.get("kind") == "fleet" and "skipped" not in r:
            once, stock = r["sides"]["compile_once"]["new_host"], r["sides"]["stock"]["new_host"]
            lines.append(f"A new host with the fleet cache (Redis): {once['hits']}/{once['lookups']} lookups hit "
                         f"(stock {stock['hits']}/{stock['lookups']}).")
    return lines


def update_readme(path: str, result: dict[str, Any], doc: str = DOC_PATH) -> None:
    """Rewrite the README's blocks (``bench-summary``, and a section's own
    for the sections that have one) for the sections ``result`` holds: the
    headline lines, linking to the benchmark page ``doc`` (a path from the
    current directory, linked relative to ``path``), where the tables are."""

    if standalone_tool(result):
        return  # a standalone tool's figures have no README block
    doc_link = os.path.relpath(doc, os.path.dirname(os.path.abspath(path))).replace(os.sep, "/")

    with open(path) as f:
        text_ = f.read()
    m = result["meta"]["machine"]
    load = f", load average {m['load_average_start'][0]}" if m.get("load_average_start") else ""
    for own, marker in ((None, README_MARKER), *((own, markers[1]) for own, markers in OWN_BLOCKS.items())):
        part = _select(result, own)
        if _has(part) and row_set_of(result, own) is None:
            # The machine and torch, not the date: the README states what holds, the
            # benchmark page (and the saved result) when it was measured.
            bullets = "\n".join(f"- {line}" for line in headlines(part))
            body = f"{bullets}\n\n({m['cpu']}, {m['cores']} cores{load}, torch {m['torch']}: [{doc_link}]({doc_link}))"
            text_ = replace_block(text_, marker, body)
    with open(path, "w") as f:
        f.write(text_)
