"""The ONE place that patches Dynamo. Every patch saves the original and
``remove()`` puts it back exactly, so ``uninstall()`` restores stock torch.

Hook points (torch 2.13, see DESIGN.md):
- ``VariableBuilder._wrap``: every value read from a source (arguments,
  globals, attributes) passes here. Ours are checked first; anything else goes
  to the original.
- ``SourcelessBuilder.create`` and its exact-type table
  ``SourcelessBuilder._type_handlers`` (the table is also used for nested
  list/tuple items through a closure over the original ``create``).
- ``TensorVariable.call_method``: DTensor ``redistribute`` / ``to_local`` /
  ``full_tensor`` with mesh or placement arguments become one graph call with
  those folded in (``variables/dtensor.py``); everything else is stock.
- ``TensorVariable``'s attribute slot (``C.TENSOR_GETATTR_SLOT``:
  ``var_getattr`` on 2.13, ``tp_getattro_impl`` on 2.14+): ``placements`` /
  ``device_mesh`` of a DTensor made inside the frame are our trackers (stock
  makes graph nodes).
- AOTAutograd's ``gen_alias_from_base`` (as ``runtime_wrappers`` imported
  it): a fallback for outputs that are views of DTensor inputs
  (``aot_alias.py``), which stock crashes on at run time.
- ``BuiltinVariable.call_<builtin>`` named in ``C.BUILTIN_HOOKS`` (per
  family: ``call_str`` on 2.11-2.13, ``call_repr``, a new ``call_hash`` and
  ``call_is_`` on 2.11 / 2.12, none on 2.14+): ``str(mesh)``, ``repr(p)``,
  ``hash(mesh)`` fold through the tracker's behaviour (those releases'
  builtins know only their own types and break the graph; 2.14+'s dispatch
  to the tracker's slots).
- ``GuardBuilder.DTENSOR_SPEC_MATCH`` (``C.DTENSOR_SPEC_GUARD_POINT``): a
  DTensor input's spec guard checks the same facts in time independent of
  the world size (``guards/dtensor.py``).
- AOTAutograd's ``functionalize_rng_ops`` (``C.partitioner``): under
  activation checkpointing, a random op's saved RNG state goes among the saved
  tensors, not after a saved mesh (2.12 / 2.13 failed a TP block with SDPA).
- ``vt_identity_compare`` where Dynamo decides ``a is b`` (2.12+,
  ``C.IDENTITY_HOOK_POINTS``): with one of our trackers, the answer and its
  guards are ``variables.identity``'s.

- Inputs that are sometimes an ``AsyncCollectiveTensor`` (only on a torch
  without upstream's fix, ``C.collective.NEEDS_BACKPORT``): ``_wrap`` traces
  them as their resolved tensor; ``GuardBuilder.get_guard_manager_from_source``
  and Dynamo's guard closure variables learn that source;
  ``BuiltinVariable.call_isinstance`` / ``call_type`` and ``x.__class__``
  answer with the class the input had and put its class guard back
  (``act_patches``).

- Frames of ``C.RUNTIME_ONLY_FUNCTIONS`` (``DTensor.__tensor_unflatten__``,
  which AOTAutograd's runtime calls for every DTensor output and gradient)
  are never compiled on their own: a ``.backward()`` after a graph break made
  stock compile one and break in it. Per code object; inlining is unchanged.
  Likewise the functions AOTAutograd generates at run time (2.12+,
  ``C.AOT_CODEGEN_HOOK_POINT``), and ``C.RUNTIME_ONLY_CALL_TREES``
  (``init_device_mesh``, ``DeviceMesh.__init__``)
  with every frame they call: mesh creation after a graph break runs eagerly.

``C.check_supported()`` runs before anything is patched: a torch outside the
supported range, or one missing a hook point or slot, is refused with one
error and stock is left untouched.
"""

from __future__ import annotations

import collections
import logging
import threading
from typing import Any

import torch
from torch.distributed import PrefixStore

from . import _compat as C
from ._compat import observe as O
from . import aot_alias, baked_ops, cache_keys, sdpa_cache
from .caching import aot_key
from .guards import dtensor as dtensor_guard
from .variables import dtensor, identity, registry
from .variables.base import fold_builtin, folds_builtin

_lock = threading.Lock()
_MISSING = object()


