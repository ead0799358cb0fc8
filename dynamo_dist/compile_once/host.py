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
the digest of its bytes (only bytes of that digest are spooled, and whole:
written aside, then renamed), so what a spool holds is what was sent, from
this job or an earlier one; spools and lease files older than the longest
wait are removed when a new spool is written.

Faults: a rank that dies holding the lease releases it with its process
(the lock is the kernel's ``flock``), and the next neighbour downloads. A
waiting neighbour blocks in the kernel: it costs no CPU and wakes when the
lease is released, which the holder's download bounds (it waits at most
``stale_s`` for its turn at the store, and the store's or the fleet cache's
own timeouts bound the transfer).
"""

from __future__ import annotations

import contextlib
import getpass
import hashlib
import os
import tempfile
import time
from typing import Callable

from .. import _compat as C
from .. import config

try:
    import fcntl
except ImportError:  # pragma: no cover - not a POSIX system
    fcntl = None  # type: ignore[assignment]

SPOOL, LEASE = ".bundle", ".lease"
VIA_HOST = "host"  # a payload read from the host's spool


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
        """The spool of digest ``name``, or None (none yet). Only bytes of
        that digest are spooled, whole (``write``); a payload carries its own
        digest too (``bundles``), checked where it is loaded."""
        try:
            with open(self._path(name, SPOOL), "rb") as f:
                return f.read()
        except OSError:
            return None

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

    def fetch(self, name: str, download: Callable[[], tuple[bytes, str]]) -> tuple[bytes, str]:
        """The payload of digest ``name`` and where it came from: the spool
        (``VIA_HOST``), or ``download()``'s answer where this rank is the
        host's first to need it (the payload is then spooled). The first
        takes the lease exclusively while it downloads; the others wait for
        it shared, in the kernel, so all of them wake when it lets go and
        read the spool at once. The wait is bounded by the download (itself
        bounded: ``store.py``); a neighbour that dies holding the lease lets
        go with its process, and the next rank downloads."""
        while True:
            spooled = self.read(name)
            if spooled is not None:
                return spooled, VIA_HOST
            os.makedirs(self.directory, exist_ok=True)
            fd = os.open(self._path(name, LEASE), os.O_RDWR | os.O_CREAT, 0o644)
            try:
                if _lock(fd, exclusive=True, wait=False):
                    spooled = self.read(name)  # spooled while this rank opened the lease
                    if spooled is not None:
                        return spooled, VIA_HOST
                    payload, via = download()
                    if digest(payload) == name:
                        with contextlib.suppress(OSError):  # a full disk: the neighbours download too
                            self.write(name, payload)
                    return payload, via
                _lock(fd, exclusive=False, wait=True)  # until the downloading neighbour lets go
            finally:
                os.close(fd)  # lets go of the lease


def _lock(fd: int, exclusive: bool, wait: bool) -> bool:
    """Lock ``fd`` (exclusively, or shared), waiting for it or not."""
    if fcntl is None:  # pragma: no cover - not a POSIX system: no lease, every rank downloads
        return True
    mode = fcntl.LOCK_EX if exclusive else fcntl.LOCK_SH
    try:
        fcntl.flock(fd, mode if wait else mode | fcntl.LOCK_NB)
        return True
    except BlockingIOError:
        return False
