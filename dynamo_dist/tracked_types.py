"""One declaration per tracked type, and the table every part of the plugin
dispatches on.

A tracked type is declared once, in the module of its tracker, by one
``TrackedType`` record (``declare``): which objects it covers, its member
table and tracker, the tracker of its class, how a sourced object of it is
guarded, how compile-cache keys hold it, how it is rebuilt in bytecode when
it escapes, and how a graph saved to a cache stores it and, loaded, gets it
back. Whoever asks "is this a tracked object, and what is done with it?" asks
this table:

- ``variables.build.build``, the one entry point of every Dynamo hook
  (sourced and sourceless values, a query's answers): tracker and guard;
- the trackers' ``reconstruct``: the record's ``rebuild``;
- ``caching.keys.constant_identity`` (and ``caching.describe``, which
  describes a tracked object by it): ``key_identity``;
- ``_hooks.caches``: the FX-graph cache pickler (``key_pickle``) and the
  constants of a graph saved to a cache (``cache_save``, ``saved_as``) and
  loaded from one (``on_cache_load``);
- ``_hooks.core``: the exact types of Dynamo's sourceless fast table
  (``fast_types``).

This module imports nothing of the package: the parts below the trackers
(``caching``) read the table without importing them. The plugin's own
types are declared when ``dynamo_dist.variables`` is imported (which
``install()`` does), and that package says so (``all_declared``) when its
last module is in; a lookup before then is an error, not a silent "not
tracked" (a cache key would change with import order).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable, Mapping


@dataclass(frozen=True)
class TrackedType:
    """Everything the plugin does with one tracked type. Only ``name``,
    ``python_type`` and ``tracker`` are required: a field left at its
    default means the plugin does nothing of that kind for the type."""

    # What the type is called in messages and docs.
    name: str
    # The objects covered: instances of this type (a tuple: of any of these types) ...
    python_type: type | tuple[type, ...]
    # ``tracker(value, source=...)`` (sourced), ``tracker(value, rebuild=...)``
    # (a query's answer, with its recipe), ``tracker(value)`` (built during
    # tracing); with ``objects``, the object's table name comes second.
    tracker: Callable[..., Any]
    # ... whose class passes this test (built-in and user placements are two types) ...
    class_test: Callable[[type], bool] | None = None
    # ... or these very objects (functions, by identity): ``objects()`` maps each to its name.
    objects: Callable[[], Mapping[Any, str]] | None = None
    # The member table the tracker reads (``variables.members.MemberTable``).
    members: Any = None
    # ``guard(source, value)``: the guard installed when a sourced object is
    # first wrapped (the cheapest that keeps every folded answer sound).
    guard: Callable[[Any, Any], None] | None = None
    # ``ready(value)``: whether the object can be tracked now; if not, the
    # graph break ``not_ready`` (a ``variables.breaks.Break``) is raised.
    ready: Callable[[Any], bool] | None = None
    not_ready: Any = None
    # ``key_identity(value)``: the object as stable data in compile-cache keys
    # (a baked call's constants, described values); None: it has none (a
    # graph that bakes it in is not cached).
    key_identity: Callable[[Any], tuple | None] | None = None
    # ``key_pickle(value)``: the reduce tuple the FX-graph cache's key pickler
    # writes for an object of exactly ``python_type``.
    key_pickle: Callable[[Any], tuple] | None = None
    # ``rebuild(tracker, codegen)``: the bytecode that makes the object again
    # when it escapes the compiled function without a source to reload it
    # from. None: only ever sourced (Dynamo reloads it from its source).
    rebuild: Callable[[Any, Any], None] | None = None
    # ``cache_save(value)``: what a constant of this type is stored as in a
    # graph saved to a compile cache, an object of ``saved_as``; None: the
    # object pickles as it is.
    cache_save: Callable[[Any], Any] | None = None
    saved_as: type | None = None
    # ``on_cache_load(stored)``: a constant of this type in a graph loaded
    # from a compile cache (``stored``, as saved) becomes this (stock leaves it None).
    on_cache_load: Callable[[Any], Any] | None = None
    # Exact types Dynamo's sourceless fast table sends to ``build``.
    fast_types: tuple[type, ...] = ()
    # Objects built or derived during tracing (no source) are tracked too;
    # False: only objects read from a source are.
    sourceless: bool = False
    # ``class_tracker(cls, source=...)``: the tracker of the type's class and
    # of its subclasses (that pass ``class_test``), sourced (identity-guarded) or not.
    class_tracker: Callable[..., Any] | None = None

    def __post_init__(self) -> None:
        types = self.python_type if isinstance(self.python_type, tuple) else (self.python_type,)
        problems = [f"python_type must be a type or a tuple of types, not {self.python_type!r}"
                    for t in types if not isinstance(t, type)]
        problems += [f"{field} must be callable" for field in ("tracker", "class_test", "objects", "guard", "ready",
                                                               "key_identity", "key_pickle", "rebuild",
                                                               "cache_save", "on_cache_load", "class_tracker")
                     if getattr(self, field) is not None and not callable(getattr(self, field))]
        if (self.cache_save is None) != (self.saved_as is None):
            problems.append("cache_save and saved_as go together (how a constant is saved, and what it is saved as)")
        if (self.ready is None) != (self.not_ready is None):
            problems.append("ready and not_ready go together (the test, and the break when it fails)")
        own = getattr(self.tracker, "MEMBERS", self.members)
        if self.members is not None and own is not self.members:
            problems.append(f"members is {self.members!r} but its tracker reads {own!r}")
        if problems:
            raise TypeError(f"tracked type {self.name!r}: " + "; ".join(problems))

    def covers(self, value: Any) -> bool:
        """``value`` is an object of this type."""
        return (isinstance(value, self.python_type) and (self.class_test is None or self.class_test(type(value)))
                and (self.objects is None or value in self.objects()))

    def covers_class(self, cls: type) -> bool:
        """``cls`` is this type's class, or a subclass of it, tracked as a class."""
        return (self.class_tracker is not None and issubclass(cls, self.python_type)
                and (self.class_test is None or self.class_test(cls)))


