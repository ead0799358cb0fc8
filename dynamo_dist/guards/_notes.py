"""Notes saying what each dynamo_dist guard is about, for diagnostics.

Dynamo reports a failed guard as code (``___check_obj_id(pg, 1403...)``);
``dynamo_dist.explain`` turns that into user terms ("`pg` is a different
process group (size 4 -> 2)") by comparing the values the guarded source had
in the old and in the new compile. Those values are recorded here.

Nothing is recorded (and nothing is installed) unless a listener is
registered, so normal compiles pay one list check per guard, at trace time.
While listening, a note is a guard whose build step only reads the value the
guarded source has in this compile (through Dynamo's own guard builder) and
adds no check: guard evaluation costs nothing more.
"""

from __future__ import annotations

from typing import Any, Callable

from .. import _compat as C

# listener(compile_id, source_name, tracked, value); tracked is one of TRACKED.
Listener = Callable[[str, str, str, Any], None]
TRACKED = ("mesh", "placement", "process_group", "world")
_listeners: list[Listener] = []


def add_listener(listener: Listener) -> None:
    _listeners.append(listener)


def remove_listener(listener: Listener) -> None:
    if listener in _listeners:
        _listeners.remove(listener)


def note(source: Any, tracked: str) -> None:
    """Record, at guard-build time, the value ``source`` has in this compile."""
    if _listeners:
        C.dynamo.guard_build_hook(source, f"DYNAMO_DIST_NOTE_{tracked.upper()}", _HOOKS[tracked])


def _make_hook(tracked: str) -> Callable[[str, Any], None]:
    def hook(source_name: str, value: Any) -> None:
        compile_id = C.dynamo.current_compile_id()
        for listener in list(_listeners):
            try:
                listener(compile_id, source_name, tracked, value)
            except Exception:  # diagnostics must never fail a compile
                pass

    return hook


_HOOKS = {tracked: _make_hook(tracked) for tracked in TRACKED}
