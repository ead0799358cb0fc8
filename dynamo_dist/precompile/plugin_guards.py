"""A plugin guard in the form torch's precompile saves.

``caching_precompile`` and ``aot_compile`` save a frame's guards as their
builder functions (pickled by qualified name) plus the values they read, and
rebuild them on load. The plugin's guards read compile-time facts (a group
object, a mesh fingerprint, a DTensor spec) that the saved values cannot
give back (a process group pickles to nothing). So where torch serializes
the guards (``saved_guards``) each plugin guard is replaced by its saved
form, ``DYNAMO_DIST_SAVED`` partially applied to a picklable description of
what it checks and to the plugin's version, which rebuilds the check in the
loading process from the description alone:

  guard                          saved description              rebuilt as
  identity of a process group    (name, global ranks, backend)  ``v is`` this process's group of it
  identity of a class/function   (module, qualified name)       ``v is`` the object of that name
  predicate (mesh, spec, ...)    ``expect(value)``              ``check_from(description)``
  ``a is b`` between sources     the other source's name        the same code
  note (checks nothing)          not saved

A description this process cannot resolve (no group of that identity, a
name that no longer imports), or one saved by another plugin version,
rebuilds as a check that always fails: the frame is traced again, never run
for the wrong object. A guard with no saved form (identity of any other
object) declines the frame's package (``saved_guards.decline``).

Every function a saved guard names is module-level here and pickled by its
qualified name (``dynamo_dist.precompile.plugin_guards.<name>``). An entry
that names a function no longer found (saved by a plugin that kept these
elsewhere) fails to load: ``packages.install_or_trace`` traces the function
again, and the entry the trace writes replaces the unloadable variants
(``C.packages.merged_with_saved`` keeps only variants that load here).
"""

from __future__ import annotations

import functools
import importlib
import inspect
import io
import pickle
from typing import Any, Callable

import torch

from .. import _compat as C
from .. import _version

PACKAGE = __name__.split(".")[0]


def is_plugin_guard(guard: Any) -> bool:
    """A guard built by a function of this package (or a partial of one)."""
    fn = C.dynamo.guard_create_fn(guard)
    fn = getattr(fn, "func", fn)
    return (getattr(fn, "__module__", None) or "").split(".")[0] == PACKAGE


def never(value: Any) -> bool:
    """The check of a saved guard that cannot hold in this process."""
    return False


def same_group(identity: tuple[str, tuple[int, ...], str]) -> Callable[[Any], bool]:
    """``v is`` this process's group with ``identity`` (resolved once, now);
    with none, a check that always fails."""
    group = C.distributed.live_group(identity)
    return never if group is None else (lambda v: v is group)


def same_importable(path: tuple[str, str]) -> Callable[[Any], bool]:
    """``v is`` the object importable as ``module.qualname`` (resolved now)."""
    obj = importable(*path)
    return never if obj is None else (lambda v: v is obj)


def importable(module: str, qualname: str) -> Any:
    """The object importable as ``module.qualname``, or None."""
    try:
        obj: Any = importlib.import_module(module)
        for part in qualname.split("."):
            obj = getattr(obj, part)
    except Exception:
        return None
    return obj


def _module_builtin(value: Any) -> bool:
    """A function of an extension module (``torch._C._has_torch_function_unary``,
    which ``torch.overrides`` and spmd_types' collectives call as
    ``has_torch_function_unary``): its own module and qualified name find
    it again, as a Python function's do. A builtin bound to an instance is
    not one (its ``__self__`` is no module)."""
    return inspect.isbuiltin(value) and inspect.ismodule(getattr(value, "__self__", None)) and isinstance(
        getattr(value, "__module__", None), str)


def _identity_description(value: Any) -> tuple[Callable[[Any], Callable[[Any], bool]], Any, str] | None:
    """How an object under ``C.dynamo.guard_identity`` is found again in
    another process: (check_from, description, what it is), or None."""
    if isinstance(value, C.distributed.ProcessGroup):
        identity = C.distributed.group_identity(value)
        if identity is not None:
            return same_group, identity, f"process group {identity[0]!r} (ranks {list(identity[1])}, {identity[2]})"
        return None
    if isinstance(value, type) or inspect.isfunction(value) or _module_builtin(value):
        path = (value.__module__, value.__qualname__)
        if "<locals>" not in path[1] and importable(*path) is value:
            return same_importable, path, f"{path[0]}.{path[1]}"
    return None


