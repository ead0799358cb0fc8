"""Rank programs for the compile-once tests: real gloo ranks, each in a
fresh process, compiling with inductor under ``compile_on_one_rank``.

``spawn_world`` starts the ranks and, unlike ``run_in_world``, lets a
rank die: the job's store is served by the test process (as torchrun's agent
serves it, so it outlives any rank), each rank leaves without a barrier (a
dead peer would hold it forever), and a rank that exits without a result is
reported by its exit code.

The faults are real: a compile that raises or kills its process is an inductor
custom pass (a ``CustomGraphPass`` with a fixed uuid, so it is part of the
cache key and the graph stays cacheable) that strikes on the first graph
lowered in the job, whichever rank lowers it; a slow or corrupting store wraps
the job's real store; a store that is gone is a real ``TCPStore`` whose server
was shut down.
"""

from __future__ import annotations

import datetime
import functools
import gc
import logging
import multiprocessing as mp
import os
import time
import traceback
from typing import Any, Callable

import torch
import torch.distributed as dist
from torch._inductor import config as inductor_config
from torch._inductor.custom_graph_pass import CustomGraphPass

import cache_programs
import dynamo_dist
from dynamo_dist._compat import caches as compat_caches
from dynamo_dist import compile_once
from dynamo_dist.diagnostics.explain import explaining
from dynamo_dist.testing import make_mesh
from dynamo_dist.worlds.spawned import gather_answers, start_ranks, stop_ranks

KILLED = 17  # the exit code of a rank killed mid-compile


def _rank_main(fn: Callable[..., Any], rank: int, world: int, port: int, args: tuple, out: Any) -> None:
    try:
        store = dist.TCPStore("127.0.0.1", port, is_master=False, timeout=datetime.timedelta(seconds=120))
        dist.init_process_group("gloo", store=store, rank=rank, world_size=world,
                                timeout=datetime.timedelta(seconds=120))
        result: tuple = (rank, True, fn(*args))
    except BaseException:
        result = (rank, False, traceback.format_exc())
    out.put(result)
    out.close()
    out.join_thread()
    os._exit(0)  # no barrier, no teardown: a peer may be dead


def spawn_world(fn: Callable[..., Any], world: int, *args: Any, timeout: float = 600, **kwargs: Any) -> dict[int, Any]:
    """``fn(*args, **kwargs)`` on each rank of a fresh gloo world: ``{rank: result}``
    for the ranks that returned, ``{rank: ("exit", code)}`` for the ones
    that died; raises with the traceback of a rank that raised."""
    fn = functools.partial(fn, **kwargs)
    ctx = mp.get_context("spawn")
    out = ctx.Queue()
    server = dist.TCPStore("127.0.0.1", 0, is_master=True, wait_for_workers=False)
    port = server.port
    procs = start_ranks(ctx, _rank_main, world, lambda r: (fn, r, world, port, args, out))
    try:
        return gather_answers(out, procs, timeout, deaths=True)
    finally:
        stop_ranks(procs, grace=10)


class StrikeOnce(CustomGraphPass):
    """Fails the first graph lowered in the job (``raise`` or ``exit``)."""

    def __init__(self, how: str) -> None:
        self.how = how

    def __call__(self, graph: Any) -> None:
        if compat_caches.default_store().add("test/strikes", 1) == 1:
            if self.how == "exit":
                os._exit(KILLED)
            raise RuntimeError("the compile failed (injected)")

    def uuid(self) -> str:
        return "compile-once test strike"


class WrappedStore(dist.Store):
    """The job's store, slower (``delay_s`` per operation) or damaging the
    artifact chunks it returns (``damage``: "corrupt" or "truncate")."""

    def __init__(self, inner: Any, delay_s: float = 0.0, damage: str | None = None) -> None:
        super().__init__()
        self.inner, self.delay_s, self.damage = inner, delay_s, damage

    def _slow(self) -> None:
        if self.delay_s:
            time.sleep(self.delay_s)

    def set(self, key: str, value: bytes) -> None:
        self._slow()
        self.inner.set(key, value)

    def get(self, key: str) -> bytes:
        self._slow()
        value = self.inner.get(key)
        if self.damage and "/data/" in key:
            value = value[:-100] if self.damage == "truncate" else value[:-100] + b"\x00" * 100
        return value

    def add(self, key: str, amount: int) -> int:
        self._slow()
        return self.inner.add(key, amount)

    def check(self, keys: list[str]) -> bool:
        self._slow()
        return self.inner.check(keys)

    def wait(self, keys: list[str], timeout: datetime.timedelta) -> None:
        self._slow()
        self.inner.wait(keys, timeout)

    def compare_set(self, key: str, expected: str, desired: str) -> bytes:
        self._slow()
        return self.inner.compare_set(key, expected, desired)

    def delete_key(self, key: str) -> bool:
        self._slow()
        return self.inner.delete_key(key)


