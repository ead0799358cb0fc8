"""What ``install()`` changes in torch, and ``uninstall()`` puts back.

Every change is one entry of one ``Patches`` record (``_INSTALLED``), so
``uninstall()`` restores stock torch exactly. Hook points (their names on
each release come from ``_compat``):

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
  ``var_getattr`` on 2.11-2.13, ``tp_getattro_impl`` on 2.14+):
  ``placements`` / ``device_mesh`` of a DTensor made inside the frame are our
  trackers (stock makes graph nodes).
- ``BuiltinVariable.call_<builtin>`` named in ``C.BUILTIN_HOOKS`` (per
  family: ``call_str`` on 2.11-2.13, ``call_repr``, a new ``call_hash`` and
  ``call_is_`` on 2.11 / 2.12, none on 2.14+): ``str(mesh)``, ``repr(p)``,
  ``hash(mesh)`` fold through the tracker's behaviour.
- the tracer's conditional jumps named in ``C.JUMP_HOOKS`` (2.11 / 2.12,
  whose jumps never ask a tracker for its truth): ``if mesh:``,
  ``group or dist.group.WORLD`` take the tracker's ``vt_bool``.
- ``vt_identity_compare`` where Dynamo decides ``a is b`` (2.12+,
  ``C.IDENTITY_HOOK_POINTS``): with one of our trackers, the answer and its
  guards are ``variables.identity``'s.
- ``GuardBuilder.DTENSOR_SPEC_MATCH`` (``C.DTENSOR_SPEC_GUARD_POINT``): a
  DTensor input's spec guard checks the same facts in time independent of
  the world size (``guards/dtensor.py``).
- ``CheckFunctionManager.serialize_guards`` (``C.GUARD_SERIALIZATION_POINT``):
  torch's precompile (``caching_precompile``, ``aot_compile``) saves each
  plugin guard in its saved form (a picklable description the loading
  process checks against its own objects); a frame with a guard that has
  none is declined (a package bypass, or ``PackageError`` under
  ``aot_compile``).
- ``CompilePackage.install`` (``C.packages.PACKAGE_INSTALL_POINT``): a
  package read from Dynamo's cache whose saved guards cannot be rebuilt in
  this process (an error other than the RuntimeError torch catches) is
  undone and the function traced afresh, where stock crashes inside
  ``torch.compile``.
- ``GuardsStatePickler._unpickle_fsdp_module_type``
  (``C.FSDP_TYPE_UNPICKLE_POINT``): a saved guard on an FSDP2 module's class
  loads before ``fully_shard`` made that class: the class is made then, as
  ``fully_shard`` makes it, and ``fully_shard`` takes it later.
- ``OutputGraph.install_global`` (``C.INSTALL_GLOBAL_POINT``, 2.11-2.14):
  a new global's name is one the module does not hold yet, so a frame
  loaded by torch's precompile whose guards fail can be traced again.
- The AOTAutograd fixes (``aot/``): outputs that are views of DTensor
  inputs (``gen_alias_from_base``) and, on 2.12 / 2.13, where a checkpointed
  random op's RNG state is saved (``functionalize_rng_ops``); on 2.12+,
  ``DTensor.__tensor_unflatten__`` rebuilds a sharded view's spec as it was
  flattened (``C.dtensor_unflatten``: a ``_StridedShard`` whose shard order
  is set), so such a DTensor can leave and enter a compiled graph.
- The compile caches (``_hooks/caches.py``).
- Inputs that are sometimes an ``AsyncCollectiveTensor`` (only on a torch
  without upstream's fix, ``C.collective.NEEDS_BACKPORT``): ``_wrap`` traces
  them as their resolved tensor; the guard builder, Dynamo's guard closure
  variables, ``isinstance`` / ``type`` and ``x.__class__`` learn about them
  (``_collective_patches``).
- Frames of ``C.RUNTIME_ONLY_FUNCTIONS`` (``DTensor.__tensor_unflatten__``),
  of the functions AOTAutograd generates at run time (2.12+,
  ``C.AOT_CODEGEN_HOOK_POINT``) and of ``C.RUNTIME_ONLY_CALL_TREES``
  (``init_device_mesh``, ``DeviceMesh.__init__``, with every frame they call)
  are never compiled on their own: runtime code a graph break or a
  ``.backward()`` runs with Dynamo's callback live.

``C.check_supported()`` runs before anything is patched: a torch outside the
supported range, or one missing a hook point or slot, is refused with one
error and stock is left untouched.
"""

