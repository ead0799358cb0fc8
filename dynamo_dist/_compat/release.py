"""Which torch this is, and whether ``install()`` accepts it: the supported
range (``dynamo_dist._supported``, readable without torch) and the hook
points this release must have (``slots.missing_slots``)."""

from __future__ import annotations

from .._supported import SUPPORTED_RANGE, SUPPORTED_TEXT, torch_version, unsupported, version_supported  # noqa: F401
from .slots import missing_slots

TORCH_VERSION = torch_version()


def check_supported() -> None:
    """dynamo_dist hooks Dynamo internals that change between releases:
    refuse (before anything is patched) a torch outside the supported range,
    or one whose hook points moved."""
    missing = missing_slots() if version_supported() else []
    if not version_supported() or missing:
        raise unsupported(f" (its Dynamo lacks {', '.join(missing)})" if missing else "")
