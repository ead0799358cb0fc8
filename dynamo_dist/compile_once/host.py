"""The host as the unit of a download: the ranks that share a directory
(one host's) share one download of each payload.

The compiling rank's artifacts reach the other hosts once each: on every
host the first rank that needs them takes the host's lease on their digest
(a file lock in the host's directory), downloads them and writes them there
(the spool); its neighbours wait on the lease, on the host, and read the
spool. No rank asks the job's store or the fleet cache for bytes a
neighbour already holds, and waiting on a neighbour costs the job's store
nothing.

Which ranks are one host (``host_dir``): with torchrun's ``LOCAL_WORLD_SIZE``
above one, the ranks of a node (torchrun's ``GROUP_RANK``), in a directory
per node under ``config.compile_once_host_dir`` (default: the node's
temporary folder); otherwise the ranks that share inductor's cache dir
(torch's default is one per user on a host). A spool is named by
the digest of its bytes and checked against it when read, so what a spool
holds is what was sent, from this job or an earlier one; spools and lease
files older than the longest wait are removed when a new spool is written.

Faults: a rank that dies holding the lease releases it with its process
(the lock is the kernel's ``flock``), and the next neighbour downloads; a
neighbour that holds it past the bound (a stuck download) is not waited for
past it: the waiter downloads itself. A waiting neighbour blocks in the
kernel (a thread of its own takes the lock, so the wait can end at the
bound): it costs no CPU and wakes when the lease is released.
"""

from __future__ import annotations

import contextlib
import getpass
import hashlib
import os
import tempfile
import threading
import time
from typing import Iterator

from .. import _compat as C
from .. import config

try:
    import fcntl
except ImportError:  # pragma: no cover - not a POSIX system
    fcntl = None  # type: ignore[assignment]

SPOOL, LEASE = ".bundle", ".lease"


def digest(payload: bytes) -> str:
    """The name of a payload: its blake2b digest."""
    return hashlib.blake2b(payload, digest_size=20).hexdigest()


def node() -> tuple[int, int] | None:
    """(this node's index, its ranks) under torchrun's ``LOCAL_WORLD_SIZE``
    above one, else None. The index is torchrun's ``GROUP_RANK`` where set,
    else worked out from the global and local rank (torchrun numbers the
    ranks of a node contiguously)."""
    try:
        local_world = int(os.environ.get("LOCAL_WORLD_SIZE", "1"))
    except ValueError:
        return None
    if local_world <= 1:
        return None
    group = os.environ.get("GROUP_RANK")
    if group is not None and group.isdigit():
        return int(group), local_world
    rank, local = C.caches.process_rank(), int(os.environ.get("LOCAL_RANK", "0") or 0)
    return (rank - local) // local_world, local_world


def host_dir() -> str:
    """The directory this rank's host shares (the module docstring)."""
    where = node()
    if where is not None:
        root = config.compile_once_host_dir
        if root is None:
            user = "".join(c if c.isalnum() else "_" for c in _user())
            root = os.path.join(tempfile.gettempdir(), f"dynamo_dist-{user}", "compile_once")
        return os.path.join(root, f"node{where[0]}")
    return os.path.join(C.caches.inductor_cache_dir(), "dynamo_dist", "compile_once")


def _user() -> str:
    try:
        return getpass.getuser()
    except Exception:  # no user name (a container without one): its id
        return str(os.getuid()) if hasattr(os, "getuid") else "user"


class Host:
    """One host's spools and leases, in ``directory``."""

    def __init__(self, directory: str, keep_s: float) -> None:
        self.directory = directory
        self.keep_s = keep_s

    def _path(self, name: str, suffix: str) -> str:
        return os.path.join(self.directory, name + suffix)

    def read(self, name: str) -> bytes | None:
        """The spool of digest ``name``, or None (none yet, or damaged)."""
        try:
            with open(self._path(name, SPOOL), "rb") as f:
                data = f.read()
        except OSError:
            return None
        return data if digest(data) == name else None

    def write(self, name: str, payload: bytes) -> None:
        """Spool ``payload`` (whole or not at all); old spools go."""
        os.makedirs(self.directory, exist_ok=True)
        fd, temporary = tempfile.mkstemp(dir=self.directory, suffix=".part")
        try:
            with os.fdopen(fd, "wb") as f:
                f.write(payload)
            os.replace(temporary, self._path(name, SPOOL))
        except BaseException:
            with contextlib.suppress(OSError):
                os.unlink(temporary)
            raise
        self._clear_old(keep=name)

    def _clear_old(self, keep: str) -> None:
        cutoff = time.time() - self.keep_s
        with contextlib.suppress(OSError), os.scandir(self.directory) as entries:
            for entry in entries:
                if entry.name.startswith(keep) or not entry.name.endswith((SPOOL, LEASE, ".part")):
                    continue
                with contextlib.suppress(OSError):
                    if entry.stat().st_mtime < cutoff:
                        os.unlink(entry.path)

    @contextlib.contextmanager
    def lease(self, name: str, wait_s: float) -> Iterator[bool]:
        """Hold the host's lease on digest ``name`` for the block (True), or
        (False) after ``wait_s`` without it: a neighbour holds it that long."""
        os.makedirs(self.directory, exist_ok=True)
        fd = os.open(self._path(name, LEASE), os.O_RDWR | os.O_CREAT, 0o644)
        try:
            held = _take(fd, wait_s)
        except BaseException:
            os.close(fd)
            raise
        if not held:  # the taker closes the descriptor when it gets the lock, or got it late
            yield False
            return
        try:
            yield True
        finally:
            os.close(fd)  # releases the lock


def _take(fd: int, wait_s: float) -> bool:
    """Lock ``fd`` exclusively within ``wait_s``. On False the descriptor
    belongs to a thread that still waits for the lock and lets it go at
    once (the caller must not use or close it)."""
    if fcntl is None:  # pragma: no cover - not a POSIX system: no lease, every rank downloads
        return True
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        return True
    except BlockingIOError:
        pass
    got = threading.Event()
    state = {"gave_up": False}
    lock = threading.Lock()

    def take() -> None:
        fcntl.flock(fd, fcntl.LOCK_EX)  # in the kernel, no CPU, until the holder lets go
        with lock:
            if state["gave_up"]:
                os.close(fd)
                return
            got.set()

    threading.Thread(target=take, name="dynamo_dist host lease", daemon=True).start()
    if got.wait(max(wait_s, 0.0)):
        return True
    with lock:
        if got.is_set():
            return True
        state["gave_up"] = True
    return False