class Patches:
    """A reversible set of changes to torch's global state.

    Every change the package makes to torch (Dynamo hooks, logger levels and
    handlers, config values, ``torch.compile`` while ``explain`` records) goes
    through one of these: ``set``/``set_item`` remember the original the first
    time a target is touched, and ``restore()`` puts every original back, in
    reverse order, exactly (an attribute or key that did not exist is removed
    again). ``uninstall()``, ``explain`` and the CLI commands all rely on it.
    """

    def __init__(self) -> None:
        self._undo: list[tuple[str, Any, Any, Any]] = []
        self._seen: set[tuple[int, str, Any]] = set()

    def __bool__(self) -> bool:
        return bool(self._undo)

    def set(self, owner: Any, name: str, value: Any) -> None:
        """``setattr(owner, name, value)``, remembering the original (from the
        owner's own ``__dict__`` for classes, so an inherited attribute is not
        copied down on restore)."""
        key = (id(owner), "attr", name)
        if key not in self._seen:
            self._seen.add(key)
            original = owner.__dict__.get(name, _MISSING) if isinstance(owner, type) \
                else getattr(owner, name, _MISSING)
            self._undo.append(("attr", owner, name, original))
        setattr(owner, name, value)

    def set_item(self, mapping: Any, key: Any, value: Any) -> None:
        """``mapping[key] = value``, remembering the original entry."""
        seen_key = (id(mapping), "item", key)
        if seen_key not in self._seen:
            self._seen.add(seen_key)
            self._undo.append(("item", mapping, key, mapping.get(key, _MISSING)))
        mapping[key] = value

    def original(self, owner: Any, name: str, default: Any = _MISSING) -> Any:
        """The value ``owner.name`` had before the first ``set``."""
        for kind, target, attr, value in self._undo:
            if kind == "attr" and target is owner and attr == name:
                return value
        return default

    def restore(self) -> None:
        while self._undo:
            kind, target, name, original = self._undo.pop()
            if kind == "attr":
                if original is _MISSING:
                    if name in getattr(target, "__dict__", {}):
                        delattr(target, name)
                else:
                    setattr(target, name, original)
            elif original is _MISSING:
                target.pop(name, None)
            else:
                target[name] = original
        self._seen.clear()
_saved: dict[str, Any] = {}
_more_patches = Patches()


def is_active() -> bool:
    return bool(_saved)


def apply() -> None:
    with _lock:
        if _saved:
            return
        C.check_supported()
        original_wrap = C.VariableBuilder._wrap
        original_create = C.SourcelessBuilder.__dict__["create"]
        create_fn = original_create.__func__

        act = C.collective.NEEDS_BACKPORT

        def wrap_hook(self: Any, value: Any) -> Any:
            if act and C.collective.needs_resolving(self.source, value):
                return C.collective.wrap_resolved(self.tx, self.source, value)
            tracker = registry.tracker_for_source(self.tx, self.source, value)
            if tracker is not None:
                return tracker
            return original_wrap(self, value)

        def create(tx: Any, value: Any) -> Any:
            tracker = registry.tracker_for(value)
            if tracker is not None:
                return tracker
            return create_fn(tx, value)

        def fast_handler(tx: Any, value: Any) -> Any:
            return registry.tracker_for(value)

        original_call_method = C.TensorVariable.__dict__["call_method"]

        def call_method(self: Any, tx: Any, name: str, args: list, kwargs: dict) -> Any:
            handled = dtensor.call_method(tx, self, name, args, kwargs)
            if handled is not None:
                return handled
            return original_call_method(self, tx, name, args, kwargs)

        getattr_slot = C.TENSOR_GETATTR_SLOT
        original_getattr = C.TensorVariable.__dict__[getattr_slot]

        def var_getattr(self: Any, tx: Any, name: str) -> Any:
            if act and name == "__class__" and C.collective.observed_class(self) is not None:
                return C.collective.class_tracker(tx, self)
            handled = dtensor.var_getattr(tx, self, name)
            if handled is not None:
                return handled
            return original_getattr(self, tx, name)

        builtin_hooks = {name: _builtin_hook(name, ours, C.BuiltinVariable.__dict__.get(name))
                         for name, ours in C.BUILTIN_HOOKS.items()}

        table = C.SourcelessBuilder._type_handlers
        hooked_types = registry.sourceless_types()
        saved_table = {t: table.get(t, _MISSING) for t in hooked_types}
        original_alias = C.aot_runtime_wrappers.gen_alias_from_base
        _saved.update(wrap=original_wrap, create=original_create, table=saved_table,
                      call_method=original_call_method, getattr=original_getattr, alias=original_alias,
                      act=act_patches() if act else None)
        C.stock.remember(original_wrap, original_create, hooked_types)
        for name, hook in builtin_hooks.items():
            _more_patches.set(C.BuiltinVariable, name, hook)
        for module in C.IDENTITY_HOOK_POINTS:
            _more_patches.set(module, "vt_identity_compare", _identity_compare(module.vt_identity_compare))
        _more_patches.set(*C.DTENSOR_SPEC_GUARD_POINT, dtensor_guard.DTENSOR_SPEC_GUARD)
        if C.partitioner.RNG_STATES_HOOK_POINT is not None:
            owner, name = C.partitioner.RNG_STATES_HOOK_POINT
            _more_patches.set(owner, name, C.partitioner.rng_states_before_saved_objects(getattr(owner, name)))
        if C.AOT_CODEGEN_HOOK_POINT is not None:
            owner, name = C.AOT_CODEGEN_HOOK_POINT
            _more_patches.set(owner, name, _runtime_only_generated(getattr(owner, name)))
        C.aot_runtime_wrappers.gen_alias_from_base = aot_alias.with_dtensor_fallback(original_alias)
        _cache_key_patches(_more_patches)

        C.VariableBuilder._wrap = wrap_hook
        C.SourcelessBuilder.create = staticmethod(create)
        C.TensorVariable.call_method = call_method
        setattr(C.TensorVariable, getattr_slot, var_getattr)
        for t in saved_table:
            table[t] = fast_handler
        _reset_dynamo()
        # After the reset: it clears the Dynamo state of every code object it saw.
        for fn in C.RUNTIME_ONLY_FUNCTIONS:
            C.skip_top_level_frames(fn)
        for fn in C.RUNTIME_ONLY_CALL_TREES:
            C.skip_frames_recursively(fn)


