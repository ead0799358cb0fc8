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


def run_in_world(fn: Callable[..., Any], world_size: int, *args: Any, timeout: float = 300,
                      backend: str = "gloo") -> list[Any]:
    """``fn(*args)`` on each rank (a module-level, picklable function); returns
    the per-rank results in rank order, or raises with the failing rank's
    traceback. ``backend="nccl"`` runs an NCCL world instead, rank ``r`` on
    GPU ``r`` (set as the current device before ``fn`` runs)."""
    ctx = mp.get_context("spawn")
    out = ctx.Queue()
    port = _free_port()
    procs = [
        ctx.Process(target=_rank_main, args=(fn, r, world_size, port, args, out, backend), daemon=True)
        for r in range(world_size)
    ]
    for p in procs:
        p.start()
    results: dict[int, Any] = {}
    try:
        for _ in range(world_size):
            rank, ok, value = out.get(timeout=timeout)
            if not ok:
                raise RuntimeError(f"rank {rank} failed:\n{value}")
            results[rank] = value
    finally:
        for p in procs:
            p.join(timeout=30)
            if p.is_alive():
                p.kill()
    return [results[r] for r in range(world_size)]
