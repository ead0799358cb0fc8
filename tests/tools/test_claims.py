"""What the README and the docs state outside their generated blocks,
checked against the saved results it comes from (``benchmarks/results/``).

A figure in prose either sits in a generated block (``tests/tools/
test_docs_site.py`` regenerates each from its JSON) or is checked here: each
test reads the JSON a sentence comes from, computes what the sentence says
and finds the sentence, with that figure, on its page. A result regenerated
with other figures fails the test until the sentence is rewritten; a claim
about stock torch's faults is checked by running stock instead
(``tests/spawned/test_stock_faults.py``, the demo's test, the coverage
tables). The tests read the JSON generically (by row and field, never a
figure written here), so a later regeneration stays checked.
"""

from __future__ import annotations

import json
import statistics
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
RESULTS = ROOT / "benchmarks" / "results"


def _load(name: str) -> dict:
    with open(RESULTS / name) as f:
        return json.load(f)


def _page(name: str) -> str:
    """The page's text with its whitespace (line breaks, indents) collapsed."""
    return " ".join((ROOT / name).read_text().split())


def says(page: str, sentence: str) -> None:
    """``page`` holds ``sentence`` (whitespace aside)."""
    wanted = " ".join(sentence.split())
    assert wanted in _page(page), f"{page} should say: {wanted!r}"


def _range(values, digits: int = 2) -> str:
    lo, hi = min(values), max(values)
    return f"{lo:.{digits}f}" if f"{lo:.{digits}f}" == f"{hi:.{digits}f}" else f"{lo:.{digits}f}-{hi:.{digits}f}"


def _ok(rows):
    return [r for r in rows if "error" not in r and "skipped" not in r]


# ---------------------------------------------------------------------------
# latest.json: the default sections.


def test_latest_reading_guards_compile_recompiles():
    latest = _load("latest.json")
    guards = _ok(latest["guard_cost"])
    assert guards and all(r["overhead_us"]["plugin"] < r["overhead_us"]["stock"] for r in guards)
    says("docs/benchmarks.md", "the plugin's is below stock's on every compiled function")
    cpu = [r["cpu_ratio"] for r in _ok(latest["compile_time"])]
    assert all(0.7 <= c <= 1.3 for c in cpu) and any(c > 1 for c in cpu), cpu
    says("docs/benchmarks.md", "the plugin's CPU time is within a few tenths of stock's either way, above it on "
                               "some rows")
    rows = _ok(latest["recompiles"])
    assert all(r["plugin"]["compiles"] == r["distinct_configs"] and r["plugin"]["correct"] == r["calls"]
               for r in rows)
    queries = next(r for r in rows if r["name"] == "queries")
    assert queries["stock"]["compiles"] < queries["distinct_configs"] and queries["stock"]["wrong"] > 0
    says("docs/benchmarks.md", "the plugin compiles once per configuration and answers like eager on every call; "
                               "stock compiles fewer times than there are configurations and returns stale "
                               "answers on `queries`")


# ---------------------------------------------------------------------------
# warm_start_clients_2.15.0.json: the clients' warm start.


def _full_hit(runs) -> bool:
    return bool(runs) and all(c["miss"] == 0 and c["bypass"] == 0 for run in runs for c in run.values())


def test_clients_warm_start_reading():
    rows = _ok(_load("warm_start_clients_2.15.0.json")["warm_start_clients"])
    assert rows and all(_full_hit(r["caches"]["warm"]["plugin"]) for r in rows)
    says("docs/benchmarks.md", "Every lookup of every plugin warm run hits, on every row")
    assert all(r["warm"]["plugin_s"] < r["warm"]["stock_s"] for r in rows)
    says("docs/benchmarks.md", "The plugin's warm first step is shorter than stock's on every row")
    # Stock's misses: every FX lookup of a graph that holds a mesh misses; it hits somewhere only on
    # the rows named (no mesh in some graph).
    hits_somewhere = {r["model"] for r in rows if any(run["fx_graph"]["hit"] for run in r["caches"]["warm"]["stock"])}
    assert hits_somewhere <= {"torchtitan FSDP2, no AC", "torchtitan SimpleFSDP, FSDP",
                              "torchtitan deepseek_v3 MoE, EP=2", "torchtitan CP=2, SDPA math"}, hits_somewhere


# ---------------------------------------------------------------------------
# planner_2.15.0.json: the redistribute planner's cost.


