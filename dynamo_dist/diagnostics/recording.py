"""Record what Dynamo does while a program runs, through torch's own channels:

- graph breaks: the ``graph_breaks`` log artifact (``breaks.py``);
- compiles, recompiles (with the failed guard) and failed compiles:
  ``torch._dynamo.utils.get_compilation_metrics()``, one row per frame compile;
- dynamo_dist's guards: ``guards/_notes.py`` (for recompile reasons in user terms);
- graphs: a recording backend that sees every Dynamo graph and, lowering it
  like ``aot_eager`` (or with inductor), the forward/backward graphs
  AOTAutograd makes (where DTensor's collectives first appear);
- compile caches (lowering ``inductor`` only): the hit / miss / bypass
  artifacts inductor and AOTAutograd log to torch's structured trace (what
  ``TORCH_TRACE`` / tlparse show), with their reasons (``caches.py``);
- torch's precompile (``caching_precompile``): each lookup in Dynamo's
  cache and each package bypass, so each frame says whether it was traced
  here or loaded, and why what was traced is not saved (``precompile.py``).

``Recorder`` is a context manager that changes these for its duration only
and puts every logger level, handler and limit back on exit. Nothing it does
may fail the user's program: its callbacks swallow their own errors, and
Dynamo's ``suppress_errors`` is on, so a frame that fails to compile runs
eagerly and is reported instead.
"""

from __future__ import annotations

import contextlib
import logging
import os
from typing import Any, Callable

import torch.distributed as dist
import torch.fx
from torch.distributed.tensor import DTensor

from .. import _hooks
from .._compat import dynamo_logs as L
from .._compat import observe as O
from .. import compile_once
from ..guards import _notes
from . import breaks as B
from . import caches as K
from . import precompile as P
from . import spmd as SP
from .backend import CaptureBackend
from .cache_log import TraceHandler
from .graphs import collectives_in, collectives_in_printed
from .guard_terms import clean_guard, describe_value, explain_failure, strip_scope, summarize
from .report import CapturedGraph, CompileFailure, ExplainReport, Recompile

LOWERINGS = ("aot_eager", "eager", "inductor")
_METRICS_LIMIT = 1_000_000  # keep every row of a recorded run


class _BreakHandler(logging.Handler):
    def __init__(self, sink: list[tuple[str, str]]) -> None:
        super().__init__(logging.DEBUG)
        self.sink = sink

    def emit(self, record: logging.LogRecord) -> None:
        try:
            self.sink.append((O.current_compile_id(), record.getMessage()))
        except Exception:
            pass


