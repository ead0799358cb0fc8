"""docs/benchmarks.md's "Reliability" figures for the ``stock`` property are
the table ``python -m dynamo_dist.fuzzing.report`` makes from the long runs'
results files (``python -m dynamo_dist fuzz --json``), each written whole by
the command its ``meta.command`` names."""

import json
from pathlib import Path

from dynamo_dist.fuzzing import report, stock

ROOT = Path(__file__).resolve().parents[2]
PAGE = ROOT / "docs" / "benchmarks.md"
RUNS = sorted((ROOT / "benchmarks" / "results").glob("fuzz_stock_*.json"))


def _runs():
    return [json.loads(f.read_text()) for f in RUNS]


def test_the_page_holds_the_table_of_the_saved_runs():
    assert RUNS, "no benchmarks/results/fuzz_stock_*.json"
    text = PAGE.read_text()
    begin, end = f"<!-- {report.MARKER}:begin -->\n", f"<!-- {report.MARKER}:end -->"
    shown = text.split(begin, 1)[1].split(end, 1)[0]
    assert shown == report.block(_runs()), (
        "run: python -m dynamo_dist.fuzzing.report docs/benchmarks.md benchmarks/results/fuzz_stock_*.json")


def test_each_run_was_written_by_the_command_it_names():
    for path, run in zip(RUNS, _runs()):
        meta = run["meta"]
        assert meta["command"].startswith("python -m dynamo_dist fuzz "), meta["command"]
        assert f"--json benchmarks/results/{path.name}" in meta["command"]
        assert "--property stock" in meta["command"] and f"--seed {meta['config']['seed']}" in meta["command"]
        assert path.name == f"fuzz_stock_{meta['machine']['torch'].split('+')[0]}.json"
        for key in ("date", "machine", "seconds"):
            assert key in meta
        assert "load_average_start" in meta["machine"] and "load_average_end" in meta["machine"]


def test_each_run_counts_every_example_it_passed_by_outcome():
    for run in _runs():
        p = run["properties"]["stock"]
        assert set(p["outcomes"]) <= {*stock.OUTCOMES, "discarded", "failed"}, p["outcomes"]
        judged = sum(n for o, n in p["outcomes"].items() if o in stock.OUTCOMES and o not in stock.FAILURES)
        assert judged == p["passed"] or p["failures"], (judged, p["passed"])
        assert p["status"] in ("ok", "interrupted", "failed")
        assert (p["status"] == "failed") == bool(p["failures"]), p["failures"]


CLEAN = "Every release ran its 2,000 programs with no failure."


def test_the_page_says_no_failure_only_where_every_run_passed_its_examples():
    """The sentence under the table holds exactly when every saved run
    checked its 2,000 programs to the end without a failure."""
    clean = all(run["properties"]["stock"]["status"] == "ok" and not run["properties"]["stock"]["failures"]
                and run["properties"]["stock"]["passed"] == 2000 for run in _runs())
    assert (CLEAN in PAGE.read_text()) == clean, (
        "the page's sentence after the table must say how the saved runs ended")