class _Warnings(logging.Handler):
    def __init__(self) -> None:
        super().__init__(logging.WARNING)
        self.messages: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.messages.append(record.getMessage())


def _gone_store() -> Any:
    """A client of a TCPStore whose server (rank 0's) has been shut down."""
    server = None
    if dist.get_rank() == 0:
        server = dist.TCPStore("127.0.0.1", 0, is_master=True, wait_for_workers=False)
        compat_caches.default_store().set("test/gone-port", str(server.port))
    port = int(compat_caches.default_store().get("test/gone-port"))
    client = dist.TCPStore("127.0.0.1", port, is_master=False, timeout=datetime.timedelta(seconds=10))
    dist.barrier()
    if server is not None:
        del server
        gc.collect()
    dist.barrier()
    return client


def rank_run(base: str, program: str = "tp_mlp", one_rank: bool = True, shared_dir: bool = False,
             programs: dict | None = None, strike: str | None = None, store: str = "job",
             stale_s: float = 30.0, plugin: bool = True, explain: bool = False, precompile: bool = False,
             save: bool = False, local_world: int = 1) -> dict:
    """One rank: ``program`` (or ``programs[rank]``) compiled with inductor,
    run forward and backward, compared with eager. ``strike``: the first
    compile in the job raises or exits; ``store``: "job" (the job's store),
    "slow", "corrupt", "truncate" (wrapping it) or "gone"; ``explain``: under
    ``explain`` (its report's cache outcomes are the result's ``explained``);
    ``precompile``: with torch's precompile caching on (``TORCH_CACHING_PRECOMPILE=1``); ``save``: then
    ``torch.compiler.save_cache_artifacts()`` (which writes Dynamo's entries under precompile);
    ``local_world``: the ranks grouped in nodes of that many, as torchrun sets ``LOCAL_WORLD_SIZE``,
    ``LOCAL_RANK`` and ``GROUP_RANK`` (their shared downloads under ``base``)."""
    rank = dist.get_rank()
    torch._dynamo.config.caching_precompile = precompile
    os.environ["TORCHINDUCTOR_CACHE_DIR"] = base if shared_dir else os.path.join(base, f"rank{rank}")
    if local_world > 1:
        os.environ.update(LOCAL_WORLD_SIZE=str(local_world), LOCAL_RANK=str(rank % local_world),
                          GROUP_RANK=str(rank // local_world))
        dynamo_dist.config.compile_once_host_dir = os.path.join(base, "nodes")
    warnings = _Warnings()
    logging.getLogger("dynamo_dist").addHandler(warnings)
    dynamo_dist.config.compile_once_stale_s = stale_s
    if store != "job":
        job = compat_caches.default_store()
        wrapped = _gone_store() if store == "gone" else WrappedStore(
            job, delay_s=0.05 if store == "slow" else 0.0, damage=store if store in ("corrupt", "truncate") else None)
        compat_caches.default_store = lambda: wrapped
    if strike:
        inductor_config.post_grad_custom_post_pass = StrikeOnce(strike)
    program = (programs or {}).get(str(rank), program)
    options = {"save_artifacts": os.path.join(base, f"artifacts{rank}")} if save else {}
    mesh = make_mesh((dist.get_world_size(),), ("tp",))
    raised = None
    if explain:
        with explaining(plugin=plugin, backend="inductor") as session:
            result = cache_programs.run_program(program, mesh, plugin=plugin, one_rank=one_rank, **options)
        result["explained"] = {"compile_once": session.report.compile_once,
                               "outcomes": [(o.cache, o.stage, o.state, o.source)
                                            for g in session.report.graphs for o in g.cache],
                               "frames": [(f.function, f.origin, f.why) for f in session.report.frames]}
        return {**result, "stats": compile_once.stats(), "warnings": warnings.messages}
    try:
        result = cache_programs.run_program(program, mesh, plugin=plugin, one_rank=one_rank)
    except Exception as e:  # the injected failure reached this rank's compile: compile again
        raised = f"{type(e).__name__}: {e}"
        torch._dynamo.reset()
        result = cache_programs.run_program(program, mesh, plugin=plugin, one_rank=one_rank)
    result.update(stats=compile_once.stats(), inactive=compile_once.inactive_reason(), raised=raised,
                  warnings=warnings.messages)
    return result
