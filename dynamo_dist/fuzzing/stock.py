"""The ``stock`` property's oracle: stock torch beside the plugin.

Eager says what a program means; stock ``torch.compile`` says what users
already get. For a ``StockExample`` each rank of a real 2-rank gloo world
runs the program eagerly (every call, with its backward), then compiled
(``aot_eager``, ``fullgraph=False``, as users compile) on one *side*: with
the plugin installed, or with stock torch (``dynamo_dist.uninstall()``, which
restores stock exactly; ``torch._dynamo.reset()`` before each side). A side
is ``like eager`` when every call returns eager's result (values, placements,
mesh, whether it requires grad) and eager's gradients, and raises nothing;
its graph breaks, compiled frames (graphs, recompiles included) and
recompiles (graphs of a frame Dynamo had compiled before: a compile id
``F/N`` with ``N > 0``) are counted. Each side runs in its own ``pool.run`` (``run_side``), so a side
that hangs (a rank stuck in a collective) is that side's failure, and the
other side runs in a fresh world.

``judge`` then says, per rank, what the example shows (``OUTCOMES``): the
plugin is worse than stock (stock like eager and the plugin not, or more
breaks, more recompiles, or as many breaks and more frames than stock) is a
failure; stock failing where the
plugin is like eager is the plugin's value, recorded; both failing is
recorded too (the eager-oracle properties judge the plugin there).
"""

from __future__ import annotations

import collections
import contextlib
import re
from dataclasses import dataclass
from typing import Any

import torch
import torch.distributed as dist
from torch.distributed.tensor import DTensor

import dynamo_dist

from .._compat import distributed as D
from .._compat import observe as O
from ..diagnostics.compare import difference
from ..worlds import make_mesh
from .specs import MeshSpec, StockExample

SIDES = ("plugin", "stock")
# Seconds a side may take on a rank before it counts as hung (a rank stuck in
# a collective its peer never joins): the pool then spawns a fresh world.
SIDE_TIMEOUT = 90.0
# The modes a program may enter; its backward runs under the same ones (as
# users must write it: a loss_parallel loss's backward needs loss_parallel).
BACKWARD_MODES = ("loss_parallel", "implicit_replication")

# What an example shows, per rank and then for the example (its worst rank).
SAME = "both like eager"
PLUGIN_BETTER = "both like eager, the plugin with fewer breaks or frames"
STOCK_FAILS = "stock fails, the plugin is like eager"
BOTH_FAIL = "both fail"
PLUGIN_FAILS = "the plugin fails, stock is like eager"
MORE_BREAKS = "the plugin breaks more than stock"
MORE_FRAMES = "the plugin compiles more frames than stock"  # more recompiles, or more graphs at as many breaks
OUTCOMES = (SAME, PLUGIN_BETTER, STOCK_FAILS, BOTH_FAIL, PLUGIN_FAILS, MORE_BREAKS, MORE_FRAMES)
FAILURES = (PLUGIN_FAILS, MORE_BREAKS, MORE_FRAMES)


# ---------------------------------------------------------------------------
# On each rank.

_MESHES: dict[Any, Any] = {}


def _mesh(spec: MeshSpec) -> Any:
    key = (spec, id(dist.group.WORLD))
    if key not in _MESHES:
        _MESHES[key] = make_mesh(spec.shape, spec.names)
    return _MESHES[key]


def _input(example: StockExample, call: int) -> torch.Tensor:
    """The plain local tensor of call ``call`` on this rank (a fresh leaf)."""
    shape = example.call_shapes()[call]
    gen = torch.Generator().manual_seed(example.seed * 31 + call)
    x = torch.randn(shape, generator=gen) + 0.5 * dist.get_rank()
    return x.requires_grad_(example.requires_grad)


def _weights(t: torch.Tensor) -> torch.Tensor:
    return ((torch.arange(t.numel()) % 5).to(t.dtype) - 1.5).reshape(t.shape)


def _backward(out: Any, x: torch.Tensor, model: Any, modes: list[Any]) -> dict[str, Any]:
    """Backward of a weighted sum of every output that requires grad (a
    DTensor's full tensor), under the program's ``modes``; the gradients of
    ``x`` and of the model's parameters (cleared for the next call)."""
    outs = [o for o in O.tree_leaves(out) if isinstance(o, torch.Tensor) and o.requires_grad]
    with contextlib.ExitStack() as stack:
        for mode in modes:
            stack.enter_context(mode())
        if outs:
            loss = sum((o.full_tensor() if isinstance(o, DTensor) else o).mul(_weights(o)).sum() for o in outs)
            loss.backward()
    grads = {"x": x.grad}
    if model is not None:
        for name, p in model.named_parameters():
            grads[name] = p.grad
            p.grad = None
    return grads