def remove() -> None:
    with _lock:
        if not _saved:
            return
        for fn in (*C.RUNTIME_ONLY_FUNCTIONS, *C.RUNTIME_ONLY_CALL_TREES):
            C.unskip_top_level_frames(fn)
        C.VariableBuilder._wrap = _saved["wrap"]
        C.SourcelessBuilder.create = _saved["create"]
        C.TensorVariable.call_method = _saved["call_method"]
        setattr(C.TensorVariable, C.TENSOR_GETATTR_SLOT, _saved["getattr"])
        C.aot_runtime_wrappers.gen_alias_from_base = _saved["alias"]
        _more_patches.restore()
        table = C.SourcelessBuilder._type_handlers
        for t, handler in _saved["table"].items():
            if handler is _MISSING:
                table.pop(t, None)
            else:
                table[t] = handler
        if _saved["act"] is not None:
            _saved["act"].restore()
            C.collective.clear_builtin_handlers()
        _saved.clear()
        C.stock.forget()
    _reset_dynamo()


def _builtin_hook(name: str, ours: str, original: Any) -> Any:
    """``BuiltinVariable.call_<builtin>``: our trackers fold through their
    behaviour ``ours`` (``vt_is``: ``identity.fold_is``); anything else goes
    to the original handler (none: the builtin's other handlers run, as if
    this one did not exist)."""
    def call_builtin(self: Any, tx: Any, *args: Any, **kwargs: Any) -> Any:
        if ours == "vt_is":
            same = identity.fold_is(*args) if not kwargs and len(args) == 2 else None
            if same is not None:
                return C.constant(same == (name == "call_is_"))
        elif not kwargs and folds_builtin(args, ours):
            return fold_builtin(tx, args, ours, name)
        return original(self, tx, *args, **kwargs) if original is not None else None

    return call_builtin


def _identity_compare(original: Any) -> Any:
    """Dynamo's ``vt_identity_compare`` (2.12+): ``is`` with one of our
    trackers is ``identity.fold_is``'s."""
    def vt_identity_compare(left: Any, right: Any) -> Any:
        answer = identity.fold_is_tracker(left, right)
        return answer if answer is not None else original(left, right)

    return vt_identity_compare


def _reduce_mesh_for_cache_key(mesh: Any) -> tuple:
    return (str, (cache_keys.keyed_mesh_identity(mesh),))


def _with_live_meshes(unwrap: Any) -> Any:
    """A graph loaded from the cache gets its mesh constants back, as this
    process's meshes (``cache_keys.live_mesh``); stock leaves them ``None``."""
    def constants(self: Any, graph: Any) -> Any:
        values = unwrap(self, graph)
        for name, stored in C.caches.stored_opaque_constants(graph).items():
            if name not in values and isinstance(stored, C.DeviceMesh):
                values[name] = cache_keys.live_mesh(stored)
        return values

    return constants


