"""An ``autograd.Function``'s ``ctx`` in a frame saved by torch's precompile.

A graph break inside a Function's ``forward`` (torchtitan's vocab-parallel
loss under ``compile_on_one_rank``: its rank is a run-time value, so its
vocab bounds are a data-dependent branch) leaves the rest of ``forward``
to a resumed frame whose locals hold ``ctx``: the Function's backward node
(an instance of ``Function._backward_cls``). Dynamo guards on it (its type,
what the frame read of it), so torch's precompile pickles it with the
frame's guards; an autograd node has no pickle, and the frame is not saved
("Guard evaluation failed: TypeError: cannot pickle '<Function>Backward'
object", a package bypass, stock alike): every restart traces it again.

Here ``ctx`` is saved as its Function (by qualified name) and the state a
guard can read of it: its Python attributes (``ctx.k = ...``) and what
``apply`` gave it (``needs_input_grad``). It loads as a new
``ctx`` of that Function (``C.dynamo.new_ctx_of``) with that state, on
which torch rebuilds the frame's guards: the guards check the live ``ctx``
against what the saving process saw, as they did there. A ``ctx`` holding
tensors through the autograd API (``save_for_backward``,
``mark_non_differentiable``, ``mark_dirty`` before the break) is left to
torch's pickler: the frame is not saved, as without the plugin.
"""

from __future__ import annotations

from typing import Any

from .. import _compat as C

# Fields of a ``ctx`` that ``apply`` sets and a new ``ctx`` takes by assignment.
SETTABLE_FIELDS = ("needs_input_grad",)


def reduce(pickler: Any, obj: Any) -> Any:
    """``obj`` as :func:`function_ctx` of its Function and state, where it is
    a Function's ``ctx`` that holds no tensors through the autograd API;
    otherwise None (torch's pickler takes it)."""
    function = C.dynamo.autograd_function_of_ctx(obj)
    if function is None or C.dynamo.ctx_holds_tensors(obj):
        return None
    fields = {name: getattr(obj, name) for name in SETTABLE_FIELDS}
    return function_ctx, (function, fields, dict(obj.__dict__))


def function_ctx(function: type, fields: dict, attributes: dict) -> Any:
    """A new ``ctx`` of ``function`` with the state a saved one had (loading
    a frame saved by torch's precompile; pickled by this qualified name)."""
    ctx = C.dynamo.new_ctx_of(function)
    for name, value in fields.items():
        setattr(ctx, name, value)
    ctx.__dict__.update(attributes)
    return ctx
