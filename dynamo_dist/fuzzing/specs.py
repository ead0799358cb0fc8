"""Plain-data descriptions of fuzzing inputs, and how to build them in a world.

Hypothesis strategies (``dynamo_dist.testing.strategies``) draw these specs,
not live objects: a spec is world-independent, has a ``repr``-like source form
(``code_of``) for reproducer scripts, and is turned into a real mesh, group
or tensor only inside a world (``WorldObjects``).
"""

from __future__ import annotations

import contextlib
import copy
import dataclasses
import itertools
import sys
import types
from dataclasses import dataclass
from typing import Any, Callable, Iterator

import torch
import torch.distributed as dist
from torch.distributed.device_mesh import DeviceMesh
from torch.distributed.tensor.placement_types import Placement
from torch.distributed.tensor.placement_types import Shard as _Shard

from .. import _compat as C
from ..diagnostics.compare import mesh_key  # noqa: F401  (re-exported)
from ..worlds import fake_world, make_mesh

REDUCE_OPS: tuple[str, ...] = ("sum", "avg", "min", "max", "product", "band", "bor", "bxor")
# The statements of generated DTensor programs (``programs.dtensor_programs``).
DTENSOR_OPS: tuple[str, ...] = (
    "elementwise", "redistribute", "redistribute_strided", "view", "branch", "query", "sum", "matmul",
    "from_local", "from_local_checked", "distribute",
)


@dataclass(frozen=True)
class World:
    """A fake world of ``size`` ranks, seen from ``rank``."""

    size: int
    rank: int = 0


@dataclass(frozen=True)
class MeshSpec:
    """A device mesh: ``make_mesh(shape, names)`` on the current world, or,
    with ``ranks`` (row-major), ``DeviceMesh("cpu", ranks)``: a permuted rank
    map, or a mesh over some of the ranks (this rank maybe not among them)."""

    shape: tuple[int, ...]
    names: tuple[str, ...] | None = None
    ranks: tuple[int, ...] | None = None

    @property
    def ndim(self) -> int:
        return len(self.shape)


@dataclass(frozen=True)
class MeshArg:
    """How a mesh argument is obtained in a world.

    ``instance`` picks the k-th mesh built from ``spec`` in this world (each
    ``init_device_mesh`` call makes new process groups, except where torch
    reuses the default group); ``view`` slices a submesh from it, freshly on
    every call (as training loops do every step); ``copy`` passes
    ``copy.copy`` of it. A view or a copy is an equal mesh that is a new
    object.
    """

    spec: MeshSpec
    instance: int = 0
    view: tuple[str, ...] | None = None
    copy: bool = False

    def shape_and_names(self) -> tuple[tuple[int, ...], tuple[str, ...] | None]:
        """Shape and dim names of the mesh this argument yields."""
        if self.view is None:
            return self.spec.shape, self.spec.names
        names = self.spec.names or ()
        return tuple(self.spec.shape[names.index(n)] for n in self.view), self.view


@dataclass(frozen=True)
class GroupArg:
    """A process-group argument: the default (WORLD) group when ``mesh`` is
    None, else ``mesh.get_group(dim)``."""

    mesh: MeshArg | None = None
    dim: int = 0

    def size(self, world: World) -> int:
        if self.mesh is None:
            return world.size
        return self.mesh.shape_and_names()[0][self.dim]


@dataclass(frozen=True)
class QueryInputs:
    """Arguments of a generated query program ``f(x, mesh, ps, pg)``."""

    mesh: MeshArg
    placements: tuple[Any, ...]
    group: GroupArg
    x_len: int = 2


@dataclass(frozen=True)
class DTensorSpec:
    """A DTensor: ``distribute_tensor`` of a ``shape``/``dtype`` tensor on
    ``mesh`` with ``placements`` (``Partial`` ones are made with
    ``DTensor.from_local`` instead, each rank holding its own part)."""

    mesh: MeshSpec
    placements: tuple[Any, ...]
    shape: tuple[int, ...]
    dtype: torch.dtype = torch.float32
    seed: int = 0


# ---------------------------------------------------------------------------
# Programs and examples.

