"""The protocol of compile once: what a lookup that missed does (claim the
key and compile, or wait for the rank that claimed it and load what it
sent), what the compiling rank publishes when the cache saves, and the
scopes that abandon a claim whose compile raised or saved nothing. The
package docstring says the levels and when it acts.
"""

from __future__ import annotations

import collections
import contextlib
import dataclasses
import json
import logging
import os
import threading
import time
from typing import Any, Callable, Iterator

import torch.distributed as dist

from .. import _compat as C
from .. import config
from ..caching import keys
from . import bundles, kernels
from .fleet import fleet
from .host import Host, host_dir
from .store import VIA_FLEET, VIA_HOST, VIA_STORE, Decision, JobStore, Outcome, StoreError

log = logging.getLogger("dynamo_dist.compile_once")

AOT, FX, FRAME = "aot", "fx", "frame"
TRACE_ARTIFACT = "dynamo_dist_compile_once"

# Where a graph came from (the ``source`` of an event), in explain's words.
COMPILED_SHARED = "compiled here, shared with the job"
COMPILED_HERE = "compiled here"
LOADED = "loaded from rank {rank}"
# How its bytes reached this rank (``Outcome.via``), after LOADED.
VIA_WORDS = {VIA_STORE: "through the job's store",
             VIA_HOST: "through this host's cache (a neighbour on the host had it)",
             VIA_FLEET: "through the fleet cache"}
LOCAL_HIT = "local cache hit"
REMOTE_HIT = "remote cache hit"
COMPILED_AFTER = "compiled here: {reason}"


@dataclasses.dataclass(eq=False)
class _Claim:
    artifact: str
    key: str
    mark: Any  # C.caches.artifact_mark() when claimed
    fx_keys: set[str] = dataclasses.field(default_factory=set)
    started: float = dataclasses.field(default_factory=time.monotonic)
    started_at: float = dataclasses.field(default_factory=time.time)  # file times are wall-clock


class _Scope:
    """The claims one compile made (compared by identity)."""

    def __init__(self) -> None:
        self.claims: list[_Claim] = []


class _Local(threading.local):
    def __init__(self) -> None:
        self.scopes: list[_Scope] = []
        self.aot_claim: _Claim | None = None  # the AOTAutograd claim whose compile is running here
        self.quiet = 0  # inside an AOTAutograd lookup: its FX-graph loads are not claims of their own
        self.loading = False  # looking up again what another rank sent: not a hit of this rank's caches


_local = _Local()
_stores: dict[tuple[int, int, str], JobStore] = {}
# id of a store that failed -> (the store, held so its id is not reused; why): no coordination through it again.
_failed: dict[int, tuple[Any, str]] = {}
_warned: set[str] = set()
_stats: collections.Counter = collections.Counter()


def stats() -> dict[str, float]:
    """This process's counts: graphs ``compiled_shared`` (claimed and
    published), ``compiled_here`` (not shared), ``loaded`` from another rank
    (and frames: ``frames_shipped``, ``frames_loaded``), each load by how its
    bytes came (``via_store``, ``via_host``, ``via_fleet``; their bytes
    ``bytes_via_store`` ...), ``local_hits``
    and ``remote_hits``; seconds ``waited_s`` and ``compile_s`` (claim to
    publish); ``bytes_sent`` and ``bytes_loaded``."""
    return dict(_stats)


def reset_stats() -> None:
    _stats.clear()


def _warn_once(topic: str, message: str) -> None:
    if topic not in _warned:
        _warned.add(topic)
        log.warning("dynamo_dist: %s", message)


def inactive_reason() -> str | None:
    """Why graphs are not shared across the job right now, or None when they are."""
    if not config.compile_once:
        return "switched off (dynamo_dist.config.compile_once = False)"
    if not dist.is_available() or not dist.is_initialized():
        return "no process group (a single process)"
    failed = _failed.get(id(C.caches.default_store()))
    if failed is not None:
        return failed[1]
    if dist.get_world_size() < 2:
        return "a world of one rank"
    if C.caches.is_fake_world():
        return "a fake process group (one process posing as a rank)"
    if keys.rank_tag() is not None:
        return "keys hold the rank: set compile_on_one_rank to share graphs across ranks"
    switches = C.caches.compile_time_collectives_on()
    if switches:
        return f"the compile runs collectives on every rank ({', '.join(switches)})"
    return None


def _job_store() -> JobStore:
    store = C.caches.default_store()
    if store is None:
        raise StoreError("the process group has no store")
    rank = dist.get_rank()
    namespace = f"dynamo_dist/compile_once/{os.environ.get('TORCHELASTIC_RESTART_COUNT', '0')}"
    index = (id(store), rank, namespace)
    if index not in _stores:
        _stores.clear()  # a new world: the old store is gone with its group
        _stores[index] = JobStore(store, namespace, rank, config.compile_once_wait_s, config.compile_once_stale_s,
                                  world=dist.get_world_size(), fleet=fleet())
    job = _stores[index]
    job.wait_s, job.stale_s = config.compile_once_wait_s, config.compile_once_stale_s
    where = host_dir()
    if job.host is None or job.host.directory != where:
        job.host = Host(where, keep_s=config.compile_once_wait_s)
    return job


