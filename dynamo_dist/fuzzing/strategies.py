"""Hypothesis strategies for distributed programs (needs ``hypothesis``).

Strategies draw plain-data specs (``dynamo_dist.fuzzing.specs``) that are
built into live meshes and groups inside a world, so every drawn example can
be printed, shrunk and written into a standalone reproducer.

- ``worlds()``: ``World(size, rank)``.
- ``mesh_shapes(world_size)``: a shape of 1 to 3 (up to 4) dims multiplying to the world size.
- ``meshes(world)``: ``MeshSpec`` of 1 to 3 (up to 4) dims whose shape multiplies to
  the world size, with and without dim names.
- ``placements(mesh_ndim, tensor_ndim)``: a placement per mesh dim:
  ``Shard``, ``Replicate``, ``Partial`` with every reduce op, ``_StridedShard``.
- ``dtensor_specs(...)``: mesh, placements, global shape (uneven shards,
  zero-size dims) and dtype.
- ``query_inputs(world)``: the arguments of a query program;
  ``programs(world, inputs)``: a generated query program (source code);
  ``dtensor_programs(spec)``: a generated DTensor program.
- ``user_programs(mesh, ndim)``: a generated program of the kind users
  write (``from_local`` of plain tensors, graph breaks between DTensor ops,
  ``loss_parallel`` / ``implicit_replication`` regions, torch.distributed
  calls, a ``parallelize_module`` model).
- ``query_examples()``, ``guard_examples()``, ``dtensor_examples()``,
  ``stock_examples()``: whole examples for the properties in
  ``dynamo_dist.fuzzing.properties``;
  ``processes_examples()`` (the fuzzer's own, not exported): programs
  compiled in one process and loaded in others, each in its own state;
  ``spmd_examples()`` (the fuzzer's own, not exported): spmd_types programs,
  well and ill typed, under its type checker's modes.

Every strategy checks its arguments when it is called, as hypothesis' own
do: a bad one raises ``hypothesis.errors.InvalidArgument`` naming it and
what it may be. Importing this module registers nothing with hypothesis;
``register_profiles()`` registers the settings profiles ``dynamo_dist-ci``
(derandomized, no example database: the same examples on every machine)
and ``dynamo_dist-long`` (random, for ``python -m dynamo_dist fuzz``).
"""

from __future__ import annotations

import copy
import itertools
import math
from typing import Any, Iterable

import torch
from hypothesis import HealthCheck, Phase, settings
from hypothesis import strategies as st
from hypothesis.errors import InvalidArgument

from . import programs as _programs
from . import spmd as _spmd
from . import user_programs as _users
from . import values as _values
from .specs import (
    DTENSOR_OPS,
    REDUCE_OPS,
    DYNAMIC_MODES,
    CollectivesExample,
    DTensorExample,
    DTensorSpec,
    GroupArg,
    GuardExample,
    MeshArg,
    MeshSpec,
    ProcessesExample,
    ProcessState,
    Program,
    QueryExample,
    QueryInputs,
    StockExample,
    TaggedShard,
    World,
    compilable_dtensor_ops,
    strided_inputs_compile,
)

__all__ = [
    "worlds",
    "meshes",
    "mesh_shapes",
    "placements",
    "dtensor_specs",
    "query_inputs",
    "programs",
    "dtensor_programs",
    "query_examples",
    "guard_examples",
    "dtensor_examples",
    "collectives_examples",
    "user_programs",
    "stock_examples",
    "CI_PROFILE",
    "LONG_PROFILE",
    "register_profiles",
]

CI_PROFILE = "dynamo_dist-ci"
LONG_PROFILE = "dynamo_dist-long"

_COMMON = dict(
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large, HealthCheck.filter_too_much,
                           HealthCheck.function_scoped_fixture],
    print_blob=True,
    # No "explain" phase: it re-runs a failing example many more times (each a
    # compile) only to annotate the report.
    phases=[Phase.explicit, Phase.reuse, Phase.generate, Phase.target, Phase.shrink],
)


def register_profiles() -> None:
    """Register the settings profiles with hypothesis: ``CI_PROFILE``
    (``dynamo_dist-ci``: derandomized, no example database, 40 examples)
    and ``LONG_PROFILE`` (``dynamo_dist-long``: random, 1000 examples), for
    ``settings.load_profile`` / ``settings.get_profile``. Calling it again
    registers the same profiles again."""
    settings.register_profile(CI_PROFILE, derandomize=True, database=None, max_examples=40, **_COMMON)
    settings.register_profile(LONG_PROFILE, derandomize=False, database=None, max_examples=1000, **_COMMON)


# Dim names come from these pools, so a mesh has at most three dims.
_NAME_POOLS = (("dp", "tp", "pp", "ep"), ("a", "b", "c", "d"), ("x", "y", "z", "w"), ("rep", "shard", "cp", "ep"))
MAX_MESH_NDIM = 4
_PROGRAM_KINDS = ("query", "escapes", "wild")


