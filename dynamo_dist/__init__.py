"""dynamo_dist: TorchDynamo support for DeviceMesh, placements, process groups
and DTensor.

    import dynamo_dist
    dynamo_dist.install()          # or: with dynamo_dist.enabled(): ...
    torch.compile(fn)(x, mesh)     # mesh/placement/group queries fold
    dynamo_dist.uninstall()        # stock torch again
"""

from __future__ import annotations

import contextlib
from typing import Iterator

from . import _hooks
from .diagnostics.explain import explain

__version__ = "0.1.0"
__all__ = ["install", "uninstall", "enabled", "is_installed", "explain", "__version__"]


def install() -> None:
    """Make Dynamo track meshes, placements and process groups with
    dynamo_dist. Idempotent; resets Dynamo's caches when it changes state."""
    _hooks.apply()


def uninstall() -> None:
    """Restore stock torch exactly. Idempotent; resets Dynamo's caches."""
    _hooks.remove()


def is_installed() -> bool:
    return _hooks.is_active()


@contextlib.contextmanager
def enabled() -> Iterator[None]:
    """Install for the duration of the block; leaves the previous state after."""
    was_installed = is_installed()
    install()
    try:
        yield
    finally:
        if not was_installed:
            uninstall()
