"""Section 3 of the benchmarks: recompiles and correctness on a workload that varies its inputs.

Step functions take a mesh, placements and a process group (one only
queries them, one also all-reduces on the group) and are called with a
sequence that a real program produces: placements change between layers,
1-D and 2-D meshes alternate, the tensor-parallel submesh is sliced afresh
(an *equal new mesh object*) on every call, the data-parallel and
tensor-parallel groups alternate, and a second mesh of the same shape but
other process groups appears. Every call's result is compared with eager. A
perfect tracker compiles once per distinct configuration and is right on
every call.

Fake 8-rank world seen from rank 3; backend ``eager``. In the full run a
third workload passes DTensors on the "dp" and "tp" submeshes of a (2, 2)
mesh (same shape, other ranks) and on the 2-D mesh, on a real 4-rank gloo
world: a stale graph there all-gathers over the wrong ranks.
"""

from __future__ import annotations

from typing import Any, Callable

import torch
import torch.distributed as dist
from torch.distributed.device_mesh import init_device_mesh
from torch.distributed.tensor import DTensor
from torch.distributed.tensor.placement_types import Partial, Replicate, Shard

from dynamo_dist._compat.observe import funcol, reset_dynamo
from dynamo_dist.diagnostics.compare import same
from dynamo_dist.worlds import fake_world, make_mesh, run_in_world

from . import _timing as T
from ._timing import Task

WORLD = (8, 3)


def _scaled(x, mesh, placements, pg):

    out = x * mesh.size() + mesh.get_local_rank(0)
    for d in range(mesh.ndim):  # per mesh dim, as a parallelize plan does
        out = out + mesh.size(d) * (d + 1)
    for i, p in enumerate(placements):
        if p.is_shard():
            out = out + (p.dim + 1) * 10 ** i
        elif p.is_partial():
            out = out * 2
    return out + dist.get_world_size(pg) * 100 + dist.get_process_group_ranks(pg)[-1] * 1000


def queries_step(x, mesh, placements, pg):
    """Only queries (e.g. a loss scaled by the group size): nothing in the
    graph names the group, so only the guards can tell the inputs apart."""
    return _scaled(x, mesh, placements, pg)


def collective_step(x, mesh, placements, pg):
    """The same, followed by a functional all-reduce on the group."""

    return funcol.all_reduce(_scaled(x, mesh, placements, pg), "sum", pg)


STEPS: dict[str, Callable[..., Any]] = {"queries": queries_step, "queries+all_reduce": collective_step}


def workload() -> tuple[list[tuple], int]:
    """The calls (argument tuples) and the number of distinct configurations."""


    root = make_mesh((2, 4), ("dp", "tp"))
    other = make_mesh((2, 4), ("dp", "tp"))  # same shape, new process groups
    dp, tp = root.get_group("dp"), root.get_group("tp")
    x = torch.arange(4.0)
    # (mesh maker, placements, group): mesh makers slice afresh on each call.
    configs: list[tuple[Callable[[], Any], tuple, Any]] = [
        (lambda: root["tp"], (Shard(0),), tp),
        (lambda: root["tp"], (Replicate(),), tp),
        (lambda: root, (Shard(0), Replicate()), dp),
        (lambda: root, (Shard(0), Shard(1)), dp),
        (lambda: root, (Replicate(), Partial()), tp),
        (lambda: other, (Shard(0), Replicate()), other.get_group("dp")),
        (lambda: root, (Shard(0), Replicate()), tp),  # only the group differs from 2
    ]
    order = [0, 1, 0, 2, 3, 2, 6, 4, 0, 5, 2, 6, 1, 5, 3, 4, 0, 6]
    calls = [(x, configs[i][0](), configs[i][1], configs[i][2]) for i in order]
    return calls, len(configs)


def _run_calls(side: str, step: Callable[..., Any], calls: list[tuple]) -> dict[str, Any]:
    """Compile ``step`` under ``side``; call it with each argument tuple and
    compare with eager. Per-call statuses: ok, wrong or the exception."""

    T.use(side)
    reset_dynamo()
    counter = T.FrameCounter("eager")
    compiled = torch.compile(step, backend=counter)
    statuses = []
    for args in calls:
        want = step(*args)
        try:
            got = compiled(*args)
        except Exception as e:  # stock crashes on some inputs: count, go on
            statuses.append(f"{type(e).__name__}: {str(e).splitlines()[0][:120]}")
            continue
        statuses.append("ok" if same(got, want, exact=True) else "wrong")
    reset_dynamo()
    T.use(T.STOCK)
    return {"compiles": counter.frame_count, "statuses": statuses}


