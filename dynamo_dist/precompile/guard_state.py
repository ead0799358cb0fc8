"""What torch's guard pickler cannot save, saved by the plugin.

torch's precompile saves a frame's guards with the locals and globals they
were built on (``GuardsStatePickler``), and rebuilds the guards on those
values when a later process loads the frame. A value it cannot pickle makes
the whole frame unsaved (a package bypass: a restart traces it again). The
plugin saves the values of :data:`SAVED_FORMS` in a form of its own, tried
before torch's reducer, each loading as a value on which the rebuilt guards
check exactly what they checked where the frame was saved.
"""

from __future__ import annotations

from typing import Any, Callable

from . import function_ctx, groups

# (what it is, its reducer: the pickle reduction of a value, or None where it
# is not one): tried in order, before torch's own.
SAVED_FORMS: tuple[tuple[str, Callable[[Any, Any], Any]], ...] = (
    ("an autograd.Function's ctx", function_ctx.reduce),
    ("a guarded process group", groups.reduce),
)


def saved_by_the_plugin(original: Callable[..., Any]) -> Callable[..., Any]:
    """torch's guard pickler's ``reducer_override``, with :data:`SAVED_FORMS`
    tried first."""

    def reducer_override(self: Any, obj: Any) -> Any:
        for _, reduce in SAVED_FORMS:
            reduced = reduce(self, obj)
            if reduced is not None:
                return reduced
        return original(self, obj)

    reducer_override.__wrapped__ = original  # type: ignore[attr-defined]
    return reducer_override
