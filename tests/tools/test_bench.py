"""``python -m devtools bench --quick`` as a smoke test: every section is
present with sane numbers. No timing assertions (performance is measured by
the benchmark itself, never by tests)."""

import dataclasses
import json
import math
import subprocess
from pathlib import Path
import sys

import pytest
import torch

RUNNING = torch.__version__.split("+")[0]


ROOT = Path(__file__).resolve().parents[2]  # python -m devtools runs from the checkout's root


def _positive(x) -> bool:
    return isinstance(x, (int, float)) and math.isfinite(x) and x > 0


@pytest.fixture(scope="module")
def quick(tmp_path_factory):
    out = tmp_path_factory.mktemp("bench") / "quick.json"
    doc = out.parent / "benchmarks.md"
    proc = subprocess.run([sys.executable, "-m", "devtools", "bench", "--quick", "--json", str(out),
                           "--write-doc", str(doc)], capture_output=True, text=True, timeout=900, cwd=ROOT)
    assert proc.returncode == 0, proc.stderr[-4000:]
    return json.loads(out.read_text()), proc, doc.read_text()


@pytest.mark.slow
def test_meta_and_progress(quick):
    result, proc, _ = quick
    meta = result["meta"]
    assert meta["config"]["quick"] is True
    assert meta["command"].startswith("python -m devtools bench --quick")
    assert meta["machine"]["torch"].startswith(RUNNING) and meta["machine"]["cores"] >= 1
    assert "[1/" in proc.stderr and "compile_time" in proc.stderr  # progress lines on stderr
    for heading in ("Trace + compile time", "Guard cost", "Recompiles", "Step time", "Warm start", "Summary"):
        assert heading in proc.stdout


@pytest.mark.slow
def test_compile_time(quick):
    rows = quick[0]["compile_time"]
    assert {r["kind"] for r in rows} == {"queries", "model"}
    for r in rows:
        assert _positive(r["stock_s"]) and _positive(r["plugin_s"]) and _positive(r["ratio"]), r
        assert len(r["samples"]["stock"]) == len(r["samples"]["plugin"]) == r["repeats"]


@pytest.mark.slow
def test_guard_cost(quick):
    rows = quick[0]["guard_cost"]
    assert any("DTensor" in r["name"] for r in rows)
    for r in rows:
        for side in ("stock", "plugin"):
            assert _positive(r["full_us"][side]) and _positive(r["bare_us"][side]), r
            assert math.isfinite(r["overhead_us"][side])
        assert math.isfinite(r["overhead_ratio"])
        assert "DeviceMesh" not in r["graph_inputs"]["plugin"]  # rule 1: the mesh is no graph input


@pytest.mark.slow
def test_recompiles(quick):
    for r in quick[0]["recompiles"]:
        plugin = r["plugin"]
        assert plugin["correct"] == r["calls"] and plugin["wrong"] == plugin["errors"] == 0, r
        assert plugin["compiles"] == r["distinct_configs"], r
        stock = r["stock"]
        assert stock["correct"] + stock["wrong"] + stock["errors"] == r["calls"]


@pytest.mark.slow
def test_step_time(quick):
    rows = quick[0]["step_time"]
    ran = [r for r in rows if "skipped" not in r]
    assert any(r["comm"] == "gloo" and r["world"] == 2 for r in ran)
    for r in ran:
        for label, ms in r["ms"].items():
            assert _positive(ms), (label, r)
        for ratios in r["ratio_to_handwritten"].values():
            assert ratios["handwritten"] == 1.0 and all(_positive(v) for v in ratios.values())
    for r in rows:
        if r["comm"] == "nccl":
            assert "skipped" in r or "ms" in r


@pytest.mark.slow
def test_warm_start(quick):
    """Fresh processes really used the caches: the cold runs (empty cache
    dir) miss everything, the plugin's warm runs hit everything: both FX
    graphs (forward, backward) and the AOTAutograd entry."""
    rows = quick[0]["warm_start"]
    assert rows and all("error" not in r for r in rows), rows
    for r in rows:
        for phase in ("cold", "warm"):
            for side in ("stock", "plugin"):
                assert _positive(r[phase][f"{side}_s"]), (phase, side, r)
                runs = r["caches"][phase][side]
                assert len(runs) == r[f"{phase}_repeats"] >= 1
                if phase == "cold":
                    for run in runs:
                        assert run["fx_graph"]["hit"] == run["aot_autograd"]["hit"] == 0, run
                        assert run["fx_graph"]["miss"] == 2 * r["ranks"], run
                        assert run["aot_autograd"]["miss"] == r["ranks"], run
        for run in r["caches"]["warm"]["plugin"]:
            assert run["fx_graph"] == {"hit": 2 * r["ranks"], "miss": 0, "bypass": 0}, run
            assert run["aot_autograd"] == {"hit": r["ranks"], "miss": 0, "bypass": 0}, run
        assert _positive(r["warm"]["ratio"])


