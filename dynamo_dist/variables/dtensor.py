"""DTensor operations as single graph calls with the mesh and placements baked in.

Stock torch 2.13 puts ``from_local(x, mesh, [Shard(0)])`` in the FX graph with
the mesh as a graph input and the placements as constants (rule 1 broken), and
cannot trace ``distribute_tensor`` or ``from_local(run_check=True)``. Here each
such call becomes one graph call of a small function that closes over the
folded mesh and placements (already guarded, since they came from tracked
objects), registered in ``baked_ops`` under a key that spells them out so
the compile caches can key the graph. AOTAutograd traces through it and
emits the functional collectives, so the captured graph holds only tensors and
collectives that name their group by string.

An argument we cannot fold (a placement computed from a tensor, say) hands the
call back to stock Dynamo: never worse than stock.
"""

from __future__ import annotations

import functools
import inspect
import itertools
import types
import zlib
from typing import Any, Callable

import torch
import torch.distributed as dist
from torch.distributed.tensor import DTensor, Shard, distribute_tensor

from .. import _compat as C
from ..caching import baked_ops
from ..tracked_types import TrackedType, declare
from .breaks import Break, first_line, short_repr, short_args_repr, graph_break, log
from .build import build
from .device_mesh import known_meshes
from .folding import as_readable_sequence, constants_or_none
from .importable import ImportableObjectVariable
from .members import TRACKED_MESH, Kind, Member, MemberTable
from .rebuild import from_source

# DTensor members and functions. Attributes are read through the trackers
# above; the operations become one graph call each (variables/dtensor.py).
DTENSOR_MEMBERS = MemberTable("DTensor", {
    "placements": Member(Kind.FOLD),
    "device_mesh": Member(Kind.FOLD, outcome=TRACKED_MESH),
    "_spec": Member(Kind.FOLD),
    "from_local": Member(Kind.DTENSOR_OP, method=True),
    "to_local": Member(Kind.DTENSOR_OP, method=True),
    "redistribute": Member(Kind.DTENSOR_OP, method=True),
    "full_tensor": Member(Kind.DTENSOR_OP, method=True),
    "distribute_tensor": Member(Kind.DTENSOR_OP, method=True),
})

# The DTensor table drives this module: DTENSOR_OP rows are operations
# (``DTensor`` methods, or functions: static methods of ``DTensor`` and
# ``torch.distributed.tensor`` functions), FOLD rows are attributes.
_FUNCTION_SOURCES = (DTensor, torch.distributed.tensor)


def _is_function_row(name: str) -> bool:
    static = inspect.getattr_static(DTensor, name, None)
    return static is None or isinstance(static, staticmethod)


_METHODS = frozenset(name for name, m in DTENSOR_MEMBERS.items()
                     if m.kind is Kind.DTENSOR_OP and not _is_function_row(name))
# Methods whose argument-less call involves no mesh, placement or collective,
# left to stock where its graph node is a cacheable method call (2.12+).
_STOCK_WITHOUT_ARGUMENTS = frozenset() if C.dynamo.STOCK_TO_LOCAL_IS_CLOSURE else frozenset({"to_local"})
_FUNCTION_NAMES = tuple(name for name, m in DTENSOR_MEMBERS.items()
                        if m.kind is Kind.DTENSOR_OP and _is_function_row(name))
# Parameters of the DTENSOR_OP rows that take a sequence of placements: any
# sequence the user passes there is read item by item (``as_readable_sequence``).
SEQUENCE_PARAMETERS = frozenset({"placements", "grad_placements"})


@functools.cache
def _sequence_positions(fn: Callable[..., Any], skip: int) -> frozenset[int]:
    """Positions (after ``skip`` leading parameters) of ``fn``'s placement sequences."""
    params = list(inspect.signature(fn).parameters.values())[skip:]
    positional = (inspect.Parameter.POSITIONAL_ONLY, inspect.Parameter.POSITIONAL_OR_KEYWORD)
    return frozenset(i for i, p in enumerate(params) if p.kind in positional and p.name in SEQUENCE_PARAMETERS)