# -- argument checks (hypothesis.errors.InvalidArgument, as hypothesis' own) --

def _check_integer(name: str, value: Any, low: int, high: int | None = None) -> None:
    if isinstance(value, bool) or not isinstance(value, int) or value < low or (high is not None and value > high):
        allowed = f"an integer >= {low}" if high is None else f"an integer from {low} to {high}"
        raise InvalidArgument(f"{name}={value!r} must be {allowed}")


def _check_bool(name: str, value: Any, optional: bool = False) -> None:
    if not isinstance(value, bool) and not (optional and value is None):
        raise InvalidArgument(f"{name}={value!r} must be True or False{' or None' if optional else ''}")


def _check_world(name: str, value: Any, sizes_too: bool = True) -> None:
    """A ``World`` (a size >= 1 and a rank in it), or with ``sizes_too`` a world size."""
    if isinstance(value, World):
        _check_integer(f"{name}.size", value.size, 1)
        _check_integer(f"{name}.rank", value.rank, 0, value.size - 1)
    elif sizes_too and isinstance(value, int) and not isinstance(value, bool):
        _check_integer(name, value, 1)
    else:
        allowed = "a World or a world size (an integer >= 1)" if sizes_too else "a World"
        raise InvalidArgument(f"{name}={value!r} must be {allowed}")


def _check_choices(name: str, value: Any, choices: Iterable[Any]) -> None:
    """A non-empty tuple or list of items from ``choices``."""
    choices = tuple(choices)
    if not isinstance(value, (tuple, list)) or not value or not all(v in choices for v in value):
        raise InvalidArgument(f"{name}={value!r} must be a non-empty tuple or list of items from {choices}")


def worlds(sizes: tuple[int, ...] = (1, 2, 3, 4, 6, 8)) -> st.SearchStrategy[World]:
    """A world size from ``sizes`` (a non-empty tuple or list of integers
    >= 1) and a rank in it."""
    if not isinstance(sizes, (tuple, list)) or not sizes:
        raise InvalidArgument(f"sizes={sizes!r} must be a non-empty tuple or list of world sizes")
    for i, size in enumerate(sizes):
        _check_integer(f"sizes[{i}]", size, 1)
    return st.sampled_from(sizes).flatmap(
        lambda size: st.builds(World, st.just(size), st.integers(0, size - 1))
    )


