"""The compile-once-at-scale section: what one graph costs the job's store
when thousands of ranks wait for it, the protocol compile once runs
(``dynamo_dist.compile_once.store``) against the one it replaced
(``PollingStore`` below), in the same run.

A real ``TCPStore`` server in a process of its own (as torchrun's agent
serves it), and W simulated ranks: ``processes`` processes of ``W /
processes`` threads, each thread one rank with its own store connection,
grouped into hosts of ``HOST_RANKS`` consecutive ranks with a directory per
host (the host's cache dir, on ``/dev/shm`` where it exists: the machine's
one disk is not what is measured). All ranks claim the graph at once; the
rank that wins "compiles" for ``compile_s`` seconds and publishes a payload
of ``payload`` random bytes; the others wait and load it. Per row:

- **last rank holds the bytes**: seconds from the publish to the last rank
  returning with the payload (every rank's clock is the machine's);
- **last rank released**: the same to the last rank's ``done``, before it
  fetches (what the protocol's signals cost, without moving the bytes);
- **store bytes served**: the bytes every rank's ``get``s received (each
  rank's connection counts its own), against (hosts + 1) x payload;
- **store peak memory**: the server process's peak resident memory (its
  ``VmHWM``) above what it held before the ranks connected; **after**: its
  memory, keys and bytes (every key read back) once every rank is done: what
  the job's first step left in the store;
- **requests per second while waiting**: the ranks' store requests between
  the claim and the publish, per second of that span; and every request of
  the row by operation.

Fault rows (the new protocol, 4,096 ranks: at 16,384 the slowed store's row
outgrew this machine's 23 GB): ``compiler_killed`` (the compiling rank dies
at once: no beat, no publish; the others give up after ``stale_s``),
``store_slowed`` (the server process stopped for half of every 100 ms while
the ranks work), ``fetcher_dies`` (on every host but the compiling rank's,
the rank that takes the host's lease dies downloading: its neighbours must
download themselves within the bound).

The machine is shared: the simulated ranks run at a lower priority (the
store's process has a machine of its own in a job), and a row whose
processes bring the machine's free memory under ``MEMORY_FLOOR`` is stopped
(its processes killed, the row an error) before the kernel's OOM killer
picks any process.

On this machine every simulated host's copy of the bytes crosses the same
loopback and the same two cores, so the time to the last rank holding the
bytes grows with hosts x payload whatever the protocol; the columns that
show the protocol's scaling are the release time, the requests per rank and
the bytes through the store.

    python -m devtools bench --only compile_once_scale --json benchmarks/results/compile_once_scale_2.15.0.json \\
        --write-doc docs/benchmarks.md --update-readme README.md
"""

from __future__ import annotations

import collections
import contextlib
import dataclasses
import datetime
import multiprocessing as mp
import os
import random
import shutil
import signal
import statistics
import tempfile
import threading
import time
from typing import Any, Callable

import torch.distributed as dist

from dynamo_dist.compile_once import store as job_store
from dynamo_dist.compile_once.host import Host
from dynamo_dist.compile_once.store import Decision, JobStore
from ._timing import Task

HOST_RANKS = 8
NEW, OLD = "new", "old"
FAULTS = ("compiler_killed", "store_slowed", "fetcher_dies")
KEY = "graph"


# ---------------------------------------------------------------------------
# The protocol compile once ran before (for comparison only): every waiter
# polls ``done`` with a ``check`` and an ``add`` of the beat, backing off to
# once a second, then downloads every chunk itself; nothing is ever deleted.


