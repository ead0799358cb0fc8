"""dynamo_dist.explain on a real 2-rank gloo world (one spawned world for
every check): collectives with their real groups, ranks and bytes, a
recompile for another group, and the differences between ranks' graphs."""

import pytest
import torch
import torch.distributed as dist
import torch.distributed._functional_collectives as funcol

from dynamo_dist.diagnostics.ranks import compare_ranks
from dynamo_dist.testing import run_in_world


def rank_dependent(x):
    total = funcol.all_reduce(x, "sum", dist.group.WORLD)
    return total * (dist.get_rank() + 1)


def redistribute(t):
    from torch.distributed.tensor import Replicate

    return t.redistribute(t.device_mesh, [Replicate()]).to_local() * 2


def group_sum(x, pg):
    return funcol.all_reduce(x, "sum", pg) + pg.size()


def explain_on_each_rank():
    import dynamo_dist
    from dynamo_dist.diagnostics.explain import explaining
    from dynamo_dist.testing import make_mesh
    from torch.distributed.tensor import DTensor, Shard

    rank = dist.get_rank()
    ranks_report = dynamo_dist.explain(rank_dependent)(torch.ones(4, 8))
    mesh = make_mesh((2,), ("tp",))
    dtensor_report = dynamo_dist.explain(redistribute)(DTensor.from_local(torch.full((2, 3), rank + 1.0), mesh,
                                                                         [Shard(0)]))
    other = dist.new_group([0, 1])
    with explaining(backend="eager") as session:
        compiled = torch.compile(group_sum)
        outs = [compiled(torch.ones(2), pg) for pg in (dist.group.WORLD, dist.group.WORLD, other)]
    return {
        "rank_dependent": ranks_report.to_dict(),
        "dtensor": dtensor_report.to_dict(),
        "recompiles": [r.reason for r in session.report.recompiles],
        "groups": [dist.group.WORLD.group_name, other.group_name],
        "sums": [o.tolist() for o in outs],
    }


@pytest.mark.slow
def test_explain_in_a_gloo_world():
    results = run_in_world(explain_on_each_rank, 2)
    for rank, res in enumerate(results):
        report = res["rank_dependent"]
        assert (report["rank"], report["world_size"]) == (rank, 2)
        [c] = [c for g in report["graphs"] for c in g["collectives"]]
        assert (c["op"], c["ranks"], c["shape"], c["dtype"], c["stage"]) == ("all_reduce", [0, 1], [4, 8], "float32",
                                                                             "forward")
        assert c["group"] == res["groups"][0]
        assert c["bytes_per_rank"] == 4 * 8 * 4  # 2(g-1)/g * S with g = 2
        [d] = [c for g in res["dtensor"]["graphs"] for c in g["collectives"]]
        assert (d["op"], d["ranks"], d["shape"], d["bytes_per_rank"]) == ("all_gather_into_tensor", [0, 1], [2, 3],
                                                                          2 * 3 * 4)
        world, other = res["groups"]
        assert res["recompiles"] == [f"`pg` is a different process group (group '{world}' ranks [0,1] -> "
                                     f"group '{other}' ranks [0,1])"]
        assert res["sums"] == [[4.0, 4.0]] * 3  # the real collectives ran
    differences = compare_ranks([r["rank_dependent"] for r in results])
    assert len(differences) == 1 and "differs between rank 0 and rank 1" in differences[0], differences
    assert "`mul = total * 1` vs `mul = total * 2`" in differences[0]
    assert compare_ranks([r["dtensor"] for r in results]) == []  # the same graph on both ranks
