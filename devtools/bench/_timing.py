"""Shared timing machinery: medians, side-by-side alternation, regimes, progress.

Every comparison in the benchmarks is taken inside one process and one run:
the sides (stock torch, the plugin, ...) are sampled in alternating rounds
(ABBA order, so a slow drift of the machine's load hits both sides equally),
each figure is the median of the samples, and each ratio is the median of the
per-round ratios (two samples taken seconds apart see the same load).
"""

from __future__ import annotations

import contextlib
import gc
import statistics
import sys
import time
import types
from dataclasses import dataclass, field
from typing import Any, Callable, Iterator, Sequence

import dynamo_dist
from dynamo_dist import _hooks
from dynamo_dist._compat.observe import lookup_backend
from devtools import PLUGIN, STOCK  # noqa: F401 (the benchmarks read them as T.STOCK, T.PLUGIN)

try:
    import resource
except ImportError:  # Windows
    resource = None  # type: ignore[assignment]



def median(values: Sequence[float]) -> float:
    return float(statistics.median(values)) if values else float("nan")


def rounds(sides: Sequence[str], repeats: int) -> Iterator[tuple[int, str]]:
    """(round, side) in ABBA order: round 0 is A B, round 1 is B A, ..."""
    for r in range(repeats):
        for side in (sides if r % 2 == 0 else list(reversed(sides))):
            yield r, side


@dataclass
class Comparison:
    """Samples of several sides taken in alternating rounds."""

    samples: dict[str, list[float]] = field(default_factory=dict)

    def add(self, side: str, value: float) -> None:
        self.samples.setdefault(side, []).append(value)

    def median(self, side: str) -> float:
        return median(self.samples.get(side, []))

    def ratio(self, side: str, base: str) -> float:
        """Median over rounds of ``side / base`` (paired samples of one round)."""
        pairs = zip(self.samples.get(side, []), self.samples.get(base, []))
        return median([a / b for a, b in pairs if b > 0])

    def as_dict(self, unit: str, scale: float = 1.0) -> dict[str, Any]:
        return {
            f"{side}_{unit}": self.median(side) * scale for side in self.samples
        } | {"samples": {side: [v * scale for v in vs] for side, vs in self.samples.items()}}


def compare(
    sides: Sequence[str],
    repeats: int,
    sample: Callable[[str], dict[str, float]],
    progress: Callable[[str], None] = lambda _: None,
) -> dict[str, Comparison]:
    """``sample(side)`` (one figure per metric, e.g. wall and CPU seconds)
    for each side, ``repeats`` rounds, alternating; a Comparison per metric."""
    result: dict[str, Comparison] = {}
    for r, side in rounds(sides, repeats):
        progress(f"{side} {r + 1}/{repeats}")
        for metric, value in sample(side).items():
            result.setdefault(metric, Comparison()).add(side, value)
    return result


def cpu_seconds() -> float:
    """CPU time of this process and its waited-for children (a compiler run
    by inductor). Unlike wall time it does not count the time other
    processes on a busy machine take the cores away."""
    children = 0.0
    if resource is not None:  # os.times() would tick in 10 ms steps
        usage = resource.getrusage(resource.RUSAGE_CHILDREN)
        children = usage.ru_utime + usage.ru_stime
    return time.process_time() + children


@contextlib.contextmanager
def no_gc() -> Iterator[None]:
    """Collect first, then keep the collector out of a timed loop (as timeit does)."""
    gc.collect()
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if enabled:
            gc.enable()


def time_calls(fn: Callable[..., Any], argsets: Sequence[tuple], calls: int,
               clock: Callable[[], float] = time.perf_counter) -> float:
    """Seconds on ``clock`` for ``calls`` calls of ``fn``, with the argument
    tuples of ``argsets`` in turn (loop overhead included: it is the same for
    every side it is compared with)."""
    n = len(argsets)
    start = clock()
    for i in range(calls):
        fn(*argsets[i % n])
    return clock() - start


