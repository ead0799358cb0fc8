"""The ``spmd`` property through the fuzz driver (the CLI's path): a few
generated spmd_types programs at a fixed seed on one spawned 2-rank gloo
world, each run eagerly, compiled with the plugin and with stock torch
under its checker mode; the plugin's compiled verdict equals eager's on
every rank (no failure, no reproducer written), and every example is counted
by its outcome."""

from __future__ import annotations

import pytest

from dynamo_dist.fuzzing import spmd
from dynamo_dist.fuzzing.driver import run_property
from dynamo_dist.fuzzing.properties import PROPERTIES

pytest.importorskip("spmd_types", reason="spmd_types is in the `clients` extra")

pytestmark = pytest.mark.slow

EXAMPLES, SEED = 5, 20261128


def test_generated_spmd_programs_compile_to_eagers_verdict_on_two_gloo_ranks(tmp_path):
    report = run_property(PROPERTIES["spmd"], examples=EXAMPLES, seed=SEED, out_dir=tmp_path)
    assert report.failures == [], "\n".join(f.error for f in report.failures)
    assert list(tmp_path.iterdir()) == []  # no reproducer
    assert report.passed >= EXAMPLES
    assert set(report.outcomes) <= {*spmd.OUTCOMES, "discarded"}
    assert sum(report.outcomes[o] for o in spmd.OUTCOMES) == report.passed