def test_planner_reading():
    meshes = _load("planner_2.15.0.json")["planner"]
    rows = [(tuple(m["mesh"]), r) for m in meshes for r in m["rows"]]
    assert all(r["greedy"]["planner_ms"][side] < 1.0 for _, r in rows for side in ("stock", "plugin"))
    says("docs/benchmarks.md", "Greedy: under a millisecond of CPU per compile on every mesh")
    by_dims = {}
    for mesh, r in rows:
        by_dims.setdefault(len(mesh), []).append(r["min_cost"]["planner_ms"]["stock"])
    medians = [statistics.median(by_dims[d]) for d in sorted(by_dims)]
    assert medians == sorted(medians) and len(medians) >= 3, medians
    for m in meshes:
        worst = max(m["rows"], key=lambda r: r["min_cost"]["planner_ms"]["stock"])
        assert worst["redistribution"].startswith("Partial"), (m["mesh"], worst["redistribution"])
    four_d = [r for mesh, r in rows if len(mesh) == 4]
    assert all(r["min_cost"]["planner_ms"]["stock"] / 1000 > r["min_cost"]["compile_s"]["stock"] / 2 for r in four_d
               if r["redistribution"].startswith("Partial"))
    says("docs/benchmarks.md", "costs more on each larger mesh, Partial to Replicate the most on every mesh; on 4-D "
                               "the compile of this one-redistribution function is mostly planning")
    calls = {r[p]["planner_calls"][side] for _, r in rows for p in ("greedy", "min_cost")
             for side in ("stock", "plugin")}
    assert calls == {3.0}, calls
    says("docs/benchmarks.md", "(3 planner calls per compile here;")
    assert all(r["steps"]["greedy"] == r["steps"]["min_cost"] for _, r in rows)
    says("docs/benchmarks.md", "The plans have as many steps as the greedy ones here.")
    ratios = [r["min_cost"]["planner_ms"]["plugin"] / r["min_cost"]["planner_ms"]["stock"] for _, r in rows]
    assert max(ratios) <= 1.05, ratios
    says("docs/benchmarks.md", "the same plans, in at most about stock's min-cost planning time")


# ---------------------------------------------------------------------------
# compile_once_2.15.0.json: cold jobs, the fleet cache, the coordination.


def _once_jobs() -> dict:
    from devtools.bench import report

    rows = _ok(_load("compile_once_2.15.0.json")["compile_once"])
    return {(r["model"], r["ranks"]): report.once_figures(r) for r in rows if r.get("kind") == "job"}


TP_BLOCK = "transformer"
CLIENTS = ("transformers Llama TP=2", "torchtitan FSDP2, no AC", "torchtitan SimpleFSDP, FSDP",
           "torchtitan TP=2, partial_dtensor, no AC")


def test_compile_once_reading():
    jobs = _once_jobs()
    once = {key: f["compile_once_compiles"] for key, f in jobs.items()}
    assert {key for key, c in once.items() if c == 1.0} == {k for k in jobs if k[0] != CLIENTS[3]}, once
    assert once[(CLIENTS[3], 2)] > 1.0
    says("docs/compile-once.md", "torchtitan's TP=2 loss branches on the rank, so its loss graphs differ between "
                                 "the ranks and each rank compiles its own")
    assert all(f["cpu_ratio"] < 1 for f in jobs.values())
    above = {k[0] for k, f in jobs.items() if f["compile_once_cpu"] > f["cpu_bound"]}
    assert above == {CLIENTS[0], CLIENTS[3]}, above
    says("docs/benchmarks.md", "below 1 on every row, near its bound (stock's summed CPU / W plus what the loading "
                               "ranks spent; the table's column), above it on HF Llama and torchtitan TP=2")
    slower = {k[0] for k, f in jobs.items() if f["wall_ratio"] > 1}
    assert slower == {CLIENTS[1], CLIENTS[3]} and all(jobs[k]["wall_ratio"] < 1 for k in jobs if k[0] == TP_BLOCK)
    says("docs/benchmarks.md", "torchtitan FSDP2 and TP=2 are slower than stock in wall time while their summed CPU "
                               "is below stock's")
    says("docs/compile-once.md", "the slowest rank's first step took longer than stock's for torchtitan FSDP2 and "
                                 "TP=2")
    blocks = [f for k, f in jobs.items() if k[0] == TP_BLOCK]
    assert all(f["plugin_cpu"] < f["stock_cpu"] and f["plugin_wall"] < f["stock_wall"] for f in blocks)
    clients = {k[0]: f for k, f in jobs.items() if k[0] != TP_BLOCK}
    assert {n for n, f in clients.items() if f["plugin_wall"] > f["stock_wall"]} == set(CLIENTS[1:])
    assert all(f["plugin_cpu"] > f["stock_cpu"] for f in clients.values())
    says("docs/benchmarks.md", "on the client rows its first step is slower than stock's on torchtitan FSDP2, "
                               "SimpleFSDP and TP=2, and its summed CPU is higher on all four")


