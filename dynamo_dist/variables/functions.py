"""torch.distributed functions that fold (``dist.get_rank(pg)`` ...) or break
cleanly (``init_device_mesh`` inside a compiled region): their member
tables, their tracker and their declarations (``DIST_FUNCTION``, and
``C10D_GROUP_HELPER`` for the c10d helpers functional collectives call)."""

from __future__ import annotations

import functools
import types
from typing import Any, Callable, ClassVar, Mapping

import torch.distributed as dist
import torch.distributed.device_mesh
import torch.distributed.distributed_c10d as c10d

from .. import _compat as C
from ..guards import install_default_group_guard, install_identity_guard
from ..tracked_types import TrackedType, declare
from .breaks import Break, short_repr, short_args_repr, graph_break, log, raise_like_eager
from .folding import constant_args
from .importable import ImportableObjectVariable
from .members import Kind, Member, MemberTable
from .process_group import ProcessGroupVariable, runtime_group_rank
from .rebuild import Rebuild, by_import
from .runtime_rank import runtime_rank_in
from .wrap import wrap_value

# torch.distributed functions that fold when given tracked groups.
DIST_FUNCTIONS = MemberTable("torch.distributed", {
    "get_rank": Member(Kind.RANK, method=True),
    "get_world_size": Member(Kind.FOLD, method=True),
    "get_process_group_ranks": Member(Kind.FOLD, method=True),
    "get_backend": Member(Kind.FOLD, method=True),
    "is_initialized": Member(Kind.FOLD, method=True),
    "get_group_rank": Member(Kind.FOLD, method=True),
    "get_global_rank": Member(Kind.FOLD, method=True),
    "init_device_mesh": Member(
        Kind.BREAK,
        method=True,
        hint="Create the mesh once, outside the compiled function, and pass it in "
        "(or read it from a global).",
    ),
    "new_group": Member(
        Kind.BREAK,
        method=True,
        hint="Create process groups outside the compiled function and pass them in.",
    ),
}, calls_only=True)

# c10d helpers that functional collectives call on the group they are given
# (stock folds them only for its own group tracker). Internal: not in the
# coverage table; the funcol cases exercise them.
C10D_GROUP_HELPERS = MemberTable("c10d", {
    name: Member(Kind.FOLD, method=True)
    for name in ("_get_group_size_by_name", "_get_group_tag", "_rank_not_in_group",
                 "_resolve_group_name_by_ranks_and_tag")
}, calls_only=True)

_FUNCTIONS = {**DIST_FUNCTIONS, **C10D_GROUP_HELPERS}
# Where the table's functions are found, in order.
_MODULES = (dist, c10d, torch.distributed.device_mesh)


def _functions_of(table: MemberTable) -> dict[Any, str]:
    found = {}
    for name in table:
        fn = next((getattr(m, name) for m in _MODULES if hasattr(m, name)), None)
        if fn is not None:
            found[fn] = name
    return found


@functools.cache
def user_functions() -> dict[Any, str]:
    """The functions of ``DIST_FUNCTIONS``, mapped to their table name."""
    return _functions_of(DIST_FUNCTIONS)


@functools.cache
def group_helpers() -> dict[Any, str]:
    """The functions of ``C10D_GROUP_HELPERS``, mapped to their table name."""
    return _functions_of(C10D_GROUP_HELPERS)


@functools.cache
def dist_functions() -> dict[Any, str]:
    """The function objects we handle, mapped to their table name."""
    return {**user_functions(), **group_helpers()}


# -- the handler of each Kind ------------------------------------------------
# handler(tracker, tx, member, args, kwargs) -> the answer's tracker.
CallHandler = Callable[["DistFunctionVariable", Any, Member, list, dict], Any]


def unsupported_call(vt: DistFunctionVariable, tx: Any, member: Member, args: list, kwargs: dict) -> Any:
    """BREAK: a clean graph break with the row's hint."""
    what = f"torch.distributed.{vt.name}"
    graph_break(Break.UNSUPPORTED_CALL, context=what, what=what, hint=member.hint)


def rank_call(vt: DistFunctionVariable, tx: Any, member: Member, args: list, kwargs: dict) -> Any:
    """RANK: folded, or a runtime op under ``compile_on_one_rank``."""
    if not C.compile_on_one_rank():
        return fold_call(vt, tx, member, args, kwargs)
    vt._arguments(tx, args, kwargs)
    group_vt = (args or list(kwargs.values()) or [None])[0]
    if isinstance(group_vt, ProcessGroupVariable):
        return runtime_group_rank(tx, group_vt)
    return runtime_rank_in(tx, list(range(dist.get_world_size())))


def fold_call(vt: DistFunctionVariable, tx: Any, member: Member, args: list, kwargs: dict) -> Any:
    """FOLD: called with the arguments' trace-time values; the answer wrapped."""
    pargs, pkwargs = vt._arguments(tx, args, kwargs)
    what = f"torch.distributed.{vt.name}"
    try:
        result = vt.value(*pargs, **pkwargs)
    except Exception as e:
        raise_like_eager(tx, e)
    log.debug("folded %s(%s) -> %s", what, short_args_repr(pargs, pkwargs), short_repr(result))
    return wrap_value(tx, result, Rebuild(vt, ()), what)


class DistFunctionVariable(ImportableObjectVariable):
    STATE = ("name",)
    # Kind -> the function that handles a call of a function of that kind.
    KIND_HANDLERS: ClassVar[Mapping[Kind, CallHandler]] = {
        Kind.FOLD: fold_call,
        Kind.RANK: rank_call,
        Kind.BREAK: unsupported_call,
    }

    def __init__(self, value: Any, name: str, **kwargs: Any) -> None:
        super().__init__(value, **kwargs)
        self.name = name

    def call_function(self, tx: Any, args: list, kwargs: dict) -> Any:
        member = _FUNCTIONS[self.name]
        return self.KIND_HANDLERS[member.kind](self, tx, member, args, kwargs)

    def _arguments(self, tx: Any, args: list, kwargs: dict) -> tuple[list, dict]:
        pargs, pkwargs = constant_args(tx, f"torch.distributed.{self.name}", args, kwargs)
        if (pargs[0] if pargs else pkwargs.get("group")) is None:
            # Answer depends on the default group: guard its identity.
            install_default_group_guard(tx)
        return pargs, pkwargs


DIST_FUNCTIONS.require_handlers(DistFunctionVariable.KIND_HANDLERS, "DistFunctionVariable.KIND_HANDLERS")
C10D_GROUP_HELPERS.require_handlers(DistFunctionVariable.KIND_HANDLERS, "DistFunctionVariable.KIND_HANDLERS")


def _functions(name: str, objects: Callable[[], dict[Any, str]], members: MemberTable) -> TrackedType:
    """The functions of a table: folded or broken as their rows say, each
    guarded as itself and rebuilt by import."""
    return TrackedType(name=name, python_type=types.FunctionType, objects=objects, tracker=DistFunctionVariable,
                       members=members, guard=install_identity_guard, rebuild=by_import)


DIST_FUNCTION = declare(_functions("torch.distributed function", user_functions, DIST_FUNCTIONS))
C10D_GROUP_HELPER = declare(_functions("c10d group helper", group_helpers, C10D_GROUP_HELPERS))
