"""Who compiles a shared graph, and how the others get its artifacts: a
protocol over the job's c10d store, which carries signals; the bytes take
the cheapest way there is (the host's spool, the fleet cache, else the
store, once per host).

Every rank of a job already talks to one store (the one ``torchrun`` and
``init_process_group`` rendezvous through, and NCCL bootstraps through). For
each cache key that misses everywhere, the ranks agree through it, never
through a collective: ranks reach their compiles at different times and
along different paths, and a collective inside a compile deadlocks when they
do not all reach it.

Store keys, under ``<namespace>/<cache key>/``:

- ``claim``: ``add(claim, 1)``; the rank that gets 1 compiles, every later
  rank is a waiter (the count is how many ranks entered);
- ``tick/<n>``: the compiling rank's beat, ``tick/0`` when it claims, the
  next every ``stale_s / TICKS_PER_STALE`` seconds while it compiles (a
  thread of its own, on a connection of its own), and one more when it is
  done, which wakes every waiter;
- ``done``: ``ok <rank> <ticks> <digest> <bytes> <chunks | fleet>`` or
  ``abandoned <rank> <ticks> <why>``, written before the last tick;
- ``data/<i>``: the artifact bytes in chunks of at most ``CHUNK`` bytes
  (TCPStore's server refuses a message over 8 MiB), unless the fleet cache
  holds them (``fleet``);
- ``fetching``, ``slot/<n>``: downloads from the store take a ticket; the
  n-th waits for the (n - ``SLOTS``)-th to finish (its ``slot``), so the
  store serves at most ``SLOTS`` downloads at once: its memory holds the
  payload and at most ``SLOTS`` responses, however many hosts download,
  and small requests (the other ranks' signals) are not queued behind
  thousands of megabytes;
- ``left``: how many waiters are done with the key.

**Waiting** is the store's blocking ``wait`` on the next tick, bounded by
``stale_s``, then one ``check`` of ``done``: no poll loop. A waiter wakes at
once when the compiling rank is done, and otherwise once per tick: its
requests are one ``wait`` and one ``check`` per tick, so W waiters cost the
store ``2 W / tick`` requests a second, whatever the compile's length (16,384
waiters and the default 10 s tick: about 3,300 a second, against 2 W a
second for a poll once a second). A waiter stops waiting when the compiling
rank abandons (it failed or saved nothing), when no tick comes for
``stale_s`` (it is gone), or after ``wait_s``: then it compiles itself.

**The bytes** go through the host (``host.py``): on each host the first
waiter downloads, from the fleet cache where ``done`` says so (``fleet.py``)
or from the store, and spools them; its neighbours read the spool. The
compiling rank spools what it sends on its own host first. So the store
serves each payload at most once per host besides the one upload: (hosts +
1) x payload, and none with the fleet cache.

**The store is left as it was found.** When the last waiter leaves a key
every rank of the world entered, it closes the key (``compare_set`` of
``claim`` to ``CLOSED`` more, which fails where a rank entered meanwhile)
and deletes its chunks, ticks, slots and counts: what stays of a graph is
``claim`` and ``done`` (about 200 bytes). A key some ranks never entered (they
hit their caches, or compiled other graphs) is closed by the rank that
published it, at its next compile once ``GRACE_S`` have passed. A rank that
enters a closed key takes the artifacts from its host's spool or the fleet
cache, else compiles itself.
"""

from __future__ import annotations

import contextlib
import dataclasses
import datetime
import enum
import threading
import time
from typing import Any

from .fleet import Fleet, FleetError
from .host import VIA_HOST, Host, digest

CHUNK = 4 << 20
SLOTS = 16  # downloads the store serves at once
TICKS_PER_STALE = 3
CLOSED = 1 << 40  # added to a closed key's claim: a rank that enters it then knows
GRACE_S = 300.0  # a key some ranks never entered is closed this long after its publish
FLEET = "fleet"
VIA_STORE, VIA_FLEET = "store", "fleet"  # where a rank's copy of the bytes came from (and VIA_HOST)


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
    via: str | None = None  # LOAD: VIA_STORE, VIA_HOST or VIA_FLEET


class StoreError(RuntimeError):
    """The store failed or did not answer; the caller compiles locally."""