@pytest.mark.slow
def test_doc_is_stamped(quick):
    _, _, doc = quick
    assert "<!-- bench-warm:begin -->" in doc  # warm start: a block (and stamp) of its own
    assert "<!-- bench:begin -->" in doc and "- date: " in doc and "- command: `python -m devtools bench" in doc
    assert f"torch {RUNNING}" in doc


@pytest.mark.slow
def test_scale_rows_hold_what_the_sweep_reports():
    """The scale section's rows on a small world (``--only scale`` runs the
    sweep to 65,536 ranks): a trace that meets a known mesh computes no
    fingerprint, the plugin's key for a mesh is smaller than the pickled
    mesh stock keys with, and identical per-block compiles compile once."""
    from devtools.bench import scale
    from devtools.bench.suite import QUICK

    world = scale.measure_world(512, 2, QUICK, lambda _: None)
    assert world["mesh"] == [64, 8]
    assert (world["fingerprints_first_trace"], world["fingerprints_next_trace"]) == (1, 0)
    assert world["key_bytes"]["plugin"] < world["key_bytes"]["stock"]
    assert all(_positive(world["guard_overhead_us"][f]["plugin"]) for f in scale.FUNCTIONS)
    blocks = scale.measure_blocks(8, 2, QUICK, lambda _: None)
    assert blocks["frames"] == {"stock": 1, "plugin": 1}


@pytest.mark.slow
def test_planner_rows_hold_what_the_section_reports():
    """The planner section's rows on the 2-D mesh (``--only planner`` runs
    2-D to 4-D): each redistribution's plans, and the planner called in every
    compile on both sides with either planner."""
    from devtools.bench import planner
    from devtools.bench.suite import DEFAULT_SECTIONS, QUICK

    assert "planner" not in DEFAULT_SECTIONS
    found = planner.measure_mesh((4, 4), QUICK, lambda _: None)
    assert found["mesh"] == [4, 4] and len(found["rows"]) == len(planner.redistributions(2))
    for row in found["rows"]:
        assert row["steps"]["greedy"] >= 2 and row["steps"]["min_cost"] >= 2, row
        for name in planner.PLANNERS:
            assert all(row[name]["planner_calls"][side] >= 1 for side in ("stock", "plugin")), row
            assert all(_positive(row[name]["planner_ms"][side]) for side in ("stock", "plugin")), row


def test_clients_section_runs_only_when_named_and_says_why_it_skips(monkeypatch):
    """The clients' warm start (``--only warm_start_clients``): never in a
    plain or ``--quick`` run; a row whose client is missing is skipped with
    the reason, in the table and not in the summary; bypasses are listed."""
    from devtools.bench import report, suite, warm_clients

    assert "warm_start_clients" in suite.SECTIONS and "warm_start_clients" not in suite.DEFAULT_SECTIONS
    assert set(suite.QUICK.warm_clients) <= set(warm_clients.ROWS) and suite.FULL.warm_clients
    monkeypatch.setattr(warm_clients, "missing", lambda client: ["torchtitan"] if client == "torchtitan" else [])
    name = "torchtitan TP=2, partial_dtensor, selective AC"
    [task] = warm_clients.tasks(dataclasses.replace(suite.QUICK, warm_clients=(name,)))
    skipped = task.run(lambda _: None)
    assert skipped["skipped"].startswith("not installed: torchtitan")

    ran = {"model": "transformers Llama TP=2", "world": "gloo", "ranks": 2, "cold_repeats": 1, "warm_repeats": 1,
           "cold": {"stock_s": 40.0, "plugin_s": 36.0, "ratio": 0.9}, "warm": {"stock_s": 15.0, "plugin_s": 6.0,
           "ratio": 0.4}, "warm_cpu": {"ratio": 0.4},
           "caches": {"warm": {s: [{"fx_graph": {"hit": 4, "miss": 0, "bypass": 0},
                                    "aot_autograd": {"hit": 1, "miss": 0, "bypass": 1}}] for s in ("stock", "plugin")}},
           "bypass_reasons": {"warm": {"stock": ["aot_autograd: the graph calls a custom torch.autograd.Function"]}}}
    text = report.text({"meta": {}, "warm_start_clients": [skipped, ran]})
    assert f"- {name}: skipped (not installed: torchtitan" in text
    assert ("- AOTAutograd cache: the graph calls a custom torch.autograd.Function — transformers Llama TP=2 (stock)"
            in text)
    summary = report.summary({"warm_start_clients": [skipped, ran]})
    assert name not in summary and "warm start, transformers Llama TP=2, gloo x2, inductor" in summary
    assert summary.rstrip().endswith("plugin FX 4/4 hit; AOT 1/2 hit, 1 bypass |")  # the bypass is shown