def _error(e: BaseException) -> str:
    """An exception in one line: a backend's failure by the error inside it
    (its own first line names only the backend object), a generic first
    line ("... when making fake tensor call") with the line after it, and
    no object addresses (the same failure reads the same on every run)."""
    name = type(e).__name__
    while name.startswith("BackendCompilerFailed"):
        inner = getattr(e, "inner_exception", None) or e.__cause__
        if inner is None:
            break
        e = inner
        name = f"BackendCompilerFailed: {type(e).__name__}"
    lines = [line.strip() for line in str(e).strip().splitlines() if line.strip()]
    text = " ".join(lines[:2]) if lines and lines[0].endswith(("call", ":")) else (lines[0] if lines else "")
    return f"{name}: {_ADDRESS.sub('0x…', text)[:300]}"


_ADDRESS = re.compile(r"0x[0-9a-f]{6,}")


@dataclass
class _Program:
    fn: Any
    model_of: Any
    modes: list[Any]

    @classmethod
    def of(cls, example: StockExample) -> _Program:
        fn = example.program.function()
        names = fn.__globals__
        modes = [names[m] for m in BACKWARD_MODES if f"with {m}():" in example.program.source]
        return cls(fn, names.get("model_of"), modes)

    def args(self, x: torch.Tensor, mesh: Any, model: Any) -> tuple:
        return (x, mesh) if model is None else (x, mesh, model)


def _eager(example: StockExample, program: _Program, mesh: Any) -> list[tuple[Any, dict[str, Any]]]:
    model = program.model_of(mesh) if program.model_of is not None else None
    runs = []
    for call in range(len(example.call_shapes())):
        x = _input(example, call)
        out = program.fn(*program.args(x, mesh, model))
        runs.append((out, _backward(out, x, model, program.modes)))
    return runs


def _breaks() -> collections.Counter:
    return collections.Counter(O.dynamo_counters()["graph_break"])


_COMPILE_ID = re.compile(r"(\d+)/(\d+)(?:_\d+)?\]?$")


def _recompile(compile_id: str) -> bool:
    """Whether a graph of ``compile_id`` (``[!A/]F/N[_attempt]``) is a
    recompile: its frame ``F`` was compiled ``N > 0`` times before."""
    found = _COMPILE_ID.search(compile_id.strip())
    return found is not None and int(found.group(2)) > 0


def _compiled(example: StockExample, program: _Program, mesh: Any, eager: list[Any]) -> dict[str, Any]:
    counter = O.compile_counter("aot_eager")
    compile_ids: set[str] = set()

    def backend(gm: Any, inputs: Any) -> Any:
        compile_ids.add(O.current_compile_id())
        return counter(gm, inputs)

    before = _breaks()
    compiled = torch.compile(program.fn, backend=backend, dynamic=True if example.dynamic == "dynamic=True" else None)
    model = program.model_of(mesh) if program.model_of is not None else None
    found: dict[str, Any] = {}
    for call, (want, want_grads) in enumerate(eager):
        x = _input(example, call)
        if example.dynamic == "mark_dynamic":
            O.mark_dynamic(x, example.vary)
        try:
            out = compiled(*program.args(x, mesh, model))
            grads = _backward(out, x, model, program.modes)
        except Exception as e:
            found["error"] = f"call {call}: {_error(e)}"
            break
        wrong = difference(want, out) or difference(want_grads, grads, "gradient")
        if wrong:
            found["wrong"] = f"call {call}: {wrong}"
            break
    reasons = _breaks() - before
    found.update(frames=counter.frame_count, recompiles=sum(map(_recompile, compile_ids)),
                 breaks=sum(reasons.values()),
                 reasons=sorted(r.strip().splitlines()[0][:200] for r in reasons))
    return found


def run_side(example: StockExample, side: str) -> dict[str, Any]:
    """One rank's run of ``example``: eagerly (stock torch), then compiled
    on ``side`` (``"plugin"`` or ``"stock"``). Returns plain data:
    ``{"invalid": why}`` where eager raises, else the compiled side's
    ``error`` or ``wrong`` (if any), ``frames``, ``breaks`` and the break
    ``reasons``."""
    if side not in SIDES:
        raise ValueError(f"side={side!r} must be one of {SIDES}")
    D.quiet_redistribute_warnings()
    dynamo_dist.uninstall()
    O.reset_dynamo()
    try:
        mesh = _mesh(example.mesh)
        program = _Program.of(example)
        try:
            eager = _eager(example, program, mesh)
        except Exception as e:
            return {"invalid": f"eager raised {_error(e)}"}
        if side == "plugin":
            dynamo_dist.install()
        O.reset_dynamo()
        return _compiled(example, program, mesh, eager)
    finally:
        O.reset_dynamo()
        dynamo_dist.uninstall()


