"""The one notion of "the same result" (eager vs compiled), used by the
fuzzing oracle, the coverage cases, the benchmarks and the tests."""

from __future__ import annotations

from typing import Any

import torch
from torch.distributed import ProcessGroup
from torch.distributed.device_mesh import DeviceMesh
from torch.distributed.tensor import DTensor

__all__ = ["difference", "same", "mesh_key"]


def difference(eager: Any, compiled: Any, path: str = "result", *, rtol: float | None = None,
               atol: float | None = None, values: bool = True) -> str | None:
    """Where ``compiled`` differs from ``eager`` (None if nowhere).

    Tensors: same shape and dtype, whether they require grad, equal values
    (``assert_close`` with ``rtol``/``atol``; exact when both are 0; with
    ``values=False`` shape and dtype only, for a fake world whose collectives
    move no data). DTensors: also the same placements and mesh. Meshes: same
    type and the same rank table, dim names, process groups and coordinate.
    Process groups: the same object. Placements and everything else: same
    type and ``==``.
    """

    if isinstance(eager, DTensor):
        if not isinstance(compiled, DTensor):
            return f"{path}: eager gave a DTensor, compiled gave {type(compiled).__name__} {compiled!r}"
        if tuple(eager.placements) != tuple(compiled.placements) or eager.shape != compiled.shape:
            return (f"{path}: DTensors differ: eager {tuple(eager.placements)} {tuple(eager.shape)}, "
                    f"compiled {tuple(compiled.placements)} {tuple(compiled.shape)}")
        return difference(eager.device_mesh, compiled.device_mesh, f"{path}.device_mesh") or difference(
            eager.to_local(), compiled.to_local(), f"{path}.to_local()", rtol=rtol, atol=atol, values=values)
    if isinstance(eager, torch.Tensor):
        if not isinstance(compiled, torch.Tensor):
            return f"{path}: eager gave a tensor, compiled gave {type(compiled).__name__} {compiled!r}"
        if eager.requires_grad != compiled.requires_grad:
            return (f"{path}: eager's result {'requires' if eager.requires_grad else 'does not require'} grad, "
                    f"compiled's {'does' if compiled.requires_grad else 'does not'}")
        if not values:
            if eager.shape != compiled.shape or eager.dtype != compiled.dtype:
                return (f"{path}: tensors differ: eager {tuple(eager.shape)} {eager.dtype}, "
                        f"compiled {tuple(compiled.shape)} {compiled.dtype}")
            return None
        try:
            torch.testing.assert_close(compiled, eager, rtol=rtol, atol=atol, equal_nan=True)
        except AssertionError as e:
            return f"{path}: tensors differ: {e}"
        return None
    if type(eager) is not type(compiled):
        return (f"{path}: eager gave {type(eager).__name__} {eager!r}, "
                f"compiled gave {type(compiled).__name__} {compiled!r}")
    if isinstance(eager, (tuple, list)):
        if len(eager) != len(compiled):
            return f"{path}: eager has {len(eager)} items {eager!r}, compiled {len(compiled)} {compiled!r}"
        for i, (a, b) in enumerate(zip(eager, compiled)):
            found = difference(a, b, f"{path}[{i}]", rtol=rtol, atol=atol, values=values)
            if found:
                return found
        return None
    if isinstance(eager, dict):
        if list(eager) != list(compiled):
            return f"{path}: eager keys {list(eager)!r}, compiled keys {list(compiled)!r}"
        for k in eager:
            found = difference(eager[k], compiled[k], f"{path}[{k!r}]", rtol=rtol, atol=atol, values=values)
            if found:
                return found
        return None
    if isinstance(eager, ProcessGroup):
        return None if eager is compiled else f"{path}: compiled returned another ProcessGroup object"
    if isinstance(eager, DeviceMesh):
        if mesh_key(eager) != mesh_key(compiled):
            return f"{path}: meshes differ: eager {mesh_key(eager)}, compiled {mesh_key(compiled)}"
        return None
    try:
        equal = bool(eager == compiled)
    except Exception as e:  # pragma: no cover - exotic values
        return f"{path}: cannot compare {eager!r} and {compiled!r}: {e}"
    return None if equal else f"{path}: eager {eager!r}, compiled {compiled!r}"


def same(eager: Any, compiled: Any, *, exact: bool = False) -> bool:
    """``difference(...) is None``; ``exact=True``: tensors bit for bit."""
    tol = 0.0 if exact else None
    return difference(eager, compiled, rtol=tol, atol=tol) is None


def mesh_key(mesh: Any) -> tuple:
    """Everything a folded answer about ``mesh`` can depend on, read through
    the public API: type, device, rank table, dim names, the process group
    behind each dim (by name: collectives name their group by string), and
    this rank's coordinate."""
    def group_name(i: int) -> str | None:
        try:
            return mesh.get_group(i).group_name
        except Exception:  # this rank is not in the mesh
            return None

    return (
        type(mesh).__name__,
        mesh.device_type,
        tuple(mesh.mesh.shape),
        tuple(mesh.mesh.flatten().tolist()),
        mesh.mesh_dim_names,
        tuple(group_name(i) for i in range(mesh.ndim)),
        mesh.get_coordinate(),
    )
