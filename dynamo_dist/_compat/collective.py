"""Inputs that are sometimes an ``AsyncCollectiveTensor`` (ACT): the backport
of torch 2.14's fix (upstream #187073) for the torch that lacks it.

Stock 2.13 guards an ACT input on its class (``___check_type_id(x, ACT)``),
so the same function called with the ACT a functional collective returns and
then with a plain tensor compiles twice; a DTensor whose ``_local_tensor`` is
sometimes an ACT does the same. 2.14 guards the unwrapped inner tensor
(``UnwrapCollectiveTensorSource``). Here an ACT input is traced as the tensor
it resolves to, read through ``ResolvedCollectiveSource``:

- guards see ``unwrap_for_guards(x)`` (an ACT's inner tensor, no wait), so a
  plain tensor of the same metadata passes them;
- the compiled code passes ``wait_for_graph(x)`` to the graph (an ACT is
  waited first), so the graph only ever reads resolved plain tensors;
- code that observes the class (``isinstance``, ``type``, ``__class__``)
  puts the class guard back (``observed_class``), as upstream does.

A DTensor whose local tensor is an ACT is resolved the same way, rebuilt
around the resolved local tensor; only when it does not require grad (a
rebuilt DTensor is a new autograd leaf). An ACT that requires grad (the
local tensor of an ``async_op=True`` redistribute, ``to_local()``) is
resolved through ``wait_keeping_grad``, so its gradient reaches the ACT's
own autograd graph, as eager's does. Everything here but
``wait_keeping_grad`` is inert unless ``NEEDS_BACKPORT`` (the running torch
has no ``UnwrapCollectiveTensorSource``).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch
import torch._dynamo.source as _dynamo_source
from torch._dynamo.bytecode_transformation import create_call_function
from torch._dynamo.guards import GuardBuilder, _get_closure_vars, install_guard
from torch._dynamo.source import AttrSource, TypeSource
from torch._dynamo.variables.base import VariableTracker
from torch._dynamo.variables.builder import VariableBuilder
from torch._dynamo.variables.builtin import BuiltinVariable
from torch._dynamo.variables.tensor import TensorVariable
from torch._guards import ChainedSource
from torch.distributed._functional_collectives import AsyncCollectiveTensor
from torch.distributed.tensor import DTensor

from .dynamo import break_graph, dynamo_disable

# Built against 2.13's guard builder and builtins (its slot family has
# ``richcompare_impl``); 2.11 / 2.12 keep stock's behaviour (a second frame).
NEEDS_BACKPORT = (not hasattr(_dynamo_source, "UnwrapCollectiveTensorSource")
                  and hasattr(VariableTracker, "richcompare_impl"))

# The name guards call the unwrap by (Dynamo evaluates guard and shape-guard
# code with its closure variables; ``closure_var`` adds ours while installed).
GUARD_FN_NAME = "___dynamo_dist_unwrap_collective"


class _WaitKeepingGrad(torch.autograd.Function):
    """An ACT's resolved tensor as an autograd op on the ACT: the wait is
    not differentiated (the gradient passes through, as through eager's ops
    on an ACT, which wait inside their dispatch)."""

    @staticmethod
    def forward(ctx: Any, act: Any) -> Any:
        return act.trigger_wait()

    @staticmethod
    def backward(ctx: Any, grad: Any) -> Any:
        return grad


def wait_keeping_grad(act: Any) -> Any:
    """``act.trigger_wait()``, with the result on the ACT's autograd graph
    when the ACT requires grad and grad mode is on (``trigger_wait`` returns
    the inner tensor, which autograd never saw: a compiled function's output
    then requires no grad and the backward never reaches the ACT's inputs)."""
    if act.requires_grad and torch.is_grad_enabled():
        return _WaitKeepingGrad.apply(act)
    return act.trigger_wait()


def _rebuilt(x: DTensor, local: torch.Tensor) -> DTensor:
    return DTensor(local, x._spec, requires_grad=False)


def unwrap_for_guards(x: Any) -> Any:
    """What guards check: an ACT's inner tensor, a DTensor with an ACT local
    rebuilt around that inner tensor; anything else unchanged. Never waits."""
    if type(x) is AsyncCollectiveTensor:
        # An ACT that requires grad is traced as an input that requires grad.
        return x.elem.detach().requires_grad_() if x.requires_grad else x.elem
    if type(x) is DTensor and type(x._local_tensor) is AsyncCollectiveTensor:
        return _rebuilt(x, x._local_tensor.elem)
    return x


def _wait_for_graph(x: Any) -> Any:
    if type(x) is AsyncCollectiveTensor:
        return wait_keeping_grad(x)
    if type(x) is DTensor and type(x._local_tensor) is AsyncCollectiveTensor:
        return _rebuilt(x, x._local_tensor.trigger_wait())
    return x


# What the compiled graph receives: an ACT waited (its resolved tensor), a
# DTensor with an ACT local rebuilt around the waited local; anything else
# unchanged. The compiled code calls it before the graph, so the graph never
# reads unfinished data. Dynamo is off inside it: compiling it (or
# ``trigger_wait``) would meet an ACT input again.
wait_for_graph = dynamo_disable(_wait_for_graph)


@dataclass(frozen=True)
class ResolvedCollectiveSource(ChainedSource):
    """The resolved value of ``base`` (an ACT input, or a DTensor with an ACT
    local): guards read ``unwrap_for_guards``, the graph gets ``wait_for_graph``."""

    def reconstruct(self, codegen: Any) -> None:
        codegen.add_push_null(lambda: codegen.load_import_from(__name__, "wait_for_graph"))
        codegen(self.base)
        codegen.extend_output(create_call_function(1, False))

    @property
    def _name_template(self) -> str:
        return GUARD_FN_NAME + "({0})"


def needs_resolving(source: Any, value: Any) -> bool:
    """An input this backport traces as its resolved value. An ACT read as a
    DTensor's ``_local_tensor`` is left to stock: its DTensor decides."""
    if type(value) is AsyncCollectiveTensor:
        return not (isinstance(source, AttrSource) and source.member == "_local_tensor")
    return (type(value) is DTensor and type(value._local_tensor) is AsyncCollectiveTensor
            and not value.requires_grad)


def wrap_resolved(tx: Any, source: Any, value: Any) -> VariableTracker:
    """The tracker of ``value``'s resolved tensor, read through ``ResolvedCollectiveSource``."""
    return VariableBuilder(tx, ResolvedCollectiveSource(source))(unwrap_for_guards(value))


def guard_manager(builder: Any, source: ResolvedCollectiveSource) -> Any:
    """The guard manager of a ``ResolvedCollectiveSource`` (stock's builder
    knows only its own source types): ``unwrap_for_guards`` of the base's."""
    cache = builder._cached_guard_managers
    if source.name not in cache:
        base = builder.get_guard_manager_from_source(source.base)
        example = builder.get(source)
        cache[source.name] = base.lambda_manager(
            python_lambda=unwrap_for_guards,
            source=source.name,
            example_value=example,
            guard_manager_enum=builder.get_guard_manager_type(source, example),
        )
    return cache[source.name]


def closure_vars() -> dict:
    """Dynamo's guard closure variables (``closure_var`` is added to them)."""
    return _get_closure_vars()


def observed_class(vt: Any) -> type | None:
    """For a tracker of a resolved ACT input: the class the user's value had
    when the frame compiled (ACT); None for any other tracker. The caller
    answers with it and ``guard_class`` puts the class guard back."""
    source = getattr(vt, "source", None)
    if isinstance(vt, TensorVariable) and isinstance(source, ResolvedCollectiveSource) \
            and vt.python_type() is torch.Tensor:
        return AsyncCollectiveTensor
    return None


def guard_class(vt: Any) -> None:
    """The class guard stock puts on an ACT input (``TYPE_MATCH``)."""
    install_guard(vt.source.base.make_guard(GuardBuilder.TYPE_MATCH))


def class_tracker(tx: Any, vt: Any) -> VariableTracker:
    """``type(x)`` / ``x.__class__`` of a resolved ACT input, guarded."""
    guard_class(vt)
    return VariableBuilder(tx, TypeSource(vt.source.base))(AsyncCollectiveTensor)


def isinstance_answer(vt: Any, classinfo: Any) -> bool:
    """``isinstance(x, classinfo)`` for a resolved ACT input, answered for
    the ACT it was; the class guard goes back only when a plain tensor would
    answer differently (``isinstance(x, torch.Tensor)`` keeps sharing)."""
    try:
        as_act, as_plain = issubclass(AsyncCollectiveTensor, classinfo), issubclass(torch.Tensor, classinfo)
    except TypeError:
        break_graph("dynamo_dist: isinstance of a resolved collective input", repr(classinfo),
                    "isinstance() of an input that was an AsyncCollectiveTensor, with a classinfo "
                    "that is not a class or tuple of classes.",
                    ["Pass a class or a tuple of classes to isinstance()."])
    if as_act != as_plain:
        guard_class(vt)
    return as_act


def clear_builtin_handlers() -> None:
    """Dynamo caches each builtin's bound handler (``call_isinstance``...)
    for good; cleared when those handlers are patched or restored."""
    BuiltinVariable.call_function_handler_cache.clear()
