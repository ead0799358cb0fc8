"""The compile-once section: what a cold W-rank job pays to compile, stock
vs dynamo_dist vs dynamo_dist with compile once.

Every side runs under ``compile_on_one_rank`` (``TORCH_DISTRIBUTED_COMPILE_ON_ONE_RANK=1``,
the only setting where graphs are the same on every rank), the project's TP
block (``demo.models``) trained one step (forward, ``sum()`` loss,
backward) with inductor, on a gloo world of W ranks in fresh processes. Each
rank has its own empty ``TORCHINDUCTOR_CACHE_DIR``, as ranks on separate
hosts (no shared disk: what one rank compiles reaches another only through
the job's store). Inductor compiles in-process (``compile_threads=1``), so
the CPU time of a rank's first step is its compile (or load) and its step.

- **job**: per sample, one fresh world per side, sides alternating; per
  side the FX-graph compiles per distinct graph of the job (FX misses summed
  over the ranks / FX lookups of one rank), the CPU seconds of the first step
  summed over the ranks, and the slowest rank's first step (ranks start it
  together). The same for the client drivers' training steps that run under
  ``compile_on_one_rank`` (``CLIENT_ROWS``, rows of ``warm_clients``).
- **fleet**: torch's Redis remote caches on (a ``redis-server`` of the
  benchmark's own): job A cold, then job B on new empty local cache dirs (a new
  host); B's slowest first step and its cache hits.
- **coordination**: the protocol alone (``compile_once.store``) among 16 to
  64 processes on one ``TCPStore``: each of ``keys`` graphs "compiles" for
  ``compile_s`` seconds on the rank that claims it; compiles per key, and the
  time from a publish to the last rank holding its bytes.
"""

from __future__ import annotations

import json
import multiprocessing as mp
import os
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import time
import traceback
from typing import Any, Callable

import torch
import torch.distributed as dist
from torch.distributed.device_mesh import init_device_mesh

import dynamo_dist
from dynamo_dist._compat import observe as O

from dynamo_dist import compile_once
from dynamo_dist.compile_once.store import Decision, JobStore
from devtools import PLUGIN, STOCK, error_line
from devtools.clients import run_driver
from dynamo_dist.demo.models import build_model, local_input, make_input
from dynamo_dist.worlds import run_in_world
from dynamo_dist.worlds.spawned import gather_answers, start_ranks, stop_ranks
from . import _timing as T
from ._models import model_config, train_step
from ._timing import Task
from .warm_clients import ROWS as CLIENTS
from .warm_clients import skip_reason as client_skip_reason

ONCE = "compile_once"
SIDES = (STOCK, PLUGIN, ONCE)
# The clients' rows that train under compile_on_one_rank like eager (the
# others: docs/compile-once.md).
CLIENT_ROWS = ("transformers Llama TP=2", "torchtitan FSDP2, no AC", "torchtitan SimpleFSDP, FSDP",
               "torchtitan TP=2, partial_dtensor, no AC")


# ---------------------------------------------------------------------------
# One job: a gloo world of fresh processes (run in a child process of its own).


def _rank_step(side: str, model_name: str, size: str, base: str) -> dict[str, Any]:
    rank = dist.get_rank()
    os.environ["TORCHINDUCTOR_CACHE_DIR"] = os.path.join(base, f"rank{rank}")
    torch.set_num_threads(1)  # the ranks share the machine's cores
    dynamo_dist.config.compile_once = side == ONCE
    compile_once.reset_stats()
    if model_name in CLIENTS:
        return _client_step(side, model_name)
    (dynamo_dist.uninstall if side == STOCK else dynamo_dist.install)()
    config = model_config(size)
    mesh = init_device_mesh("cpu", (dist.get_world_size(),), mesh_dim_names=("tp",))
    model = build_model(model_name, config, mesh=mesh)
    x = local_input(model_name, make_input(config), mesh)
    compiled = torch.compile(train_step, backend="inductor", fullgraph=True)
    dist.barrier()
    start, cpu = time.perf_counter(), T.cpu_seconds()
    compiled(model, x).backward()
    return {"wall": time.perf_counter() - start, "cpu": T.cpu_seconds() - cpu, "caches": O.outcome_counts(),
            "compile_once": compile_once.stats()}


