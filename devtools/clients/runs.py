"""Train a client's model a few steps eagerly, compiled with stock torch and
compiled with dynamo_dist, and say how each compiled run compares.

A client driver supplies a ``build(compiled, backend)`` that returns a fresh
:class:`Training` (its model, parallelized and, when ``compiled``, compiled
the way the client compiles it). :func:`run_modes` runs it once per mode on
this rank, in the same world:

- ``eager``: the reference losses and gradients (kept on this rank);
- ``stock`` / ``plugin``: compiled, inside ``explaining()`` (so every
  ``torch.compile`` the client makes, ``nn.Module.compile`` included, is
  recorded: graph breaks, recompiles with their reasons, failed compiles and
  the collectives of each captured graph), with Dynamo's counters alongside.

Every mode starts from the same weights (the first build's, copied in) and
sees the same batches, so per-step losses and gradients must match eager.
Results are plain data (picklable), one :class:`RunResult` per mode.
"""

from __future__ import annotations

import contextlib
import os
import time
import traceback
from dataclasses import dataclass, field
from typing import Any, Callable, Iterable, Iterator, Mapping, Protocol, Sequence

import torch
import torch.distributed as dist

from dynamo_dist import _hooks
from dynamo_dist._compat import observe as O
from devtools.bench._timing import cpu_seconds
from dynamo_dist.diagnostics.explain import explaining
from dynamo_dist.diagnostics.report import PLUGIN as PLUGIN_ORIGIN
from dynamo_dist.diagnostics.report import ExplainReport
from devtools import PLUGIN, STOCK

MODES = ("eager", STOCK, PLUGIN)


class Training(Protocol):
    """One built model and its optimizer, ready to train."""

    def state(self) -> list[torch.Tensor]:
        """This rank's pieces of every parameter and buffer, in a fixed order."""

    def load(self, state: Sequence[torch.Tensor]) -> None:
        """Copy ``state`` (from :meth:`state` of an equal build) in."""

    def step(self, index: int) -> tuple[float, list[torch.Tensor]]:
        """Train on batch ``index``: the loss and this rank's gradient pieces
        (before the optimizer step), in parameter order."""


class ModelState:
    """``Training``'s state and load for a build that keeps its model in
    ``self.model``: every parameter and buffer, this rank's piece of each."""

    model: torch.nn.Module

    def state(self) -> list[torch.Tensor]:
        return [local(t) for t in (*self.model.parameters(), *self.model.buffers())]

    def load(self, state: Sequence[torch.Tensor]) -> None:
        with torch.no_grad():
            for mine, theirs in zip(self.state(), state, strict=True):
                mine.copy_(theirs)


@dataclass
class GraphSummary:
    """One captured graph: where it was compiled from and what it communicates."""

    function: str
    file: str
    collectives: list[str]  # op names of the forward and backward graphs, waits left out


@dataclass
class RunResult:
    """What one mode did on one rank (plain data)."""

    case: str
    mode: str
    rank: int
    losses: list[float] = field(default_factory=list)
    max_loss_diff: float | None = None  # vs eager, over all steps
    max_grad_diff: float | None = None
    step_seconds: list[float] = field(default_factory=list)  # wall time of each step
    step_cpu_seconds: list[float] = field(default_factory=list)  # CPU time (devtools.bench._timing.cpu_seconds)
    # Building the model: the client's own setup and its torch.compile calls
    # (where torch's precompile loads a frame from Dynamo's cache).
    build_seconds: float | None = None
    build_cpu_seconds: float | None = None
    graph_breaks: int | None = None  # Dynamo's counter (every occurrence)
    recompiles: int | None = None
    # Frames Dynamo traced (its unique_graphs counter): 0 where every frame
    # was loaded from Dynamo's cache (torch's precompile).
    frames_traced: int | None = None
    # Dynamo's cache lookups (torch's precompile: ``hit``, ``miss``, ``error``)
    # and the compile caches' outcomes (``outcome_counts``) of the compiled mode.
    dynamo_cache: dict[str, int] = field(default_factory=dict)
    cache_outcomes: dict[str, dict[str, int]] = field(default_factory=dict)
    graphs: list[GraphSummary] = field(default_factory=list)
    break_reasons: list[str] = field(default_factory=list)  # "origin: gb_type (file:line)"
    recompile_reasons: list[str] = field(default_factory=list)
    failures: list[str] = field(default_factory=list)  # frames that failed to compile
    # What dynamo_dist guarded, in user terms (DTensor inputs among them): none
    # where the program compiles no distributed object.
    distributed_guards: list[str] = field(default_factory=list)
    error: str | None = None  # the run raised this

    def collectives(self, leave_out_file: str = "") -> list[list[str]]:
        """Collectives of each captured graph (but those compiled from a file
        whose path ends with ``leave_out_file``)."""
        return [g.collectives for g in self.graphs if not (leave_out_file and g.file.endswith(leave_out_file))]

    def report(self) -> str:
        lines = [f"{self.case} {self.mode} on rank {self.rank}: losses {self.losses}, max |loss - eager| "
                 f"{self.max_loss_diff}, max |grad - eager| {self.max_grad_diff}, graph breaks {self.graph_breaks}, "
                 f"recompiles {self.recompiles}, graphs {len(self.graphs)}"]
        lines += [f"  graph {g.function} ({g.file}): {g.collectives}" for g in self.graphs]
        lines += [f"  break {b}" for b in self.break_reasons]
        lines += [f"  recompile {r}" for r in self.recompile_reasons]
        lines += [f"  failed {f}" for f in self.failures]
        if self.error:
            lines.append("  error:\n" + self.error)
        return "\n".join(lines)


