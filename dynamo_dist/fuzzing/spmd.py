"""The ``spmd`` property: programs written with spmd_types, compiled beside eager.

spmd_types writes tensor parallelism with plain local tensors and every
collective written out (``spmd.all_reduce``, ``all_gather``,
``reduce_scatter``, ``all_to_all``, ``redistribute``, each over a mesh
axis), and an optional type checker (``spmd_types.checker.typecheck``)
that gives each tensor a local type per mesh axis (R, I, V, P; shards as
PartitionSpecs in its global mode) and raises ``SpmdTypeError`` for an
ill-typed program.

``spmd_programs`` generates ``f(x, w)``: ``x`` replicated (R), ``w`` this
rank's weight (V; replicated in the checker's global mode), on a 1-D mesh
``("tp",)`` of the 2-rank world, then a few statements on ``h``: a matmul
with ``w``, elementwise math, a sum over dim 0, ``h + x``, and collectives
from the type the generator believes ``h`` has (well typed) or, one time in
four, from another (ill typed on purpose: the checker says which).

``run_side`` runs an ``SpmdExample`` on one rank of a real gloo world under
its checker mode (``"off"``, ``"local"``, ``"global"``): eagerly (stock
torch), then compiled (``aot_eager``, ``fullgraph=False``) with the plugin
installed, or with stock torch (``dynamo_dist.uninstall()``). ``verdict``
is the oracle: where eager raised ``SpmdTypeError``, the compiled program
raises it too (same class and statement, ``_error_statement``); where eager ran, the compiled
output, gradients and SPMD types (output's and gradients') equal eager's.
Stock's side is recorded, never judged (stock fails under the checker).
"""

from __future__ import annotations

import contextlib
import re
from dataclasses import dataclass
from typing import Any

import torch
import torch.distributed as dist
from hypothesis import strategies as st

import dynamo_dist

from .._compat import observe as O
from ..worlds import make_mesh
from .specs import Program

CHECKERS = ("off", "local", "global")
# What an ill-typed program raises: the checker's error, or (checker or not)
# a collective's own check of its src and dst types.
TYPE_ERRORS = ("SpmdTypeError", "ValueError")
SIDES = ("plugin", "stock")
# Seconds a side may take on a rank (a rank stuck in a collective its peer never joins).
SIDE_TIMEOUT = 90.0
ROWS, COLS = 4, 8  # x is ROWS x COLS, w is COLS x COLS on every rank

HEADER = """\
import torch
import spmd_types as spmd
from spmd_types import I, P, R, S, V
from spmd_types.checker import typecheck


def f(x, w):
"""

# The example's outcomes (what ``check_spmd`` returns), as the fuzz run counts them.
WELL_STOCK_SAME = "well typed, stock like eager"
WELL_STOCK_FAILS = "well typed, stock fails"
ILL_STOCK_SAME = "ill typed, stock raises eager's error"
ILL_STOCK_FAILS = "ill typed, stock does not raise eager's error"
OUTCOMES = (WELL_STOCK_SAME, WELL_STOCK_FAILS, ILL_STOCK_SAME, ILL_STOCK_FAILS)


@dataclass(frozen=True)
class SpmdExample:
    """A program ``f(x, w)`` of ``spmd_programs`` run under the checker in
    ``checker`` mode (one of ``CHECKERS``), with the backward of its output
    when ``backward`` (gradients of ``x`` and ``w`` compared too); inputs
    drawn from ``seed``."""

    program: Program
    checker: str = "off"
    backward: bool = True
    seed: int = 0


# ---------------------------------------------------------------------------
# The grammar.


@dataclass
class _State:
    believed: str  # the type the generator believes h has: R, I, V, P, or ? (unknown)
    shape: tuple[int, ...]


def _shard_token(draw: Any, checker: str) -> str:
    """How a varying type is written: V (stacked on a new dim 0) or S(0)
    (concatenated on dim 0); the global mode mostly writes S(0)."""
    if checker == "global":
        return "S(0)" if draw(st.integers(0, 3)) else "V"
    return draw(st.sampled_from(["V", "S(0)"]))


def _gathered(shape: tuple[int, ...], token: str) -> tuple[int, ...]:
    return (2, *shape) if token == "V" else (2 * shape[0], *shape[1:])


