"""What stock torch gets wrong or slow on the demo's TP block and dynamo_dist
does not, measured on this rank of a real world (``python -m dynamo_dist
demo`` runs them after the training comparison, and a second job for the
restart):

- :func:`compile_forward`: the block's forward compiled with inductor under
  ``compile_on_one_rank`` in a job whose compile caches are cold (or, in a
  second job, warm from the first): how many of the job's ranks compiled
  each graph, the cache lookups that hit, and the first call (compile or
  load, then the forward), the ranks starting it together. With dynamo_dist
  the keys are the same on every rank, so the job compiles each graph once
  and a restart finds every entry; stock's keys hold each process's mesh
  hash, so every rank compiles and a restart misses.
- :func:`stale_group_answer`: a batch split over a process group
  (``batch.chunk(dist.get_world_size(group))[dist.get_rank(group)]``),
  compiled, called for one group and then for another of another size:
  stock reuses the first call's answer.
- :func:`sharded_view_returned`: the block's sequence-parallel activation
  (``Shard(1)`` of ``(batch, seq, dim)``) flattened to tokens
  (``h.view(-1, dim)``, ``_StridedShard`` in eager) and returned from the
  compiled function: stock fails to compile it.

Each returns plain data (picklable) with the eager answer beside the
compiled one.
"""

from __future__ import annotations

import os
import time
from dataclasses import dataclass, field
from typing import Any

try:
    import resource
except ImportError:  # Windows
    resource = None  # type: ignore[assignment]

import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch.distributed.device_mesh import init_device_mesh
from torch.distributed.tensor import Shard, distribute_tensor

import dynamo_dist

from .. import _compat as C
from .. import _hooks
from .._compat import observe as O
from .._compat.caches import outcome_counts
from .. import compile_once
from .models import build_model, local_input, make_input

__all__ = ["ForwardCompile", "FaultOutcome", "compile_forward", "warm_up_inductor", "warm_up_kernels",
           "stale_group_answer", "sharded_view_returned", "STOCK", "PLUGIN"]

STOCK, PLUGIN = "stock", "dynamo_dist"
BACKEND = "inductor"  # the compile caches hold inductor's graphs


@dataclass
class ForwardCompile:
    """One side's first call of the compiled forward on this rank."""

    side: str
    seconds: float = float("nan")  # the first call: compile (or load) and the forward
    cpu_seconds: float = float("nan")  # ... in CPU time of this process and the compilers it ran
    lookups: dict[str, int] = field(default_factory=dict)  # AOTAutograd cache outcomes: hit, miss, bypass
    loaded: int = 0  # graphs loaded from another rank of the job (compile once)
    match: bool = False  # the output equals eager's
    error: str | None = None


@dataclass
class FaultOutcome:
    """One side's answer to one of stock's faults on this rank."""

    side: str
    status: str  # "matches eager", "stale", "crash", or "eager raises"
    detail: str = ""


def _cpu_seconds() -> float:
    children = 0.0
    if resource is not None:
        usage = resource.getrusage(resource.RUSAGE_CHILDREN)
        children = usage.ru_utime + usage.ru_stime
    return time.process_time() + children


def _first_line(e: BaseException) -> str:
    e = getattr(e, "inner_exception", None) or e  # a backend's failure, as the backend raised it
    lines = [line for line in str(e).strip().splitlines() if line.strip()]
    text = next((line for line in lines if "Error" in line and ":" in line), lines[0] if lines else "")
    return f"{type(e).__name__}: {text.strip()[:160]}"


def _sync() -> None:
    dist.barrier()


def _side_patches(side: str, cache_dir: str) -> _hooks.Patches:
    """The side's plugin state and this process's compile settings for a
    job: inductor's cache dir, ``compile_on_one_rank`` (the only setting
    where the graphs, and so the keys, can be the same on every rank)."""
    p = _hooks.Patches()
    p.set_item(os.environ, "TORCHINDUCTOR_CACHE_DIR", cache_dir)
    p.set(C.distributed.one_rank_config(), "compile_on_one_rank", True)
    p.set(dynamo_dist.config, "compile_once", True)
    _hooks.set_plugin_state(side == PLUGIN)
    return p


def warm_up_inductor(cache_dir: str) -> None:
    """One tiny inductor compile (not measured, the caches off): inductor's
    one-time costs of a new process fall here, not on the first side."""
    off = _hooks.config_patches(inductor__fx_graph_cache=False, functorch__enable_autograd_cache=False)
    p = _hooks.Patches()
    p.set_item(os.environ, "TORCHINDUCTOR_CACHE_DIR", cache_dir)
    try:
        torch.compile(lambda t: t * 2 + 1, backend=BACKEND)(torch.ones(4))
    finally:
        off.restore()
        p.restore()
        O.reset_dynamo()


