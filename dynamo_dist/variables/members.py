"""Declarative member tables: one row per member of a tracked distributed type.

Each table is defined in the module of its type, beside the tracker that
reads it and the type's declaration (``dynamo_dist.tracked_types``); this
module holds what they are made of. The same tables drive the trackers, the
coverage page (``python -m devtools coverage``, through
``variables.ALL_TABLES``) and the tests that walk them. A member
not listed here is handled by the fallback described in
``base.DistObjectVariable.unknown_member``; each ``Kind`` selects one handler
function in the table of the tracker that reads the rows
(``base.DistObjectVariable.KIND_HANDLERS``,
``functions.DistFunctionVariable.KIND_HANDLERS``, the DTensor handlers in
``dtensor.py``): members stock torch evaluates on the real object are folded
the same way, everything else is a clean ``dynamo_dist:`` graph break.

A table checks its rows when it is defined (``MemberTable``), and a tracker
checks that it has a handler for every Kind its table uses, so a wrong row
fails at import time with the table and member named.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass
from typing import Any, Callable, Iterator, Mapping


class Kind(enum.Enum):
    """How a member is handled. Only Kinds whose handling differs are Kinds;
    a finer description for the coverage page is a row's ``outcome``."""

    # Evaluated on the real object; the answer is wrapped by its type: a
    # constant, or a tracked mesh, group or placement (or a tuple of them)
    # that rebuilds from this object.
    FOLD = "folds to a constant"
    # Folded, or a runtime op under compile_on_one_rank.
    RANK = "folds (rank-dependent; runtime op under compile_on_one_rank)"
    # A tracked process group that remembers the mesh dim it is (the mesh's
    # rank table then computes its rank under compile_on_one_rank).
    GROUP = "tracked process group"
    # A tensor built in the graph from the folded values.
    TENSOR = "tensor built in the graph from the folded rank table"
    # One graph call with the mesh and placements folded in (DTensor rows).
    DTENSOR_OP = "one graph call, mesh and placements (any sequence) folded in"
    # A torch.distributed collective traced as functional collectives, its
    # result written back into its tensors as eager does; with async_op=True
    # (and a ProcessGroup's methods) a Work whose wait() is where the graph waits.
    COLLECTIVE = "traced as functional collectives, written back in place; async_op=True: a Work, its wait() traced"
    # Point-to-point: torch's own tracing when its switch is on, else a break.
    P2P = "torch's functional point-to-point with TORCHDYNAMO_ENABLE_P2P_COMPILATION=1, else graph break with hint"
    # Traced as stock traces it (torch's own code, guarded as stock guards
    # it): where stock is already right, and a fold would not be sound.
    STOCK = "traced as stock traces it"
    # A Work's wait(): where the graph waits for the collective that made it.
    WAIT = "where the graph waits for its collective (a Work made in the graph)"
    # A clean graph break with the row's hint.
    BREAK = "graph break with hint"
    # A context manager that turns on a switch of global state: set at trace
    # time and in the graph (the calls inside are traced, and replayed by
    # AOTAutograd, under it), entered again where a break resumes inside it.
    SWITCH = "traced: its switch set at trace time and in the graph; entered again after a break"
    # spmd_types: run as itself at trace time on the frame's spmd_types state
    # and the traced tensors' types; what it changes on them is written back.
    TYPES = "runs at trace time on the traced tensors' types; changes written back"
    # spmd_types: a context manager run as itself at trace time on the frame's
    # spmd_types state (the block's state is the frame's; rebuilt at a break).
    CONTEXT = "context manager run at trace time on the frame's spmd_types state"
    # spmd_types: traced as its body (its traceback-filtering wrapper, which
    # only reformats an error raised eagerly, is not traced).
    BODY = "traced as its body (traceback-filtering wrapper skipped)"
    # torch.overrides' ``has_torch_function*`` under the checker: True, as
    # eager answers under a mode (stock Dynamo answers from subclasses only).
    TF_QUERY = "answers as eager under spmd_types' checker; stock elsewhere"
    # torch.overrides' ``handle_torch_function`` under the checker: the call
    # dispatches to it as eager dispatches (the checker sees the public API).
    TF_HANDLER = "dispatches to spmd_types' checker as eager does; stock elsewhere"


# Kinds whose handlers compute a call's answer (a runtime rank op, the group
# of a mesh dim, a DTensor operation): their rows are methods or functions.
_CALL_KINDS = frozenset({Kind.RANK, Kind.GROUP, Kind.DTENSOR_OP, Kind.COLLECTIVE, Kind.P2P, Kind.STOCK, Kind.WAIT,
                         Kind.TYPES, Kind.CONTEXT, Kind.SWITCH, Kind.BODY, Kind.TF_QUERY, Kind.TF_HANDLER})

# Row outcomes the coverage page spells out (a FOLD answer that stays tracked).
TRACKED_MESH = "tracked mesh (no graph node)"
TRACKED_GROUPS = "tuple/list of tracked process groups"


class MemberTableError(ValueError):
    """A member table row that cannot be handled as declared."""


