"""A job traces each frame once: under torch's precompile
(``TORCH_CACHING_PRECOMPILE=1``), compile once ships Dynamo's own entry of a
frame, so the waiting ranks run the frame without tracing it.

The AOTAutograd and FX levels share what a graph compiles to, but every rank
still traces each frame with Dynamo before it reaches those lookups (on a
warm or shared cache, most of a first step). With torch's precompile on,
Dynamo records each traced frame in the compiled function's package: its
bytecode, its guards as saved state (the plugin's in their saved form:
``precompile/plugin_guards.py``) and the backends its code calls. So where Dynamo is
about to trace a frame of a package (the compiled function, or one of its
resume functions), the ranks agree through the job's store, as for a graph:

- the first rank claims the frame and traces it; right after, before the
  frame runs (its collectives need the other ranks), it publishes the
  package with the backend artifacts its codes name (a bundled AOTAutograd
  entry each), and the kernels it compiled;
- the others wait, install the package into their own package for the same
  function (``_compat/packages.py``: the way ``torch.compile`` installs one
  read from Dynamo's cache), and run the newest variant whose rebuilt guards
  pass on their own locals.

The store key is the package's function, the frame's code (file, qualified
name, first line, bytecode) and how many variants of it the package holds:
"the next variant after the k this rank has", the same on every rank of an
SPMD job. Soundness rests on the guards, as for any loaded entry: each rank
rebuilds them against its own objects and checks them on its own locals.
Where a loaded frame's guards fail here (a frame whose guards hold something
rank-specific: a shape, a value of this rank), this rank traces it itself and
every later compile of that frame stays local. A frame that Dynamo does not
package (a declined package, a backend that saved no artifact, a trace that
raised) is abandoned: the waiting ranks trace it, and their graphs still
come from the AOTAutograd level.
"""

from __future__ import annotations

import hashlib
import time
from typing import Any, Callable

from .. import _compat as C
from . import protocol
from .protocol import FRAME
from .store import Decision

# (package, code identity) of the frames this rank traced itself after a
# loaded variant did not pass its guards: they stay local from then on.
_local_frames: set[tuple[str, str]] = set()


def shipped_frames(convert: Callable[..., Any]) -> Callable[..., Any]:
    """``ConvertFrameAssert.__call__`` that traces a package's frame once per
    job (the module docstring)."""

    def __call__(self: Any, frame: Any, cache_entry: Any, hooks: Any, frame_state: Any, *, skip: int = 0) -> Any:
        package = C.packages.frame_package(self)
        if package is None or not C.packages.is_package_frame(package, frame.f_code) or \
                protocol.inactive_reason() is not None:
            return convert(self, frame, cache_entry, hooks, frame_state, skip=skip + 1)
        return _shipped(convert, self, package, frame, cache_entry, hooks, frame_state, skip + 1)

    return __call__


def _key(package: Any, code: Any) -> tuple[str, tuple[str, str]]:
    where = (C.packages.package_key(package), C.packages.code_identity(code))
    text = f"{where[0]}|{where[1]}|{C.packages.variants(package, code)}"
    return f"{FRAME}-{hashlib.blake2b(text.encode(), digest_size=16).hexdigest()}", where


def _shipped(convert: Callable[..., Any], converter: Any, package: Any, frame: Any, cache_entry: Any, hooks: Any,
             frame_state: Any, skip: int) -> Any:
    key, where = _key(package, frame.f_code)
    code = frame.f_code
    said = {"frame": [code.co_name, code.co_filename, code.co_firstlineno]}  # for explain
    trace = lambda: convert(converter, frame, cache_entry, hooks, frame_state, skip=skip)  # noqa: E731
    if where in _local_frames:
        return trace()
    outcome = protocol.claim_or_wait(key)
    if outcome is None:
        return trace()
    if outcome.decision is Decision.COMPILE:
        return _trace_and_publish(trace, package, code, key, said)
    if outcome.decision is not Decision.LOAD:
        protocol.compiled_after_waiting(FRAME, key, outcome, **said)
        return trace()
    payload = protocol.unpack(FRAME, key, outcome, **said)
    if payload is None:
        return trace()
    try:
        C.packages.adopt(package, payload)
        found = C.packages.loaded_code(package, frame, frame_state)
    except Exception as e:  # a package this process cannot install: trace here
        protocol.refused(FRAME, key, outcome, e, **said)
        return trace()
    if found is None:
        _local_frames.add(where)
        protocol.not_matching(FRAME, key, outcome, **said)
        return trace()
    protocol.loaded(FRAME, key, outcome, **said)
    return found


def _trace_and_publish(trace: Callable[[], Any], package: Any, code: Any, key: str, said: dict) -> Any:
    started, started_at = time.monotonic(), time.time()
    try:
        result = trace()
    except BaseException as e:
        protocol.abandon(FRAME, key, f"its trace raised {type(e).__name__}: {e}", **said)
        raise
    try:
        payload, why = C.packages.packaged_entry(package, code)
    except Exception as e:
        payload, why = None, f"its package could not be saved ({type(e).__name__}: {e})"
    if payload is None:
        protocol.abandon(FRAME, key, why, **said)
    else:
        protocol.publish(FRAME, key, payload, started, started_at, **said)
    return result