from __future__ import annotations

import threading
from typing import Any

from .. import _compat as C
from ..aot import alias, rng_states
from ..guards import dtensor as dtensor_guard
from .. import tracked_types
from ..variables import dtensor, identity
from ..variables.build import build
from ..variables.base import fold_builtin, folds_builtin
from .caches import cache_key_patches, compile_once_patches
from .patches import Patches

_lock = threading.Lock()
# Everything install() changed; empty while uninstalled.
_INSTALLED = Patches()


def is_active() -> bool:
    return bool(_INSTALLED)


class InstallError(RuntimeError):
    """A change ``install()`` makes to torch failed; every change made before
    it was undone, so torch is stock."""


def apply(reset: bool = True) -> None:
    """Install, all or nothing: a change that fails undoes every change made
    before it and raises ``InstallError``. ``reset=False`` keeps what Dynamo
    compiled so far (a tool that alternates stock and plugin over functions
    each side compiled itself)."""
    with _lock:
        if _INSTALLED:
            return
        C.check_supported()
        try:
            _patch(_INSTALLED)
            if reset:
                C.reset()  # compiled code and guards made under stock must not be reused
            # After the reset: it clears the Dynamo state of every code object it saw.
            for fn in C.RUNTIME_ONLY_FUNCTIONS:
                C.skip_top_level_frames(fn)
            for fn in C.RUNTIME_ONLY_CALL_TREES:
                C.skip_frames_recursively(fn)
        except Exception as e:
            _undo()
            raise InstallError(
                f"dynamo_dist.install() failed while changing torch ({type(e).__name__}: {e}); every change it "
                f"had made is undone and torch {C.TORCH_VERSION} is as it was. A torch build that differs from "
                "the released one where the message points can cause this: please report it with the traceback."
            ) from e


def _patch(p: Patches) -> None:
    """Every change ``install()`` makes to torch, recorded in ``p``."""
    _tracker_patches(p)
    for name, ours in C.BUILTIN_HOOKS.items():
        p.set(C.BuiltinVariable, name, _builtin_hook(name, ours, C.BuiltinVariable.__dict__.get(name)))
    if C.JUMP_HOOKS:
        _jump_patches(p)
    for module in C.IDENTITY_HOOK_POINTS:
        p.set(module, "vt_identity_compare", _identity_compare(module.vt_identity_compare))
    p.set(*C.DTENSOR_SPEC_GUARD_POINT, dtensor_guard.DTENSOR_SPEC_GUARD)
    owner, name = C.GUARD_SERIALIZATION_POINT
    p.set(owner, name, C.save_plugin_guards(getattr(owner, name)))
    owner, name = C.packages.PACKAGE_INSTALL_POINT
    p.set(owner, name, C.packages.install_or_trace(getattr(owner, name)))
    if C.FSDP_TYPE_UNPICKLE_POINT is not None:
        owner, name = C.FSDP_TYPE_UNPICKLE_POINT
        p.set(owner, name, C.fsdp_type_made_on_load(owner.__dict__[name]))
    if C.INSTALL_GLOBAL_POINT is not None:
        owner, name = C.INSTALL_GLOBAL_POINT
        p.set(owner, name, C.install_global_unbound(getattr(owner, name)))
    _aot_patches(p)
    cache_key_patches(p, dtensor)
    compile_once_patches(p)
    if C.collective.NEEDS_BACKPORT:
        _collective_patches(p)


def _undo() -> None:
    """Every change of ``_patch`` and ``apply`` undone (under ``_lock``)."""
    for fn in (*C.RUNTIME_ONLY_FUNCTIONS, *C.RUNTIME_ONLY_CALL_TREES):
        C.unskip_top_level_frames(fn)
    _INSTALLED.restore()
    if C.collective.NEEDS_BACKPORT:
        C.collective.clear_builtin_handlers()  # they are cached with the method they were built from


def remove(reset: bool = True) -> None:
    """Uninstall; ``reset`` as for ``apply``."""
    with _lock:
        if not _INSTALLED:
            return
        _undo()
    if reset:
        C.reset()