def _cache_key_patches(p: Patches) -> None:
    """Stable, sound compile-cache keys for distributed programs
    (``cache_keys.py``, ``baked_ops.py``): meshes pickle as their identity in
    the FX-graph and AOTAutograd cache keys, ``DeviceMesh._stable_hash`` (the
    AOTAutograd key of a DTensor input) is that identity's digest, every key
    holds this rank (``cache_keys.rank_tag``), ``baked_ops.call`` and the
    calls of ``with sdpa_kernel(...)`` (``sdpa_cache.py``) are cacheable graph
    call targets, and the AOTAutograd key describes selective-AC policies and
    admits custom Functions it can key, per graph (``caching/aot_key.py``)."""
    details = C.caches.hash_details()
    original_details_init = details.__dict__["__init__"]

    def details_init(self: Any, *args: Any, **kwargs: Any) -> None:
        original_details_init(self, *args, **kwargs)
        tag = cache_keys.rank_tag()
        if tag is not None:
            self.cache_key_tag = f"{self.cache_key_tag}|{tag}"

    p.set(details, "__init__", details_init)
    for loader in C.caches.constants_loaders():
        p.set(loader, "unwrap", _with_live_meshes(loader.__dict__["unwrap"]))
    pickler = C.caches.fx_cache_pickler()
    original_init = pickler.__dict__["__init__"]

    def __init__(self: Any, *args: Any, **kwargs: Any) -> None:
        original_init(self, *args, **kwargs)
        self.dispatch_table[C.DeviceMesh] = _reduce_mesh_for_cache_key

    p.set(pickler, "__init__", __init__)
    if C.caches.MESH_STABLE_HASH is not None:
        p.set(*C.caches.MESH_STABLE_HASH, cache_keys.mesh_cache_hash)
    config = O.inductor_config()
    marked = {**config.unsafe_marked_cacheable_functions, baked_ops.QUALNAME: baked_ops.code_version(dtensor),
              **sdpa_cache.marked_cacheable()}
    p.set(config, "unsafe_marked_cacheable_functions", marked)
    owner, name = C.caches.aot_key_hook_point()
    p.set(owner, name, aot_key.keyed_graphs(getattr(owner, name)))


def _runtime_only_generated(compile_and_exec: Any) -> Any:
    """AOTAutograd's generated runtime functions (2.12+: a DTensor gradient's
    ``wrap_fn`` / ``unwrap_fn``) are, like ``C.RUNTIME_ONLY_FUNCTIONS``, never
    compiled as frames of their own (2.12 compiled and broke in them when
    ``.backward()`` ran inside a compiled function)."""
    def generate(*args: Any, **kwargs: Any) -> Any:
        fn = compile_and_exec(*args, **kwargs)
        C.skip_top_level_frames(fn)
        return fn

    return generate


def act_patches() -> Patches:
    """The backport of 2.14's fix for inputs that are sometimes an
    AsyncCollectiveTensor (``_compat/collective.py``): its guard source, the
    name guard code calls it by, and the class observations that must put
    the class guard back."""
    p = Patches()
    col = C.collective
    original_manager = C.collective.GuardBuilder.get_guard_manager_from_source

    def get_guard_manager_from_source(self: Any, source: Any) -> Any:
        if isinstance(source, col.ResolvedCollectiveSource):
            return col.guard_manager(self, source)
        return original_manager(self, source)

    original_isinstance = C.BuiltinVariable.__dict__["call_isinstance"]

    def call_isinstance(self: Any, tx: Any, arg: Any, classinfo: Any) -> Any:
        if col.observed_class(arg) is not None and classinfo.is_python_constant():
            return C.constant(col.isinstance_answer(arg, classinfo.as_python_constant()))
        return original_isinstance(self, tx, arg, classinfo)

    original_type = C.BuiltinVariable.__dict__["call_type"]

    def call_type(self: Any, tx: Any, obj: Any) -> Any:
        if col.observed_class(obj) is not None:
            return col.class_tracker(tx, obj)
        return original_type(self, tx, obj)

    p.set(col.GuardBuilder, "get_guard_manager_from_source", get_guard_manager_from_source)
    p.set_item(col.closure_vars(), col.GUARD_FN_NAME, col.unwrap_for_guards)
    p.set(C.BuiltinVariable, "call_isinstance", call_isinstance)
    p.set(C.BuiltinVariable, "call_type", call_type)
    # Builtin handlers are cached with the method they were built from.
    col.clear_builtin_handlers()
    return p


# Kept for callers that used them from here; they live below the trackers.
stock_wrap = C.stock_wrap
stock_create = C.stock_create


def _reset_dynamo() -> None:
    # Compiled code and guards made under the other regime must not be reused.
    C.reset()


# -- diagnostics and CLI patches --
# The tools' changes to torch's global state, each returned as a ``Patches``
# the caller restores (``explain`` recording, the CLI's demo and explain
# commands, the benchmarks). What they touch is named in ``_compat/observe.py``.