@dataclass(frozen=True, slots=True)
class Member:
    kind: Kind
    # A method (called) rather than an attribute (read).
    method: bool = False
    # BREAK rows only: what the user should do instead.
    hint: str = ""
    # What the coverage page says the plugin does, where it says more than
    # the Kind's own description (``Kind.FOLD`` answering a tracked mesh).
    outcome: str = ""
    # BREAK rows only: the declared graph break (a ``variables.breaks.Break``
    # whose fields are ``what`` and ``hint``) that says why the member cannot
    # be in a graph; None: the tracker's own (it creates distributed state, it
    # is not supported).
    cause: Any = None

    def problems(self) -> list[str]:
        """What is wrong with this row as declared (nothing: ``[]``)."""
        if not isinstance(self.kind, Kind):
            return [f"kind must be a Kind, not {self.kind!r}"]
        found = []
        if not isinstance(self.method, bool):
            found.append(f"method must be True or False, not {self.method!r}")
        if not isinstance(self.hint, str) or not isinstance(self.outcome, str):
            found.append("hint and outcome must be strings")
        elif self.kind is Kind.BREAK:
            if not self.hint.strip():
                found.append("a BREAK row needs a hint (what the user should do instead)")
            if self.outcome:
                found.append("a BREAK row's coverage text is its hint; it takes no outcome")
        elif self.hint:
            found.append(f"only BREAK rows have a hint; this row is {self.kind.name}")
        if self.cause is not None and (self.kind is not Kind.BREAK or not hasattr(self.cause, "gb_type")):
            found.append(f"only BREAK rows have a cause, a declared graph break, not {self.cause!r}")
        if self.kind in _CALL_KINDS and self.method is False:
            found.append(f"a {self.kind.name} row is a method (its handler computes a call), "
                         "but method=False")
        return found

    def coverage_text(self) -> str:
        """What the plugin does with this member, as the coverage page says it."""
        if self.kind is Kind.BREAK:
            why = f" ({self.cause.gb_type})" if self.cause is not None else ""
            return f"graph break{why}, hint: {self.hint.split(':')[0].split('. ')[0].rstrip('.')}"
        return self.outcome or self.kind.value


class MemberTable(Mapping[str, Member]):
    """The rows of one tracked type, checked when the table is defined:
    each row by ``Member.problems``, and with ``calls_only`` (a table of
    functions) every row a call. Read-only."""

    __slots__ = ("name", "calls_only", "_rows")

    def __init__(self, name: str, rows: Mapping[str, Member], *, calls_only: bool = False) -> None:
        self.name = name
        self.calls_only = calls_only
        self._rows = dict(rows)
        found = []
        for member_name, member in self._rows.items():
            if not isinstance(member_name, str) or not member_name.isidentifier():
                found.append(f"{member_name!r}: a member name must be an identifier")
                continue
            if not isinstance(member, Member):
                found.append(f"{member_name}: a row must be a Member, not {member!r}")
                continue
            problems = member.problems()
            if calls_only and member.method is False:
                problems.append("every row of this table is a function call, but method=False")
            found += [f"{member_name}: {p}" for p in problems]
        if found:
            raise MemberTableError(f"member table {name!r}: " + "; ".join(found))

    def __getitem__(self, name: str) -> Member:
        return self._rows[name]

    def get(self, name: str, default: Any = None) -> Any:
        return self._rows.get(name, default)

    def __contains__(self, name: object) -> bool:
        return name in self._rows

    def __iter__(self) -> Iterator[str]:
        return iter(self._rows)

    def __len__(self) -> int:
        return len(self._rows)

    def __repr__(self) -> str:
        return f"MemberTable({self.name!r}, {len(self._rows)} rows)"

    def require_handlers(self, handlers: Mapping[Kind, Callable[..., Any]], consumer: str,
                         rows: Callable[[str, Member], bool] = lambda name, member: True) -> None:
        """Check that ``consumer``'s ``handlers`` (Kind -> function) handle
        every row of this table (every row ``rows(name, member)`` selects)."""
        found = [f"{name}: {member.kind.name} has no handler in {consumer}"
                 for name, member in self._rows.items() if rows(name, member) and member.kind not in handlers]
        found += [f"the handler of {kind.name} in {consumer} is not callable"
                  for kind, handler in handlers.items() if not callable(handler)]
        if found:
            raise MemberTableError(f"member table {self.name!r}: " + "; ".join(found))

    def require_named_handlers(self, handlers: Mapping[str, Callable[..., Any]], consumer: str,
                               rows: Callable[[str, Member], bool]) -> None:
        """Check that ``consumer``'s ``handlers`` (member name -> function)
        are exactly the rows ``rows(name, member)`` selects, each a function."""
        wanted = {name for name, member in self._rows.items() if rows(name, member)}
        found = [f"{name}: no handler in {consumer}" for name in sorted(wanted - set(handlers))]
        found += [f"{name}: {consumer} has a handler but the table has no such row"
                  for name in sorted(set(handlers) - wanted)]
        found += [f"{name}: the handler in {consumer} is not callable"
                  for name, handler in handlers.items() if not callable(handler)]
        if found:
            raise MemberTableError(f"member table {self.name!r}: " + "; ".join(found))
