"""Run a function eagerly and compiled, and collect what a test checks."""

from __future__ import annotations

import contextlib
from dataclasses import dataclass, field
from typing import Any, Callable, Iterator

import torch.fx
from torch.fx.experimental.symbolic_shapes import GuardOnDataDependentSymNode

from .. import _compat as C
from .._compat import observe as O
from ..diagnostics.compare import difference
from ..diagnostics.graphs import distributed_objects_in
from ..worlds.recording import Collective, CollectiveLog


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
        O.reset_dynamo()
    eager = fn(*args, **kwargs)
    run, _ = _run_compiled(fn, eager, backend, fullgraph, lambda compiled_fn: (compiled_fn(*args, **kwargs), None))
    return run


def _run_compiled(fn: Callable[..., Any], eager: Any, backend: str, fullgraph: bool,
                  call: Callable[[Callable[..., Any]], tuple[Any, BaseException | None]],
                  ) -> tuple[CompiledRun, BaseException | None]:
    """``fn`` compiled with a counting ``backend`` and run by ``call`` (its
    result and the exception it caught, if it catches any), with the graphs,
    frames and graph breaks of that run."""
    counter = O.compile_counter(backend)
    breaks_before = O.graph_break_count()
    compiled_fn = torch.compile(fn, backend=counter, fullgraph=fullgraph)
    compiled, exc = call(compiled_fn)
    run = CompiledRun(
        eager=eager,
        compiled=compiled,
        graphs=list(counter.graphs),
        frame_count=counter.frame_count,
        graph_breaks=O.graph_break_count() - breaks_before,
        compiled_fn=compiled_fn,
    )
    return run, exc


# ---------------------------------------------------------------------------
# The fuzzing oracle.


def _call(fn: Callable[..., Any], args: tuple, kwargs: dict) -> tuple[Any, BaseException | None]:
    try:
        return fn(*args, **kwargs), None
    except Exception as e:  # the oracle compares exceptions too
        return None, e


@contextlib.contextmanager
def one_rank(on: bool) -> Iterator[None]:
    """``compile_on_one_rank`` set to ``on`` for the block (this release's canonical flag)."""
    dist_config = C.distributed.one_rank_config()
    before = dist_config.compile_on_one_rank
    dist_config.compile_on_one_rank = on
    try:
        yield
    finally:
        dist_config.compile_on_one_rank = before


def data_dependent(e: BaseException | None) -> bool:
    """Dynamo's data-dependent error: under ``compile_on_one_rank``, a runtime
    rank used where Python needs an int (a known limitation, accepted)."""
    return isinstance(e, GuardOnDataDependentSymNode) or (e is not None and "data-dependent" in str(e)
                                                           and not _is_internal(e))


def _caused_by(e: BaseException | None, error_type: type[BaseException]) -> bool:
    """``e`` or an exception in its cause chain is an ``error_type``."""
    seen: set[int] = set()
    while e is not None and id(e) not in seen:
        if isinstance(e, error_type):
            return True
        seen.add(id(e))
        e = e.__cause__ or e.__context__
    return False


# The collectives compiled code runs in place of eager's, by design: eager's
# op -> (compiled code's op, why). The comparison reads eager's through it.
TRACED_AS: dict[str, tuple[str, str]] = {
    "scatter": ("broadcast", "functional collectives have no scatter: a traced distribute_tensor broadcasts "
                             "the source tensor on each mesh dim and every rank keeps its piece (the same values, "
                             "the whole tensor moved)"),
}


def _moving(log: CollectiveLog | None, eager: bool = False) -> list[Collective]:
    """What ``log`` recorded since it was last taken, less the collectives
    over one rank; eager's with ``TRACED_AS`` applied."""
    if log is None:
        return []
    ran = [c for c in log.take() if len(c.ranks) > 1]
    return [Collective(TRACED_AS[c.op][0], c.ranks) if eager and c.op in TRACED_AS else c for c in ran]


def _listed(ran: list[Collective]) -> str:
    return "; ".join(map(str, ran)) or "none"


def _is_internal(e: BaseException) -> bool:
    return _caused_by(e, O.InternalTorchDynamoError)


