"""Programs for the AOTAutograd key tests of selective-AC policies and custom
``autograd.Function``s, run in fresh processes (the caches have in-process
layers: only a new process shows what is on disk).

``python tests/cache_key_programs.py '<json>'`` compiles each program of the
list ``[{"program": name, "plugin": bool, **options}, ...]`` in turn (Dynamo
reset between them) with inductor, runs forward and backward, compares with
eager and prints one JSON line: per program, the AOTAutograd cache's
outcome, the code of the graph Dynamo captured (with its subgraphs) and, for
a bypass, its reason as torch logged it and in ``explain``'s words. The
programs are built afresh in every process from the same code: equal
policies and Functions, new objects.
"""

from __future__ import annotations

import functools
import importlib
import json
import os
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

import torch
import torch.distributed as dist
import torch.distributed._functional_collectives as funcol
from torch._inductor.compile_fx import compile_fx
from torch.fx import GraphModule
from torch.utils.checkpoint import CheckpointPolicy, checkpoint, create_selective_checkpoint_contexts

import dynamo_dist
from dynamo_dist._compat.caches import outcome_counts
from dynamo_dist.diagnostics.cache_log import CacheLog
from dynamo_dist.diagnostics.caches import lookup_reason
from dynamo_dist.diagnostics.report import PLUGIN, STOCK
from dynamo_dist.testing import fake_world

ROOT = Path(__file__).resolve().parent.parent
MUST_SAVE, RECOMPUTE = CheckpointPolicy.MUST_SAVE, CheckpointPolicy.PREFER_RECOMPUTE


