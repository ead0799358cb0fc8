"""A ``torch.compile`` backend that records what it compiles, and the
functional collectives in a graph.

:class:`CaptureBackend` compiles with ``"eager"``, ``"aot_eager"`` or
``"inductor"`` and keeps the Dynamo graphs and the post-AOTAutograd forward
and backward graphs (where DTensor's collectives appear, as
``_c10d_functional`` ops). :func:`collectives_in` lists those ops with the
process group each one names.
"""

from __future__ import annotations

import operator
from dataclasses import dataclass
from typing import Any, Callable

import torch
import torch.fx

__all__ = ["Collective", "collectives_in", "CaptureBackend", "BACKENDS"]

BACKENDS = ("eager", "aot_eager", "inductor")


@dataclass(frozen=True)
class Collective:
    """One collective call in a graph: ``op`` is the op name (``"all_reduce"``,
    ``"wait_tensor"``, ...; ``_c10d_functional`` ops, and DTensor's
    ``shard_dim_alltoall``), ``group`` the group name it names (``None`` for
    ``wait_tensor``), ``waited`` whether its result goes to a ``wait_tensor``
    (``None`` for ``wait_tensor`` and for synchronous ops)."""

    op: str
    group: str | None
    waited: bool | None = None

    def __str__(self) -> str:
        return self.op if self.group is None else f"{self.op}[{self.group}]"


def _group_name(node: torch.fx.Node) -> str | None:
    schema = node.target._schema  # type: ignore[union-attr]
    for i, arg in enumerate(schema.arguments):
        if arg.name == "group_name":
            value = node.kwargs.get("group_name", node.args[i] if i < len(node.args) else None)
            if isinstance(value, str) or value is None:
                return value
            return getattr(value, "group_name", repr(value))
    return None


# Synchronous collective ops DTensor puts in graphs outside _c10d_functional
# (on CUDA, Shard(i) -> Shard(j) is an all-to-all through this op).
_SYNC_OPS = {("_dtensor", "shard_dim_alltoall")}


def _is_wait(node: torch.fx.Node) -> bool:
    target = node.target
    return isinstance(target, torch._ops.OpOverload) and target.namespace == "_c10d_functional" \
        and target._opname == "wait_tensor"


def collectives_in(gm: torch.fx.GraphModule) -> list[Collective]:
    """Every ``torch.ops._c10d_functional`` call (and DTensor's synchronous
    ``_dtensor.shard_dim_alltoall``) in ``gm``, in graph order, nested
    subgraphs included."""
    found: list[Collective] = []
    for module in gm.modules():
        if not isinstance(module, torch.fx.GraphModule):
            continue
        for node in module.graph.nodes:
            target = node.target
            if node.op != "call_function" or not isinstance(target, torch._ops.OpOverload):
                continue
            if (target.namespace, target._opname) in _SYNC_OPS:
                found.append(Collective(target._opname, _group_name(node)))
            elif target.namespace == "_c10d_functional":
                if target._opname == "wait_tensor":
                    found.append(Collective("wait_tensor", None))
                else:
                    # A coalesced op's results are waited through getitem.
                    users = [u for user in node.users
                             for u in (user.users if user.target is operator.getitem else [user])]
                    waited = any(_is_wait(user) for user in users)
                    found.append(Collective(target._opname, _group_name(node), waited))
    return found


class CaptureBackend:
    """A ``torch.compile`` backend that compiles with ``backend`` and records:

    - ``dynamo_graphs``: every graph Dynamo hands to the backend (one per
      compile: a graph break or a recompile adds one);
    - ``forward_graphs`` / ``backward_graphs``: the post-AOTAutograd graphs
      (``aot_eager`` and ``inductor``; the graphs inductor's inner compiler
      receives). The backward graph is compiled lazily, at the first backward.
    """

    def __init__(self, backend: str = "aot_eager") -> None:
        if backend not in BACKENDS:
            raise ValueError(f"backend must be one of {BACKENDS}, not {backend!r}")
        self.backend = backend
        self.dynamo_graphs: list[torch.fx.GraphModule] = []
        self.forward_graphs: list[torch.fx.GraphModule] = []
        self.backward_graphs: list[torch.fx.GraphModule] = []
        # Taken when each graph is recorded (inductor rewrites its graphs later).
        self.forward_collectives: list[list[Collective]] = []
        self.backward_collectives: list[list[Collective]] = []

    def _record(self, graph: torch.fx.GraphModule, backward: bool) -> None:
        (self.backward_graphs if backward else self.forward_graphs).append(graph)
        (self.backward_collectives if backward else self.forward_collectives).append(collectives_in(graph))

    @property
    def compiles(self) -> int:
        """How many graphs Dynamo compiled (frames, resumes and recompiles)."""
        return len(self.dynamo_graphs)

    def __call__(self, gm: torch.fx.GraphModule, example_inputs: list[Any]) -> Callable[..., Any]:
        self.dynamo_graphs.append(gm)
        if self.backend == "eager":
            return gm.forward
        if self.backend == "aot_eager":
            return self._aot_eager(gm, example_inputs)
        return self._inductor(gm, example_inputs)

    def _aot_eager(self, gm: torch.fx.GraphModule, example_inputs: list[Any]) -> Callable[..., Any]:
        from torch._dynamo.backends.common import aot_autograd
        from torch._dynamo.backends.debugging import boxed_nop
        from torch._functorch.partitioners import min_cut_rematerialization_partition

        def forward(fw: torch.fx.GraphModule, inputs: list[Any]) -> Callable[..., Any]:
            self._record(fw, backward=False)
            return boxed_nop(fw, inputs)

        def backward(bw: torch.fx.GraphModule, inputs: list[Any]) -> Callable[..., Any]:
            self._record(bw, backward=True)
            return boxed_nop(bw, inputs)

        # The same settings as the registered "aot_eager" backend.
        return aot_autograd(
            fw_compiler=forward,
            bw_compiler=backward,
            partition_fn=min_cut_rematerialization_partition,
            keep_inference_input_mutations=True,
        )(gm, example_inputs)

    def _inductor(self, gm: torch.fx.GraphModule, example_inputs: list[Any]) -> Callable[..., Any]:
        import torch._functorch.config as functorch_config
        from torch._inductor.compile_fx import compile_fx, compile_fx_inner

        def inner(graph: torch.fx.GraphModule, inputs: list[Any], **kwargs: Any) -> Any:
            self._record(graph, backward=bool(kwargs.get("is_backward")))
            return compile_fx_inner(graph, inputs, **kwargs)

        # A hit in the AOTAutograd cache skips the inner compiler (nothing
        # would be recorded); inductor's own FX graph cache, inside
        # compile_fx_inner, still applies.
        with functorch_config.patch(enable_autograd_cache=False):
            return compile_fx(gm, example_inputs, inner_compile=inner)

    def collectives(self) -> dict[str, list[list[Collective]]]:
        """Collectives per recorded graph, as recorded:
        ``{"forward": [[...], ...], "backward": [[...], ...]}``."""
        return {"forward": list(self.forward_collectives), "backward": list(self.backward_collectives)}
