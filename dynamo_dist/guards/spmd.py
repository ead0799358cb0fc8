"""Guards for what spmd_types' code read while a frame was traced.

What the checker and spmd_types' functions decide at trace time depends on
two things only, each guarded where it is first read (a frame that runs none
of it has neither guard):

- the thread's spmd_types state when the frame is called: whether a checker
  is current and its switches (strict, local, paused), on 0.3.1 whether a
  ``register_no_typecheck`` function is among the callers, and the current
  mesh (its axes, local axes, names and the process group of each axis).
  The mode stack's types are torch's own guard; a checker holds nothing but
  its switches, so any checker with the same switches answers the same;
- each input tensor's types whose types were read (its ``_local_type`` and
  ``_partition_spec``: absent, or equal to what they were). With the
  checker off, and no spmd_types function asking for an input's type,
  nothing reads them: the same frame serves inputs of any type.

New tensors of the same types under a new checker with the same switches
and the same current mesh run the compiled code; an input whose local type
differs, other switches (local or global mode, the checker on or off) or a
current mesh over other groups trace the frame again.

Both are saved by torch's precompile as plain data (axes as their layouts,
types by value, groups by name, ranks and backend) and rebuilt against the
loading process's objects: a restart under another mesh, over other groups,
or with other input types traces the frame again.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable

from .. import _compat as C

S = C.spmd
_ABSENT = ("absent",)


# -- the thread's state ----------------------------------------------------------

def _checker_data(mode: Any) -> tuple | None:
    return None if mode is None else S.switches(mode)


def _entry_data(entry: Any) -> tuple | None:
    """A mesh entry as plain data (its groups by name, ranks and backend)."""
    if entry is None:
        return None
    axes, local_axes, names, all_names, pgs = S.entry_fields(entry)
    return (
        tuple(sorted(S.axis_data(a) for a in axes)),
        tuple(sorted(S.axis_data(a) for a in local_axes)),
        tuple(sorted((n, S.axis_data(a)) for n, a in names.items())),
        tuple(sorted((n, S.axis_data(a)) for n, a in all_names.items())),
        tuple(sorted((S.axis_data(a), C.distributed.group_identity(pg)) for a, pg in pgs.items())),
    )


@dataclass(frozen=True)
class StateExpected:
    """What the state guard expects, as picklable data; ``live`` (not
    pickled) is the compiling process's top mesh entry, the shortcut."""

    checker: tuple | None
    callers_paused: bool
    mesh: tuple | None
    live: Any = field(default=None, compare=False, repr=False)

    def __reduce__(self) -> tuple:
        return StateExpected, (self.checker, self.callers_paused, self.mesh)


def state_expected(module: Any) -> StateExpected:
    mode, top = S.mode_and_top_entry()
    return StateExpected(_checker_data(mode), S.callers_pause_checking(), _entry_data(top), live=top)


def state_check(expected: StateExpected) -> Callable[[Any], bool]:
    """The per-call test of the state guard: the checker's switches, then
    the top mesh entry: the compile-time entry or the one that matched last
    (``set_current_mesh`` makes an entry per ``with``), else by its data."""
    checker, callers, mesh = expected.checker, expected.callers_paused, expected.mesh
    matched = [expected.live, expected.live is not None]

    def check(module: Any) -> bool:
        mode, top = S.mode_and_top_entry()
        if _checker_data(mode) != checker or S.callers_pause_checking() != callers:
            return False
        if top is matched[0] and matched[1]:
            return True
        if (top is None) != (mesh is None):
            return False
        if top is not None and _entry_data(top) != mesh:
            return False
        matched[:] = [top, True]
        return True

    return check


def describe_state(state: Any) -> str:
    mode, top = S.mode_and_top_entry()
    checker = "no spmd_types checker" if mode is None else (
        "the spmd_types checker (strict={}, local={}, paused={})".format(*S.switches(mode)))
    mesh = "no current mesh" if top is None else f"the current mesh with axes {sorted(map(repr, top.axes))}"
    return f"dynamo_dist: {checker} and {mesh}, as when traced"


def install_state_guard(tx: Any) -> None:
    """The frame's spmd_types state at call time is the traced one."""
    source = C.dynamo.module_source(tx, "spmd_types._state")
    C.dynamo.guard_predicate(source, state_expected, state_check, describe_state(None))


# -- a tensor's types ------------------------------------------------------------

@dataclass(frozen=True)
class TypesExpected:
    """An input's (local type, PartitionSpec) as plain data (``_ABSENT``:
    no attribute); ``live`` (not pickled): the real values, compared directly."""

    local_type: Any
    partition_spec: Any
    live: Any = field(default=None, compare=False, repr=False)

    def __reduce__(self) -> tuple:
        return TypesExpected, (self.local_type, self.partition_spec)


def types_expected(tensor: Any) -> TypesExpected:
    local = tensor.__dict__.get(S.LOCAL_TYPE_ATTR, _ABSENT)
    spec = tensor.__dict__.get(S.PARTITION_SPEC_ATTR, _ABSENT)
    return TypesExpected(_ABSENT if local is _ABSENT else S.local_type_data(local),
                         _ABSENT if spec is _ABSENT else S.partition_spec_data(spec),
                         live=(_ABSENT if local is _ABSENT else dict(local), spec))


def types_check(expected: TypesExpected) -> Callable[[Any], bool]:
    if expected.live is not None:
        local, spec = expected.live
    else:
        local = _ABSENT if expected.local_type == _ABSENT else S.local_type_from_data(expected.local_type)
        spec = _ABSENT if expected.partition_spec == _ABSENT else S.partition_spec_from_data(expected.partition_spec)
    local_name, spec_name = S.LOCAL_TYPE_ATTR, S.PARTITION_SPEC_ATTR

    def check(t: Any) -> bool:
        d = getattr(t, "__dict__", None)
        if d is None:
            return local is _ABSENT and spec is _ABSENT
        return d.get(local_name, _ABSENT) == local and d.get(spec_name, _ABSENT) == spec

    return check


def install_types_guard(tx: Any, source: Any, tensor: Any) -> None:
    """The input's types are the traced ones (once per input and frame)."""
    seen = C.dynamo.frame_state(tx, "spmd_types_guarded")
    if source.name in seen:
        return
    seen[source.name] = True
    local = tensor.__dict__.get(S.LOCAL_TYPE_ATTR)
    text = "no SPMD type" if local is None else f"SPMD type {local!r}"
    C.dynamo.guard_predicate(source, types_expected, types_check,
                             f"dynamo_dist: `{source.name}` has {text}, as when traced")
