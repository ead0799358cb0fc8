"""Train a tensor-parallel model for a few steps eagerly and compiled, on this
rank, and record what a comparison needs: losses and gradients per step,
graph breaks, compiles and recompiles, the collectives of each captured
graph, and step times. Used by ``python -m dynamo_dist demo``.

Every :class:`Trainer` builds its model from the same seed and feeds the same
inputs at the same step, so an eager and a compiled trainer are comparable
step by step. :func:`train_interleaved` steps several trainers in turn (step
1 of each, then step 2 of each, ...), so that a machine whose load drifts
(ranks sharing a few cores with other work) skews them alike.
"""

from __future__ import annotations

import contextlib
import threading
import time
import traceback
from dataclasses import dataclass, field
from typing import Callable, Iterator, Sequence

import torch
import torch.distributed as dist
import torch.nn.functional as F

from .._compat import observe as O
from ..diagnostics.backend import CaptureBackend
from .models import build_model, local_input, make_input

__all__ = ["TrainRun", "Trainer", "train_interleaved", "compare", "ticking"]


@dataclass
class TrainRun:
    """One training run on one rank (plain data, picklable).

    ``grads[step]`` holds this rank's local gradient shards (parameter order);
    ``step_ms`` the wall time of each step (forward, backward, optimizer step,
    between two barriers); ``compiles``: graphs compiled during the first
    step; ``recompiles``: graphs compiled after it; ``forward``/``backward``:
    the collectives of each captured graph (``"all_reduce[<group name>]"``,
    ``"wait_tensor"``); ``error``: a traceback if the run failed."""

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

    if device.type == "cuda":
        torch.cuda.synchronize(device)
    dist.barrier()


def _local(t: torch.Tensor) -> torch.Tensor:
    return t.to_local() if hasattr(t, "to_local") else t


class Trainer:
    """SGD on an MSE loss for ``model_name`` (see
    :mod:`dynamo_dist.demo.models`), parallelized on the 1-D ``mesh``.
    ``backend=None`` runs eagerly; otherwise the model is compiled with
    :class:`~dynamo_dist.diagnostics.backend.CaptureBackend` (``backend``) under
    whatever Dynamo configuration is active when it first runs (plugin
    installed or not). ``loss.backward()`` and the optimizer step run outside
    the compiled region, as users write them."""

    def __init__(self, model_name: str, config, mesh, *, backend: str | None = None,
                 device: torch.device | str = "cpu", label: str = "", lr: float = 0.05) -> None:

        self.model_name, self.config, self.mesh = model_name, config, mesh
        self.device = torch.device(device)
        self.run = TrainRun(label or (backend or "eager"))
        self.model = build_model(model_name, config, mesh=mesh, device=self.device)
        self.opt = torch.optim.SGD(self.model.parameters(), lr=lr)
        self.capture = CaptureBackend(backend) if backend is not None else None
        self.fn: Callable[[torch.Tensor], torch.Tensor] = (
            torch.compile(self.model, backend=self.capture) if self.capture is not None else self.model)
        self._reasons: set[str] = set()

    def step(self, index: int) -> None:
        """Training step ``index`` (inputs drawn from it); a failure is
        recorded in ``run.error`` and later steps are skipped."""


        if self.run.error is not None:
            return
        run, device = self.run, self.device
        breaks = O.graph_break_count()
        reasons = O.graph_break_reasons()
        try:
            x = local_input(self.model_name, make_input(self.config, seed=100 + index, device=device), self.mesh)
            target = local_input(self.model_name, make_input(self.config, seed=200 + index, device=device),
                                 self.mesh)
            _sync(device)
            start = time.perf_counter()
            loss = F.mse_loss(self.fn(x), target)
            loss.backward()
            self.opt.step()  # plain SGD: leaves the gradients as they are
            _sync(device)
            run.step_ms.append(1000 * (time.perf_counter() - start))
            run.losses.append(loss.item())
            run.grads.append([_local(p.grad).detach().clone() if p.grad is not None else torch.zeros(0)
                              for p in self.model.parameters()])
            self.opt.zero_grad(set_to_none=True)
        except Exception:
            run.error = traceback.format_exc(limit=-8)
        run.graph_breaks += O.graph_break_count() - breaks
        self._reasons |= O.graph_break_reasons() - reasons
        if self.capture is not None and index == 0:
            run.compiles = self.capture.compiles

    def finish(self) -> TrainRun:
        """The record, with recompiles and the captured collectives filled in."""
        run = self.run
        run.break_reasons = sorted(self._reasons)
        if self.capture is not None:
            run.recompiles = max(0, self.capture.compiles - run.compiles)
            run.forward = [[str(c) for c in g] for g in self.capture.forward_collectives]
            run.backward = [[str(c) for c in g] for g in self.capture.backward_collectives]
        return run


@contextlib.contextmanager
def ticking(progress: Callable[[str], None], what: str, every: float = 10.0) -> Iterator[None]:
    """Say ``what ... N s`` every ``every`` seconds until the block ends."""
    done = threading.Event()
    start = time.perf_counter()

    def tick() -> None:
        while not done.wait(every):
            progress(f"{what} ... {time.perf_counter() - start:.0f} s")

    thread = threading.Thread(target=tick, daemon=True)
    thread.start()
    try:
        yield
    finally:
        done.set()
        thread.join()


def train_interleaved(trainers: Sequence[Trainer], steps: int,
                      progress: Callable[[str], None] = lambda line: None) -> list[TrainRun]:
    """``steps`` steps of every trainer, in turn; returns their records.
    While a compiled trainer's first step compiles, ``progress`` hears about
    it every 10 s."""
    for index in range(steps):
        for trainer in trainers:
            if index == 0 and trainer.capture is not None:
                label = trainer.run.label
                progress(f"{label}: compiling (first step) ...")
                with ticking(progress, f"{label}: still compiling"):
                    trainer.step(index)
            else:
                trainer.step(index)
            run = trainer.run
            if run.error is not None and len(run.step_ms) == index:
                progress(f"{run.label}: step {index + 1}/{steps} FAILED")
            elif run.error is None:
                progress(f"{run.label}: step {index + 1}/{steps}  loss {run.losses[-1]:.6f}  "
                         f"{run.step_ms[-1]:.1f} ms")
    return [trainer.finish() for trainer in trainers]


def compare(run: TrainRun, eager: TrainRun, rtol: float = 1e-4, atol: float = 1e-5) -> tuple[bool, float, float]:
    """``(match, max |loss diff|, max |grad diff|)`` of ``run`` against
    ``eager`` over every step (``torch.allclose`` with ``rtol``/``atol``; a
    failed or shorter run does not match)."""
    if run.error is not None or eager.error is not None or len(run.losses) != len(eager.losses):
        return False, float("nan"), float("nan")
    loss_diff = max((abs(a - b) for a, b in zip(run.losses, eager.losses)), default=0.0)
    grad_diff, match = 0.0, True
    for step_grads, eager_grads in zip(run.grads, eager.grads):
        if len(step_grads) != len(eager_grads):
            return False, loss_diff, float("nan")
        for g, e in zip(step_grads, eager_grads):
            if g.shape != e.shape:
                return False, loss_diff, float("nan")
            if g.numel():
                grad_diff = max(grad_diff, (g - e).abs().max().item())
            match = match and torch.allclose(g, e, rtol=rtol, atol=atol)
    for a, b in zip(run.losses, eager.losses):
        match = match and abs(a - b) <= atol + rtol * abs(b)
    return match, loss_diff, grad_diff
