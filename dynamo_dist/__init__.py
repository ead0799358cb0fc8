"""dynamo_dist: TorchDynamo support for DeviceMesh, placements, process groups
and DTensor.

    import dynamo_dist
    dynamo_dist.install()          # or: with dynamo_dist.enabled(): ...
    torch.compile(fn)(x, mesh)     # mesh/placement/group queries fold
    dynamo_dist.uninstall()        # stock torch again
"""

from __future__ import annotations

import contextlib
import sys
from typing import TYPE_CHECKING, Any, Iterator

if TYPE_CHECKING:
    from .diagnostics.explain import explain

from . import _supported, config  # the supported releases, the switches (light: no torch)
from ._version import __version__
__all__ = ["install", "uninstall", "enabled", "is_installed", "explain", "config", "__version__"]


def _patching() -> Any:
    """The module that patches torch. Loaded on first use, not with the
    package, because it imports torch's internals: ``python -m dynamo_dist
    --help`` and ``import dynamo_dist`` stay instant, and a torch whose
    internals differ is refused with one clear error."""
    try:
        from . import _hooks  # heavy (torch's internals): see the docstring
    except (ImportError, AttributeError) as e:  # a torch build laid out otherwise
        first = (str(e).splitlines() or [""])[0]
        raise _supported.unsupported(f" (its internals differ where dynamo_dist hooks them: "
                                     f"{type(e).__name__}: {first})") from e
    return _hooks


def _loaded_patching() -> Any:
    """The patching module if it was ever loaded, else None (then nothing was
    ever installed)."""
    return sys.modules.get(f"{__name__}._hooks")


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
    supported releases, decided from its version string before any of
    torch's internals is loaded. All or nothing: where a change to torch
    fails, every change made before it is undone and ``RuntimeError`` says
    which failed."""
    _supported.check_release()
    _patching().apply()


def uninstall() -> None:
    """Restore stock torch exactly. Idempotent; resets Dynamo's caches when
    it changes state (where nothing was ever installed, torch is not touched)."""
    hooks = _loaded_patching()
    if hooks is not None:
        hooks.remove()


def is_installed() -> bool:
    """Whether ``install()`` is in effect."""
    hooks = _loaded_patching()
    return hooks is not None and hooks.is_active()


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