def test_compile_once_fleet_and_coordination():
    rows = _ok(_load("compile_once_2.15.0.json")["compile_once"])
    fleet = next(r for r in rows if r.get("kind") == "fleet")
    once, stock = fleet["sides"]["compile_once"]["new_host"], fleet["sides"]["stock"]["new_host"]
    assert once["hits"] == once["lookups"] > 0 and stock["hits"] == 0
    assert once["wall"] < stock["wall"]
    says("docs/benchmarks.md", "A new host hits every lookup** from the fleet cache (stock none")
    says("docs/compile-once.md", f"A new host with the fleet cache hit {once['hits']} of {once['lookups']} lookups "
                                 f"(stock {stock['hits']} of {stock['lookups']})")
    coordination = [r for r in rows if r.get("kind") == "coordination"]
    assert coordination and all(r["compiles_per_key"] == 1 for r in coordination)
    says("docs/benchmarks.md", "1 compile per graph at every process count")


def test_compile_once_page_figures():
    jobs = _once_jobs()
    tp2 = jobs[(CLIENTS[3], 2)]
    says("docs/compile-once.md", f"each rank compiles its own ({tp2['compile_once_compiles']:.1f} compiles per graph)")
    walls = {f"{jobs[(name, 2)]['wall_ratio']:.2f}" for name in (CLIENTS[1], CLIENTS[3])}
    assert len(walls) == 1, walls
    says("docs/compile-once.md", f"for torchtitan FSDP2 and TP=2 ({walls.pop()} in wall time")
    # "compiles none": a new host's graphs all hit; its kernels are built (the page says so beside it).
    fleet = next(r for r in _ok(_load("compile_once_2.15.0.json")["compile_once"]) if r.get("kind") == "fleet")
    new_host = fleet["sides"]["compile_once"]["new_host"]
    assert new_host["compiles_per_graph"] == 0 and new_host["hits"] == new_host["lookups"]
    says("docs/compile-once.md", "A new host of a later job finds every graph in the remote cache and compiles none "
                                 "(on CPU it still builds their kernels")


# ---------------------------------------------------------------------------
# docs/index.md: where the plugin is not faster.


def test_index_where_the_plugin_is_not_faster():
    latest = _load("latest.json")
    guards = _ok(latest["guard_cost"])
    assert all(r["overhead_us"]["plugin"] < r["overhead_us"]["stock"] for r in guards)
    says("docs/index.md", "its guards cost less than stock's per call")
    steps = [(r, b) for r in _ok(latest["step_time"]) for b in r["ratio_to_handwritten"]]
    signs = {r["ratio_to_handwritten"][b]["plugin"] > r["ratio_to_handwritten"][b]["stock"] for r, b in steps}
    assert signs == {True, False}, "both directions"
    from devtools.bench import report

    assert "row by row the two differ by less than the run-to-run noise" in " ".join(report.headlines(latest))
    says("docs/index.md", "the plugin's and stock's are within the run-to-run noise of each other, in both directions")
    cpu = [r["cpu_ratio"] for r in _ok(latest["compile_time"])]
    assert any(c > 1 for c in cpu) and all(0.7 <= c <= 1.3 for c in cpu), cpu
    says("docs/index.md", "about stock's CPU time, above it on some of the benchmark's functions and models")
    controls = [r for v in ("2.11.0", "2.12.1", "2.13.0", "2.14.1", "2.15.0")
                for r in _ok(_load(f"warm_start_{v}.json")["warm_start"]) if r["model"] == "control"]
    assert controls and all(0.85 <= r["warm"]["ratio"] <= 1.15 for r in controls), [r["warm"]["ratio"]
                                                                                     for r in controls]
    says("docs/index.md", "a warm start of a program with nothing distributed: about stock's")
    says("docs/index.md", "compiling once per job takes less summed CPU than stock's, but the slowest rank's first "
                          "step of torchtitan FSDP2 and TP=2 takes longer than stock's in wall time; without compile "
                          "once the first step takes longer than stock's on torchtitan FSDP2, SimpleFSDP and TP=2 and "
                          "more summed CPU on all four client programs")


