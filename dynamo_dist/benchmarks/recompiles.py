"""Item 3: recompiles and correctness on a workload that varies its inputs.

Step functions take a mesh, placements and a process group (one only
queries them, one also all-reduces on the group) and are called with a
sequence that a real program produces: placements change between layers,
1-D and 2-D meshes alternate, the tensor-parallel submesh is sliced afresh
(an *equal new mesh object*) on every call, the data-parallel and
tensor-parallel groups alternate, and a second mesh of the same shape but
other process groups appears. Every call's result is compared with eager. A
perfect tracker compiles once per distinct configuration and is right on
every call.

Fake 8-rank world seen from rank 3; backend ``eager``.
"""

from __future__ import annotations

from typing import Any, Callable

import torch

from . import _timing as T
from ._timing import Task

WORLD = (8, 3)


def _scaled(x, mesh, placements, pg):
    import torch.distributed as dist

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
    import torch.distributed._functional_collectives as funcol

    return funcol.all_reduce(_scaled(x, mesh, placements, pg), "sum", pg)


STEPS: dict[str, Callable[..., Any]] = {"queries": queries_step, "queries+all_reduce": collective_step}


def workload() -> tuple[list[tuple], int]:
    """The calls (argument tuples) and the number of distinct configurations."""
    from torch.distributed.tensor.placement_types import Partial, Replicate, Shard

    from ..testing import make_mesh

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


def _same(a: Any, b: Any) -> bool:
    return isinstance(a, torch.Tensor) and isinstance(b, torch.Tensor) and a.shape == b.shape and bool(
        torch.equal(a, b))


def run_side(side: str, step: Callable[..., Any]) -> dict[str, Any]:
    """Every call of the workload, compiled under ``side``, against eager."""
    import torch._dynamo

    from ..testing import fake_world

    T.use(side)
    torch._dynamo.reset()
    with fake_world(*WORLD):
        calls, distinct = workload()
        counter = T.FrameCounter("eager")
        compiled = torch.compile(step, backend=counter)
        correct = wrong = errors = 0
        first_error = ""
        for args in calls:
            want = step(*args)
            try:
                got = compiled(*args)
            except Exception as e:  # stock crashes on some inputs: count, go on
                errors += 1
                first_error = first_error or f"{type(e).__name__}: {str(e).splitlines()[0][:120]}"
                continue
            if _same(got, want):
                correct += 1
            else:
                wrong += 1
        torch._dynamo.reset()
    T.use(T.STOCK)
    return {"compiles": counter.frame_count, "correct": correct, "wrong": wrong, "errors": errors,
            "first_error": first_error, "calls": len(calls), "distinct_configs": distinct}


def measure(name: str, progress: Callable[[str], None]) -> dict[str, Any]:
    out: dict[str, Any] = {"name": name}
    for side in (T.STOCK, T.PLUGIN):
        progress(side)
        out[side] = run_side(side, STEPS[name])
    out["calls"] = out[T.PLUGIN]["calls"]
    out["distinct_configs"] = out[T.PLUGIN]["distinct_configs"]
    return out


def tasks(cfg: Any) -> list[Task]:
    return [Task(f"recompiles {name}", lambda progress, name=name: measure(name, progress)) for name in STEPS]