def _summary(compiles: int, statuses: list[str], distinct: int) -> dict[str, Any]:
    errors = [s for s in statuses if s not in ("ok", "wrong")]
    return {"compiles": compiles, "correct": statuses.count("ok"), "wrong": statuses.count("wrong"),
            "errors": len(errors), "first_error": errors[0] if errors else "", "calls": len(statuses),
            "distinct_configs": distinct}


def run_side(side: str, step: Callable[..., Any]) -> dict[str, Any]:
    """Every call of the workload, compiled under ``side``, against eager."""

    with fake_world(*WORLD):
        calls, distinct = workload()
        run = _run_calls(side, step, calls)
    return _summary(run["compiles"], run["statuses"], distinct)


# ---------------------------------------------------------------------------
# DTensors on a real 4-rank gloo world: the collectives name their group, so
# a graph reused for a DTensor on another mesh of the same shape gathers
# over the wrong ranks. Needs real data, hence a real world.


def dtensor_step(d):
    """A DTensor's full value (all-gather / all-reduce over its mesh)."""
    return d.full_tensor() * d.device_mesh.size() + len(d.placements)


def dtensor_rank_main() -> dict[str, Any]:
    """One rank's part: stock then plugin over the same DTensor calls."""

    root = init_device_mesh("cpu", (2, 2), mesh_dim_names=("dp", "tp"))
    other = init_device_mesh("cpu", (2, 2), mesh_dim_names=("dp", "tp"))  # same ranks, new groups
    local = torch.arange(6.0).reshape(2, 3) + 10 * dist.get_rank()
    # (mesh maker, placements); submeshes are sliced afresh for each call
    # (equal new objects). "dp" and "tp" have the same shape but other ranks;
    # `other` has root's ranks but its own groups (its graph must name them,
    # though the values cannot tell).
    configs: list[tuple[Callable[[], Any], tuple]] = [
        (lambda: root["tp"], (Shard(0),)), (lambda: root["dp"], (Shard(0),)), (lambda: root["tp"], (Partial(),)),
        (lambda: root["dp"], (Partial(),)), (lambda: root, (Shard(0), Shard(1))), (lambda: other["tp"], (Shard(0),)),
    ]
    order = [0, 1, 0, 2, 3, 1, 4, 5, 0, 3, 2, 4, 5]

    def calls() -> list[tuple]:
        return [(DTensor.from_local(local, configs[i][0](), configs[i][1], run_check=False),) for i in order]

    return {side: _run_calls(side, dtensor_step, calls()) for side in (T.STOCK, T.PLUGIN)} | {
        "distinct": len(configs)}


def measure_dtensor(world: int, progress: Callable[[str], None]) -> dict[str, Any]:

    out: dict[str, Any] = {"name": f"DTensors on submeshes + an other-groups mesh (gloo x{world})"}
    progress(f"spawning {world} ranks")
    per_rank = run_in_world(dtensor_rank_main, world)
    distinct = per_rank[0]["distinct"]
    for side in (T.STOCK, T.PLUGIN):
        # A call is right only if it is right on every rank.
        runs = [r[side] for r in per_rank]
        statuses = [next((s for s in call if s != "ok"), "ok") for call in zip(*(r["statuses"] for r in runs))]
        out[side] = _summary(max(r["compiles"] for r in runs), statuses, distinct)
    out["calls"], out["distinct_configs"] = out[T.PLUGIN]["calls"], distinct
    return out


def measure(name: str, progress: Callable[[str], None]) -> dict[str, Any]:
    out: dict[str, Any] = {"name": name}
    for side in (T.STOCK, T.PLUGIN):
        progress(side)
        out[side] = run_side(side, STEPS[name])
    out["calls"] = out[T.PLUGIN]["calls"]
    out["distinct_configs"] = out[T.PLUGIN]["distinct_configs"]
    return out


def tasks(cfg: Any) -> list[Task]:
    out = [Task(f"recompiles {name}", lambda progress, name=name: measure(name, progress)) for name in STEPS]
    if 4 in cfg.worlds:  # the DTensor workload needs a (2, 2) mesh
        out.append(Task("recompiles DTensors gloo x4", lambda progress: measure_dtensor(4, progress)))
    return out