def test_a_named_row_set_writes_a_block_of_its_own_and_leaves_the_full_runs(tmp_path):
    """``--client-rows`` with a row set's rows (``warm_clients.ROW_SETS``):
    its results go to the section's block named after the set, never over
    the full run's block or the README's lines; compile once then runs
    only those client rows."""
    from devtools.bench import compile_once, report, suite, warm_clients
    from devtools.cli import bench as cli

    [(name, rows)] = [(n, r) for n, r in warm_clients.ROW_SETS.items() if n == "spmd_types"]
    cfg = cli.config(cli_args(["--only", "warm_start_clients", "compile_once", "--client-rows", *rows]))
    assert (cfg.warm_clients, cfg.once_clients) == (rows, rows)
    assert [t.label for t in compile_once.tasks(cfg)] == [f"compile_once {r}" for r in rows]
    row = {"model": rows[0], "world": "gloo", "ranks": 2, "cold_repeats": 1, "warm_repeats": 1,
           "cold": {"stock_s": 40.0, "plugin_s": 36.0, "ratio": 0.9},
           "warm": {"stock_s": 15.0, "plugin_s": 6.0, "ratio": 0.4}, "warm_cpu": {"ratio": 0.4},
           "caches": {"warm": {s: [{"fx_graph": {"hit": 4, "miss": 0, "bypass": 0},
                                    "aot_autograd": {"hit": 2, "miss": 0, "bypass": 0}}] for s in ("stock", "plugin")}},
           "bypass_reasons": {"warm": {}}}
    machine = {"cpu": "x", "cores": 2, "torch": RUNNING, "gpus": [], "python": "3.11", "platform": "p"}
    meta = {"date": "d", "command": "c", "seconds": 1.0, "dynamo_dist": "0", "machine": machine,
            "config": {"warm_clients": list(rows)}}
    result = {"meta": meta, "warm_start_clients": [row]}
    assert report.doc_marker(result, report.WARM_CLIENTS) == "bench-warm-clients-spmd_types"
    full = {"meta": {**meta, "config": {"warm_clients": list(suite.FULL.warm_clients)}}, "warm_start_clients": [row]}
    assert report.doc_marker(full, report.WARM_CLIENTS) == "bench-warm-clients"
    doc, readme = tmp_path / "benchmarks.md", tmp_path / "README.md"
    kept = "<!-- bench-warm-clients:begin -->\nthe full run\n<!-- bench-warm-clients:end -->\n"
    doc.write_text(kept)
    readme.write_text("<!-- bench-warm-clients-summary:begin -->\nfull\n<!-- bench-warm-clients-summary:end -->\n")
    report.write_doc(str(doc), result)
    report.update_readme(str(readme), result, doc=str(doc))
    text = doc.read_text()
    assert text.startswith(kept) and "<!-- bench-warm-clients-spmd_types:begin -->" in text and rows[0] in text
    assert "\nfull\n" in readme.read_text()


def test_a_compile_once_row_whose_stock_job_fails_keeps_the_plugins_figures(monkeypatch):
    """Stock failing a job (torchtitan's spmd_types step under
    compile_on_one_rank) is said once and not run again; a plugin side
    failing fails the row."""
    from devtools.bench import compile_once, report

    calls = []

    def run_job(side, ranks, model, size, base, timeout):
        calls.append(side)
        if side == "stock":
            raise RuntimeError("exited 1:\nTraceback ...\nTypeError: cannot pickle 'ProcessGroup' object\n")
        return {"wall": 2.0, "cpu": 3.0, "compiles_per_graph": 1.0, "per_rank": []}

    monkeypatch.setattr(compile_once, "run_job", run_job)
    row = compile_once.measure_jobs(2, "m", "-", 3, 1.0, lambda _: None)
    assert calls.count("stock") == 1 and calls.count("plugin") == calls.count("compile_once") == 3
    assert row["failed"] == {"stock": "TypeError: cannot pickle 'ProcessGroup' object"}
    assert math.isnan(row["wall"]["ratio"]) and row["wall"]["plugin_s"] == 2.0
    assert "m: stock fails, and is not run again: `TypeError: cannot pickle" in report.once_table([row])
    monkeypatch.setattr(compile_once, "run_job", lambda side, *a: run_job("stock", *a))
    with pytest.raises(RuntimeError, match="cannot pickle"):
        compile_once.measure_jobs(2, "m", "-", 1, 1.0, lambda _: None)


def cli_args(words):
    import argparse

    from devtools.cli import bench as cli

    parser = argparse.ArgumentParser()
    cli.add_arguments(parser)
    return parser.parse_args(words)


