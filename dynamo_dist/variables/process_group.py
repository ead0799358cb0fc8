"""ProcessGroupVariable: a process group whose queries fold at trace time."""

from __future__ import annotations

from typing import Any

from .. import _compat as C
from .base import DistObjectVariable
from .members import PROCESS_GROUP_MEMBERS
from .runtime_rank import runtime_rank_in


class ProcessGroupVariable(DistObjectVariable):
    MEMBERS = PROCESS_GROUP_MEMBERS
    LABEL = "ProcessGroup"

    def hash_impl(self, tx: Any) -> tuple[int, bool]:
        # ProcessGroup hashes by identity: usable as a dict key inside the
        # region, but the number must not be baked into bytecode.
        return hash(self.value), True

    def runtime_rank_member(self, tx: Any, name: str, args: list, kwargs: dict) -> C.VariableTracker:
        import torch.distributed as dist

        return runtime_rank_in(tx, dist.get_process_group_ranks(self.value))
