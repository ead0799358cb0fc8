"""Compile a small mesh/placement/group program in a fake 8-rank world and show
what folded, which guards were installed and the captured graph."""

from __future__ import annotations

import argparse
import logging


class _Collect(logging.Handler):
    def __init__(self) -> None:
        super().__init__(logging.DEBUG)
        self.records: list[logging.LogRecord] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.records.append(record)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    pass


def run(args: argparse.Namespace) -> int:
    import torch
    import torch.distributed as dist
    from torch.distributed.tensor.placement_types import Replicate, Shard

    import dynamo_dist
    from dynamo_dist.diagnostics.graphs import distributed_objects_in
    from dynamo_dist.fuzzing.oracle import compile_and_run
    from dynamo_dist.worlds import fake_world, make_mesh

    def step(x, mesh, placements):
        tp = mesh["tp"]
        scale = tp.size() * 10 + tp.get_local_rank()
        if placements[0].is_shard():
            scale = scale + placements[0].dim
        group = mesh.get_group("dp")
        return x * scale + dist.get_world_size(group), Shard(1), tp

    collect = _Collect()
    logger = logging.getLogger("dynamo_dist")
    logger.addHandler(collect)
    logger.setLevel(logging.DEBUG)
    print(f"dynamo_dist {dynamo_dist.__version__} on torch {torch.__version__}: fake world of 8 ranks, rank 3")
    with fake_world(8, 3), dynamo_dist.enabled():
        mesh = make_mesh((2, 4), ("dp", "tp"))
        run = compile_and_run(step, torch.ones(2), mesh, (Shard(0), Replicate()))
    logger.removeHandler(collect)

    folds = [r.getMessage() for r in collect.records if r.name == "dynamo_dist.fold"]
    guards = [r.getMessage() for r in collect.records if r.name == "dynamo_dist.guards"]
    print("\nFolded at trace time:")
    for line in dict.fromkeys(folds):
        print(f"  {line}")
    print("\nGuards installed:")
    for line in dict.fromkeys(guards):
        print(f"  {line}")
    print(f"\nCaptured graphs: {len(run.graphs)}  (fullgraph=True, graph breaks: {run.graph_breaks})")
    print(run.graphs[0].code.strip())
    leaks = distributed_objects_in(run.graphs[0])
    same = torch.equal(run.compiled[0], run.eager[0]) and run.compiled[1:] == run.eager[1:]
    print(f"\nDistributed objects in the graph: {leaks or 'none'}")
    print(f"Escaping objects rebuilt in bytecode: {run.compiled[1]!r}, {run.compiled[2]!r}")
    print(f"Compiled == eager: {same}")
    return 0 if same and not leaks else 1
