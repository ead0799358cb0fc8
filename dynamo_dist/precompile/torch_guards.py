"""torch's own guards that torch's precompile saves in a form it cannot
rebuild, saved as the values they stand for.

Two kinds, each rebuilt through ``plugin_guards.DYNAMO_DIST_SAVED`` from a
check named here (pickled by qualified name):

A config entry's override. torch saves a guard on one read in a traced
frame (``...config._config['compile_on_one_rank'].user_override.get()``, a
``CONSTANT_MATCH``) and cannot rebuild it: the override comes back as
another object whose ``get()`` answers a bare ``object()`` (the unset
sentinel, pickled by value), and the rebuilt guard raises ``AssertionError:
Unexpected type <class 'object'>`` inside ``torch.compile`` of the next
process (stock 2.15; torchtitan's TP=2 blocks read ``compile_on_one_rank``
in ``_functional_collectives._resolve_group_name``). What the traced code
depends on is the entry's value, which the override gives where it is set
(and the default, the environment or a knob, each guarded by torch, where
it is not); the override itself may read otherwise when the guards are
built than when the frame was traced (an unset override reads ``False``
there after inductor compiled the frame). So the guard is saved as "the
entry's value is this constant": the override where set, the module's own
answer where not. An entry whose value is not a plain constant declines the
frame (``saved_guards.decline``).

A value read through a module. torch saves the globals a frame's guards
read with the frame and rebuilds each guard against them on load; a module
is saved as a reference to the module, so a guard on a value reached
through one is rebuilt against the loading process's value, read when
``torch.compile`` wraps the function: a comparison (``flags.USE_X ==
False``, a config entry's default) compares that value with itself and
always passes, so a process whose module holds another value runs the
loaded frame with the saved process's answer (stock 2.13 and 2.15,
``caching_precompile``); a length or type is the one the value has at wrap
time, not the one the frame was traced with (a list the program fills later
fails, or one of another length passes), and a value the program has not
made yet fails the whole load. Each such guard is saved as what it read
when the frame was traced:

  torch guard        saved as                           rebuilt as
  CONSTANT_MATCH,    the constant (bool, int, float,    ``type(v) is type(c) and v == c``
  EQUALS_MATCH       str, None)
  SEQUENCE_LENGTH    the type (by qualified name), len  ``type(v) is T and len(v) == n``
  TYPE_MATCH         the type (by qualified name)       ``type(v) is T``
  HASATTR            the name, whether it was there     ``hasattr(v, name) is present``

(a type that does not import by its name keeps torch's form, and so does a
guard on a module, class or function, or on a dict: see ``_MADE_AT_IMPORT``).
"""

from __future__ import annotations

import importlib
import types
from typing import Any, Callable

from .. import _compat as C
from .plugin_guards import importable, never, saved_form

_CONSTANTS = (bool, int, float, str, type(None))


# -- a config entry's override --------------------------------------------------

def config_value_check(description: tuple[str, str, Any]) -> Callable[[Any], bool]:
    """The check of a saved config-override guard ``(module, key, value)``:
    the entry's value (its override where set, else the module's answer)
    is ``value``, of the same type."""
    module_name, key, value = description
    module = importlib.import_module(module_name)
    unset, sentinel = C.dynamo.config_value_without_override(module, key), C.dynamo.CONFIG_UNSET
    # Where the entry's fallback is not fixed, or not a plain constant, the module answers at each call.
    if unset is sentinel or type(unset) not in _CONSTANTS:
        return lambda override: _same_constant(getattr(module, key) if override is sentinel else override, value)
    # The config module's answer without an override costs microseconds
    # (``ConfigModule.__getattr__`` in Python) on every call of the frame;
    # what it falls back to is fixed when the module is made, so it is
    # compared once, here. A hidden entry (deleted) still takes the lookup.
    entry, unset_matches = C.dynamo.config_entry(module, key), _same_constant(unset, value)
    return lambda override: ((unset_matches if not entry.hide else _same_constant(getattr(module, key), value))
                             if override is sentinel else _same_constant(override, value))


def saved_override(builder: Any, guard: Any, key: str) -> Any:
    """torch's guard on the override of the config entry ``key`` in its
    saved form, or None."""
    module = C.dynamo.config_module_of(builder, guard)
    if module is None or C.dynamo.config_entry(module, key) is None:
        return None
    value = getattr(module, key)
    if type(value) not in _CONSTANTS:
        return None
    return saved_form(guard, config_value_check, (module.__name__, key, value),
                      f"dynamo_dist: the config entry `{module.__name__}.{key}` is {value!r}")


# -- a value read through a module ------------------------------------------------