def DYNAMO_DIST_SAVED(check_from: Callable[[Any], Callable[[Any], bool]], description: Any, text: str,
                      version: str, builder: Any, guard: Any) -> None:
    """A guard rebuilt from its saved form (see the table above)."""
    if version != _version.__version__:
        check: Callable[[Any], bool] = never
        text = f"{text} (saved by dynamo_dist {version}; this process runs {_version.__version__})"
    else:
        try:
            check = check_from(description)
        except Exception as e:  # a description this process cannot resolve: trace again
            check, text = never, f"{text} (cannot be checked here: {type(e).__name__}: {e})"
    source = C.dynamo.guard_source(guard)
    manager, steps = _manager_or_ancestor(builder, source)
    if steps:
        check = functools.partial(_walked_check, tuple(steps), check)
        text = f"{text} (read from `{C.dynamo.source_name(source, len(steps))}` when called)"
    C.dynamo.add_check(manager, check, text, guard)


# torch rebuilds a loaded frame's guards when ``torch.compile`` wraps the
# function, reading each guarded value then. A value the program makes
# later (torchtitan's current-mesh stack, a thread-local attribute set at
# the first step, holds its mesh only inside the train step) cannot be read
# at wrap time, and torch's build fails: the frame is traced again at every
# restart. A saved guard on such a value is put on the nearest value that
# can be read (the thread-local, the list), and walks the rest at each call:
# an attribute or item missing then fails the guard (the frame is traced).
def _manager_or_ancestor(builder: Any, source: Any) -> tuple[Any, list[tuple[str, Any]]]:
    """The guard manager of ``source`` and no steps, or, where its value
    cannot be read now, the manager of its nearest readable ancestor that
    takes a check (a dict's takes none) and the steps from there
    (re-raising when no such ancestor is reachable by attribute and item
    steps)."""
    steps: list[tuple[str, Any]] = []
    current = source
    while True:
        try:
            manager = C.dynamo.guard_manager_of(builder, current)
            if not steps or C.dynamo.takes_checks(manager):
                return manager, steps[::-1]
            error: Exception = TypeError("a dict's guard manager takes no lambda guard")
        except Exception as e:
            error = e
        step, base = C.dynamo.source_step(current), C.dynamo.source_base(current)
        if step is None or base is None:
            raise error
        steps.append(step)
        current = base


def _walked_check(steps: tuple[tuple[str, Any], ...], check: Callable[[Any], bool], value: Any) -> bool:
    try:
        for how, key in steps:
            value = getattr(value, key) if how == "attr" else value[key]
    except Exception:
        return False
    return check(value)


class _NoTensors(pickle.Pickler):
    """A pickler that refuses tensors: torch's guard pickler would save one
    inside a description as a placeholder, not as the tensor."""

    def reducer_override(self, obj: Any) -> Any:
        if isinstance(obj, torch.Tensor):
            raise pickle.PicklingError("a tensor in a guard description")
        return NotImplemented


def picklable(obj: Any) -> bool:
    """``obj`` pickles, with no tensor in it."""
    try:
        _NoTensors(io.BytesIO()).dump(obj)
    except Exception:
        return False
    return True


def saved_form(guard: Any, check_from: Callable[[Any], Callable[[Any], bool]], description: Any,
               text: str) -> Any:
    """``guard`` in a saved form that rebuilds as ``check_from(description)``
    on load (``check_from`` pickled by name), or None where it cannot be
    pickled."""
    create_fn = functools.partial(DYNAMO_DIST_SAVED, check_from, description, text, _version.__version__)
    return C.dynamo.guard_replaced(guard, create_fn=create_fn) if picklable(create_fn) else None


DROP = object()  # what ``saved`` answers for a guard that checks nothing


