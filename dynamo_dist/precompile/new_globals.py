"""New globals of a traced frame, named apart from a loaded frame's.

2.11-2.14 name a new global of a frame's output ``prefix`` plus a counter of
this process: a frame loaded from Dynamo's cache has installed the saving
process's names in the module's globals, so when its guards fail and the
frame is traced again, the first new global collides with a loaded one and
the trace crashes (stock too). 2.15 picks a name unbound in the globals;
this backports that rule (``C.dynamo.INSTALL_GLOBAL_POINT``, None on 2.15).
"""

from __future__ import annotations

from typing import Any, Callable

from .. import _compat as C


def install_global_unbound(original: Callable[..., Any]) -> Callable[..., Any]:
    """``OutputGraph.install_global`` with a name no global of the frame's
    module holds yet (2.15's own rule)."""

    def install_global(self: Any, prefix: str, value: Any) -> str:
        name = C.dynamo.new_global_name(prefix)
        while name in self.global_scope:
            name = C.dynamo.new_global_name(prefix)
        self.install_global_unsafe(name, value)
        return name

    return install_global
