"""The compiled C++ kernels of a compile, so a rank that loads a graph does
not compile them again.

An inductor FX-graph entry holds its kernels' C++ source, not the binaries:
a process loading the entry into a fresh cache dir compiles every kernel
before the first call (on CPU most of a compile's time). Inductor keeps each
binary at a path named by the digest of its source and of the compile command
(the vector ISA and flags this host picked): ``<cache dir>/<2 chars>/<digest>*.so``.
So the binaries a compile left are sent with its artifacts and written at the
same paths on the receiving rank. This is sound by construction: a rank whose
host or toolchain would build another binary computes another digest, never
finds the one sent, and compiles its own; and inductor still loads and
checks every binary (the vector-ISA probes run theirs) as it does its own.
"""

from __future__ import annotations

import os
import tempfile

from .. import _compat as C

SUFFIX = ".so"


def _kernel_dirs(root: str) -> list[str]:
    """The digest-prefix folders of the cache dir (two characters each)."""
    try:
        return [d for d in os.listdir(root) if len(d) == 2 and os.path.isdir(os.path.join(root, d))]
    except OSError:
        return []


def written_since(start: float) -> dict[str, bytes]:
    """Kernel binaries written into the cache dir since ``start`` (``time.time()``),
    by path relative to it."""
    root = C.caches.inductor_cache_dir()
    found = {}
    for folder in _kernel_dirs(root):
        with os.scandir(os.path.join(root, folder)) as entries:
            for entry in entries:
                if entry.name.endswith(SUFFIX) and entry.is_file() and entry.stat().st_mtime >= start:
                    with open(entry.path, "rb") as f:
                        found[f"{folder}/{entry.name}"] = f.read()
    return found


def _safe(path: str) -> bool:
    folder, _, name = path.partition("/")
    return len(folder) == 2 and "/" not in name and name.endswith(SUFFIX) and ".." not in path and \
        not os.path.isabs(path) and "\\" not in path


def install(files: dict[str, bytes]) -> int:
    """Write kernel binaries at their paths in this process's cache dir
    (never over an existing one; each appears whole or not at all). The
    number written."""
    root = C.caches.inductor_cache_dir()
    written = 0
    for path, data in files.items():
        if not _safe(path):
            raise ValueError(f"a kernel path outside the cache's kernel folders: {path!r}")
        target = os.path.join(root, path)
        if os.path.exists(target):
            continue
        os.makedirs(os.path.dirname(target), exist_ok=True)
        fd, temporary = tempfile.mkstemp(dir=os.path.dirname(target), suffix=".part")
        with os.fdopen(fd, "wb") as f:
            f.write(data)
        os.chmod(temporary, 0o755)
        os.replace(temporary, target)
        written += 1
    return written
