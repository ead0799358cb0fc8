"""Functions run on each rank of a spawned gloo world (must be importable)."""

import torch
import torch.distributed as dist


def rank_queries(x, mesh):
    c = mesh.get_coordinate()
    out = x + mesh.get_local_rank("tp") * 10 + c[0] + mesh.get_rank() * 100
    out = out + mesh.get_group("tp").rank() * 1000 + dist.get_rank(mesh.get_group("dp")) * 10000
    return out + dist.get_rank() * 100000


def compile_on_one_rank_check():
    """Compile rank_queries with compile_on_one_rank on; return (graph code, compiled, eager)."""
    import dynamo_dist
    from dynamo_dist import _compat as C
    from dynamo_dist.testing import compile_and_run, distributed_objects_in, make_mesh

    dynamo_dist.install()
    dist_config = C.one_rank_config()  # torch.compiler.config on 2.14+
    dist_config.compile_on_one_rank = True
    mesh = make_mesh((1, 2), ("dp", "tp"))
    run = compile_and_run(rank_queries, torch.zeros(1), mesh)
    leaked = distributed_objects_in(run.graphs[0])
    dist_config.compile_on_one_rank = False
    torch._dynamo.reset()
    folded = compile_and_run(rank_queries, torch.zeros(1), mesh)
    return {
        "code": run.graphs[0].code,
        "compiled": run.compiled.item(),
        "eager": run.eager.item(),
        "leaked": leaked,
        "folded_code": folded.graphs[0].code,
        "folded": folded.compiled.item(),
    }
