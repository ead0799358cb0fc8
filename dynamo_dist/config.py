"""The switches a user can read and set: ``dynamo_dist.config.compile_once = False``,
or for a block, ``with dynamo_dist.config.patch(compile_once=False): ...``.

Each starts from an environment variable, so a launcher (torchrun, a job
script) can set it for every rank without touching the program.

- ``compile_once`` (``DYNAMO_DIST_COMPILE_ONCE``, default on): where a
  graph's compile-cache key is the same on every rank of the job (under
  ``compile_on_one_rank``), the first rank to miss it compiles and the others
  wait for its artifacts through the job's c10d store and load them. It acts
  only where keys are shared; elsewhere every rank compiles its own graphs,
  as without it. See docs/compile-once.md.
- ``compile_once_wait_s`` (``DYNAMO_DIST_COMPILE_ONCE_WAIT_S``, 1800): the
  longest a rank waits for another rank's compile before compiling itself.
- ``compile_once_stale_s`` (``DYNAMO_DIST_COMPILE_ONCE_STALE_S``, 30): a
  compiling rank beats three times in this span; a waiter that sees no beat
  for this long takes the compiling rank for gone and compiles itself.
- ``compile_once_host_dir`` (``DYNAMO_DIST_COMPILE_ONCE_HOST_DIR``, unset):
  where the ranks of a node (torchrun's ``LOCAL_WORLD_SIZE``) share their
  downloads, a directory per node under it; unset, the node's temporary
  folder. Without ``LOCAL_WORLD_SIZE`` the ranks sharing inductor's cache
  dir share their downloads there.
"""

from __future__ import annotations

import contextlib
import os
from typing import Any, Iterator

__all__ = ["compile_once", "compile_once_wait_s", "compile_once_stale_s", "compile_once_host_dir", "patch"]


def _flag(name: str, default: bool) -> bool:
    value = os.environ.get(name)
    if value is None or value == "":
        return default
    if value.lower() in ("1", "true", "on", "yes"):
        return True
    if value.lower() in ("0", "false", "off", "no"):
        return False
    raise ValueError(f"{name}={value!r}: expected 1 or 0 (true/false, on/off)")


def _seconds(name: str, default: float) -> float:
    value = os.environ.get(name)
    if value is None or value == "":
        return default
    try:
        seconds = float(value)
    except ValueError:
        raise ValueError(f"{name}={value!r}: expected a number of seconds") from None
    if seconds <= 0:
        raise ValueError(f"{name}={value!r}: expected a positive number of seconds")
    return seconds


compile_once: bool = _flag("DYNAMO_DIST_COMPILE_ONCE", True)
compile_once_wait_s: float = _seconds("DYNAMO_DIST_COMPILE_ONCE_WAIT_S", 1800.0)
compile_once_stale_s: float = _seconds("DYNAMO_DIST_COMPILE_ONCE_STALE_S", 30.0)
compile_once_host_dir: str | None = os.environ.get("DYNAMO_DIST_COMPILE_ONCE_HOST_DIR") or None

_TYPES = {"compile_once": bool, "compile_once_wait_s": (int, float), "compile_once_stale_s": (int, float),
          "compile_once_host_dir": (str, type(None))}
_TAKES = {bool: "a bool", (int, float): "seconds", (str, type(None)): "a directory (or None)"}


@contextlib.contextmanager
def patch(**values: Any) -> Iterator[None]:
    """Set switches for the block; the previous values after."""
    module = globals()
    for name, value in values.items():
        if name not in _TYPES:
            raise AttributeError(f"dynamo_dist.config has no switch {name!r}; the switches are {sorted(_TYPES)}")
        if not isinstance(value, _TYPES[name]) or isinstance(value, bool) != (_TYPES[name] is bool):
            raise TypeError(f"dynamo_dist.config.{name} takes {_TAKES[_TYPES[name]]}, got {value!r}")
    before = {name: module[name] for name in values}
    module.update(values)
    try:
        yield
    finally:
        module.update(before)
