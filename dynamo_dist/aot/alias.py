"""Outputs that are views of DTensor inputs, regenerated at run time.

AOTAutograd rebuilds a graph output that aliases a graph input by replaying
the view on the real input; for a DTensor output it has no view record and
falls back to ``as_strided``, which DTensor does not support, so stock torch
2.13 crashes at run time ("as_strided not supported with DTensor") on
``return x.t()``. The view is rebuilt here on the *local* tensor, whose
metadata the trace recorded, and wrapped back as a DTensor through the
differentiable ``to_local``/``from_local`` pair so gradients still reach the
input. ``_hooks/core.py`` installs this as a fallback around AOTAutograd's own
function.

torch 2.14+ no longer crashes in the forward: DTensor's ``as_strided``
handler accepts a pure permutation (``x.t()``). But the output then carries
an ``AsStridedBackward`` node, and its backward calls ``as_strided`` on a
flat DTensor gradient, which DTensor refuses ("as_strided not supported with
DTensor" from ``.backward()``). A DTensor alias that AOTAutograd built with
``as_strided`` and that autograd records is therefore rebuilt here too, so
its backward runs through ``to_local``/``from_local`` on every release.
"""

from __future__ import annotations

from typing import Any, Callable

from torch.distributed.tensor import DTensor

from .. import _compat as C


def is_dtensor_as_strided_failure(error: BaseException, base: Any) -> bool:
    return isinstance(base, DTensor) and "as_strided not supported with DTensor" in str(error)


def regenerate_dtensor_alias(base: Any, target_meta: Any, target_requires_grad: bool) -> Any:
    local_meta = C.distributed.dtensor_local(target_meta)
    local = base.to_local() if base.requires_grad else C.distributed.dtensor_local(base)
    out_local = local.as_strided(local_meta.size(), local_meta.stride(), local_meta.storage_offset())
    out = DTensor.from_local(
        out_local, target_meta.device_mesh, target_meta.placements,
        shape=target_meta.shape, stride=target_meta.stride(),
    )
    if out.requires_grad and not target_requires_grad:
        out = out.detach()
    return out


def has_dtensor_as_strided_backward(out: Any, base: Any) -> bool:
    """``out`` is a DTensor view of ``base`` whose autograd node is
    ``as_strided``'s: its backward cannot run on DTensor gradients."""
    grad_fn = getattr(out, "grad_fn", None)
    return (isinstance(base, DTensor) and isinstance(out, DTensor) and grad_fn is not None
            and type(grad_fn).__name__.startswith("AsStridedBackward"))


def with_dtensor_fallback(original: Callable[..., Any]) -> Callable[..., Any]:
    def gen_alias_from_base(aliased_base_tensor: Any, target_meta_tensor: Any, target_requires_grad: bool,
                            *args: Any, **kwargs: Any) -> Any:
        try:
            out = original(aliased_base_tensor, target_meta_tensor, target_requires_grad, *args, **kwargs)
        except RuntimeError as e:
            if not is_dtensor_as_strided_failure(e, aliased_base_tensor):
                raise
            return regenerate_dtensor_alias(aliased_base_tensor, target_meta_tensor, target_requires_grad)
        if has_dtensor_as_strided_backward(out, aliased_base_tensor) and isinstance(target_meta_tensor, DTensor):
            return regenerate_dtensor_alias(aliased_base_tensor, target_meta_tensor, target_requires_grad)
        return out

    gen_alias_from_base.__wrapped__ = original  # type: ignore[attr-defined]
    return gen_alias_from_base
