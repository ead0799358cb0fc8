"""The spmd_types TP step on a gloo world of 2, compiled under its type
checker (local and global modes) and with it off: the output and every
gradient equal eager's on each rank, with eager's types on the output."""

from __future__ import annotations

import pytest
import torch

import spmd_programs
from dynamo_dist.testing import run_in_world

pytest.importorskip("spmd_types", reason="spmd_types is in the `clients` extra")

pytestmark = pytest.mark.slow

CASES = [(mode, a2a, "aot_eager") for mode in ("off", "local", "global") for a2a in (False, True)]
CASES.append(("global", True, "inductor"))


@pytest.fixture(scope="module")
def ranks():
    return run_in_world(spmd_programs.rank_tp_values, 2, CASES, timeout=600)


@pytest.mark.parametrize("case", CASES, ids=lambda c: f"{c[0]}-{'a2a' if c[1] else 'step'}-{c[2]}")
def test_compiled_equals_eager_on_every_rank(ranks, case):
    for rank in ranks:
        eager, compiled = rank[case]["eager"], rank[case]["compiled"]
        torch.testing.assert_close(torch.tensor(compiled["out"]), torch.tensor(eager["out"]))  # float32 values
        for c, e in zip(compiled["grads"], eager["grads"]):
            torch.testing.assert_close(torch.tensor(c), torch.tensor(e))
        assert compiled["types"] == eager["types"]  # the output's and the gradients' SPMD types
        assert case[0] == "off" or compiled["types"][0] not in ("{}", None)
    # the ranks' outputs agree where the step all-gathers and all-reduces
    torch.testing.assert_close(torch.tensor(ranks[0][case]["compiled"]["out"]),
                               torch.tensor(ranks[1][case]["compiled"]["out"]))