class PollingStore:
    """The claim / poll / download protocol compile once replaced."""

    POLL_MIN_S, POLL_MAX_S, BEAT_S = 0.02, 1.0, 1.0

    def __init__(self, store: Any, namespace: str, rank: int, wait_s: float, stale_s: float) -> None:
        self.store, self.namespace, self.rank, self.wait_s, self.stale_s = store, namespace, rank, wait_s, stale_s
        self._beating = False

    def _key(self, cache_key: str, leaf: str) -> str:
        return f"{self.namespace}/{cache_key}/{leaf}"

    def claim_or_wait(self, cache_key: str) -> job_store.Outcome:
        if self.store.add(self._key(cache_key, "claim"), 1) == 1:
            self._beating = True
            threading.Thread(target=self._beat, args=(cache_key,), daemon=True).start()
            return job_store.Outcome(Decision.COMPILE)
        start = last_change = time.monotonic()
        done_key, beat_key, last_beat, poll = self._key(cache_key, "done"), self._key(cache_key, "beat"), None, \
            self.POLL_MIN_S
        while True:
            if self.store.check([done_key]):
                break
            now = time.monotonic()
            beat = self.store.add(beat_key, 0)
            if beat != last_beat:
                last_beat, last_change = beat, now
            elif now - last_change > self.stale_s:
                return job_store.Outcome(Decision.LOCAL, waited_s=now - start, reason="stale")
            if now - start > self.wait_s:
                return job_store.Outcome(Decision.LOCAL, waited_s=now - start, reason="wait_s")
            time.sleep(poll)
            poll = min(poll * 1.5, self.POLL_MAX_S)
        status, rank, rest = self.store.get(done_key).decode().split(" ", 2)
        if status != "ok":
            return job_store.Outcome(Decision.LOCAL, source_rank=int(rank), reason=rest)
        chunks = [self.store.get(self._key(cache_key, f"data/{i}")) for i in range(int(rest))]
        return job_store.Outcome(Decision.LOAD, payload=b"".join(chunks), source_rank=int(rank),
                                 waited_s=time.monotonic() - start, via=job_store.VIA_STORE)

    def publish(self, cache_key: str, payload: bytes) -> None:
        chunks = [payload[i:i + job_store.CHUNK] for i in range(0, len(payload), job_store.CHUNK)] or [b""]
        for i, chunk in enumerate(chunks):
            self.store.set(self._key(cache_key, f"data/{i}"), chunk)
        self.store.set(self._key(cache_key, "done"), f"ok {self.rank} {len(chunks)}".encode())
        self._beating = False

    def _beat(self, cache_key: str) -> None:
        while self._beating:
            self.store.add(self._key(cache_key, "beat"), 1)
            time.sleep(self.BEAT_S)


# ---------------------------------------------------------------------------
# A rank's connection, counting what it asks and what it receives.


class Counted:
    """A store client that counts its requests (by operation), the bytes its
    ``get``s received and, per phase, the requests made while waiting; it
    can be made to fail its data downloads (a rank that dies downloading)."""

    def __init__(self, inner: Any, die_downloading: Callable[[], bool] | None = None) -> None:
        self.inner, self.requests, self.received = inner, collections.Counter(), 0
        self.die_downloading = die_downloading
        self.times: list[tuple[float, str]] = []  # each request: when, which

    def _count(self, op: str) -> None:
        self.requests[op] += 1
        self.times.append((time.monotonic(), op))

    def add(self, key: str, amount: int) -> int:
        self._count("add")
        return self.inner.add(key, amount)

    def set(self, key: str, value: bytes) -> None:
        self._count("set")
        self.inner.set(key, value)

    def get(self, key: str) -> bytes:
        self._count("get")
        if self.die_downloading is not None and "/data/" in key and self.die_downloading():
            raise RuntimeError("this rank died downloading")
        value = self.inner.get(key)
        self.received += len(value)
        return value

    def check(self, keys: list[str]) -> bool:
        self._count("check")
        return self.inner.check(keys)

    def wait(self, keys: list[str], timeout: Any) -> None:
        self._count("wait")
        self.inner.wait(keys, timeout)

    def compare_set(self, key: str, expected: str, desired: str) -> bytes:
        self._count("compare_set")
        return self.inner.compare_set(key, expected, desired)

    def delete_key(self, key: str) -> bool:
        self._count("delete_key")
        return self.inner.delete_key(key)

    def clone(self) -> "Counted":
        return Counted(self.inner.clone())


