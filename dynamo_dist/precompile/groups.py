"""A process group a saved frame's guards read.

Under ``compile_on_one_rank`` torch passes a process group to the functional
collectives as an object, so a frame that holds one in a local (torchtitan's
vocab-parallel loss, resumed inside its ``autograd.Function`` after the
rank-dependent branch: ``tp_group``) guards it with torch's
``FAKE_SCRIPT_TYPE_MATCH`` (its type) besides the plugin's group guard (its
identity, saved in the plugin's form). torch's guard pickler refuses a
guarded group ("a guard reads a ProcessGroup, which cannot be serialized"):
the frame is not saved, and a restart traces it again.

Here a guarded group is saved as its identity (its name, global ranks and
backend: ``_compat.distributed.group_identity``) and loads as the loading
process's group of that identity, on which torch rebuilds its guards: its
type check passes on the live group as it did where the frame was saved,
and the plugin's guard checks the group's identity. Where the loading
process has no group of that identity (another rank's group, groups made in
another order), it loads as a value no group guard passes, so the frame is
traced again.
"""

from __future__ import annotations

from typing import Any

from .. import _compat as C


class NoGroupHere:
    """Stands for a saved group the loading process does not have: torch's
    type guard on it fails on any live group."""

    def __init__(self, identity: tuple) -> None:
        self.identity = identity

    def __repr__(self) -> str:
        return f"NoGroupHere({self.identity!r})"


def reduce(pickler: Any, obj: Any) -> Any:
    """A guarded process group as :func:`group_here` of its identity;
    otherwise None (torch's pickler takes it)."""
    if not isinstance(obj, C.distributed.ProcessGroup) or id(obj) not in C.dynamo.guarded_values(pickler):
        return None
    identity = C.distributed.group_identity(obj)
    return None if identity is None else (group_here, (identity,))


def group_here(identity: tuple) -> Any:
    """The loading process's group of that identity, or a :class:`NoGroupHere`
    (loading a frame saved by torch's precompile; pickled by this qualified name)."""
    group = C.distributed.live_group(identity)
    return NoGroupHere(identity) if group is None else group
