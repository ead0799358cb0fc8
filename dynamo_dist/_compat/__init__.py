"""The one place that knows torch-version differences.

Everything dynamo_dist needs from Dynamo's internals is imported here, so a
torch upgrade is a change to this file (and to ``_hooks.py`` if the hook
points move), not a hunt through the package.

torch 2.13 facts this module encodes:
- VariableTrackers use CPython-slot-style methods (``hash_impl``,
  ``richcompare_impl``, ``mp_subscript_impl``, ``call_obj_hasattr``); older
  releases used ``is_python_hashable`` / ``get_python_hash``.
- Distributed types are registered as opaque objects, with per-member tables
  in ``torch._library.opaque_object``.
"""

from __future__ import annotations

from typing import Any

import torch
from torch._dynamo.bytecode_transformation import create_call_function  # noqa: F401
from torch._dynamo.exc import raise_observed_exception, unimplemented  # noqa: F401
from torch._dynamo.guards import GuardBuilder, install_guard  # noqa: F401
from torch._dynamo.source import AttrSource  # noqa: F401
from torch._dynamo.variables.base import VariableTracker  # noqa: F401
from torch._dynamo.variables.builder import (  # noqa: F401
    SourcelessBuilder,
    VariableBuilder,
)
from torch._dynamo.variables.constant import ConstantVariable  # noqa: F401
from torch._dynamo.variables.lists import BaseListVariable  # noqa: F401
from torch._dynamo.variables.misc import GetAttrVariable  # noqa: F401
from torch._dynamo.variables.tensor import TensorVariable  # noqa: F401
from torch._dynamo.variables.builder import wrap_fx_proxy  # noqa: F401
from torch._functorch._aot_autograd import runtime_wrappers as aot_runtime_wrappers  # noqa: F401

TORCH_VERSION = torch.__version__.split("+")[0]
SUPPORTED = TORCH_VERSION.startswith("2.13.")


def check_supported() -> None:
    """dynamo_dist hooks Dynamo internals that change between releases."""
    if not SUPPORTED or not hasattr(VariableTracker, "richcompare_impl"):
        raise RuntimeError(
            f"dynamo_dist supports torch 2.13.x, found torch {torch.__version__}. "
            "Install torch==2.13.0, or leave dynamo_dist uninstalled on this torch."
        )


def stock_member_kind(cls: type, name: str) -> str | None:
    """How stock torch treats ``cls.name`` when it is a registered opaque type.

    Returns "use_real" (evaluated on the real object and baked), "inlined"
    (traced), or None when stock does not list the member.
    """
    try:
        from torch._library.opaque_object import MemberType, get_member_type
    except ImportError:  # pragma: no cover - older torch
        return None
    for klass in cls.__mro__:
        try:
            kind = get_member_type(klass, name)
        except Exception:
            kind = None
        if kind is not None:
            return {MemberType.USE_REAL: "use_real", MemberType.INLINED: "inlined"}.get(
                kind, str(kind).lower()
            )
    return None


def current_tx() -> Any:
    from torch._dynamo.symbolic_convert import InstructionTranslator

    return InstructionTranslator.current_tx()


def compile_on_one_rank() -> bool:
    import torch.distributed.config as dist_config

    return bool(getattr(dist_config, "compile_on_one_rank", False))


def runtime_coordinate_op() -> Any:
    """The custom op stock uses to compute a mesh coordinate at run time."""
    from torch.distributed._ops import device_mesh as _ops  # noqa: F401  (registers)

    return torch.ops.device_mesh._runtime_compute_coordinate_on_dim


def mesh_dim_group_names(mesh: Any) -> tuple[str, ...]:
    return tuple(mesh._dim_group_names)


def mesh_rank_map(mesh: Any) -> tuple[int, ...]:
    # DeviceMesh.__init__ keeps the rank map as a tuple already (for its
    # hash): reading it costs nothing, converting the tensor ~0.7 us, which
    # the mesh guard's fingerprint path pays on every equal new mesh object.
    flat = getattr(mesh, "_flatten_rank_map", None)
    return flat if isinstance(flat, tuple) else tuple(mesh._rank_map.tolist())


def mesh_layout_key(mesh: Any) -> Any:
    # _MeshLayout is an immutable, hashable value (sizes and strides per dim).
    return mesh._layout


def mesh_full_tensor_list(mesh: Any) -> list:
    """The (batch, *mesh.shape) rank tensor stock feeds the runtime op."""
    return mesh._layout.remap_to_tensor(mesh._rank_map).tolist()