def _factorizations(n: int, ndim: int) -> list[tuple[int, ...]]:
    if ndim == 1:
        return [(n,)]
    out = []
    for d in range(1, n + 1):
        if n % d == 0:
            out.extend((d, *rest) for rest in _factorizations(n // d, ndim - 1))
    return out


def mesh_shapes(world_size: int, max_ndim: int = 3) -> st.SearchStrategy[tuple[int, ...]]:
    """A shape of 1 to ``max_ndim`` dims (1 to 4) whose product is
    ``world_size`` (an integer >= 1)."""
    _check_integer("world_size", world_size, 1)
    _check_integer("max_ndim", max_ndim, 1, MAX_MESH_NDIM)
    shapes = list(itertools.chain.from_iterable(_factorizations(world_size, k) for k in range(1, max_ndim + 1)))
    return st.sampled_from(shapes)


def meshes(world: World | int, *, max_ndim: int = 3, names: bool | None = None,
           rank_maps: bool = False, subsets: bool = False) -> st.SearchStrategy[MeshSpec]:
    """A ``MeshSpec`` for ``world`` (a ``World`` or a world size): 1 to
    ``max_ndim`` dims whose shape multiplies to the world size, with
    dim names (``names=True``), without (``False``) or either (None).
    ``rank_maps``: sometimes a permuted rank map; ``subsets``: sometimes a
    mesh over only some ranks (shape multiplying to their number); ``max_ndim``
    is 1 to 4."""
    _check_world("world", world)
    _check_integer("max_ndim", max_ndim, 1, MAX_MESH_NDIM)
    _check_bool("names", names, optional=True)
    _check_bool("rank_maps", rank_maps)
    _check_bool("subsets", subsets)
    size = world.size if isinstance(world, World) else world

    @st.composite
    def build(draw: Any) -> MeshSpec:
        ranks_from = draw(st.sampled_from(["init"] + ["permuted"] * rank_maps + ["subset"] * (subsets and size > 1)))
        ranks = None
        if ranks_from == "permuted":
            ranks = tuple(draw(st.permutations(range(size))))
        elif ranks_from == "subset":
            ranks = tuple(draw(st.lists(st.integers(0, size - 1), min_size=1, max_size=size - 1, unique=True)))
        shape = draw(mesh_shapes(len(ranks) if ranks else size, max_ndim))
        named = draw(st.booleans()) if names is None else names
        dim_names = tuple(draw(st.sampled_from(_NAME_POOLS))[: len(shape)]) if named else None
        return MeshSpec(shape, dim_names, ranks)

    return build()


def placements(
    mesh_ndim: int,
    tensor_ndim: int,
    *,
    partial: bool = True,
    strided: bool = True,
    reduce_ops: tuple[str, ...] = REDUCE_OPS,
    user: bool = False,
) -> st.SearchStrategy[tuple[Any, ...]]:
    """One placement per mesh dim (``mesh_ndim`` >= 1) for a
    ``tensor_ndim``-D tensor (>= 0): ``Shard(d)`` (none for a 0-D tensor),
    ``Replicate()``, with ``partial`` ``Partial(op)`` for each op in
    ``reduce_ops`` (a non-empty tuple or list of torch's reduce ops, all
    eight by default), with ``strided`` ``_StridedShard(d, f)``, and with
    ``user=True`` a user-defined subclass (``specs.TaggedShard``)."""
    _check_integer("mesh_ndim", mesh_ndim, 1)
    _check_integer("tensor_ndim", tensor_ndim, 0)
    _check_bool("partial", partial)
    _check_bool("strided", strided)
    _check_choices("reduce_ops", reduce_ops, REDUCE_OPS)
    _check_bool("user", user)
    return _values.placements(mesh_ndim, tensor_ndim, partial=partial, strided=strided,
                              reduce_ops=reduce_ops, user=user)


def dtensor_specs(
    world: World | int = 2,
    *,
    max_tensor_ndim: int = 3,
    max_dim_size: int = 5,
    dtypes: tuple[Any, ...] | None = None,
    partial: bool = True,
    strided: bool = False,
    max_mesh_ndim: int = 2,
) -> st.SearchStrategy[DTensorSpec]:
    """A DTensor spec on a mesh of 1 to ``max_mesh_ndim`` dims (1 to 4) over
    ``world`` (a ``World`` or a world size): global shape with 1 to ``max_tensor_ndim`` dims (>= 1)
    of size 0 to ``max_dim_size`` (>= 0; so uneven shards and zero-size
    dims), placements (``Partial`` with ``partial``, ``_StridedShard`` with
    ``strided``), a dtype from ``dtypes`` (a non-empty tuple or list of real
    torch dtypes; None: float32, float64, int64), and a seed for the values.
    Partial reduce ops are those valid for the dtype (bitwise ops need
    integers)."""
    _check_world("world", world)
    _check_integer("max_tensor_ndim", max_tensor_ndim, 1)
    _check_integer("max_dim_size", max_dim_size, 0)
    if dtypes is not None and (not isinstance(dtypes, (tuple, list)) or not dtypes or not all(
            isinstance(d, torch.dtype) and not d.is_complex for d in dtypes)):
        raise InvalidArgument(f"dtypes={dtypes!r} must be None or a non-empty tuple or list of real torch dtypes")
    _check_bool("partial", partial)
    _check_bool("strided", strided)
    _check_integer("max_mesh_ndim", max_mesh_ndim, 1, MAX_MESH_NDIM)
    dtypes = dtypes or (torch.float32, torch.float64, torch.int64)

    @st.composite
    def build(draw: Any) -> DTensorSpec:
        mesh = draw(meshes(world, max_ndim=max_mesh_ndim))
        shape = tuple(draw(st.lists(st.integers(0, max_dim_size), min_size=1, max_size=max_tensor_ndim)))
        dtype = draw(st.sampled_from(dtypes))
        ops = ("sum", "avg", "min", "max", "product") if dtype.is_floating_point else (
            "sum", "min", "max", "product", "band", "bor", "bxor")
        ps = draw(placements(len(mesh.shape), len(shape), partial=partial, strided=strided, reduce_ops=ops))
        return DTensorSpec(mesh, ps, shape, dtype, draw(st.integers(0, 2**16)))

    return build()


def _mesh_args(world: World, spec: MeshSpec) -> st.SearchStrategy[MeshArg]:
    views: list[tuple[str, ...] | None] = [None]
    member = spec.ranks is None or world.rank in spec.ranks  # torch cannot slice a mesh without this rank
    if spec.names and len(spec.shape) > 1 and member:
        n = len(spec.names)
        views += [tuple(spec.names[i] for i in c)
                  for r in range(1, n) for c in itertools.combinations(range(n), r)]
    return st.builds(MeshArg, st.just(spec), st.integers(0, 1), st.sampled_from(views), st.booleans())


def query_inputs(world: World, subsets: bool = False) -> st.SearchStrategy[tuple[QueryInputs, int]]:
    """Arguments of a query program in ``world`` (a ``World``): a mesh
    argument that may be a submesh view or a copy, with a permuted rank map,
    or with ``subsets`` over only some ranks; a placements tuple; a process
    group; and the tensor rank (1 to 3) the placements are for."""
    _check_world("world", world, sizes_too=False)
    _check_bool("subsets", subsets)
    return _query_inputs(world, subsets)


@st.composite
def _query_inputs(draw: Any, world: World, subsets: bool) -> tuple[QueryInputs, int]:
    spec = draw(meshes(world, rank_maps=True, subsets=subsets))
    mesh = draw(_mesh_args(world, spec))
    tensor_ndim = draw(st.integers(1, 3))
    mesh_ndim = len(mesh.shape_and_names()[0])
    length = draw(st.sampled_from([mesh_ndim, mesh_ndim, 1, 2, 3]))
    ps = draw(placements(length, tensor_ndim, user=True))
    member = spec.ranks is None or world.rank in spec.ranks
    group = draw(st.one_of(st.just(GroupArg()), st.integers(0, mesh_ndim - 1).map(lambda d: GroupArg(mesh, d)))) \
        if member else GroupArg()
    return QueryInputs(mesh, ps, group), tensor_ndim


def programs(
    world: World,
    inputs: QueryInputs,
    tensor_ndim: int = 2,
    *,
    kind: str = "query",
    max_statements: int = 6,
) -> st.SearchStrategy[Program]:
    """A generated query program ``f(x, mesh, ps, pg)`` of 1 to
    ``max_statements`` statements (>= 1), valid for ``inputs`` (a
    ``QueryInputs``) in ``world`` (a ``World``), with placements for a
    ``tensor_ndim``-D tensor (>= 1). ``kind``: ``"query"`` (compiles with
    ``fullgraph=True``), ``"escapes"`` (mostly returns meshes, groups and
    placements) or ``"wild"`` (anything: bad input, unsupported members,
    state made inside)."""
    _check_world("world", world, sizes_too=False)
    if not isinstance(inputs, QueryInputs):
        raise InvalidArgument(f"inputs={inputs!r} must be a QueryInputs")
    _check_integer("tensor_ndim", tensor_ndim, 1)
    _check_kind(kind)
    _check_integer("max_statements", max_statements, 1)
    return _programs.query_programs(world, inputs, tensor_ndim, max_statements=max_statements,
                                    wild=kind == "wild", escapes=kind == "escapes")


def _check_kind(kind: Any) -> None:
    if kind not in _PROGRAM_KINDS:
        raise InvalidArgument(f"kind={kind!r} must be one of {_PROGRAM_KINDS}")


def dtensor_programs(spec: DTensorSpec, *, max_ops: int = 4,
                     ops: tuple[str, ...] = DTENSOR_OPS) -> st.SearchStrategy[Program]:
    """A DTensor program ``f(d, mesh)`` for a DTensor built from ``spec`` (a
    ``DTensorSpec``): 1 to ``max_ops`` statements (>= 1) of ``ops`` (a
    non-empty tuple or list of ``specs.DTENSOR_OPS``: elementwise math,
    ``redistribute`` (to ``_StridedShard`` too), branches on
    ``d.placements``, folded ``d.device_mesh`` / ``d.placements`` queries,
    ``sum``, ``matmul``, ``DTensor.from_local`` round trips,
    ``distribute_tensor``); returns ``full_tensor()``, ``to_local()`` and the
    placements."""
    if not isinstance(spec, DTensorSpec):
        raise InvalidArgument(f"spec={spec!r} must be a DTensorSpec")
    _check_integer("max_ops", max_ops, 1)
    _check_choices("ops", ops, DTENSOR_OPS)
    return _programs.dtensor_programs(spec, max_ops=max_ops, ops=ops)


def query_examples(kind: str = "query", world: World | None = None) -> st.SearchStrategy[QueryExample]:
    """A world (``world``, a ``World``, or drawn), inputs and a program of
    ``kind`` (as ``programs``) for them (``wild`` ones a third of the time
    under ``compile_on_one_rank``)."""
    _check_kind(kind)
    if world is not None:
        _check_world("world", world, sizes_too=False)
    return _query_examples(kind, world)


@st.composite
def _query_examples(draw: Any, kind: str, world: World | None) -> QueryExample:
    world = world or draw(worlds())
    inputs, tensor_ndim = draw(query_inputs(world, subsets=kind == "wild"))
    program = draw(programs(world, inputs, tensor_ndim, kind=kind))
    # Wild programs also run under compile_on_one_rank (rank answers as runtime ops).
    one_rank = kind == "wild" and draw(st.integers(0, 2)) == 0
    return QueryExample(world, inputs, program, one_rank)


@st.composite
def _vary_inputs(draw: Any, world: World, a: QueryInputs, tensor_ndim: int) -> QueryInputs:
    """Inputs B near A: each part kept, made an equal new object, or changed."""
    mesh = draw(st.sampled_from(["keep", "keep", "copy", "instance", "other"]))
    if mesh == "keep":
        mesh_b = a.mesh
    elif mesh == "copy":
        mesh_b = MeshArg(a.mesh.spec, a.mesh.instance, a.mesh.view, not a.mesh.copy)
    elif mesh == "instance":
        mesh_b = MeshArg(a.mesh.spec, 1 - a.mesh.instance, a.mesh.view, a.mesh.copy)
    else:
        mesh_b = draw(_mesh_args(world, draw(meshes(world, rank_maps=True))))
    ps_b = a.placements
    change = draw(st.sampled_from(["keep", "keep", "one", "all", "equal", "equal"]))
    if change == "equal":
        # New objects, equal by ==; a user placement's own state may differ.
        ps_b = tuple(TaggedShard(p.dim, draw(st.integers(0, 2))) if isinstance(p, TaggedShard)
                     else copy.copy(p) for p in ps_b)
    elif change == "one" and ps_b:
        i = draw(st.integers(0, len(ps_b) - 1))
        ps_b = ps_b[:i] + draw(placements(1, tensor_ndim, user=True)) + ps_b[i + 1:]
    elif change == "all":
        ps_b = draw(placements(draw(st.integers(1, 3)), tensor_ndim, user=True))
    mesh_ndim = len(mesh_b.shape_and_names()[0])
    group = draw(st.sampled_from(["keep", "keep", "world", "dim"]))
    if group == "keep" and (a.group.mesh is None or a.group.dim < mesh_ndim):
        group_b = a.group if a.group.mesh is None else GroupArg(mesh_b if a.group.mesh == a.mesh else a.group.mesh,
                                                                a.group.dim)
    elif group == "world":
        group_b = GroupArg()
    else:
        group_b = GroupArg(mesh_b, draw(st.integers(0, mesh_ndim - 1)))
    return QueryInputs(mesh_b, ps_b, group_b, a.x_len)


@st.composite
def guard_examples(draw: Any) -> GuardExample:
    """A program compiled for inputs A and called with inputs B: the same
    inputs, equal new objects, changed parts, or the same specs after the
    world was re-initialised (same rank, another rank, another size)."""
    world_a = draw(worlds())
    inputs_a, tensor_ndim = draw(query_inputs(world_a))
    program = draw(programs(world_a, inputs_a, tensor_ndim, kind=draw(st.sampled_from(["query", "escapes"]))))
    scenario = draw(st.sampled_from(["same", "vary", "vary", "vary", "new_world", "other_rank", "other_world"]))
    if scenario == "same":
        return GuardExample(world_a, inputs_a, world_a, inputs_a, program)
    if scenario == "vary":
        return GuardExample(world_a, inputs_a, world_a, draw(_vary_inputs(world_a, inputs_a, tensor_ndim)), program)
    if scenario == "new_world":
        return GuardExample(world_a, inputs_a, world_a, inputs_a, program, same_world=False)
    if scenario == "other_rank":
        world_b = World(world_a.size, draw(st.integers(0, world_a.size - 1)))
        return GuardExample(world_a, inputs_a, world_b, inputs_a, program, same_world=False)
    world_b = draw(worlds())
    inputs_b, _ = draw(query_inputs(world_b))
    return GuardExample(world_a, inputs_a, world_b, inputs_b, program, same_world=False)


def dtensor_examples(world: World | int = 2, *, ops: tuple[str, ...] | None = None,
                     strided: bool | None = None, backward: bool | None = None,
                     max_mesh_ndim: int = MAX_MESH_NDIM) -> st.SearchStrategy[DTensorExample]:
    """A DTensor spec on a mesh of 1 to ``max_mesh_ndim`` dims over ``world``
    (a ``World`` or a world size; 2 ranks by default, so a mesh of 3 or 4
    dims has dims of size 1) and a DTensor program of ``ops`` for it, with
    ``_StridedShard`` inputs if ``strided``, and the gradient checked too if
    ``backward`` (floating dtypes only). By default (None), only what this
    release is expected to compile (``specs.compilable_dtensor_ops()``,
    ``specs.strided_inputs_compile()``), and ``backward`` for half the
    floating examples."""
    _check_world("world", world)
    if ops is not None:
        _check_choices("ops", ops, DTENSOR_OPS)
    _check_bool("strided", strided, optional=True)
    _check_bool("backward", backward, optional=True)
    _check_integer("max_mesh_ndim", max_mesh_ndim, 1, MAX_MESH_NDIM)
    return _dtensor_examples(world, ops, strided, backward, max_mesh_ndim)


@st.composite
def _dtensor_examples(draw: Any, world: World | int, ops: tuple[str, ...] | None,
                      strided: bool | None, backward: bool | None, max_mesh_ndim: int) -> DTensorExample:
    spec = draw(_dtensor_spec(world, strided, max_mesh_ndim))
    grad = spec.dtype.is_floating_point and (draw(st.booleans()) if backward is None else backward)
    # With a gradient the program returns no local tensor: AOTAutograd refuses
    # outputs that alias one another (full_tensor() and to_local() of a
    # replicated DTensor) when an input is a subclass that needs grad.
    returns = ("d.full_tensor(), d.placements",) if grad else _programs.DTENSOR_RETURNS
    return DTensorExample(spec, draw(_spec_program(spec, ops, returns)), grad)


def _dtensor_spec(world: World | int, strided: bool | None, max_mesh_ndim: int) -> st.SearchStrategy[DTensorSpec]:
    return dtensor_specs(world, strided=strided_inputs_compile() if strided is None else strided,
                         max_mesh_ndim=max_mesh_ndim)


def _spec_program(spec: DTensorSpec, ops: tuple[str, ...] | None,
                  returns: tuple[str, ...] = _programs.DTENSOR_RETURNS) -> st.SearchStrategy[Program]:
    return _programs.dtensor_programs(spec, ops=compilable_dtensor_ops() if ops is None else ops, returns=returns)


# The worlds of the collectives property: every mesh of 1 to 4 dims over 8 or 16 ranks.
COLLECTIVES_WORLD_SIZES = (8, 16)


def collectives_examples(sizes: tuple[int, ...] = COLLECTIVES_WORLD_SIZES, *, ops: tuple[str, ...] | None = None,
                         strided: bool | None = None,
                         max_mesh_ndim: int = MAX_MESH_NDIM) -> st.SearchStrategy[CollectivesExample]:
    """A world from ``sizes`` seen from one of its ranks, a DTensor spec on a
    mesh of 1 to ``max_mesh_ndim`` dims over the whole world and a DTensor
    program of ``ops`` for it (defaults as ``dtensor_examples``, less
    ``from_local_checked``: ``run_check=True`` gathers Python objects, which
    a recording world cannot answer)."""
    worlds(sizes)  # checks ``sizes``
    if ops is not None:
        _check_choices("ops", ops, DTENSOR_OPS)
    else:
        ops = tuple(op for op in compilable_dtensor_ops() if op != "from_local_checked")
    _check_bool("strided", strided, optional=True)
    _check_integer("max_mesh_ndim", max_mesh_ndim, 1, MAX_MESH_NDIM)
    return _collectives_examples(sizes, ops, strided, max_mesh_ndim)


@st.composite
def _collectives_examples(draw: Any, sizes: tuple[int, ...], ops: tuple[str, ...], strided: bool | None,
                          max_mesh_ndim: int) -> CollectivesExample:
    world = draw(worlds(sizes))
    spec = draw(_dtensor_spec(world, strided, max_mesh_ndim))
    return CollectivesExample(world, spec, draw(_spec_program(spec, ops)))


# ---------------------------------------------------------------------------
# The processes property's examples (``properties.check_processes``).

# Programs that inductor compiles and that are cheap: small local tensors,
# redistributes between placement lists (from Partial of these ops too), an
# elementwise op, branches and folded queries around them.
PROCESS_MESH_SIZES = (4, 8)
PROCESS_WORLD_SIZES = (4, 8)
PROCESS_REDUCE_OPS = ("sum", "avg", "max", "min")
PROCESS_DTENSOR_OPS = ("elementwise", "redistribute", "redistribute", "branch", "query", "sum")
PROCESS_RETURNS = ("d.full_tensor()", "d.to_local()", "d.full_tensor(), d.to_local()")
PROCESS_LOCAL_SHAPE = (4, 8)


def _flattenable(mesh: MeshSpec) -> list[tuple[str, ...]]:
    """The mesh's dim-name tuples of two dims or more, in a fixed order."""
    names = mesh.names or ()
    return [c for r in range(2, len(names) + 1) for c in itertools.combinations(names, r)]


# The parts of a process's state a loading process may change; flattening
# and the planner's switches twice as often: they change the plan a program
# compiles to (which collectives, over which flattened group) but no name.
PROCESS_PARTS = ("world", "groups_first", "mesh_first", "flattened", "flattened", "planner", "planner",
                 "one_rank")


@st.composite
def _process_state(draw: Any, mesh: MeshSpec, base: ProcessState | None = None) -> ProcessState:
    """A process's state around ``mesh``: every part drawn (``base`` None, the
    compiling process), or ``base`` with a random few of its parts drawn
    again, each to another value (a loading process; ``artifacts`` drawn too)."""
    # B changes a few parts (none, one, sometimes more: often A's state but for one
    # part, where a wrong cache key lets B load A's graphs); shrinks to none.
    changed = set(draw(st.permutations(PROCESS_PARTS))[:draw(st.sampled_from((0, 1, 1, 1, 1, 2, 3)))]) \
        if base is not None else set()

    def part(name: str, keep: Any, fresh: st.SearchStrategy[Any], fits: bool = True, other: bool = True) -> Any:
        """``keep`` (A's), or a fresh value: another one where there is (``other``)."""
        if base is None or not fits:
            return draw(fresh)
        if name not in changed:
            return keep
        return draw(fresh.filter(lambda value: value != keep)) if other else keep

    size_of = math.prod(mesh.shape)
    world = part("world", base and base.world, worlds(tuple(n for n in PROCESS_WORLD_SIZES if n >= size_of)))
    groups = st.lists(st.lists(st.integers(0, world.size - 1), min_size=1, max_size=world.size, unique=True)
                      .map(lambda ranks: tuple(sorted(ranks))), max_size=2).map(tuple)
    groups_first = part("groups_first", base and base.groups_first, groups,
                        fits=base is not None and all(r < world.size for g in base.groups_first for r in g))
    mesh_first = part("mesh_first", base and base.mesh_first, st.none() | mesh_shapes(world.size, max_ndim=2),
                      fits=base is not None and (base.mesh_first is None or math.prod(base.mesh_first) == world.size))
    combos = _flattenable(mesh)
    flat = st.lists(st.sampled_from(combos), unique=True).map(lambda c: tuple(sorted(c, key=combos.index))) \
        if combos else st.just(())
    flattened = part("flattened", base and base.flattened, flat, other=bool(combos))
    # A forced min-cost plan costs ~20 s a compile (3-dim meshes): drawn a quarter of the time.
    planner = part("planner", base and (base.force_min_cost, base.no_transform_optimization),
                   st.tuples(st.sampled_from([None, False, None, True]), st.booleans()))
    one_rank = part("one_rank", base and base.one_rank, st.booleans())
    artifacts = base is not None and draw(st.integers(0, 2)) == 2
    return ProcessState(world, groups_first, mesh_first, flattened, *planner, one_rank, artifacts)


@st.composite
def processes_examples(draw: Any, max_programs: int = 3, max_loads: int = 2) -> ProcessesExample:
    """1 to ``max_programs`` DTensor programs on a mesh of 1 to 3 dims (4 or
    8 ranks, with or without dim names) for a ``DTensor.from_local`` input
    with Shard, Replicate and Partial (sum, avg, max, min) placements;
    compiled in a process in a drawn state, loaded by 1 to ``max_loads``
    processes in A's state with parts perturbed (see ``ProcessState``);
    half of the examples under torch's precompile (``caching_precompile``
    in every process: B runs A's saved bytecode where its guards pass)."""
    # Two times in three a mesh of named dims of 2 ranks or more: flattening them means something.
    size = draw(st.sampled_from(PROCESS_MESH_SIZES))
    named = meshes(size, names=True).filter(lambda m: len(m.shape) > 1 and 1 not in m.shape)
    mesh = draw(st.one_of(meshes(size), named, named))
    reduce_op = draw(st.sampled_from(PROCESS_REDUCE_OPS))  # DTensor refuses mixed Partial ops
    ps = draw(placements(len(mesh.shape), len(PROCESS_LOCAL_SHAPE), strided=False, reduce_ops=(reduce_op,)))
    tensor = DTensorSpec(mesh, ps, PROCESS_LOCAL_SHAPE)
    program = _programs.dtensor_programs(tensor, max_ops=2, ops=PROCESS_DTENSOR_OPS, returns=PROCESS_RETURNS)
    programs = tuple(draw(st.lists(program, min_size=1, max_size=max_programs)))
    compile_state = draw(_process_state(mesh))
    loads = tuple(draw(st.lists(_process_state(mesh, compile_state), min_size=1, max_size=max_loads)))
    return ProcessesExample(tensor, programs, compile_state, loads, precompile=draw(st.booleans()))


# ---------------------------------------------------------------------------
# The stock property's examples: programs users write (``user_programs``).


def _check_names(name: str, value: Any, table: Iterable[str]) -> None:
    """A non-empty tuple or list of names of ``table``."""
    _check_choices(name, value, tuple(table))


def user_programs(mesh: MeshSpec, ndim: int, *, max_statements: int = 5,
                  statements: tuple[str, ...] = _users.STATEMENTS,
                  dist_calls: tuple[str, ...] = tuple(_users.DIST_CALLS),
                  model: str | None = None) -> st.SearchStrategy[Program]:
    """A program users write, ``f(x, mesh)`` for an ``ndim``-D plain local
    tensor ``x`` (0 to 3 dims) on ``mesh`` (one of the 2-rank meshes of
    ``user_programs.MESHES``): 1 to ``max_statements`` (>= 1) of
    ``statements`` (a non-empty tuple or list of ``user_programs.STATEMENTS``:
    math, ``DTensor.from_local`` with every placement kind and ``run_check``
    both ways, ``distribute_tensor``, redistributes (``async_op`` too),
    ``to_local``, ``full_tensor``, sums, transposes, folded queries,
    ``torch._dynamo.graph_break()``, ``implicit_replication()`` and
    ``loss_parallel()`` regions, torch.distributed calls), the calls drawn from
    ``dist_calls`` (a non-empty tuple or list of ``user_programs.DIST_CALLS``'
    names). With ``model`` (a name of ``user_programs.MODELS``, for an input
    whose last dim is ``user_programs.HIDDEN`` and ``ndim`` among the
    recipe's), ``f(x, mesh, model)`` calls a ``parallelize_module`` model
    first, and the source defines ``model_of(mesh)``."""
    if not isinstance(mesh, MeshSpec) or mesh not in _users.MESHES:
        raise InvalidArgument(f"mesh={mesh!r} must be one of {_users.MESHES}")
    _check_integer("ndim", ndim, 0, 3)
    _check_integer("max_statements", max_statements, 1)
    _check_names("statements", statements, _users.STATEMENTS)
    _check_names("dist_calls", dist_calls, _users.DIST_CALLS)
    if model is not None:
        if model not in _users.MODELS:
            raise InvalidArgument(f"model={model!r} must be None or one of {tuple(_users.MODELS)}")
        if ndim not in _users.MODELS[model][1]:
            raise InvalidArgument(f"ndim={ndim!r} must be one of {_users.MODELS[model][1]} for model={model!r}")
    return _users.user_programs(mesh, ndim, max_statements=max_statements, statements=tuple(statements),
                                dist_calls=tuple(dist_calls), model=model)


def stock_examples(*, max_statements: int = 5, max_calls: int = 3, models: bool = True,
                   statements: tuple[str, ...] = _users.STATEMENTS,
                   dist_calls: tuple[str, ...] = tuple(_users.DIST_CALLS),
                   dynamic: tuple[str, ...] = DYNAMIC_MODES) -> st.SearchStrategy[StockExample]:
    """An example of the ``stock`` property: a 2-rank mesh, a program of
    ``user_programs(...)`` (``max_statements``, ``statements``, ``dist_calls``
    as there; with ``models``, a third of the programs call a
    ``parallelize_module`` model), a local input of 1 to 3 dims of sizes 2 to
    5, called 1 to ``max_calls`` times (1 to 4) with one dim's size changing
    (2 to 8), compiled as ``dynamic`` says (a non-empty tuple or list of
    ``specs.DYNAMIC_MODES``), the input requiring grad three times in four."""
    _check_integer("max_statements", max_statements, 1)
    _check_integer("max_calls", max_calls, 1, 4)
    _check_bool("models", models)
    _check_names("statements", statements, _users.STATEMENTS)
    _check_names("dist_calls", dist_calls, _users.DIST_CALLS)
    _check_names("dynamic", dynamic, DYNAMIC_MODES)
    return _stock_examples(max_statements, max_calls, models, tuple(statements), tuple(dist_calls), tuple(dynamic))


@st.composite
def _stock_examples(draw: Any, max_statements: int, max_calls: int, models: bool, statements: tuple[str, ...],
                    dist_calls: tuple[str, ...], dynamic: tuple[str, ...]) -> StockExample:
    mesh = draw(st.sampled_from(_users.MESHES))
    model = draw(st.sampled_from(list(_users.MODELS))) if models and draw(st.integers(0, 2)) == 0 else None
    if model is None:
        ndim = draw(st.integers(1, 3))
        shape = tuple(draw(st.lists(st.integers(2, 5), min_size=ndim, max_size=ndim)))
        vary = draw(st.integers(0, ndim - 1))
    else:
        ndim = draw(st.sampled_from(_users.MODELS[model][1]))
        shape = (*draw(st.lists(st.integers(2, 5), min_size=ndim - 1, max_size=ndim - 1)), _users.HIDDEN)
        vary = draw(st.integers(0, ndim - 2))  # never the hidden dim
    lengths = tuple(draw(st.lists(st.integers(2, 8), max_size=max_calls - 1)))
    requires_grad = draw(st.integers(0, 3)) > 0
    seed = draw(st.integers(0, 2**16))
    program = draw(_users.user_programs(mesh, ndim, max_statements=max_statements, statements=statements,
                                        dist_calls=dist_calls, model=model, seed=seed, grad=requires_grad))
    return StockExample(mesh, program, shape, lengths, vary, draw(st.sampled_from(dynamic)), requires_grad, seed)


def spmd_examples(*, checkers: tuple[str, ...] = _spmd.CHECKERS,
                  max_statements: int = 5) -> st.SearchStrategy[_spmd.SpmdExample]:
    """An example of the ``spmd`` property: an spmd_types program
    (``spmd.spmd_programs``, 1 to ``max_statements`` statements) under its
    type checker in one of ``checkers`` (a non-empty tuple or list of
    ``spmd.CHECKERS``), with or without its backward."""
    _check_names("checkers", checkers, _spmd.CHECKERS)
    _check_integer("max_statements", max_statements, 1)
    return _spmd.spmd_examples(tuple(checkers), max_statements)