@dataclass(frozen=True)
class _Scope:
    """The records one kind of lookup considers, with the union of their
    types (one ``isinstance`` rules out every other value)."""

    records: tuple[TrackedType, ...]
    types: tuple[type, ...]


def _scope(records: tuple[TrackedType, ...]) -> _Scope:
    types: list[type] = []
    for r in records:
        for t in r.python_type if isinstance(r.python_type, tuple) else (r.python_type,):
            if t not in types:
                types.append(t)
    return _Scope(records, tuple(types))


_DECLARED: list[TrackedType] = []
_SOURCED = _SOURCELESS = _CLASSES = _scope(())
_ALL_DECLARED = False


def _rebuild_scopes() -> None:
    global _SOURCED, _SOURCELESS, _CLASSES
    records = tuple(_DECLARED)
    _SOURCED = _scope(records)
    _SOURCELESS = _scope(tuple(r for r in records if r.sourceless))
    _CLASSES = _scope(tuple(r for r in records if r.class_tracker is not None))


# Who is told of a record declared later (name -> ``listener(record)``): a
# type whose classes exist only once an optional package is imported is
# declared then, while the plugin may be installed (``_hooks`` adds its fast
# types to Dynamo's table).
LISTENERS: dict[str, Callable[[TrackedType], None]] = {}


def declare(record: TrackedType) -> TrackedType:
    """Enter ``record`` in the table (its module does it, once, at import;
    a type of an optional package's classes, once the package is imported)."""
    if any(r.name == record.name for r in _DECLARED):
        raise ValueError(f"a tracked type named {record.name!r} is declared already")
    _DECLARED.append(record)
    _rebuild_scopes()
    for listener in list(LISTENERS.values()):
        listener(record)
    return record


def retract(record: TrackedType) -> None:
    """Take ``record`` out of the table again."""
    _DECLARED.remove(record)
    _rebuild_scopes()


def all_declared() -> None:
    """Called by ``dynamo_dist.variables`` once every module of it is imported."""
    global _ALL_DECLARED
    _ALL_DECLARED = True


def _check_declared() -> None:
    if not _ALL_DECLARED:
        raise RuntimeError("dynamo_dist: the tracked types are not declared yet; import dynamo_dist.variables "
                           "(install() does) before asking whether an object is tracked")


def find(value: Any, sourced: bool = False) -> TrackedType | None:
    """The record of the tracked type ``value`` is an object of (not a class:
    ``find_class``), or None. ``sourced``: every record; else only those
    whose objects are tracked without a source."""
    if not _ALL_DECLARED:
        _check_declared()
    scope = _SOURCED if sourced else _SOURCELESS
    if not isinstance(value, scope.types):  # the common case: one check
        return None
    for record in scope.records:
        if record.covers(value):
            return record
    return None


def find_class(cls: type) -> TrackedType | None:
    """The record whose ``class_tracker`` tracks the class ``cls``, or None."""
    if not _ALL_DECLARED:
        _check_declared()
    if not issubclass(cls, _CLASSES.types):
        return None
    for record in _CLASSES.records:
        if record.covers_class(cls):
            return record
    return None


def declaration(value: Any) -> TrackedType:
    """The record of an object a tracker holds (its tracker was made from it)."""
    record = find(value, sourced=True)
    if record is None:
        raise LookupError(f"dynamo_dist: no tracked type is declared for {type(value).__qualname__}")
    return record


def records() -> tuple[TrackedType, ...]:
    """Every declared record, in the order they were declared."""
    return _SOURCED.records


def fast_types() -> list[type]:
    """The exact types Dynamo's sourceless fast table sends to ``build``."""
    return [t for r in _SOURCED.records for t in r.fast_types]


def saved_for_cache(value: Any) -> Any:
    """``value``, a constant of a graph being saved to a compile cache, as
    its type declares it is stored (``cache_save``); else itself."""
    record = find(value, sourced=True)
    return value if record is None or record.cache_save is None else record.cache_save(value)


def loaded_from_cache(stored: Any) -> Any:
    """A constant of a graph loaded from a compile cache as its type
    declares (``on_cache_load``), or None where none is declared."""
    for record in _SOURCED.records:
        if record.on_cache_load is not None and (
                isinstance(stored, record.saved_as) if record.saved_as is not None else record.covers(stored)):
            return record.on_cache_load(stored)
    return None


def key_picklers() -> dict[type, Callable[[Any], tuple]]:
    """Exact type -> how the FX-graph cache's key pickler writes it."""
    return {t: r.key_pickle for r in _SOURCED.records if r.key_pickle is not None
            for t in (r.python_type if isinstance(r.python_type, tuple) else (r.python_type,))}