def _client_step(side: str, name: str) -> dict[str, Any]:
    """A client's first training step, through its driver (which installs
    the plugin or not per mode and starts the ranks together)."""
    row = CLIENTS[name]
    [result] = run_driver(row.client, "run_case", row.case, steps=1, modes=(STOCK if side == STOCK else PLUGIN,),
                          backend="inductor", explain=False)
    if result.error:
        raise RuntimeError(result.error)
    return {"wall": result.step_seconds[0], "cpu": result.step_cpu_seconds[0], "caches": O.outcome_counts(),
            "compile_once": compile_once.stats()}


def job(side: str, ranks: int, model_name: str, size: str, base: str) -> dict[str, Any]:
    """One cold job of ``ranks`` ranks (cache dirs under ``base``): per rank
    and the job's figures."""
    per_rank = run_in_world(_rank_step, ranks, side, model_name, size, base, timeout=1200)
    lookups = sum(per_rank[0]["caches"]["fx_graph"].values())
    return {
        "wall": max(r["wall"] for r in per_rank),
        "cpu": sum(r["cpu"] for r in per_rank),
        "compiles_per_graph": sum(r["caches"]["fx_graph"]["miss"] for r in per_rank) / max(lookups, 1),
        "hits": sum(r["caches"]["fx_graph"]["hit"] + r["caches"]["aot_autograd"]["hit"] for r in per_rank),
        "lookups": sum(sum(r["caches"][c].values()) for r in per_rank for c in ("fx_graph", "aot_autograd")),
        "per_rank": per_rank,
    }


def _child_env(extra: dict[str, str]) -> dict[str, str]:
    env = dict(os.environ)
    for name in ("TORCHINDUCTOR_FX_GRAPH_REMOTE_CACHE", "TORCHINDUCTOR_AUTOGRAD_REMOTE_CACHE",
                 "TORCHINDUCTOR_FORCE_DISABLE_CACHES", "TORCHINDUCTOR_CACHE_DIR"):
        env.pop(name, None)
    env.update(TORCH_DISTRIBUTED_COMPILE_ON_ONE_RANK="1", TORCHINDUCTOR_COMPILE_THREADS="1",
               TORCHINDUCTOR_FX_GRAPH_CACHE="1", TORCHINDUCTOR_AUTOGRAD_CACHE="1")
    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    env["PYTHONPATH"] = os.pathsep.join(p for p in (root, env.get("PYTHONPATH", "")) if p)
    env.update(extra)
    return env


def run_job(side: str, ranks: int, model_name: str, size: str, base: str, timeout: float,
            extra_env: dict[str, str] | None = None) -> dict[str, Any]:
    """``job`` in a fresh Python process (``python -m`` this module)."""
    cmd = [sys.executable, "-m", __name__, side, str(ranks), model_name, size, base]
    proc = subprocess.run(cmd, env=_child_env(extra_env or {}), capture_output=True, text=True, timeout=timeout)
    lines = [line for line in proc.stdout.splitlines() if line.startswith("{")]
    if proc.returncode != 0 or not lines:
        raise RuntimeError(f"{' '.join(cmd[2:])} exited {proc.returncode}:\n{proc.stderr[-3000:]}")
    return json.loads(lines[-1])


def measure_jobs(ranks: int, model_name: str, size: str, repeats: int, timeout: float,
                 progress: Callable[[str], None]) -> dict[str, Any]:
    """``repeats`` cold jobs per side, sides alternating; the row. A stock
    job that fails is the row's ``failed`` (the line naming what it raised)
    and stock is not run again: the plugin's sides still are, and their
    figures stand without a stock ratio. A plugin side that fails fails the row."""
    runs: dict[str, list[dict[str, Any]]] = {}
    failed: dict[str, str] = {}
    with tempfile.TemporaryDirectory(prefix="dynamo_dist_once_") as root:
        def sample(side: str) -> dict[str, float]:
            if side in failed:
                return {}
            base = os.path.join(root, f"{side}-{len(runs.get(side, []))}")
            try:
                got = run_job(side, ranks, model_name, size, base, timeout)
            except RuntimeError as e:
                if side != STOCK:
                    raise
                failed[side] = error_line(str(e))
                return {}
            runs.setdefault(side, []).append(got)
            return {"wall": got["wall"], "cpu": got["cpu"]}

        result = T.compare(SIDES, repeats, sample, progress)
    row = {
        "kind": "job", "model": model_name, "size": size, "ranks": ranks, "repeats": repeats,
        "wall": result["wall"].as_dict("s") | {"ratio": result["wall"].ratio(ONCE, STOCK)},
        "cpu": result["cpu"].as_dict("s") | {"ratio": result["cpu"].ratio(ONCE, STOCK)},
        "compiles_per_graph": {side: [r["compiles_per_graph"] for r in rs] for side, rs in runs.items()},
        "runs": runs,
    }
    if failed:
        row["failed"] = failed
    return row