# The names generated programs (and reproducer scripts) can use.
PRELUDE = """\
import torch
import torch.distributed as dist
import torch.distributed._functional_collectives as funcol
from torch.distributed.device_mesh import DeviceMesh, init_device_mesh
from torch.distributed.tensor import DTensor, distribute_tensor
from torch.distributed.tensor.placement_types import Partial, Placement, Replicate, Shard, _StridedShard
from torch.distributed.tensor.experimental import implicit_replication
from torch.distributed.tensor.parallel import (ColwiseParallel, PrepareModuleInput, RowwiseParallel,
                                               SequenceParallel, loss_parallel, parallelize_module)
"""


@dataclass(frozen=True)
class Program:
    """A generated function: its source, and for each source line (1-based)
    the inputs it reads: ``"mesh"``, ``"pg"``, ``"world"`` (the default
    group), ``"ps"`` (the placements tuple), ``"ps[i]"`` (one of its
    placements, read for its value), ``"ps[*]"`` (all of them), ``"ps[is]"``
    (which of them are the same object)."""

    source: str
    line_touches: tuple[tuple[int, frozenset[str]], ...] = ()
    name: str = "f"

    def function(self, module: str | None = None, line: int = 1, file: str | None = None) -> Callable[..., Any]:
        """The function, compiled from ``source`` with the ``PRELUDE`` names,
        starting on ``line``; defined in a fresh module of that name in
        ``sys.modules`` where ``module`` is given (what torch's precompile
        needs of a function it saves: a module to find it and its saved
        globals by, in the process that loads it), else in a plain namespace.
        ``file``: a path written with the function's text, its code's file
        (torch compiles a function with no source file through a shared
        wrapper frame)."""
        if module is None:
            namespace: dict[str, Any] = {}
        else:
            made = types.ModuleType(module)
            sys.modules[module] = made
            namespace = made.__dict__
        exec(compile(PRELUDE, "<prelude>", "exec"), namespace)
        text = "\n" * (line - 1) + self.source
        if file is not None:
            with open(file, "w") as out:
                out.write(text)
        exec(compile(text, file or f"<fuzz program {self.name}>", "exec"), namespace)
        return namespace[self.name]

    def touches(self, fn: Callable[..., Any], *args: Any) -> Touches:
        """Run ``fn(*args)`` eagerly: what the executed lines read, and which
        items of the placements argument ``ps`` (``args[2]``) the run read
        (``fn`` must be this program's function). Raises what ``fn`` raises."""
        executed: set[int] = set()
        code = fn.__code__

        def tracer(frame: Any, event: str, arg: Any) -> Any:
            if frame.f_code is code:
                if event == "line":
                    executed.add(frame.f_lineno)
                return tracer
            return None

        args = list(args)
        recorded = ReadRecordingTuple(args[2])
        args[2] = recorded
        old = sys.gettrace()
        sys.settrace(tracer)
        try:
            fn(*args)
        finally:
            sys.settrace(old)
        table = dict(self.line_touches)
        lines = frozenset(itertools.chain.from_iterable(table.get(n, ()) for n in executed))
        return Touches(lines, frozenset(recorded.read))


@dataclass(frozen=True)
class Touches:
    """What a run of a program read: ``lines``, the inputs of every line it
    executed (``Program.line_touches``: a line that iterates ``ps`` touches
    every item), and ``items``, the positions of the items of ``ps`` it did
    read (``any(p.is_partial() for p in ps)`` stops at the first partial)."""

    lines: frozenset[str]
    items: frozenset[int]