@dataclass
class _Reference:
    losses: list[float]
    grads: list[list[torch.Tensor]]


def run_modes(case: str, build: Callable[[bool, str], Training], steps: int, modes: Sequence[str] = MODES,
              backend: str = "aot_eager", explain: bool = True) -> list[RunResult]:
    """Each of ``modes`` (``eager`` first if present) on this rank; the
    compiled ones are compared with the eager one. ``build(compiled,
    backend)`` makes a fresh Training. ``explain=False`` compiles with
    ``backend`` itself, unrecorded (what a timing wants: the first step of a
    cold or a warm inductor cache); a result then has graph breaks but no
    recompiles, graphs or reasons."""
    reference: _Reference | None = None
    weights: list[torch.Tensor] | None = None
    results = []
    for mode in modes:
        result = RunResult(case=case, mode=mode, rank=_rank())
        try:
            reference, weights = _run(mode, build, steps, backend, explain, result, reference, weights)
        except Exception:
            result.error = traceback.format_exc(limit=-8)
        results.append(result)
    return results


def _run(mode: str, build: Callable[[bool, str], Training], steps: int, backend: str, explain: bool,
         result: RunResult, reference: _Reference | None, weights: list[torch.Tensor] | None
         ) -> tuple[_Reference | None, list[torch.Tensor] | None]:
    O.reset_dynamo()
    O.dynamo_counters().clear()
    O.clear_sharding_propagation_cache()  # each build sees its own meshes, not an equal earlier build's
    if mode == "eager":
        training = build(False, backend)
        weights = weights or [t.detach().clone() for t in training.state()]
        training.load(weights)
        grads = _train(training, steps, result)
        return _Reference(list(result.losses), grads), weights
    plugin = mode == PLUGIN
    with explaining(plugin=plugin, backend=backend) if explain else _installed(plugin) as session:
        start, cpu = time.perf_counter(), cpu_seconds()
        training = build(True, backend)
        result.build_seconds, result.build_cpu_seconds = time.perf_counter() - start, cpu_seconds() - cpu
        if weights is None:
            weights = [t.detach().clone() for t in training.state()]
        training.load(weights)
        _every_rank_ready()
        grads = _train(training, steps, result)
    result.graph_breaks = sum(O.dynamo_counters()["graph_break"].values())
    result.frames_traced = O.dynamo_counters()["stats"]["unique_graphs"]
    result.dynamo_cache = {k.removeprefix("dynamo_cache_"): int(v)
                           for k, v in O.dynamo_counters()["dynamo_cache"].items()}
    result.cache_outcomes = O.outcome_counts()
    if session is not None:
        _read_report(session.report, result)
    if reference is not None:
        result.max_loss_diff = max(abs(a - b) for a, b in zip(result.losses, reference.losses))
        result.max_grad_diff = max((float((a - b).abs().max()) if a.numel() else 0.0)
                                   for step_a, step_b in zip(grads, reference.grads)
                                   for a, b in zip(step_a, step_b))
    O.reset_dynamo()
    return reference, weights


_installed = _hooks.plugin_state


