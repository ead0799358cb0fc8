"""torch.distributed's c10d calls as functional collectives, and the facts
of c10d the trackers of those calls need.

Each traced form below has the parameters of the ``torch.distributed`` call
it stands for (every supported release's) and does what eager does, with
functional collectives (``_c10d_functional.*`` and their ``wait_tensor`` in
the graph) in place of the backend's in-place ones, writing the result back
into the call's tensors as eager does (``copy_``; complex tensors through
their real view, as eager). Dynamo inlines them (``variables/collectives.py``
calls them through ``inline_call``, with the reduce op already its funcol
name); they never run eagerly. Group helpers they call (``get_world_size``,
``get_group_rank``, ``_rank_not_in_group``) are the plugin's folded rows.

Where stock Dynamo rewrites the same call (``traceable_collective_remaps``:
``all_reduce``, ``all_gather``, ``all_gather_into_tensor``,
``reduce_scatter_tensor``, ``all_to_all_single``, and ``reduce_scatter`` from
2.14), the graph is stock's: the same collective, its wait and the same
write-back.
"""

from __future__ import annotations

import datetime
from typing import Any, Callable

import torch
import torch._dynamo.config as _dynamo_config
import torch.distributed as dist
import torch.distributed.distributed_c10d as _c10d

from .distributed import all_gather_single, funcol, reduce_scatter_single

# -- facts -------------------------------------------------------------------

# ReduceOp -> its functional collectives' name. PREMUL_SUM has none (it
# carries a factor), nor has a custom op.
_REDUCE_OPS: tuple[tuple[Any, str], ...] = tuple(
    (getattr(dist.ReduceOp, name), name.lower())
    for name in ("SUM", "AVG", "PRODUCT", "MIN", "MAX", "BAND", "BOR", "BXOR"))

# Eager refuses these on complex tensors (``dist.supports_complex``).
_NO_COMPLEX_OPS = frozenset({"min", "max", "band", "bor", "bxor"})

# The option structs a ProcessGroup method takes, by what they carry.
_OP_OPTIONS = tuple(getattr(dist, n) for n in ("AllreduceOptions", "AllreduceCoalescedOptions",
                                               "ReduceScatterOptions") if hasattr(dist, n))
_ROOT_OPTIONS = (dist.BroadcastOptions,)
_PLAIN_OPTIONS = tuple(getattr(dist, n) for n in ("AllgatherOptions", "AllToAllOptions") if hasattr(dist, n))


def reduce_op_name(op: Any) -> str | None:
    """The functional collectives' name of a ``ReduceOp`` (``"sum"``), or
    None for one they cannot run (``PREMUL_SUM``, a custom op, not an op)."""
    if not isinstance(op, dist.ReduceOp):  # (the RedOpType members are ReduceOps too)
        return None
    return next((name for known, name in _REDUCE_OPS if op == known), None)


# torch's switch for tracing point-to-point calls
# (``TORCHDYNAMO_ENABLE_P2P_COMPILATION``; 2.12+: 2.11 traces none).
P2P_SWITCH = "enable_p2p_compilation"
HAS_P2P_SWITCH = hasattr(_dynamo_config, P2P_SWITCH)


def p2p_compilation() -> bool:
    """Whether torch's switch for tracing point-to-point calls is on (read
    where stock reads it; off where the release has none)."""
    return bool(getattr(_dynamo_config, P2P_SWITCH, False))


# The ops that wait for a functional collective (``wait_tensors``: 2.14+).
_WAITS = tuple(getattr(torch.ops._c10d_functional, name) for name in ("wait_tensor", "wait_tensors")
               if hasattr(torch.ops._c10d_functional, name))


def is_wait(node: Any) -> bool:
    """Whether an FX node waits for a functional collective."""
    target = getattr(node, "target", None)
    return getattr(target, "overloadpacket", target) in _WAITS or target is funcol.wait_tensor