class ReadRecordingTuple(tuple):
    """A tuple that records which of its items the code running on it reads:
    by index, by iteration (as far as it goes), by search (``in``, ``count``,
    ``index``) and whole (``hash``, comparisons, ``repr``, concatenation)."""

    read: set[int]

    def __new__(cls, items: Any) -> ReadRecordingTuple:
        made = super().__new__(cls, items)
        made.read = set()
        return made

    def _whole(self) -> tuple:
        self.read.update(range(len(self)))
        return tuple(tuple.__iter__(self))

    def __getitem__(self, i: Any) -> Any:
        if isinstance(i, slice):
            self.read.update(range(len(self))[i])
        elif -len(self) <= i < len(self):
            self.read.add(i % len(self))
        return tuple.__getitem__(self, i)

    def __iter__(self) -> Iterator[Any]:
        for i in range(len(self)):
            self.read.add(i)
            yield tuple.__getitem__(self, i)

    def __reversed__(self) -> Iterator[Any]:
        for i in reversed(range(len(self))):
            self.read.add(i)
            yield tuple.__getitem__(self, i)

    def __contains__(self, value: Any) -> bool:
        return any(p is value or p == value for p in self)

    def count(self, value: Any) -> int:
        return sum(1 for p in self if p is value or p == value)

    def index(self, value: Any, *bounds: Any) -> int:
        return self._whole().index(value, *bounds)

    def __hash__(self) -> int:
        return hash(self._whole())

    def __eq__(self, other: Any) -> bool:
        return self._whole() == other

    def __ne__(self, other: Any) -> bool:
        return self._whole() != other

    def __lt__(self, other: Any) -> bool:
        return self._whole() < other

    def __le__(self, other: Any) -> bool:
        return self._whole() <= other

    def __gt__(self, other: Any) -> bool:
        return self._whole() > other

    def __ge__(self, other: Any) -> bool:
        return self._whole() >= other

    def __add__(self, other: Any) -> tuple:
        return self._whole() + other

    def __mul__(self, n: Any) -> tuple:
        return self._whole() * n

    def __repr__(self) -> str:
        return repr(self._whole())

    __str__ = __repr__


@dataclass(frozen=True)
class QueryExample:
    """A query program and the inputs it is called with, in one fake world;
    ``one_rank``: compiled under ``compile_on_one_rank`` (``torch.compiler.config`` on 2.14+)."""

    world: World
    inputs: QueryInputs
    program: Program
    one_rank: bool = False


@dataclass(frozen=True)
class GuardExample:
    """Compile ``program`` with inputs A, then call it with inputs B (in the
    same world, or after the world was re-initialised as ``world_b``)."""

    world_a: World
    inputs_a: QueryInputs
    world_b: World
    inputs_b: QueryInputs
    program: Program
    same_world: bool = True


@dataclass(frozen=True)
class DTensorExample:
    """A DTensor program called with a DTensor built from ``spec``, run on
    every rank of a real gloo world; with ``backward`` (floating dtypes), the
    gradient of a weighted sum of the program's full tensor with respect to
    the input DTensor is compared too."""

    spec: DTensorSpec
    program: Program
    backward: bool = False


@dataclass(frozen=True)
class CollectivesExample:
    """A DTensor program called with a DTensor built from ``spec`` (its mesh
    over the whole of ``world``), in a recording world seen from
    ``world.rank``: the collectives each side runs and the layouts it returns."""

    world: World
    spec: DTensorSpec
    program: Program


@dataclass(frozen=True)
class ProcessState:
    """The state of one process of the ``processes`` property, made before the
    programs compile or load, in this order: a fake world of ``world``;
    ``groups_first`` (``dist.new_group(ranks)`` each, so later group names
    shift); an unrelated mesh of shape ``mesh_first``; the programs' mesh;
    the dim-name tuples in ``flattened`` flattened (in that order) into
    meshes named ``"_".join(dims)``; the redistribute planner's switches
    (``force_min_cost``: ``_FORCE_MIN_COST_REDISTRIBUTION_PLAN``,
    ``no_transform_optimization``: ``_DISABLE_REDISTRIBUTE_TRANSFORM_OPTIMIZATION``);
    ``compile_on_one_rank``. ``artifacts`` (a loading process only): the
    compiling process's ``torch.compiler.save_cache_artifacts()`` are loaded
    into an empty cache first, instead of sharing its cache directory."""

    world: World
    groups_first: tuple[tuple[int, ...], ...] = ()
    mesh_first: tuple[int, ...] | None = None
    flattened: tuple[tuple[str, ...], ...] = ()
    force_min_cost: bool | None = None
    no_transform_optimization: bool = False
    one_rank: bool = False
    artifacts: bool = False


@dataclass(frozen=True)
class ProcessesExample:
    """DTensor programs ``f(d, mesh)`` compiled (inductor) in a fresh process
    in state ``compile``, then loaded in a fresh process per state of
    ``loads``. ``d`` is ``DTensor.from_local`` of a ``tensor.shape`` local
    tensor on each rank, on the mesh ``tensor.mesh`` with
    ``tensor.placements``. ``precompile``: torch's precompile
    (``caching_precompile``) is on in every process, so A saves Dynamo's
    entries (bytecode and guards) and a loading process whose rebuilt guards
    pass runs A's code without tracing."""

    tensor: DTensorSpec
    programs: tuple[Program, ...]
    compile: ProcessState
    loads: tuple[ProcessState, ...]
    precompile: bool = False


