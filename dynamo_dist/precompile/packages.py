"""Dynamo's packages (torch's precompile): recorded, written, installed.

Each fix wraps one of torch's functions (its point in ``_compat/packages.py``,
where the facts each rests on are told in full):

- ``install_or_trace`` (``CompilePackage.install``): a saved entry that
  cannot be installed in this process, or that another function of the same
  key saved, is undone and the function traced as if the cache held nothing;
- ``record_merged`` (``DynamoCache.record_package``): the variants of every
  ``torch.compile`` wrapper of one function recorded together;
- ``write_merged`` (``DiskDynamoStore._write_to_local_cache``): an entry
  written into a cache dir that other processes share (torch's default, one
  per user on a host) merged with the one there, under a file lock;
- ``load_module_by_alias`` (``PyCodegen.create_load_python_module``): a module
  the frame's output loads, through an import alias the package records.
"""

from __future__ import annotations

import logging
from typing import Any

import filelock

from .. import _compat as C

log = logging.getLogger("dynamo_dist.packages")

ENTRY_LOCK_S = 120.0  # the longest a write waits for another process's write of the same entry


class LoadedGuardError(RuntimeError):
    """A package read from Dynamo's cache could not be installed in this
    process; torch traces the function afresh."""


def install_or_trace(original: Any) -> Any:
    """``CompilePackage.install`` that, when installing fails with an error
    torch does not catch or the saved entry belongs to another function,
    undoes what it installed, empties the package and raises
    ``LoadedGuardError``, so ``torch.compile`` traces the function as if its
    cache held nothing. A ``RuntimeError`` too (an ``SpmdTypeError`` of a
    rebuilt value): torch's own fallback for one initializes the package
    again, which a package it initialized before the install refuses
    (``AssertionError`` inside torch.compile)."""

    def install(self: Any, backends: Any) -> None:
        try:
            with C.packages.installing_here(self, backends) as installed:
                original(self, installed)
        except Exception as e:
            name = C.packages.package_function_name(self)
            C.packages.undo_install(self)
            raise LoadedGuardError(
                f"dynamo_dist: a saved entry of {name} "
                f"cannot be loaded in this process ({type(e).__name__}: {e}); it is traced again") from e

    install.__wrapped__ = original  # type: ignore[attr-defined]
    return install


def record_merged(original: Any) -> Any:
    """``DynamoCache.record_package`` that records the package's entry merged
    with the newest entries of the other packages of the same function
    (``C.packages.PACKAGE_RECORD_POINT``); torch's own where there is
    nothing to merge or the entries do not fit together."""

    def record_package(self: Any, package: Any) -> None:
        C.packages.before_record(package)
        original(self, package)
        C.packages.record_with_others(package)

    record_package.__wrapped__ = original  # type: ignore[attr-defined]
    return record_package


def write_merged(original: Any) -> Any:
    """``DiskDynamoStore._write_to_local_cache`` that merges the entry it
    writes with the one already at its path (``C.packages.ENTRY_WRITE_POINT``)."""

    def _write_to_local_cache(self: Any, pickled_content: bytes, path: str) -> None:
        where = C.packages.entry_path(self, path)
        try:
            C.packages.make_parent_dir(where)
            lock = filelock.FileLock(f"{where}.lock", timeout=ENTRY_LOCK_S)
            lock.acquire()
        except Exception as e:  # no lock (a read-only dir, a slow writer): torch's own write
            log.warning("dynamo_dist: writing Dynamo's entry %s without merging it with the saved one: %s", where, e)
            return original(self, pickled_content, path)
        try:
            return original(self, C.packages.merged_content(where, pickled_content), path)
        finally:
            lock.release()

    _write_to_local_cache.__wrapped__ = original  # type: ignore[attr-defined]
    return _write_to_local_cache


def load_module_by_alias(original: Any) -> Any:
    """``PyCodegen.create_load_python_module`` that, while the frame is
    recorded into a package, loads the module through a recorded import
    alias (``C.packages.MODULE_LOAD_POINT``); else torch's own."""

    def create_load_python_module(self: Any, mod: Any) -> Any:
        loaded = C.packages.module_loaded_by_alias(self, mod)
        return original(self, mod) if loaded is None else loaded

    create_load_python_module.__wrapped__ = original  # type: ignore[attr-defined]
    return create_load_python_module