@dataclasses.dataclass(frozen=True)
class _Done:
    ok: bool
    rank: int
    ticks: int
    name: str = ""  # the payload's digest
    size: int = 0
    chunks: int | None = None  # None: the fleet cache holds it
    reason: str = ""

    def text(self) -> bytes:
        if self.ok:
            chunks = FLEET if self.chunks is None else self.chunks
            return f"ok {self.rank} {self.ticks} {self.name} {self.size} {chunks}".encode()
        return f"abandoned {self.rank} {self.ticks} {self.reason}".encode()

    @staticmethod
    def parse(raw: bytes) -> "_Done":
        status, rank, ticks, rest = raw.decode().split(" ", 3)
        if status != "ok":
            return _Done(False, int(rank), int(ticks), reason=rest)
        name, size, chunks = rest.split(" ")
        return _Done(True, int(rank), int(ticks), name, int(size), None if chunks == FLEET else int(chunks))


@dataclasses.dataclass
class _Published:
    key: str
    at: float
    done: _Done


class JobStore:
    """The protocol of the module docstring for one process (``rank`` of
    ``world``); ``host``: the ranks it shares downloads with (None: none);
    ``fleet``: the fleet cache it publishes to (None: the store)."""

    def __init__(self, store: Any, namespace: str, rank: int, wait_s: float, stale_s: float, world: int = 0,
                 host: Host | None = None, fleet: Fleet | None = None) -> None:
        self.store = store
        self.namespace = namespace
        self.rank = rank
        self.world = world
        self.wait_s = wait_s
        self.stale_s = stale_s
        self.host = host
        self.fleet = fleet
        self._lock = threading.Lock()
        self._beating: dict[str, int] = {}  # cache key -> its next tick
        self._beater: threading.Thread | None = None
        self._beat_store: Any = None  # a connection of its own: a blocking wait holds a TCPStore client's
        self._published: list[_Published] = []

    def _key(self, cache_key: str, leaf: str) -> str:
        return f"{self.namespace}/{cache_key}/{leaf}"

    def _op(self, name: str, *args: Any, store: Any = None) -> Any:
        try:
            return getattr(store or self.store, name)(*args)
        except Exception as e:  # TCPStore raises DistStoreError / DistNetworkError / RuntimeError
            raise StoreError(f"{name} failed: {type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}") from e

    def _wait_for(self, key: str, seconds: float) -> bool:
        """Block until ``key`` is set (True) or ``seconds`` pass (False)."""
        try:
            self.store.wait([key], datetime.timedelta(seconds=seconds))
            return True
        except Exception as e:  # every c10d store says "timeout" when it times out
            if "timeout" in str(e).lower():
                return False
            raise StoreError(f"wait failed: {type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}") from e

    # -- the first rank to miss: claim; the others: wait -----------------------------
    def claim_or_wait(self, cache_key: str) -> Outcome:
        """Claim ``cache_key`` (``COMPILE``, beating until ``publish`` or
        ``abandon``), or wait for the rank that did (``LOAD`` or ``LOCAL``)."""
        self._collect_published()
        entered = self._op("add", self._key(cache_key, "claim"), 1)
        if entered == 1:
            self._start_beating(cache_key)
            return Outcome(Decision.COMPILE)
        if entered > CLOSED:
            return self._closed(cache_key)
        try:
            return self._wait(cache_key)
        finally:
            self._leave(cache_key)

    def _wait(self, cache_key: str) -> Outcome:
        start = time.monotonic()
        done_key = self._key(cache_key, "done")
        tick = 0
        while True:
            remaining = self.wait_s - (time.monotonic() - start)
            if remaining <= 0:
                return Outcome(Decision.LOCAL, waited_s=time.monotonic() - start,
                               reason=f"the compiling rank had not finished after {self.wait_s:g} s")
            timed_out = not self._wait_for(self._key(cache_key, f"tick/{tick}"), min(self.stale_s, remaining))
            if self._op("check", [done_key]):
                break
            if timed_out:
                waited = time.monotonic() - start
                if remaining < self.stale_s:
                    return Outcome(Decision.LOCAL, waited_s=waited,
                                   reason=f"the compiling rank had not finished after {self.wait_s:g} s")
                return Outcome(Decision.LOCAL, waited_s=waited,
                               reason=f"the compiling rank stopped beating for {self.stale_s:g} s (gone?)")
            tick += 1
        done = _Done.parse(self._op("get", done_key))
        if not done.ok:
            return Outcome(Decision.LOCAL, source_rank=done.rank, waited_s=time.monotonic() - start,
                           reason=f"rank {done.rank} gave up compiling it: {done.reason}")
        try:
            payload, via = self._fetch(cache_key, done)
        except FleetError as e:
            return Outcome(Decision.LOCAL, source_rank=done.rank, waited_s=time.monotonic() - start, reason=str(e))
        return Outcome(Decision.LOAD, payload=payload, source_rank=done.rank, waited_s=time.monotonic() - start,
                       via=via)

    def _closed(self, cache_key: str) -> Outcome:
        """A key closed before this rank entered: its artifacts from the
        host's spool or the fleet cache, if there."""
        done_key = self._key(cache_key, "done")
        why = "its artifacts left the job's store after every rank that waited for them had loaded them"
        if not self._op("check", [done_key]):
            return Outcome(Decision.LOCAL, reason=why)
        done = _Done.parse(self._op("get", done_key))
        if not done.ok:
            return Outcome(Decision.LOCAL, source_rank=done.rank, reason=f"rank {done.rank} gave up compiling it: "
                           f"{done.reason}")
        spooled = self.host.read(done.name) if self.host is not None else None
        if spooled is not None:
            return Outcome(Decision.LOAD, payload=spooled, source_rank=done.rank, via=VIA_HOST)
        if done.chunks is None and self.fleet is not None:
            try:
                return Outcome(Decision.LOAD, payload=self.fleet.get(done.name), source_rank=done.rank, via=VIA_FLEET)
            except FleetError as e:
                why = str(e)
        return Outcome(Decision.LOCAL, source_rank=done.rank, reason=why)

    # -- the bytes: once per host ------------------------------------------------------
    def _fetch(self, cache_key: str, done: _Done) -> tuple[bytes, str]:
        if self.host is None:
            return self._download(cache_key, done)
        return self.host.fetch(done.name, lambda: self._download(cache_key, done))

    def _download(self, cache_key: str, done: _Done) -> tuple[bytes, str]:
        if done.chunks is None:
            if self.fleet is None:
                raise FleetError("its artifacts are in the fleet cache, which this rank does not reach (torch's "
                                 "remote cache is off here, or its Redis does not answer)")
            return self.fleet.get(done.name), VIA_FLEET
        ticket = self._op("add", self._key(cache_key, "fetching"), 1)
        if ticket > SLOTS:  # the download SLOTS before this one lets this one in (or, gone, does not)
            self._wait_for(self._key(cache_key, f"slot/{ticket - SLOTS}"), self.stale_s)
        try:
            chunks = [self._op("get", self._key(cache_key, f"data/{i}")) for i in range(done.chunks)]
        finally:
            with contextlib.suppress(StoreError):
                self._op("set", self._key(cache_key, f"slot/{ticket}"), b"")
        return b"".join(chunks), VIA_STORE

    # -- leaving, and closing -----------------------------------------------------------
    def _leave(self, cache_key: str) -> None:
        """This waiter is done with the key; the last of a world that all
        entered closes it."""
        try:
            left = self._op("add", self._key(cache_key, "left"), 1)
            if left < self.world - 1:
                return
            entered = self._op("add", self._key(cache_key, "claim"), 0)
            if left == entered - 1 and entered >= self.world:
                self._close(cache_key, entered)
        except StoreError:  # cleaning up is best effort
            pass

    def _close(self, cache_key: str, entered: int) -> bool:
        """Close the key if ``entered`` ranks are still all that entered it,
        and delete what it holds but ``claim`` and ``done``."""
        claim, done_key = self._key(cache_key, "claim"), self._key(cache_key, "done")
        if not self._op("check", [done_key]):
            return False
        now = self._op("compare_set", claim, str(entered), str(entered + CLOSED))
        if int(now) != entered + CLOSED:
            return False
        done = _Done.parse(self._op("get", done_key))
        doomed = [f"tick/{t}" for t in range(done.ticks + 1)] + ["left"]
        if done.ok and done.chunks is not None:
            fetches = self._op("add", self._key(cache_key, "fetching"), 0)
            doomed += [f"data/{i}" for i in range(done.chunks)] + [f"slot/{t}" for t in range(1, fetches + 1)]
            doomed.append("fetching")
        for leaf in doomed:
            with contextlib.suppress(StoreError):
                self._op("delete_key", self._key(cache_key, leaf))
        return True

    def _collect_published(self) -> None:
        """Close this rank's publications older than ``GRACE_S`` (keys some
        ranks never entered: the others close themselves)."""
        now = time.monotonic()
        while self._published and now - self._published[0].at > GRACE_S:
            old = self._published.pop(0)
            with contextlib.suppress(StoreError):
                entered = self._op("add", self._key(old.key, "claim"), 0)
                left = self._op("add", self._key(old.key, "left"), 0)
                if entered < CLOSED and left == entered - 1:
                    self._close(old.key, entered)

    # -- the compiling rank: publish or abandon -------------------------------------
    def publish(self, cache_key: str, payload: bytes) -> None:
        """Send ``payload`` to the ranks that wait for ``cache_key``: spooled
        on this host, put in the fleet cache or the store, then ``done`` and
        the last tick."""
        try:
            name = digest(payload)
            if self.host is not None:
                with contextlib.suppress(OSError):
                    self.host.write(name, payload)
            chunks: int | None = None
            if self.fleet is not None:
                try:
                    self.fleet.put(name, payload)
                except FleetError:
                    self.fleet = None  # from here on, the store: said by the caller's counts
            if self.fleet is None:
                parts = [payload[i:i + CHUNK] for i in range(0, len(payload), CHUNK)] or [b""]
                for i, part in enumerate(parts):
                    self._op("set", self._key(cache_key, f"data/{i}"), part)
                chunks = len(parts)
            done = _Done(True, self.rank, self._stop_beating(cache_key), name, len(payload), chunks)
            self._finish(cache_key, done)
            self._published.append(_Published(cache_key, time.monotonic(), done))
        finally:
            self._stop_beating(cache_key)

    def abandon(self, cache_key: str, reason: str) -> None:
        try:
            text = " ".join(reason.split())[:500]
            self._finish(cache_key, _Done(False, self.rank, self._stop_beating(cache_key), reason=text))
        finally:
            self._stop_beating(cache_key)

    def _finish(self, cache_key: str, done: _Done) -> None:
        self._op("set", self._key(cache_key, "done"), done.text())
        self._op("set", self._key(cache_key, f"tick/{done.ticks}"), b"")  # wakes every waiter

    # -- the beat --------------------------------------------------------------------
    def _start_beating(self, cache_key: str) -> None:
        self._op("set", self._key(cache_key, "tick/0"), b"")
        with self._lock:
            self._beating[cache_key] = 1
            if self._beater is None or not self._beater.is_alive():
                if self._beat_store is None:
                    self._beat_store = _own_connection(self.store)
                self._beater = threading.Thread(target=self._beat, name="dynamo_dist compile-once beat", daemon=True)
                self._beater.start()

    def _stop_beating(self, cache_key: str) -> int:
        """Stop beating for ``cache_key``; the tick its end is (the next unwritten one)."""
        with self._lock:
            return self._beating.pop(cache_key, 0)

    def _beat(self) -> None:
        while True:
            time.sleep(self.stale_s / TICKS_PER_STALE)
            with self._lock:
                if not self._beating:
                    self._beater = None
                    return
                ticks = list(self._beating.items())
                for key, tick in ticks:
                    self._beating[key] = tick + 1
            for key, tick in ticks:
                try:
                    self._beat_store.set(self._key(key, f"tick/{tick}"), b"")
                except Exception:  # the store is gone: waiters will see the beat stall
                    return


def _own_connection(store: Any) -> Any:
    """Another client of ``store`` (``clone``: a new TCPStore connection), so
    the beat is not held behind this process's blocking waits; the store
    itself where it cannot be cloned (an in-process store)."""
    try:
        return store.clone()
    except Exception:
        return store