def assert_compiles_like_eager(
    fn: Callable[..., Any],
    *args: Any,
    fullgraph: bool = True,
    backend: str = "eager",
    breaks: int | None = None,
    frames: int | None = None,
    check_graphs: bool = True,
    rtol: float | None = None,
    atol: float | None = None,
    same: Callable[[Any, Any], str | None] | None = None,
    collectives: CollectiveLog | None = None,
    **kwargs: Any,
) -> CompiledRun:
    """Compile ``fn`` and check it behaves exactly like eager on ``args``.

    - the results (and every escaping mesh, group and placement in them)
      equal the eager ones (``same(eager, compiled)`` returns a difference or
      None; default ``difference``);
    - if eager raises, compiled raises the same exception type (with
      ``fullgraph=True``, Dynamo's "Observed exception" naming it also counts,
      and so does Dynamo's ``TorchRuntimeError`` caused by it: an op that
      raises while Dynamo runs it on fake tensors);
    - never an ``InternalTorchDynamoError``;
    - graph breaks: none with ``fullgraph=True``, else ``breaks`` if given;
      compiled frames: ``frames`` if given;
    - no mesh, group or placement in any captured graph (``check_graphs``);
    - with ``collectives`` (the log of a ``recording_world``): the compiled
      call runs the collectives the eager call ran, the same kinds over the
      same group ranks in the same order (a collective over a group of one
      rank moves nothing and is left out: eager's ``distribute_tensor`` runs
      them on a mesh dim of size 1, compiled code does not; eager's kinds are
      read through ``TRACED_AS``).

    Raises ``AssertionError`` describing the first mismatch; returns the run.
    """
    O.reset_dynamo()
    if collectives is not None:
        collectives.clear()
    eager, eager_exc = _call(fn, args, kwargs)
    eager_ran = _moving(collectives, eager=True)
    run, compiled_exc = _run_compiled(fn, eager, backend, fullgraph,
                                      lambda compiled_fn: _call(compiled_fn, args, kwargs))
    compiled_ran = _moving(collectives)
    compiled = run.compiled
    if compiled_exc is not None and _is_internal(compiled_exc):
        raise AssertionError(f"InternalTorchDynamoError: {compiled_exc}") from compiled_exc
    if eager_exc is not None:
        name = type(eager_exc).__name__
        if compiled_exc is None:
            raise AssertionError(f"eager raised {name}: {eager_exc}, compiled returned {compiled!r}")
        if type(compiled_exc) is type(eager_exc):
            return run
        if fullgraph and isinstance(compiled_exc, O.Unsupported) and "Observed exception" in str(compiled_exc) \
                and f"{name}(" in str(compiled_exc):
            return run
        if isinstance(compiled_exc, O.TorchRuntimeError) and _caused_by(compiled_exc, type(eager_exc)):
            return run  # an op's own error met while Dynamo ran the graph on fake tensors, re-raised wrapped
        raise AssertionError(
            f"eager raised {name}: {eager_exc}; compiled raised {type(compiled_exc).__name__}: {compiled_exc}"
        ) from compiled_exc
    if compiled_exc is not None:
        raise AssertionError(
            f"eager returned {eager!r}; compiled raised {type(compiled_exc).__name__}: {compiled_exc}"
        ) from compiled_exc
    found = (same or (lambda a, b: difference(a, b, rtol=rtol, atol=atol)))(eager, compiled)
    if found:
        raise AssertionError(f"compiled != eager: {found}")
    if compiled_ran != eager_ran:
        raise AssertionError("compiled ran other collectives than eager:\n  eager:    "
                             + _listed(eager_ran) + "\n  compiled: " + _listed(compiled_ran))
    expected_breaks = 0 if fullgraph else breaks
    if expected_breaks is not None and run.graph_breaks != expected_breaks:
        raise AssertionError(f"{run.graph_breaks} graph breaks, expected {expected_breaks}")
    if frames is not None and run.frame_count != frames:
        raise AssertionError(f"{run.frame_count} compiled frames, expected {frames}")
    if check_graphs:
        leaks = [leak for gm in run.graphs for leak in distributed_objects_in(gm)]
        if leaks:
            raise AssertionError(f"distributed objects in the graph: {leaks}")
    return run