def _readable_sequences(tx: Any, fn: Callable[..., Any], args: list, kwargs: dict, what: str,
                        skip: int = 0) -> tuple[list, dict]:
    positions = _sequence_positions(fn, skip)
    args = [as_readable_sequence(tx, a, what) if i in positions else a for i, a in enumerate(args)]
    kwargs = {k: as_readable_sequence(tx, v, what) if k in SEQUENCE_PARAMETERS else v for k, v in kwargs.items()}
    return args, kwargs


@functools.cache
def dtensor_functions() -> dict[Any, str]:
    """The DTensor functions we handle (``DTensor.from_local``,
    ``distribute_tensor``), mapped to their table name."""
    found = {}
    for name in _FUNCTION_NAMES:
        fn = next((getattr(src, name) for src in _FUNCTION_SOURCES if hasattr(src, name)), None)
        if fn is not None:
            found[fn] = name
    return found


def _is_dtensor_var(vt: Any) -> bool:
    try:
        return issubclass(vt.python_type(), DTensor)
    except NotImplementedError:
        return False


def _graph_call(tx: Any, op: Callable[..., Any], name: str, what: str, tensor: Any, *baked: Any,
                mesh: Any = None, by_coordinate: bool = True) -> Any:
    """``op(tensor)`` as one graph call. ``baked``: every value ``op`` closes
    over; when each has a stable identity the node is ``baked_ops.call(key,
    tensor)`` (the compile caches key it), else ``op`` itself (they bypass).
    ``by_coordinate``: whether the shapes ``op`` computes may depend on the
    rank's coordinate (then each rank traces it as every coordinate of
    ``mesh``, or of the input's mesh when it is a DTensor)."""
    fn_name = f"dynamo_dist_{name}"
    op.__name__ = op.__qualname__ = fn_name  # shown in the graph when it stays a closure
    op.__doc__ = what
    key = baked_ops.bake(op, what, (name, *baked))
    value = C.dynamo.example_value(tensor)
    dynamic = isinstance(value, torch.Tensor) and C.dynamo.has_symbolic_size(value)
    marked = C.dynamo.marked_sizes(tx) if dynamic else frozenset()
    if by_coordinate:
        _trace_as_every_coordinate(tx, op, what, tensor, mesh)
    if key is None:
        log.debug("%s: a baked-in value has no stable identity; the compile caches will bypass this graph", what)
        out = C.dynamo.graph_call(tx, op, [tensor])
    else:
        out = C.dynamo.graph_call(tx, baked_ops.call, [tensor], constants=(key,))
    fixed = C.dynamo.fixed_sizes(tx, marked)
    if fixed:  # the frame would fail when its guards are made: the call runs eagerly instead
        graph_break(Break.SPECIALIZES_MARKED_SIZE, context=what, what=what, sizes=", ".join(fixed))
    return out


# The most coordinates a graph call is traced as (each a run on fakes).
EVERY_COORDINATE_LIMIT = 64


def _trace_as_every_coordinate(tx: Any, op: Callable[..., Any], what: str, tensor: Any, mesh: Any) -> None:
    """Make every rank decide alike on ``op``'s dynamic sizes.

    Each rank traces ``op`` as its own coordinate. Where a sharded size is
    symbolic, the sizes it asks about differ by rank: for ``s`` split over
    two ranks, ``ceil(s/2) == 1`` on the first and ``s - ceil(s/2) == 1`` on
    the second. Guarding only its own answers, one rank's graph fixes
    ``s = 2`` while its peer's keeps it symbolic; the ranks then run
    different graphs, and one waits in a collective its peer never joins
    (stock torch does this too). So before the graph call, every rank runs
    ``op`` on the fakes as every coordinate along the mesh dims its input or
    output shards, in the same order: the shape environments of all ranks
    see the same questions in the same order, add the same guards and
    specialize alike. The graph call then runs as the rank's own coordinate,
    whose questions have all been asked, and answered alike, by then.
    ``mesh``: the mesh ``op`` places on (the input's when it is a DTensor)."""
    value = C.dynamo.example_value(tensor)
    if (not isinstance(value, torch.Tensor) or C.distributed.compile_on_one_rank()
            or not C.dynamo.has_symbolic_size(value)):
        return
    mesh = value.device_mesh if isinstance(value, DTensor) else mesh
    if mesh is None or mesh.get_coordinate() is None:
        return
    first = (0,) * mesh.ndim
    out = _run_as(tx, op, what, value, mesh, first, 1)
    dims = {i for v in (value, out) if isinstance(v, DTensor) for i, p in enumerate(v.placements)
            if C.distributed.splits_by_coordinate(p) and mesh.size(i) > 1}
    axes = [range(mesh.size(d)) if d in dims else (0,) for d in range(mesh.ndim)]
    coordinates = list(itertools.product(*axes))
    if len(coordinates) > EVERY_COORDINATE_LIMIT:
        graph_break(Break.RANK_DEPENDENT_SIZES, context=what, what=what, count=len(coordinates),
                    why=f"more than {EVERY_COORDINATE_LIMIT} coordinates")
    log.debug("%s: traced as each of %d coordinates of the mesh (a size is dynamic)", what, len(coordinates))
    for coordinate in coordinates[1:]:
        _run_as(tx, op, what, value, mesh, coordinate, len(coordinates))