def constant_check(value: Any) -> Callable[[Any], bool]:
    """The check of a saved module-constant guard."""
    return lambda current: _same_constant(current, value)


def _same_constant(current: Any, value: Any) -> bool:
    """What a saved value guard checks: the same type, and equal."""
    return type(current) is type(value) and current == value


def type_check(path: tuple[str, str]) -> Callable[[Any], bool]:
    """The check of a saved type guard (the type resolved now)."""
    cls = importable(*path)
    return never if not isinstance(cls, type) else (lambda current: type(current) is cls)


def length_check(description: tuple[tuple[str, str], int]) -> Callable[[Any], bool]:
    """The check of a saved length guard (the type resolved now)."""
    path, length = description
    cls = importable(*path)
    return never if not isinstance(cls, type) else (
        lambda current: type(current) is cls and len(current) == length)


def has_attribute_check(description: tuple[str, bool]) -> Callable[[Any], bool]:
    """The check of a saved attribute-presence guard."""
    attr, present = description
    return lambda current: hasattr(current, attr) is present


def _type_path(value: Any) -> tuple[str, str] | None:
    cls = type(value)
    path = (cls.__module__, cls.__qualname__)
    return path if "<locals>" not in path[1] and importable(*path) is cls else None


# A dict's guard manager takes no lambda guard: a dict keeps torch's form.
# So does a module, class or function (made when its module is imported,
# before any ``torch.compile``; torch's C++ check is cheaper than a lambda).
_MADE_AT_IMPORT = (types.ModuleType, type, types.FunctionType, types.BuiltinFunctionType)


# Each saved form reads the guarded value when the frame is saved and gives
# (check, description, what it says, the source it is installed on), or None.
def _saved_constant(builder: Any, guard: Any) -> Any:
    value = C.dynamo.guarded_value(builder, guard)
    if type(value) not in _CONSTANTS:
        return None
    return constant_check, value, f"`{guard.name}` == {value!r}", C.dynamo.guard_source(guard)


def _saved_length(builder: Any, guard: Any) -> Any:
    value = C.dynamo.guarded_value(builder, guard)
    path = _type_path(value)
    if path is None or not hasattr(value, "__len__") or isinstance(value, (dict, *_MADE_AT_IMPORT)):
        return None
    return (length_check, (path, len(value)), f"`{guard.name}` is a {path[1]} of length {len(value)}",
            C.dynamo.guard_source(guard))


def _saved_type(builder: Any, guard: Any) -> Any:
    value = C.dynamo.guarded_value(builder, guard)
    path = _type_path(value)
    if path is None or isinstance(value, (dict, *_MADE_AT_IMPORT)):
        return None
    return type_check, path, f"type(`{guard.name}`) is {path[0]}.{path[1]}", C.dynamo.guard_source(guard)


def _saved_has_attribute(builder: Any, guard: Any) -> Any:
    found = C.dynamo.hasattr_guard_target(guard)
    if found is None:
        return None
    source, attr = found
    value = C.dynamo.guarded_value(builder, source)
    if isinstance(value, (dict, *_MADE_AT_IMPORT)):
        return None
    present = hasattr(value, attr)
    return (has_attribute_check, (attr, present),
            f"{'' if present else 'not '}hasattr(`{C.dynamo.source_name(source)}`, {attr!r})", source)


# torch's guard builder (by name) -> its saved form.
SAVED_MODULE_READS: dict[str, Callable[[Any, Any], Any]] = {
    "CONSTANT_MATCH": _saved_constant,
    "EQUALS_MATCH": _saved_constant,
    "SEQUENCE_LENGTH": _saved_length,
    "TYPE_MATCH": _saved_type,
    "HASATTR": _saved_has_attribute,
}


def module_read(guard: Any, output_graph: Any) -> str | None:
    """The name of the builder of a torch guard on a value reached through
    a module global that is saved in its own form here, or None."""
    fn = C.dynamo.guard_create_fn(guard)
    builder_name = getattr(getattr(fn, "func", fn), "__name__", None)
    if builder_name not in SAVED_MODULE_READS or not C.dynamo.reads_through_a_module(guard, output_graph):
        return None
    return builder_name


def saved_module_read(builder: Any, guard: Any, builder_name: str) -> Any:
    """The guard in its saved form, or None (torch's form is kept)."""
    try:
        saved = SAVED_MODULE_READS[builder_name](builder, guard)
    except Exception:  # a source the builder cannot read here: torch's own form
        return None
    if saved is None:
        return None
    check, description, what, source = saved
    if source is not C.dynamo.guard_source(guard):
        guard = C.dynamo.guard_replaced(guard, source=source)
    return saved_form(guard, check, description,
                      f"dynamo_dist: {what} (a value read through a module, saved with the frame)")
