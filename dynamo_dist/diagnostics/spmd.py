"""spmd_types in explain: each graph's inputs and outputs with their SPMD
types on each mesh axis, and each ``spmd.*`` call with the functional
collectives it became, at the user's line that called it.

The types are those the checker left on the traced tensors while the frame
was traced (the plugin runs the checker's own rules at trace time,
``variables/spmd_run.py``): an input's are its own, an output's those the
frame set on it (Dynamo's pending attribute writes). They are read here,
never recomputed. A call is found from the stack Dynamo records on each
graph node: the user's frame that called into spmd_types.
"""

from __future__ import annotations

import linecache
import re
from typing import Any

import torch
import torch.fx

from .. import _compat as C
from .breaks import is_user_file
from .graphs import collective_nodes
from .guard_terms import strip_scope
from .report import SpmdCall, SpmdGraph, SpmdTensor

S = C.spmd

_FRAME = re.compile(r'File "(?P<file>[^"]+)", line (?P<line>\d+), in (?P<fn>\S+)')


def graph_types(gm: torch.fx.GraphModule) -> SpmdGraph | None:
    """The SPMD types of ``gm``'s tensor inputs and outputs, read while its
    frame is traced (the recording backend's call); None when the program
    has not imported spmd_types, or no checker is on and no tensor is typed."""
    if S.facts() is None:
        return None
    state = S.capture()
    names = S.axis_names(state)
    tx = C.dynamo.tracing_tx()
    pending = C.dynamo.pending_attributes_by_node(tx, S.TYPE_ATTRS) if tx is not None else {}
    by_node: dict[torch.fx.Node, tuple[Any, Any]] = {}
    graph = SpmdGraph(checker=("local" if state.local else "global") if state.mode is not None else "off",
                      axes=S.group_axis_names(state))
    nodes = list(gm.graph.nodes)
    for node in nodes:
        if node.op != "placeholder":
            continue
        grapharg = node.meta.get("grapharg")
        try:
            real = grapharg.example if grapharg is not None else None
        except Exception:  # a weak reference that died
            real = None
        if not isinstance(real, torch.Tensor):
            continue
        by_node[node] = S.tensor_types(real)
        source = getattr(grapharg, "source", None)
        name = strip_scope(source.name) if source is not None else node.name
        graph.inputs.append(_tensor(name, "input", by_node[node], names))
    output = next((n for n in reversed(nodes) if n.op == "output"), None)
    outs = output.args[0] if output is not None else ()
    for out in outs if isinstance(outs, (tuple, list)) else (outs,):
        if not isinstance(out, torch.fx.Node) or not isinstance(out.meta.get("example_value"), torch.Tensor):
            continue
        local_type, spec = by_node.get(out, (None, None))
        written = pending.get(out, {})
        types = (written.get(S.LOCAL_TYPE_ATTR, local_type), written.get(S.PARTITION_SPEC_ATTR, spec))
        graph.outputs.append(_tensor(out.name, "output", types, names))
    typed = any(t.types or t.spec for t in (*graph.inputs, *graph.outputs))
    return graph if state.mode is not None or typed else None


def _tensor(name: str, role: str, types: tuple[Any, Any], names: dict[Any, str]) -> SpmdTensor:
    local_type, spec = types
    return SpmdTensor(name=name, role=role, types=S.per_axis_types(local_type, spec, names),
                      spec=S.spec_text(spec, names))


def spmd_calls(gm: torch.fx.GraphModule, stage: str) -> list[SpmdCall]:
    """Each ``spmd.*`` call in ``gm`` with the collectives it became, in
    graph order; one entry per (user line, function)."""
    root = S.package_dir()
    if root is None:
        return []
    calls: dict[tuple[str, int, str], SpmdCall] = {}
    for node, collective in collective_nodes(gm, stage, waits=False):
        called = _caller(node.meta.get("stack_trace") or "", root)
        if called is None:
            continue
        key = called
        if key not in calls:
            file, line, function = called
            calls[key] = SpmdCall(function=f"spmd.{function}", file=file, line=line, stage=stage,
                                  code=linecache.getline(file, line).strip())
        calls[key].collectives.append(collective)
    return list(calls.values())


def _caller(stack_trace: str, root: str) -> tuple[str, int, str] | None:
    """(the user's file, line, the spmd_types function it called): the
    innermost user frame that calls into spmd_types, from a node's stack."""
    frames = [(m.group("file"), int(m.group("line")), m.group("fn")) for m in _FRAME.finditer(stack_trace)]
    found = None
    for outer, inner in zip(frames, frames[1:]):
        if is_user_file(outer[0]) and inner[0].startswith(root):
            found = (outer[0], outer[1], inner[2])
    return found


def add_calls(graph: SpmdGraph | None, calls: list[SpmdCall], post_aot: bool) -> SpmdGraph | None:
    """``graph`` with ``calls`` of one stage (the post-AOT graphs' calls
    replace the Dynamo graph's, as their collectives do)."""
    if not calls and graph is None:
        return None
    if graph is None:
        state = S.capture()
        graph = SpmdGraph(checker="off", axes=S.group_axis_names(state))
    if post_aot:
        graph.calls = [c for c in graph.calls if c.stage != "dynamo"]
    graph.calls.extend(calls)
    return graph