# ---------------------------------------------------------------------------
# The fleet cache: a new host after an earlier job filled the remote cache.


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class RedisServer:
    """A ``redis-server`` on a free loopback port, in memory only, for the block."""

    def __enter__(self) -> "RedisServer":
        self.port = _free_port()
        self.dir = tempfile.mkdtemp(prefix="dynamo_dist_redis_")
        self.proc = subprocess.Popen(["redis-server", "--port", str(self.port), "--bind", "127.0.0.1",
                                      "--save", "", "--appendonly", "no", "--dir", self.dir],
                                     stdout=subprocess.DEVNULL, stderr=subprocess.STDOUT)
        deadline = time.monotonic() + 30
        while not self._answers():
            if self.proc.poll() is not None or time.monotonic() > deadline:
                self.__exit__()
                raise RuntimeError(f"redis-server did not answer on port {self.port} within 30 s")
            time.sleep(0.1)
        return self

    def _answers(self) -> bool:
        try:
            with socket.create_connection(("127.0.0.1", self.port), timeout=1) as s:
                s.sendall(b"PING\r\n")
                return s.recv(16).startswith(b"+PONG")
        except OSError:
            return False

    def env(self) -> dict[str, str]:
        return {"TORCHINDUCTOR_FX_GRAPH_REMOTE_CACHE": "1", "TORCHINDUCTOR_AUTOGRAD_REMOTE_CACHE": "1",
                "TORCHINDUCTOR_REDIS_HOST": "127.0.0.1", "TORCHINDUCTOR_REDIS_PORT": str(self.port)}

    def __exit__(self, *exc: Any) -> None:
        self.proc.terminate()
        self.proc.wait(timeout=30)
        shutil.rmtree(self.dir, ignore_errors=True)


def fleet_unavailable() -> str | None:
    """Why the fleet row cannot run here, or None."""
    if shutil.which("redis-server") is None:
        return "redis-server is not installed (apt-get install -y redis-server)"
    try:
        import redis  # noqa: F401  (torch's remote cache client; optional)
    except ImportError:
        return "the redis client is not installed (pip install redis)"
    return None


def measure_fleet(ranks: int, model_name: str, size: str, timeout: float,
                  progress: Callable[[str], None]) -> dict[str, Any]:
    """Per side, with a fresh Redis: job A (cold) then job B on new local cache dirs."""
    row: dict[str, Any] = {"kind": "fleet", "model": model_name, "size": size, "ranks": ranks, "sides": {}}
    why = fleet_unavailable()
    if why:
        return row | {"skipped": why}
    with tempfile.TemporaryDirectory(prefix="dynamo_dist_fleet_") as root:
        for side in SIDES:
            with RedisServer() as redis:
                progress(f"{side}: job A")
                first = run_job(side, ranks, model_name, size, os.path.join(root, f"{side}-a"), timeout, redis.env())
                progress(f"{side}: job B, new host")
                second = run_job(side, ranks, model_name, size, os.path.join(root, f"{side}-b"), timeout,
                                 redis.env())
            row["sides"][side] = {"job_a": first, "new_host": second}
    return row


# ---------------------------------------------------------------------------
# The coordination alone: many processes, one store, simulated compiles.


def _simulated_rank(rank: int, port: int, processes: int, keys: int, compile_s: float, payload: int,
                    out: Any) -> None:
    store = dist.TCPStore("127.0.0.1", port, is_master=False)
    store.add("ready", 1)
    while int(store.add("ready", 0)) < processes:  # start together: the imports are not the protocol
        time.sleep(0.01)
    try:
        out.put((rank, True, _simulated_claims(store, rank, processes, keys, compile_s, payload)))
    except BaseException:
        out.put((rank, False, traceback.format_exc()))