def _set_logger_level(p: Patches, logger: Any, level: int) -> None:
    # Logger.setLevel also empties the isEnabledFor cache; do both, reversibly.
    p.set(logger, "level", level)
    p.set(logger, "_cache", {})


def recording_patches(handler: Any, metrics_limit: int, trace_handler: Any = None) -> Patches:
    """What ``explain``'s recorder switches on for its duration:

    - the ``graph_breaks`` artifact logger gets ``handler``; unless the user
      already has it on (``TORCH_LOGS=graph_breaks``) it is switched on for
      that handler only (not propagating, so nothing new is printed);
    - Dynamo's duplicate-break checker starts empty (a repeated break is
      otherwise logged without its user frame);
    - the compile-metrics deque keeps ``metrics_limit`` rows (none of the
      recording is dropped); ``end_recording`` carries the new rows over to
      the original deque, as a limit change would have;
    - ``suppress_errors``: a frame that fails to compile runs eagerly and is
      reported instead of failing the user's program;
    - ``trace_handler`` (if given) is added to torch's structured-trace
      logger, which then emits its artifacts (the compile caches' hit / miss
      / bypass records); its other handlers (``TORCH_TRACE``) are kept.
    """
    p = Patches()
    log = O.graph_break_logger()
    if not log.isEnabledFor(logging.DEBUG):
        _set_logger_level(p, log, logging.DEBUG)
        p.set(log, "propagate", False)
    p.set(log, "handlers", [*log.handlers, handler])
    p.set(O.duplicate_break_checker(), "set", collections.OrderedDict())
    utils = O.dynamo_utils()
    p.set(utils, "_compilation_metrics", collections.deque(utils._compilation_metrics, maxlen=metrics_limit))
    p.set(O.dynamo_config(), "suppress_errors", True)
    if trace_handler is not None:
        trace = O.structured_trace_logger()
        if not trace.isEnabledFor(logging.DEBUG):  # torch sets it to DEBUG at import; in case not
            _set_logger_level(p, trace, logging.DEBUG)
        p.set(trace, "handlers", [*trace.handlers, trace_handler])
        p.set(trace, "propagate", False)  # as torch's own TORCH_TRACE setup: never to the root logger
    return p


def end_recording(p: Patches) -> None:
    """Restore ``recording_patches``; the rows recorded meanwhile stay in
    Dynamo's (original, bounded) compile-metrics deque."""
    utils = O.dynamo_utils()
    original = p.original(utils, "_compilation_metrics", None)
    wide = utils._compilation_metrics
    if original is not None and wide is not original:
        seen = {id(m) for m in original}
        original.extend(m for m in wide if id(m) not in seen)
    p.restore()


def bypass_log_patches(handler: Any) -> Patches:
    """The compile caches' loggers (``C.caches.bypass_loggers()``) at INFO,
    feeding ``handler`` only (not propagating: nothing new is printed), so it
    receives each bypass with its reason (the benchmarks' warm-start children)."""
    p = Patches()
    for log in C.caches.bypass_loggers().values():
        if not log.isEnabledFor(logging.INFO):
            _set_logger_level(p, log, logging.INFO)
        p.set(log, "handlers", [*log.handlers, handler])
        p.set(log, "propagate", False)
    return p


def compile_patches(replacement: Any) -> Patches:
    """``torch.compile`` replaced (``explain`` gives every compile its recording backend)."""
    p = Patches()
    p.set(torch, "compile", replacement)
    return p


def config_patches(**values: Any) -> Patches:
    """Compiler config values: ``inductor__fx_graph_cache=False``,
    ``functorch__enable_autograd_cache=False``, ``dynamo__suppress_errors=True``."""
    modules = {"inductor": O.inductor_config, "functorch": O.functorch_config, "dynamo": O.dynamo_config}
    p = Patches()
    for key, value in values.items():
        family, name = key.split("__", 1)
        p.set(modules[family](), name, value)
    return p


def rendezvous_patches(prefix: str) -> Patches:
    """Every rendezvous handler of torch.distributed wrapped so that its
    store is a ``PrefixStore(prefix, ...)`` (the CLI's second world in one
    process must not read the first world's keys)."""
    def namespaced(handler: Any) -> Any:
        def rendezvous(url: str, **kwargs: Any) -> Any:
            for store, rank, world_size in handler(url, **kwargs):
                yield PrefixStore(prefix, store), rank, world_size

        return rendezvous

    p = Patches()
    handlers = O.rendezvous_handlers()
    for scheme, handler in list(handlers.items()):
        p.set_item(handlers, scheme, namespaced(handler))
    return p
