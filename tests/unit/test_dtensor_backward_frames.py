"""Backward through a compiled DTensor program makes no extra frame.

When ``.backward()`` runs inside a compiled function (a graph break: Dynamo
does not trace it), AOTAutograd's runtime flattens and rebuilds DTensors
(``__tensor_flatten__``, ``__tensor_unflatten__``, ``device_mesh``) while
Dynamo's frame callback is live. Stock compiles each as a frame of its own and
breaks in ``__tensor_unflatten__`` at ``DTensor(local, spec, ...)`` ("Failed to
convert args/kwargs to proxy"); with a TP MLP stock 2.13 crashes there
(``Shard(SymInt)``). With the plugin only the user's frames compile, the only
break is the ``backward()`` call itself, and loss and gradients equal eager.
``uninstall()`` gives stock's behaviour back."""

from __future__ import annotations

import torch
from torch.distributed.tensor import DTensor, Replicate, Shard

import dynamo_dist
from dynamo_dist._compat import observe as O
from dynamo_dist.testing import fake_world, make_mesh, run_in_world

from helpers import compile_counting_frames
from rank_programs import backward_inside_compiled_mlp
import pytest

pytestmark = pytest.mark.release

RUNTIME_FRAMES = {"__tensor_unflatten__", "__tensor_flatten__", "device_mesh"}


def _user_frames_only(frames: list) -> bool:
    return all(f is None or f == "step" or f.startswith("torch_dynamo_resume_in_step") for f in frames)


def _matmul_step_run():
    """Eager and compiled (twice) loss and weight grad of a step whose
    backward runs inside the compiled function; the frames compiled and the
    break reasons. No collective: exact values even in a fake world."""
    with fake_world(2, 1):
        mesh = make_mesh((2,), ("tp",))
        local = torch.arange(8.0).reshape(2, 4)
        weight = torch.nn.Parameter(DTensor.from_local(local, mesh, [Shard(0)]))

        def step(x):
            loss = (DTensor.from_local(x, mesh, [Replicate()]) @ weight.t()).sum()
            loss.backward()  # inside the compiled function: a graph break
            return loss.detach().to_local()

        def run(fn):
            loss = fn(torch.ones(3, 4))
            grad = weight.grad.to_local().clone()
            weight.grad = None
            return loss, grad

        eager = run(step)
        compiled, compiled_frames = compile_counting_frames(step)
        runs = [run(compiled), run(compiled)]
        frames = compiled_frames()
        return eager, runs, frames, O.graph_break_reasons()


def test_backward_inside_compiles_only_the_users_frames(plugin):
    eager, runs, frames, reasons = _matmul_step_run()
    assert _user_frames_only(frames), frames
    assert not any("Failed to convert args/kwargs to proxy" in r for r in reasons), reasons
    for loss, grad in runs:
        torch.testing.assert_close(loss, eager[0])
        torch.testing.assert_close(grad, eager[1])


@pytest.mark.slow
def test_tp_mlp_backward_inside_on_a_gloo_world():
    for rank, (frames, reasons, worst) in enumerate(run_in_world(backward_inside_compiled_mlp, 2)):
        assert _user_frames_only(frames), (rank, frames)
        assert not any("Failed to convert args/kwargs to proxy" in r for r in reasons), (rank, reasons)
        assert worst <= 1e-5, f"rank {rank}: compiled differs from eager by {worst}"


def test_uninstall_gives_stock_its_runtime_frames_back():
    dynamo_dist.install()
    dynamo_dist.uninstall()
    *_, frames, _ = _matmul_step_run()
    assert RUNTIME_FRAMES & set(frames), frames  # stock compiles them again, as before install()