class CompletedWork(dist.Work):
    """The handle of a collective a compiled graph ran: the graph waited for
    it before it returned, so it is finished. What a ``Work`` made inside a
    compiled region is when it leaves it (returned, stored, live at a graph
    break)."""

    def wait(self, timeout: Any = None) -> bool:
        return True

    def is_completed(self) -> bool:
        return True

    def is_success(self) -> bool:
        return True

    def exception(self) -> Any:
        return None

    def synchronize(self) -> None:
        return None

    def __repr__(self) -> str:
        return "CompletedWork()"


def completed_work() -> CompletedWork:
    return CompletedWork()


WORK_TYPE = dist.Work


# -- the traced forms (inlined by Dynamo) --------------------------------------

def _group(group: Any) -> Any:
    return dist.group.WORLD if group is None else group


def _real(tensor: torch.Tensor) -> torch.Tensor:
    return torch.view_as_real(tensor) if tensor.is_complex() else tensor


def _check_complex(what: str, tensors: Any, op: str) -> None:
    for t in tensors:
        if t.is_complex() and op in _NO_COMPLEX_OPS:
            raise ValueError(f"{what} does not support {op} on complex tensors")


def _write(target: torch.Tensor, value: torch.Tensor) -> None:
    # As eager's in-place collectives: the result lands in ``target`` without
    # autograd history of its own (a gradient passes ``target`` unchanged, as
    # in eager; inside an autograd.Function's forward, 2.11 would otherwise
    # lose the function's gradient).
    with torch.no_grad():
        target.copy_(value if value.shape == target.shape else value.view(target.shape))


def _group_rank(group: Any, rank: Any, group_rank: Any) -> Any:
    # eager's _canonicalize_group_rank(..., return_global=False)
    if group_rank is not None:
        if rank is not None:
            raise ValueError("Can't specify both group_src and src")
        return group_rank
    if rank is None:
        raise ValueError("Must specify src or group_src")
    return dist.get_group_rank(group, rank)


def all_reduce(tensor, op="sum", group=None, async_op=False):
    group = _group(group)
    if _c10d._rank_not_in_group(group):
        return
    _check_complex("all_reduce", (tensor,), op)
    t = _real(tensor)
    _write(t, funcol.all_reduce(t, op, group))


def broadcast(tensor, src=None, group=None, async_op=False, group_src=None):
    group = _group(group)
    root = _group_rank(group, src, group_src)  # (eager asks first: a group without this rank raises)
    if _c10d._rank_not_in_group(group):
        return
    t = _real(tensor)
    _write(t, funcol.broadcast(t, root, group))


def all_gather_into_tensor(output_tensor, input_tensor, group=None, async_op=False):
    group = _group(group)
    if _c10d._rank_not_in_group(group):
        return
    inp = _real(input_tensor)
    if inp.dim() == 0:
        inp = inp.reshape(1)
    _write(_real(output_tensor), all_gather_single(inp, 0, group))


def reduce_scatter_tensor(output, input, op="sum", group=None, async_op=False):
    group = _group(group)
    if _c10d._rank_not_in_group(group):
        return
    _check_complex("reduce_scatter_tensor", (input,), op)
    inp = _real(input)
    if inp.dim() == 0 or inp.shape[0] % dist.get_world_size(group) != 0:
        inp = inp.reshape(-1)
    _write(_real(output), reduce_scatter_single(inp, op, 0, group))


