"""Assertions shared by the tracing tests."""

from __future__ import annotations

import contextlib
import functools
import threading
from typing import Any, Iterator

import torch
import torch.distributed as dist
from torch.distributed.tensor import Replicate, distribute_tensor
from torch.distributed.tensor.placement_types import _StridedShard

from dynamo_dist._compat import observe as O
from dynamo_dist.testing import compile_and_run, difference, distributed_objects_in


@functools.cache
def fake_reduce_scatter_writes() -> bool:
    """Whether torch's fake process group writes a reduce-scatter's output
    (2.13+). 2.11 / 2.12 leave it as allocated, so values computed after one
    are undefined in a fake world (shapes are not; the gloo tests check
    values). Probed in the running (fake) world."""
    out = torch.full((1,), float("nan"))
    dist.reduce_scatter_tensor(out, torch.ones(dist.get_world_size()))
    return not bool(out.isnan().any())


def distribute_defined(full: torch.Tensor, mesh: Any, placements: Any) -> Any:
    """``distribute_tensor`` whose local values are defined in a fake world
    too: its scatter writes nothing there, leaving the shard as allocated (a
    NaN in it once failed compiled == eager, NaN != NaN). The local tensor
    holds 0, 1, 2, ... in its shape."""
    d = distribute_tensor(full, mesh, placements)
    with torch.no_grad():
        local = d.to_local()
        local.copy_(torch.arange(local.numel(), dtype=local.dtype).reshape(local.shape))
    return d


def strided_shard_1d_supported(mesh: Any) -> bool:
    """Whether DTensor (eagerly) accepts a ``_StridedShard`` on a 1-D mesh:
    2.11's rejects it ("use_strided_shard_as_shard_order ... unable to be
    interpreted into a corresponding shard_order"); 2.12+ accept it."""
    try:
        d = distribute_tensor(torch.ones(2 * mesh.size()), mesh, [_StridedShard(0, split_factor=2)])
        d.redistribute(mesh, [Replicate()])
    except ValueError as e:
        if "shard_order" in str(e):
            return False
        raise
    return True


def assert_close_in_fake_world(actual: Any, expected: Any, reduce_scatters: bool) -> None:
    """``assert_close``, or (values undefined: see ``fake_reduce_scatter_writes``)
    the same shape and dtype."""
    if reduce_scatters and not fake_reduce_scatter_writes():
        assert (actual.shape, actual.dtype) == (expected.shape, expected.dtype)
    else:
        torch.testing.assert_close(actual, expected)


def assert_same(a: Any, b: Any) -> None:
    """``a`` (eager) and ``b`` (compiled) are the same result: the oracle's
    ``difference`` finds none."""
    found = difference(a, b)
    assert found is None, found


def check_like_eager(fn, *args, expect_graphs: int | None = 1, **kwargs):
    """fullgraph compile == eager, and no distributed object in any graph."""
    run = compile_and_run(fn, *args, fullgraph=True, **kwargs)
    assert_same(run.eager, run.compiled)
    for gm in run.graphs:
        leaked = distributed_objects_in(gm)
        assert not leaked, f"distributed objects in the graph: {leaked}\n{gm.code}"
    if expect_graphs is not None:
        assert run.frame_count == expect_graphs, run.frame_count
    return run


def compile_counting_frames(fn, backend: str = "aot_eager"):
    """``fn`` compiled after a Dynamo reset (counters cleared), and a function
    that lists the names of the frames compiled since. Dynamo keeps
    compilation-metric rows across resets: only rows not seen here count."""
    O.reset_dynamo()
    O.dynamo_counters().clear()
    kept = O.compilation_metrics()  # kept alive, so ids stay unique
    earlier = {id(m) for m in kept}

    def frames() -> list:
        return [m.co_name for m in O.compilation_metrics() if id(m) not in earlier]

    return torch.compile(fn, backend=backend), frames


class Registry(dict):
    """What each model class records, keyed by its class's name, as HF
    transformers' output-capturing registry: torch guards the entry a frame
    reads by its key's position (``list(dict.keys(REGISTRY))[i]``)."""

    def get(self, model: Any) -> dict:  # type: ignore[override]
        return super().get(str(model.__class__)) or {}


REGISTRY = Registry()
SCALE = 2  # a module constant a compiled frame reads (tests/precompile_programs.py)


# The current mesh kept as torchtitan keeps its own (``_MESH_TLS.mesh_stack``
# in ``torchtitan.distributed.spmd_types``): a stack in a thread-local the
# program makes at its first step and fills around each step, so that a
# function compiled before that finds neither the stack nor a mesh in it.
_MESH_TLS = threading.local()


def _mesh_stack() -> list:
    stack = getattr(_MESH_TLS, "mesh_stack", None)
    if stack is None:
        stack = []
        _MESH_TLS.mesh_stack = stack
    return stack


def current_mesh() -> Any:
    stack = _mesh_stack()
    return stack[-1] if stack else None


@contextlib.contextmanager
def current_mesh_set(*meshes: Any) -> Iterator[None]:
    """``meshes`` pushed on the stack for the block (the last is current)."""
    stack = _mesh_stack()
    stack.extend(meshes)
    try:
        yield
    finally:
        del stack[len(stack) - len(meshes):]


def keeps_name(fn: Any) -> Any:
    """A decorator of another module, as HF transformers' ``deprecate_kwarg``:
    the wrapper carries ``fn``'s ``__module__`` (``functools.wraps``) while
    its code reads this module's globals."""

    @functools.wraps(fn)
    def wrapped(*args: Any, **kwargs: Any) -> Any:
        return fn(*args, **kwargs)

    return wrapped


# The running torch's (major, minor).
TORCH_RELEASE = tuple(int(p) for p in torch.__version__.split("+")[0].split(".")[:2])


def torchtitan_marks() -> list:
    """The marks of a module that trains torchtitan: skipped without it or
    on a torch it does not support; slow."""
    import pytest

    from devtools.clients import missing

    return [
        pytest.mark.skipif(bool(missing("torchtitan")), reason="torchtitan is not installed "
                           "(pip install 'dynamo-dist[clients]')"),
        pytest.mark.skipif(TORCH_RELEASE < (2, 14), reason="torchtitan 0.3.0 needs torch >= 2.14"),
        pytest.mark.slow,
    ]
