"""Every `dynamo_dist:` graph break is written for the user: an explanation
and at least one concrete hint (walking the member tables and the declared
breaks, ``variables.breaks.Break``), and the plugin's decisions reach the
``dynamo_dist`` logger."""

import inspect
import logging
import pathlib
import re

import pytest
import torch
import torch.distributed as dist
from torch.distributed.tensor import DTensor
from torch.distributed.tensor.placement_types import Shard

import dynamo_dist
from dynamo_dist import _compat as C
from dynamo_dist._compat import observe as O
from dynamo_dist.testing import make_mesh
from dynamo_dist.variables import base
from dynamo_dist.variables.breaks import GB_PREFIX, Break
from dynamo_dist.variables import ALL_TABLES
from dynamo_dist.variables.members import Kind

# A hint says what to do: it starts with an instruction.
ACTIONS = ("Use", "Create", "Move", "Pass", "Compute", "Return", "Fix", "Call", "Distribute", "Build", "Read",
           "Make", "Replace", "Avoid", "Keep", "Set", "Exchange", "Count", "Enter", "Initialise", "Destroy", "Scale")


def is_concrete(hint: str) -> bool:
    return len(hint) >= 25 and hint.split()[0] in ACTIONS and "report an issue" not in hint.lower()


BREAK_ROWS = [(table, name, member) for table, rows in ALL_TABLES.items()
              for name, member in rows.items() if member.kind is Kind.BREAK]


def test_every_break_row_has_a_concrete_hint():
    assert BREAK_ROWS, "the tables have no break rows to check"
    for table, name, member in BREAK_ROWS:
        assert is_concrete(member.hint), f"{table}.{name}: {member.hint!r}"


def call_member(x, obj, name):
    x = x * 2
    try:
        getattr(obj, name)()  # the break; eagerly the call may raise (no arguments)
    except Exception:
        pass
    return x + 1


def call_function(x, fn):
    x = x * 2
    try:
        fn()  # the break
    except Exception:
        pass
    return x + 1


def _objects():
    from dynamo_dist.variables.functions import dist_functions
    from dynamo_dist.variables.modes import mode_functions

    mesh = make_mesh((2, 4), ("dp", "tp"))
    return {
        "Work": C.c10d.completed_work(),
        "DeviceMesh": mesh,
        "Placement": Shard(0),
        "ProcessGroup": mesh.get_group("tp"),
        "torch.distributed": {name: fn for fn, name in dist_functions().items()},
        "DTensor modes": {name: fn for fn, name in mode_functions().items()},
        "DTensor": DTensor.from_local(torch.ones(2), mesh["tp"], [Shard(0)]),
    }


@pytest.mark.parametrize("table,name", [(t, n) for t, n, _ in BREAK_ROWS], ids=lambda v: v)
def test_break_rows_reach_the_report_with_explanation_and_hint(world8, table, name):
    member = ALL_TABLES[table][name]
    obj = _objects()[table]
    if table in ("torch.distributed", "DTensor modes"):
        fn, args, marker = call_function, (torch.ones(1), obj[name]), "fn()"
    else:
        fn, args, marker = call_member, (torch.ones(1), obj, name), "getattr(obj, name)()"
    report = dynamo_dist.explain(fn, backend="eager")(*args)
    if not dist.is_initialized():  # destroy_process_group ran eagerly after its break
        O.init_fake_process_group(8, 3)
    lines, start = inspect.getsourcelines(fn)
    line = start + next(i for i, text in enumerate(lines) if marker in text)
    ours = [b for b in report.breaks if b.origin == "dynamo_dist"]
    assert len(ours) == 1, report
    [brk] = ours
    assert brk.gb_type.startswith("dynamo_dist:") and (brk.file, brk.line) == (__file__, line)
    assert brk.explanation and name in brk.explanation
    assert brk.hints[0] == member.hint


# The breaks whose hint is the member table row's (``{hint}``), checked with
# the rows above.
ROW_HINTS = {Break.UNSUPPORTED_MEMBER, Break.UNSUPPORTED_CALL, Break.OBJECT_COLLECTIVE, Break.HOST_BARRIER,
             Break.NO_FUNCTIONAL_COLLECTIVE, Break.HOST_STATE_CALL, Break.BACKEND_CALL, Break.DTENSOR_MODE}


def _hint_is_concrete(hint: str) -> bool:
    if hint == "{hint}":
        return True  # the member table row's hint, checked above
    head = hint.split("{", 1)[0]
    if head != hint:  # a template: its literal start must be an instruction
        return bool(head.split()) and head.split()[0] in ACTIONS
    return is_concrete(hint)


def test_every_declared_break_has_explanation_and_a_concrete_hint():
    assert len(Break) >= 8, list(Break)  # members, calls, arguments, answers, escapes, DTensor ...
    for brk in Break:
        assert brk.gb_type and not brk.gb_type.startswith(GB_PREFIX), brk.name
        assert brk.explanation.strip(), brk.name
        assert brk.hints and any(_hint_is_concrete(h) for h in brk.hints), f"{brk.name}: no hint says what to do"
    assert {b for b in Break if "{hint}" in b.hints} == ROW_HINTS


def test_every_declared_break_is_raised_somewhere():
    """No declaration is left over: each is named at a ``graph_break`` call,
    as a tracked type's ``not_ready`` (``build`` raises it) or as a member
    table row's ``cause`` (its handler raises it)."""
    root = pathlib.Path(base.__file__).parent.parent
    source = "\n".join(p.read_text() for p in sorted(root.rglob("*.py")))
    raised = set(re.findall(r"(?:graph_break\(\s*|not_ready=|cause=)Break\.(\w+)", source))
    assert raised == {b.name for b in Break}, {b.name for b in Break} ^ raised


class Collect(logging.Handler):
    def __init__(self):
        super().__init__(logging.DEBUG)
        self.records = []

    def emit(self, record):
        self.records.append(record)


def fold_guard_break(x, pg):
    x = x + pg.size() + dist.get_world_size(pg)
    pg.barrier()
    return x


def test_decisions_go_to_the_dynamo_dist_logger(world8, plugin):
    logger = logging.getLogger("dynamo_dist")
    handler, level = Collect(), logger.level
    logger.addHandler(handler)
    logger.setLevel(logging.DEBUG)
    try:
        torch.compile(fold_guard_break, backend="eager")(torch.ones(1), make_mesh((2, 4)).get_group(1))
    finally:
        logger.removeHandler(handler)
        logger.setLevel(level)
    by_name = {}
    for r in handler.records:
        by_name.setdefault(r.name, []).append(r.getMessage())
    assert "folded ProcessGroup.size() -> 4" in by_name["dynamo_dist.fold"]
    assert any("`L['pg']` is the same ProcessGroup object (ID_MATCH)" in m for m in by_name["dynamo_dist.guards"])
    [brk] = by_name["dynamo_dist.breaks"]
    assert brk.startswith("graph break dynamo_dist: torch.distributed barrier (ProcessGroup.barrier)")
    assert "Hint: Call it outside the compiled function" in brk
