"""The named cases on the plugin and on stock torch, side by side.

The plugin must meet every case's expectation. Stock's outcomes are only
recorded (the tests do not depend on stock failing) and must match what the
README says, so the README's comparison stays true.
"""

from pathlib import Path

import pytest

from dynamo_dist.coverage.tables import differences_table, member_table, read_block
from dynamo_dist.coverage.cases import CASES, CLEAN_BREAK, run_all

README = Path(__file__).resolve().parents[1] / "README.md"


@pytest.fixture(scope="module")
def outcomes():
    return run_all(plugin=True), run_all(plugin=False)


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


def test_readme_tables_match_a_fresh_measurement(outcomes):
    plugin, stock = outcomes
    text = README.read_text()
    hint = "run `python -m dynamo_dist coverage --update-readme README.md`"
    assert read_block(text, "coverage") == member_table(stock), hint
    assert read_block(text, "stock-diff") == differences_table(plugin, stock), hint
