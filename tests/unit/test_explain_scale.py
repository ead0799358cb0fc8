"""explain on a large fake world: the report names a world-spanning group
and a mesh over it by their range, so its size does not grow with the world."""

import json

import torch
import torch.distributed as dist

import dynamo_dist
from dynamo_dist.testing import fake_world, make_mesh


def f(x, mesh, pg):
    return x * mesh.size(0) + dist.get_world_size(pg)


def test_guards_on_a_large_world_are_reported_in_a_few_lines():
    with fake_world(4096, 4095):
        mesh = make_mesh((4096,), ("dp",))
        report = dynamo_dist.explain(f, backend="eager")(torch.ones(2), mesh, mesh.get_group(0))
    text = json.dumps(report.to_dict())
    assert "0..4095 (4096 ranks)" in text and len(text) < 8000, len(text)
