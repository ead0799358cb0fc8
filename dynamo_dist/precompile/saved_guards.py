"""A frame's guards as torch's precompile saves them.

torch saves each guard of a packaged frame with the values it was built on
(``CheckFunctionManager.serialize_guards``) and rebuilds it when a later
process loads the frame. A plugin guard is saved in its saved form (what it
checks as picklable data, rebuilt as the same check: the table above
``GUARD_SERIALIZATION_POINT`` in ``_compat/dynamo.py``), torch's guards on a
config override or a value read through a module are saved as the values
they stand for, and every packaged frame carries the plugin's saved-by guard
(its version, the redistribute planner's switches, the folded rank). A frame
with a guard that has no saved form is not packaged (a logged bypass).
"""

from __future__ import annotations

from typing import Any, Callable

from .. import _compat as C


def save_plugin_guards(original: Callable[..., Any]) -> Callable[..., Any]:
    """``CheckFunctionManager.serialize_guards`` that saves each plugin
    guard in its saved form, and declines the package of a frame with a
    plugin guard that has none."""

    def serialize_guards(self: Any, builder: Any, sorted_guards: Any, output_graph: Any) -> Any:
        kept, unsaved, overrides = C.dynamo.saved_guards(builder, sorted_guards, output_graph)
        if not unsaved and not overrides:
            # The guards' values are pickled as plain data, never through
            # the caller's torch-function modes (spmd_types' checker in its
            # global mode type-checks a tensor's ``__reduce_ex__`` and refuses it).
            with C.dynamo.torch_functions_off():
                return original(self, builder, kept, output_graph)
        C.dynamo.decline_package(output_graph, unsaved, overrides)
        return b""  # never stored: the entry is bypassed

    return serialize_guards
