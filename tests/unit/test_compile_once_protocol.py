"""The compile-once protocol over a real c10d store (``HashStore``; ranks as
threads), the bundle framing, and the switches: fast, every release.

The same protocol across real gloo ranks, with inductor compiles and
faults, is ``test_compile_once.py``.
"""

from __future__ import annotations

import collections
import os
import threading
import time

import pytest
import torch.distributed as dist

import dynamo_dist
from dynamo_dist.compile_once import bundles, store as job_store
from dynamo_dist.compile_once.host import Host, digest
from dynamo_dist.compile_once.store import Decision, JobStore, StoreError

pytestmark = pytest.mark.release


def _ranks(store, n=2, wait_s=30.0, stale_s=5.0, world=None, hosts=None):
    """``n`` ranks of a world of ``world`` (``n``), each its own host unless
    ``hosts`` gives each rank's ``Host``."""
    return [JobStore(store, "ns", r, wait_s, stale_s, world=world or n, host=(hosts or {}).get(r))
            for r in range(n)]


def _later(seconds, fn, *args):
    thread = threading.Thread(target=lambda: (time.sleep(seconds), fn(*args)))
    thread.start()
    return thread


def _all(fns):
    """Run each of ``fns`` in a thread of its own; their results in order."""
    out = [None] * len(fns)
    threads = [threading.Thread(target=lambda i=i, f=f: out.__setitem__(i, f())) for i, f in enumerate(fns)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    return out


class Counting(dist.Store):
    """The job's store, counting the requests and the bytes it serves (``get``)."""

    def __init__(self, inner, fail_gets=None):
        super().__init__()
        self.inner, self.requests, self.served, self.fail_gets = inner, collections.Counter(), 0, fail_gets

    def _count(self, op):
        self.requests[op] += 1

    def set(self, key, value):
        self._count("set")
        self.inner.set(key, value)

    def get(self, key):
        self._count("get")
        if self.fail_gets and self.fail_gets in key:
            raise dist.DistNetworkError("Connection reset by peer")
        value = self.inner.get(key)
        self.served += len(value)
        return value

    def add(self, key, amount):
        self._count("add")
        return self.inner.add(key, amount)

    def check(self, keys):
        self._count("check")
        return self.inner.check(keys)

    def wait(self, keys, timeout=None):
        self._count("wait")
        return self.inner.wait(keys, timeout) if timeout is not None else self.inner.wait(keys)

    def compare_set(self, key, expected, desired):
        self._count("compare_set")
        return self.inner.compare_set(key, expected, desired)

    def delete_key(self, key):
        self._count("delete_key")
        return self.inner.delete_key(key)

    def total(self):
        return sum(self.requests.values())


def _left_in_store(store, key, leaves=("claim", "done", "left", "tick/0", "tick/1", "data/0")):
    return {leaf for leaf in leaves if store.check([f"ns/{key}/{leaf}"])}


def test_the_first_rank_compiles_and_the_next_loads_what_it_published():
    compiler, waiter, late = _ranks(dist.HashStore(), n=3)
    assert compiler.claim_or_wait("k").decision is Decision.COMPILE
    payload = bytes(range(256)) * (3 * job_store.CHUNK // 256 + 7)  # four chunks
    _later(0.3, compiler.publish, "k", payload).join(0)
    outcome = waiter.claim_or_wait("k")
    assert outcome.decision is Decision.LOAD and outcome.via == job_store.VIA_STORE
    assert outcome.payload == payload and outcome.source_rank == 0
    assert 0.2 < outcome.waited_s < 5
    # A rank that comes after the publish loads at once.
    later = late.claim_or_wait("k")
    assert later.decision is Decision.LOAD and later.payload == payload and later.waited_s < 0.5


def test_the_store_is_left_as_it_was_found_once_every_rank_has_the_bytes():
    """Every rank of the world entered and loaded: the last to leave closes
    the key and deletes its chunks, ticks and count; ``claim`` and ``done``
    stay (what a rank entering it later reads)."""
    store = dist.HashStore()
    compiler, *waiters = _ranks(store, n=4)
    assert compiler.claim_or_wait("k").decision is Decision.COMPILE
    _later(0.3, compiler.publish, "k", b"x" * (job_store.CHUNK + 10)).join(0)
    assert all(o.decision is Decision.LOAD for o in _all([lambda w=w: w.claim_or_wait("k") for w in waiters]))
    assert _left_in_store(store, "k", ("claim", "done", "left", "tick/0", "tick/1", "data/0", "data/1")) == \
        {"claim", "done"}
    # A rank that enters a closed key has no bytes to load: it compiles.
    again = JobStore(store, "ns", 2, 30.0, 5.0, world=4).claim_or_wait("k")
    assert again.decision is Decision.LOCAL and "left the job's store" in again.reason


def test_a_key_not_every_rank_entered_is_closed_by_its_publisher_after_the_grace(monkeypatch):
    """No other rank entered (they hit their caches, or compile other graphs):
    the publisher closes it at its next compile once ``GRACE_S`` passed."""
    monkeypatch.setattr(job_store, "GRACE_S", 0.2)
    store = dist.HashStore()
    compiler = JobStore(store, "ns", 0, 30.0, 5.0, world=8)
    assert compiler.claim_or_wait("k").decision is Decision.COMPILE
    compiler.publish("k", b"payload")
    assert compiler.claim_or_wait("k2").decision is Decision.COMPILE  # within the grace: kept
    assert _left_in_store(store, "k") == {"claim", "done", "tick/0", "tick/1", "data/0"}
    compiler.abandon("k2", "the test is over")
    time.sleep(0.3)
    assert compiler.claim_or_wait("k3").decision is Decision.COMPILE
    compiler.abandon("k3", "the test is over")
    assert _left_in_store(store, "k") == {"claim", "done"}


def test_ranks_of_one_host_share_one_download(tmp_path):
    """Three ranks on one host wait for a rank on another: the store serves
    the payload to one of them; the others read the host's spool."""
    store = Counting(dist.HashStore())
    host = Host(str(tmp_path / "host"), keep_s=60)
    compiler, *waiters = _ranks(store, n=4, hosts={1: host, 2: host, 3: host})
    assert compiler.claim_or_wait("k").decision is Decision.COMPILE
    payload = os.urandom(3 * job_store.CHUNK)
    _later(0.3, compiler.publish, "k", payload).join(0)
    outcomes = _all([lambda w=w: w.claim_or_wait("k") for w in waiters])
    assert all(o.decision is Decision.LOAD and o.payload == payload for o in outcomes)
    assert sorted(o.via for o in outcomes) == ["host", "host", "store"]
    assert store.served < 2 * len(payload)


def test_a_host_whose_fetching_rank_dies_still_loads(tmp_path):
    """The rank that took the host's lease dies downloading (its store
    connection resets): the lease goes with it, and its neighbour downloads."""
    inner = dist.HashStore()
    host = Host(str(tmp_path / "host"), keep_s=60)
    compiler = JobStore(inner, "ns", 0, 30.0, 5.0, world=3)
    dying = JobStore(Counting(inner, fail_gets="/data/"), "ns", 1, 30.0, 5.0, world=3, host=host)
    neighbour = JobStore(inner, "ns", 2, 30.0, 5.0, world=3, host=host)
    assert compiler.claim_or_wait("k").decision is Decision.COMPILE
    compiler.publish("k", b"payload")
    with pytest.raises(StoreError, match="get failed: DistNetworkError"):
        dying.claim_or_wait("k")
    outcome = neighbour.claim_or_wait("k")
    assert outcome.decision is Decision.LOAD and outcome.via == job_store.VIA_STORE and outcome.payload == b"payload"


def test_neighbours_wait_for_the_downloading_rank_and_read_its_spool(tmp_path):
    """While a neighbour holds the host's lease on a payload (downloading
    it), the others wait for it and then read what it spooled; a neighbour
    that lets go without a spool (it died) leaves the download to the next."""
    import fcntl

    host = Host(str(tmp_path / "host"), keep_s=60)
    payload = b"payload"
    name = digest(payload)
    os.makedirs(host.directory)
    with open(os.path.join(host.directory, name + ".lease"), "w") as holder:
        fcntl.flock(holder, fcntl.LOCK_EX)  # a neighbour downloading
        _later(0.3, host.write, name, payload)
        _later(0.5, fcntl.flock, holder, fcntl.LOCK_UN).join(0)
        assert host.fetch(name, lambda: pytest.fail("downloaded again")) == (payload, "host")
    other = digest(b"other")
    with open(os.path.join(host.directory, other + ".lease"), "w") as holder:
        fcntl.flock(holder, fcntl.LOCK_EX)
        _later(0.3, fcntl.flock, holder, fcntl.LOCK_UN).join(0)  # let go, nothing spooled: it died
        assert host.fetch(other, lambda: (b"other", "store")) == (b"other", "store")
    assert host.read(other) == b"other"


def test_waiting_costs_the_store_two_requests_per_tick_not_a_poll_loop():
    """A waiter through a 3 s compile, ticks every 1 s (``stale_s`` 3): a
    ``wait`` and a ``check`` per tick, whatever the compile's length (the
    poll it replaces asked twice per poll, polls up to once a second)."""
    inner = dist.HashStore()
    compiler = JobStore(inner, "ns", 0, 30.0, 3.0, world=2)
    counting = Counting(inner)
    waiter = JobStore(counting, "ns", 1, 30.0, 3.0, world=2)
    assert compiler.claim_or_wait("k").decision is Decision.COMPILE
    _later(3.0, compiler.publish, "k", b"payload").join(0)
    assert waiter.claim_or_wait("k").decision is Decision.LOAD
    ticks = counting.requests["wait"]
    assert ticks <= 3 + 2  # tick/0, one a second, the last
    assert counting.requests["check"] <= ticks + 1  # one after each tick (and the close's)
    # claim, done, the download's ticket, chunk and slot, left and the
    # entered count (the last to leave reads it), the close's check, read of
    # done and of the downloads; the close itself is one compare_set and a
    # delete per key the graph held.
    closing = counting.requests["compare_set"] + counting.requests["delete_key"]
    assert counting.total() - closing <= 2 * ticks + 10


def test_a_blocked_wait_does_not_hold_the_beat():
    """A TCPStore client's blocking ``wait`` holds its connection: the
    compiling rank's beat has its own, so a rank that compiles one graph
    while it waits for another's keeps beating."""
    server = dist.TCPStore("127.0.0.1", 0, is_master=True, wait_for_workers=False)

    def client():
        return dist.TCPStore("127.0.0.1", server.port, is_master=False)

    a, b, c = (JobStore(client(), "ns", r, 30.0, 1.5, world=3) for r in range(3))
    assert a.claim_or_wait("k1").decision is Decision.COMPILE
    assert b.claim_or_wait("k2").decision is Decision.COMPILE
    a_waits = _later(0.0, a.claim_or_wait, "k2")  # rank a blocks on rank b's graph ...
    _later(4.0, b.publish, "k2", b"two").join(0)
    _later(4.5, a.publish, "k1", b"one").join(0)
    outcome = c.claim_or_wait("k1")  # ... and rank c waits on rank a's through it
    a_waits.join(30)
    assert outcome.decision is Decision.LOAD and outcome.payload == b"one", outcome.reason


def test_keys_are_independent_and_namespaced():
    store = dist.HashStore()
    a, b = _ranks(store)
    assert a.claim_or_wait("k1").decision is Decision.COMPILE
    assert b.claim_or_wait("k2").decision is Decision.COMPILE  # another key: no wait
    other_job = JobStore(store, "other", 1, 30.0, 5.0)
    assert other_job.claim_or_wait("k1").decision is Decision.COMPILE  # another namespace (a restart)
    for rank, key in ((a, "k1"), (b, "k2"), (other_job, "k1")):
        rank.abandon(key, "done with the test")


def test_an_abandoned_claim_sends_the_waiters_to_compile_at_once():
    compiler, waiter = _ranks(dist.HashStore(), stale_s=30.0)
    assert compiler.claim_or_wait("k").decision is Decision.COMPILE
    _later(0.2, compiler.abandon, "k", "its compile raised RuntimeError: boom")
    outcome = waiter.claim_or_wait("k")
    assert outcome.decision is Decision.LOCAL and outcome.waited_s < 5
    assert outcome.reason == "rank 0 gave up compiling it: its compile raised RuntimeError: boom"


def test_a_silent_compiling_rank_is_given_up_after_stale_s():
    store = dist.HashStore()
    waiter = JobStore(store, "ns", 1, 30.0, 1.0)
    store.add("ns/k/claim", 1)  # a rank claimed the key and died before its first beat
    start = time.monotonic()
    outcome = waiter.claim_or_wait("k")
    assert outcome.decision is Decision.LOCAL
    assert "stopped beating for 1 s" in outcome.reason
    assert 1.0 <= time.monotonic() - start < 10


def test_a_beating_compile_is_waited_for_up_to_wait_s():
    compiler, waiter = _ranks(dist.HashStore(), wait_s=2.5, stale_s=1.5)
    assert compiler.claim_or_wait("k").decision is Decision.COMPILE  # beats every 0.5 s, never publishes
    try:
        outcome = waiter.claim_or_wait("k")
    finally:
        compiler.abandon("k", "the test is over")
    assert outcome.decision is Decision.LOCAL
    assert outcome.reason == "the compiling rank had not finished after 2.5 s"
    assert outcome.waited_s >= 2.4  # a timed wait may wake a hair early


class _FailingStore(dist.Store):
    """A store whose server is gone: every operation raises, as a TCPStore
    client does once its connection is reset."""

    def add(self, key, value):
        raise dist.DistNetworkError("Connection reset by peer")

    def check(self, keys):
        raise dist.DistNetworkError("Connection reset by peer")


def test_a_failing_store_is_a_store_error_naming_the_operation():
    rank = JobStore(_FailingStore(), "ns", 0, 30.0, 5.0)
    with pytest.raises(StoreError, match="add failed: DistNetworkError: Connection reset by peer"):
        rank.claim_or_wait("k")


class _NoWait(dist.Store):
    """A store of the program's own without a blocking ``wait``."""

    def __init__(self):
        super().__init__()
        self.inner = dist.HashStore()

    def add(self, key, value):
        return self.inner.add(key, value)

    def set(self, key, value):
        self.inner.set(key, value)

    def check(self, keys):
        return self.inner.check(keys)


def test_a_store_without_a_blocking_wait_is_a_store_error_not_a_silent_give_up():
    """Telling a store that cannot wait from a compiling rank that went
    silent: the first is the store failing (compile once turns off for the
    process, said once), never every waiter compiling as if it timed out."""
    store = _NoWait()
    compiler, waiter = _ranks(store)
    assert compiler.claim_or_wait("k").decision is Decision.COMPILE
    try:
        with pytest.raises(StoreError, match='wait failed: RuntimeError: Tried to call pure virtual function'):
            waiter.claim_or_wait("k")
    finally:
        compiler.abandon("k", "the test is over")


# -- bundles --------------------------------------------------------------------------
KERNELS = {"ab/cabc.main.so": b"\x7fELF kernel", "cd/ccd.so": b"\x7fELF probe"}


def test_a_bundle_round_trips():
    assert bundles.unpack("key", bundles.pack("key", b"artifacts", KERNELS)) == (b"artifacts", KERNELS)
    assert bundles.unpack("key", bundles.pack("key", b"")) == (b"", {})


@pytest.mark.parametrize("damage, message", [
    (lambda b: b[:-3], "holds 42 of its 45 bytes (truncated)"),
    (lambda b: b[:-9] + b"ARTIFACTS", "do not match their digest (corrupt)"),
    (lambda b: b[: len(bundles.MAGIC) + 5], "ends inside its header (truncated)"),
    (lambda b: b"\x00" + b, "not a compile-once bundle"),
    (lambda b: b.replace(b"key 45", b"key x"), "its header is corrupt"),
])
def test_a_damaged_bundle_is_refused_with_the_reason(damage, message):
    with pytest.raises(bundles.BundleError, match=message.replace("(", r"\(").replace(")", r"\)")):
        bundles.unpack("key", damage(bundles.pack("key", b"artifacts", {"ab/cabc.so": b"\x7fELF"})))


def test_a_bundle_for_another_key_is_refused():
    with pytest.raises(bundles.BundleError, match="holds the artifacts of key other, not key"):
        bundles.unpack("key", bundles.pack("other", b"artifacts"))


def test_kernel_binaries_go_to_their_digest_paths_and_nowhere_else(tmp_path, monkeypatch):
    from dynamo_dist._compat import caches
    from dynamo_dist.compile_once import kernels

    monkeypatch.setattr(caches, "inductor_cache_dir", lambda: str(tmp_path))
    start = time.time() - 1
    assert kernels.install(KERNELS) == 2
    assert (tmp_path / "ab" / "cabc.main.so").read_bytes() == KERNELS["ab/cabc.main.so"]
    assert kernels.written_since(start) == KERNELS
    assert kernels.install(KERNELS) == 0  # never over an existing binary
    for bad in ("../x.so", "/etc/x.so", "abc/x.so", "ab/x.py", "ab/../../x.so", "ab/c/x.so"):
        with pytest.raises(ValueError, match="outside the cache's kernel folders"):
            kernels.install({bad: b""})


# -- the switches ---------------------------------------------------------------------
def test_config_patch_sets_and_restores_and_checks():
    config = dynamo_dist.config
    before = (config.compile_once, config.compile_once_wait_s)
    with config.patch(compile_once=not before[0], compile_once_wait_s=5):
        assert (config.compile_once, config.compile_once_wait_s) == (not before[0], 5)
    assert (config.compile_once, config.compile_once_wait_s) == before
    with pytest.raises(AttributeError, match="no switch 'compile_one'"):
        with config.patch(compile_one=False):
            pass
    with pytest.raises(TypeError, match="takes a bool"):
        with config.patch(compile_once="no"):
            pass
    with pytest.raises(TypeError, match="takes seconds"):
        with config.patch(compile_once_stale_s=True):
            pass


@pytest.mark.parametrize("name, value, error", [
    ("DYNAMO_DIST_COMPILE_ONCE", "maybe", "expected 1 or 0"),
    ("DYNAMO_DIST_COMPILE_ONCE_WAIT_S", "soon", "expected a number of seconds"),
    ("DYNAMO_DIST_COMPILE_ONCE_STALE_S", "-1", "expected a positive number of seconds"),
])
def test_a_bad_environment_value_names_the_variable(monkeypatch, name, value, error):
    import importlib

    from dynamo_dist import config

    monkeypatch.setenv(name, value)
    with pytest.raises(ValueError, match=f"{name}={value!r}: {error}"):
        importlib.reload(config)
    monkeypatch.delenv(name)
    importlib.reload(config)


# -- device-agnostic keys under compile_on_one_rank ----------------------------------------
@pytest.mark.parametrize("device, current, one_rank, agnostic, cudagraphs, keyed", [
    ("cuda:3", "cuda:3", True, True, False, "cuda"),  # the rank's own device: no index, keys shared
    ("cuda:3", "cuda:3", False, True, False, "cuda:3"),  # outside compile_on_one_rank: devices may collide
    ("cuda:3", "cuda:3", True, False, False, "cuda:3"),  # a release whose code holds the index (2.11-2.13)
    ("cuda:3", "cuda:3", True, True, True, "cuda:3"),  # CUDA graphs keep the compile-time index
    ("cuda:2", "cuda:3", True, True, False, "cuda:2"),  # another device than the current one
    ("xpu:3", "cuda:3", True, True, False, "xpu:3"),  # another device type
    ("cuda:3", None, True, True, False, "cuda:3"),  # no accelerator
])
def test_a_key_drops_the_device_index_only_where_the_code_is_device_agnostic(device, current, one_rank, agnostic,
                                                                          cudagraphs, keyed):
    import torch

    from dynamo_dist.caching import keys

    got = keys.key_device(torch.device(device), torch.device(current) if current else None, one_rank, agnostic,
                          cudagraphs)
    assert got == torch.device(keyed)


def test_device_agnostic_code_is_detected_where_torch_has_it():
    import torch

    from dynamo_dist._compat import caches

    release = tuple(int(p) for p in torch.__version__.split("+")[0].split(".")[:2])
    assert caches.device_agnostic_codegen() == (release >= (2, 14))


def test_settings_that_make_the_compile_run_collectives_are_seen():
    """Under them every compiling rank meets the others in a collective, so a
    rank that loads would leave them waiting: compile once steps aside."""
    import torch._functorch.config as functorch_config
    import torch._inductor.config as inductor_config

    from dynamo_dist._compat import caches

    assert caches.compile_time_collectives_on() == []  # torch's defaults, on every release
    # torch's own config.patch: monkeypatch's undo deletes a config entry instead of restoring it
    with functorch_config.patch(_sync_decision_cross_ranks=True):
        assert caches.compile_time_collectives_on() == ["torch._functorch.config._sync_decision_cross_ranks"]
    with inductor_config.patch(reorder_for_compute_comm_overlap=True):
        spmd = getattr(getattr(inductor_config, "aten_distributed_optimizations", None), "spmd_check", None)
        expected = ["torch._inductor.config.aten_distributed_optimizations.spmd_check with collective reordering"] \
            if spmd else []  # 2.12 / 2.13 check by default; 2.14+ only when asked
        assert caches.compile_time_collectives_on() == expected
    assert functorch_config._sync_decision_cross_ranks is False  # restored, not deleted


@pytest.mark.slow
def test_with_the_fleet_cache_the_store_carries_signals_only():
    """Torch's Redis remote cache on: the compiling rank puts the payload
    there once, under its digest (expiring); each host fetches it from
    there; the store serves no payload byte. A rank that cannot reach the
    fleet cache compiles itself, saying why. (A real redis-server.)"""
    from devtools.bench.compile_once import RedisServer, fleet_unavailable
    from dynamo_dist.compile_once.fleet import PREFIX, Fleet

    why = fleet_unavailable()
    if why:
        pytest.skip(why)
    import redis

    with RedisServer() as server:
        client = redis.Redis(host="127.0.0.1", port=server.port)
        fleet = Fleet(client, f"redis://127.0.0.1:{server.port}")
        store = Counting(dist.HashStore())
        compiler = JobStore(store, "ns", 0, 30.0, 5.0, world=4, fleet=fleet)
        loaders = [JobStore(store, "ns", r, 30.0, 5.0, world=4, fleet=fleet) for r in (1, 2)]
        blind = JobStore(store, "ns", 3, 30.0, 5.0, world=4)  # torch's remote cache off here
        assert compiler.claim_or_wait("k").decision is Decision.COMPILE
        payload = os.urandom(job_store.CHUNK + 5)
        _later(0.3, compiler.publish, "k", payload).join(0)
        outcomes = _all([lambda w=w: w.claim_or_wait("k") for w in (*loaders, blind)])
        assert [o.via for o in outcomes[:2]] == ["fleet", "fleet"]
        assert all(o.payload == payload for o in outcomes[:2])
        assert outcomes[2].decision is Decision.LOCAL and "fleet cache" in outcomes[2].reason
        assert store.served < 1000  # claim, ticks and "done": no payload through the store
        assert 0 < client.ttl(PREFIX + digest(payload)) <= 24 * 3600