@pytest.mark.slow
def test_compile_once_scale_runs_small_and_writes_a_whole_file(tmp_path):
    """``--only compile_once_scale`` on its quick size (16 simulated ranks in
    2 processes, a real TCPStore): its JSON holds every row with the load,
    the new protocol served each host once (a host of 8 reads its spool) and
    left the store two small keys, the old one served every rank and left
    the payload; each fault row ends with every living rank done. Runs only
    when named, never in CI's quick run."""
    from devtools.bench.suite import DEFAULT_SECTIONS

    assert "compile_once_scale" not in DEFAULT_SECTIONS
    out = tmp_path / "scale.json"
    proc = subprocess.run([sys.executable, "-m", "devtools", "bench", "--quick", "--only", "compile_once_scale",
                           "--json", str(out)], capture_output=True, text=True, timeout=600, cwd=ROOT)
    assert proc.returncode == 0, proc.stderr[-4000:]
    result = json.loads(out.read_text())
    assert result["meta"]["command"] == f"python -m devtools bench --quick --only compile_once_scale --json {out}"
    assert len(result["meta"]["machine"]["load_average_start"]) == 3
    rows = {(r["protocol"], r["fault"]): r for g in result["compile_once_scale"] for r in g["rows"]}
    new, old = rows[("new", None)], rows[("old", None)]
    for r in rows.values():
        assert len(r["load_average"]) == 3 and r["ranks"] == 16 and r["hosts"] == 2, r
        assert r["decisions"].get("compile") == 1, r
    payload = new["payload_bytes"]
    assert new["decisions"] == {"compile": 1, "load": 15} and new["via"] == {"store": 1, "host": 14}
    assert new["store_bytes_served"] < 2 * payload <= new["bound_bytes"]
    assert new["store_keys_after"] == 2 and new["store_bytes_after"] < 200  # claim and done
    assert old["via"] == {"store": 15} and old["store_bytes_served"] >= 15 * payload
    assert old["store_bytes_after"] > payload  # the old protocol never deleted the payload
    assert rows[("new", "compiler_killed")]["decisions"] == {"compile": 1, "local": 15}
    assert rows[("new", "store_slowed")]["decisions"] == {"compile": 1, "load": 15}
    killed = rows[("new", "fetcher_dies")]
    assert killed["died"] == 1 and killed["decisions"] == {"compile": 1, "load": 14}
    assert "Compile once at scale" in proc.stdout


def test_a_restart_error_is_the_line_that_names_what_was_raised():
    """Dynamo ends an error with the user's stack and its advice; the
    restart table shows what was raised."""
    from devtools import error_line

    error = ("Traceback (most recent call last):\n  File \"x.py\", line 1, in f\n"
             "torch._dynamo.exc.InternalTorchDynamoError: TypeError: Opaque object of type 'DeviceMesh'\n\n"
             "from user code:\n   File \"y.py\", line 3, in g\n    cached = self._meshes.get(axis_size)\n\n"
             "Set TORCHDYNAMO_VERBOSE=1 for the internal stack trace\n")
    raised = "torch._dynamo.exc.InternalTorchDynamoError: TypeError: Opaque object of type 'DeviceMesh'"
    assert error_line(error) == raised
    assert error_line("exited 1: no line names an exception") == "exited 1: no line names an exception"


def test_the_check_cost_sample_is_the_slowest_rank_per_step_and_its_row_the_median_of_samples():
    """A sample's steps are the slowest rank's, its first compiled step apart
    from the median of the later ones; a row's figures are medians over the
    samples that ran, and an error of any sample is the row's."""
    from devtools.clients.check_cost import over_ranks, summary, table

    def rank(eager, compiled, error=None):
        return {"eager_s": eager, "compiled_s": compiled, "traced": 2, "breaks": 0, "loss_diff": 1e-6,
                "grad_diff": 2e-8, "error": error}

    sample = over_ranks([rank([5.0, 1.0, 3.0], [9.0, 0.5, 0.7]), rank([4.0, 2.0, 1.0], [8.0, 0.6, 0.4])])
    assert sample["first_compiled_s"] == 9.0
    assert sample["compiled_step_s"] == (0.6 + 0.7) / 2 and sample["eager_step_s"] == (2.0 + 3.0) / 2
    failed = over_ranks([rank([1.0, 1.0], [1.0, 1.0], error="TypeError: x"), rank([1.0, 1.0], [1.0, 1.0])])
    assert failed["error"] == "TypeError: x"
    row = summary([sample, dict(sample, first_compiled_s=3.0), dict(sample, first_compiled_s=5.0), failed])
    assert row["first_compiled_s"] == 5.0 and (row["ran"], row["samples"]) == (3, 4)
    assert row["error"] == "TypeError: x"
    rows = [{"side": "plugin", "mode": mode, "summary": dict(row, first_compiled_s=first)}
            for mode, first in (("off", 4.0), ("on", 6.0))]
    assert "| plugin | x1.50 | x1.00 | x1.00 |" in table(rows)
