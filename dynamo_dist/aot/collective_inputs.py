"""An ``AsyncCollectiveTensor`` input that requires grad keeps its gradient.

``t = dtensor.redistribute(mesh, [Replicate()], async_op=True).to_local()``
is an ``AsyncCollectiveTensor`` (ACT) that requires grad. AOTAutograd
resolves ACT inputs before tracing with ``trigger_wait()``, which returns the
inner tensor autograd never saw: the traced input requires no grad, so the
compiled function's output requires none and the backward never reaches the
tensors the ACT came from (eager: it does). Stock 2.12-2.15 lose the
gradient silently (2.11 does not resolve ACT inputs). Here an ACT input that
requires grad is resolved through ``wait_keeping_grad``
(``_compat/collective.py``): the same wait, recorded as an autograd op whose
gradient passes through. AOTAutograd resolves them in a function of their own
on 2.14+ (``resolve_keeping_grad``) and inline on 2.12 / 2.13, where they are
resolved before it runs (``inputs_resolved_keeping_grad``); on 2.13 the
plugin's backport resolves most of them in Dynamo, with the same function.
"""

from __future__ import annotations

from typing import Any, Callable

import torch

from .. import _compat as C


def resolve_keeping_grad(resolve: Callable[..., Any]) -> Callable[..., Any]:
    """AOTAutograd's ``_resolve_input_async_collectives``: what it records is
    unchanged; an ACT that requires grad resolves to ``wait_keeping_grad``'s
    tensor."""
    def _resolve_input_async_collectives(x: Any, *args: Any, **kwargs: Any) -> Any:
        resolved = resolve(x, *args, **kwargs)
        if type(x) is C.collective.AsyncCollectiveTensor and x.requires_grad and torch.is_grad_enabled():
            return C.collective.wait_keeping_grad(x)
        return resolved

    _resolve_input_async_collectives.__wrapped__ = resolve  # type: ignore[attr-defined]
    return _resolve_input_async_collectives


def inputs_resolved_keeping_grad(process_inputs: Callable[..., Any]) -> Callable[..., Any]:
    """AOTAutograd's ``process_inputs`` (2.12 / 2.13): an ACT input that
    requires grad is resolved first, through ``wait_keeping_grad``, and its
    position is among the ACT positions it returns (the runtime waits there)."""
    def resolve_then_process(flat_args: Any, *args: Any, **kwargs: Any) -> Any:
        waited = []
        if torch.is_grad_enabled():
            for i, a in enumerate(flat_args):
                if type(a) is C.collective.AsyncCollectiveTensor and a.requires_grad:
                    flat_args[i] = C.collective.wait_keeping_grad(a)
                    waited.append(i)
        fake_args, positions = process_inputs(flat_args, *args, **kwargs)
        return fake_args, sorted({*positions, *waited})

    resolve_then_process.__wrapped__ = process_inputs  # type: ignore[attr-defined]
    return resolve_then_process
