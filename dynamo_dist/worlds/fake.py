"""A single-process fake world (FakeStore + the "fake" backend)."""

from __future__ import annotations

import contextlib
from typing import Iterator, Sequence

import torch.distributed as dist
from torch.distributed.device_mesh import init_device_mesh

from .._compat import observe as O


@contextlib.contextmanager
def fake_world(world_size: int, rank: int = 0) -> Iterator[None]:
    """Initialise a fake default process group for the duration of the block.

    Collectives do nothing, but groups, meshes and ranks behave as on a real
    world of ``world_size`` ranks seen from ``rank``.
    """
    if dist.is_initialized():
        raise RuntimeError(
            "fake_world: a default process group is already initialised; "
            "destroy it first (dist.destroy_process_group())."
        )
    O.init_fake_process_group(world_size, rank)
    try:
        yield
    finally:
        dist.destroy_process_group()


def make_mesh(shape: Sequence[int], names: Sequence[str] | None = None, device: str = "cpu"):
    """``init_device_mesh`` on the current world."""

    return init_device_mesh(device, tuple(shape), mesh_dim_names=tuple(names) if names else None)
