"""The member tables drive the code: walk them."""

import pytest

from devtools.coverage.c10d import CALL_CASES
from devtools.coverage.cases import CASES
from dynamo_dist.variables.base import DistObjectVariable
from dynamo_dist.variables import ALL_TABLES
from dynamo_dist.variables.members import Kind, Member, MemberTable, MemberTableError

pytestmark = pytest.mark.release


def test_every_break_row_has_a_concrete_hint():
    for type_name, table in ALL_TABLES.items():
        for name, member in table.items():
            if member.kind is Kind.BREAK:
                assert len(member.hint) > 20, (type_name, name)


def test_every_member_is_exercised_by_a_case():
    covered = {m for case in CASES for m in case.members} | {case.member for case in CALL_CASES}
    for type_name, table in ALL_TABLES.items():
        for name in table:
            assert f"{type_name}.{name}" in covered, f"{type_name}.{name} has no case"


@pytest.mark.parametrize("type_name", ["DeviceMesh", "Placement", "ProcessGroup"])
def test_table_members_exist_on_the_real_types(type_name):
    import torch.distributed as dist
    from torch.distributed.device_mesh import DeviceMesh
    from torch.distributed.tensor.placement_types import Partial, Shard, _StridedShard

    classes = {"DeviceMesh": [DeviceMesh], "Placement": [Shard, Partial, _StridedShard],
               "ProcessGroup": [dist.ProcessGroup]}[type_name]
    for name in ALL_TABLES[type_name]:
        assert any(hasattr(c, name) for c in classes) or name in ("dim", "reduce_op", "split_factor"), name


# -- rows are checked when a table is defined ------------------------------------

BAD_ROWS = [
    (Member(Kind.BREAK, method=True), "a BREAK row needs a hint"),
    (Member(Kind.BREAK, method=True, hint="   "), "a BREAK row needs a hint"),
    (Member(Kind.FOLD, hint="Use something else instead."), "only BREAK rows have a hint; this row is FOLD"),
    (Member(Kind.BREAK, method=True, hint="Use x.", outcome="folds"), "takes no outcome"),
    (Member(Kind.RANK), "a RANK row is a method"),
    (Member(Kind.GROUP), "a GROUP row is a method"),
    (Member(Kind.DTENSOR_OP), "a DTENSOR_OP row is a method"),
    (Member("fold"), "kind must be a Kind"),
    (Member(Kind.FOLD, method=1), "method must be True or False"),
]


@pytest.mark.parametrize("row,problem", BAD_ROWS, ids=lambda v: v if isinstance(v, str) else "")
def test_a_bad_row_fails_when_its_table_is_defined_naming_table_and_member(row, problem):
    with pytest.raises(MemberTableError, match=rf"member table 'Widget': frob: .*{problem}"):
        MemberTable("Widget", {"ok": Member(Kind.FOLD), "frob": row})


def test_every_problem_of_a_table_is_reported_at_once():
    with pytest.raises(MemberTableError) as e:
        MemberTable("Widget", {"a": Member(Kind.BREAK), "b": Member(Kind.RANK), "c d": Member(Kind.FOLD),
                               "e": "fold"})
    message = str(e.value)
    assert "a: a BREAK row needs a hint" in message and "b: a RANK row is a method" in message
    assert "'c d': a member name must be an identifier" in message and "e: a row must be a Member" in message


def test_a_table_of_functions_has_only_calls():
    MemberTable("fns", {"f": Member(Kind.FOLD, method=True)}, calls_only=True)
    with pytest.raises(MemberTableError, match="member table 'fns': g: every row of this table is a function call"):
        MemberTable("fns", {"f": Member(Kind.FOLD, method=True), "g": Member(Kind.FOLD)}, calls_only=True)


def test_tables_are_read_only():
    table = ALL_TABLES["DeviceMesh"]
    with pytest.raises(TypeError):
        table["ndim"] = Member(Kind.BREAK, hint="Use x.")  # type: ignore[index]
    with pytest.raises(Exception):
        Member(Kind.FOLD).kind = Kind.BREAK  # type: ignore[misc]


def test_a_tracker_without_a_handler_for_a_kind_of_its_table_fails_when_defined():
    table = MemberTable("Widget", {"size": Member(Kind.FOLD, method=True),
                                   "op": Member(Kind.DTENSOR_OP, method=True)})
    with pytest.raises(MemberTableError, match=r"member table 'Widget': op: DTENSOR_OP has no handler in "
                                               r"WidgetVariable.KIND_HANDLERS"):
        class WidgetVariable(DistObjectVariable):
            MEMBERS = table


def test_named_handlers_must_match_the_rows():
    table = MemberTable("Widget", {"a": Member(Kind.RANK, method=True), "b": Member(Kind.RANK, method=True),
                                   "c": Member(Kind.FOLD)})
    is_rank = lambda name, member: member.kind is Kind.RANK  # noqa: E731
    table.require_named_handlers({"a": len, "b": len}, "here", is_rank)
    with pytest.raises(MemberTableError, match="b: no handler in here"):
        table.require_named_handlers({"a": len}, "here", is_rank)
    with pytest.raises(MemberTableError, match="c: here has a handler but the table has no such row"):
        table.require_named_handlers({"a": len, "b": len, "c": len}, "here", is_rank)
    with pytest.raises(MemberTableError, match="b: the handler in here is not callable"):
        table.require_named_handlers({"a": len, "b": "runtime_rank"}, "here", is_rank)


def test_the_coverage_text_of_a_row():
    assert Member(Kind.FOLD).coverage_text() == "folds to a constant"
    assert ALL_TABLES["DeviceMesh"]["__getitem__"].coverage_text() == "tracked mesh (no graph node)"
    assert ALL_TABLES["DeviceMesh"]["get_all_groups"].coverage_text() == "tuple/list of tracked process groups"
    assert ALL_TABLES["ProcessGroup"]["barrier"].coverage_text() == (
        "graph break (torch.distributed barrier), hint: Call it outside the compiled function, before or after the "
        "call")
    assert ALL_TABLES["torch.distributed"]["new_group"].coverage_text() == (
        "graph break, hint: Create process groups outside the compiled function and pass them in")