def saved(builder: Any, guard: Any, groups: dict[str, Any]) -> Any:
    """The guard torch saves for a plugin guard: the same guard with a
    picklable builder, ``DROP`` for one that checks nothing, or None when
    it has no saved form. A process group it saves by identity is noted in
    ``groups`` (by source name)."""
    fn = C.dynamo.guard_create_fn(guard)
    func = getattr(fn, "func", fn)
    if getattr(func, "checks_nothing", False):
        return DROP
    if func is DYNAMO_DIST_SAVED or func is C.dynamo.DYNAMO_DIST_SAME_OBJECT:
        return guard if picklable(fn) else None
    value = C.dynamo.guarded_value(builder, guard)
    if func is C.dynamo.DYNAMO_DIST_ID_MATCH:
        found = _identity_description(value)
        if found is None:
            return None
        check_from, description, what = found
        if isinstance(value, C.distributed.ProcessGroup):
            groups[guard.name] = value
        text = f"dynamo_dist: `{guard.name}` is {what}"
    elif func is C.dynamo.DYNAMO_DIST_MATCH:
        predicate = fn.keywords["predicate"]
        check_from = predicate.check_from
        description, text = predicate.expect(value), predicate.reason(guard.name, value)
    else:
        return None
    return saved_form(guard, check_from, description, text)


# What a saved frame was traced in that its guards do not hold, so that a
# frame saved in one process never runs in another that would have traced
# it otherwise: the plugin's version, the redistribute planner's switches
# and the rank where what the trace compiled may hold it. Without
# ``compile_on_one_rank`` a trace folds rank answers into the bytecode and
# the graph (``dist.get_rank()``, a group's ``rank()``; AOTAutograd reads
# a shard's offset), and a rank's live guards need not hold its rank (it
# never changes in a process): the saved group guard is the group's name,
# ranks and backend, the same on every rank. Dynamo's cache keys an entry
# by the function only, so ranks that share a cache dir (torch's default:
# one per user on a host) load each other's variants; the rank in the saved
# entry makes another rank's variant fail on load (the compile caches' keys
# hold the rank for the same reason, ``caching.keys.rank_tag``). Under
# ``compile_on_one_rank`` rank answers are graph operations read at run
# time and keys hold no rank: a variant runs on every rank (compile once
# ships it, ``compile_once/frames.py``), and a process that folds ranks
# differently (``compile_on_one_rank`` on in one, off in the other) does
# not load it.
_UNSAVED = object()  # an entry saved before the rank was part of this guard


def DYNAMO_DIST_SAVED_BY(version: str, planner: tuple, builder: Any, guard: Any, rank: Any = _UNSAVED) -> None:
    """Saved with every frame packaged while the plugin is installed: the
    plugin's version (it shaped the trace even where torch's own guards
    cover it), the redistribute planner's switches when the frame was
    traced (they choose the collectives a traced redistribute runs; the
    compile caches' keys hold them too) and the rank the trace folded
    (``folded_rank``, None where it folded none; see above). On load, where
    any of them differs in this process, a root check that always fails,
    so the frame is traced again (they are read once, when the frame loads,
    as a compile reads them); where all are the same, no check at all."""
    if version != _version.__version__:
        text = f"dynamo_dist: this frame was saved by dynamo_dist {version}; this process runs {_version.__version__}"
    elif planner != C.distributed.redistribute_planner_flags():
        text = (f"dynamo_dist: this frame was traced under the redistribute planner's switches {dict(planner)}; "
                f"this process has {dict(C.distributed.redistribute_planner_flags())}")
    elif rank is _UNSAVED or rank != C.distributed.folded_rank():
        text = (f"dynamo_dist: this frame was traced {_rank_words(rank)}; this process would trace it "
                f"{_rank_words(C.distributed.folded_rank())}")
    else:
        return
    C.dynamo.add_root_check(builder, never, text, guard)


def _rank_words(rank: Any) -> str:
    if rank is _UNSAVED:
        return "by a process that did not save its rank"
    return "with no rank folded into it (compile_on_one_rank, or no world)" if rank is None else f"on rank {rank}"


def saved_by_guard() -> Any:
    """The guard saved with every frame packaged now (``DYNAMO_DIST_SAVED_BY``)."""
    return C.dynamo.frame_guard(functools.partial(
        DYNAMO_DIST_SAVED_BY, _version.__version__, C.distributed.redistribute_planner_flags(),
        rank=C.distributed.folded_rank()))
