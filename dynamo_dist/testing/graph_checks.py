"""Find distributed objects in an FX graph (there must be none)."""

from __future__ import annotations

from typing import Any

import torch
import torch.fx
from torch.utils._pytree import tree_flatten


def _is_distributed(value: Any) -> bool:
    from torch.distributed import ProcessGroup
    from torch.distributed.device_mesh import DeviceMesh
    from torch.distributed.tensor.placement_types import Placement

    if isinstance(value, type):
        return False
    return isinstance(value, (DeviceMesh, ProcessGroup, Placement))


def distributed_objects_in(gm: torch.fx.GraphModule) -> list[str]:
    """Describe every mesh, process group or placement appearing as a
    placeholder, constant argument, attribute or output of ``gm``."""
    found: list[str] = []
    for node in gm.graph.nodes:
        if node.op == "placeholder":
            example = node.meta.get("example_value", node.meta.get("val"))
            grapharg = node.meta.get("grapharg")
            if grapharg is not None:
                example = getattr(grapharg, "example", example)
            if _is_distributed(example) or (
                isinstance(node.type, type) and _is_distributed_type(node.type)
            ):
                found.append(f"placeholder {node.name}: {type(example).__name__}")
            continue
        if node.op == "get_attr":
            value = getattr(gm, node.target, None)
            if _is_distributed(value):
                found.append(f"get_attr {node.target}: {type(value).__name__}")
        elif node.op in ("call_function", "call_method") and _is_distributed(node.meta.get("example_value")):
            # e.g. ``getattr(dtensor, "device_mesh")``: a node whose value is a mesh
            found.append(f"{node.op} {node.name} computes a {type(node.meta['example_value']).__name__}")
        leaves, _ = tree_flatten((node.args, node.kwargs))
        for leaf in leaves:
            if _is_distributed(leaf):
                found.append(f"{node.op} {node.name} argument: {leaf!r}")
    return found


def _is_distributed_type(t: type) -> bool:
    from torch.distributed import ProcessGroup
    from torch.distributed.device_mesh import DeviceMesh
    from torch.distributed.tensor.placement_types import Placement

    return issubclass(t, (DeviceMesh, ProcessGroup, Placement))
