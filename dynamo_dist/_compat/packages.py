"""Dynamo's packages (torch's precompile), as compile once ships them between
the ranks of a job.

With ``caching_precompile`` on, every ``torch.compile``d function has a
``CompilePackage`` (``torch/_dynamo/package.py``) that Dynamo's frame
conversion (``ConvertFrameAssert.__call__``) fills with each frame it traces:
the frame's code, its guards as saved state, its resume functions and the
backends (``__compiled_fn_*``) the code calls. A package plus the backends'
artifacts (a bundled AOTAutograd entry each) is a ``PrecompileCacheEntry``,
what torch writes to ``<cache dir>/dynamo`` and loads when ``torch.compile``
is called. Here the same entry is made right after a frame was traced
(``packaged_entry``) and, in another process, installed into that process's
package for the same function (``adopt``) the way torch installs one read
from disk; ``loaded_code`` then gives the frame being converted the newest
variant whose rebuilt guards pass on its locals, which Dynamo runs as if it
had just traced it.

Facts read from 2.11-2.15 (the same names on all five): the package is the
converter's ``_package``; ``CompilePackage.initialize`` refuses a package
already initialized (``_initialized``); ``install`` first ``uninstall``\\s
what it installed before, then binds the globals (resume functions, backends,
import aliases) and loads each variant as a precompile entry that the frame
evaluator checks before its own cache; ``DynamoStore.load_cache_entry``
records the backends in ``PrecompileContext``, so a later save finds them.
"""

from __future__ import annotations

import hashlib
import pickle
import sys
import types
from typing import Any

from torch._dynamo.convert_frame import ConvertFrameAssert, get_compile_id
from torch._dynamo.package import (CompilePackage, DynamoCache, PrecompileCacheEntry, SerializedCode,
                                   load_guard_manager, load_guards_state)
from torch._dynamo.precompile_context import PrecompileContext
from torch._dynamo.types import GuardedCode, wrap_guarded_code

from .dynamo import precompile_caching

# Where Dynamo converts one frame (traces it and builds its guarded code).
FRAME_CONVERSION_POINT: tuple[Any, str] = (ConvertFrameAssert, "__call__")
RESUME_PREFIX = "torch_dynamo_resume_in_"

# Where ``torch.compile`` installs a package read from Dynamo's cache
# (``_TorchDynamoContext.__call__`` with ``caching_precompile``). torch
# catches only a RuntimeError there, then traces the function afresh. A saved
# guard can fail to rebuild with another error in a process whose state
# differs from the saving one: torch's CONSTANT_MATCH on a dict key read by
# position (``list(dict.keys(registry))[2]``) raises IndexError in a process
# whose registry holds fewer entries (HF transformers' output-capturing
# registry holds every model class built so far). Stock crashes inside
# ``torch.compile`` there, and its fallback would refuse the package as
# already initialized.
PACKAGE_INSTALL_POINT: tuple[Any, str] = (CompilePackage, "install")


class LoadedGuardError(RuntimeError):
    """A package read from Dynamo's cache could not be installed in this
    process; torch traces the function afresh."""


def install_or_trace(original: Any) -> Any:
    """``CompilePackage.install`` that, when installing fails with an error
    torch does not catch, undoes what it installed, leaves the package
    uninitialized and raises ``LoadedGuardError``, so ``torch.compile``
    traces the function as if its cache held nothing."""

    def install(self: Any, backends: Any) -> None:
        try:
            original(self, backends)
        except RuntimeError:
            raise
        except Exception as e:
            try:
                self.uninstall()
            finally:
                self._initialized = False
            raise LoadedGuardError(
                f"dynamo_dist: a saved entry of {getattr(self._innermost_fn, '__qualname__', self._innermost_fn)} "
                f"cannot be loaded in this process ({type(e).__name__}: {e}); it is traced again") from e

    install.__wrapped__ = original  # type: ignore[attr-defined]
    return install


def frame_package(converter: Any) -> Any | None:
    """The package ``converter`` records its frames into, under torch's
    precompile caching; else None."""
    if not precompile_caching():
        return None
    package = getattr(converter, "_package", None)
    if package is None or not package.is_initialized() or package._innermost_fn is None:
        return None
    return package


