"""AOTAutograd's partitioner, as the RNG-state fix (``aot/rng_states.py``)
needs it: the function it wraps and the node kinds it reads; and the class of
the process groups a graph may hold (``aot/object_constants.py``)."""

from __future__ import annotations

import copy
import importlib
import inspect
from typing import Any

from torch._functorch import partitioners as _partitioners
from torch.distributed.distributed_c10d import ProcessGroup as _ProcessGroup

from .distributed import _is_opaque_type

_is_opaque_node = getattr(_partitioners, "is_opaque_node", None)  # 2.12+ (2.11 saves no opaque objects)

# (module, name) of the function wrapped while installed, or None where
# nothing needs it (2.11: no opaque objects are saved for backward).
RNG_STATES_HOOK_POINT: tuple[Any, str] | None = (
    (_partitioners, "functionalize_rng_ops") if _is_opaque_node is not None else None)


# The class of process groups, where a graph may hold one as a constant (2.12+:
# a registered opaque type, a functional collective's group argument), else
# None. AOTAutograd deep-copies a backward graph before it compiles it
# (``graph_compile`` / ``runtime_wrappers``), which a group refuses.
GRAPH_HELD_GROUP_CLASS: Any = (
    _ProcessGroup if _is_opaque_type is not None and _is_opaque_type(_ProcessGroup) else None)


def is_sym_node(node: Any) -> bool:
    return bool(_partitioners.is_sym_node(node))


def is_opaque_node(node: Any) -> bool:
    return _is_opaque_node is not None and bool(_is_opaque_node(node))


# -- the joint graph's partition (aot/tangent_objects.py) ---------------------

import torch.fx as _fx  # noqa: E402
from torch._library.fake_class_registry import FakeScriptObject as _FakeScriptObject  # noqa: E402
from torch.fx.experimental import proxy_tensor as _proxy_tensor  # noqa: E402
from torch._functorch._aot_autograd import frontend_utils as _frontend_utils  # noqa: E402
from torch._functorch._aot_autograd import graph_compile as _graph_compile  # noqa: E402
from torch._functorch._aot_autograd import utils as _aot_utils  # noqa: E402
from torch.utils._pytree import tree_flatten, tree_unflatten  # noqa: E402, F401

# (module, name) of the function that partitions a joint graph into forward
# and backward (2.12+; 2.11 flattens no mesh into a DTensor's tangent, see
# ``aot/object_constants.py``). Its partition function is its last parameter
# (2.13+) or its AOTConfig's (2.12): ``with_partition_fn``.
PARTITION_POINT: tuple[Any, str] | None = (
    (_graph_compile, "_partition_joint_graph_into_fw_bw")
    if hasattr(_graph_compile, "_partition_joint_graph_into_fw_bw") and _is_opaque_node is not None else None)


def with_partition_fn(partition_joint: Any, wrap: Any) -> Any:
    """``partition_joint`` (the function at ``PARTITION_POINT``) calling
    ``wrap(partition_fn)`` in place of the partition function it is given."""
    signature = inspect.signature(partition_joint)

    def call(*args: Any, **kwargs: Any) -> Any:
        bound = signature.bind(*args, **kwargs)
        if "partition_fn" in signature.parameters:
            bound.arguments["partition_fn"] = wrap(bound.arguments["partition_fn"])
        else:
            config = copy.copy(bound.arguments["aot_config"])
            config.partition_fn = wrap(config.partition_fn)
            bound.arguments["aot_config"] = config
        return partition_joint(*bound.args, **bound.kwargs)

    return call


# (class, name) of the method with which the tracer of AOTAutograd's graphs
# turns a value into a graph argument (constants stowed as attributes).
CREATE_ARG_POINT: tuple[Any, str] = (_proxy_tensor.PythonKeyTracer, "create_arg")


# (module, name) of the function that gives a traced value its graph value
# (a proxy, or for a symbolic int a thunk that computes one); the module
# calls it by its global name.
PROXY_SLOT_POINT: tuple[Any, str] = (_proxy_tensor, "set_proxy_slot")


def is_symbolic(value: Any) -> bool:
    return isinstance(value, _proxy_tensor.py_sym_types)


def symbol_proxies(tracer: Any) -> dict:
    """The tracer's graph values of bare symbols (the last place it looks for
    a symbolic int it has no graph value of its own for)."""
    return tracer.sympy_expr_tracker


def fake_object_of(value: Any) -> Any:
    """The real object a fake script object wraps, or None."""
    return getattr(value, "real_obj", None) if isinstance(value, _FakeScriptObject) else None


def attribute_of(tracer: Any, node: Any) -> Any:
    return getattr(tracer.root, node.target, None)


def set_attribute_of(tracer: Any, node: Any, value: Any) -> None:
    setattr(tracer.root, node.target, value)


# (module, name) of the function with which AOTAutograd resolves an
# AsyncCollectiveTensor input before tracing (2.14+; 2.13 resolves them
# inline, and the plugin's backport hands it none, ``collective.py``).
ACT_INPUT_RESOLVE_POINT: tuple[Any, str] | None = (
    (_frontend_utils, "_resolve_input_async_collectives")
    if hasattr(_frontend_utils, "_resolve_input_async_collectives") else None)


# (module, name) where AOTAutograd's entry points find the function that
# fakifies their inputs, on releases where it resolves AsyncCollectiveTensor
# inputs inline and returns their positions (2.12, 2.13):
# ``process_inputs(flat_args, ...) -> (fake_args, act_input_indices)``.
_aot_autograd = importlib.import_module("torch._functorch.aot_autograd")
ACT_INPUT_INDICES_POINT: tuple[Any, str] | None = (
    (_aot_autograd, "process_inputs")
    if ACT_INPUT_RESOLVE_POINT is None and "act_input_indices" in _frontend_utils.process_inputs.__code__.co_varnames
    else None)


def is_tangent(node: Any) -> bool:
    return bool(_aot_utils._is_tangent(node))


def object_of(node: Any) -> Any:
    """The object a graph node of an opaque object stands for (the real
    object behind a fake script object), or None for anything else."""
    if not is_opaque_node(node):
        return None
    value = node.meta["val"]
    return getattr(value, "real_obj", value)


def is_fx_node(value: Any) -> bool:
    return isinstance(value, _fx.Node)


def constant_node(module: Any, value: Any, meta: dict) -> Any:
    """A ``get_attr`` node of ``module`` that holds ``value`` (named as the
    tracer names the opaque constants it stows away), with ``meta``'s value."""
    name = "_torchbind_obj0"
    i = 0
    while hasattr(module, name):
        i += 1
        name = f"_torchbind_obj{i}"
    setattr(module, name, value)
    node = module.graph.create_node("get_attr", name)
    if "val" in meta:
        node.meta["val"] = meta["val"]
    return node