def _run_as(tx: Any, op: Callable[..., Any], what: str, value: Any, mesh: Any, coordinate: tuple, count: int) -> Any:
    try:
        with C.distributed.as_coordinate(mesh, coordinate):
            return C.dynamo.run_on_fakes(tx, op, value)
    except C.dynamo.Unsupported:
        raise
    except Exception as e:
        graph_break(Break.RANK_DEPENDENT_SIZES, context=what, what=what, count=count,
                    why=f"as coordinate {coordinate} it raised {type(e).__name__}: {first_line(e)}")


# -- attributes of DTensors made in the frame ----------------------------------

def _fold_attribute(tx: Any, value: Any) -> Any:
    """FOLD: the answer as trackers, by its type: a mesh (``device_mesh``)
    is the tracker of that mesh known in this frame; a tuple of placements
    (``placements``) the tuple of their trackers, when every one rebuilds;
    anything else (``_spec``) is left to stock."""
    if isinstance(value, C.distributed.DeviceMesh):
        return known_meshes(tx).get(id(value))
    if not isinstance(value, (tuple, list)):
        return None
    items = [build(tx, p) for p in value]
    if any(i is None or i.rebuild is None and not C.distributed.is_builtin_placement_type(type(i.value))
           for i in items):
        return None
    return C.dynamo.make_tuple(items)


# Kind -> the function that answers an attribute row of that kind.
_ATTRIBUTE_HANDLERS: dict[Kind, Callable[[Any, Any], Any]] = {Kind.FOLD: _fold_attribute}


def var_getattr(tx: Any, self_vt: Any, name: str) -> Any:
    """``y.placements`` / ``y.device_mesh`` for a DTensor computed in the frame
    (no source): answered from its example value, which the graph's ops on
    guarded inputs determine. None lets stock handle it (sourced DTensors'
    attributes already reach our trackers through their source)."""
    member = DTENSOR_MEMBERS.get(name)
    handler = _ATTRIBUTE_HANDLERS.get(member.kind) if member is not None and not member.method else None
    if handler is None or self_vt.source is not None or not _is_dtensor_var(self_vt):
        return None
    example = C.dynamo.example_value(self_vt)
    if example is None:
        return None
    return handler(tx, getattr(example, name))


# -- DTensor methods ----------------------------------------------------------

def call_method(tx: Any, self_vt: Any, name: str, args: list, kwargs: dict) -> Any:
    """Our handling of ``dtensor.<name>(...)``, or None to let stock trace it."""
    if name not in _METHODS or not _is_dtensor_var(self_vt):
        return None
    if name in _STOCK_WITHOUT_ARGUMENTS and not args and not kwargs:
        return None  # no mesh, placement or collective involved: stock's form is already clean
    args, kwargs = _readable_sequences(tx, getattr(DTensor, name), args, kwargs, f"DTensor.{name}", skip=1)
    consts = constants_or_none(args, kwargs)
    if consts is None:
        log.debug("%s: argument not foldable, handing the call to stock Dynamo", name)
        return None
    pargs, pkwargs = consts
    shown = short_args_repr(pargs, pkwargs)

    def op(t: Any) -> Any:
        return getattr(t, name)(*pargs, **pkwargs)

    log.debug("DTensor.%s(%s) traced with its arguments folded", name, shown)
    return _graph_call(tx, op, name, f"DTensor.{name}({shown})", self_vt, pargs, pkwargs)


# -- DTensor.from_local, distribute_tensor --------------------------------------