def code_identity(code: types.CodeType) -> str:
    """The same text for a code object in every process that has it (its
    module file's base name, qualified name, first line and bytecode)."""
    digest = hashlib.blake2b(code.co_code, digest_size=8).hexdigest()
    file = code.co_filename.rsplit("/", 1)[-1]
    return f"{file}:{getattr(code, 'co_qualname', code.co_name)}:{code.co_firstlineno}:{digest}"


def is_package_frame(package: Any, code: types.CodeType) -> bool:
    """``code`` is the package's function or one of its resume functions:
    the frames a package holds."""
    return code is package._innermost_fn.__code__ or code.co_name.startswith(RESUME_PREFIX)


def package_key(package: Any) -> str:
    return str(package.source_id)


def _entry_of(package: Any, code: types.CodeType) -> Any | None:
    found = package._codes.get(code)
    if found is not None:
        return found
    wanted = code_identity(code)
    for known, entry in package._codes.items():
        if code_identity(known) == wanted:
            return entry
    return None


def variants(package: Any, code: types.CodeType) -> int:
    """How many variants (guarded codes) of ``code`` the package holds."""
    entry = _entry_of(package, code)
    return 0 if entry is None or entry.bypassed else len(entry.guarded_codes)


def packaged_entry(package: Any, code: types.CodeType) -> tuple[bytes | None, str]:
    """The package with the backend artifacts it names, pickled as torch
    writes it to disk, or ``(None, why not)``."""
    entry = _entry_of(package, code)
    if entry is None or entry.bypassed or not entry.guarded_codes:
        return None, "Dynamo did not package this frame (its package was declined)"
    cache_entry = package.cache_entry()
    backends: dict[Any, Any] = {}
    for backend_id in cache_entry.backend_ids:
        artifact = PrecompileContext.serialize_artifact_by_key(backend_id)
        if artifact is None:
            return None, f"its backend {backend_id} saved no artifact (its AOTAutograd entry was not saved)"
        backends[backend_id] = artifact
    return pickle.dumps(PrecompileCacheEntry(cache_entry, backends)), ""


def adopt(package: Any, payload: bytes) -> None:
    """Install another process's package for the same function into
    ``package``, as ``torch.compile`` installs one read from Dynamo's cache."""
    shipped = pickle.loads(payload)
    if not isinstance(shipped, PrecompileCacheEntry):
        raise TypeError(f"expected a PrecompileCacheEntry, got {type(shipped).__name__}")
    for backend in shipped.backends.values():
        PrecompileContext.record_artifact(backend)
    fn = package._innermost_fn
    package.uninstall()
    package._initialized = False
    package.initialize(fn, shipped.dynamo, ignore_inlined_sources=False)
    try:
        package.install(shipped.backends)
    except Exception:  # left as a fresh package, which the frame then traces into
        package._initialized = False
        package.initialize(fn, None, ignore_inlined_sources=False)
        raise
    DynamoCache.record_package(package)


def loaded_code(package: Any, frame: Any, frame_state: dict) -> Any | None:
    """What the frame conversion returns for ``frame`` from the package: the
    newest variant of its code whose guards pass on the frame's locals, or
    None when none does."""
    entry = _entry_of(package, frame.f_code)
    if entry is None or entry.bypassed:
        return None
    scope = sys.modules[entry.python_module].__dict__
    for index in reversed(range(len(entry.guarded_codes))):
        saved = entry.guarded_codes[index]
        try:
            guard_manager = load_guard_manager(load_guards_state(saved.guards_state), frame.f_code, scope)
        except Exception:  # a guard this process cannot rebuild (see PACKAGE_INSTALL_POINT): not this variant
            continue
        if guard_manager.check(frame.f_locals):
            compile_id = get_compile_id(frame_state)
            code = SerializedCode.to_code_object(saved.dynamo_code)
            return wrap_guarded_code(GuardedCode(code, guard_manager, compile_id,
                                                 f"Torch-Compiled Region: {compile_id} (loaded)"))
    return None