def run_fresh(cache_dir: Path, runs: list[dict], path: tuple[Path, ...] = ()) -> list[dict]:
    """The ``runs`` (``{"program": ..., "plugin": True, **options}``) in a new
    process with ``cache_dir`` as inductor's cache and the folders ``path``
    first on its module search path."""
    env = {**os.environ, "TORCHINDUCTOR_CACHE_DIR": str(cache_dir),
           "PYTHONPATH": os.pathsep.join([*map(str, path), str(ROOT), os.environ.get("PYTHONPATH", "")])}
    done = subprocess.run([sys.executable, __file__, json.dumps(runs)],
                          env=env, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-4000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


# -- selective activation checkpointing --------------------------------------


@dataclass(frozen=True)
class ACConfig:
    """A frozen config the policy reads as it runs (torchtitan's AC options)."""

    mode: str = "op"  # "op": save the listed ops; "mm": save every mm
    save: tuple[str, ...] = ("mm",)


class Budget:
    """An object of a plain class: what a policy reading it does is not described."""

    def __init__(self, limit: int) -> None:
        self.limit = limit


def titan_like(config: ACConfig, recompute_shapes: set) -> Callable[[], Any]:
    """torchtitan 0.3.0's per-op policy, in shape: a lambda building a policy
    that closes over the ops to save, the mm shapes to recompute, a per-call
    counter and the config."""
    save_ops = {getattr(torch.ops.aten, name).default for name in config.save}
    mm_ops = (torch.ops.aten.mm.default,)

    def _get_custom_policy():
        meta = {"forward_mm_count": 0, "recompute_mm_count": 0}

        def policy(ctx, func, *args, **kwargs):
            count = f"{'recompute' if ctx.is_recompute else 'forward'}_mm_count"
            if func in mm_ops:
                if tuple(args[1].shape) in recompute_shapes:
                    return RECOMPUTE
                meta[count] += 1
            if config.mode == "mm" and func in mm_ops:
                return MUST_SAVE
            return MUST_SAVE if func in save_ops else RECOMPUTE

        return policy

    return lambda: create_selective_checkpoint_contexts(_get_custom_policy())


def titan_like_edited(config: ACConfig, recompute_shapes: set) -> Callable[[], Any]:
    """``titan_like`` with its code edited: it saves every second mm only."""
    save_ops = {getattr(torch.ops.aten, name).default for name in config.save}
    mm_ops = (torch.ops.aten.mm.default,)

    def _get_custom_policy():
        meta = {"forward_mm_count": 0, "recompute_mm_count": 0}

        def policy(ctx, func, *args, **kwargs):
            count = f"{'recompute' if ctx.is_recompute else 'forward'}_mm_count"
            if func in mm_ops:
                if tuple(args[1].shape) in recompute_shapes:
                    return RECOMPUTE
                meta[count] += 1
                if meta[count] % 2 == 0:
                    return RECOMPUTE
            if config.mode == "mm" and func in mm_ops:
                return MUST_SAVE
            return MUST_SAVE if func in save_ops else RECOMPUTE

        return policy

    return lambda: create_selective_checkpoint_contexts(_get_custom_policy())


STEP = [0]  # a per-step counter the training loop advances (a mutable global)


def counted_policy(ctx, func, *args, **kwargs):
    return MUST_SAVE if STEP[0] == 0 and func == torch.ops.aten.mm.default else RECOMPUTE


def imported_policy(ctx, func, *args, **kwargs):
    # The process's own config module (run_fresh's ``path`` says which file).
    from ac_config import SAVE_OPS

    return MUST_SAVE if func in SAVE_OPS else RECOMPUTE


def over_budget(budget: Budget) -> Callable[[], Any]:
    def policy(ctx, func, *args, **kwargs):
        return MUST_SAVE if budget.limit > 0 else RECOMPUTE

    return functools.partial(create_selective_checkpoint_contexts, policy)


def _policy(policy: str, mode: str = "op", save: tuple = ("mm",), shapes: tuple = (), step: int = 0):
    config, recompute_shapes = ACConfig(mode, tuple(save)), {tuple(s) for s in shapes}
    if policy == "titan_like":
        return titan_like(config, recompute_shapes)
    if policy == "titan_like_edited":
        return titan_like_edited(config, recompute_shapes)
    if policy == "op_list":
        return functools.partial(create_selective_checkpoint_contexts, [torch.ops.aten.mm.default])
    if policy == "counted":
        STEP[0] = step
        return functools.partial(create_selective_checkpoint_contexts, counted_policy)
    if policy == "imported":
        importlib.import_module("ac_config")  # as a training script loads its config before it compiles
        return functools.partial(create_selective_checkpoint_contexts, imported_policy)
    if policy == "over_budget":
        return over_budget(Budget(1))
    if policy == "torchtitan":
        return _torchtitan_policy(recompute_fqns=list(save))
    raise ValueError(policy)


def _torchtitan_policy(recompute_fqns: list[str]) -> Callable[[], Any]:
    """torchtitan's own ``SelectiveAC`` policy for a block whose ``gate``
    (4 -> 6) it may force to recompute."""
    from torchtitan.distributed.activation_checkpoint import SelectiveAC  # optional client

    block = torch.nn.Module()
    block.gate = torch.nn.Linear(4, 6)
    wrapped = SelectiveAC(SelectiveAC.Config(force_recompute_mm_shapes_by_fqns=recompute_fqns))._wrap_block(block)
    return wrapped.checkpoint_fn.keywords["context_fn"]


def checkpointed(policy: str, **options) -> tuple[Callable, list[torch.Tensor]]:
    """``relu(x @ w1).sin() @ w2`` under selective checkpointing with ``policy``."""
    context_fn = _policy(policy, **options)

    def block(x, w1, w2):
        return (torch.relu(x @ w1).sin() @ w2).cos()

    def f(x, w1, w2):
        return checkpoint(block, x, w1, w2, use_reentrant=False, context_fn=context_fn)

    torch.manual_seed(0)
    return f, [torch.randn(3, 4, requires_grad=True), torch.randn(4, 6), torch.randn(6, 5, requires_grad=True)]


# -- custom autograd.Functions -------------------------------------------------


class Scale(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x):
        ctx.save_for_backward(x)
        ctx.factor = 3.0
        return x * 2

    @staticmethod
    def backward(ctx, grad):
        (x,) = ctx.saved_tensors
        return grad * x * ctx.factor


class ScaleForwardEdited(torch.autograd.Function):
    """``Scale`` with only its forward changed."""

    @staticmethod
    def forward(ctx, x):
        ctx.save_for_backward(x)
        ctx.factor = 3.0
        return x * 4

    @staticmethod
    def backward(ctx, grad):
        (x,) = ctx.saved_tensors
        return grad * x * ctx.factor


class ScaleBackwardEdited(torch.autograd.Function):
    """``Scale`` with only its backward changed."""

    @staticmethod
    def forward(ctx, x):
        ctx.save_for_backward(x)
        ctx.factor = 3.0
        return x * 2

    @staticmethod
    def backward(ctx, grad):
        (x,) = ctx.saved_tensors
        return grad * x * ctx.factor + 1


class DoubleInPlace(torch.autograd.Function):
    """Modifies its input in place and says so (``ctx.mark_dirty``)."""

    @staticmethod
    def forward(ctx, x):
        x.mul_(2)
        ctx.mark_dirty(x)
        return x

    @staticmethod
    def backward(ctx, grad):
        return grad * 2


class DoubleInPlaceUnmarked(torch.autograd.Function):
    """``DoubleInPlace`` without ``ctx.mark_dirty``."""

    @staticmethod
    def forward(ctx, x):
        x.mul_(2)
        return x

    @staticmethod
    def backward(ctx, grad):
        return grad * 2


class AllReduceBackward(torch.autograd.Function):
    """Identity forward; all-reduces the gradient over the group it keeps on
    ``ctx`` (HF transformers' ``_AllReduceBackward``, in functional form)."""

    @staticmethod
    def forward(ctx, x, group):
        ctx.group = group
        return x.clone()

    @staticmethod
    def backward(ctx, grad):
        return funcol.all_reduce(grad, "sum", ctx.group), None


def scaled_by_user_code(t):
    return t * 5


torch._dynamo.allow_in_graph(scaled_by_user_code)


class CallsUserCode(torch.autograd.Function):
    """Its backward calls a function Dynamo leaves in the graph by name."""

    @staticmethod
    def forward(ctx, x):
        return x * 2

    @staticmethod
    def backward(ctx, grad):
        return scaled_by_user_code(grad)


FUNCTIONS = {cls.__name__: cls for cls in (Scale, ScaleForwardEdited, ScaleBackwardEdited, DoubleInPlace,
                                           DoubleInPlaceUnmarked, CallsUserCode)}


def applying(function: str, size: int = 6, **_) -> tuple[Callable, list[torch.Tensor]]:
    cls = FUNCTIONS[function]
    in_place = cls in (DoubleInPlace, DoubleInPlaceUnmarked)

    def f(x):
        return cls.apply(x.clone() if in_place else x).sin()

    torch.manual_seed(0)
    return f, [torch.randn(size, requires_grad=True)]


def group_on_ctx(other_group: bool = False, **_) -> tuple[Callable, list[torch.Tensor]]:
    """``AllReduceBackward`` over a group of ranks 0-1, created first (or
    after another group: the same ranks under another group name)."""
    if other_group:
        dist.new_group([0, 1, 2, 3])
    group = dist.new_group([0, 1])

    def f(x):
        return AllReduceBackward.apply(x, group).sin()

    return f, [torch.randn(6, requires_grad=True)]


def split_by_counts(counts: tuple = ((1, 2), (3, 0)), scale: int = 1, **_) -> tuple[Callable, list[torch.Tensor]]:
    """Rows split by sizes read from a tensor (``tolist()``: each element an
    ``item()``), as expert parallelism splits tokens for its all-to-all."""
    def f(counts_t, y):
        parts = y.split(counts_t.sum(dim=1).tolist())
        return torch.cat([p * (i + scale) for i, p in enumerate(parts)])

    rows = sum(map(sum, counts))
    return f, [torch.tensor(counts), torch.arange(rows * 3.0).reshape(rows, 3).requires_grad_()]


PROGRAMS = {"checkpointed": checkpointed, "function": applying, "group_on_ctx": group_on_ctx,
            "split_by_counts": split_by_counts}


# -- running them ------------------------------------------------------------------


def _step(fn: Callable, inputs: list[torch.Tensor], dynamic: bool = False) -> list[torch.Tensor]:
    inputs = [t.detach().clone().requires_grad_(t.requires_grad) for t in inputs]
    if dynamic:
        torch._dynamo.mark_dynamic(inputs[0], 0)
    out = fn(*inputs)
    out.sum().backward()
    return [out.detach()] + [t.grad for t in inputs if t.requires_grad]


def inductor_recording(codes: list[str]) -> Callable:
    """Inductor (``backend="inductor"``), recording the code of each graph it gets."""
    def backend(gm: GraphModule, example_inputs: list) -> Callable:
        codes.append("\n".join(m.code for m in gm.modules() if isinstance(m, GraphModule)))
        return compile_fx(gm, example_inputs)

    return backend


def compile_one(program: str, plugin: bool = True, dynamic: bool = False, **options) -> dict[str, Any]:
    torch._dynamo.config.capture_scalar_outputs = program == "split_by_counts"  # tolist() into the graph
    if plugin:
        dynamo_dist.install()
    else:
        dynamo_dist.uninstall()
    fn, inputs = PROGRAMS[program](**options)
    eager = _step(fn, inputs)
    torch._dynamo.reset()
    before = outcome_counts()["aot_autograd"]
    codes: list[str] = []
    with CacheLog() as log:
        compiled = _step(torch.compile(fn, backend=inductor_recording(codes), fullgraph=True), inputs, dynamic)
    reasons = log.bypass_reasons("aot_autograd")
    after = outcome_counts()["aot_autograd"]
    outcomes = [o for o in after for _ in range(after[o] - before[o])]
    same = all(torch.allclose(a, b, rtol=1.3e-6, atol=1e-5) for a, b in zip(eager, compiled))
    mode = PLUGIN if plugin else STOCK
    return {"aot": outcomes, "same_as_eager": same if program != "group_on_ctx" else None,
            "graphs": codes, "reasons": reasons,
            "explained": [lookup_reason("aot_autograd", "bypass", {"cache_bypass_reason": r}, "", mode)[0]
                          for r in reasons]}


def main(runs: list[dict]) -> list[dict]:
    with fake_world(4, 1):
        return [compile_one(**run) for run in runs]


if __name__ == "__main__":
    print(json.dumps(main(json.loads(sys.argv[1]))))
