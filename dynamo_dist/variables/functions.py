"""Every public torch.distributed call in a compiled region, one row each:
queries fold (``dist.get_rank(pg)`` ...), collectives with a functional form
are traced as functional collectives (``variables/collectives.py``),
point-to-point is torch's own tracing when its switch is on, and the rest
breaks cleanly, saying why (``init_device_mesh``, ``barrier``, the object
collectives). Their member tables, their tracker and their declarations
(``DIST_FUNCTION``, and ``C10D_GROUP_HELPER`` for the c10d helpers
functional collectives call)."""

from __future__ import annotations

import functools
import types
from typing import Any, Callable, ClassVar, Mapping

import torch.distributed as dist
import torch.distributed.device_mesh
import torch.distributed.distributed_c10d as c10d

from .. import _compat as C
from ..guards import install_default_group_guard
from ..tracked_types import TrackedType, declare
from .breaks import Break, check_causes, short_repr, short_args_repr, graph_break, log, raise_like_eager
from .collectives import collective_call, p2p_call, stock_call
from .folding import constant_args
from .importable import ImportableObjectVariable
from .members import Kind, Member, MemberTable
from .process_group import ProcessGroupVariable, runtime_group_rank
from .rebuild import Rebuild, by_import
from .runtime_rank import runtime_rank_in
from .wrap import wrap_value

_CREATES_STATE = "Create process groups outside the compiled function and pass them in."

# Every public torch.distributed call, with what it does in a compiled
# region: a query folds; a collective with a functional form is traced as
# one; point-to-point is torch's own tracing when its switch is on; the rest
# is a graph break that says why and where to move the call.
DIST_FUNCTIONS = MemberTable("torch.distributed", {
    # -- queries -------------------------------------------------------------
    "get_rank": Member(Kind.RANK, method=True),
    "get_world_size": Member(Kind.FOLD, method=True),
    "get_process_group_ranks": Member(Kind.FOLD, method=True),
    "get_backend": Member(Kind.FOLD, method=True),
    "is_initialized": Member(Kind.FOLD, method=True),
    "get_group_rank": Member(Kind.FOLD, method=True),
    "get_global_rank": Member(Kind.FOLD, method=True),
    "get_backend_config": Member(Kind.FOLD, method=True),
    "get_default_backend_for_device": Member(Kind.FOLD, method=True),
    # (a reduce op: stock reads it where the release's Dynamo can)
    "supports_complex": Member(Kind.STOCK, method=True),
    "is_available": Member(Kind.FOLD, method=True),
    "is_backend_available": Member(Kind.FOLD, method=True),
    **{f"is_{backend}_available": Member(Kind.FOLD, method=True) for backend in ("gloo", "nccl", "mpi", "ucc", "xccl")},
    "is_torchelastic_launched": Member(Kind.FOLD, method=True),
    "get_node_local_rank": Member(Kind.FOLD, method=True),
    # -- collectives with a functional form ----------------------------------
    **{name: Member(Kind.COLLECTIVE, method=True) for name in (
        "all_reduce", "broadcast", "all_gather", "all_gather_into_tensor", "all_gather_single", "reduce_scatter",
        "reduce_scatter_tensor", "reduce_scatter_single", "all_to_all_single", "all_to_all", "all_reduce_coalesced",
        "all_gather_coalesced")},
    # -- point-to-point --------------------------------------------------------
    **{name: Member(Kind.P2P, method=True) for name in ("isend", "irecv", "send", "recv", "batch_isend_irecv",
                                                         "P2POp")},
    # -- collectives without one ------------------------------------------------
    "reduce": Member(Kind.BREAK, method=True, cause=Break.NO_FUNCTIONAL_COLLECTIVE,
                     hint="Use all_reduce (every rank gets the result), which is traced, or call reduce outside "
                     "the compiled function."),
    **{name: Member(Kind.BREAK, method=True, cause=Break.NO_FUNCTIONAL_COLLECTIVE,
                    hint="Use all_gather_into_tensor (every rank gets the result), which is traced, or call it "
                    "outside the compiled function.")
       for name in ("gather", "gather_into_tensor", "gather_single")},
    "scatter": Member(Kind.BREAK, method=True, cause=Break.NO_FUNCTIONAL_COLLECTIVE,
                      hint="Use broadcast of the whole tensor, or all_to_all_single, which are traced, or call "
                      "scatter outside the compiled function."),
    # -- object collectives -------------------------------------------------------
    **{name: Member(Kind.BREAK, method=True, cause=Break.OBJECT_COLLECTIVE,
                    hint="Exchange the objects outside the compiled function and pass the result in, or send "
                    "tensors with the tensor collectives, which are traced.")
       for name in ("all_gather_object", "gather_object", "broadcast_object_list", "scatter_object_list",
                    "send_object_list", "recv_object_list")},
    # -- barriers -----------------------------------------------------------------
    **{name: Member(Kind.BREAK, method=True, cause=Break.HOST_BARRIER,
                    hint="Call it outside the compiled function, before or after the call. Inside, the collectives "
                    "order the ranks through the tensors they produce.")
       for name in ("barrier", "monitored_barrier", "breakpoint")},
    # -- host state ---------------------------------------------------------------
    "get_backend_impl": Member(Kind.BREAK, method=True, cause=Break.HOST_STATE_CALL,
                               hint="Read the backend outside the compiled function and pass in what you need."),
    # (stock reads the count and guards it: a group made later recompiles)
    "get_pg_count": Member(Kind.STOCK, method=True),
    "get_debug_level": Member(Kind.BREAK, method=True, cause=Break.HOST_STATE_CALL,
                              hint="Read it outside the compiled function (set_debug_level changes it)."),
    "set_timeout": Member(Kind.BREAK, method=True, cause=Break.HOST_STATE_CALL,
                          hint="Set timeouts outside the compiled function."),
    "record_comm": Member(Kind.BREAK, method=True, cause=Break.HOST_STATE_CALL,
                          hint="Enter it outside the compiled function. Inside, collectives are graph operations, "
                          "which the graph names."),
    # -- groups and meshes ----------------------------------------------------------
    "init_device_mesh": Member(
        Kind.BREAK,
        method=True,
        hint="Create the mesh once, outside the compiled function, and pass it in "
        "(or read it from a global).",
    ),
    **{name: Member(Kind.BREAK, method=True, hint=_CREATES_STATE)
       for name in ("new_group", "new_subgroups", "new_subgroups_by_enumeration", "split_group", "shrink_group")},
    "init_process_group": Member(Kind.BREAK, method=True,
                                 hint="Initialise the default group once, before compiling."),
    "destroy_process_group": Member(Kind.BREAK, method=True,
                                    hint="Destroy groups outside the compiled function, once compiled code no "
                                    "longer runs on them."),
}, calls_only=True)
check_causes(DIST_FUNCTIONS)

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
    """BREAK: a clean graph break with the row's hint, and its cause (it
    creates distributed state, unless the row says why else)."""
    what = f"torch.distributed.{vt.name}"
    if member.cause is not None:
        graph_break(member.cause, context=what, what=what, hint=member.hint)
    graph_break(Break.UNSUPPORTED_CALL, context=what, what=what, hint=member.hint)


