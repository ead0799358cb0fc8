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


# ---------------------------------------------------------------------------
# The fuzzing oracle.


def difference(eager: Any, compiled: Any, path: str = "result", *, rtol: float | None = None,
               atol: float | None = None) -> str | None:
    """Where ``compiled`` differs from ``eager`` (None if nowhere).

    Tensors: same shape and dtype, equal values (``assert_close`` with
    ``rtol``/``atol``; exact when both are 0). Meshes: same type and the same
    rank table, dim names, process groups and coordinate. Process groups: the
    same object. Placements and everything else: same type and ``==``.
    """
    from torch.distributed import ProcessGroup
    from torch.distributed.device_mesh import DeviceMesh

    if isinstance(eager, torch.Tensor):
        if not isinstance(compiled, torch.Tensor):
            return f"{path}: eager gave a tensor, compiled gave {type(compiled).__name__} {compiled!r}"
        try:
            torch.testing.assert_close(compiled, eager, rtol=rtol, atol=atol, equal_nan=True)
        except AssertionError as e:
            return f"{path}: tensors differ: {e}"
        return None
    if type(eager) is not type(compiled):
        return (f"{path}: eager gave {type(eager).__name__} {eager!r}, "
                f"compiled gave {type(compiled).__name__} {compiled!r}")
    if isinstance(eager, (tuple, list)):
        if len(eager) != len(compiled):
            return f"{path}: eager has {len(eager)} items {eager!r}, compiled {len(compiled)} {compiled!r}"
        for i, (a, b) in enumerate(zip(eager, compiled)):
            found = difference(a, b, f"{path}[{i}]", rtol=rtol, atol=atol)
            if found:
                return found
        return None
    if isinstance(eager, dict):
        if list(eager) != list(compiled):
            return f"{path}: eager keys {list(eager)!r}, compiled keys {list(compiled)!r}"
        for k in eager:
            found = difference(eager[k], compiled[k], f"{path}[{k!r}]", rtol=rtol, atol=atol)
            if found:
                return found
        return None
    if isinstance(eager, ProcessGroup):
        return None if eager is compiled else f"{path}: compiled returned another ProcessGroup object"
    if isinstance(eager, DeviceMesh):
        from .specs import mesh_key

        if mesh_key(eager) != mesh_key(compiled):
            return f"{path}: meshes differ: eager {mesh_key(eager)}, compiled {mesh_key(compiled)}"
        return None
    try:
        equal = bool(eager == compiled)
    except Exception as e:  # pragma: no cover - exotic values
        return f"{path}: cannot compare {eager!r} and {compiled!r}: {e}"
    return None if equal else f"{path}: eager {eager!r}, compiled {compiled!r}"


def _call(fn: Callable[..., Any], args: tuple, kwargs: dict) -> tuple[Any, BaseException | None]:
    try:
        return fn(*args, **kwargs), None
    except Exception as e:  # the oracle compares exceptions too
        return None, e


def _is_internal(e: BaseException) -> bool:
    from torch._dynamo.exc import InternalTorchDynamoError

    seen: set[int] = set()
    while e is not None and id(e) not in seen:
        if isinstance(e, InternalTorchDynamoError):
            return True
        seen.add(id(e))
        e = e.__cause__ or e.__context__
    return False


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
    **kwargs: Any,
) -> CompiledRun:
    """Compile ``fn`` and check it behaves exactly like eager on ``args``.

    - the results (and every escaping mesh, group and placement in them)
      equal the eager ones (``same(eager, compiled)`` returns a difference or
      None; default ``difference``);
    - if eager raises, compiled raises the same exception type (with
      ``fullgraph=True``, Dynamo's "Observed exception" naming it also counts);
    - never an ``InternalTorchDynamoError``;
    - graph breaks: none with ``fullgraph=True``, else ``breaks`` if given;
      compiled frames: ``frames`` if given;
    - no mesh, group or placement in any captured graph (``check_graphs``).

    Raises ``AssertionError`` describing the first mismatch; returns the run.
    """
    torch._dynamo.reset()
    eager, eager_exc = _call(fn, args, kwargs)
    counter = CompileCounterWithBackend(backend)
    breaks_before = sum(counters["graph_break"].values())
    compiled_fn = torch.compile(fn, backend=counter, fullgraph=fullgraph)
    compiled, compiled_exc = _call(compiled_fn, args, kwargs)
    run = CompiledRun(
        eager=eager,
        compiled=compiled,
        graphs=list(counter.graphs),
        frame_count=counter.frame_count,
        graph_breaks=sum(counters["graph_break"].values()) - breaks_before,
        compiled_fn=compiled_fn,
    )
    if compiled_exc is not None and _is_internal(compiled_exc):
        raise AssertionError(f"InternalTorchDynamoError: {compiled_exc}") from compiled_exc
    if eager_exc is not None:
        name = type(eager_exc).__name__
        if compiled_exc is None:
            raise AssertionError(f"eager raised {name}: {eager_exc}, compiled returned {compiled!r}")
        if type(compiled_exc) is type(eager_exc):
            return run
        from torch._dynamo.exc import Unsupported

        if fullgraph and isinstance(compiled_exc, Unsupported) and "Observed exception" in str(compiled_exc) \
                and f"{name}(" in str(compiled_exc):
            return run
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
    expected_breaks = 0 if fullgraph else breaks
    if expected_breaks is not None and run.graph_breaks != expected_breaks:
        raise AssertionError(f"{run.graph_breaks} graph breaks, expected {expected_breaks}")
    if frames is not None and run.frame_count != frames:
        raise AssertionError(f"{run.frame_count} compiled frames, expected {frames}")
    if check_graphs:
        from .graph_checks import distributed_objects_in

        leaks = [leak for gm in run.graphs for leak in distributed_objects_in(gm)]
        if leaks:
            raise AssertionError(f"distributed objects in the graph: {leaks}")
    return run
