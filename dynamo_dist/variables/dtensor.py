"""DTensor operations as single graph calls with the mesh and placements baked in.

Stock torch 2.13 puts ``from_local(x, mesh, [Shard(0)])`` in the FX graph with
the mesh as a graph input and the placements as constants (rule 1 broken), and
cannot trace ``distribute_tensor`` or ``from_local(run_check=True)``. Here each
such call becomes ``call_function(op, tensors...)`` where ``op`` is a small
function that closes over the folded mesh and placements (already guarded,
since they came from tracked objects). AOTAutograd traces through ``op`` and
emits the functional collectives, so the captured graph holds only tensors and
collectives that name their group by string.

An argument we cannot fold (a placement computed from a tensor, say) hands the
call back to stock Dynamo: never worse than stock.
"""

from __future__ import annotations

import functools
import zlib
from typing import Any, Callable

from .. import _compat as C
from .base import _NO_VALUE, ImportableObjectVariable, describe, graph_break, log, real_value

# DTensor methods that take a mesh or placements (see members.DTENSOR_MEMBERS).
_METHODS = ("redistribute", "to_local", "full_tensor")


@functools.cache
def dtensor_functions() -> dict[Any, str]:
    from torch.distributed.tensor import DTensor, distribute_tensor

    return {DTensor.from_local: "from_local", distribute_tensor: "distribute_tensor"}


def _is_dtensor_var(vt: Any) -> bool:
    from torch.distributed.tensor import DTensor

    try:
        return issubclass(vt.python_type(), DTensor)
    except NotImplementedError:
        return False


def _constants(args: list, kwargs: dict) -> tuple[list, dict] | None:
    """Python values of all arguments, or None if one is only known at run time."""
    values = [real_value(a) for a in args]
    kw_values = {k: real_value(v) for k, v in kwargs.items()}
    if any(v is _NO_VALUE for v in [*values, *kw_values.values()]):
        return None
    return values, kw_values


def _graph_call(tx: Any, op: Callable[..., Any], tensors: list) -> C.VariableTracker:
    """``op(*tensors)`` as one call_function node; Dynamo runs ``op`` on fake
    tensors for the example value."""
    proxy = tx.output.create_proxy("call_function", op, tuple(t.as_proxy() for t in tensors), {})
    shape_env = tx.output.fake_mode.shape_env
    # Some redistributions (``_StridedShard``) compute an index tensor whose
    # size is data-dependent on fake tensors, then return a static shape: the
    # intermediate unbacked sizes never reach the output.
    with shape_env.ignore_fresh_unbacked_symbols():
        return C.wrap_fx_proxy(tx, proxy)


def _named(fn: Callable[..., Any], name: str, what: str) -> Callable[..., Any]:
    # The graph's code shows this name; the docstring says what was baked in.
    fn.__name__ = fn.__qualname__ = f"dynamo_dist_{name}"
    fn.__doc__ = what
    return fn


# -- attributes of DTensors made in the frame ----------------------------------

def var_getattr(tx: Any, self_vt: Any, name: str) -> C.VariableTracker | None:
    """``y.placements`` / ``y.device_mesh`` for a DTensor computed in the frame
    (no source): answered from its example value, which the graph's ops on
    guarded inputs determine. None lets stock handle it (sourced DTensors'
    attributes already reach our trackers through their source)."""
    if name not in ("placements", "device_mesh") or self_vt.source is not None or not _is_dtensor_var(self_vt):
        return None
    example = self_vt.proxy.node.meta.get("example_value")
    if example is None:
        return None
    if name == "placements":
        from torch._dynamo.variables.lists import TupleVariable

        from .registry import tracker_for

        items = [tracker_for(p) for p in example.placements]
        if any(i is None or i.rebuild is None and not _rebuilds_by_constructor(i) for i in items):
            return None
        return TupleVariable(items)
    from .device_mesh import known_meshes

    return known_meshes(tx).get(id(example.device_mesh))


def _rebuilds_by_constructor(tracker: Any) -> bool:
    from .placement import is_builtin_placement_type

    return is_builtin_placement_type(type(tracker.value))


# -- DTensor methods ----------------------------------------------------------

def call_method(tx: Any, self_vt: Any, name: str, args: list, kwargs: dict) -> C.VariableTracker | None:
    """Our handling of ``dtensor.<name>(...)``, or None to let stock trace it."""
    if name not in _METHODS or not _is_dtensor_var(self_vt):
        return None
    if name == "to_local" and not args and not kwargs:
        return None  # no mesh, placement or collective involved: stock's form is already clean
    consts = _constants(args, kwargs)
    if consts is None:
        log.debug("%s: argument not foldable, handing the call to stock Dynamo", name)
        return None
    pargs, pkwargs = consts
    shown = ", ".join([*map(describe, pargs), *(f"{k}={describe(v)}" for k, v in pkwargs.items())])

    def op(t: Any) -> Any:
        return getattr(t, name)(*pargs, **pkwargs)

    log.debug("DTensor.%s(%s) traced with its arguments folded", name, shown)
    return _graph_call(tx, _named(op, name, f"DTensor.{name}({shown})"), [self_vt])


# -- DTensor.from_local, distribute_tensor --------------------------------------

