"""AOTAutograd's partitioner: where the RNG states of a checkpointed random
op go among the values the forward saves for backward.

Under activation checkpointing, ``functionalize_rng_ops`` saves the RNG state
of each random op the backward recomputes (SDPA counts as one on 2.12 /
2.13) and inserts it among the forward's outputs just before the trailing
symints. But the partitioner puts the opaque objects the backward needs (a
DTensor's ``DeviceMesh``) after the symints, so the state lands after the
mesh, and the runtime, which reads saved tensors as every saved value before
the trailing opaque objects and symints, takes the mesh for a tensor: "expected
all tensors_saved_with_vc_check to be Tensors" on the first forward (stock
2.12 / 2.13, a TP block with SDPA under any activation checkpointing). The
fix inserts the states before every trailing symint and opaque object, and
moves the matching backward inputs before the saved opaque objects, which is
the order the runtime passes them in (symints, tensors, opaque objects,
gradients). Where neither is saved it changes nothing.
"""

from __future__ import annotations

from typing import Any, Callable

from .. import _compat as C


def _trailing_non_tensors(outputs: tuple) -> int:
    count = 0
    for node in reversed(outputs):
        if not (C.aot.is_sym_node(node) or C.aot.is_opaque_node(node)):
            break
        count += 1
    return count


def rng_states_before_saved_objects(functionalize_rng_ops: Callable[..., Any]) -> Callable[..., Any]:
    """``functionalize_rng_ops`` with the saved RNG states placed among the
    saved tensors (see the module docstring)."""
    def functionalize(joint_module: Any, fw_module: Any, bw_module: Any, num_sym_nodes: int) -> Any:
        fw_outputs = next(iter(fw_module.graph.find_nodes(op="output"))).args[0]
        inputs_before = set(bw_module.graph.find_nodes(op="placeholder"))
        trailing = max(num_sym_nodes, _trailing_non_tensors(tuple(fw_outputs)))
        fw_module, bw_module = functionalize_rng_ops(joint_module, fw_module, bw_module, trailing)
        inputs = list(bw_module.graph.find_nodes(op="placeholder"))
        states = [p for p in inputs if p not in inputs_before]
        first_object = next((p for p in inputs if p in inputs_before and C.aot.is_opaque_node(p)), None)
        if states and first_object is not None:
            for state in states:
                first_object.prepend(state)
            bw_module.recompile()
        return fw_module, bw_module

    return functionalize
