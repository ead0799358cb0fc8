"""Who compiles a shared graph, and how the others get its artifacts: a
protocol over the job's c10d store.

Every rank of a job already talks to one store (the one ``torchrun`` and
``init_process_group`` rendezvous through). For each cache key that misses
everywhere, the ranks agree through it, never through a collective: ranks
reach their compiles at different times and along different paths, and a
collective inside a compile deadlocks when they do not all reach it.

Store keys, under ``<namespace>/<cache key>/``:

- ``claim``: ``add(claim, 1)``; the rank that gets 1 compiles, every later
  rank waits;
- ``beat``: the compiling rank adds 1 every ``BEAT_S`` seconds while it
  compiles (a background thread), so a waiter tells a long compile from a
  dead rank;
- ``data/<i>``: the artifact bytes in chunks of at most ``CHUNK`` bytes
  (TCPStore's server refuses a message over 8 MiB and drops the connection);
- ``done``: written last: ``ok <rank> <chunks>`` or ``abandoned <rank> <why>``.

A waiter polls ``done`` (``check`` never blocks and logs nothing, unlike a
timed-out ``wait``) with a backoff up to ``POLL_MAX_S``, and stops waiting
when the compiling rank abandons (it failed or saved nothing), when its beat
stalls for ``stale_s``, or after ``wait_s``: then it compiles itself. A wait
is thus bounded by a compile that is running. Keys a job leaves in the store
are the artifacts of its graphs; the store lives as long as the job.
"""

from __future__ import annotations

import dataclasses
import enum
import threading
import time
from typing import Any

CHUNK = 4 << 20
BEAT_S = 1.0
POLL_MIN_S = 0.02
POLL_MAX_S = 1.0


class Decision(enum.Enum):
    COMPILE = "compile"  # this rank claimed the key: compile, then publish or abandon
    LOAD = "load"  # another rank published the artifacts: load them
    LOCAL = "local"  # compile here without sharing (the reason says why)


@dataclasses.dataclass(frozen=True)
class Outcome:
    decision: Decision
    payload: bytes | None = None
    source_rank: int | None = None
    waited_s: float = 0.0
    reason: str = ""


class StoreError(RuntimeError):
    """The store failed or did not answer; the caller compiles locally."""


class JobStore:
    """The protocol of the module docstring for one process (``rank``)."""

    def __init__(self, store: Any, namespace: str, rank: int, wait_s: float, stale_s: float) -> None:
        self.store = store
        self.namespace = namespace
        self.rank = rank
        self.wait_s = wait_s
        self.stale_s = stale_s
        self._beating: set[str] = set()
        self._lock = threading.Lock()
        self._beater: threading.Thread | None = None

    def _key(self, cache_key: str, leaf: str) -> str:
        return f"{self.namespace}/{cache_key}/{leaf}"

    def _op(self, name: str, *args: Any) -> Any:
        try:
            return getattr(self.store, name)(*args)
        except Exception as e:  # TCPStore raises DistStoreError / DistNetworkError / RuntimeError
            raise StoreError(f"{name} failed: {type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}") from e

    # -- the first rank to miss: claim --------------------------------------------
    def claim_or_wait(self, cache_key: str) -> Outcome:
        """Claim ``cache_key`` (``COMPILE``, beating until ``publish`` or
        ``abandon``), or wait for the rank that did (``LOAD`` or ``LOCAL``)."""
        if self._op("add", self._key(cache_key, "claim"), 1) == 1:
            self._start_beating(cache_key)
            return Outcome(Decision.COMPILE)
        return self._wait(cache_key)

    def _wait(self, cache_key: str) -> Outcome:
        start = last_change = time.monotonic()
        done_key, beat_key = self._key(cache_key, "done"), self._key(cache_key, "beat")
        last_beat = None
        poll = POLL_MIN_S
        while True:
            if self._op("check", [done_key]):
                return self._read_result(cache_key, time.monotonic() - start)
            now = time.monotonic()
            beat = self._op("add", beat_key, 0)
            if beat != last_beat:
                last_beat, last_change = beat, now
            elif now - last_change > self.stale_s:
                return Outcome(Decision.LOCAL, waited_s=now - start,
                               reason=f"the compiling rank stopped beating for {self.stale_s:g} s (gone?)")
            if now - start > self.wait_s:
                return Outcome(Decision.LOCAL, waited_s=now - start,
                               reason=f"the compiling rank had not finished after {self.wait_s:g} s")
            time.sleep(poll)
            poll = min(poll * 1.5, POLL_MAX_S)

    def _read_result(self, cache_key: str, waited_s: float) -> Outcome:
        status, rank, rest = self._op("get", self._key(cache_key, "done")).decode().split(" ", 2)
        if status != "ok":
            return Outcome(Decision.LOCAL, source_rank=int(rank), waited_s=waited_s,
                           reason=f"rank {rank} gave up compiling it: {rest}")
        chunks = [self._op("get", self._key(cache_key, f"data/{i}")) for i in range(int(rest))]
        return Outcome(Decision.LOAD, payload=b"".join(chunks), source_rank=int(rank), waited_s=waited_s)

    # -- the compiling rank: publish or abandon -------------------------------------
    def publish(self, cache_key: str, payload: bytes) -> None:
        try:
            chunks = [payload[i:i + CHUNK] for i in range(0, len(payload), CHUNK)] or [b""]
            for i, chunk in enumerate(chunks):
                self._op("set", self._key(cache_key, f"data/{i}"), chunk)
            self._op("set", self._key(cache_key, "done"), f"ok {self.rank} {len(chunks)}".encode())
        finally:
            self._stop_beating(cache_key)

    def abandon(self, cache_key: str, reason: str) -> None:
        try:
            text = " ".join(reason.split())[:500]
            self._op("set", self._key(cache_key, "done"), f"abandoned {self.rank} {text}".encode())
        finally:
            self._stop_beating(cache_key)

    # -- the beat --------------------------------------------------------------------
    def _start_beating(self, cache_key: str) -> None:
        with self._lock:
            self._beating.add(self._key(cache_key, "beat"))
            if self._beater is None or not self._beater.is_alive():
                self._beater = threading.Thread(target=self._beat, name="dynamo_dist compile-once beat", daemon=True)
                self._beater.start()

    def _stop_beating(self, cache_key: str) -> None:
        with self._lock:
            self._beating.discard(self._key(cache_key, "beat"))

    def _beat(self) -> None:
        while True:
            with self._lock:
                keys = list(self._beating)
                if not keys:
                    self._beater = None
                    return
            for key in keys:
                try:
                    self.store.add(key, 1)
                except Exception:  # the store is gone: waiters will see the beat stall
                    return
            time.sleep(BEAT_S)