# ---------------------------------------------------------------------------
# The README's and docs/index.md's faults of stock, against the coverage page's
# generated table (tests/tools/test_stock_baseline.py keeps it equal to a fresh
# measurement on the running release) and the warm-start results.


def _stock_diff() -> dict[str, dict[str, str]]:
    text = (ROOT / "docs" / "coverage.md").read_text()
    block = text.split("<!-- stock-diff:begin -->")[1].split("<!-- stock-diff:end -->")[0]
    rows = [[c.strip() for c in line.strip().strip("|").split("|")] for line in block.strip().splitlines()]
    head = rows[0]
    return {row[0]: dict(zip(head[1:], row[1:])) for row in rows[2:]}


NEWEST = "stock torch 2.15.0"


def test_the_faults_of_stock_the_readme_names():
    table = _stock_diff()

    def stock(case: str) -> str:
        assert table[case]["dynamo_dist"] == "ok", (case, table[case])
        return table[case][NEWEST]

    assert stock("different process group passed").startswith("stale answer")
    says("README.md", "**stale answers:** compiled code reused for another process group returns the old group's "
                      "size and ranks")
    says("docs/index.md", "compiled code reused for another process group returns stale answers")
    assert stock("same-shape mesh, other groups (DTensor)").startswith("stale graph")
    says("README.md", "**stale graphs:** a DTensor on a same-shape mesh over other groups runs collectives on the old "
                      "groups")
    for case in ("mesh.get_group / get_all_groups", "_StridedShard.split_factor", "mesh ndim changes across calls",
                 "sharded view returned (aot_eager)", "sharded view passed in (aot_eager)"):
        assert stock(case).startswith("crash"), case
    says("README.md", "**crashes:** `mesh.get_group()`, `get_all_groups()`, `_StridedShard.split_factor`, a mesh whose "
                      "`ndim` changes, a sharded view (`x.view(-1, h)` of a sequence-sharded activation) returned from "
                      "or passed into a compiled function")


def test_stock_misses_the_compile_caches_the_readme_says():
    for v in ("2.12.1", "2.13.0", "2.14.1", "2.15.0"):
        rows = [r for r in _ok(_load(f"warm_start_{v}.json")["warm_start"]) if r["model"] != "control"]
        assert rows and not any(_full_hit(r["caches"]["warm"]["stock"]) for r in rows), v
        assert all(_full_hit(r["caches"]["warm"]["plugin"]) for r in rows), v
    blocks = {k: f for k, f in _once_jobs().items() if k[0] == TP_BLOCK}
    assert blocks and all(f["stock_compiles"] == ranks for (_, ranks), f in blocks.items())
    says("README.md", "stock's compile-cache keys hold each process's mesh hash, so every restart and every rank "
                      "compiles again")
    reasons = " ".join(reason for r in _ok(_load("warm_start_clients_2.15.0.json")["warm_start_clients"])
                       for reason in r["bypass_reasons"]["warm"].get("stock", []))
    assert "selective activation checkpointing" in reasons and "custom torch.autograd.Function" in reasons
    says("README.md", "selective activation checkpointing and custom `autograd.Function`s keep graphs out of the "
                      "AOTAutograd cache")


# ---------------------------------------------------------------------------
# docs/coverage.md: the counts of its generated table.

def _counts(column: str) -> dict[str, int]:
    from collections import Counter

    return dict(Counter(row[column].split(" (")[0] for row in _stock_diff().values()))