# ---------------------------------------------------------------------------
# Stock torch vs the plugin.


def use(side: str) -> None:
    """Switch to stock torch or the plugin through the public API (which
    resets Dynamo: everything compiled so far is dropped)."""

    (dynamo_dist.install if side == PLUGIN else dynamo_dist.uninstall)()


def switch_keeping_caches(side: str) -> None:
    """Switch to ``side`` *without* dropping what the other side compiled.

    ``install()``/``uninstall()`` reset Dynamo, so alternating samples through
    them would recompile every time (minutes with inductor on a multi-rank
    world). The hooks only matter while Dynamo traces: compiled code and its
    guards run the same whichever regime is active. So each side compiles its
    own copy of the function (``clone_function``: a distinct code object, hence
    a distinct Dynamo cache) once, and the timed loops then alternate freely.
    Callers check with a ``FrameCounter`` that nothing recompiles while timing.
    """

    _hooks.set_plugin_state(side == PLUGIN, reset=False)


def clone_function(fn: Callable[..., Any], tag: str) -> Callable[..., Any]:
    """A copy of ``fn`` with its own code object: Dynamo keeps compiled code
    per code object, so each side gets a cache the other never consults."""
    code = fn.__code__.replace(co_name=f"{fn.__name__}_{tag}", co_qualname=f"{fn.__qualname__}_{tag}")
    clone = types.FunctionType(code, fn.__globals__, code.co_name, fn.__defaults__, fn.__closure__)
    clone.__kwdefaults__ = fn.__kwdefaults__
    return clone


class FrameCounter:
    """A Dynamo backend wrapper counting compiled frames (like
    ``torch._dynamo.testing.CompileCounterWithBackend``).

    With ``record=True`` each compiled graph is returned wrapped in a
    ``Recorder``, so the bare graph can be called directly with the arguments
    Dynamo last passed it.
    """

    def __init__(self, backend: str | Callable[..., Any] = "eager", record: bool = False) -> None:
        self.backend = backend
        self.record = record
        self.frame_count = 0
        self.compiled: list[Callable[..., Any]] = []

    def __call__(self, gm: Any, example_inputs: list) -> Callable[..., Any]:

        self.frame_count += 1
        fn = lookup_backend(self.backend)(gm, example_inputs)
        if self.record:
            fn = Recorder(fn)
        self.compiled.append(fn)
        return fn


class Recorder:
    """The compiled graph, remembering its last arguments. Calling it through
    Dynamo and calling it directly pay the same (tiny) wrapper cost, so the
    difference of the two is Dynamo's own per-call work."""

    __slots__ = ("fn", "args")

    def __init__(self, fn: Callable[..., Any]) -> None:
        self.fn = fn
        self.args: tuple = ()

    def __call__(self, *args: Any) -> Any:
        self.args = args
        return self.fn(*args)


# ---------------------------------------------------------------------------
# Tasks and progress: plain lines on stderr.


@dataclass
class Task:
    """One line of the progress display: ``run(progress)`` returns a row."""

    label: str
    run: Callable[[Callable[[str], None]], dict[str, Any]]


class Progress:
    """``[3/14] compile_time mlp aot_eager stock 2/5`` lines on stderr."""

    def __init__(self, total: int, stream: Any = None, quiet: bool = False) -> None:
        self.total, self.index, self.label = total, 0, ""
        self.stream = stream or sys.stderr
        self.quiet = quiet
        self.start = time.perf_counter()

    def task(self, label: str) -> None:
        self.index += 1
        self.label = label
        self("")

    def elapsed(self) -> float:
        return time.perf_counter() - self.start

    def prefix(self) -> str:
        return f"[{self.index}/{self.total}] {self.label}"

    def __call__(self, detail: str) -> None:
        if self.quiet:
            return
        line = f"{self.prefix()} {detail}".rstrip()
        print(f"{line}  ({self.elapsed():.0f}s)", file=self.stream, flush=True)
