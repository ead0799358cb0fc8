"""Install a Python predicate as a guard on a source (used where no C++ guard
expresses the check)."""

from __future__ import annotations

import logging
from typing import Any, Callable

from .. import _compat as C

log = logging.getLogger("dynamo_dist.guards")


def install_predicate(source: Any, expect: Callable[[Any], Any], check_from: Callable[[Any], Callable[[Any], bool]],
                      describe: str) -> None:
    """``expect(value_at_compile_time)`` says what the value must be (picklable
    data: torch's precompile saves it), ``check_from(expected)`` returns the
    per-call predicate; both are module-level functions.

    ``describe`` is the human sentence shown when the guard fails (it becomes
    the guard's code part, which Dynamo prints as the recompile reason).
    """
    log.debug("guard %s", describe)
    C.guard_predicate(source, expect, check_from, describe)


def install_identity_guard(source: Any, value: Any = None) -> None:
    """The object at ``source`` is the same object (C++ ``ID_MATCH``; saved
    by torch's precompile by name where it is a class or function). ``value``
    (the object now) is not needed: its identity is the whole guard."""
    C.guard_identity(source)