def test_coverage_counts_are_the_tables():
    """The counts under the coverage page's table (its generated
    ``stock-diff-counts`` block) are the table's, column by column, and the
    plugin's column is every case's expectation."""
    from devtools.coverage.cases import CASES

    plugin = _counts("dynamo_dist")
    assert plugin == {c: sum(case.expect == c for case in CASES) for c in {case.expect for case in CASES}}
    text = (ROOT / "docs/coverage.md").read_text()
    block = text.split("<!-- stock-diff-counts:begin -->", 1)[1].split("<!-- stock-diff-counts:end -->", 1)[0]
    said = {}
    for line in block.strip().splitlines():
        column, counts = line.removeprefix("- ").split(": ", 1)
        said[column] = {words: int(n) for n, words in (part.split(" ", 1) for part in counts.split(", "))}
    columns = ["dynamo_dist"] + [f"stock torch {v}" for v in ("2.11.0", "2.12.1", "2.13.0", "2.14.1", "2.15.0")]
    assert sorted(said) == sorted(columns)
    for column in columns:
        assert said[column] == _counts(column), column


# ---------------------------------------------------------------------------
# restart_2.15.0.json and precompile_2.15.0.json: restarts under torch's precompile.

FAMILIES = {"TP": "torchtitan TP=2", "FSDP2": "torchtitan FSDP2", "dp x tp": "torchtitan dp2 x tp2",
            "SimpleFSDP": "torchtitan SimpleFSDP", "EP": "torchtitan deepseek_v3 MoE, EP=2",
            "CP": "torchtitan CP=2", "HF Llama": "transformers Llama TP=2"}


def _restarts(side: str) -> list[dict]:
    return [r for r in _load("restart_2.15.0.json")["rows"] if r["side"] == side and "skipped" not in r]


def test_client_restarts_under_precompile():
    plugin, stock = _restarts("plugin"), _restarts("stock")
    for family, prefix in FAMILIES.items():
        assert any(r["row"].startswith(prefix) for r in plugin), family
    loads = [r for r in plugin if r["row"].startswith(("torchtitan", FAMILIES["HF Llama"]))]
    for r in plugin:  # trains like eager (inductor's against eager's ops)
        job2 = r["job2"]
        assert job2["error"] is None, r["row"]
        assert job2["loss_diff"] < 1e-4 and job2["grad_diff"] < 1e-3, (r["row"], job2["loss_diff"], job2["grad_diff"])
    assert all(r["job2"]["traced"] == 0 for r in loads)  # every frame loads
    spmd = _load("restart_spmd_2.15.0.json")["rows"]
    assert {r["row"] for r in spmd} == {"torchtitan TP=2, spmd_types, no AC",
                                        "torchtitan TP=2, spmd_types type-checked, no AC"}
    for r in spmd:
        job2 = r["job2"]
        if r["side"] == "plugin":
            assert job2["error"] is None and job2["traced"] == 0, r["row"]
            assert job2["loss_diff"] < 1e-4 and job2["grad_diff"] < 1e-3, r["row"]
        else:  # stock traces again or fails
            assert (job2["traced"] or 0) > 0 or job2["error"], r["row"]
    says("README.md", "with dynamo_dist a restart of torchtitan (TP, FSDP2, dp x tp, SimpleFSDP, EP, CP, and its "
                      "default spmd_types backend with type checks off and on) and HF Llama loads every frame and "
                      "trains like eager")
    says("docs/guards.md", "With the plugin, every torchtitan configuration and the HF Llama load every frame on "
                           "every rank in job 2 and train like eager")
    moe = {r["row"]: r["job2"]["traced"] for r in plugin + stock if r["row"].startswith("transformers")
           and not r["row"].startswith(FAMILIES["HF Llama"])}
    assert moe and all(traced and traced > 0 for traced in moe.values()), moe
    says("README.md", "(HF's MoE models trace again, as with stock)")
    says("docs/guards.md", "the HF Qwen3-MoE and Mixtral trace their frames again in job 2, as stock does")
    titan = [r for r in stock if r["row"].startswith("torchtitan")]
    assert titan and all((r["job2"]["traced"] or 0) > 0 or r["job1"]["error"] or r["job2"]["error"] for r in titan)
    failed = [r["row"] for r in titan if r["job1"]["error"] or r["job2"]["error"]]
    assert failed == ["torchtitan TP=2, full_dtensor, no AC"], failed
    full = next(r for r in titan if r["row"] == failed[0])
    assert "PackageError" in full["job1"]["error"] and "timed out" in full["job2"]["error"], full
    no_ac = {r["side"]: r for r in plugin + stock if r["row"] == "torchtitan TP=2, partial_dtensor, no AC"}
    assert no_ac["plugin"]["job2"]["traced"] == 0
    assert no_ac["stock"]["job2"]["traced"] == no_ac["stock"]["job1"]["traced"]
    says("docs/guards.md", "Stock loads neither frame (both packages are bypassed when saved)")
    says("docs/guards.md", "(TP=2 on `full_dtensor` fails to save in job 1, `PackageError`, and its job 2 does not "
                           "finish)")
    llama = [r for r in stock if r["row"].startswith(FAMILIES["HF Llama"])]
    assert llama and all("NameError" in (r["job2"]["error"] or "") for r in llama), llama
    says("README.md", "and traces frames again or fails in every torchtitan configuration measured")
    says("docs/guards.md", "Stock, the same way, traces again or fails in every torchtitan configuration measured")


