"""Custom ``autograd.Function`` calls the AOTAutograd cache can key.

Dynamo traces a custom Function (one whose inputs need gradients) into

    autograd_function_apply(fwd_body, bwd_body, *inputs,
                            non_differentiable_idx=[...], saved_for_backward_idx=[...],
                            dirty_idx=[...])       # dirty_idx: 2.13+, when forward marks dirty

``fwd_body`` and ``bwd_body`` are subgraphs Dynamo traced from ``forward``
and ``backward`` (both, at trace time, on torch 2.11-2.15). AOTAutograd
traces through the op: it runs the two bodies on fake tensors, and the
compiled forward and backward are made of what they contain; the user's
``forward`` and ``backward`` never run again. What the backward reads from
``ctx`` is resolved while Dynamo traces it: tensors saved in forward
(``save_for_backward`` or ``ctx.x = x``) become outputs of ``fwd_body`` and
inputs of ``bwd_body``; Python values (``ctx.scale``, ``ctx.needs_input_grad``,
a global) become constants in the body's code; a process group becomes its
group name in the collective (``all_reduce(g, 'sum', '1')``) and its size
or rank, if read, constants; ``mark_dirty`` becomes ``dirty_idx`` (2.13+) or
the in-place op in ``fwd_body`` (2.11, 2.12). The AOTAutograd key pickles the
graph module with its submodules' generated code and imports, so the bodies'
code, the indices and the inputs' metadata are in the key.

torch still refuses the op unless
``torch._functorch.config.autograd_cache_allow_custom_autograd_functions``
is set, and that global opt-in admits every Function without looking inside:
the cache checks the call targets of the top-level graph only, so a body
calling a function the key names only by its import path (a user function
allowed in the graph), or holding a tensor constant (the key holds its
shape, not its values), would be served stale (on 2.15, with the opt-in, a
backward calling an ``allow_in_graph`` function changed between two
processes got the first process's gradients). Here a graph's Functions are
admitted, for the computation of that graph's key only, when:

- every node of every body (and of the subgraphs inside it) calls a target
  the cache accepts in a top-level graph (``check_node_safe``: operators,
  public torch functions, the calls marked cacheable), or is another Function
  call meeting these conditions;
- a body's constants are values its code spells out (numbers, strings,
  dtypes, devices, lists of them; ``subgraphs.spelled_out``), and a body holds
  no attribute but its subgraphs;
- the op's own inputs are tensors or symbolic sizes, and its other
  arguments are such constants. Groups and meshes never reach a body as
  values with the plugin: what the body does with them is folded into its
  code: a group by its name (the group's identity in every key,
  ``keys.constant_identity``), its size and this rank, if read, as
  constants, and this rank is in every key besides (``keys.rank_tag``).
  A group of another job with the same name and other members gets the same
  code: its collectives find it by name when they run, and nothing else in
  the compiled graphs depends on its members;
- no graph builds a ``FunctionCtx`` as a value (the only other thing the
  opt-in admits).

Anything else keeps the bypass, with the first reason found. Node metadata
(annotations) is not in the key, for a body as for any graph: as stock.
"""

from __future__ import annotations

import contextlib
from dataclasses import dataclass
from typing import ContextManager

import torch
from torch.fx import GraphModule, Node

from .. import _compat as C
from . import subgraphs

_SYMBOLIC = (torch.SymInt, torch.SymFloat, torch.SymBool)


@dataclass
class Functions:
    """The custom Function calls of one graph, and whether to admit them."""

    calls: int = 0
    refusal: str | None = None

    def admission(self) -> ContextManager[None]:
        """What to compute the graph's key under: torch's opt-in when every
        call is keyed by what the key holds (and the user has not opted in)."""
        if self.calls and self.refusal is None and not C.caches.custom_functions_admitted_by_user():
            return C.caches.custom_functions_admitted()
        return contextlib.nullcontext()


def examine(gm: GraphModule) -> Functions:
    """The Function calls in ``gm`` and its subgraphs, and the first reason
    one of them is not keyed by what the key holds."""
    functions = Functions()
    for owner, node in subgraphs.nodes(gm):
        if subgraphs.is_function_call(node):
            functions.calls += 1
            functions.refusal = functions.refusal or _call_refusal(owner, node)
        elif node.op == "call_function" and node.target is C.caches.FUNCTION_CTX:
            functions.refusal = functions.refusal or "the graph builds an autograd.Function ctx object as a value"
    return functions


def examine_safely(gm: GraphModule) -> Functions:
    """``examine``, where a failure refuses (with the error) rather than
    failing the user's compile."""
    try:
        return examine(gm)
    except Exception as e:  # any failure here must only cost the cache entry
        return Functions(calls=1, refusal=f"dynamo_dist failed to examine it ({type(e).__name__}: {e})")


def _call_refusal(owner: GraphModule, node: Node) -> str | None:
    fwd, bwd, *inputs = node.args
    for value in inputs:
        if isinstance(value, Node):
            example = value.meta.get("example_value")
            if not isinstance(example, (torch.Tensor, *_SYMBOLIC)):
                return f"a Function's input `{value.name}` is a {type(example).__qualname__}, not a tensor"
        elif not subgraphs.spelled_out(value):
            return f"a Function's argument {value!r} is a constant the key cannot spell out"
    if not subgraphs.spelled_out(node.kwargs):
        return f"a Function's indices {node.kwargs!r} are not plain constants"
    for which, body in (("forward", fwd), ("backward", bwd)):
        if not (isinstance(body, Node) and body.op == "get_attr"):
            return f"a Function's {which} is not a traced subgraph"
        refusal = subgraphs.refusal(owner.get_submodule(body.target), f"a Function's {which} graph")
        if refusal:
            return refusal
    return None
