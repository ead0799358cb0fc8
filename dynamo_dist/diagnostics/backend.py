"""The one recording backend: a ``torch.compile`` backend that records what
it compiles. ``explain`` records through it (``recording.Recorder``), and
``dynamo_dist.testing`` exports it for users' tests.

It compiles with ``"eager"``, ``"aot_eager"`` or ``"inductor"`` and keeps the
Dynamo graphs and the post-AOTAutograd forward and backward graphs (where
DTensor's collectives appear, as ``_c10d_functional`` ops), with the
collectives of each (``graphs.collectives_in``) taken when it is recorded.
"""

from __future__ import annotations

from typing import Any, Callable

import torch
import torch.fx

from .._compat import observe as O
from .graphs import Collective, collectives_in

__all__ = ["CaptureBackend", "BACKENDS"]

BACKENDS = ("eager", "aot_eager", "inductor")


class CaptureBackend:
    """A ``torch.compile`` backend that compiles with ``backend`` and records:

    - ``dynamo_graphs``: every graph Dynamo hands to the backend (one per
      compile: a graph break or a recompile adds one);
    - ``forward_graphs`` / ``backward_graphs``: the post-AOTAutograd graphs
      (``aot_eager`` and ``inductor``; the graphs inductor's inner compiler
      receives). The backward graph is compiled lazily, at the first backward.

    ``on_graph(gm)`` (optional) is called with each Dynamo graph and returns a
    token, and ``on_stage(token, graph, stage)`` with each post-AOT graph.
    ``tolerant=True`` (``explain``: nothing may fail the user's program): a
    graph ``on_graph`` returned None for, or that AOTAutograd cannot lower,
    runs as captured (``on_error(token, exception)`` is told why).
    ``autograd_cache=True`` (inductor): the AOTAutograd cache stays on (a
    hit then records no post-AOT graph); off by default, so every graph is seen.
    """

    def __init__(self, backend: str = "aot_eager", *, allowed: tuple[str, ...] = BACKENDS,
                 on_graph: Callable[[torch.fx.GraphModule], Any] | None = None,
                 on_stage: Callable[[Any, torch.fx.GraphModule, str], None] | None = None,
                 on_error: Callable[[Any, BaseException], None] | None = None,
                 tolerant: bool = False, name: str | None = None, autograd_cache: bool = False) -> None:
        if backend not in allowed:
            raise ValueError(f"backend must be one of {allowed}, not {backend!r}")
        self.backend = backend
        self.on_graph, self.on_stage, self.on_error, self.tolerant = on_graph, on_stage, on_error, tolerant
        self.autograd_cache = autograd_cache
        if name is not None:
            self.__name__ = name
        self.dynamo_graphs: list[torch.fx.GraphModule] = []
        self.forward_graphs: list[torch.fx.GraphModule] = []
        self.backward_graphs: list[torch.fx.GraphModule] = []
        # Taken when each graph is recorded (inductor rewrites its graphs later).
        self.forward_collectives: list[list[Collective]] = []
        self.backward_collectives: list[list[Collective]] = []

    def _record(self, token: Any, graph: torch.fx.GraphModule, backward: bool) -> None:
        stage = "backward" if backward else "forward"
        (self.backward_graphs if backward else self.forward_graphs).append(graph)
        (self.backward_collectives if backward else self.forward_collectives).append(collectives_in(graph, stage))
        if self.on_stage is not None:
            self.on_stage(token, graph, stage)

    @property
    def compiles(self) -> int:
        """How many graphs Dynamo compiled (frames, resumes and recompiles)."""
        return len(self.dynamo_graphs)

    def __call__(self, gm: torch.fx.GraphModule, example_inputs: list[Any]) -> Callable[..., Any]:
        self.dynamo_graphs.append(gm)
        token = self.on_graph(gm) if self.on_graph is not None else None
        if self.backend == "eager" or (self.tolerant and token is None):
            return gm.forward
        try:
            if self.backend == "aot_eager":
                return O.aot_eager_lowering(gm, example_inputs, lambda g: self._record(token, g, False),
                                            lambda g: self._record(token, g, True))
            return O.inductor_lowering(gm, example_inputs, lambda g, bw: self._record(token, g, bw),
                                       autograd_cache=self.autograd_cache)
        except O.RestartAnalysis:
            raise
        except Exception as e:
            if not self.tolerant:
                raise
            if self.on_error is not None:
                self.on_error(token, e)
            return gm.forward  # could not lower it: run the graph as captured

    def collectives(self) -> dict[str, list[list[Collective]]]:
        """Collectives per recorded graph, as recorded:
        ``{"forward": [[...], ...], "backward": [[...], ...]}``."""
        return {"forward": list(self.forward_collectives), "backward": list(self.backward_collectives)}
