"""Collectives in an FX graph: functional collectives (``_c10d_functional``
ops, each followed by a ``wait_tensor``) name their group by string; the
group's ranks are looked up while the group exists (at compile time).

Bytes moved per rank follow the ring-algorithm convention of nccl-tests'
"bus bandwidth": for a group of g ranks and an input of S bytes, all_reduce
sends 2(g-1)/g·S per rank, all_gather (g-1)·S, reduce_scatter and
all_to_all (g-1)/g·S, broadcast S.
"""

from __future__ import annotations

from typing import Any

import torch
import torch.fx

from .report import Collective

_FACTOR = {
    "all_reduce": lambda g: 2 * (g - 1) / g,
    "all_reduce_coalesced": lambda g: 2 * (g - 1) / g,
    "all_gather_into_tensor": lambda g: g - 1,
    "all_gather_into_tensor_coalesced": lambda g: g - 1,
    "reduce_scatter_tensor": lambda g: (g - 1) / g,
    "reduce_scatter_tensor_coalesced": lambda g: (g - 1) / g,
    "all_to_all_single": lambda g: (g - 1) / g,
    "broadcast": lambda g: 1,
}


def _schema(target: Any) -> Any:
    if isinstance(target, torch._ops.OpOverload):
        return target._schema
    if isinstance(target, torch._ops.OpOverloadPacket):
        return target.default._schema
    return None


def _bound_args(node: torch.fx.Node, schema: Any) -> dict[str, Any]:
    bound = {}
    for i, arg in enumerate(schema.arguments):
        if i < len(node.args):
            bound[arg.name] = node.args[i]
        elif arg.name in node.kwargs:
            bound[arg.name] = node.kwargs[arg.name]
    return bound


def _meta(value: Any) -> Any:
    if isinstance(value, torch.fx.Node):
        return value.meta.get("val", value.meta.get("example_value"))
    return value


def group_ranks(group_name: str) -> list[int] | None:
    try:
        import torch.distributed as dist
        from torch.distributed.distributed_c10d import _resolve_process_group

        return list(dist.get_process_group_ranks(_resolve_process_group(group_name)))
    except Exception:  # group already destroyed, or not a c10d group
        return None


def _nbytes(tensors: list[Any]) -> int | None:
    total = 0
    for t in tensors:
        if not isinstance(t, torch.Tensor):
            return None
        try:
            total += int(t.numel()) * t.element_size()
        except Exception:  # a symbolic size
            return None
    return total


def collectives_in(gm: torch.fx.GraphModule, stage: str) -> list[Collective]:
    found = []
    for node in gm.graph.nodes:
        if node.op != "call_function":
            continue
        schema = _schema(node.target)
        if schema is None or "::" not in schema.name:
            continue
        namespace, op = schema.name.split("::", 1)
        if "c10d_functional" not in namespace or op == "wait_tensor":
            continue
        args = _bound_args(node, schema)
        group = args.get("group_name", args.get("tag", "?"))
        first = schema.arguments[0].name if schema.arguments else None
        inputs = _meta(args.get(first))
        tensors = [_meta(t) for t in inputs] if isinstance(inputs, (list, tuple)) else [inputs]
        ranks = group_ranks(group) if isinstance(group, str) else None
        size = len(ranks) if ranks else args.get("group_size")
        nbytes = _nbytes(tensors)
        per_rank = None
        if nbytes is not None and isinstance(size, int) and size > 0:
            per_rank = 0 if size == 1 else round(_FACTOR.get(op, lambda g: 1)(size) * nbytes)
        found.append(Collective(
            op=op,
            group=str(group),
            ranks=ranks,
            shape=[_shape(t) for t in tensors] if len(tensors) > 1 else _shape(tensors[0]),
            dtype=_dtype(tensors[0]),
            bytes_per_rank=per_rank,
            stage=stage,
        ))
    return found


def _shape(t: Any) -> list[Any]:
    return [int(s) if isinstance(s, int) else str(s) for s in t.shape] if isinstance(t, torch.Tensor) else []


def _dtype(t: Any) -> str:
    return str(t.dtype).replace("torch.", "") if isinstance(t, torch.Tensor) else "?"
