"""The named cases on the plugin and on stock torch, side by side.

The plugin must meet every case's expectation. Stock's outcomes are only
recorded (the tests do not depend on stock failing) and must match what the
coverage page (docs/coverage.md) says, so its comparison stays true.
"""

import json
import subprocess
import sys
from pathlib import Path

import pytest

from dynamo_dist import _compat as C
from devtools.coverage.tables import (
    TESTED_VERSIONS,
    c10d_table,
    counts_block,
    differences_table,
    member_table,
    parse_table,
    read_block,
    stock_column,
)
from devtools.coverage.c10d import CALL_CASES, as_expected, run_all_calls
from devtools.coverage.cases import CASES, CLEAN_BREAK, Outcome

ROOT = Path(__file__).resolve().parents[2]
COVERAGE_PAGE = ROOT / "docs" / "coverage.md"
_MEASURE = ("import dataclasses, json\nfrom devtools.coverage.cases import run_all\n"
            "print(json.dumps([[dataclasses.asdict(o) for o in run_all(plugin=p)] for p in (True, False)]))")


@pytest.fixture(scope="module")
def outcomes():
    """Both sides measured in a fresh process, as ``python -m devtools
    coverage`` measures them: stock's answer on some cases depends on what
    the process ran before (a submesh an earlier test made)."""
    done = subprocess.run([sys.executable, "-c", _MEASURE], cwd=ROOT, capture_output=True, text=True, timeout=900)
    assert done.returncode == 0, done.stderr[-3000:]
    plugin, stock = json.loads(done.stdout.strip().splitlines()[-1])
    return [Outcome(**o) for o in plugin], [Outcome(**o) for o in stock]


@pytest.mark.slow
def test_every_case_meets_its_expectation_with_the_plugin(outcomes):
    plugin, _ = outcomes
    assert [o.case for o in plugin] == [c.name for c in CASES]
    for case, outcome in zip(CASES, plugin):
        assert outcome.status == case.expect, (case.name, outcome)
        if case.expect == CLEAN_BREAK:
            assert outcome.detail.startswith("dynamo_dist:"), outcome


def test_plugin_never_worse_than_stock(outcomes):
    plugin, stock = outcomes
    for case, ours, theirs in zip(CASES, plugin, stock):
        if theirs.status == "ok":
            assert ours.status == "ok", (case.name, ours, theirs)


def test_coverage_tables_match_a_fresh_measurement(outcomes):
    plugin, stock = outcomes
    text = COVERAGE_PAGE.read_text()
    hint = "run `python -m devtools coverage --update-readme docs/coverage.md`"
    # One stock column per tested release: the plugin's column and the running
    # release's stock column must equal this measurement; the other releases'
    # columns are kept as the page has them (measured on those releases).
    running = stock_column(C.release.torch_version())
    members, diffs = read_block(text, "coverage"), read_block(text, "stock-diff")
    assert running in members.splitlines()[0] and running in diffs.splitlines()[0], hint
    assert members == member_table(stock, previous=members), hint
    assert diffs == differences_table(plugin, stock, previous=diffs), hint
    assert read_block(text, "stock-diff-counts") == counts_block(diffs), hint


def test_coverage_tables_keep_other_releases_columns(outcomes):
    plugin, stock = outcomes
    diffs = read_block(COVERAGE_PAGE.read_text(), "stock-diff")
    header = diffs.splitlines()[0]
    for version in TESTED_VERSIONS:
        assert stock_column(version) in header
    # Regenerating as another release rewrites only that release's column.
    other = next(v for v in TESTED_VERSIONS if v != C.release.torch_version())
    fresh = parse_table(differences_table(plugin, stock, previous=diffs, version=other), 1)
    kept = parse_table(diffs, 1)
    for version in TESTED_VERSIONS:
        if version != other:
            assert fresh[stock_column(version)] == kept[stock_column(version)]


@pytest.fixture(scope="module")
def call_outcomes():
    return run_all_calls(plugin=True), run_all_calls(plugin=False)


def test_c10d_table_matches_a_fresh_measurement(call_outcomes):
    """The coverage page's torch.distributed table: the plugin's column and
    this release's stock column equal a fresh measurement, every case as its
    row declares (the other releases' columns are kept, measured there)."""
    plugin, stock = call_outcomes
    for case, ours, theirs in zip(CALL_CASES, plugin, stock):
        assert as_expected(case, ours, theirs), (case.name, ours, theirs)
    calls = read_block(COVERAGE_PAGE.read_text(), "c10d")
    hint = "run `python -m devtools coverage --update-readme docs/coverage.md`"
    assert stock_column(C.release.torch_version()) in calls.splitlines()[0], hint
    assert calls == c10d_table(plugin, stock, previous=calls), hint
