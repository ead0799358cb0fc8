"""Tracked objects (a mesh) that an AOTAutograd graph holds as constants.

A DTensor made in the graph from a plain tensor (``DTensor.from_local(x,
mesh, ...)``, the mesh folded in, as the plugin traces it) has no graph input
for its mesh: in the forward the mesh is a constant. When that output
requires grad, AOTAutograd traces the joint graph with the output's tangent,
a DTensor on the same mesh object, among its placeholders. The proxy tracer
keeps the first graph value it meets for an object (primals come first,
which is right where the mesh is a primal), so the forward output's mesh
becomes the tangent's placeholder and the partitioner refuses the graph:
"Node tangents_2 was invalid, but is output". Stock lifts every mesh as a
graph input (a primal), so it never meets this; a graph that ends just after
a tensor-parallel input hook (``from_local`` on an activation that requires
grad) always does.

The fix, before the partition function runs: every forward output that is a
tangent's object, or is computed from one, becomes that object itself, a
constant of the graph, as the forward-only trace makes it (``get_attr``); so
does every use of such a placeholder by a node the forward outputs need.
The backward's uses of the tangent stay. Where no forward output needs a
tangent's object (every graph stock makes) nothing changes.

The same DTensor output, when nothing requires grad, leaves the forward with
the mesh as a constant the tracer stows away; it stows the fake wrapper it
traced with (a ``FakeScriptObject``), so the compiled graph returned the
wrapper, and the DTensor the user got had a ``FakeScriptObject`` for its
``device_mesh`` (stock: the mesh itself, a graph input), which inductor's FX
graph cache cannot save either ("cannot pickle ProcessGroup"). A constant of a
tracked type is stowed as the object itself (``real_object_constants``), as
the rewrite above makes it.
"""

from __future__ import annotations

from typing import Any, Callable

from .. import _compat as C
from .. import tracked_types


def _needed_by(outputs: list[Any]) -> set[Any]:
    """The nodes ``outputs`` are computed from, themselves included."""
    seen: set[Any] = set()
    stack = [n for n in outputs if C.aot.is_fx_node(n)]
    while stack:
        node = stack.pop()
        if node in seen:
            continue
        seen.add(node)
        stack.extend(node.all_input_nodes)
    return seen


def bake_tangent_objects(joint: Any, num_fwd_outputs: int) -> int:
    """Rewrite ``joint`` (see the module docstring); returns how many tangent
    placeholders the forward no longer reads."""
    graph = joint.graph
    output = next(iter(graph.find_nodes(op="output")))
    leaves, spec = C.aot.tree_flatten(output.args)
    forward = leaves[:num_fwd_outputs]
    needed = _needed_by(forward)
    tangents = [n for n in graph.find_nodes(op="placeholder")
                if n in needed and C.aot.is_tangent(n) and C.aot.object_of(n) is not None]
    if not tangents:
        return 0
    first = next(n for n in graph.nodes if n.op != "placeholder")
    for tangent in tangents:
        with graph.inserting_before(first):
            constant = C.aot.constant_node(joint, C.aot.object_of(tangent), tangent.meta)
        for user in list(tangent.users):
            if user in needed and user is not output:
                user.replace_input_with(tangent, constant)
        forward = [constant if leaf is tangent else leaf for leaf in forward]
    output.args = C.aot.tree_unflatten(forward + leaves[num_fwd_outputs:], spec)
    graph.lint()
    joint.recompile()
    return len(tangents)


def forward_objects_not_from_tangents(partition_joint: Callable[..., Any]) -> Callable[..., Any]:
    """AOTAutograd's ``_partition_joint_graph_into_fw_bw`` whose partition
    function first rewrites the joint graph (``bake_tangent_objects``)."""
    partition_joint_graph = C.aot.with_partition_fn(partition_joint, _baking)
    partition_joint_graph.__wrapped__ = partition_joint  # type: ignore[attr-defined]
    return partition_joint_graph


def _baking(partition_fn: Callable[..., Any]) -> Callable[..., Any]:
    def partition(joint: Any, joint_inputs: Any, *args: Any, num_fwd_outputs: int, **kwargs: Any) -> Any:
        bake_tangent_objects(joint, num_fwd_outputs)
        return partition_fn(joint, joint_inputs, *args, num_fwd_outputs=num_fwd_outputs, **kwargs)

    return partition


def real_object_constants(create_arg: Callable[..., Any]) -> Callable[..., Any]:
    """The proxy tracer's ``create_arg``: a fake wrapper of a tracked object
    that the graph stows as a constant (it has no graph value of its own)
    holds the object itself."""
    def stow(self: Any, a: Any) -> Any:
        node = create_arg(self, a)
        real = C.aot.fake_object_of(a)
        if real is not None and tracked_types.find(real) is not None and C.aot.is_fx_node(node) \
                and node.op == "get_attr" and C.aot.attribute_of(self, node) is a:
            C.aot.set_attribute_of(self, node, real)
        return node

    stow.__wrapped__ = create_arg  # type: ignore[attr-defined]
    return stow


def group_copied_as_itself(group: Any, memo: dict) -> Any:
    """``ProcessGroup.__deepcopy__``: the group itself. AOTAutograd copies a
    backward graph before compiling it, at once where the forward saves a
    symbol for the backward (a rank computed at run time under
    ``compile_on_one_rank``) and at the first backward otherwise; a graph
    holding a group as a constant (an ``autograd.Function``'s backward
    collective on its group, as spmd_types' are) then failed with "cannot
    pickle ProcessGroup" in the backward. A group is a handle on its
    communicators: the copied graph runs its collectives on the same one,
    as the graph it was copied from."""
    return group

