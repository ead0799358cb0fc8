"""Whether the AOTAutograd key holds everything a subgraph does.

The key pickles a Dynamo graph with its subgraphs (a custom Function's
bodies, a checkpointed region): each as its generated code and the imports
that code names. The cache checks the call targets of the top-level graph
only (``check_node_safe``): a subgraph calling a function the code names by
its import path alone (a user function allowed in the graph), or holding a
tensor as an attribute (the key pickles its shape, not its values), is keyed
by less than it does. ``refusal`` holds a subgraph to the top-level rule,
and its constants to what the generated code writes out in full.
"""

from __future__ import annotations

import enum
from typing import Any, Iterator

import torch
from torch.fx import GraphModule, Node

from .. import _compat as C

_WRITTEN_OUT = (type(None), bool, int, float, complex, str, bytes, torch.dtype, torch.device, torch.layout,
                torch.memory_format)


def nodes(gm: GraphModule) -> Iterator[tuple[GraphModule, Node]]:
    """Every node of ``gm`` and of the graphs inside it, with its graph."""
    for module in gm.modules():
        if isinstance(module, GraphModule):
            for node in module.graph.nodes:
                yield module, node


def is_function_call(node: Node) -> bool:
    """A custom ``autograd.Function`` call (``autograd_functions`` examines those)."""
    return node.op == "call_function" and node.target is C.caches.AUTOGRAD_FUNCTION_APPLY


def refusal(graph: Any, where: str) -> str | None:
    """Why the key does not hold all that ``graph`` (named ``where``) and
    the graphs inside it do, or None."""
    if not isinstance(graph, GraphModule):
        return f"{where} is a {type(graph).__qualname__}, not a traced graph"
    for module, node in nodes(graph):
        if is_function_call(node):
            continue  # examined as a call of its own
        if node.op == "get_attr":
            attr = _attribute(module, node.target)
            if not isinstance(attr, GraphModule):
                return (f"{where} holds `{node.target}`, a {type(attr).__qualname__} whose value the key does not "
                        "hold (for a tensor: only its shape and dtype)")
        elif node.op in ("call_function", "call_method", "call_module"):
            if node.target is C.caches.FUNCTION_CTX:
                return f"{where} builds an autograd.Function ctx object as a value"
            if C.caches.node_refusal(node):
                return f"{where} calls {_target_name(node)}, which the cache does not accept in a graph"
            if not spelled_out((node.args, node.kwargs)):
                return f"{where} passes a constant the key cannot spell out to {_target_name(node)}"
    return None


def spelled_out(value: Any) -> bool:
    """Whether every leaf of ``value`` is a node or a constant the generated
    code writes out in full (so it is in the key): numbers, strings, dtypes,
    devices, layouts, memory formats, and containers and slices of them. Any
    other object is written as its ``repr`` or an import path (a mesh's repr
    leaves out its groups; an enum is named, its value is not)."""
    if isinstance(value, Node) or value is Ellipsis:
        return True
    if isinstance(value, (tuple, list)):
        return all(spelled_out(v) for v in value)
    if isinstance(value, dict):
        return all(isinstance(k, str) and spelled_out(v) for k, v in value.items())
    if isinstance(value, slice):
        return all(spelled_out(v) for v in (value.start, value.stop, value.step))
    return isinstance(value, _WRITTEN_OUT) and not isinstance(value, enum.Enum)


def _attribute(module: GraphModule, target: str) -> Any:
    found: Any = module
    for name in target.split("."):
        found = getattr(found, name, None)
    return found


def _target_name(node: Node) -> str:
    target = node.target
    if isinstance(target, str):
        return f"`.{target}`"
    return f"`{getattr(target, '__module__', None)}.{getattr(target, '__qualname__', target)}`"
