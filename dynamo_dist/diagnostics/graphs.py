"""The one place that reads FX graphs for the tools: the collectives in a
graph (with their groups, ranks, shapes, dtype and bytes; nested subgraphs
of higher-order ops included; ``wait_tensor`` and DTensor's synchronous
``shard_dim_alltoall`` counted) and the distributed objects that leaked into
a graph (rule 1: there must be none). ``explain``, the recording backend,
the numerics checks, the coverage cases, the fuzzing oracle, the demo and
the tests all use it.

Functional collectives (``_c10d_functional`` ops, each followed by a
``wait_tensor``) name their group by string; the group's ranks are looked up
while the group exists (at compile time).

Bytes moved per rank follow the ring-algorithm convention of nccl-tests'
"bus bandwidth": for a group of g ranks and an input of S bytes, all_reduce
sends 2(g-1)/g·S per rank, all_gather (g-1)·S, reduce_scatter and
all_to_all (g-1)/g·S, broadcast S.
"""

from __future__ import annotations

import ast
import operator
from dataclasses import dataclass, field
from typing import Any

import torch
import torch.fx
from torch.distributed import ProcessGroup
from torch.distributed.device_mesh import DeviceMesh
from torch.distributed.tensor.placement_types import Placement

from .._compat import observe as O
from .rank_lists import compact_ranks

__all__ = ["Collective", "collectives_in", "collective_nodes", "group_ranks", "distributed_objects_in"]

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

# Synchronous collective ops DTensor puts in graphs outside _c10d_functional
# (on CUDA, Shard(i) -> Shard(j) is an all-to-all through this op).
_SYNC_OPS = {("_dtensor", "shard_dim_alltoall")}
WAIT = "wait_tensor"


@dataclass(frozen=True)
class Collective:
    """One collective call in a graph: ``op`` is the op name (``"all_reduce"``,
    ``"wait_tensor"``, ...; ``_c10d_functional`` ops, and DTensor's
    ``shard_dim_alltoall``), ``group`` the group name it names (``None`` for
    ``wait_tensor``), ``waited`` whether its result goes to a ``wait_tensor``
    (``None`` for ``wait_tensor`` and for synchronous ops).

    The details (``ranks`` of the group (a ``start``/``stop``/``step``/``count``
    range past ``RANKS_LISTED`` evenly spaced ranks), input ``shape``, ``dtype``,
    ``bytes_per_rank``, the ``stage`` of the graph: ``"dynamo"``, ``"forward"``,
    ``"backward"``) describe the call; two collectives are equal when their
    op, group and ``waited`` are."""

    op: str
    group: str | None
    waited: bool | None = None
    ranks: list[int] | dict[str, int] | None = field(default=None, compare=False)
    shape: list[Any] = field(default_factory=list, compare=False)
    dtype: str = field(default="?", compare=False)
    bytes_per_rank: int | None = field(default=None, compare=False)
    stage: str = field(default="", compare=False)

    def __str__(self) -> str:
        return self.op if self.group is None else f"{self.op}[{self.group}]"


def group_ranks(group_name: str) -> list[int] | None:
    return O.resolve_group_ranks(group_name)


def _bound_args(node: torch.fx.Node, names: list[str]) -> dict[str, Any]:
    bound = {}
    for i, name in enumerate(names):
        if i < len(node.args):
            bound[name] = node.args[i]
        elif name in node.kwargs:
            bound[name] = node.kwargs[name]
    return bound


def _meta(value: Any) -> Any:
    if isinstance(value, torch.fx.Node):
        return value.meta.get("val", value.meta.get("example_value"))
    return value


def _group_of(args: dict[str, Any]) -> str | None:
    if "group_name" not in args:
        return None
    value = args["group_name"]
    if isinstance(value, str) or value is None:
        return value
    return getattr(value, "group_name", repr(value))


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


def _shape(t: Any) -> list[Any]:
    return [int(s) if isinstance(s, int) else str(s) for s in t.shape] if isinstance(t, torch.Tensor) else []


def _dtype(t: Any) -> str:
    return str(t.dtype).replace("torch.", "") if isinstance(t, torch.Tensor) else "?"