def all_to_all_single(output, input, output_split_sizes=None, input_split_sizes=None, group=None,
                      async_op=False):
    group = _group(group)
    if _c10d._rank_not_in_group(group):
        return
    out, inp = _real(output), _real(input)
    size = dist.get_world_size(group)
    output_split_sizes = output_split_sizes or None  # eager: [] is an even split
    input_split_sizes = input_split_sizes or None
    if output_split_sizes is None and input_split_sizes is not None:
        output_split_sizes = [out.shape[0] // size] * size
    if input_split_sizes is None and output_split_sizes is not None:
        input_split_sizes = [inp.shape[0] // size] * size
    _write(out, funcol.all_to_all_single(inp, output_split_sizes, input_split_sizes, group))


def all_to_all(output_tensor_list, input_tensor_list, group=None, async_op=False):
    group = _group(group)
    if _c10d._rank_not_in_group(group):
        return
    outs = [_real(t) for t in output_tensor_list]
    ins = [_real(t).reshape(-1) for t in input_tensor_list]
    out_sizes = [o.numel() for o in outs]
    received = funcol.all_to_all_single(torch.cat(ins), out_sizes, [i.numel() for i in ins], group)
    for o, piece in zip(outs, received.split(out_sizes)):
        _write(o, piece)


def all_gather(tensor_list, tensor, group=None, async_op=False):
    group = _group(group)
    if _c10d._rank_not_in_group(group):
        return
    outs = [_real(t) for t in tensor_list]
    t = _real(tensor)
    if t.dim() > 0 and all(o.shape == t.shape for o in outs):
        pieces = all_gather_single(t, 0, group).split(t.shape[0])
    elif all(o.numel() == t.numel() for o in outs):
        pieces = all_gather_single(t.reshape(-1), 0, group).split(t.numel())
    else:  # uneven: every rank sends its tensor to every rank
        sizes = [o.numel() for o in outs]
        pieces = funcol.all_to_all_single(t.reshape(-1).repeat(len(outs)), sizes, [t.numel()] * len(outs),
                                          group).split(sizes)
    for o, piece in zip(outs, pieces):
        _write(o, piece)


def reduce_scatter(output, input_list, op="sum", group=None, async_op=False):
    group = _group(group)
    if _c10d._rank_not_in_group(group):
        return
    _check_complex("reduce_scatter", input_list, op)
    out = _real(output)
    ins = [_real(t) for t in input_list]
    if any(i.numel() != out.numel() for i in ins):
        raise ValueError("reduce_scatter: every tensor of input_list must have the output's number of elements")
    if out.dim() > 0 and all(i.shape == out.shape for i in ins):
        scattered = reduce_scatter_single(torch.cat(ins), op, 0, group)
    else:
        scattered = reduce_scatter_single(torch.cat([i.reshape(-1) for i in ins]), op, 0, group)
    _write(out, scattered)


def all_reduce_coalesced(tensors, op="sum", group=None, async_op=False):
    group = _group(group)
    if _c10d._rank_not_in_group(group):
        return
    _check_complex("all_reduce_coalesced", tensors, op)
    ts = [_real(t) for t in tensors]
    for t, reduced in zip(ts, funcol.all_reduce_coalesced(ts, op, group)):
        _write(t, reduced)


def all_gather_coalesced(output_tensor_lists, input_tensor_list, group=None, async_op=False):
    # output_tensor_lists[rank][i]: what ``rank`` sent as its input i
    for i, t in enumerate(input_tensor_list):
        all_gather([outs[i] for outs in output_tensor_lists], t, group)


# torch.distributed's calls, by name, and their traced forms.
TRACED_FORMS: dict[str, Callable[..., None]] = {
    "all_reduce": all_reduce,
    "broadcast": broadcast,
    "all_gather": all_gather,
    "all_gather_into_tensor": all_gather_into_tensor,
    "all_gather_single": all_gather_into_tensor,
    "reduce_scatter": reduce_scatter,
    "reduce_scatter_tensor": reduce_scatter_tensor,
    "reduce_scatter_single": reduce_scatter_tensor,
    "all_to_all_single": all_to_all_single,
    "all_to_all": all_to_all,
    "all_reduce_coalesced": all_reduce_coalesced,
    "all_gather_coalesced": all_gather_coalesced,
}


# -- ProcessGroup methods (always asynchronous: they return a Work) -----------

def _listed(tensors: Any) -> Any:
    return [tensors] if isinstance(tensors, torch.Tensor) else tensors


def pg_allreduce(group, tensors, op="sum"):
    for t in _listed(tensors):
        all_reduce(t, op, group)


def pg_allreduce_coalesced(group, tensors, op="sum"):
    all_reduce_coalesced(_listed(tensors), op, group)


def pg_broadcast(group, tensors, root=0):
    for t in _listed(tensors):
        broadcast(t, group=group, group_src=root)


def pg_allgather(group, output_tensors, input_tensors):
    if isinstance(input_tensors, torch.Tensor):
        all_gather(output_tensors, input_tensors, group)
    else:
        for outs, t in zip(output_tensors, input_tensors):
            all_gather(outs, t, group)


def pg_reduce_scatter(group, output_tensors, input_tensors, op="sum"):
    if isinstance(output_tensors, torch.Tensor):
        reduce_scatter(output_tensors, input_tensors, op, group)
    else:
        for out, ins in zip(output_tensors, input_tensors):
            reduce_scatter(out, ins, op, group)


def pg_alltoall(group, output_tensors, input_tensors):
    all_to_all(output_tensors, input_tensors, group)


def pg_alltoall_base(group, output, input, output_split_sizes, input_split_sizes):
    all_to_all_single(output, input, output_split_sizes, input_split_sizes, group)


def pg_allgather_into_tensor_coalesced(group, outputs, inputs):
    for out, inp in zip(outputs, inputs):
        all_gather_into_tensor(out, inp, group)


def pg_reduce_scatter_tensor_coalesced(group, outputs, inputs, op="sum"):
    for out, inp in zip(outputs, inputs):
        reduce_scatter_tensor(out, inp, op, group)


# ProcessGroup's methods, by name, and their traced forms: ``form(group,
# *data, **options)``, the options decoded by ``group_method_options``.
GROUP_METHOD_FORMS: dict[str, Callable[..., None]] = {
    "allreduce": pg_allreduce,
    "allreduce_coalesced": pg_allreduce_coalesced,
    "broadcast": pg_broadcast,
    "allgather": pg_allgather,
    "reduce_scatter": pg_reduce_scatter,
    "alltoall": pg_alltoall,
    "alltoall_base": pg_alltoall_base,
    "allgather_into_tensor_coalesced": pg_allgather_into_tensor_coalesced,
    "reduce_scatter_tensor_coalesced": pg_reduce_scatter_tensor_coalesced,
}


class UnsupportedOption(ValueError):
    """A ProcessGroup method's option the traced forms cannot honour."""


def is_group_method_option(value: Any) -> bool:
    """Whether an argument of a ProcessGroup method is one of its options (a
    reduce op, a root rank, an options struct, a timeout) rather than data."""
    return value is None or isinstance(value, (dist.ReduceOp, datetime.timedelta, *_OP_OPTIONS, *_ROOT_OPTIONS,
                                               *_PLAIN_OPTIONS)) or \
        isinstance(value, int) and not isinstance(value, bool)


def group_method_options(options: list) -> dict[str, Any]:
    """The keyword arguments of a traced form for a ProcessGroup method's
    options (Python values): ``{"op": "sum"}``, ``{"root": 1}``, ``{}``.
    An option the forms cannot honour raises ``UnsupportedOption``."""
    out: dict[str, Any] = {}
    for value in options:
        if value is None or isinstance(value, (datetime.timedelta, *_PLAIN_OPTIONS)):
            continue  # a timeout: the functional collectives have none
        if isinstance(value, _OP_OPTIONS):
            value = value.reduceOp
        if isinstance(value, _ROOT_OPTIONS):
            if value.rootTensor != 0:
                raise UnsupportedOption(f"rootTensor={value.rootTensor} (only 0)")
            out["root"] = value.rootRank
        elif isinstance(value, int) and not isinstance(value, bool):
            out["root"] = value
        else:
            name = reduce_op_name(value)
            if name is None:
                raise UnsupportedOption(f"reduce op {value!r}")
            out["op"] = name
    return out
