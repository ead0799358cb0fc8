"""Train a tensor-parallel model for a few steps eagerly and compiled, on this
rank, and record what a comparison needs: losses and gradients per step,
graph breaks, compiles and recompiles, the collectives of each captured
graph, and step times. Used by ``python -m dynamo_dist demo``.

Every run builds the model from the same seed and feeds the same inputs, so
an eager run and a compiled run are comparable step by step.
"""

from __future__ import annotations

import time
import traceback
from dataclasses import dataclass, field
from typing import Callable

import torch
import torch.nn.functional as F

__all__ = ["TrainRun", "train", "compare"]


@dataclass
class TrainRun:
    """One training run on one rank (plain data, picklable).

    ``grads[step]`` holds this rank's local gradient shards (parameter order);
    ``step_ms`` the wall time of each step (forward, backward, optimizer step,
    between two barriers);
    ``compiles``: graphs compiled during the first step; ``recompiles``:
    graphs compiled after it; ``forward``/``backward``: the collectives of each
    captured graph (``"all_reduce[<group name>]"``, ``"wait_tensor"``).
    ``error``: a traceback if the run failed."""

    label: str
    losses: list[float] = field(default_factory=list)
    grads: list[list[torch.Tensor]] = field(default_factory=list)
    step_ms: list[float] = field(default_factory=list)
    graph_breaks: int = 0
    compiles: int = 0
    recompiles: int = 0
    forward: list[list[str]] = field(default_factory=list)
    backward: list[list[str]] = field(default_factory=list)
    break_reasons: list[str] = field(default_factory=list)
    error: str | None = None


def _sync(device: torch.device) -> None:
    import torch.distributed as dist

    if device.type == "cuda":
        torch.cuda.synchronize(device)
    dist.barrier()


def _local(t: torch.Tensor) -> torch.Tensor:
    return t.to_local() if hasattr(t, "to_local") else t


def train(
    model_name: str,
    config,
    mesh,
    steps: int,
    *,
    backend: str | None = None,
    device: torch.device | str = "cpu",
    label: str = "",
    progress: Callable[[str], None] = lambda line: None,
    lr: float = 0.05,
) -> TrainRun:
    """Train ``model_name`` (see :mod:`dynamo_dist.testing.models`),
    parallelized on the 1-D ``mesh``, for ``steps`` SGD steps on an MSE loss.
    ``backend=None`` runs eagerly; otherwise the model is compiled with
    :class:`~dynamo_dist.testing.capture.CaptureBackend` (``backend``) under
    whatever Dynamo configuration is active (plugin installed or not), after a
    ``torch._dynamo.reset()``. ``loss.backward()`` and the optimizer step run
    outside the compiled region."""
    from torch._dynamo.utils import counters

    from .capture import CaptureBackend
    from .models import build_model, local_input, make_input

    device = torch.device(device)
    run = TrainRun(label or (backend or "eager"))
    model = build_model(model_name, config, mesh=mesh, device=device)
    opt = torch.optim.SGD(model.parameters(), lr=lr)
    capture = None
    fn: Callable[[torch.Tensor], torch.Tensor] = model
    if backend is not None:
        torch._dynamo.reset()
        capture = CaptureBackend(backend)
        fn = torch.compile(model, backend=capture)
    breaks_before = sum(counters["graph_break"].values())
    reasons_before = set(counters["graph_break"])
    try:
        for step in range(steps):
            x = local_input(model_name, make_input(config, seed=100 + step, device=device), mesh)
            target = local_input(model_name, make_input(config, seed=200 + step, device=device), mesh)
            if step == 0 and capture is not None:
                progress(f"{run.label}: compiling (first step) ...")
            _sync(device)
            start = time.perf_counter()
            loss = F.mse_loss(fn(x), target)
            loss.backward()
            opt.step()  # plain SGD: leaves the gradients as they are
            _sync(device)
            run.step_ms.append(1000 * (time.perf_counter() - start))
            run.losses.append(loss.item())
            run.grads.append([_local(p.grad).detach().clone() if p.grad is not None else torch.zeros(0)
                              for p in model.parameters()])
            opt.zero_grad(set_to_none=True)
            if step == 0 and capture is not None:
                run.compiles = capture.compiles
            progress(f"{run.label}: step {step + 1}/{steps}  loss {run.losses[-1]:.6f}  "
                     f"{run.step_ms[-1]:.1f} ms")
    except Exception:
        run.error = traceback.format_exc(limit=-8)
    run.graph_breaks = sum(counters["graph_break"].values()) - breaks_before
    run.break_reasons = sorted(set(counters["graph_break"]) - reasons_before)
    if capture is not None:
        run.recompiles = max(0, capture.compiles - run.compiles)
        run.forward = [[str(c) for c in g] for g in capture.forward_collectives]
        run.backward = [[str(c) for c in g] for g in capture.backward_collectives]
        torch._dynamo.reset()
    return run


def compare(run: TrainRun, eager: TrainRun, rtol: float = 1e-4, atol: float = 1e-5) -> tuple[bool, float, float]:
    """``(match, max |loss diff|, max |grad diff|)`` of ``run`` against
    ``eager`` over every step (``torch.testing.assert_close`` tolerances
    ``rtol``/``atol``; a failed or shorter run does not match)."""
    if run.error is not None or len(run.losses) != len(eager.losses):
        return False, float("nan"), float("nan")
    loss_diff = max((abs(a - b) for a, b in zip(run.losses, eager.losses)), default=0.0)
    grad_diff, match = 0.0, True
    for step_grads, eager_grads in zip(run.grads, eager.grads):
        for g, e in zip(step_grads, eager_grads):
            if g.shape != e.shape:
                return False, loss_diff, float("nan")
            if g.numel():
                grad_diff = max(grad_diff, (g - e).abs().max().item())
            match = match and torch.allclose(g, e, rtol=rtol, atol=atol)
    for a, b in zip(run.losses, eager.losses):
        match = match and abs(a - b) <= atol + rtol * abs(b)
    return match, loss_diff, grad_diff
