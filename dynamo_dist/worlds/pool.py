"""A real multi-process gloo world kept alive across many calls.

``run_in_world`` spawns a world per call; a property that checks
hundreds of examples needs one world for all of them. ``GlooPool`` spawns the
ranks once; ``pool.run(fn, *args)`` runs ``fn(*args)`` on every rank (in
step, so collectives match) and returns the per-rank results.
"""

from __future__ import annotations

import multiprocessing as mp
import queue
import traceback
from typing import Any, Callable

import torch.distributed as dist

from .spawned import _free_port, _rank_main, start_ranks, stop_ranks


def _serve(commands: list[Any], results: Any) -> str:

    rank = dist.get_rank()
    while True:
        message = commands[rank].get()
        if message is None:
            return "closed"
        seq, fn, args = message
        try:
            value = (True, fn(*args))
        except BaseException:
            value = (False, traceback.format_exc())
        results.put((rank, seq, value))


class GlooPool:
    """``world_size`` spawned ranks in one gloo world (loopback), serving
    calls until ``close()``. A call that does not finish within ``timeout``
    seconds (a rank stuck in a collective) kills the world and raises
    ``TimeoutError``; the next call spawns a fresh one."""

    def __init__(self, world_size: int = 2, timeout: float = 300.0) -> None:
        self.world_size = world_size
        self.timeout = timeout
        self._procs: list[Any] = []
        self._seq = 0

    def start(self) -> None:
        ctx = mp.get_context("spawn")
        self._commands = [ctx.Queue() for _ in range(self.world_size)]
        self._results = ctx.Queue()
        self._final = ctx.Queue()
        port = _free_port()
        self._procs = start_ranks(ctx, _rank_main, self.world_size,
                                  lambda r: (_serve, r, self.world_size, port, (self._commands, self._results),
                                             self._final))

    def run(self, fn: Callable[..., Any], *args: Any) -> list[Any]:
        """``fn(*args)`` on every rank (``fn`` picklable, module-level);
        the results in rank order, or ``RuntimeError`` with a rank's traceback."""
        if not self._procs:
            self.start()
        self._seq += 1
        for q in self._commands:
            q.put((self._seq, fn, args))
        got: dict[int, Any] = {}
        while len(got) < self.world_size:
            try:
                rank, seq, value = self._results.get(timeout=self.timeout)
            except queue.Empty:
                self.close(kill=True)
                raise TimeoutError(f"gloo world: no answer from ranks "
                                   f"{sorted(set(range(self.world_size)) - set(got))} in {self.timeout}s")
            if seq == self._seq:
                got[rank] = value
        failed = [(r, v[1]) for r, v in sorted(got.items()) if not v[0]]
        if failed:
            raise RuntimeError(f"rank {failed[0][0]} failed:\n{failed[0][1]}")
        return [got[r][1] for r in range(self.world_size)]

    def close(self, kill: bool = False) -> None:
        if not self._procs:
            return
        if not kill:
            for q in self._commands:
                q.put(None)
        stop_ranks(self._procs, grace=0 if kill else 30)
        self._procs = []

    def __enter__(self) -> "GlooPool":
        self.start()
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()