class DTensorFunctionVariable(ImportableObjectVariable):
    """``DTensor.from_local`` or ``distribute_tensor`` read from a source."""

    _nonvar_fields = {"name", *ImportableObjectVariable._nonvar_fields}

    def __init__(self, value: Any, name: str, **kwargs: Any) -> None:
        super().__init__(value, **kwargs)
        self.name = name

    def reconstruct(self, codegen: Any) -> None:
        codegen(self.source)  # DTensor.from_local is not importable by its qualname

    def call_function(self, tx: Any, args: list, kwargs: dict) -> C.VariableTracker:
        handled = (_from_local if self.name == "from_local" else _distribute_tensor)(tx, args, kwargs)
        if handled is not None:
            return handled
        # Not foldable: exactly what stock would do with this function.
        from .._hooks import stock_wrap

        return stock_wrap(tx, self.source, self.value).call_function(tx, args, kwargs)


def _bind(fn: Any, args: list, kwargs: dict) -> dict[str, Any] | None:
    import inspect

    try:
        bound = inspect.signature(fn).bind(*args, **kwargs)
    except TypeError:
        return None
    return dict(bound.arguments)


def _from_local(tx: Any, args: list, kwargs: dict) -> C.VariableTracker | None:
    from torch.distributed.tensor import DTensor

    bound = _bind(DTensor.from_local, args, kwargs)
    if bound is None or "local_tensor" not in bound:
        return None
    local = bound.pop("local_tensor")
    consts = _constants([], bound)
    if consts is None or not isinstance(local, C.TensorVariable) or _is_dtensor_var(local):
        return None
    options = consts[1]
    mesh = options.pop("device_mesh", None)
    if mesh is None:
        return None  # the ambient mesh context: stock semantics
    run_check = bool(options.pop("run_check", False))
    if "placements" in options and options["placements"] is not None:
        options["placements"] = tuple(options["placements"])
    shown = ", ".join(f"{k}={describe(v)}" for k, v in options.items())

    if run_check:
        check = _run_check(mesh, options.get("placements"), "shape" not in options and "stride" not in options)

        def op(x: Any) -> Any:
            return DTensor.from_local(check(x), mesh, run_check=False, **options)
    else:
        def op(x: Any) -> Any:
            return DTensor.from_local(x, mesh, run_check=False, **options)

    log.debug("DTensor.from_local(mesh=%s, %s, run_check=%s) traced with its arguments folded",
              describe(mesh), shown, run_check)
    return _graph_call(tx, _named(op, "from_local", f"DTensor.from_local({describe(mesh)}, {shown})"), [local])


def _run_check(mesh: Any, placements: Any, check_shape_stride: bool) -> Callable[[Any], Any]:
    """``from_local(run_check=True)`` with functional collectives: the same
    metadata check across all ranks (as a runtime assertion) and the same
    broadcast of Replicate dims from the first rank of each mesh dim."""
    import torch
    import torch.distributed as dist
    import torch.distributed._functional_collectives as funcol

    world = dist.group.WORLD
    # funcol.broadcast takes the source as a rank within the group.
    sources = [(dim, 0) for dim, p in enumerate(placements or []) if p.is_replicate()]

    def check(x: Any) -> Any:
        meta = [int(x.requires_grad), zlib.crc32(repr(x.dtype).encode())]
        if check_shape_stride:
            meta.append(zlib.crc32(repr((tuple(x.shape), x.stride())).encode()))
        mine = torch.tensor(meta, dtype=torch.int64, device=mesh.device_type)
        everyone = funcol.all_gather_single(mine, 0, world).view(-1, len(meta))
        torch._assert_async(
            (everyone == mine).all(),
            "Inconsistent tensor metadata (including shape and stride) across ranks.",
        )
        for dim, src in sources:
            x = funcol.broadcast(x.contiguous(), src, (mesh, dim))
        return x

    return check


def _distribute_tensor(tx: Any, args: list, kwargs: dict) -> C.VariableTracker | None:
    from torch.distributed.tensor import distribute_tensor

    bound = _bind(distribute_tensor, args, kwargs)
    if bound is None or "tensor" not in bound:
        return None
    tensor = bound.pop("tensor")
    consts = _constants([], bound)
    if consts is None or not isinstance(tensor, C.TensorVariable) or _is_dtensor_var(tensor):
        return None
    options = consts[1]
    mesh = options.get("device_mesh")
    if mesh is None:
        return None
    if tensor.requires_grad:
        graph_break(
            "distribute_tensor of a tensor that requires grad",
            "distribute_tensor(...)",
            "distribute_tensor returns a new leaf DTensor that requires grad (a parameter); a "
            "compiled graph cannot create leaves.",
            ["Distribute parameters once, outside the compiled function (e.g. when building the "
             "model), or pass `tensor.detach()`."],
        )
    src_data_rank = options.pop("src_data_rank", 0)
    sources = _broadcast_sources(mesh, src_data_rank)
    shown = ", ".join(f"{k}={describe(v)}" for k, v in options.items())

    def op(t: Any) -> Any:
        import torch.distributed._functional_collectives as funcol

        # Eager scatters/broadcasts from coordinate `src_data_rank` of each
        # mesh dim; broadcasting the whole tensor then keeping the local piece
        # gives every rank the same data, with collectives that trace.
        t = t.detach()
        for dim, src in sources:
            t = funcol.broadcast(t.contiguous(), src, (mesh, dim))
        return distribute_tensor(t, src_data_rank=None, **options)

    log.debug("distribute_tensor(%s, src_data_rank=%s) traced with its arguments folded", shown, src_data_rank)
    return _graph_call(tx, _named(op, "distribute_tensor", f"distribute_tensor({shown})"), [tensor])


def _broadcast_sources(mesh: Any, src_data_rank: int | None) -> list[tuple[int, int]]:
    """(mesh dim, source rank within that dim's group) for each broadcast."""
    if src_data_rank is None or mesh.get_coordinate() is None:
        return []
    return [(dim, src_data_rank) for dim in range(mesh.ndim) if mesh.size(dim) > 1]
