"""The framing of one graph's compiled artifacts on their way between ranks.

A bundle is ``MAGIC``, a header line ``<cache key> <length> <blake2b digest>``
and the artifact bytes (``torch.compiler.load_cache_artifacts``' format).
``unpack`` refuses a bundle that is truncated, corrupt or made for another
key, so bytes are never loaded where their key differs.
"""

from __future__ import annotations

import hashlib

MAGIC = b"dynamo_dist compile-once bundle 1\n"


class BundleError(ValueError):
    """A bundle that must not be loaded; the message says why."""


def _digest(data: bytes) -> str:
    return hashlib.blake2b(data, digest_size=32).hexdigest()


def pack(cache_key: str, artifacts: bytes) -> bytes:
    header = f"{cache_key} {len(artifacts)} {_digest(artifacts)}\n".encode()
    return MAGIC + header + artifacts


def unpack(cache_key: str, bundle: bytes) -> bytes:
    """The artifact bytes of a bundle made by ``pack(cache_key, ...)``."""
    if not bundle.startswith(MAGIC):
        raise BundleError(f"not a compile-once bundle ({len(bundle)} bytes, no header)")
    header, sep, artifacts = bundle[len(MAGIC):].partition(b"\n")
    if not sep:
        raise BundleError("it ends inside its header (truncated)")
    try:
        key, length, digest = header.decode().split(" ")
        length_n = int(length)
    except ValueError:
        raise BundleError("its header is corrupt") from None
    if key != cache_key:
        raise BundleError(f"it holds the artifacts of key {key}, not {cache_key}")
    if len(artifacts) != length_n:
        raise BundleError(f"it holds {len(artifacts)} of its {length_n} bytes (truncated)")
    if _digest(artifacts) != digest:
        raise BundleError("its bytes do not match their digest (corrupt)")
    return artifacts
