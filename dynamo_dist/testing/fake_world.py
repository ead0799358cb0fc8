"""A single-process fake world (FakeStore + the "fake" backend)."""

from __future__ import annotations

import contextlib
from typing import Iterator, Sequence

import torch.distributed as dist


@contextlib.contextmanager
def fake_world(world_size: int, rank: int = 0) -> Iterator[None]:
    """Initialise a fake default process group for the duration of the block.

    Collectives do nothing, but groups, meshes and ranks behave as on a real
    world of ``world_size`` ranks seen from ``rank``.
    """
    from torch.testing._internal.distributed.fake_pg import FakeStore

    if dist.is_initialized():
        raise RuntimeError(
            "fake_world: a default process group is already initialised; "
            "destroy it first (dist.destroy_process_group())."
        )
    dist.init_process_group("fake", store=FakeStore(), rank=rank, world_size=world_size)
    try:
        yield
    finally:
        dist.destroy_process_group()


def make_mesh(shape: Sequence[int], names: Sequence[str] | None = None, device: str = "cpu"):
    """``init_device_mesh`` on the current world."""
    from torch.distributed.device_mesh import init_device_mesh

    return init_device_mesh(device, tuple(shape), mesh_dim_names=tuple(names) if names else None)
