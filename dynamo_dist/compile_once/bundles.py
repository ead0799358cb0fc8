"""The framing of one graph's compiled artifacts on their way between ranks.

A bundle is ``MAGIC``, a header line ``<cache key> <length> <blake2b digest>``
and a body of that length and digest: the cache artifacts
(``torch.compiler.load_cache_artifacts``' format) and the compiled kernel
binaries (``kernels.py``), each path with its bytes. ``unpack`` refuses a
bundle that is truncated, corrupt or made for another key, so bytes are never
loaded where their key differs.
"""

from __future__ import annotations

import hashlib
import struct

MAGIC = b"dynamo_dist compile-once bundle 2\n"


class BundleError(ValueError):
    """A bundle that must not be loaded; the message says why."""


def _digest(data: bytes) -> str:
    return hashlib.blake2b(data, digest_size=32).hexdigest()


def pack(cache_key: str, artifacts: bytes, files: dict[str, bytes] | None = None) -> bytes:
    parts = [struct.pack("<Q", len(artifacts)), artifacts, struct.pack("<I", len(files or {}))]
    for path, data in sorted((files or {}).items()):
        name = path.encode()
        parts += [struct.pack("<H", len(name)), name, struct.pack("<Q", len(data)), data]
    body = b"".join(parts)
    return MAGIC + f"{cache_key} {len(body)} {_digest(body)}\n".encode() + body


def unpack(cache_key: str, bundle: bytes) -> tuple[bytes, dict[str, bytes]]:
    """The artifacts and the kernel files of a bundle made by ``pack(cache_key, ...)``."""
    if not bundle.startswith(MAGIC):
        raise BundleError(f"not a compile-once bundle ({len(bundle)} bytes, no header)")
    header, sep, body = bundle[len(MAGIC):].partition(b"\n")
    if not sep:
        raise BundleError("it ends inside its header (truncated)")
    try:
        key, length, digest = header.decode().split(" ")
        length_n = int(length)
    except ValueError:
        raise BundleError("its header is corrupt") from None
    if key != cache_key:
        raise BundleError(f"it holds the artifacts of key {key}, not {cache_key}")
    if len(body) != length_n:
        raise BundleError(f"it holds {len(body)} of its {length_n} bytes (truncated)")
    if _digest(body) != digest:
        raise BundleError("its bytes do not match their digest (corrupt)")
    return _read_body(body)


def _read_body(body: bytes) -> tuple[bytes, dict[str, bytes]]:
    at = 0

    def take(n: int) -> bytes:
        nonlocal at
        if at + n > len(body):
            raise BundleError("its body is shorter than its parts say (corrupt)")
        at += n
        return body[at - n:at]

    artifacts = take(struct.unpack("<Q", take(8))[0])
    files = {}
    for _ in range(struct.unpack("<I", take(4))[0]):
        path = take(struct.unpack("<H", take(2))[0]).decode()
        files[path] = take(struct.unpack("<Q", take(8))[0])
    return artifacts, files
