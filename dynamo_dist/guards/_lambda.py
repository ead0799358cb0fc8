"""Install a Python predicate as a guard on a source (used where no C++ guard
expresses the check)."""

from __future__ import annotations

import logging
from typing import Any, Callable

from .. import _compat as C

log = logging.getLogger("dynamo_dist.guards")


def install_predicate(source: Any, make_check: Callable[[Any], Callable[[Any], bool]], describe: str) -> None:
    """``make_check(value_at_compile_time)`` returns the per-call predicate.

    ``describe`` is the human sentence shown when the guard fails (it becomes
    the guard's code part, which Dynamo prints as the recompile reason).
    """
    log.debug("guard %s", describe)
    C.guard_predicate(source, make_check, describe)


def install_identity_guard(source: Any) -> None:
    """The object at ``source`` is the same object (C++ ``ID_MATCH``)."""
    C.guard_identity(source)
