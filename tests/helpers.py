"""Assertions shared by the tracing tests."""

from __future__ import annotations

from typing import Any

import torch

from dynamo_dist._compat import observe as O
from dynamo_dist.testing import compile_and_run, difference, distributed_objects_in


def assert_same(a: Any, b: Any) -> None:
    """``a`` (eager) and ``b`` (compiled) are the same result: the oracle's
    ``difference`` finds none."""
    found = difference(a, b)
    assert found is None, found


def check_like_eager(fn, *args, expect_graphs: int | None = 1, **kwargs):
    """fullgraph compile == eager, and no distributed object in any graph."""
    run = compile_and_run(fn, *args, fullgraph=True, **kwargs)
    assert_same(run.eager, run.compiled)
    for gm in run.graphs:
        leaked = distributed_objects_in(gm)
        assert not leaked, f"distributed objects in the graph: {leaked}\n{gm.code}"
    if expect_graphs is not None:
        assert run.frame_count == expect_graphs, run.frame_count
    return run


def compile_counting_frames(fn, backend: str = "aot_eager"):
    """``fn`` compiled after a Dynamo reset (counters cleared), and a function
    that lists the names of the frames compiled since. Dynamo keeps
    compilation-metric rows across resets: only rows not seen here count."""
    O.reset_dynamo()
    O.dynamo_counters().clear()
    kept = O.compilation_metrics()  # kept alive, so ids stay unique
    earlier = {id(m) for m in kept}

    def frames() -> list:
        return [m.co_name for m in O.compilation_metrics() if id(m) not in earlier]

    return torch.compile(fn, backend=backend), frames