def _is_wait(node: torch.fx.Node) -> bool:
    return node.op == "call_function" and O.op_namespace_and_name(node.target) == ("_c10d_functional", WAIT)


def _collective(node: torch.fx.Node, op: str, names: list[str], waited: bool | None, stage: str) -> Collective:
    args = _bound_args(node, names)
    group = _group_of(args)
    inputs = _meta(args.get(names[0])) if names else None
    tensors = [_meta(t) for t in inputs] if isinstance(inputs, (list, tuple)) else [inputs]
    ranks = group_ranks(group) if isinstance(group, str) else None
    size = len(ranks) if ranks else args.get("group_size")
    nbytes = _nbytes(tensors)
    per_rank = None
    if nbytes is not None and isinstance(size, int) and size > 0:
        per_rank = 0 if size == 1 else round(_FACTOR.get(op, lambda g: 1)(size) * nbytes)
    return Collective(op, group, waited, ranks=compact_ranks(ranks),
                      shape=[_shape(t) for t in tensors] if len(tensors) > 1 else _shape(tensors[0]),
                      dtype=_dtype(tensors[0]) if tensors else "?", bytes_per_rank=per_rank, stage=stage)


def collectives_in(gm: torch.fx.GraphModule, stage: str = "", *, waits: bool = True) -> list[Collective]:
    """Every ``torch.ops._c10d_functional`` call (and DTensor's synchronous
    ``_dtensor.shard_dim_alltoall``) in ``gm``, in graph order, nested
    subgraphs included; ``waits=False`` leaves the ``wait_tensor`` calls out."""
    return [c for _, c in collective_nodes(gm, stage, waits=waits)]


def collective_nodes(gm: torch.fx.GraphModule, stage: str = "", *,
                     waits: bool = True) -> list[tuple[torch.fx.Node, Collective]]:
    """``collectives_in``, each with the node that calls it."""
    found: list[tuple[torch.fx.Node, Collective]] = []
    for module in gm.modules():
        if not isinstance(module, torch.fx.GraphModule):
            continue
        for node in module.graph.nodes:
            if node.op != "call_function":
                continue
            named = O.op_namespace_and_name(node.target)
            if named is None:
                continue
            namespace, op = named
            if named in _SYNC_OPS:
                found.append((node, _collective(node, op, O.op_schema_args(node.target) or [], None, stage)))
            elif namespace == "_c10d_functional":
                if op == WAIT:
                    if waits:
                        found.append((node, Collective(WAIT, None, stage=stage)))
                    continue
                # A coalesced op's results are waited through getitem.
                users = [u for user in node.users
                         for u in (user.users if user.target is operator.getitem else [user])]
                waited = any(_is_wait(user) for user in users)
                found.append((node, _collective(node, op, O.op_schema_args(node.target) or [], waited, stage)))
    return found


# -- the same, from a graph printed as code --------------------------------------------
# A graph loaded from the AOTAutograd cache is never traced in this process:
# what is left of it is its printed code, which torch logs to the structured
# trace (``O.aot_graph_event``). Lines read ``name: "f32[8, 4][4, 1]cpu" =
# torch.ops.<namespace>.<op>.<overload>(args...)``; the signature annotates
# the inputs the same way.

class _PrintedCall:
    """A call in a printed graph, shaped like the ``fx.Node`` ``_collective``
    reads: its arguments, tensors as meta tensors of their printed type."""

    def __init__(self, args: tuple, kwargs: dict) -> None:
        self.args, self.kwargs = args, kwargs


def _printed_tensor(annotation: str) -> Any:
    # "f32[8, 4][4, 1]cpu": dtype abbreviation, sizes, strides, device.
    head, _, rest = annotation.partition("[")
    dtype = O.dtype_named(head)
    sizes = rest.partition("]")[0]
    try:
        shape = [int(d) for d in sizes.split(",") if d.strip()]
    except ValueError:  # symbolic sizes: shape unknown
        return None
    return torch.empty(shape, dtype=dtype, device="meta") if dtype is not None else None


