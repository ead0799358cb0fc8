"""The tools' changes to torch's global state: ``explain``'s recording, the
CLI's demo and explain commands, the benchmarks. Each is returned as a
``Patches`` the caller restores; what they touch is named in
``_compat/observe.py``. The core's own changes are ``core.py``'s.
"""

from __future__ import annotations

import collections
import contextlib
import logging
import time
from typing import Any, Iterator

import torch
from torch.distributed import PrefixStore

from .._compat import observe as O
from . import core
from .patches import Patches


@contextlib.contextmanager
def plugin_state(installed: bool) -> Iterator[None]:
    """The plugin installed (or not) for the block, as it was after: how a
    tool runs one side of a stock-vs-plugin comparison."""
    was = core.is_active()
    set_plugin_state(installed)
    try:
        yield
    finally:
        set_plugin_state(was)


def set_plugin_state(installed: bool, reset: bool = True) -> None:
    """Install or uninstall (nothing when already so); ``reset=False`` keeps
    what Dynamo compiled under either side."""
    if installed != core.is_active():
        (core.apply if installed else core.remove)(reset=reset)


def _set_logger_level(p: Patches, logger: Any, level: int) -> None:
    # Logger.setLevel also empties the isEnabledFor cache; do both, reversibly.
    p.set(logger, "level", level)
    p.set(logger, "_cache", {})


def recording_patches(handler: Any, metrics_limit: int, trace_handler: Any = None) -> Patches:
    """What ``explain``'s recorder switches on for its duration:

    - the ``graph_breaks`` artifact logger gets ``handler``; unless the user
      already has it on (``TORCH_LOGS=graph_breaks``) it is switched on for
      that handler only (not propagating, so nothing new is printed);
    - Dynamo's duplicate-break checker starts empty (a repeated break is
      otherwise logged without its user frame);
    - the compile-metrics deque keeps ``metrics_limit`` rows (none of the
      recording is dropped); ``end_recording`` carries the new rows over to
      the original deque, as a limit change would have;
    - ``suppress_errors``: a frame that fails to compile runs eagerly and is
      reported instead of failing the user's program;
    - ``trace_handler`` (if given) gets torch's structured trace (``trace_patches``).
    """
    p = Patches()
    log = O.graph_break_logger()
    if not log.isEnabledFor(logging.DEBUG):
        _set_logger_level(p, log, logging.DEBUG)
        p.set(log, "propagate", False)
    p.set(log, "handlers", [*log.handlers, handler])
    p.set(O.duplicate_break_checker(), "set", collections.OrderedDict())
    utils = O.dynamo_utils()
    p.set(utils, "_compilation_metrics", collections.deque(utils._compilation_metrics, maxlen=metrics_limit))
    p.set(O.dynamo_config(), "suppress_errors", True)
    if trace_handler is not None:
        trace_patches(trace_handler, p)
    return p


def end_recording(p: Patches) -> None:
    """Restore ``recording_patches``; the rows recorded meanwhile stay in
    Dynamo's (original, bounded) compile-metrics deque."""
    utils = O.dynamo_utils()
    original = p.original(utils, "_compilation_metrics", None)
    wide = utils._compilation_metrics
    if original is not None and wide is not original:
        seen = {id(m) for m in original}
        original.extend(m for m in wide if id(m) not in seen)
    p.restore()


def trace_patches(handler: Any, p: Patches | None = None) -> Patches:
    """``handler`` added to torch's structured-trace logger, which then emits
    its artifacts (the compile caches' hit / miss / bypass records, the
    graphs it prints) to it; its other handlers (``TORCH_TRACE``) are kept,
    nothing reaches the root logger."""
    p = p if p is not None else Patches()
    trace = O.structured_trace_logger()
    if not trace.isEnabledFor(logging.DEBUG):  # torch sets it to DEBUG at import; in case not
        _set_logger_level(p, trace, logging.DEBUG)
    p.set(trace, "handlers", [*trace.handlers, handler])
    p.set(trace, "propagate", False)  # as torch's own TORCH_TRACE setup: never to the root logger
    return p


def compile_patches(replacement: Any) -> Patches:
    """``torch.compile`` replaced (``explain`` gives every compile its recording backend)."""
    p = Patches()
    p.set(torch, "compile", replacement)
    return p


def config_patches(**values: Any) -> Patches:
    """Compiler config values: ``inductor__fx_graph_cache=False``,
    ``functorch__enable_autograd_cache=False``, ``dynamo__suppress_errors=True``."""
    modules = {"inductor": O.inductor_config, "functorch": O.functorch_config, "dynamo": O.dynamo_config}
    p = Patches()
    for key, value in values.items():
        family, name = key.split("__", 1)
        p.set(modules[family](), name, value)
    return p


def rendezvous_patches(prefix: str) -> Patches:
    """Every rendezvous handler of torch.distributed wrapped so that its
    store is a ``PrefixStore(prefix, ...)`` (the CLI's second world in one
    process must not read the first world's keys)."""
    def namespaced(handler: Any) -> Any:
        def rendezvous(url: str, **kwargs: Any) -> Any:
            for store, rank, world_size in handler(url, **kwargs):
                yield PrefixStore(prefix, store), rank, world_size

        return rendezvous

    p = Patches()
    handlers = O.rendezvous_handlers()
    for scheme, handler in list(handlers.items()):
        p.set_item(handlers, scheme, namespaced(handler))
    return p


def planner_timer() -> tuple[list[float], Patches]:
    """DTensor's planning entry (``O.PLANNER_PLAN_FUNCTION``: what a trace
    calls for each redistribution, uncached) wrapped to add its CPU seconds
    and calls to ``[seconds, calls]``, returned with the patch to restore."""
    spent = [0.0, 0]
    planner = O.redistribute_planner()
    original = getattr(planner, O.PLANNER_PLAN_FUNCTION)

    def timed(*args: Any, **kwargs: Any) -> Any:
        start = time.process_time()
        try:
            return original(*args, **kwargs)
        finally:
            spent[0] += time.process_time() - start
            spent[1] += 1

    p = Patches()
    p.set(planner, O.PLANNER_PLAN_FUNCTION, timed)
    return spent, p


def planner_patches(force_min_cost: bool | None, disable_optimization: bool) -> Patches:
    """DTensor's redistribute planner switched as a job may switch it (its
    module globals: a forced min-cost plan, no merging of transforms), with
    the plans it cached under the old switches forgotten. Its cache keeps
    plans made under these switches after ``restore()``: forget them then
    (``observe.forget_dtensor_plans``)."""
    p = Patches()
    planner = O.redistribute_planner()
    p.set(planner, O.PLANNER_FORCE_MIN_COST, force_min_cost)
    p.set(planner, O.PLANNER_NO_TRANSFORM_OPTIMIZATION, disable_optimization)
    O.forget_dtensor_plans()
    return p