# ---------------------------------------------------------------------------
# One row: a server, the ranks, the figures.


@dataclasses.dataclass(frozen=True)
class Row:
    protocol: str
    ranks: int
    payload: int
    processes: int
    compile_s: float
    stale_s: float
    fault: str | None = None


# c10d looks up the name of each connection's addresses for its log lines
# (``getnameinfo``), which asks DNS for a loopback address: where DNS drops
# the query (this machine's does, now and then) a connection waits the
# resolver's 5 s timeout. The simulated ranks and the server (forked from a
# server process started with it) ask with a 1 s timeout and one attempt
# (glibc's ``RES_OPTIONS``), where not set.
RESOLVER = ("RES_OPTIONS", "timeout:1 attempts:1")


def _serve(port: Any, stop: Any) -> None:
    """The TCPStore server, in a process of its own (forked: no import to wait for)."""
    store = dist.TCPStore("127.0.0.1", 0, is_master=True, wait_for_workers=False)
    port.put(store.port)
    stop.wait()


def _context() -> Any:
    ctx = mp.get_context("forkserver")
    ctx.set_forkserver_preload(["torch.distributed", "dynamo_dist.compile_once.store", __name__])
    return ctx


def _memory(pid: int) -> dict[str, int]:
    """The process's resident memory now and at its peak (bytes)."""
    found = {}
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            name, _, value = line.partition(":")
            if name in ("VmRSS", "VmHWM"):
                found[name] = int(value.split()[0]) * 1024
    return found


MEMORY_FLOOR = 1.5e9  # a row stops (its processes killed) when the machine's free memory falls below this


def _available() -> float:
    """The machine's available memory (``MemAvailable``), in bytes."""
    with open("/proc/meminfo") as f:
        for line in f:
            if line.startswith("MemAvailable:"):
                return int(line.split()[1]) * 1024
    return float("inf")


class _MemoryGuard(threading.Thread):
    """Kills the row's processes if the machine runs short of memory (it is
    shared: the kernel's OOM killer would pick any process)."""

    def __init__(self, pids: list[int]) -> None:
        super().__init__(daemon=True)
        self.pids, self.running, self.tripped = pids, True, False

    def run(self) -> None:
        while self.running:
            if _available() < MEMORY_FLOOR:
                self.tripped = True
                for pid in self.pids:
                    with contextlib.suppress(OSError):
                        os.kill(pid, signal.SIGKILL)
                return
            time.sleep(0.2)

    def stop(self) -> None:
        self.running = False


def _gather(queue: Any, n: int, guard: _MemoryGuard, row: Row, timeout: float = 1200) -> list[Any]:
    """``n`` items from ``queue``, or an error once the memory guard stopped the row."""
    found: list[Any] = []
    deadline = time.monotonic() + timeout
    while len(found) < n:
        if guard.tripped:
            raise RuntimeError(f"stopped: the machine's free memory fell below {MEMORY_FLOOR / 1e9:g} GB "
                               f"({row.ranks} ranks, {row.payload / 1e6:g} MB{', ' + row.fault if row.fault else ''})")
        if time.monotonic() > deadline:
            raise TimeoutError(f"{n - len(found)} of {n} processes gave no answer in {timeout:g} s")
        try:
            found.append(queue.get(timeout=1))
        except Exception:  # queue.Empty
            continue
    return found


def _spool_root() -> str:
    return "/dev/shm" if os.path.isdir("/dev/shm") and os.access("/dev/shm", os.W_OK) else tempfile.gettempdir()


def _ranks_of(process: int, row: Row) -> range:
    per = row.ranks // row.processes
    return range(process * per, (process + 1) * per)


