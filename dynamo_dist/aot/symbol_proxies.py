"""A symbol's graph value is the first one the tracer made for it.

The proxy tracer gives each symbolic int a graph value once ("first one
wins", so a size derivable from a primal never depends on a tangent), but
its last-resort table, a bare symbol's graph value (``sympy_expr_tracker``),
is overwritten by every later symbolic int whose expression is that symbol.
DTensor's sharding computes such ints under a dynamic sequence length:
``sym_max(s27, 1)`` simplifies to ``s27``; its graph value is a thunk
computing ``sym_max`` from the argument, a ``s27`` the tracer has no graph
value for, so it looks in the table, finds the thunk itself, and recurses
until Python's limit: a ``RecursionError`` in AOTAutograd's joint trace for
a TP model with a dynamic dimension and grad (stock torch 2.11-2.15 alike;
forward-only compiles). The fix keeps the table's first entry, as the tracer
keeps a symbolic int's first graph value; every entry of a symbol is the same
value, so the choice changes no result.
"""

from __future__ import annotations

from typing import Any, Callable

from .. import _compat as C


def first_symbol_proxy_wins(set_proxy_slot: Callable[..., Any]) -> Callable[..., Any]:
    """The tracer's ``set_proxy_slot``, keeping a bare symbol's first graph value."""
    def keep_first(obj: Any, tracer: Any, proxy: Any) -> None:
        if not C.aot.is_symbolic(obj):
            return set_proxy_slot(obj, tracer, proxy)
        table = C.aot.symbol_proxies(tracer)
        expr = obj.node.expr
        first = table.get(expr)
        set_proxy_slot(obj, tracer, proxy)
        if first is not None:
            table[expr] = first

    keep_first.__wrapped__ = set_proxy_slot  # type: ignore[attr-defined]
    return keep_first
