"""torch.distributed functions that fold (``dist.get_rank(pg)`` ...) or break
cleanly (``init_device_mesh`` inside a compiled region)."""

from __future__ import annotations

import functools
from typing import Any

from .. import _compat as C
from ..guards import install_default_group_guard
from .base import (
    ImportableObjectVariable,
    Rebuild,
    constant_args,
    describe,
    graph_break,
    log,
    raise_like_eager,
    wrap_value,
)
from .members import C10D_GROUP_HELPERS, DIST_FUNCTIONS, Kind
from .runtime_rank import runtime_rank_in

_FUNCTIONS = {**DIST_FUNCTIONS, **C10D_GROUP_HELPERS}


@functools.cache
def dist_functions() -> dict[Any, str]:
    """The function objects we handle, mapped to their table name."""
    import torch.distributed as dist
    import torch.distributed.distributed_c10d as c10d
    from torch.distributed.device_mesh import init_device_mesh

    found = {}
    for name in _FUNCTIONS:
        fn = init_device_mesh if name == "init_device_mesh" else getattr(dist, name, getattr(c10d, name, None))
        if fn is not None:
            found[fn] = name
    return found


class DistFunctionVariable(ImportableObjectVariable):
    _nonvar_fields = {"name", *ImportableObjectVariable._nonvar_fields}

    def __init__(self, value: Any, name: str, **kwargs: Any) -> None:
        super().__init__(value, **kwargs)
        self.name = name

    def call_function(self, tx: Any, args: list, kwargs: dict) -> C.VariableTracker:
        member = _FUNCTIONS[self.name]
        what = f"torch.distributed.{self.name}"
        if member.kind is Kind.BREAK:
            graph_break(
                "unsupported torch.distributed call",
                what,
                f"`{what}` creates distributed state (communicators, groups); it cannot "
                "run inside a compiled region.",
                [member.hint],
            )
        pargs, pkwargs = constant_args(tx, what, args, kwargs)
        group = pargs[0] if pargs else pkwargs.get("group")
        if group is None:
            # Answer depends on the default group: guard its identity.
            install_default_group_guard(tx)
        if member.kind is Kind.RANK and C.compile_on_one_rank():
            import torch.distributed as dist

            from .process_group import ProcessGroupVariable, runtime_group_rank

            group_vt = (args or list(kwargs.values()) or [None])[0]
            if isinstance(group_vt, ProcessGroupVariable):
                return runtime_group_rank(tx, group_vt)
            return runtime_rank_in(tx, list(range(dist.get_world_size())))
        try:
            result = self.value(*pargs, **pkwargs)
        except Exception as e:
            raise_like_eager(tx, e)
        shown = ", ".join([*map(describe, pargs), *(f"{k}={describe(v)}" for k, v in pkwargs.items())])
        log.debug("folded %s(%s) -> %s", what, shown, describe(result))
        return wrap_value(tx, result, Rebuild(self, ()), what)