# ---------------------------------------------------------------------------
# The verdict.


def like_eager(side: dict[str, Any]) -> bool:
    return "error" not in side and "wrong" not in side


def failure(side: dict[str, Any]) -> str | None:
    """What went wrong on a side (None when it is like eager)."""
    return side.get("error") or side.get("wrong")


def rank_outcome(stock: dict[str, Any], plugin: dict[str, Any], world_recompiles: int = 0) -> str:
    """One rank's outcome (one of ``OUTCOMES``). ``world_recompiles``: the
    most recompiles any of stock's ranks made. A recompile stalls the whole
    job (every rank waits for it at the next collective), and the plugin
    makes all ranks decide alike where stock's ranks differ, so a rank's
    recompiles count beyond the most of any stock rank, not its own."""
    if not like_eager(stock):
        return STOCK_FAILS if like_eager(plugin) else BOTH_FAIL
    if not like_eager(plugin):
        return PLUGIN_FAILS
    if plugin["breaks"] > stock["breaks"]:
        return MORE_BREAKS
    # A break stock takes and the plugin does not can leave stock fewer graphs
    # (both halves empty): more graphs count against the plugin only at as many
    # breaks (a graph: a frame's first compile, a recompile counted apart), and
    # only where stock compiled a graph at all: where it compiled none (2.11
    # runs a frame that calls a function it skips wholly eagerly), the
    # plugin's graphs are code compiled that stock ran eagerly, not stock's
    # graphs split into more pieces.
    # Recompiles count beyond stock's, except that code the plugin
    # compiles where stock breaks, or where stock compiled no graph at all, may
    # take its one static-to-dynamic step when a size changes (one per frame
    # it compiled), which stock, running that code eagerly, never takes.
    recompiles, allowed = plugin.get("recompiles", 0), max(stock.get("recompiles", 0), world_recompiles)
    graphs = plugin["frames"] - recompiles, stock["frames"] - stock.get("recompiles", 0)
    if plugin["breaks"] < stock["breaks"] or graphs[1] == 0:
        allowed += graphs[0]
    if recompiles > allowed or (plugin["breaks"] == stock["breaks"] and graphs[0] > graphs[1] > 0):
        return MORE_FRAMES
    if (plugin["breaks"], graphs[0]) != (stock["breaks"], graphs[1]) or recompiles < stock.get("recompiles", 0):
        return PLUGIN_BETTER
    return SAME


def _describe(side: dict[str, Any]) -> str:
    what = failure(side) or "like eager"
    return (f"{what}; {side.get('breaks', '?')} breaks, {side.get('frames', '?')} frames, "
            f"{side.get('recompiles', '?')} recompiles"
            + (f"; breaks: {side['reasons']}" if side.get("reasons") else ""))


def judge(stock: list[dict[str, Any]], plugin: list[dict[str, Any]]) -> tuple[str, str]:
    """The example's outcome (its worst rank's: a failure first, then a
    stock failure) and a description of both sides on every rank. Raises
    ``AssertionError`` with that description when the plugin is worse than
    stock."""
    world = max((s["recompiles"] for s in stock if isinstance(s.get("recompiles"), int)), default=0)
    outcomes = [rank_outcome(s, p, world) for s, p in zip(stock, plugin)]
    order = [*FAILURES, STOCK_FAILS, BOTH_FAIL, PLUGIN_BETTER, SAME]
    outcome = min(outcomes, key=order.index)
    text = "\n".join(f"rank {r}: {o}\n  stock:  {_describe(s)}\n  plugin: {_describe(p)}"
                     for r, (o, s, p) in enumerate(zip(outcomes, stock, plugin)))
    if outcome in FAILURES:
        raise AssertionError(f"{outcome}\n{text}")
    return outcome, text


def stock_note(stock: list[dict[str, Any]]) -> str | None:
    """Stock's failure, in a few words (its first failing rank's), or None."""
    found = next((failure(s) for s in stock if failure(s)), None)
    return None if found is None else found.split(": ", 1)[-1][:160]
