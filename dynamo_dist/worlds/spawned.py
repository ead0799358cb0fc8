"""Run a function on every rank of a real multi-process gloo world on
loopback (127.0.0.1), or an NCCL world with one rank per GPU. Spawning is the
slow part: do many checks per call."""

from __future__ import annotations

import multiprocessing as mp
import queue
import socket
import time
import traceback
from typing import Any, Callable

import torch
import torch.distributed as dist


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class RankFailed(RuntimeError):
    """A rank raised: its traceback is in the message (and ``traceback``)."""

    def __init__(self, rank: int, traceback_text: str, answered: int = 0) -> None:
        super().__init__(f"rank {rank} failed:\n{traceback_text}")
        self.rank, self.traceback, self.answered = rank, traceback_text, answered


def start_ranks(ctx: Any, target: Callable[..., None], count: int, args_of: Callable[[int], tuple]) -> list[Any]:
    """``count`` daemon processes of ``ctx`` running ``target(*args_of(rank))``, started."""
    procs = [ctx.Process(target=target, args=args_of(r), daemon=True) for r in range(count)]
    for p in procs:
        p.start()
    return procs


def gather_answers(out: Any, procs: list[Any], timeout: float, what: str = "ranks",
                   deaths: bool = False) -> dict[int, Any]:
    """The ``(rank, ok, value)`` answers of ``procs`` on the queue ``out``:
    ``{rank: value}``; raises ``RankFailed`` for a rank that raised and
    ``TimeoutError`` (naming the silent ranks and ``what`` they are) when no
    answer came within ``timeout`` seconds of the start or of the answer
    before. With ``deaths``, a process that exits without answering counts
    as ``("exit", code)``."""
    answers: dict[int, Any] = {}
    deadline = time.monotonic() + timeout
    while len(answers) < len(procs):
        if deaths:
            died = {r: ("exit", p.exitcode) for r, p in enumerate(procs)
                    if r not in answers and p.exitcode not in (None, 0)}
            if len(answers) + len(died) == len(procs) and out.empty():
                answers.update(died)
                break
        left = deadline - time.monotonic()
        if left <= 0:
            raise TimeoutError(f"{what} {sorted(set(range(len(procs))) - set(answers))} gave no answer "
                               f"in {timeout} s")
        try:
            rank, ok, value = out.get(timeout=min(left, 1.0) if deaths else left)
        except queue.Empty:
            continue
        if not ok:
            raise RankFailed(rank, value, len(answers))
        answers[rank] = value
        deadline = time.monotonic() + timeout
    return answers


def stop_ranks(procs: list[Any], grace: float = 30, kill: bool = False) -> None:
    """Join each process, killing one still alive after ``grace`` seconds
    (at once with ``kill``)."""
    for p in procs:
        if kill:
            p.kill()
        p.join(timeout=grace)
        if p.is_alive():
            p.kill()
            p.join(timeout=10)


def leave_world(finished: bool) -> None:
    """Tear the default group down on this rank. After a rank finished its
    work it first waits at a barrier, so no rank closes its gloo connections
    while a peer may still be reading from them; a rank that failed skips the
    barrier (its peers may never reach it) and leaves at once."""

    if finished:
        dist.barrier()
    dist.destroy_process_group()


def _rank_main(fn: Callable[..., Any], rank: int, world_size: int, port: int, args: tuple, out: Any,
               backend: str = "gloo") -> None:

    try:
        if backend == "nccl":
            torch.cuda.set_device(rank % torch.cuda.device_count())  # before NCCL picks a device
        dist.init_process_group(
            backend, init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=world_size
        )
        finished = False
        try:
            out.put((rank, True, fn(*args)))
            finished = True
        finally:
            leave_world(finished)
    except BaseException:
        out.put((rank, False, traceback.format_exc()))


# A free port is picked, closed, then bound again by rank 0's store: another
# process on the machine may take it in between (parallel test workers do).
# The world is then started again on another port, up to this many times.
_PORT_ATTEMPTS = 3


def _port_taken(value: str) -> bool:
    return "EADDRINUSE" in value and "init_process_group" in value


def _run_once(ctx: Any, fn: Callable[..., Any], world_size: int, args: tuple, timeout: float, backend: str,
              last: bool) -> dict[int, Any] | None:
    """One start of the world on a fresh port: the per-rank results, or None
    when rank 0 found the port taken (and this is not the last attempt)."""
    out = ctx.Queue()
    port = _free_port()
    procs = start_ranks(ctx, _rank_main, world_size, lambda r: (fn, r, world_size, port, args, out, backend))
    taken = False
    try:
        return gather_answers(out, procs, timeout)
    except RankFailed as e:
        if not last and not e.answered and _port_taken(e.traceback):
            taken = True
            return None
        raise
    finally:
        stop_ranks(procs, kill=taken)  # a taken port: the others wait to reach a store that is not theirs


def run_in_world(fn: Callable[..., Any], world_size: int, *args: Any, timeout: float = 300,
                      backend: str = "gloo") -> list[Any]:
    """``fn(*args)`` on each rank (a module-level, picklable function); returns
    the per-rank results in rank order, or raises with the failing rank's
    traceback. ``backend="nccl"`` runs an NCCL world instead, rank ``r`` on
    GPU ``r`` (set as the current device before ``fn`` runs)."""
    ctx = mp.get_context("spawn")
    for attempt in range(_PORT_ATTEMPTS):
        results = _run_once(ctx, fn, world_size, args, timeout, backend, last=attempt == _PORT_ATTEMPTS - 1)
        if results is not None:
            break
    return [results[r] for r in range(world_size)]