def rank_call(vt: DistFunctionVariable, tx: Any, member: Member, args: list, kwargs: dict) -> Any:
    """RANK: folded, or a runtime op under ``compile_on_one_rank``."""
    if not C.distributed.compile_on_one_rank():
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
        Kind.COLLECTIVE: collective_call,
        Kind.P2P: p2p_call,
        Kind.STOCK: stock_call,
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
DIST_FUNCTIONS.require_named_handlers(C.c10d.TRACED_FORMS, "_compat.c10d.TRACED_FORMS",
                                      rows=lambda name, member: member.kind is Kind.COLLECTIVE)
C10D_GROUP_HELPERS.require_handlers(DistFunctionVariable.KIND_HANDLERS, "DistFunctionVariable.KIND_HANDLERS")


# What a torch.distributed call is: a Python function, a builtin
# (``get_debug_level``), or a class called for its instance (``P2POp``).
_CALLABLE_TYPES = (types.FunctionType, types.BuiltinFunctionType, type)


def _functions(name: str, objects: Callable[[], dict[Any, str]], members: MemberTable) -> TrackedType:
    """The functions of a table: folded, traced or broken as their rows
    say, each guarded as itself and rebuilt by import."""
    return TrackedType(name=name, python_type=_CALLABLE_TYPES, objects=objects, tracker=DistFunctionVariable,
                       members=members, guard=C.dynamo.guard_identity, rebuild=by_import)


DIST_FUNCTION = declare(_functions("torch.distributed function", user_functions, DIST_FUNCTIONS))
C10D_GROUP_HELPER = declare(_functions("c10d group helper", group_helpers, C10D_GROUP_HELPERS))
