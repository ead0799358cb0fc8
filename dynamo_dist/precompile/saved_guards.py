"""A frame's guards as torch's precompile saves them.

torch saves each guard of a packaged frame with the values it was built on
(``CheckFunctionManager.serialize_guards``: ``C.dynamo.GUARD_SERIALIZATION_POINT``)
and rebuilds it when a later process loads the frame. Here a plugin guard
is saved in its saved form (``plugin_guards``), torch's guards on a config
override or a value read through a module are saved as the values they
stand for (``torch_guards``), and every packaged frame carries the plugin's
saved-by guard (its version, the redistribute planner's switches, the folded
rank). A frame with a guard that has no saved form is not packaged: a logged
package bypass (the frame is traced again after a restart; its FX graph and
AOTAutograd entries still hit), ``PackageError`` under ``strict_precompile``
or for ``aot_compile``. The bypass is made here rather than by raising
``PackageError`` for torch to turn into one: 2.11-2.14 then fail on the
missing guard state.
"""

from __future__ import annotations

from typing import Any, Callable

from .. import _compat as C
from . import plugin_guards, torch_guards

PLUGIN_GUARDS_NOT_SAVED = (
    "dynamo_dist: this frame's guards on {names} (the identity of an object that is not a registered process "
    "group, class or function) cannot be saved by torch's precompile, so the frame is not packaged: with "
    "TORCH_CACHING_PRECOMPILE=1 it is traced again after a restart (its FX graph and AOTAutograd entries still "
    "load from the compile caches)"
)
AOT_COMPILE_REFUSED = (
    "dynamo_dist: aot_compile cannot save this function: its guards on {names} (the identity of an object that "
    "is not a registered process group, class or function) cannot be serialized. Pass that object as an "
    "argument whose type is tracked (a DeviceMesh, ProcessGroup, placement or DTensor), or compile with "
    "torch.compile instead (a restart loads its FX graph and AOTAutograd entries from the compile caches)"
)
CONFIG_OVERRIDE_NOT_SAVED = (
    "dynamo_dist: torch's guards on {names} read a config entry's override that has no saved form, "
    "so the frame is not packaged: it is traced again after a restart (its FX graph and AOTAutograd "
    "entries still load from the compile caches)"
)


def save_plugin_guards(original: Callable[..., Any]) -> Callable[..., Any]:
    """``CheckFunctionManager.serialize_guards`` that saves each guard in its
    saved form (``saved_guards``), and declines the package of a frame with
    a guard that has none."""

    def serialize_guards(self: Any, builder: Any, sorted_guards: Any, output_graph: Any) -> Any:
        kept, unsaved, overrides = saved_guards(builder, sorted_guards, output_graph)
        if not unsaved and not overrides:
            # The guards' values are pickled as plain data, never through
            # the caller's torch-function modes (spmd_types' checker in its
            # global mode type-checks a tensor's ``__reduce_ex__`` and refuses it).
            with C.dynamo.torch_functions_off():
                return original(self, builder, kept, output_graph)
        decline(output_graph, unsaved, overrides)
        return b""  # never stored: the entry is bypassed

    return serialize_guards


def saved_guards(builder: Any, sorted_guards: Any, output_graph: Any) -> tuple[list, list[str], list[str]]:
    """The guards torch's precompile saves for a frame in place of
    ``sorted_guards``: each plugin guard in its saved form, torch's guards on
    a config override or a module read re-saved, the rest as they are, and
    (where every guard has a saved form) the plugin's own saved-by guard.
    Returns ``(kept, unsaved, overrides)``: the names of the plugin guards
    with no saved form and of the config overrides that have none."""
    kept, unsaved, overrides, groups, torch_guard_names = [], [], [], {}, []
    for guard in sorted_guards:
        if not plugin_guards.is_plugin_guard(guard):
            torch_guard_names.append(guard.name)
            if (key := C.dynamo.config_override_key(guard)) is not None:
                saved = torch_guards.saved_override(builder, guard, key)
                if saved is None:
                    overrides.append(guard.name)
                guard = saved or guard
            elif (builder_name := torch_guards.module_read(guard, output_graph)) is not None:
                guard = torch_guards.saved_module_read(builder, guard, builder_name) or guard
            kept.append(guard)
            continue
        try:
            saved = plugin_guards.saved(builder, guard, groups)
        except Exception:
            saved = None
        if saved is None:
            unsaved.append(guard.name)
        elif saved is not plugin_guards.DROP:
            kept.append(saved)
    if not unsaved and not overrides:
        _release_groups(builder, groups, torch_guard_names)
        kept.append(plugin_guards.saved_by_guard())
    return kept, unsaved, overrides


def _release_groups(builder: Any, groups: dict[str, Any], others: list[str]) -> None:
    """Let torch pickle the groups only plugin guards read as its placeholder:
    it refuses a ProcessGroup that a guard reads (its own guards could not
    be rebuilt on one), and the plugin's saved guards do not read it on
    load. A group a torch guard (named in ``others``) reads too, on it or
    below it, stays refused."""
    for name, group in groups.items():
        if not any(other == name or other.startswith((name + ".", name + "[")) for other in others):
            C.dynamo.release_guarded_value(builder, group)


def decline(output_graph: Any, unsaved: list[str], overrides: list[str]) -> None:
    """The frame is not packaged, for the guards ``saved_guards`` could not
    save: a logged package bypass, or ``PackageError`` for ``aot_compile``
    (there is no package to bypass) and under ``strict_precompile``."""
    reason = (PLUGIN_GUARDS_NOT_SAVED.format(names=_names(unsaved)) if unsaved
              else CONFIG_OVERRIDE_NOT_SAVED.format(names=_names(overrides)))
    refused = AOT_COMPILE_REFUSED.format(names=_names(unsaved)) if unsaved else reason
    C.dynamo.decline_package(output_graph, reason, refused)


def _names(names: list[str]) -> str:
    ours = sorted(set(names))
    return ", ".join(ours[:3]) + (f" and {len(ours) - 3} more" if len(ours) > 3 else "")
