"""A fake world that records its collectives: ``recording_world``.

Like ``fake_world`` (one process posing as a rank of a larger world;
collectives move no data), but every group is a Python ``ProcessGroup`` that
writes down each collective it is asked to run, with its group's global
ranks. It sees what compiled code runs, a graph loaded from a compile cache
included: the functional collectives (``_c10d_functional.*``) that graphs
call reach the group itself, where a ``TorchDispatchMode`` would stop Dynamo
compiling (or fail its guards). A collective is told apart by its op and
its group's ranks, never by the group's name (names are a per-process
counter).

A collective the group does not define (torch's ``ProcessGroup`` base sends
it on to a C++ backend, which these groups have none of) fails with torch's
"No backend type associated with device type cpu": never silently unrecorded.
"""

from __future__ import annotations

import contextlib
import sys
from dataclasses import dataclass, field
from typing import Any, Iterator

import torch
import torch.distributed as dist

from .._compat import observe as O

# The reduce ops by name, for the op of a reducing collective.
_REDUCE_OPS = ("SUM", "AVG", "MAX", "MIN", "PRODUCT", "BAND", "BOR", "BXOR", "PREMUL_SUM")


@dataclass(frozen=True)
class Collective:
    """One collective a group ran: its op (``all_reduce(sum)``,
    ``all_gather_into_tensor``, ...) and the sorted global ranks of its group."""

    op: str
    ranks: tuple[int, ...]

    def __str__(self) -> str:
        return f"{self.op} over {list(self.ranks)}"


@dataclass
class CollectiveLog:
    """What the groups of a recording world ran, in order."""

    collectives: list[Collective] = field(default_factory=list)

    def clear(self) -> None:
        self.collectives.clear()

    def take(self) -> list[Collective]:
        """The collectives recorded so far, and an empty log."""
        taken = list(self.collectives)
        self.clear()
        return taken


def _op_name(opts: Any) -> str:
    op = getattr(opts, "reduceOp", None)
    return next((name.lower() for name in _REDUCE_OPS if op == getattr(dist.ReduceOp, name, None)), str(op))