def test_precompile_restart_figures():
    saved = _load("precompile_2.15.0.json")
    rows = [saved["row"], *(r for r in saved["clients"].values() if "skipped" not in r)]
    assert len(rows) == 3
    ratios = [r["ratios"]["plugin+precompile / plugin"] for r in rows]
    assert all(r is not None for r in ratios)
    assert all(set(r["traced"]["plugin+precompile"]) == {0} for r in rows)
    says("README.md", f"timed on the TP MLP, HF Llama and torchtitan TP=2, its first step is {_range(ratios)} of "
                      "the plugin's warm first step")


def test_stock_faults_on_2_13_to_2_15_the_releases_page_names():
    table = _stock_diff()
    cases = ("different process group passed", "_StridedShard.split_factor", "mesh.get_group / get_all_groups",
             "same-shape mesh, other groups (DTensor)")
    for case in cases:
        statuses = {table[case][f"stock torch {v}"].split(" (")[0] for v in ("2.13.0", "2.14.1", "2.15.0")}
        assert len(statuses) == 1 and statuses.pop() in ("stale answer", "crash", "stale graph"), case
    assert "AttributeError" in table["_StridedShard.split_factor"]["stock torch 2.14.1"]
    says("docs/torch-releases.md", "Stock torch 2.13-2.15 keeps the same faults on all three (the stale process-group "
                                   "answers, the `_StridedShard.split_factor` and `get_all_groups` crashes, the stale "
                                   "DTensor graph on a same-shape mesh with other groups); only its error texts differ "
                                   "(on 2.14.1 `split_factor` is an internal Dynamo `AttributeError`)")


def test_the_releases_where_stock_answers_for_another_group():
    row = _stock_diff()["different process group passed"]
    stale = [v for v in ("2.11.0", "2.12.1", "2.13.0", "2.14.1", "2.15.0")
             if row[f"stock torch {v}"].startswith("stale answer")]
    assert stale == ["2.12.1", "2.13.0", "2.14.1", "2.15.0"], stale
    says("docs/guards.md", "Stock torch 2.12-2.15 gets the first of these wrong: it reuses a graph compiled for one "
                           "process group with another and returns the old group's answers")


# ---------------------------------------------------------------------------
# guard_cost_loaded_<torch>.json: the call of a loaded frame.


def test_the_call_of_a_loaded_frame():
    for version in ("2.15.0", "2.13.0"):
        rows = {r["name"]: r for r in _load(f"guard_cost_loaded_{version}.json")["rows"]}
        for name, r in rows.items():
            ratio = r["ratios"]["plugin loaded / plugin traced"]
            assert ratio is not None and 0.75 <= ratio <= 1.33, (version, name, ratio)  # "about what it costs"
            assert set(r["traced"]["plugin loaded"]) == {0} and not r["errors"].get("plugin loaded"), (version, name)
        dtensor = rows["DTensor + mesh"]["ratios"]["plugin loaded / stock loaded"]
        assert dtensor is not None and dtensor < 1, (version, dtensor)
    says("docs/benchmarks.md", "A loaded frame costs the plugin about what the traced frame costs**, and the DTensor "
                               "frame less than stock's loaded frame, on both releases")
    says("docs/guards.md", "a loaded call costs about what the traced one costs, and a loaded DTensor frame less than "
                           "stock's loaded one")
    new, old = (_load(f"guard_cost_loaded_{v}.json")["rows"] for v in ("2.15.0", "2.13.0"))
    config_new = next(r for r in new if r["name"] == "config entry")
    assert not config_new["traced"]["stock loaded"] and config_new["errors"]["stock loaded"], config_new
    assert all(e.startswith("AssertionError: Unexpected type <class 'object'>")
               for e in config_new["errors"]["stock loaded"])
    config_old = next(r for r in old if r["name"] == "config entry")
    assert set(config_old["traced"]["stock loaded"]) == {0} and not config_old["errors"].get("stock loaded")
    says("docs/benchmarks.md", "On 2.15 stock loads the config frame in none of its processes")


