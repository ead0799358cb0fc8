"""AOTAutograd's partitioner, as the RNG-state fix (``aot/rng_states.py``)
needs it: the function it wraps and the node kinds it reads."""

from __future__ import annotations

from typing import Any

from torch._functorch import partitioners as _partitioners

_is_opaque_node = getattr(_partitioners, "is_opaque_node", None)  # 2.12+ (2.11 saves no opaque objects)

# (module, name) of the function wrapped while installed, or None where
# nothing needs it (2.11: no opaque objects are saved for backward).
RNG_STATES_HOOK_POINT: tuple[Any, str] | None = (
    (_partitioners, "functionalize_rng_ops") if _is_opaque_node is not None else None)


def is_sym_node(node: Any) -> bool:
    return bool(_partitioners.is_sym_node(node))


def is_opaque_node(node: Any) -> bool:
    return _is_opaque_node is not None and bool(_is_opaque_node(node))