class Recorder:
    """``with Recorder() as rec: ...`` then ``rec.report()``."""

    def __init__(self, lowering: str = "aot_eager") -> None:
        # inductor: the AOTAutograd cache stays as the user has it, so the
        # outcomes reported are the real compile's (on a hit, AOTAutograd
        # traces nothing: the graph's forward/backward are then not seen).
        self.backend = CaptureBackend(lowering, allowed=LOWERINGS, on_graph=self.add_graph,
                                        on_stage=self.add_stage, on_error=self._not_lowered, tolerant=True,
                                        name=f"dynamo_dist_explain_{lowering}", autograd_cache=True)
        self.lowering = lowering
        self.caches = K.CacheEvents()
        self.precompile = P.Precompile()
        self._logs: list[tuple[str, str]] = []
        self._graphs: list[CapturedGraph] = []
        # compile id -> stage -> the collectives of the post-AOT graph torch
        # printed (inductor): all that is seen of a graph the AOTAutograd
        # cache served. Read when logged, while the program's groups live.
        self._printed: dict[str, dict[str, list]] = {}
        # compile id -> {stripped source: (tracked, summary)}
        self.notes: dict[str, dict[str, tuple[str, dict]]] = {}
        self._rows: list[Any] = []
        self._stack: contextlib.ExitStack | None = None
        self._world: tuple[int, int] | None = None  # (rank, size) seen while compiling
        self._compile_once: str | None = None  # why graphs were not shared, as the last compile saw it

    # -- lifetime -------------------------------------------------------------
    def __enter__(self) -> "Recorder":

        # Rows of Dynamo's compile metrics that were there before are not this run's.
        self._before = {id(m) for m in O.compilation_metrics()}
        # Every change to torch (graph-break logger, duplicate checker,
        # compile-metrics limit, suppress_errors) is one reversible Patches.
        # Only inductor consults the compile caches: only then is the
        # structured trace (which costs its payloads) switched on.
        trace = TraceHandler(self.caches, self._on_printed) if self.lowering == "inductor" else None
        self._patches = _hooks.recording_patches(_BreakHandler(self._logs), _METRICS_LIMIT, trace)
        _safely(self.precompile.watch, self._patches)
        _notes.add_listener(self._on_note)
        self._stack = contextlib.ExitStack()
        self._stack.callback(self._finish)
        return self

    def _finish(self) -> None:

        try:
            _notes.remove_listener(self._on_note)
            self._rows = [m for m in O.compilation_metrics() if id(m) not in self._before]
        finally:
            _hooks.end_recording(self._patches)

    def __exit__(self, *exc: Any) -> None:
        assert self._stack is not None
        self._stack.close()
        self._stack = None

    # -- callbacks (never raise) ------------------------------------------------
    @staticmethod
    def _not_lowered(graph: CapturedGraph, e: BaseException) -> None:
        graph.note = f"not lowered by AOTAutograd ({type(e).__name__}: {str(e)[:120]}); ran as captured"

    def _on_printed(self, compile_id: str, stage: str, code: str) -> None:
        self._printed.setdefault(compile_id, {})[stage] = collectives_in_printed(code, stage, waits=False)

    def _collectives_from_printed(self, graph: CapturedGraph) -> None:
        """A graph whose post-AOT graphs were never traced here (an
        AOTAutograd cache hit): its collectives, read from their printed code."""
        printed = self._printed.get(graph.compile_id, {})
        if not printed or any(s in graph.stages for s in ("forward", "backward")):
            return
        graph.collectives = []
        for stage, collectives in printed.items():
            graph.stages.append(stage)
            graph.collectives.extend(collectives)

    def _on_note(self, compile_id: str, source: str, tracked: str, value: Any) -> None:
        self.notes.setdefault(compile_id, {})[strip_scope(source)] = (tracked, summarize(tracked, value))

    def add_graph(self, gm: torch.fx.GraphModule) -> CapturedGraph | None:
        try:
            if dist.is_available() and dist.is_initialized():
                self._world = (dist.get_rank(), dist.get_world_size())
            compile_id = O.current_compile_id()
            nodes = list(gm.graph.nodes)
            output = next((n for n in reversed(nodes) if n.op == "output"), None)
            outs = output.args[0] if output is not None else ()
            graph = CapturedGraph(
                compile_id=compile_id, function="?", file="?", line=0,
                inputs=sum(n.op == "placeholder" for n in nodes),
                outputs=len(outs) if isinstance(outs, (tuple, list)) else 1,
                ops=sum(n.op in ("call_function", "call_method", "call_module") for n in nodes),
                collectives=collectives_in(gm, "dynamo", waits=False),
                stages=["dynamo"],
                code=gm.code.strip(),
            )
            self.precompile.seen_on |= O.precompile_caching()
            if self.lowering == "inductor":
                self.caches.settings[compile_id] = O.compile_cache_settings()
                self._compile_once = compile_once.inactive_reason()
            self._note_dtensor_inputs(compile_id, nodes)
            graph.spmd = _safely(SP.graph_types, gm)
            graph.spmd = _safely(SP.add_calls, graph.spmd, _safely(SP.spmd_calls, gm, "dynamo") or [], False) \
                or graph.spmd
            self._graphs.append(graph)
            return graph
        except Exception:
            return None

    def _note_dtensor_inputs(self, compile_id: str, nodes: list[torch.fx.Node]) -> None:

        for node in nodes:
            if node.op != "placeholder":
                continue
            value = node.meta.get("example_value")
            grapharg = node.meta.get("grapharg")
            if isinstance(value, DTensor) and grapharg is not None and grapharg.source is not None:
                self._on_note(compile_id, grapharg.source.name, "dtensor", value)

    def add_stage(self, graph: CapturedGraph, gm: torch.fx.GraphModule, stage: str) -> None:
        try:
            found = collectives_in(gm, stage, waits=False)
            if "forward" not in graph.stages and "backward" not in graph.stages:
                graph.collectives = []  # post-AOT graphs replace the Dynamo graph's list
            graph.stages.append(stage)
            graph.collectives.extend(found)
            graph.spmd = _safely(SP.add_calls, graph.spmd, _safely(SP.spmd_calls, gm, stage) or [], True) \
                or graph.spmd
            self.caches.stage_starts(graph.compile_id, stage)
        except Exception:
            pass

    # -- the report -----------------------------------------------------------------
    def report(self, mode: str) -> ExplainReport:

        rows = [r for r in self._rows if r.compile_id is not None and r.is_forward is not False]
        # A compile that failed early has no code name: take its frame's (compile id "frame/attempt").
        by_frame = {str(r.compile_id).split("/")[0]: (L.user_function(r.co_name), r.co_filename,
                                                      r.co_firstlineno or 0)
                    for r in rows if r.co_name is not None}
        frames = {str(r.compile_id): by_frame.get(str(r.compile_id).split("/")[0], ("?", "?", 0)) for r in rows}
        memo: dict = {}
        found = [b for cid, text in self._logs if (b := _safely(B.parse_log, text, cid, memo)) is not None]
        logged = {c for b in found for c in b.compile_ids}
        report = ExplainReport(mode=mode, backend=self.lowering)
        if dist.is_available() and dist.is_initialized():
            report.rank, report.world_size = dist.get_rank(), dist.get_world_size()
        elif self._world is not None:  # the program's world has ended since
            report.rank, report.world_size = self._world
        elif "RANK" in os.environ and "WORLD_SIZE" in os.environ:  # a launcher's, after the script's world ended
            report.rank, report.world_size = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
        for r in rows:
            cid = str(r.compile_id)
            fn, file, line = frames[cid]
            if r.recompile_reason:
                report.recompiles.append(self._recompile(cid, fn, file, line, r.recompile_reason))
            if r.fail_type is None:
                continue
            if r.fail_type == "Unsupported" and cid not in logged:
                at = (r.fail_user_frame_filename, r.fail_user_frame_lineno) if r.fail_user_frame_filename \
                    else (file, line)
                found.append(B.from_failure(r.fail_reason or "", *at, fn, cid))
            elif r.fail_type != "Unsupported":
                first = (r.fail_reason or "").strip().splitlines()
                report.failures.append(CompileFailure(cid, fn, file, line,
                                                      f"{r.fail_type}: {first[0] if first else ''}"[:300]))
        report.breaks = B.merge(found)
        for graph in self._graphs:
            graph.function, graph.file, graph.line = frames.get(graph.compile_id, ("?", "?", 0))
        report.graphs = list(self._graphs)
        if self.lowering == "inductor":
            for graph in report.graphs:
                _safely(self._collectives_from_printed, graph)
                _safely(self.caches.fill, graph, mode)
            report.cache_dir = next((s["dir"] for s in self.caches.settings.values()), None)
            report.compile_once = self._compile_once or "on"
        _safely(self.precompile.fill, report, rows, self.lowering, self.caches.sources)
        report.guards = {cid: [f"`{src}`: {describe_value(tracked, info)}" for src, (tracked, info) in notes.items()]
                         for cid, notes in self.notes.items()}
        return report

    def _recompile(self, cid: str, fn: str, file: str, line: int, reason: str) -> Recompile:
        previous, guard = clean_guard(reason)
        terms = _safely(explain_failure, guard, self.notes.get(previous, {}), self.notes.get(cid, {}))
        return Recompile(function=fn, file=file, line=line, compile_id=cid, previous=previous,
                         reason=terms or guard, guard=guard)


def _safely(fn: Callable[..., Any], *args: Any) -> Any:
    """Text the report cannot read is left out (or shown raw), never an error
    in the user's program."""
    try:
        return fn(*args)
    except Exception:
        return None