# ---------------------------------------------------------------------------
# scale_2.15.0.json: 8 to 65,536 ranks.


def _scale():
    rows = _ok(_load("scale_2.15.0.json")["scale"])
    worlds = [r for r in rows if "guard_overhead_us" in r]
    blocks = [r for r in rows if "blocks" in r]
    return worlds, blocks


def test_scale_reading():
    worlds, blocks = _scale()
    one_d = sorted((r for r in worlds if len(r["mesh"]) == 1), key=lambda r: r["world"])
    stock = [r["guard_overhead_us"]["one DTensor"]["stock"] for r in one_d]
    plugin = [r["guard_overhead_us"]["one DTensor"]["plugin"] for r in one_d]
    assert stock == sorted(stock) and max(plugin) / min(plugin) < 1.5, (stock, plugin)
    says("docs/benchmarks.md", "on a 1-D mesh its guard on one DTensor costs more with every larger world")
    compile_stock = [r["compile_s"]["stock"] for r in one_d]
    compile_plugin = [r["compile_s"]["plugin"] for r in one_d]
    assert compile_stock[-1] > 1.3 * compile_stock[0] and max(compile_plugin) / min(compile_plugin) < 1.5
    says("docs/benchmarks.md", "stock's grows with the world on a 1-D mesh")
    keys = [r["key_bytes"]["plugin"] for r in worlds]
    assert max(keys) < 1000 and one_d[-1]["key_bytes"]["stock"] > 100 * one_d[0]["key_bytes"]["stock"]
    says("docs/benchmarks.md", "a mesh adds a few hundred bytes to the plugin's key on every world")
    for side in ("stock", "plugin"):
        kept = [r["memory"][side]["kept_bytes"] for r in worlds]
        assert max(kept) / min(kept) < 1.5, (side, kept)
    assert all(r["memory"]["plugin"]["live_meshes"] <= 1 and r["memory"]["plugin"]["baked_calls"] == 0
               for r in worlds), [r["memory"]["plugin"] for r in worlds]
    assert max(r["explain_bytes"] for r in worlds) < 4096
    by_world = {}
    for r in blocks:
        by_world.setdefault(r["world"], []).append(r)
    small, large = min(by_world), max(by_world)
    assert all(r["frames"]["plugin"] == 1 for r in blocks)
    plugin_calls = [r["overhead_us"]["plugin"] for r in blocks]
    assert max(plugin_calls) / min(plugin_calls) < 1.5
    assert min(r["overhead_us"]["stock"] for r in by_world[large]) > 3 * max(r["overhead_us"]["stock"]
                                                                             for r in by_world[small])
    def compile_median(world: int, side: str) -> float:
        return statistics.median(r["compile_s"][side] for r in by_world[world])

    assert compile_median(small, "plugin") > compile_median(small, "stock")
    assert compile_median(large, "plugin") < compile_median(large, "stock")
    says("docs/benchmarks.md", "Compiling the blocks takes the plugin more CPU than stock at 8 ranks and less at "
                               "65,536")
    says("docs/index.md", "compiling N identical blocks on 8 ranks: more CPU than stock's")


def test_stocks_guard_cost_per_rank():
    """docs/guards.md: stock's DTensor guard reads the whole rank map, "about
    N ns per rank per DTensor input per call" (one DTensor, 1-D mesh, from 8
    to 65,536 ranks)."""
    worlds, _ = _scale()
    one_d = sorted((r for r in worlds if len(r["mesh"]) == 1), key=lambda r: r["world"])
    first, last = one_d[0], one_d[-1]
    cost = [r["guard_overhead_us"]["one DTensor"]["stock"] for r in (first, last)]
    per_rank_ns = (cost[1] - cost[0]) / (last["world"] - first["world"]) * 1000
    says("docs/guards.md", f"the whole rank map: about {per_rank_ns:.0f} ns per rank per DTensor input per call")


def test_recompile_limit():
    import torch._dynamo

    assert torch._dynamo.config.recompile_limit == 8
    says("docs/guards.md", "`recompile_limit` (8 by default)")
    says("docs/benchmarks.md", "Dynamo's `recompile_limit` (8 by default)")