def _tracker_patches(p: Patches) -> None:
    """Our trackers for sourced and sourceless values (``build``, which
    dispatches on the declared tracked types), and DTensor's methods and
    attributes. Each hook keeps the original as ``__wrapped__``, which is
    how ``C.stock`` reaches stock's own builders."""
    original_wrap = C.VariableBuilder._wrap
    original_create = C.SourcelessBuilder.__dict__["create"]
    create_fn = original_create.__func__
    act = C.collective.NEEDS_BACKPORT

    def wrap_hook(self: Any, value: Any) -> Any:
        if act and C.collective.needs_resolving(self.source, value):
            return C.collective.wrap_resolved(self.tx, self.source, value)
        tracker = build(self.tx, value, self.source)
        if tracker is not None:
            return tracker
        return original_wrap(self, value)

    def create(tx: Any, value: Any) -> Any:
        tracker = build(tx, value)
        if tracker is not None:
            return tracker
        return create_fn(tx, value)

    def fast_handler(tx: Any, value: Any) -> Any:
        return build(tx, value)

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

    wrap_hook.__wrapped__ = original_wrap  # type: ignore[attr-defined]
    create.__wrapped__ = original_create  # type: ignore[attr-defined]
    fast_handler.__dynamo_dist_handler__ = True  # type: ignore[attr-defined]
    p.set(C.VariableBuilder, "_wrap", wrap_hook)
    p.set(C.SourcelessBuilder, "create", staticmethod(create))
    table = C.SourcelessBuilder._type_handlers
    for t in tracked_types.fast_types():
        p.set_item(table, t, fast_handler)
    p.set(C.TensorVariable, "call_method", call_method)
    p.set(C.TensorVariable, getattr_slot, var_getattr)


def _aot_patches(p: Patches) -> None:
    """The AOTAutograd fixes of ``aot/``."""
    wrappers = C.aot_runtime_wrappers
    p.set(wrappers, "gen_alias_from_base", alias.with_dtensor_fallback(wrappers.gen_alias_from_base))
    if C.aot.RNG_STATES_HOOK_POINT is not None:
        owner, name = C.aot.RNG_STATES_HOOK_POINT
        p.set(owner, name, rng_states.rng_states_before_saved_objects(getattr(owner, name)))
    if C.AOT_CODEGEN_HOOK_POINT is not None:
        owner, name = C.AOT_CODEGEN_HOOK_POINT
        p.set(owner, name, _runtime_only_generated(getattr(owner, name)))
    if C.UNFLATTEN_LOSES_SHARD_ORDER_FLAG:
        p.set(*C.DTENSOR_UNFLATTEN_POINT, staticmethod(C.dtensor_unflatten))


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


def _jump_patches(p: Patches) -> None:
    """``C.JUMP_HOOKS`` in every tracer class's opcode table (each class
    keeps its own copy, made when the class was)."""
    for cls, table in C.opcode_tables():
        for name, (jump_when, keep) in C.JUMP_HOOKS.items():
            op = C.opcode_number(name)
            if op is not None and table[op] is not None:
                table[op] = _jump_hook(table[op], jump_when, keep)
        p.set(cls, "dispatch_table", table)


def _jump_hook(original: Any, jump_when: bool, keep: bool) -> Any:
    """A conditional jump (``C.JUMP_HOOKS``) on one of our trackers takes its
    truth from the tracker (``vt_bool``); anything else jumps as before."""
    def jump(self: Any, inst: Any) -> Any:
        value = C.stack_top(self)
        if folds_builtin((value,), "vt_bool"):
            return C.take_jump(self, inst, jump_when, bool(value.vt_bool(self).as_python_constant()), keep)
        return original(self, inst)

    return jump


def _identity_compare(original: Any) -> Any:
    """Dynamo's ``vt_identity_compare`` (2.12+): ``is`` with one of our
    trackers is ``identity.fold_is``'s."""
    def vt_identity_compare(left: Any, right: Any) -> Any:
        answer = identity.fold_is_tracker(left, right)
        return answer if answer is not None else original(left, right)

    return vt_identity_compare


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


def _collective_patches(p: Patches) -> None:
    """The backport of 2.14's fix for inputs that are sometimes an
    AsyncCollectiveTensor (``_compat/collective.py``): its guard source, the
    name guard code calls it by, and the class observations that must put
    the class guard back."""
    col = C.collective
    original_manager = col.GuardBuilder.get_guard_manager_from_source

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
    col.clear_builtin_handlers()  # builtin handlers are cached with the method they were built from
