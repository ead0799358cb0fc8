"""Rank-dependent answers as graph computations (``compile_on_one_rank``).

Under ``torch.distributed.config.compile_on_one_rank`` a rank, local rank or
coordinate must not be baked into the graph: it becomes the same runtime op
stock DTensor uses (``device_mesh::_runtime_compute_coordinate_on_dim``), fed
the mesh's constant rank table, so every rank traces an identical graph.
"""

from __future__ import annotations

from typing import Any

import torch

from .. import _compat as C


def _coordinate_at_runtime(full_mesh: tuple, index: int) -> Any:
    rank_table = torch.tensor(full_mesh, dtype=torch.int)
    return C.distributed.runtime_coordinate_op()(rank_table, index)


def runtime_coordinate(tx: Any, full_mesh: list, index: int) -> Any:
    """A SymInt in the graph: this rank's coordinate along ``index`` of the
    (batch, *shape) rank table ``full_mesh``."""
    C.distributed.runtime_coordinate_op()  # make sure the op is registered before tracing
    return C.dynamo.inline_call(
        tx, _coordinate_at_runtime, [C.dynamo.constant(_to_tuple(full_mesh)), C.dynamo.constant(index)], {}
    )


def runtime_rank_in(tx: Any, ranks: list[int]) -> Any:
    """This process's position within ``ranks`` (its rank in that group)."""
    return runtime_coordinate(tx, [list(ranks)], 0)


def _to_tuple(x: Any) -> Any:
    return tuple(_to_tuple(i) for i in x) if isinstance(x, list) else x


def _int_tensor(values: tuple) -> Any:
    return torch.tensor(values, dtype=torch.int)


def tensor_in_graph(tx: Any, values: list) -> Any:
    """``torch.tensor(values)`` as a graph op (values are trace-time constants)."""
    return C.dynamo.inline_call(tx, _int_tensor, [C.dynamo.constant(_to_tuple(values))], {})