def _emit(artifact: str, key: str, source: str, **extra: Any) -> None:
    payload = {"level": artifact, "key": key, "source": source, **extra}
    C.caches.trace_artifact(TRACE_ARTIFACT, lambda: json.dumps(payload))


def record_hit(artifact: str, key: str, remote: bool) -> None:
    """A lookup hit the local or the remote cache (no coordination needed)."""
    if _local.loading:
        return
    _stats["remote_hits" if remote else "local_hits"] += 1
    _emit(artifact, key, REMOTE_HIT if remote else LOCAL_HIT)


# -- a lookup that missed ------------------------------------------------------------
def after_miss(artifact: str, key: str, lookup_again: Callable[[], Any], hit: Callable[[Any], bool]) -> Any:
    """What a lookup of ``key`` that missed locally and remotely returns:
    ``None``-like (``lookup_again``'s miss) when this rank compiles, else the
    hit ``lookup_again`` finds after loading another rank's artifacts."""
    if artifact == FX and (_local.quiet or _local.aot_claim is not None):
        if _local.aot_claim is not None:
            _local.aot_claim.fx_keys.add(key)
        return None
    why = inactive_reason()
    if why is not None or not _local.scopes:
        return None
    outcome = claim_or_wait(key)
    if outcome is None:
        return None
    if outcome.decision is Decision.COMPILE:
        claim = _Claim(artifact, key, C.caches.artifact_mark())
        _local.scopes[-1].claims.append(claim)
        if artifact == AOT:
            _local.aot_claim = claim
        return None
    if outcome.decision is Decision.LOAD:
        found = _load(artifact, key, outcome, lookup_again, hit)
        if found is not None:
            return found
    else:
        compiled_after_waiting(artifact, key, outcome)
    return None


def claim_or_wait(key: str) -> Outcome | None:
    """The job's answer for ``key``: compile it here (this rank claimed it:
    ``publish`` or ``abandon`` follows), load what another rank published, or
    compile here after waiting (``outcome.reason``); None when the job's store
    failed (compile here; coordination is off from then on)."""
    try:
        outcome = _job_store().claim_or_wait(key)
    except StoreError as e:
        _store_failed(e)
        return None
    _stats["waited_s"] += outcome.waited_s
    return outcome


def compiled_after_waiting(artifact: str, key: str, outcome: Outcome, **extra: Any) -> None:
    """No artifacts came for ``key`` (the claiming rank abandoned it, went
    silent or took too long): this rank compiles it."""
    _stats["compiled_here"] += 1
    _emit(artifact, key, COMPILED_AFTER.format(reason=outcome.reason), waited_s=round(outcome.waited_s, 3), **extra)
    _warn_once(f"local:{outcome.reason}", f"compiling a graph here after waiting for another rank: {outcome.reason}")


def unpack(artifact: str, key: str, outcome: Outcome, **extra: Any) -> bytes | None:
    """The artifacts another rank published for ``key``, its kernels
    installed here, or None (warned once, counted) when they are refused."""
    assert outcome.payload is not None
    try:
        artifacts, files = bundles.unpack(key, outcome.payload)
        kernels.install(files)
        return artifacts
    except Exception as e:
        refused(artifact, key, outcome, e, **extra)
        return None


def refused(artifact: str, key: str, outcome: Outcome, error: BaseException, **extra: Any) -> None:
    """The artifacts rank ``outcome.source_rank`` sent could not be used here."""
    why = (str(error) if isinstance(error, bundles.BundleError)
           else f"loading them failed ({type(error).__name__}: {error})")
    _warn_once(f"refused:{type(error).__name__}", f"refused the compiled artifacts rank {outcome.source_rank} sent "
               f"for a graph: {why}; compiling it here")
    _stats["compiled_here"] += 1
    _emit(artifact, key, COMPILED_AFTER.format(reason=f"the artifacts from rank {outcome.source_rank} were refused: "
                                           f"{why}"), **extra)


def not_matching(artifact: str, key: str, outcome: Outcome, **extra: Any) -> None:
    """What rank ``outcome.source_rank`` sent loaded, but its guards do not pass here."""
    _stats["compiled_here"] += 1
    _emit(artifact, key, COMPILED_AFTER.format(reason=f"the entry rank {outcome.source_rank} sent does not "
                                           "match here (its guards)"), source_rank=outcome.source_rank, **extra)


def loaded(artifact: str, key: str, outcome: Outcome, **extra: Any) -> None:
    assert outcome.payload is not None
    _stats["frames_loaded" if artifact == FRAME else "loaded"] += 1
    _stats[f"via_{outcome.via}"] += 1
    _stats[f"bytes_via_{outcome.via}"] += len(outcome.payload)
    _stats["bytes_loaded"] += len(outcome.payload)
    source = LOADED.format(rank=outcome.source_rank)
    if outcome.via in VIA_WORDS:
        source = f"{source} {VIA_WORDS[outcome.via]}"
    _emit(artifact, key, source, waited_s=round(outcome.waited_s, 3), bytes=len(outcome.payload),
          source_rank=outcome.source_rank, via=outcome.via, **extra)


