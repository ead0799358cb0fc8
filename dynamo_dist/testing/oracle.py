"""Run a function eagerly and compiled, and collect what a test checks."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable

import torch
import torch._dynamo
import torch.fx
from torch._dynamo.testing import CompileCounterWithBackend
from torch._dynamo.utils import counters


@dataclass
class CompiledRun:
    eager: Any
    compiled: Any
    graphs: list[torch.fx.GraphModule] = field(default_factory=list)
    frame_count: int = 0
    graph_breaks: int = 0
    compiled_fn: Callable[..., Any] | None = None


def compile_and_run(
    fn: Callable[..., Any],
    *args: Any,
    fullgraph: bool = True,
    backend: str = "eager",
    reset: bool = True,
    **kwargs: Any,
) -> CompiledRun:
    """Eager result first (so a raising call raises here, as in eager), then
    the compiled result with the graphs Dynamo captured."""
    if reset:
        torch._dynamo.reset()
    eager = fn(*args, **kwargs)
    counter = CompileCounterWithBackend(backend)
    breaks_before = sum(counters["graph_break"].values())
    compiled_fn = torch.compile(fn, backend=counter, fullgraph=fullgraph)
    compiled = compiled_fn(*args, **kwargs)
    return CompiledRun(
        eager=eager,
        compiled=compiled,
        graphs=list(counter.graphs),
        frame_count=counter.frame_count,
        graph_breaks=sum(counters["graph_break"].values()) - breaks_before,
        compiled_fn=compiled_fn,
    )
