"""A spawned gloo world whose picked port another process took meanwhile
starts again on another port (parallel test workers pick ports at once)."""

from __future__ import annotations

import socket

import pytest
import torch.distributed as dist

from dynamo_dist.worlds import spawned

pytestmark = pytest.mark.slow


def _world_size() -> int:
    return dist.get_world_size()


def test_a_port_taken_before_rank_0_binds_it_is_picked_again(monkeypatch):
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        ports = iter([taken.getsockname()[1]])
        free = spawned._free_port
        picked = []

        def pick() -> int:
            picked.append(next(ports, None) or free())
            return picked[-1]

        monkeypatch.setattr(spawned, "_free_port", pick)
        assert spawned.run_in_world(_world_size, 2, timeout=120) == [2, 2]
    assert len(picked) == 2  # the taken port, then another