class DTensorFunctionVariable(ImportableObjectVariable):
    """``DTensor.from_local`` or ``distribute_tensor`` read from a source."""

    STATE = ("name",)

    def __init__(self, value: Any, name: str, **kwargs: Any) -> None:
        super().__init__(value, **kwargs)
        self.name = name

    def call_function(self, tx: Any, args: list, kwargs: dict) -> Any:
        handled = _FUNCTION_HANDLERS[self.name](tx, args, kwargs)
        if handled is not None:
            return handled
        # Not foldable: exactly what stock would do with this function.
        return C.stock.stock_wrap(tx, self.source, self.value).call_function(tx, args, kwargs)


def _bind(fn: Any, args: list, kwargs: dict) -> dict[str, Any] | None:
    try:
        bound = inspect.signature(fn).bind(*args, **kwargs)
    except TypeError:
        return None
    return dict(bound.arguments)


def _from_local(tx: Any, args: list, kwargs: dict) -> Any:
    args, kwargs = _readable_sequences(tx, DTensor.from_local, args, kwargs, "DTensor.from_local")
    bound = _bind(DTensor.from_local, args, kwargs)
    if bound is None or "local_tensor" not in bound:
        return None
    local = bound.pop("local_tensor")
    consts = constants_or_none([], bound)
    if consts is None or not C.dynamo.is_tensor(local) or _is_dtensor_var(local):
        return None
    options = consts[1]
    mesh = options.pop("device_mesh", None)
    if mesh is None:
        return None  # the ambient mesh context: stock semantics
    run_check = bool(options.pop("run_check", False))
    if "placements" in options and options["placements"] is not None:
        options["placements"] = tuple(options["placements"])
    shown = ", ".join(f"{k}={short_repr(v)}" for k, v in options.items())

    if run_check:
        check = _run_check(mesh, options.get("placements"), "shape" not in options and "stride" not in options)

        def op(x: Any) -> Any:
            return DTensor.from_local(check(x), mesh, run_check=False, **options)
    else:
        def op(x: Any) -> Any:
            return DTensor.from_local(x, mesh, run_check=False, **options)

    log.debug("DTensor.from_local(mesh=%s, %s, run_check=%s) traced with its arguments folded",
              short_repr(mesh), shown, run_check)
    # run_check's collectives use the world group and check shapes unless given.
    checked = (dist.group.WORLD, "shape" not in options and "stride" not in options) if run_check else None
    # The global shape is the local one times the shards, the same on every
    # rank, unless the caller gives it (``shape=``, which may split unevenly).
    return _graph_call(tx, op, "from_local", f"DTensor.from_local({short_repr(mesh)}, {shown})", local,
                       mesh, options, checked, mesh=mesh, by_coordinate="shape" in options)


def _run_check(mesh: Any, placements: Any, check_shape_stride: bool) -> Callable[[Any], Any]:
    """``from_local(run_check=True)`` with functional collectives: the same
    metadata check across all ranks (as a runtime assertion) and the same
    broadcast of Replicate dims from the first rank of each mesh dim."""
    world = dist.group.WORLD
    # C.distributed.funcol.broadcast takes the source as a rank within the group.
    sources = [(dim, 0) for dim, p in enumerate(placements or []) if p.is_replicate()]

    def check(x: Any) -> Any:
        meta = [int(x.requires_grad), zlib.crc32(repr(x.dtype).encode())]
        if check_shape_stride:
            meta.append(zlib.crc32(repr((tuple(x.shape), x.stride())).encode()))
        mine = torch.tensor(meta, dtype=torch.int64, device=mesh.device_type)
        everyone = C.distributed.all_gather_single(mine, 0, world).view(-1, len(meta))
        C.distributed.assert_async(
            (everyone == mine).all(),
            "Inconsistent tensor metadata (including shape and stride) across ranks.",
        )
        for dim, src in sources:
            x = _BroadcastUnseenByAutograd.apply(x, src, (mesh, dim))
        return x

    return check


class _BroadcastUnseenByAutograd(torch.autograd.Function):
    """``run_check``'s broadcast as eager runs it: inside ``from_local``'s
    forward, where autograd does not see it (the gradient passes through).
    The functional broadcast has no autograd kernel of its own."""

    @staticmethod
    def forward(ctx: Any, x: Any, src: int, group: Any) -> Any:
        return C.distributed.funcol.broadcast(x.contiguous(), src, group)

    @staticmethod
    def backward(ctx: Any, grad: Any) -> Any:
        return grad, None, None