def _scattered(shape: tuple[int, ...], token: str) -> tuple[int, ...] | None:
    """The shape ``token`` leaves of a reduce-scatter or a split, or None where it does not fit."""
    if token == "V":
        return shape[1:] if len(shape) >= 2 and shape[0] == 2 else None
    return (shape[0] // 2, *shape[1:]) if shape[0] % 2 == 0 else None


def _other(draw: Any, types: list[str], believed: str) -> str:
    """The believed type three times in four (well typed), else another."""
    if believed in types and draw(st.integers(0, 3)):
        return believed
    return draw(st.sampled_from(types))


def _statement(draw: Any, s: _State, checker: str, lines: list[str]) -> None:
    options = ["math", "math", "matmul", "all_reduce", "all_gather", "redistribute"]
    if len(s.shape) >= 2:
        options.append("sum")
    if s.shape == (ROWS, COLS):
        options.append("add_x")
    if s.shape[0] % 2 == 0:
        options.append("reduce_scatter")
    if s.shape[0] == 2:  # V splits dim 0 into one piece per rank
        options.append("all_to_all")
    name = draw(st.sampled_from(options))
    if name == "math":
        expr = draw(st.sampled_from(["torch.relu(h)", "h * 2", "h + 1", "torch.tanh(h)", "h * h", "h + h", "-h"]))
        lines.append(f"h = {expr}")
        if expr in ("h + 1", "h * h") and s.believed == "P":
            s.believed = "?"  # a partial value's nonlinear math: the checker's rule decides
    elif name == "matmul":
        lines.append("h = h @ w")
        s.believed = {"R": "V", "V": "V", "I": "V"}.get(s.believed, "?") if checker != "global" else s.believed
    elif name == "sum":
        lines.append("h = h.sum(0)")
        s.shape = s.shape[1:]
    elif name == "add_x":
        lines.append("h = h + x")
        s.believed = s.believed if s.believed in ("R", "V") else "?"
    elif name == "all_reduce":
        src = _other(draw, ["P", "V"], s.believed)
        dst = draw(st.sampled_from(["R", "I"]))
        lines.append(f'h = spmd.all_reduce(h, "tp", src={src}, dst={dst})')
        s.believed = dst
    elif name == "all_gather":
        token = _shard_token(draw, checker)
        dst = draw(st.sampled_from(["R", "I"]))
        extra = ", gather_dim=0" if token == "V" and draw(st.booleans()) else ""
        lines.append(f'h = spmd.all_gather(h, "tp", src={token}, dst={dst}{extra})')
        if s.believed != "V":
            s.believed = "?"
        else:
            s.believed = dst
        s.shape = _gathered(s.shape, token)
    elif name == "reduce_scatter":
        token = "S(0)" if _scattered(s.shape, "V") is None else _shard_token(draw, checker)
        src = _other(draw, ["P", "V"], s.believed) if s.believed != "R" else draw(st.sampled_from(["P", "R"]))
        lines.append(f'h = spmd.reduce_scatter(h, "tp", src={src}, dst={token})')
        s.believed = "V" if s.believed == src else "?"
        s.shape = _scattered(s.shape, token) or s.shape
    elif name == "all_to_all":
        lines.append('h = spmd.all_to_all(h, "tp", src=V, dst=V)')
        s.believed = "V" if s.believed == "V" else "?"
    else:
        _redistribute(draw, s, checker, lines)


def _redistribute(draw: Any, s: _State, checker: str, lines: list[str]) -> None:
    """``spmd.redistribute(h, "tp", src=A, dst=B)``: A the believed type
    (or another), B one that fits ``h``'s shape."""
    src = _other(draw, ["R", "I", "P", "V"], s.believed)
    src_token = _shard_token(draw, checker) if src == "V" else src
    dsts = ["R", "I", "P"]
    if src != "V":
        dsts += [t for t in ("V", "S(0)") if _scattered(s.shape, t) is not None]
    else:
        dsts = ["R", "I", "P"]
    dst = draw(st.sampled_from([d for d in dsts if d != src] or ["R"]))
    lines.append(f'h = spmd.redistribute(h, "tp", src={src_token}, dst={dst})')
    if src == "V" and dst in ("R", "I"):
        s.shape = _gathered(s.shape, src_token)
    elif src != "V" and dst in ("V", "S(0)"):
        s.shape = _scattered(s.shape, dst) or s.shape
    believed = "V" if dst == "S(0)" else dst
    s.believed = believed if src == s.believed else "?"


@st.composite
def spmd_programs(draw: Any, checker: str = "off", max_statements: int = 5) -> Program:
    """A program ``f(x, w)`` of 1 to ``max_statements`` statements on ``h``
    (see the module's docstring), for the checker in ``checker`` mode."""
    lines: list[str] = []
    if draw(st.booleans()):
        lines.append("h = x @ w")
        s = _State("V" if checker != "global" else "R", (ROWS, COLS))
    else:
        lines.append("h = x * 1")
        s = _State("R", (ROWS, COLS))
    for _ in range(draw(st.integers(1, max_statements))):
        _statement(draw, s, checker, lines)
    body = "".join(f"    {line}\n" for line in lines) + "    return h\n"
    return Program(HEADER + body)


@st.composite
def spmd_examples(draw: Any, checkers: tuple[str, ...] = CHECKERS, max_statements: int = 5) -> SpmdExample:
    """An example of the ``spmd`` property: a checker mode of ``checkers``,
    a program for it, with or without its backward."""
    checker = draw(st.sampled_from(checkers))
    program = draw(spmd_programs(checker, max_statements))
    return SpmdExample(program, checker, draw(st.booleans()), draw(st.integers(0, 2**16)))


# ---------------------------------------------------------------------------
# On each rank.

_MESHES: dict[Any, Any] = {}


def _mesh() -> Any:
    key = id(dist.group.WORLD)
    if key not in _MESHES:
        _MESHES[key] = make_mesh((2,), ("tp",))
    return _MESHES[key]


def _checker(fn: Any, mode: str) -> Any:
    """The checker in ``mode`` (``typecheck`` as the program imported it)."""
    return contextlib.nullcontext() if mode == "off" else fn.__globals__["typecheck"](local=mode == "local")


def _inputs(example: SpmdExample, spmd: Any) -> tuple[torch.Tensor, torch.Tensor]:
    """x (the same on every rank: R) and w (this rank's: V; R in global mode),
    typed for the checker."""
    g = torch.Generator().manual_seed(example.seed)
    with spmd.no_typecheck():
        x = torch.randn(ROWS, COLS, generator=g)
        w = torch.randn(2, COLS, COLS, generator=g)[dist.get_rank() % 2] * 0.5
        if example.checker == "global":
            w = torch.randn(COLS, COLS, generator=g) * 0.5
        x, w = (t.clone().requires_grad_(example.backward) for t in (x, w))
    if example.checker != "off":
        tp = spmd.current_mesh_names()["tp"]
        spmd.assert_type(x, {tp: spmd.R})
        spmd.assert_type(w, {tp: spmd.V if example.checker == "local" else spmd.R})
    return x, w


_ADDRESS = re.compile(r"0x[0-9a-f]{6,}")


def _error(e: BaseException) -> str:
    """An exception as ``Class: message`` (its first lines, no addresses)."""
    text = " ".join(line.strip() for line in str(e).strip().splitlines()[:6] if line.strip())
    return f"{type(e).__name__}: {_ADDRESS.sub('0x…', text)[:600]}"


def _error_statement(e: BaseException) -> str:
    """What an error says was wrong: its class and first line. spmd_types
    appends notes after it (a traceback-filtering hint per API boundary the
    error left, the call and its arguments), which differ with how many of
    its wrappers the error crossed (0.3.1's collectives: one more eagerly
    than traced), not with the program."""
    lines = str(e).strip().splitlines()
    return f"{type(e).__name__}: {_ADDRESS.sub('0x…', lines[0].strip()) if lines else ''}"


def _types(spmd: Any, t: Any, checker: str) -> str | None:
    if checker == "off" or not isinstance(t, torch.Tensor):
        return None
    spec = getattr(t, "_partition_spec", None)
    return repr(spmd.get_local_type(t)) + ("" if spec is None else f" {spec!r}")


def _run(fn: Any, example: SpmdExample, spmd: Any, program: Any) -> dict[str, Any]:
    """Call ``fn(x, w)`` (and its backward) under the example's checker:
    ``{"error": ...}`` or its output, gradients and types as plain data."""
    try:
        with _checker(program, example.checker):
            x, w = _inputs(example, spmd)
            out = fn(x, w)
            if example.backward and out.requires_grad:
                with spmd.no_typecheck():
                    seed = (torch.arange(out.numel(), dtype=out.dtype).reshape(out.shape) % 3) - 1
                out.backward(seed)
            with spmd.no_typecheck():
                return {"out": out.detach().tolist(), "grads": [None if t.grad is None else t.grad.tolist()
                                                                for t in (x, w)],
                        "types": [_types(spmd, t, example.checker) for t in (out, x.grad, w.grad)]}
    except Exception as e:
        return {"error": _error(e), "statement": _error_statement(e), "spmd_error": type(e).__name__ in TYPE_ERRORS}


def run_side(example: SpmdExample, side: str) -> dict[str, Any]:
    """One rank's run of ``example``: eagerly (stock torch), then compiled
    (``aot_eager``, ``fullgraph=False``) on ``side`` (``"plugin"`` or
    ``"stock"``): ``{"eager": ..., "compiled": ...}``, each ``_run``'s."""
    if side not in SIDES:
        raise ValueError(f"side={side!r} must be one of {SIDES}")
    dynamo_dist.uninstall()
    O.reset_dynamo()
    try:
        fn = example.program.function()
        spmd = fn.__globals__["spmd"]  # spmd_types, as the program imported it
        with spmd.set_current_mesh(_mesh()):
            eager = _run(fn, example, spmd, fn)
            if side == "plugin":
                dynamo_dist.install()
            O.reset_dynamo()
            compiled = _run(torch.compile(fn, backend="aot_eager"), example, spmd, fn)
        return {"eager": eager, "compiled": compiled}
    finally:
        O.reset_dynamo()
        dynamo_dist.uninstall()


# ---------------------------------------------------------------------------
# The verdict.


def _close(a: Any, b: Any) -> bool:
    if a is None or b is None:
        return a is b
    ta, tb = torch.tensor(a), torch.tensor(b)
    return ta.shape == tb.shape and torch.allclose(ta, tb, rtol=1e-4, atol=1e-5)


def verdict(eager: dict[str, Any], compiled: dict[str, Any]) -> str | None:
    """How ``compiled`` differs from ``eager`` (each a ``_run``), or None.
    Eager's ``SpmdTypeError``: the compiled program raises it, the same
    class and statement (``_error_statement``).
    Eager's values: the compiled output, gradients and types equal them."""
    if "error" in eager:
        if compiled.get("statement") != eager["statement"]:
            got = compiled.get("error", "no error (it ran)")
            return f"eager raised {eager['error']}\n  compiled: {got}"
        return None
    if "error" in compiled:
        return f"eager ran; compiled raised {compiled['error']}"
    if not _close(eager["out"], compiled["out"]):
        return f"output differs: eager {eager['out']}, compiled {compiled['out']}"
    for name, e, c in zip(("x", "w"), eager["grads"], compiled["grads"]):
        if not _close(e, c):
            return f"gradient of {name} differs: eager {e}, compiled {c}"
    if eager["types"] != compiled["types"]:
        return f"SPMD types (output, x.grad, w.grad) differ: eager {eager['types']}, compiled {compiled['types']}"
    return None


def judge(plugin: list[dict[str, Any]], stock: list[dict[str, Any]]) -> tuple[str, str | None]:
    """The example's outcome (one of ``OUTCOMES``) and stock's failure in a
    few words (None where stock is like eager), from each side's run on
    every rank. Raises ``AssertionError`` where the plugin's compiled verdict
    differs from eager's on a rank."""
    wrong = [f"rank {r}: {v}" for r, p in enumerate(plugin) if (v := verdict(p["eager"], p["compiled"]))]
    if wrong:
        raise AssertionError("the compiled program's verdict differs from eager's\n" + "\n".join(wrong))
    ill = any("error" in p["eager"] for p in plugin)
    stock_wrong = next((v for s in stock if (v := verdict(s["eager"], s["compiled"]))), None)
    if ill:
        return (ILL_STOCK_FAILS if stock_wrong else ILL_STOCK_SAME), _note(stock_wrong)
    return (WELL_STOCK_FAILS if stock_wrong else WELL_STOCK_SAME), _note(stock_wrong)


def _note(text: str | None) -> str | None:
    if text is None:
        return None
    last = text.strip().splitlines()[-1].strip()
    return _ADDRESS.sub("0x…", last.removeprefix("compiled: "))[:160]


def eager_problem(runs: list[dict[str, Any]]) -> str | None:
    """Why an example is not a program to judge: eager raised something
    other than ``SpmdTypeError`` (a shape the generator got wrong), or the
    ranks disagree on whether eager raised. None when it is one."""
    for r, run in enumerate(runs):
        eager = run["eager"]
        if "error" in eager and not eager["spmd_error"]:
            return f"rank {r}: eager raised {eager['error']}"
    if len({"error" in run["eager"] for run in runs}) > 1:
        return "eager raised on some ranks only"
    return None
