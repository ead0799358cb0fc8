"""Install a Python predicate as a guard on a source (used where no C++ guard
expresses the check)."""

from __future__ import annotations

from typing import Any, Callable

import logging

from .. import _compat as C

log = logging.getLogger("dynamo_dist.guards")


def install_predicate(source: Any, make_check: Callable[[Any], Callable[[Any], bool]], describe: str) -> None:
    """``make_check(value_at_compile_time)`` returns the per-call predicate.

    ``describe`` is the human sentence shown when the guard fails (it becomes
    the guard's code part, which Dynamo prints as the recompile reason).
    """

    def DYNAMO_DIST_MATCH(builder: Any, guard: Any) -> None:
        check = make_check(builder.get(guard))
        from torch._dynamo.guards import get_verbose_code_parts

        builder.get_guard_manager(guard).add_lambda_guard(
            check, get_verbose_code_parts(describe, guard), guard.user_stack
        )

    log.debug("guard %s", describe)
    C.install_guard(source.make_guard(DYNAMO_DIST_MATCH))