@dataclass(frozen=True)
class StockExample:
    """A program users write (``user_programs``: ``f(x, mesh)``, or
    ``f(x, mesh, model)`` with the ``model_of(mesh)`` its source defines),
    run eagerly, compiled with the plugin and compiled with stock torch
    (``aot_eager``, ``fullgraph=False``) on every rank of a real 2-rank gloo
    world. ``x`` is a plain local tensor of ``shape`` on the first call (its
    values from ``seed`` and the rank); each of ``lengths`` is one more call
    with dim ``vary`` of that size. ``dynamic``: how changing sizes compile
    (``"auto"``: torch's automatic dynamic shapes; ``"mark_dynamic"``: dim
    ``vary`` marked dynamic on every call; ``"dynamic=True"``: compiled with
    it). ``requires_grad``: ``x`` requires grad, and the gradients (of ``x``
    and the model's parameters) are compared too."""

    mesh: MeshSpec
    program: Program
    shape: tuple[int, ...]
    lengths: tuple[int, ...] = ()
    vary: int = 0
    dynamic: str = "auto"
    requires_grad: bool = True
    seed: int = 0

    def call_shapes(self) -> list[tuple[int, ...]]:
        """The input's shape on each call."""
        return [self.shape] + [self.shape[:self.vary] + (n,) + self.shape[self.vary + 1:] for n in self.lengths]


# The ways changing sizes compile (``StockExample.dynamic``).
DYNAMIC_MODES: tuple[str, ...] = ("auto", "mark_dynamic", "dynamic=True")


# ---------------------------------------------------------------------------
# A user-defined placement, as users write them: a Shard subclass with its own
# state and methods, inheriting Shard's ``__eq__`` (which compares ``dim`` only).


class TaggedShard(_Shard):
    """``Shard(dim)`` with a ``tag`` its inherited ``__eq__`` ignores."""

    def __init__(self, dim: int, tag: int = 0) -> None:
        super().__init__(dim)
        self.tag = tag

    def weight(self) -> int:
        return self.tag * 10 + self.dim


# ---------------------------------------------------------------------------
# Source form of specs (for reproducer scripts).


def placement_code(p: Any) -> str:
    """Source that rebuilds placement ``p`` (``Shard(1)``, ``Partial('max')``)."""
    name = type(p).__name__
    if name == "Shard":
        return f"Shard({p.dim})"
    if name == "_StridedShard":
        return f"_StridedShard({p.dim}, split_factor={p.split_factor})"
    if name == "Partial":
        return f"Partial({p.reduce_op!r})"
    if name == "Replicate":
        return "Replicate()"
    if isinstance(p, TaggedShard):
        return f"TaggedShard({p.dim}, tag={p.tag})"
    raise TypeError(f"no source form for placement {p!r}")


def code_of(value: Any, names: dict[int, str] | None = None) -> str:
    """Python source that evaluates to ``value`` (specs, placements, dtypes,
    tuples and literals), given the names a reproducer script imports.
    ``names`` maps ``id(obj)`` to a variable that holds ``obj``."""

    names = names or {}
    if id(value) in names:
        return names[id(value)]
    if isinstance(value, Placement):
        return placement_code(value)
    if isinstance(value, torch.dtype):
        return str(value)
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        fields = [
            f"{f.name}={code_of(getattr(value, f.name), names)}"
            for f in dataclasses.fields(value)
            if getattr(value, f.name) != f.default
        ]
        return f"{type(value).__name__}({', '.join(fields)})"
    if isinstance(value, tuple):
        items = ", ".join(code_of(v, names) for v in value)
        return f"({items},)" if len(value) == 1 else f"({items})"
    if isinstance(value, list):
        return f"[{', '.join(code_of(v, names) for v in value)}]"
    if isinstance(value, frozenset):
        return f"frozenset({sorted(value)!r})"
    return repr(value)


# ---------------------------------------------------------------------------
# Building specs in a world.

_generation = itertools.count(1)


