"""A small distributed training step with the usual hidden costs, for
``python -m dynamo_dist explain examples/explain_demo.py``.

It runs in a fake 8-rank world (one process, no communication), so it works
anywhere; under torchrun it uses the real world instead.
"""

import os

import torch
import torch.distributed as dist
import torch.distributed._functional_collectives as funcol
from torch.distributed.device_mesh import init_device_mesh
from torch.distributed.tensor import DTensor, Replicate, Shard


def step(x, mesh, placements):
    tp = mesh.get_group("tp")
    x = funcol.all_reduce(x * tp.size(), "sum", tp)  # a collective in the graph
    if placements[0].is_shard():  # folds; guarded on the placement
        x = x / mesh.size(0)
    print("step done")  # a graph break (stock Dynamo)
    tp.barrier()  # an eager collective (a dynamo_dist break)
    return x


@torch.compile
def gather(t):
    return t.redistribute(t.device_mesh, [Replicate()]).to_local() * 2  # DTensor's collective


def main():
    fake = "RANK" not in os.environ
    if fake:
        from torch.testing._internal.distributed.fake_pg import FakeStore

        dist.init_process_group("fake", store=FakeStore(), rank=3, world_size=8)
    else:
        dist.init_process_group("gloo")
    world = dist.get_world_size()
    mesh = init_device_mesh("cpu", (2, world // 2), mesh_dim_names=("dp", "tp"))
    other = init_device_mesh("cpu", (2, world // 2), mesh_dim_names=("dp", "tp"))  # same shape, new groups
    compiled = torch.compile(step)
    x = torch.ones(4, 8)
    compiled(x, mesh, (Shard(0), Replicate()))
    compiled(x, mesh, (Shard(0), Replicate()))  # same inputs: reuses the graphs
    compiled(x, mesh, (Replicate(), Replicate()))  # placement change: recompiles
    compiled(x, other, (Replicate(), Replicate()))  # other groups behind the mesh: recompiles
    tp_mesh = mesh["tp"]
    gather(DTensor.from_local(torch.ones(2, 8), tp_mesh, [Shard(0)]))
    gather(DTensor.from_local(torch.ones(8, 8), tp_mesh, [Replicate()]))  # placements change: recompiles
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
