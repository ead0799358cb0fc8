"""``t.grad_fn`` of a tensor the frame computed with an autograd history.

Stock Dynamo breaks the graph at that read ("Tensor with grad_fn()"), and
code that only asks whether a tensor is a leaf reads it: spmd_types 0.3's
collectives pass ``input_is_leaf=x.requires_grad and x.grad_fn is None``,
so each of them split the graph. What such code asks is known while
tracing: a tensor computed in the graph from inputs that require grad, with
grad mode on, has *some* autograd ``Node`` as its ``grad_fn``, never
``None``, and it has one at run time exactly when the traced one does (the
inputs' ``requires_grad`` and the grad mode are guarded by Dynamo's own
tensor and global-state guards). So ``t.grad_fn is None`` / ``is not
None`` and ``bool(t.grad_fn)`` fold to constants.

Anything that needs the node itself (its attributes such as
``next_functions``, calling it, comparing two of them by identity: outputs
of one ``split`` share a node) is a ``dynamo_dist:`` break, as stock breaks;
a node returned or stored is read again from the tensor at run time.

A tensor passed in with a history (a non-leaf input: the frame after a
graph break gets the tensors computed before it) has one in a later call
only if the caller made it so, which none of Dynamo's guards hold (a leaf
that requires grad passes the same tensor guard): reading its ``grad_fn``
adds the guard ``t.grad_fn is not None`` on its source; and an input read
without one (stock's ``None``, unguarded) the guard ``t.grad_fn is None``,
so a later call with a non-leaf tensor does not take the leaf's answer.
"""

from __future__ import annotations

from typing import Any, Callable

import torch

from .. import _compat as C
from .breaks import Break, graph_break
from .identity import Identity


def var_getattr(tx: Any, tensor: Any, name: str) -> Any:
    """``tensor.grad_fn`` as a :class:`GradFnVariable` where stock would
    break (a tensor of the frame with an autograd history); None lets stock
    answer (no history: ``None``; an input: stock's break)."""
    if name != "grad_fn":
        return None
    history = getattr(tensor, "has_grad_fn", False)
    if tensor.source is not None:
        C.dynamo.guard_predicate(tensor.source, has_grad_fn, grad_fn_check,
                          f"dynamo_dist: `{tensor.source.name}.grad_fn` is {'not ' if history else ''}None")
    return GradFnVariable(tensor) if history else None


def has_grad_fn(t: Any) -> bool:
    """What the guard expects (saved by torch's precompile as data)."""
    return t.grad_fn is not None


def grad_fn_check(expected: bool) -> Callable[[Any], bool]:
    return lambda t: (t.grad_fn is not None) is expected


class GradFnVariable(C.slots.Tracker):
    """The autograd node of a tensor computed in the frame: known to exist,
    not known which."""

    def __init__(self, tensor: Any, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.tensor = tensor

    def identity(self) -> Identity:
        return Identity.FRESH

    def identity_known_with(self, other: Any) -> bool:
        """Whether ``self is other`` is known while tracing: against anything
        but another node (``None``, a constant, a module), it is False."""
        return not isinstance(other, GradFnVariable) or other is self

    def python_type(self) -> type:
        return torch.autograd.graph.Node

    def get_real_python_backed_value(self) -> Any:
        return self  # an object of its own: ``is`` against any other value is False

    def as_python_constant(self) -> Any:
        raise NotImplementedError("the autograd node of a traced tensor is not known while tracing")

    def is_python_constant(self) -> bool:
        return False

    def __repr__(self) -> str:
        return f"GradFnVariable({self.tensor})"

    def vt_bool(self, tx: Any) -> Any:
        return C.dynamo.constant(True)

    def vt_getattr(self, tx: Any, name: str) -> Any:
        self._needs_the_node(f"`.grad_fn.{name}`")

    def vt_hasattr(self, tx: Any, name: str) -> Any:
        self._needs_the_node(f"`hasattr(t.grad_fn, {name!r})`")

    def call_method(self, tx: Any, name: str, args: list, kwargs: dict) -> Any:
        if name in ("__bool__",) and not args and not kwargs:
            return self.vt_bool(tx)
        self._needs_the_node(f"`.grad_fn.{name}(...)`")

    def call_function(self, tx: Any, args: list, kwargs: dict) -> Any:
        self._needs_the_node("calling `t.grad_fn`")

    def _needs_the_node(self, what: str) -> None:
        graph_break(Break.GRAD_FN_NODE, context=what, what=what)

    def reconstruct(self, codegen: Any) -> None:
        # Read again from the tensor (a graph output) at run time.
        C.dynamo.emit_call_import(codegen, "builtins", "getattr", (self.tensor, "grad_fn"))
