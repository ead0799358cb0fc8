"""``dynamo_dist.explain``: graph breaks, recompiles and collectives of a
compiled program, in user terms.

    report = dynamo_dist.explain(fn)(*args, **kwargs)   # like torch._dynamo.explain
    print(report); report.to_dict()

    with explaining() as session:        # every torch.compile inside the block
        step = torch.compile(step)
        step(x, mesh, (Shard(0),)); step(x, mesh, (Replicate(),))
    print(session.report)

Both compile every graph with a recording backend that lowers it like
``aot_eager`` (``backend="eager"`` skips AOTAutograd: faster, but the
collectives DTensor inserts are then not visible), as ``torch._dynamo.explain``
also replaces the backend with its own. ``backend="inductor"`` compiles with
inductor, caches as the user has them, and reports each graph's FX graph and
AOTAutograd cache outcome (hit, miss, or bypass and why).
"""

from __future__ import annotations

import contextlib
import functools
from typing import Any, Callable, Iterator

import torch

from .. import _hooks
from .._compat import observe as O
from .recording import Recorder
from .report import PLUGIN, STOCK, ExplainReport


class Session:
    """What ``explaining()`` yields; ``report`` is filled in when the block ends."""

    def __init__(self, recorder: Recorder, mode: str) -> None:
        self.recorder, self.mode = recorder, mode
        self.report: ExplainReport | None = None

    @property
    def backend(self) -> Callable[..., Any]:
        """The recording backend, for compiles made outside the patched
        ``torch.compile`` (``torch._dynamo.optimize(session.backend)``)."""
        return self.recorder.backend


@contextlib.contextmanager
def explaining(plugin: bool = True, backend: str = "aot_eager") -> Iterator[Session]:
    """Record everything compiled inside the block, with dynamo_dist installed
    (``plugin=False``: with stock torch). ``torch.compile`` called inside the
    block gets the recording backend in place of its own (``mode``/``options``,
    which only tune inductor, are dropped). The install state, ``torch.compile``
    and every logger are restored after."""
    with _hooks.plugin_state(plugin):
        recorder = Recorder(backend)
        session = Session(recorder, PLUGIN if plugin else STOCK)
        original_compile = torch.compile

        @functools.wraps(original_compile)
        def compile_recorded(model: Any = None, **kwargs: Any) -> Any:
            for inductor_only in ("backend", "mode", "options"):
                kwargs.pop(inductor_only, None)
            return original_compile(model, backend=recorder.backend, **kwargs)

        with recorder:
            patches = _hooks.compile_patches(compile_recorded)
            try:
                yield session
            finally:
                patches.restore()
        session.report = recorder.report(session.mode)


def explain(fn: Callable[..., Any], *, backend: str = "aot_eager",
            compare_stock: bool = False) -> Callable[..., ExplainReport]:
    """``explain(fn)(*args, **kwargs)`` runs ``fn`` once, compiled with
    dynamo_dist, and returns an ``ExplainReport``: every graph break (user
    file and line, gb_type, explanation, hints, plugin or stock), every
    recompile (the failed guard in user terms), each captured graph's
    collectives and input/output counts (``backend="inductor"``: also its
    compile-cache outcomes, ``graph.cache``). ``compare_stock=True`` runs ``fn``
    a second time with the plugin uninstalled (``report.stock``); its errors
    are recorded, not raised.

    Dynamo's caches are reset before and after (as ``torch._dynamo.explain``
    does); the install state is left as it was.
    """

    def run(*args: Any, **kwargs: Any) -> ExplainReport:
        report = _run_once(fn, args, kwargs, plugin=True, backend=backend, reraise=True)
        if compare_stock:
            report.stock = _run_once(fn, args, kwargs, plugin=False, backend=backend, reraise=False)
        return report

    return run


def _run_once(fn: Callable[..., Any], args: tuple, kwargs: dict, *, plugin: bool, backend: str,
              reraise: bool) -> ExplainReport:
    O.reset_dynamo()
    error: BaseException | None = None
    try:
        with explaining(plugin=plugin, backend=backend) as session:
            compiled = torch.compile(fn)
            try:
                compiled(*args, **kwargs)
            except Exception as e:
                error = e
    finally:
        O.reset_dynamo()
    assert session.report is not None
    if error is not None:
        if reraise:
            raise error
        session.report.error = f"{type(error).__name__}: {first_line(error)}"
    return session.report


def first_line(e: BaseException) -> str:
    lines = str(e).strip().splitlines()
    return lines[0][:200] if lines else ""