def _run_ranks(process: int, row: Row, port: int, hosts_root: str, ready: Any, start: Any, out: Any) -> None:
    """One process's ranks (threads), each with its own connection."""
    # The ranks yield the cores to the store's process (it has a machine of
    # its own in a job) and to whatever else runs here.
    os.nice(10)
    threading.stack_size(256 * 1024)
    ranks = _ranks_of(process, row)
    lock = threading.Lock()
    dying: dict[int, bool] = {}  # host -> whether its dying fetcher has died

    def die_downloading(host: int) -> Callable[[], bool]:
        def first() -> bool:  # the first rank of the host to download dies
            with lock:
                if dying.get(host):
                    return False
                dying[host] = True
                return True
        return first

    # The process's ranks connect one after the other: a TCPStore connection
    # is made holding the GIL, and a thousand threads queued on it would
    # thrash the machine; the ranks then start together.
    clients: dict[int, Counted] = {}
    nodes: dict[int, Any] = {}
    for rank in ranks:
        host = rank // HOST_RANKS
        inner = dist.TCPStore("127.0.0.1", port, is_master=False, timeout=datetime.timedelta(seconds=600))
        killer = die_downloading(host) if row.fault == "fetcher_dies" else None
        clients[rank] = Counted(inner, killer)
        if row.protocol == NEW:
            nodes[rank] = JobStore(clients[rank], "sim", rank, wait_s=600.0, stale_s=row.stale_s, world=row.ranks,
                                   host=Host(os.path.join(hosts_root, f"h{host}"), keep_s=600.0))
        else:
            nodes[rank] = PollingStore(clients[rank], "sim", rank, wait_s=600.0, stale_s=row.stale_s)
    records: dict[int, dict[str, Any]] = {}
    left_on_host = collections.Counter(rank // HOST_RANKS for rank in ranks)
    go = threading.Event()

    def one(rank: int) -> None:
        node, record = nodes[rank], {"rank": rank}
        go.wait()
        record["start"] = time.monotonic()
        try:
            outcome = node.claim_or_wait(KEY)
            if outcome.decision is Decision.COMPILE:
                record["compiled"] = True
                if row.fault == "compiler_killed":
                    if isinstance(node, JobStore):
                        node._stop_beating(KEY)  # its process is gone: no beat, no publish
                    else:
                        node._beating = False
                    record["end"] = time.monotonic()
                    return
                payload = random.randbytes(row.payload)
                time.sleep(row.compile_s)
                record["published"] = time.monotonic()
                node.publish(KEY, payload)
            else:
                record.update(decision=outcome.decision.value, via=outcome.via, bytes=len(outcome.payload or b""))
        except Exception as e:  # a rank that died (the fault rows)
            record["died"] = f"{type(e).__name__}: {e}"
        finally:
            record.setdefault("end", time.monotonic())
            record["requests"] = dict(clients[rank].requests)
            record["received"] = clients[rank].received
            record["times"] = clients[rank].times
            records[rank] = record
            host = rank // HOST_RANKS
            with lock:
                left_on_host[host] -= 1
                last = left_on_host[host] == 0
            if last:  # the simulation's hygiene: a host's spool goes once its ranks are done
                shutil.rmtree(os.path.join(hosts_root, f"h{host}"), ignore_errors=True)

    threads = [threading.Thread(target=one, args=(rank,), daemon=True) for rank in ranks]
    for t in threads:
        t.start()
    ready.put(process)
    start.wait()
    go.set()
    for t in threads:
        t.join()
    out.put((process, list(records.values())))


def _released(record: dict[str, Any]) -> float | None:
    """When a waiter read ``done`` (its first ``get``): released, before it fetches."""
    return next((t for t, op in record["times"] if op == "get"), None)


def measure(row: Row, progress: Callable[[str], None]) -> dict[str, Any]:
    """One row (see the module docstring)."""
    os.environ.setdefault(*RESOLVER)  # before the forkserver starts: the ranks' processes inherit it
    ctx = _context()
    port_queue, stop = ctx.Queue(), ctx.Event()
    server = ctx.Process(target=_serve, args=(port_queue, stop), daemon=True)
    server.start()
    port = port_queue.get(timeout=120)
    hosts_root = tempfile.mkdtemp(prefix="dynamo_dist_scale_", dir=_spool_root())
    stopper, procs = None, []
    try:
        before = _memory(server.pid)
        ready, start, out = ctx.Queue(), ctx.Event(), ctx.Queue()
        procs = [ctx.Process(target=_run_ranks, args=(p, row, port, hosts_root, ready, start, out), daemon=True)
                 for p in range(row.processes)]
        fault = f", {row.fault}" if row.fault else ""
        progress(f"{row.protocol}, {row.ranks} ranks, {row.payload / 1e6:.1f} MB{fault}: {row.processes} processes")
        started = time.monotonic()
        for p in procs:
            p.start()
        guard = _MemoryGuard([server.pid, *(p.pid for p in procs)])
        guard.start()
        _gather(ready, row.processes, guard, row)
        connected = _memory(server.pid)
        progress(f"  {row.ranks} ranks connected in {time.monotonic() - started:.1f} s")
        if row.fault == "store_slowed":
            stopper = _Stopper(server.pid)
            stopper.start()
        start.set()
        records: list[dict[str, Any]] = [r for _, got in _gather(out, row.processes, guard, row) for r in got]
        guard.stop()
        progress(f"  every rank done {time.monotonic() - started:.1f} s after the start")
        if stopper is not None:
            stopper.stop()
        after = _memory(server.pid)
        for p in procs:
            p.join(timeout=60)
        left = _left_in_store(port)
    finally:
        if stopper is not None:
            stopper.stop()
        for p in procs:
            if p.is_alive():
                p.kill()
        stop.set()
        server.join(timeout=60)
        if server.is_alive():
            server.kill()
        shutil.rmtree(hosts_root, ignore_errors=True)
    return _figures(row, records, before, connected, after, left)


class _Stopper(threading.Thread):
    """Stops the server process for half of every 100 ms (an overloaded store)."""

    def __init__(self, pid: int) -> None:
        super().__init__(daemon=True)
        self.pid, self.running = pid, True

    def run(self) -> None:
        while self.running:
            os.kill(self.pid, signal.SIGSTOP)
            time.sleep(0.05)
            os.kill(self.pid, signal.SIGCONT)
            time.sleep(0.05)

    def stop(self) -> None:
        self.running = False
        self.join(timeout=5)
        os.kill(self.pid, signal.SIGCONT)


def _left_in_store(port: int) -> dict[str, int]:
    """The keys the row left in the store and their bytes (every key read back)."""
    client = dist.TCPStore("127.0.0.1", port, is_master=False, timeout=datetime.timedelta(seconds=60))
    keys = [k for k in client.list_keys()] if hasattr(client, "list_keys") else []
    return {"keys": len(keys), "bytes": sum(len(k) + len(client.get(k)) for k in keys)}


def _figures(row: Row, records: list[dict[str, Any]], before: dict[str, int], connected: dict[str, int],
             after: dict[str, int], left: dict[str, int]) -> dict[str, Any]:
    compiler = next(r for r in records if r.get("compiled"))
    published = compiler.get("published")
    waiters = [r for r in records if not r.get("compiled")]
    loaded = [r for r in waiters if r.get("decision") == "load"]
    hosts = row.ranks // HOST_RANKS
    received = sum(r["received"] for r in records)
    requests = collections.Counter()
    for r in records:
        requests.update(r["requests"])
    start = min(r["start"] for r in records)
    waiting_end = published if published is not None else max(r["end"] for r in records)
    in_wait = sum(1 for r in records for t, _ in r["times"] if start <= t < waiting_end)
    zero = published if published is not None else start
    ends = sorted(r["end"] - zero for r in waiters if "died" not in r)
    released = sorted(t - zero for t in (_released(r) for r in loaded) if t is not None)
    return {
        "kind": "scale", "protocol": row.protocol, "ranks": row.ranks, "hosts": hosts, "host_ranks": HOST_RANKS,
        "processes": row.processes, "threads": row.ranks // row.processes, "payload_bytes": row.payload,
        "compile_s": row.compile_s, "stale_s": row.stale_s, "fault": row.fault,
        "load_average": [round(v, 2) for v in os.getloadavg()],
        "decisions": dict(collections.Counter(r.get("decision", "compile") for r in records if "died" not in r)),
        "via": dict(collections.Counter(r.get("via") for r in loaded)),
        "died": sum(1 for r in records if "died" in r),
        "last_rank_s": ends[-1] if ends else None,
        "median_rank_s": statistics.median(ends) if ends else None,
        "last_released_s": released[-1] if released else None,
        "from": "publish" if published is not None else "claim",
        "store_bytes_served": received,
        "bound_bytes": (hosts + 1) * row.payload,
        "requests": dict(requests),
        "requests_per_rank": sum(requests.values()) / row.ranks,
        "requests_per_s_waiting": in_wait / max(waiting_end - start, 1e-9),
        "store_peak_mb": (after["VmHWM"] - before["VmRSS"]) / 1e6,
        "store_connected_mb": (connected["VmRSS"] - before["VmRSS"]) / 1e6,
        "store_after_mb": (after["VmRSS"] - before["VmRSS"]) / 1e6,
        "store_keys_after": left["keys"], "store_bytes_after": left["bytes"],
        "rank_seconds": [round(e, 4) for e in ends],
    }


def _median_row(rows: list[dict[str, Any]]) -> dict[str, Any]:
    """Repeats of one row: each figure's median, the samples kept."""
    keys = ("last_rank_s", "median_rank_s", "last_released_s", "store_bytes_served", "requests_per_rank",
            "requests_per_s_waiting", "store_peak_mb", "store_after_mb", "store_connected_mb")
    merged = dict(rows[0])
    for key in keys:
        values = [r[key] for r in rows if r[key] is not None]
        merged[key] = statistics.median(values) if values else None
    merged["repeats"] = len(rows)
    merged["samples"] = [{k: r[k] for k in (*keys, "load_average", "decisions", "via", "died", "store_keys_after",
                                             "store_bytes_after", "requests")} for r in rows]
    merged.pop("rank_seconds", None)
    return merged


def measure_rows(rows: list[Row], repeats: int, progress: Callable[[str], None]) -> list[dict[str, Any]]:
    """Each row ``repeats`` times, the rows of one size alternating."""
    samples: dict[Row, list[dict[str, Any]]] = {row: [] for row in rows}
    for _ in range(repeats):
        for row in rows:
            samples[row].append(measure(row, progress))
    return [_median_row(samples[row]) for row in rows]


def processes_for(ranks: int, threads: int) -> int:
    """Processes for ``ranks`` simulated ranks, at most ``threads`` in each
    (more threads to one interpreter queue on its lock)."""
    return max(1, -(-ranks // threads))


def tasks(cfg: Any) -> list[Task]:
    found = []
    for ranks, payload, protocols in cfg.once_scale_grid:
        rows = [Row(p, ranks, payload, processes_for(ranks, cfg.once_scale_threads), cfg.once_scale_compile_s,
                    cfg.once_scale_stale_s) for p in protocols]
        repeats = cfg.once_scale_repeats if ranks <= cfg.once_scale_repeat_up_to else 1
        found.append(Task(f"compile_once_scale {ranks} ranks, {payload / 1e6:.1f} MB",
                          lambda progress, rows=rows, repeats=repeats: {
                              "kind": "group", "rows": measure_rows(rows, repeats, progress)}))
    ranks, payload = cfg.once_scale_fault_size
    faults = [Row(NEW, ranks, payload, processes_for(ranks, cfg.once_scale_threads), cfg.once_scale_compile_s,
                  cfg.once_scale_fault_stale_s, fault) for fault in FAULTS]
    found.append(Task(f"compile_once_scale faults at {ranks} ranks",
                      lambda progress: {"kind": "group", "rows": measure_rows(faults, 1, progress)}))
    return found
