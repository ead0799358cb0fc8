"""Run a function on every rank of a real multi-process gloo world on
loopback (127.0.0.1), or an NCCL world with one rank per GPU. Spawning is the
slow part: do many checks per call."""

from __future__ import annotations

import multiprocessing as mp
import socket
import traceback
from typing import Any, Callable

import torch
import torch.distributed as dist


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


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
    procs = [
        ctx.Process(target=_rank_main, args=(fn, r, world_size, port, args, out, backend), daemon=True)
        for r in range(world_size)
    ]
    for p in procs:
        p.start()
    results: dict[int, Any] = {}
    taken = False
    try:
        for _ in range(world_size):
            rank, ok, value = out.get(timeout=timeout)
            if not ok:
                if not last and not results and _port_taken(value):
                    taken = True
                    return None
                raise RuntimeError(f"rank {rank} failed:\n{value}")
            results[rank] = value
    finally:
        for p in procs:
            if taken:
                p.kill()  # the others wait to reach a store that is not theirs
            p.join(timeout=30)
            if p.is_alive():
                p.kill()
    return results


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
