"""A rank-dependent graph, for
``torchrun --nproc-per-node 2 -m dynamo_dist explain examples/explain_ranks.py``.

``dist.get_rank()`` folds to a constant on each rank, so every rank compiles
a different graph (and pays its own compile); the collective is the same.
Set ``torch.distributed.config.compile_on_one_rank = True`` to get one graph.
"""

import torch
import torch.distributed as dist
import torch.distributed._functional_collectives as funcol


def step(x):
    total = funcol.all_reduce(x, "sum", dist.group.WORLD)
    return total * (dist.get_rank() + 1)


def main():
    dist.init_process_group("gloo")
    out = torch.compile(step)(torch.ones(4, 4))
    assert out[0, 0].item() == dist.get_world_size() * (dist.get_rank() + 1)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