def _load(artifact: str, key: str, outcome: Outcome, lookup_again: Callable[[], Any],
          hit: Callable[[Any], bool]) -> Any:
    artifacts = unpack(artifact, key, outcome)
    if artifacts is None:
        return None
    try:
        C.caches.load_artifacts(artifacts)
    except Exception as e:
        refused(artifact, key, outcome, e)
        return None
    _local.loading = True
    try:
        with quiet_lookups():
            found = lookup_again()
    finally:
        _local.loading = False
    if not hit(found):
        not_matching(artifact, key, outcome)
        return None
    loaded(artifact, key, outcome)
    return found


def _store_failed(error: StoreError) -> None:
    reason = f"the job's store failed ({error}); every rank compiles its own graphs from here on"
    store = C.caches.default_store()
    _failed[id(store)] = (store, reason)
    _warn_once("store", f"compile once is off for this process: {reason}")


# -- the compiling rank --------------------------------------------------------------
def claimed_here(artifact: str, key: str) -> bool:
    """This rank claimed ``key`` and its compile is running."""
    return _claim(artifact, key) is not None


def _claim(artifact: str, key: str) -> _Claim | None:
    return next((c for scope in _local.scopes for c in scope.claims if c.artifact == artifact and c.key == key), None)


def fx_key_touched(key: str) -> None:
    """An FX-graph entry was looked up or saved during an AOTAutograd claim."""
    if _local.aot_claim is not None:
        _local.aot_claim.fx_keys.add(key)


def saved(artifact: str, key: str) -> None:
    """The cache saved ``key``: publish it if this rank claimed it."""
    claim = _claim(artifact, key)
    if claim is None:
        return
    _close(claim)
    wanted = {(C.caches.AOT_ARTIFACT if artifact == AOT else C.caches.FX_ARTIFACT, key)}
    wanted |= {(C.caches.FX_ARTIFACT, fx) for fx in claim.fx_keys}
    try:
        artifacts = C.caches.serialize_artifacts(C.caches.artifacts_since(claim.mark, wanted))
    except Exception as e:  # nothing to send: the waiters compile themselves
        _abandon(claim, f"its artifacts could not be serialized ({type(e).__name__}: {e})")
        return
    publish(artifact, key, artifacts, claim.started, claim.started_at)


def publish(artifact: str, key: str, artifacts: bytes, started: float, started_at: float, **extra: Any) -> None:
    """Send what this rank compiled for the ``key`` it claimed (at
    ``time.monotonic()`` ``started``, ``time.time()`` ``started_at``), with
    the kernels it built since, to the ranks that wait for it."""
    try:
        # A second early: file times may be coarser than the clock.
        payload = bundles.pack(key, artifacts, kernels.written_since(started_at - 1.0))
        _job_store().publish(key, payload)
    except StoreError as e:
        _store_failed(e)
        return
    _stats["frames_shipped" if artifact == FRAME else "compiled_shared"] += 1
    _stats["bytes_sent"] += len(payload)
    _stats["compile_s"] += time.monotonic() - started
    _emit(artifact, key, COMPILED_SHARED, bytes=len(payload), **extra)


def _close(claim: _Claim) -> None:
    for scope in _local.scopes:
        if claim in scope.claims:
            scope.claims.remove(claim)
    if _local.aot_claim is claim:
        _local.aot_claim = None


def _abandon(claim: _Claim, reason: str) -> None:
    _close(claim)
    abandon(claim.artifact, claim.key, reason)


def abandon(artifact: str, key: str, reason: str, **extra: Any) -> None:
    """This rank claimed ``key`` and has nothing to send: its waiters compile themselves."""
    _stats["compiled_here"] += 1
    _emit(artifact, key, COMPILED_HERE, abandoned=reason, **extra)
    try:
        _job_store().abandon(key, reason)
    except StoreError as e:
        _store_failed(e)


@contextlib.contextmanager
def scope() -> Iterator[None]:
    """One compile (a Dynamo graph's, or inductor's of one graph): what it
    claims and does not publish is abandoned when it ends, with the reason."""
    this = _Scope()
    _local.scopes.append(this)
    error: BaseException | None = None
    try:
        yield
    except BaseException as e:
        error = e
        raise
    finally:
        _local.scopes.remove(this)
        for claim in this.claims:
            _abandon(claim, f"its compile raised {type(error).__name__}: {error}" if error is not None
                     else "its compile saved no cache entry")


@contextlib.contextmanager
def quiet_lookups() -> Iterator[None]:
    """FX-graph lookups inside (an AOTAutograd entry loading its graphs) are
    not claims of their own."""
    _local.quiet += 1
    try:
        yield
    finally:
        _local.quiet -= 1


def remote_cache_lost(address: str) -> None:
    """torch could not reach its remote cache and switched it off."""
    _warn_once("remote", f"the remote compile cache at {address} cannot be reached; torch switched it off for "
               "this process, so graphs come from the local cache, another rank or a compile here")