def _distribute_tensor(tx: Any, args: list, kwargs: dict) -> Any:
    args, kwargs = _readable_sequences(tx, distribute_tensor, args, kwargs, "distribute_tensor")
    bound = _bind(distribute_tensor, args, kwargs)
    if bound is None or "tensor" not in bound:
        return None
    tensor = bound.pop("tensor")
    consts = constants_or_none([], bound)
    if consts is None or not C.dynamo.is_tensor(tensor) or _is_dtensor_var(tensor):
        return None
    options = consts[1]
    mesh = options.get("device_mesh")
    if mesh is None:
        return None
    if tensor.requires_grad:
        graph_break(Break.DISTRIBUTE_REQUIRES_GRAD, context="distribute_tensor(...)")
    constrained = _sharded_dims(tensor, options.get("placements")) & set(C.dynamo.constrained_dims(tx, tensor))
    if constrained:
        graph_break(Break.DISTRIBUTE_CONSTRAINED, context="distribute_tensor(...)",
                    dims=", ".join(map(str, sorted(constrained))))
    src_data_rank = options.pop("src_data_rank", 0)
    sources = _broadcast_sources(mesh, src_data_rank)
    shown = ", ".join(f"{k}={short_repr(v)}" for k, v in options.items())

    def op(t: Any) -> Any:
        # Eager scatters/broadcasts from coordinate `src_data_rank` of each
        # mesh dim; broadcasting the whole tensor then keeping the local piece
        # gives every rank the same data, with collectives that trace.
        t = t.detach()
        for dim, src in sources:
            t = C.distributed.funcol.broadcast(t.contiguous(), src, (mesh, dim))
        return distribute_tensor(t, src_data_rank=None, **options)

    log.debug("distribute_tensor(%s, src_data_rank=%s) traced with its arguments folded", shown, src_data_rank)
    return _graph_call(tx, op, "distribute_tensor", f"distribute_tensor({shown})", tensor,
                       options, sources, mesh=mesh)


def _sharded_dims(tensor: Any, placements: Any) -> set[int]:
    """The tensor dims the placements shard (normalised, as distribute_tensor does)."""
    ndim = len(C.dynamo.example_value(tensor).size())
    return {p.dim % ndim if ndim else p.dim for p in placements or () if isinstance(p, Shard)}


def _broadcast_sources(mesh: Any, src_data_rank: int | None) -> list[tuple[int, int]]:
    """(mesh dim, source rank within that dim's group) for each broadcast."""
    if src_data_rank is None or mesh.get_coordinate() is None:
        return []
    return [(dim, src_data_rank) for dim in range(mesh.ndim) if mesh.size(dim) > 1]


# The DTENSOR_OP function rows, each traced by its own function.
_FUNCTION_HANDLERS: dict[str, Callable[[Any, list, dict], Any]] = {
    "from_local": _from_local,
    "distribute_tensor": _distribute_tensor,
}
# Every row is handled: attributes by Kind, methods as one graph call
# (``call_method``), functions by their own tracing.
DTENSOR_MEMBERS.require_handlers(_ATTRIBUTE_HANDLERS, "dtensor._ATTRIBUTE_HANDLERS",
                                 lambda name, member: not member.method)
DTENSOR_MEMBERS.require_handlers({Kind.DTENSOR_OP: call_method}, "dtensor.call_method",
                                 lambda name, member: member.method and not _is_function_row(name))
DTENSOR_MEMBERS.require_named_handlers(_FUNCTION_HANDLERS, "dtensor._FUNCTION_HANDLERS",
                                       lambda name, member: member.method and _is_function_row(name))

DTENSOR_FUNCTION = declare(TrackedType(
    name="DTensor function",
    python_type=types.FunctionType,
    objects=dtensor_functions,
    tracker=DTensorFunctionVariable,
    # Its attributes and methods are read through Dynamo's tensor tracker,
    # which ``_hooks`` sends here (``var_getattr``, ``call_method``).
    members=DTENSOR_MEMBERS,
    guard=C.dynamo.guard_identity,
    rebuild=from_source,
))
