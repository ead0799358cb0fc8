"""Which torch releases dynamo_dist supports, decided from torch's public
version string alone.

``install()`` asks here first, before it loads anything that reaches into
torch's private modules (``_compat``, ``_hooks``): a torch of another
release may lay its internals out differently, and the answer must be one
clear ``RuntimeError``, not whatever import fails first. ``_compat``
re-exports these names; its ``check_supported`` adds the hook points.
"""

from __future__ import annotations

from typing import Any

# Supported torch releases: [first, end) as (major, minor).
SUPPORTED_RANGE = ((2, 11), (2, 16))
SUPPORTED_TEXT = ">=2.11,<2.16"


def _torch() -> Any:
    import torch  # heavy: loaded when asked about, so that `import dynamo_dist` stays instant

    return torch


def torch_version() -> str:
    """The running torch's version, without the local build tag."""
    return str(_torch().__version__).split("+")[0]


def _release(version: str) -> tuple[int, int] | None:
    try:
        major, minor = version.split(".")[:2]
        return int(major), int(minor)
    except ValueError:
        return None


def version_supported(version: str | None = None) -> bool:
    release = _release(version if version is not None else torch_version())
    first, end = SUPPORTED_RANGE
    return release is not None and first <= release < end


def unsupported(why: str = "") -> RuntimeError:
    """The error ``install()`` raises on a torch it cannot hook (``why``: what
    is missing, if the release itself is in range)."""
    return RuntimeError(
        f"dynamo_dist supports torch {SUPPORTED_TEXT} (2.11.x to 2.15.x), found torch {_torch().__version__}{why}. "
        "Install a supported torch, or leave dynamo_dist uninstalled on this torch."
    )


def check_release() -> None:
    """Raise ``unsupported()`` on a torch outside the supported releases."""
    if not version_supported():
        raise unsupported()
