"""FSDP2 modules and their classes in a saved frame's guards.

``fully_shard`` gives each module class ``C`` it wraps a class ``FSDP<C>``,
made the first time a module of ``C`` is sharded. torch's guard pickler
saves ``FSDP<C>`` as ``C`` and looks the class up again on load, which fails
in a process that loads the frame before sharding (torchtitan compiles each
block, then shards it); and it saves an FSDP2 module as pickle's default,
which loads as a ``C``, so the rebuilt class guard never passes. Both facts
in full above ``FSDP_TYPE_UNPICKLE_POINT`` and ``FSDP_MODULE_PICKLE_POINT``
in ``_compat/dynamo.py``.
"""

from __future__ import annotations

from typing import Any, Callable

from .. import _compat as C


def fsdp_type_made_on_load(original: Any) -> Any:
    """``GuardsStatePickler._unpickle_fsdp_module_type`` (a classmethod)
    that makes the FSDP class not made yet (``C.dynamo.fsdp_class``, as
    ``fully_shard`` makes it, into the same table: ``fully_shard`` then
    takes that class)."""

    def unpickle(cls: Any, original_type: type) -> type:
        return C.dynamo.fsdp_class(original_type)

    # torch pickles the bound method by its name: saving under the plugin stays loadable without it
    unpickle.__name__ = original.__func__.__name__
    unpickle.__qualname__ = original.__func__.__qualname__
    return classmethod(unpickle)


def fsdp_module_keeps_class(original: Callable[..., Any]) -> Callable[..., Any]:
    """``GuardsStatePickler.reducer_override`` that saves an FSDP2 module as
    ``copyreg._reconstructor`` of its class (``object.__new__``, then its
    state as before), so it loads as the FSDP class; that class is saved as
    before, and the stored entry stays loadable without the plugin."""

    def reducer_override(self: Any, obj: Any) -> Any:
        reduced = original(self, obj)
        if reduced is not NotImplemented:
            return reduced
        kept = C.dynamo.fsdp_module_reduction(obj)
        return reduced if kept is None else kept

    reducer_override.__wrapped__ = original  # type: ignore[attr-defined]
    return reducer_override