class RecordingGroup(dist.ProcessGroup):
    """A process group of the recording world: each collective is written to
    ``log`` as a ``Collective`` and returns a finished ``Work`` (no data moves,
    as in torch's fake backend). The method names are those torch's Python
    process-group bridge calls."""

    def __init__(self, rank: int, size: int, ranks: tuple[int, ...], log: CollectiveLog) -> None:
        super().__init__(rank, size)
        self.ranks = tuple(sorted(ranks))
        self.log = log
        self._name = ""
        self._desc = ""

    # -- identity --------------------------------------------------------------
    def getBackendName(self) -> str:
        return O.RECORDING_BACKEND

    def setGroupName(self, name: str) -> None:
        self._name = name

    def getGroupName(self) -> str:
        return self._name

    @property
    def group_name(self) -> str:
        return self._name

    def setGroupDesc(self, desc: str) -> None:
        self._desc = desc

    def getGroupDesc(self) -> str:
        return self._desc

    @property
    def group_desc(self) -> str:
        return self._desc

    def __repr__(self) -> str:
        return f"RecordingGroup({self._name!r}, ranks={list(self.ranks)}, rank={self.rank()})"

    # -- collectives -----------------------------------------------------------
    def _ran(self, op: str, result: Any, count: int = 1) -> Any:
        self.log.collectives.append(Collective(op if count == 1 else f"{op}_coalesced", self.ranks))
        return O.completed_work(result)

    def allreduce(self, tensors: list[torch.Tensor], opts: Any = None) -> Any:
        return self._ran(f"all_reduce({_op_name(opts)})", tensors)

    def allreduce_coalesced(self, tensors: list[torch.Tensor], opts: Any = None) -> Any:
        return self._ran(f"all_reduce({_op_name(opts)})", tensors, len(tensors))

    def allgather(self, outputs: list[list[torch.Tensor]], inputs: list[torch.Tensor], opts: Any = None) -> Any:
        return self._ran("all_gather", outputs)

    def all_gather_single(self, output: torch.Tensor, input: torch.Tensor, opts: Any = None) -> Any:
        return self._ran("all_gather_into_tensor", [output])

    def allgather_into_tensor_coalesced(self, outputs: list[torch.Tensor], inputs: list[torch.Tensor],
                                        opts: Any = None) -> Any:
        return self._ran("all_gather_into_tensor", outputs, len(outputs))

    all_gather_single_coalesced = allgather_into_tensor_coalesced

    def reduce_scatter(self, outputs: list[torch.Tensor], inputs: list[list[torch.Tensor]], opts: Any = None) -> Any:
        return self._ran(f"reduce_scatter({_op_name(opts)})", outputs)

    def reduce_scatter_single(self, output: torch.Tensor, input: torch.Tensor, opts: Any = None) -> Any:
        return self._ran(f"reduce_scatter_tensor({_op_name(opts)})", [output])

    def reduce_scatter_tensor_coalesced(self, outputs: list[torch.Tensor], inputs: list[torch.Tensor],
                                        opts: Any = None) -> Any:
        return self._ran(f"reduce_scatter_tensor({_op_name(opts)})", outputs, len(outputs))

    reduce_scatter_single_coalesced = reduce_scatter_tensor_coalesced

    def all_to_all_single(self, output: torch.Tensor, input: torch.Tensor, output_splits: Any, input_splits: Any,
                          opts: Any = None) -> Any:
        return self._ran("all_to_all_single", [output])

    alltoall_base = all_to_all_single

    def alltoall(self, outputs: list[torch.Tensor], inputs: list[torch.Tensor], opts: Any = None) -> Any:
        return self._ran("all_to_all", outputs)

    def broadcast(self, tensors: list[torch.Tensor], opts: Any = None) -> Any:
        return self._ran("broadcast", tensors)

    def reduce(self, tensors: list[torch.Tensor], opts: Any = None) -> Any:
        return self._ran(f"reduce({_op_name(opts)})", tensors)

    def gather(self, outputs: Any, inputs: list[torch.Tensor], opts: Any = None) -> Any:
        return self._ran("gather", outputs)

    def scatter(self, outputs: list[torch.Tensor], inputs: Any, opts: Any = None) -> Any:
        return self._ran("scatter", outputs)

    def barrier(self, opts: Any = None) -> Any:
        return self._ran("barrier", [])


# The log the groups being created write to (the innermost recording world's).
_ACTIVE: list[CollectiveLog] = []


def _create_group(options: Any, backend_options: Any) -> RecordingGroup:
    ranks = tuple(options.global_ranks_in_group) or tuple(range(options.group_size))  # () for the world
    return RecordingGroup(options.group_rank, options.group_size, ranks, _ACTIVE[-1])


@contextlib.contextmanager
def recording_world(world_size: int, rank: int = 0) -> Iterator[CollectiveLog]:
    """A fake default process group for the block, as ``fake_world``, whose
    groups record each collective in the ``CollectiveLog`` yielded.

    ``dynamo_dist``'s caches take it for a fake world (one process posing as
    a rank), as they take ``fake_world``.
    """
    if dist.is_initialized():
        raise RuntimeError("recording_world: a default process group is already initialised; "
                           "destroy it first (dist.destroy_process_group()).")
    if not O.backend_registered(O.RECORDING_BACKEND):  # once per process, as torch registers "fake"
        dist.Backend.register_backend(O.RECORDING_BACKEND, _create_group, extended_api=True, devices=["cpu"])
    log = CollectiveLog()
    hook = sys.excepthook  # init_process_group chains a rank-prefixing hook onto it
    _ACTIVE.append(log)
    try:
        dist.init_process_group(O.RECORDING_BACKEND, store=O.fake_store(), rank=rank, world_size=world_size)
        try:
            yield log
        finally:
            dist.destroy_process_group()
    finally:
        _ACTIVE.pop()
        sys.excepthook = hook