@contextlib.contextmanager
def rank_caches(precompile: str | None, shared: bool = False) -> Iterator[None]:
    """This rank's compile caches in ``<precompile>/rank<rank>`` (``shared``:
    in ``<precompile>/host``, one dir for every rank, as torch's default cache
    dir is one per user on a host), Dynamo's entries (torch's precompile)
    saved there when the block ends (nothing where ``precompile`` is None)."""
    if precompile is None:
        yield
        return
    was = os.environ.get("TORCHINDUCTOR_CACHE_DIR")
    os.environ["TORCHINDUCTOR_CACHE_DIR"] = os.path.join(precompile, "host" if shared else f"rank{_rank()}")
    try:
        yield
        torch.compiler.save_cache_artifacts()
    finally:
        if was is None:
            os.environ.pop("TORCHINDUCTOR_CACHE_DIR", None)
        else:
            os.environ["TORCHINDUCTOR_CACHE_DIR"] = was


def _every_rank_ready() -> None:
    """Ranks start their first step together (its time is then this rank's
    own work and waits, not a peer still building its model)."""
    if dist.is_initialized():
        dist.barrier()


def _train(training: Training, steps: int, result: RunResult) -> list[list[torch.Tensor]]:
    grads = []
    for index in range(steps):
        start, cpu = time.perf_counter(), cpu_seconds()
        loss, step_grads = training.step(index)
        result.step_seconds.append(time.perf_counter() - start)
        result.step_cpu_seconds.append(cpu_seconds() - cpu)
        result.losses.append(loss)
        grads.append(step_grads)
    return grads


def _read_report(report: ExplainReport | None, result: RunResult) -> None:
    if report is None:
        return
    result.recompiles = len(report.recompiles)
    result.graphs = [GraphSummary(g.function, g.file, [c.op for c in g.collectives if c.op != "wait_tensor"])
                     for g in report.graphs]
    result.break_reasons = [f"{b.origin}: {b.gb_type} ({b.where})" for b in report.breaks]
    result.recompile_reasons = [f"{r.function}: {r.reason}" + (f" (guard {r.guard})" if r.guard != r.reason else "")
                                for r in report.recompiles]
    result.failures = [f"{f.function} ({f.file}:{f.line}): {f.error}" for f in report.failures]
    result.distributed_guards = sorted({g for guards in report.guards.values() for g in guards})


def problems(plugin: RunResult, stock: RunResult | None, loss_tol: float, grad_tol: float) -> list[str]:
    """What is wrong with a plugin run, judged against eager and stock:
    an error, a compile failure, a ``dynamo_dist:`` graph break, more graph
    breaks or recompiles than stock, losses or gradients off eager."""
    found = []
    if plugin.error:
        found.append(f"raised: {plugin.error.strip().splitlines()[-1]}")
    found += [f"compile failure: {f}" for f in plugin.failures]
    found += [f"plugin graph break: {b}" for b in plugin.break_reasons if b.startswith(PLUGIN_ORIGIN)]
    if plugin.max_loss_diff is None or plugin.max_loss_diff > loss_tol:
        found.append(f"losses differ from eager by {plugin.max_loss_diff}")
    if plugin.max_grad_diff is None or plugin.max_grad_diff > grad_tol:
        found.append(f"gradients differ from eager by {plugin.max_grad_diff}")
    if stock is not None and not stock.error:
        if (plugin.graph_breaks or 0) > (stock.graph_breaks or 0):
            found.append(f"graph breaks: plugin {plugin.graph_breaks} > stock {stock.graph_breaks}")
        if (plugin.recompiles or 0) > (stock.recompiles or 0):
            found.append(f"recompiles: plugin {plugin.recompiles} > stock {stock.recompiles}: "
                         f"{plugin.recompile_reasons}")
    return found


def failures_against_stock(per_rank: Iterable[Mapping[str, RunResult]], loss_tol: float,
                           grad_tol: float) -> list[str]:
    """Each rank's runs (mode -> RunResult) judged: the plugin run's
    ``problems`` and whether its graphs' collectives differ from stock's,
    each failing rank with both runs' reports. Eager or stock raising is an
    ``AssertionError`` (the comparison has nothing to stand on)."""
    failures = []
    for runs in per_rank:
        eager, stock, plugin = runs["eager"], runs[STOCK], runs[PLUGIN]
        assert eager.error is None and stock.error is None, eager.report() + "\n" + stock.report()
        found = problems(plugin, stock, loss_tol, grad_tol)
        if plugin.collectives() != stock.collectives():
            found.append("the graphs' collectives differ from stock's")
        if found:
            failures.append("\n".join(found) + "\n" + plugin.report() + "\n" + stock.report())
    return failures


def _rank() -> int:
    return dist.get_rank() if dist.is_initialized() else 0


def local(t: Any) -> torch.Tensor:
    """This rank's piece of a (possibly distributed) tensor."""
    to_local = getattr(t, "to_local", None)
    return to_local() if callable(to_local) else t