def _printed_value(node: ast.expr, tensors: dict[str, Any]) -> Any:
    if isinstance(node, ast.Name):
        return tensors.get(node.id)
    if isinstance(node, (ast.List, ast.Tuple)):
        return [_printed_value(e, tensors) for e in node.elts]
    try:
        return ast.literal_eval(node)
    except ValueError:
        return None


def _op_of(call: ast.Call) -> tuple[str, str, str] | None:
    # torch.ops.<namespace>.<op>.<overload>
    parts, node = [], call.func
    while isinstance(node, ast.Attribute):
        parts.append(node.attr)
        node = node.value
    if not (isinstance(node, ast.Name) and node.id == "torch" and len(parts) == 4 and parts[3] == "ops"):
        return None
    overload, op, namespace = parts[0], parts[1], parts[2]
    return namespace, op, overload


def collectives_in_printed(code: str, stage: str = "", *, waits: bool = True) -> list[Collective]:
    """``collectives_in`` of a graph given as its printed code (empty if the
    code does not parse)."""
    try:
        tree = ast.parse(code)
    except SyntaxError:
        return []
    forward = next((f for f in ast.walk(tree) if isinstance(f, ast.FunctionDef) and f.name == "forward"), None)
    if forward is None:
        return []
    tensors: dict[str, Any] = {}
    for arg in forward.args.args:
        if isinstance(arg.annotation, ast.Constant) and isinstance(arg.annotation.value, str):
            tensors[arg.arg] = _printed_tensor(arg.annotation.value)
    calls: list[tuple[str, ast.Call]] = []
    item_of: dict[str, str] = {}  # ``y = x[0]`` (a coalesced op's results): y -> x
    for stmt in forward.body:
        if isinstance(stmt, ast.AnnAssign):
            target, value = stmt.target, stmt.value
            if isinstance(target, ast.Name) and isinstance(stmt.annotation, ast.Constant) \
                    and isinstance(stmt.annotation.value, str):
                tensors[target.id] = _printed_tensor(stmt.annotation.value)
        elif isinstance(stmt, ast.Assign) and len(stmt.targets) == 1:
            target, value = stmt.targets[0], stmt.value
        else:
            continue
        if not isinstance(target, ast.Name):
            continue
        if isinstance(value, ast.Call):
            calls.append((target.id, value))
        elif isinstance(value, ast.Subscript) and isinstance(value.value, ast.Name):
            item_of[target.id] = value.value.id
    wait_args = [a.id for _, c in calls if (_op_of(c) or ())[:2] == ("_c10d_functional", WAIT)
                 for a in c.args if isinstance(a, ast.Name)]
    waited_names = {*wait_args, *(item_of[w] for w in wait_args if w in item_of)}
    found: list[Collective] = []
    for name, call in calls:
        named = _op_of(call)
        if named is None:
            continue
        namespace, op, overload = named
        target = O.op_named(namespace, op, overload)
        if (namespace, op) in _SYNC_OPS or namespace == "_c10d_functional":
            if op == WAIT:
                if waits:
                    found.append(Collective(WAIT, None, stage=stage))
                continue
            printed = _PrintedCall(tuple(_printed_value(a, tensors) for a in call.args),
                                   {k.arg: _printed_value(k.value, tensors) for k in call.keywords if k.arg})
            waited = None if (namespace, op) in _SYNC_OPS else name in waited_names
            found.append(_collective(printed, op, O.op_schema_args(target) or [], waited, stage))
    return found


# -- rule 1: no distributed object in a graph -----------------------------------------
def _distributed_types() -> tuple[type, ...]:

    return (DeviceMesh, ProcessGroup, Placement)


def _is_distributed(value: Any) -> bool:
    if isinstance(value, type):
        return False
    return isinstance(value, _distributed_types())


def _is_distributed_type(t: type) -> bool:
    return issubclass(t, _distributed_types())


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
        for leaf in O.tree_leaves((node.args, node.kwargs)):
            if _is_distributed(leaf):
                found.append(f"{node.op} {node.name} argument: {leaf!r}")
    return found