def warm_up_kernels(model_name: str, config: Any, mesh: Any, cache_dir: str, device: Any = "cpu") -> None:
    """Compile the forward once with stock torch and the compile caches off
    (not measured): inductor's one-time costs, and the C++ kernels both sides
    would build alike, fall here rather than on whichever side goes first."""
    was = dynamo_dist.is_installed()
    p = _side_patches(STOCK, cache_dir)
    off = _hooks.config_patches(inductor__fx_graph_cache=False, functorch__enable_autograd_cache=False)
    try:
        O.reset_dynamo()
        model = build_model(model_name, config, mesh=mesh, device=device)
        x = local_input(model_name, make_input(config, device=device), mesh)
        with torch.no_grad():
            torch.compile(model, backend=BACKEND)(x)
        _sync()
    finally:
        off.restore()
        p.restore()
        O.reset_dynamo()
        _hooks.set_plugin_state(was)


def compile_forward(side: str, model_name: str, config: Any, mesh: Any, cache_dir: str,
                    device: Any = "cpu") -> ForwardCompile:
    """``side``'s first call of the compiled forward, in the caches of
    ``cache_dir`` (shared by the ranks of a machine, as inductor's default
    is), every rank starting it together."""
    result = ForwardCompile(side)
    was = dynamo_dist.is_installed()
    p = _side_patches(side, cache_dir)
    try:
        O.reset_dynamo()
        model = build_model(model_name, config, mesh=mesh, device=device)
        x = local_input(model_name, make_input(config, device=device), mesh)
        with torch.no_grad():
            expected = model(x)
            compiled = torch.compile(model, backend=BACKEND)
            before = outcome_counts()["aot_autograd"]
            compile_once.reset_stats()
            _sync()
            start, cpu = time.perf_counter(), _cpu_seconds()
            try:
                out = compiled(x)
                result.match = bool(torch.allclose(out, expected, rtol=1e-4, atol=1e-5))
            except Exception as e:
                result.error = _first_line(e)
            result.cpu_seconds = _cpu_seconds() - cpu
            _sync()
            result.seconds = time.perf_counter() - start
        after = outcome_counts()["aot_autograd"]
        result.lookups = {k: after[k] - before.get(k, 0) for k in after}
        result.loaded = int(compile_once.stats().get("loaded", 0))
    finally:
        p.restore()
        O.reset_dynamo()
        _hooks.set_plugin_state(was)
    return result


def _split_over(batch: torch.Tensor, group: Any) -> torch.Tensor:
    return batch.chunk(dist.get_world_size(group))[dist.get_rank(group)] * 1.0


def stale_group_answer(world: int, device_type: str = "cpu") -> list[FaultOutcome]:
    """The batch split over the whole world's group, then over a group of
    another size (dim 1 of a ``(2, world // 2)`` mesh), compiled once per
    side; the second call against eager."""
    if world % 2:
        return [FaultOutcome(side, "skipped", "needs an even world") for side in (STOCK, PLUGIN)]
    whole = init_device_mesh(device_type, (world,), mesh_dim_names=("all",)).get_group("all")
    part = init_device_mesh(device_type, (2, world // 2), mesh_dim_names=("a", "b")).get_group("b")
    batch = torch.arange(4.0 * world).reshape(2 * world, 2)
    out = []
    was = dynamo_dist.is_installed()
    for side in (STOCK, PLUGIN):
        _hooks.set_plugin_state(side == PLUGIN)
        try:
            compiled = torch.compile(_split_over, backend="aot_eager")
            compiled(batch, whole)
            got, want = compiled(batch, part), _split_over(batch, part)
            if got.shape == want.shape and torch.equal(got, want):
                out.append(FaultOutcome(side, "matches eager"))
            else:
                out.append(FaultOutcome(side, "stale", f"{got.shape[0]} rows, eager {want.shape[0]}"))
        except Exception as e:
            out.append(FaultOutcome(side, "crash", _first_line(e)))
        finally:
            O.reset_dynamo()
    _hooks.set_plugin_state(was)
    return out


def _to_tokens(h: torch.Tensor) -> torch.Tensor:
    return F.gelu(h).view(-1, h.shape[-1])


def sharded_view_returned(config: Any, mesh: Any) -> list[FaultOutcome]:
    """The block's activation sharded on the sequence dim, flattened to
    tokens and returned, per side, against eager (values and placements)."""
    h = distribute_tensor(make_input(config, device=mesh.device_type), mesh, [Shard(1)])
    try:
        want = _to_tokens(h)
    except Exception as e:  # torch 2.11's eager refuses to flatten a sharded dim
        return [FaultOutcome(side, "eager raises", _first_line(e)) for side in (STOCK, PLUGIN)]
    out = []
    was = dynamo_dist.is_installed()
    for side in (STOCK, PLUGIN):
        _hooks.set_plugin_state(side == PLUGIN)
        try:
            got = torch.compile(_to_tokens, backend="aot_eager")(h)
            same = tuple(got.placements) == tuple(want.placements) and torch.allclose(
                got.full_tensor(), want.full_tensor())
            out.append(FaultOutcome(side, "matches eager") if same else
                       FaultOutcome(side, "stale", f"{got.placements} against eager {want.placements}"))
        except Exception as e:
            out.append(FaultOutcome(side, "crash", _first_line(e)))
        finally:
            O.reset_dynamo()
    _hooks.set_plugin_state(was)
    return out
