"""dynamo_dist: TorchDynamo support for DeviceMesh, placements, process groups
and DTensor.

    import dynamo_dist
    dynamo_dist.install()          # or: with dynamo_dist.enabled(): ...
    torch.compile(fn)(x, mesh)     # mesh/placement/group queries fold
    dynamo_dist.uninstall()        # stock torch again
"""

from __future__ import annotations

import contextlib
from typing import TYPE_CHECKING, Any, Iterator

if TYPE_CHECKING:
    from .diagnostics.explain import explain

from . import config  # the switches (light: no torch)
from ._version import __version__
__all__ = ["install", "uninstall", "enabled", "is_installed", "explain", "config", "__version__"]


def _patching() -> Any:
    """The module that patches torch. Loaded on first use, not with the
    package, because it imports torch: ``python -m dynamo_dist --help`` and
    ``import dynamo_dist`` stay instant."""
    from . import _hooks  # heavy (torch): see the docstring

    return _hooks


def __getattr__(name: str) -> Any:
    # ``dynamo_dist.explain`` is loaded on first use too (it imports torch).
    if name == "explain":
        from .diagnostics.explain import explain  # heavy (torch)

        globals()["explain"] = explain
        return explain
    raise AttributeError(f"module 'dynamo_dist' has no attribute {name!r}")


def install() -> None:
    """Make Dynamo track meshes, placements and process groups with
    dynamo_dist. Idempotent; resets Dynamo's caches when it changes state.

    Raises ``RuntimeError`` (and patches nothing) on a torch outside the
    supported releases. All or nothing: where a change to torch fails, every
    change made before it is undone and ``RuntimeError`` says which failed."""
    _patching().apply()


def uninstall() -> None:
    """Restore stock torch exactly. Idempotent; resets Dynamo's caches."""
    _patching().remove()


def is_installed() -> bool:
    """Whether ``install()`` is in effect."""
    return _patching().is_active()


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