def _simulated_claims(store: Any, rank: int, processes: int, keys: int, compile_s: float,
                      payload: int) -> list[dict[str, Any]]:
    node = JobStore(store, "sim", rank, wait_s=600.0, stale_s=30.0, world=processes)
    record = []
    for k in range(keys):
        outcome = node.claim_or_wait(f"graph{k}")
        if outcome.decision is Decision.COMPILE:
            time.sleep(compile_s)
            published = time.time()
            node.publish(f"graph{k}", os.urandom(payload))
            record.append({"key": k, "compiled": True, "published": published})
        else:
            assert outcome.decision is Decision.LOAD, outcome
            record.append({"key": k, "compiled": False, "loaded": time.time(), "waited_s": outcome.waited_s,
                           "bytes": len(outcome.payload or b"")})
    return record


def measure_coordination(processes: int, keys: int, compile_s: float, payload: int,
                         progress: Callable[[str], None]) -> dict[str, Any]:
    """``processes`` ranks claim ``keys`` graphs through one TCPStore."""
    server = dist.TCPStore("127.0.0.1", 0, is_master=True, wait_for_workers=False)
    # Forked from one server that imported torch once: 64 processes that each
    # imported torch themselves would need about 20 GB, more than the machine.
    ctx = mp.get_context("forkserver")
    ctx.set_forkserver_preload(["torch.distributed", "dynamo_dist.compile_once.store", __name__])
    out = ctx.Queue()
    progress(f"{processes} processes starting")
    procs = start_ranks(ctx, _simulated_rank, processes,
                        lambda r: (r, server.port, processes, keys, compile_s, payload, out))
    start = time.monotonic()
    try:
        records = gather_answers(out, procs, 600, what="simulated ranks")
    finally:
        stop_ranks(procs, grace=30)
    wall = time.monotonic() - start
    per_key = []
    for k in range(keys):
        rows = [next(r for r in rec if r["key"] == k) for rec in records.values()]
        published = [r["published"] for r in rows if r["compiled"]]
        delays = [r["loaded"] - published[0] for r in rows if not r["compiled"]] if published else []
        per_key.append({"compiles": len(published), "loads": len(delays),
                        "last_load_after_publish_s": max(delays) if delays else None,
                        "median_load_after_publish_s": statistics.median(delays) if delays else None})
    return {"kind": "coordination", "processes": processes, "keys": keys, "compile_s": compile_s,
            "payload_bytes": payload, "per_key": per_key, "wall_s": wall,
            "compiles_per_key": max(k["compiles"] for k in per_key),
            "last_load_after_publish_s": max(k["last_load_after_publish_s"] or 0 for k in per_key),
            "median_load_after_publish_s": statistics.median(k["median_load_after_publish_s"] or 0
                                                             for k in per_key)}


def tasks(cfg: Any) -> list[Task]:
    found = [Task(f"compile_once {cfg.once_model} x{n}",
                  lambda progress, n=n: measure_jobs(n, cfg.once_model, cfg.once_size, cfg.once_repeats,
                                                     cfg.once_timeout, progress))
             for n in cfg.once_worlds]
    for name in cfg.once_clients:
        def client(progress: Callable[[str], None], name: str = name) -> dict[str, Any]:
            reason = client_skip_reason(name)
            if reason is not None:
                return {"kind": "job", "model": name, "ranks": CLIENTS[name].case.world_size, "skipped": reason}
            return measure_jobs(CLIENTS[name].case.world_size, name, "-", cfg.once_client_repeats,
                                cfg.once_timeout, progress)
        found.append(Task(f"compile_once {name}", client))
    if cfg.once_worlds:  # the new host: the TP block on the first world
        found.append(Task(f"compile_once fleet x{cfg.once_worlds[0]}",
                          lambda progress: measure_fleet(cfg.once_worlds[0], cfg.once_model, cfg.once_size,
                                                         cfg.once_timeout, progress)))
    found += [Task(f"compile_once coordination x{n}",
                   lambda progress, n=n: measure_coordination(n, cfg.once_sim_keys, cfg.once_sim_compile_s,
                                                              cfg.once_sim_payload, progress))
              for n in cfg.once_sim_processes]
    return found


if __name__ == "__main__":
    # python -m devtools.bench.compile_once SIDE RANKS MODEL SIZE BASE
    side, ranks, model_name, size, base = sys.argv[1:6]
    print(json.dumps(job(side, int(ranks), model_name, size, base)), flush=True)
