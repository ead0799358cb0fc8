"""The ``spmd`` property's generator and oracle (``dynamo_dist.fuzzing.spmd``)
in one process, on a fake 2-rank world: fixed spmd_types programs, well and
ill typed, run eagerly and compiled with the plugin under each checker mode;
the verdict passes them, and fails each way a compiled run can differ from
eager's (values, gradients, types, a missing or another error). A fake
world's collectives move no data (eager and compiled see the same fake
collectives); values are judged on gloo by
``tests/spawned/test_fuzz_spmd_gloo.py``."""

from __future__ import annotations

import copy

import pytest
from hypothesis import given, settings
from hypothesis.errors import InvalidArgument

from dynamo_dist.fuzzing import spmd
from dynamo_dist.fuzzing import strategies as S
from dynamo_dist.fuzzing.properties import PROPERTIES
from dynamo_dist.fuzzing.specs import Program
from dynamo_dist.testing import fake_world

pytest.importorskip("spmd_types", reason="spmd_types is in the `clients` extra")

WELL_TYPED = """\
    h = x @ w
    h = torch.relu(h).sum(0)
    h = spmd.all_reduce(h, "tp", src=P, dst=R)
    h = h * 2
"""
# the checker's global mode: w is replicated, x @ w too
WELL_TYPED_GLOBAL = """\
    h = x @ w
    h = spmd.redistribute(h, "tp", src=R, dst=S(0))
    h = torch.relu(h)
    h = spmd.all_gather(h, "tp", src=S(0), dst=R)
    h = h.sum(0) * 2
"""
# I + R: the checker's rule for add (no collective on the failing line)
ILL_TYPED = """\
    h = x @ w
    h = spmd.all_reduce(h, "tp", src=P, dst=I)
    h = h + x
"""


def run(body: str, checker: str, backward: bool = True) -> dict:
    example = spmd.SpmdExample(Program(spmd.HEADER + body + "    return h\n"), checker, backward, seed=3)
    with fake_world(2, 0):
        return spmd.run_side(example, "plugin")


@pytest.mark.parametrize("checker", spmd.CHECKERS)
def test_a_well_typed_program_compiles_to_eagers_values_and_types(checker):
    found = run(WELL_TYPED_GLOBAL if checker == "global" else WELL_TYPED, checker)
    assert "error" not in found["eager"], found
    assert spmd.verdict(found["eager"], found["compiled"]) is None
    assert found["eager"]["grads"][1] is not None  # the backward ran
    assert (found["eager"]["types"][0] is None) == (checker == "off")


@pytest.mark.parametrize("checker", ["local", "global"])
def test_an_ill_typed_program_raises_eagers_error_compiled(checker):
    found = run(ILL_TYPED, checker)
    assert found["eager"]["spmd_error"] and found["eager"]["error"].startswith("SpmdTypeError"), found
    assert spmd.verdict(found["eager"], found["compiled"]) is None


def _wrong_values(r: dict) -> None:
    r["out"] = [v + 1 for v in r["out"]]  # WELL_TYPED's output is 1-D


def _wrong_grad(r: dict) -> None:
    r["grads"][1] = [[-v for v in row] for row in r["grads"][1]]


def _wrong_types(r: dict) -> None:
    r["types"][0] = "{default_pg: P}"


def _raised(r: dict) -> None:
    r.clear()
    r.update(error="SpmdTypeError: a compiled error", statement="SpmdTypeError: a compiled error", spmd_error=True)


@pytest.mark.parametrize("fault", [_wrong_values, _wrong_grad, _wrong_types, _raised])
def test_the_verdict_fails_a_compiled_run_unlike_eagers(fault):
    found = run(WELL_TYPED, "local")
    wrong = copy.deepcopy(found)
    fault(wrong["compiled"])
    assert spmd.verdict(wrong["eager"], wrong["compiled"]) is not None
    with pytest.raises(AssertionError, match="verdict differs from eager's"):
        spmd.judge([wrong, found], [found, found])
    assert spmd.judge([found, found], [found, found])[0] == spmd.WELL_STOCK_SAME


@pytest.mark.parametrize("fault", ["ran", "other message"])
def test_the_verdict_fails_a_compiled_run_without_eagers_error(fault):
    found = run(ILL_TYPED, "global")
    wrong = copy.deepcopy(found)
    if fault == "ran":
        wrong["compiled"] = run(WELL_TYPED_GLOBAL, "global")["compiled"]
    else:
        wrong["compiled"]["statement"] += " (in the compiled program)"
    assert spmd.verdict(wrong["eager"], wrong["compiled"]) is not None
    with pytest.raises(AssertionError, match="eager raised SpmdTypeError"):
        spmd.judge([found, wrong], [found, found])
    # stock's run is counted, never judged
    assert spmd.judge([found, found], [wrong, wrong]) == (spmd.ILL_STOCK_FAILS, spmd.verdict(
        wrong["eager"], wrong["compiled"]).splitlines()[-1].strip().removeprefix("compiled: ")[:160])


def test_the_notes_after_the_statement_are_not_judged():
    """spmd_types appends a traceback-filtering hint per API boundary an
    error leaves (0.3.1: one more eagerly than traced), then the call."""
    found = run(ILL_TYPED, "global")
    noted = copy.deepcopy(found)
    noted["compiled"]["error"] += " Set SPMD_TYPES_TRACEBACK_FILTERING=off to see the full, unfiltered traceback."
    assert spmd.verdict(noted["eager"], noted["compiled"]) is None


def test_an_eager_error_other_than_a_type_error_is_no_example():
    runs = [{"eager": {"error": "RuntimeError: shapes", "spmd_error": False}}] * 2
    assert "RuntimeError" in spmd.eager_problem(runs)
    assert spmd.eager_problem([{"eager": {"out": 1.0}}] * 2) is None


@settings(max_examples=40, deadline=None, database=None, derandomize=True)
@given(S.spmd_examples())
def test_generated_programs_are_python_over_the_header_names(example):
    assert example.checker in spmd.CHECKERS
    assert example.program.source.startswith(spmd.HEADER)
    compile(example.program.source, "<spmd program>", "exec")
    assert example.program.source.rstrip().endswith("return h")


def test_the_strategy_checks_its_arguments():
    with pytest.raises(InvalidArgument, match="checkers"):
        S.spmd_examples(checkers=("on",))
    with pytest.raises(InvalidArgument, match="max_statements"):
        S.spmd_examples(max_statements=0)


def test_the_property_is_registered():
    prop = PROPERTIES["spmd"]
    assert prop.gloo and prop.needs == "spmd_types" and prop.check.endswith(":check_spmd")


# A collective given a type it does not take: eager's error passes through the
# collective's traceback-filtering wrapper as well as the checker's.
ILL_TYPED_COLLECTIVE = """\
    h = x * 1
    h = spmd.reduce_scatter(h, "tp", src=P, dst=S(0))
"""


@pytest.mark.parametrize("checker", ["local", "global"])
def test_an_ill_typed_collective_raises_eagers_error_compiled(checker):
    found = run(ILL_TYPED_COLLECTIVE, checker, backward=False)
    assert found["eager"]["spmd_error"], found
    assert spmd.verdict(found["eager"], found["compiled"]) is None