class WorldObjects:
    """The live objects of one world, built from specs on demand.

    Root meshes are cached per ``(spec, instance)`` so the same argument
    gives the same object; ``generation`` tells worlds apart (objects of two
    worlds are never the same).
    """

    def __init__(self, world: World) -> None:
        self.world = world
        self.generation = next(_generation)
        self._roots: dict[tuple[MeshSpec, int], Any] = {}

    def root(self, spec: MeshSpec, instance: int = 0) -> Any:

        for k in range(instance + 1):
            if (spec, k) in self._roots:
                continue
            if spec.ranks is None:
                self._roots[(spec, k)] = make_mesh(spec.shape, spec.names)
            else:

                self._roots[(spec, k)] = DeviceMesh(
                    "cpu", torch.tensor(spec.ranks).view(spec.shape), mesh_dim_names=spec.names)
        return self._roots[(spec, instance)]

    def mesh(self, arg: MeshArg) -> Any:
        mesh = self.root(arg.spec, arg.instance)
        if arg.view is not None:
            mesh = mesh[arg.view[0] if len(arg.view) == 1 else arg.view]
        return copy.copy(mesh) if arg.copy else mesh

    def group(self, arg: GroupArg) -> Any:

        if arg.mesh is None:
            return dist.group.WORLD
        return self.mesh(arg.mesh).get_group(arg.dim)

    def query_args(self, inputs: QueryInputs) -> tuple:
        """``(x, mesh, ps, pg)`` for a query program."""
        x = torch.arange(inputs.x_len, dtype=torch.float32)
        return x, self.mesh(inputs.mesh), tuple(inputs.placements), self.group(inputs.group)

    # -- what a compiled graph may depend on (see properties.check_guards) --
    def group_key(self, group: Any) -> tuple:
        return ("group", self.generation, id(group))

    def world_key(self) -> tuple:

        return ("world", self.generation, id(dist.group.WORLD))


def placement_key(p: Any) -> tuple:
    """A placement's value: exact type and defining fields."""
    return (type(p).__qualname__, getattr(p, "dim", None), getattr(p, "split_factor", None),
            getattr(p, "reduce_op", None), tuple(sorted(getattr(p, "__dict__", {}).items())))


@contextlib.contextmanager
def world_objects(world: World) -> Iterator[WorldObjects]:
    """``fake_world(world)`` yielding a ``WorldObjects`` builder.

    ``sys.excepthook`` is restored on exit: every ``init_process_group``
    chains a rank-prefixing hook onto it, which a long fuzzing run would
    otherwise grow to thousands of nested hooks.
    """

    hook = sys.excepthook
    try:
        with fake_world(world.size, world.rank):
            yield WorldObjects(world)
    finally:
        sys.excepthook = hook


# What generated DTensor programs leave out, per release (``major.minor``):
# each entry a statement (a name in ``DTENSOR_OPS``) or "strided inputs",
# kept only while the plugin cannot do better than stock there, with the
# reason. Measured on a 2-rank gloo world, aot_eager, fullgraph, stock and
# plugin side by side (tests/spawned/test_fuzz_exclusions.py measures every
# case again on each release CI runs, and fails when an entry is no longer
# needed or a left-in case fails). Empty on every release tested: the plugin
# compiles collectives out of ``_StridedShard`` inputs and redistributes to
# ``_StridedShard`` like eager on 2.12.1 to 2.15.0, where stock crashes with
# ``PendingUnbackedSymbolNotFound``; on 2.11.0 eager itself rejects them.
DTENSOR_EXCLUDED: dict[str, dict[str, str]] = {
    "2.11": {}, "2.12": {}, "2.13": {}, "2.14": {}, "2.15": {},
}


def dtensor_exclusions(version: str | None = None) -> dict[str, str]:
    """The excluded statements of ``version`` (``"2.13.0"``; the running
    torch by default), each with its reason."""
    release = ".".join((version or C.release.torch_version()).split(".")[:2])
    return dict(DTENSOR_EXCLUDED.get(release, {}))


def compilable_dtensor_ops(version: str | None = None) -> tuple[str, ...]:
    """The statements generated DTensor programs use on ``version``."""
    excluded = dtensor_exclusions(version)
    return tuple(op for op in DTENSOR_OPS if op not in excluded)


def strided_inputs_compile(version: str | None = None) -> bool:
    """Whether generated DTensor inputs include ``_StridedShard`` placements on ``version``."""
    return "strided inputs" not in dtensor_exclusions(version)
