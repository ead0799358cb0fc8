"""The fuzzing properties: one check per property, taking a generated example.

Each ``check_*`` raises ``AssertionError`` when the property fails (and
``InvalidExample`` when a generated DTensor example is not valid eager code,
which the runner discards). Checks need only torch and dynamo_dist, so a
reproducer script can call them without hypothesis.

Properties:

- ``query``: compiled == eager for generated query programs (fake world,
  ``fullgraph=True``, zero graph breaks, one frame, nothing distributed in
  the graph).
- ``escapes``: programs that mostly return meshes, groups and placements:
  each escaping object equals the eager one (a mesh with the same groups and
  coordinate, the very same process group, an equal placement).
- ``guards``: compile with inputs A, call with inputs B: the answer equals
  eager(B), and the frame count rises exactly when a folded answer differs
  (see ``check_guards``).
- ``wild``: anything the grammar makes, bad input and unsupported members
  included, compiled without ``fullgraph``: never an
  ``InternalTorchDynamoError``, compiled == eager or the same exception.
- ``dtensor``: DTensor numerics on a real 2-rank gloo world, compiled
  (``aot_eager``, ``fullgraph=True``) vs eager on every rank, gradients too.
- ``collectives``: DTensor programs on meshes of 1 to 4 dims over a
  recording world of 8 or 16 ranks: compiled runs eager's collectives (op,
  group ranks, order) and returns eager's layouts.
- ``processes``: DTensor programs compiled (inductor) in a fresh process A,
  loaded from its compile caches by a fresh process B in a perturbed state:
  every process's compiled programs run exactly the collectives eager runs
  there (op and group ranks), or B missed and compiled anew (see
  ``processes``).
- ``stock``: programs users write (``user_programs``) on a real 2-rank gloo
  world, compiled with the plugin and with stock torch (``aot_eager``,
  ``fullgraph=False``): where stock compiles a program like eager, the
  plugin does too, with no more graph breaks and no more compiled frames
  (see ``stock``).
- ``spmd``: programs written with spmd_types (``spmd.spmd_programs``: local
  ops and collectives between its local types, well and ill typed) on a
  real 2-rank gloo world, under its type checker (off, local, global mode),
  compiled with the plugin (``aot_eager``, ``fullgraph=False``): eager's
  ``SpmdTypeError`` raised again, same message, or eager's values, gradients
  and SPMD types on every rank; stock torch's run counted, not judged (see
  ``spmd``).
"""

from __future__ import annotations

import contextlib
import importlib
import importlib.util
import traceback
from dataclasses import dataclass
from typing import Any, Callable, Iterator

import torch
import torch.distributed as dist
from torch.distributed.tensor import DTensor, distribute_tensor
from torch.distributed.tensor.placement_types import Replicate

import dynamo_dist

from .._compat import distributed as D
from .._compat import observe as O
from ..diagnostics.compare import difference
from ..worlds import GlooPool, make_mesh
from ..worlds.recording import recording_world
from . import processes, spmd, stock, strategies
from .oracle import _call, _is_internal, assert_compiles_like_eager
from .oracle import data_dependent as _data_dependent
from .oracle import one_rank as _one_rank
from .specs import (  # noqa: F401
    CollectivesExample,
    Touches,
    DTensorExample,
    GuardExample,
    ProcessesExample,
    QueryExample,
    StockExample,
    WorldObjects,
    mesh_key,
    placement_key,
    world_objects,
)


class InvalidExample(Exception):
    """The generated example is not valid eager code (eager raised): not a
    property failure; the runner discards it."""


# ---------------------------------------------------------------------------
# query, escapes, wild


def check_query(example: QueryExample) -> None:
    """compiled == eager with ``fullgraph=True``: zero breaks, one frame,
    every answer and escaping object equal, nothing distributed in the graph."""

    fn = example.program.function()
    with dynamo_dist.enabled(), world_objects(example.world) as objects:
        args = objects.query_args(example.inputs)
        assert_compiles_like_eager(fn, *args, fullgraph=True, backend="eager", frames=1)
    O.reset_dynamo()


check_escapes = check_query


def check_wild(example: QueryExample) -> None:
    """Anything, compiled without ``fullgraph``: no internal Dynamo error;
    compiled == eager, or both raise the same exception type. With
    ``example.one_rank``, under ``compile_on_one_rank`` (rank answers are
    runtime ops; a mesh may then be a graph value, as stock funcol needs it
    to find a group at run time, so the graphs are not checked for leaks; and
    a runtime rank used where Python needs an int, ``ranks[mesh.get_local_rank()]``,
    fails with Dynamo's data-dependent error: a known limitation, accepted)."""

    fn = example.program.function()
    with dynamo_dist.enabled(), world_objects(example.world) as objects, _one_rank(example.one_rank):
        args = objects.query_args(example.inputs)
        try:
            assert_compiles_like_eager(fn, *args, fullgraph=False, backend="eager",
                                       check_graphs=not example.one_rank)
        except AssertionError as e:
            if not (example.one_rank and _data_dependent(e.__cause__)):
                raise
    O.reset_dynamo()


# ---------------------------------------------------------------------------
# guards


def folded_keys(objects: WorldObjects, args: tuple, touches: frozenset[str],
                items: frozenset[int] | None = None) -> dict[str, Any]:
    """What a trace that read ``touches`` folded, per input.

    The plugin folds whole objects, so a "folded answer" is the value of each
    input the executed program read (not only the query results it returned):

    - the mesh: its rank table, dim names, the process group behind each dim
      (by name) and this rank's coordinate (``specs.mesh_key``): an equal
      mesh that is a new object has the same key, a mesh over other groups or
      seen from another rank does not;
    - a process group argument, and the default group behind
      ``dist.get_rank()``/``dist.group.WORLD``: the object itself;
    - the placements tuple: its length once read, and the value (type and
      fields) of each placement whose value was read (of those, only the
      positions in ``items`` where given: the items the run did read, where a
      line that iterates ``ps`` may stop early); where ``is`` compared two of
      them, which are the same object.

    An input object returned as it came in counts as read: Dynamo wraps
    every value it handles and the plugin guards what it wraps (an
    over-approximation: such an object is only reloaded, never folded).
    """
    _, mesh, ps, pg = args
    keys: dict[str, Any] = {}
    if "mesh" in touches:
        keys["mesh"] = mesh_key(mesh)
    if "pg" in touches:
        keys["pg"] = objects.group_key(pg)
    if "world" in touches:
        keys["world"] = objects.world_key()
    if "ps" in touches or "ps[*]" in touches:
        keys["len(ps)"] = len(ps)
    for i, p in enumerate(ps):
        if ("ps[*]" in touches or f"ps[{i}]" in touches) and (items is None or i in items):
            keys[f"ps[{i}]"] = placement_key(p)
    if "ps[is]" in touches:  # ``ps[i] is ps[j]``: which placements are one object
        keys["ps[is]"] = tuple(next(j for j, q in enumerate(ps) if q is p) for p in ps)
    return keys


def _expect_like_eager(what: str, want: Any, want_exc: BaseException | None, got: Any,
                       got_exc: BaseException | None) -> None:
    if got_exc is not None and _is_internal(got_exc):
        raise AssertionError(f"{what}: InternalTorchDynamoError: {got_exc}") from got_exc
    if want_exc is not None:
        name = type(want_exc).__name__
        if type(got_exc) is type(want_exc) or (
            got_exc is not None and "Observed exception" in str(got_exc) and f"{name}(" in str(got_exc)
        ):
            return
        if got_exc is None:
            raise AssertionError(f"{what}: eager raised {name}: {want_exc}; compiled returned {got!r}")
        raise AssertionError(f"{what}: eager raised {name}: {want_exc}; compiled raised "
                             f"{type(got_exc).__name__}: {got_exc}") from got_exc
    if got_exc is not None:
        raise AssertionError(f"{what}: eager returned {want!r}; compiled raised "
                             f"{type(got_exc).__name__}: {got_exc}") from got_exc
    found = difference(want, got)
    if found:
        raise AssertionError(f"{what}: compiled != eager: {found}")


def _flatten_states(args: tuple) -> tuple:
    """The flattened meshes of each mesh argument's root, as plain data."""
    return tuple(D.mesh_flatten_state(a) for a in args if isinstance(a, D.DeviceMesh))


def check_guards(example: GuardExample) -> None:
    """Compile with inputs A, then call with inputs B (and A again).

    Every answer equals eager's; the B call compiles one frame when a key
    A's run read differs between A and B (``folded_keys`` over the items of
    ``ps`` A's run did read), none when no key of the lines it executed
    differs, and either where only an item of ``ps`` those lines touch but the
    run did not read differs (a compiled ``any`` over ``ps`` may read on). The
    second A call reuses A's graph. A call that raises in eager must raise the
    same exception compiled (its frame count is not checked).
    """

    fn = example.program.function()
    with dynamo_dist.enabled():
        O.reset_dynamo()
        counter = O.compile_counter("eager")
        compiled = torch.compile(fn, backend=counter, fullgraph=True)
        with world_objects(example.world_a) as wa:
            args_a = wa.query_args(example.inputs_a)
            try:
                touches = example.program.touches(fn, *args_a)
            except Exception as e:
                # A torch that rejects the program eagerly (2.12's
                # ``size(-1)`` of a flattened mesh) says nothing about guards:
                # compiled must raise the same, and that is all.
                got, exc = _call(compiled, args_a, {})
                _expect_like_eager("call A", None, e, got, exc)
                return
            want_a = fn(*args_a)
            keys_a = _keys_read_and_touched(wa, args_a, touches)
            got, exc = _call(compiled, args_a, {})
            _expect_like_eager("call A", want_a, None, got, exc)
            if counter.frame_count != 1:
                raise AssertionError(f"call A: {counter.frame_count} frames, expected 1")
            if example.same_world:
                flattened = _flatten_states(args_a)
                _check_call_b(example, fn, compiled, counter, wa, keys_a, touches)
                frames = counter.frame_count
                got, exc = _call(compiled, args_a, {})
                _expect_like_eager("call A again", want_a, None, got, exc)
                # A program that flattens A's mesh (``mesh["dp"]._flatten(...)``,
                # run by call B) changes what the mesh is: its flattened meshes
                # are part of its guard, so A's graph no longer fits it.
                if counter.frame_count != frames and _flatten_states(args_a) == flattened:
                    raise AssertionError("call A again: recompiled, though A's graph is in the cache")
        if not example.same_world:
            with world_objects(example.world_b) as wb:
                _check_call_b(example, fn, compiled, counter, wb, keys_a, touches)
    O.reset_dynamo()


def _keys_read_and_touched(objects: WorldObjects, args: tuple, touches: Touches) -> tuple[dict, dict]:
    """``folded_keys`` over the items of ``ps`` the run read, and over every
    item its lines touch."""
    return folded_keys(objects, args, touches.lines, touches.items), folded_keys(objects, args, touches.lines)


def _check_call_b(example: GuardExample, fn: Callable[..., Any], compiled: Callable[..., Any], counter: Any,
                  objects: WorldObjects, keys_a: tuple[dict, dict], touches: Touches) -> None:
    args_b = objects.query_args(example.inputs_b)
    want, want_exc = _call(fn, args_b, {})
    keys_b = _keys_read_and_touched(objects, args_b, touches)
    frames = counter.frame_count
    got, got_exc = _call(compiled, args_b, {})
    _expect_like_eager("call B", want, want_exc, got, got_exc)
    if want_exc is not None:
        return
    read, touched = (sorted(k for k in a.keys() | b.keys() if a.get(k) != b.get(k)) for a, b in zip(keys_a, keys_b))
    recompiled = counter.frame_count - frames
    if read and recompiled != 1:
        raise AssertionError(f"call B: folded {read} changed but {recompiled} frames were compiled "
                             f"(A: {[keys_a[0].get(k) for k in read]}, B: {[keys_b[0].get(k) for k in read]})")
    if not touched and recompiled:
        raise AssertionError(f"call B: recompiled although every folded answer is the same ({sorted(keys_a[1])})")
    if recompiled > 1:
        raise AssertionError(f"call B: {recompiled} frames compiled, at most one expected")


# ---------------------------------------------------------------------------
# dtensor (2-rank gloo world)

_ACTIVE_POOL: Any = None


@contextlib.contextmanager
def gloo_pool(world_size: int = 2) -> Iterator[Any]:
    """Keep one spawned gloo world for every ``check_dtensor`` in the block."""
    global _ACTIVE_POOL

    previous = _ACTIVE_POOL
    with GlooPool(world_size) as pool:
        _ACTIVE_POOL = pool
        try:
            yield pool
        finally:
            _ACTIVE_POOL = previous


def check_dtensor(example: DTensorExample) -> None:
    """On every rank of a real 2-rank gloo world: build the DTensor, run the
    program eagerly and compiled (``aot_eager``, ``fullgraph=True``); the
    full tensors, local shards and placements must match, and no mesh or
    placement may be a value in the captured graph. Uses the pool of an enclosing
    ``gloo_pool()`` block, else spawns a world for this one example."""
    if _ACTIVE_POOL is None:
        with gloo_pool() as pool:
            results = pool.run(run_dtensor_on_rank, example)
    else:
        results = _ACTIVE_POOL.run(run_dtensor_on_rank, example)
    invalid = [r for r in results if r[0] == "invalid"]
    if invalid:
        raise InvalidExample(invalid[0][1])
    failed = [f"rank {rank}: {detail}" for rank, (status, detail) in enumerate(results) if status != "ok"]
    if failed:
        raise AssertionError("\n".join(failed))


_MESHES: dict[Any, Any] = {}


def build_dtensor(example: DTensorExample) -> tuple[Any, Any]:
    """``(dtensor, mesh)`` for ``example.spec`` on this rank. Values come from
    the spec's seed (the same global tensor on every rank); ``Partial``
    placements are made with ``DTensor.from_local`` from rank-dependent parts."""


    spec = example.spec
    key = (spec.mesh, id(dist.group.WORLD))
    if key not in _MESHES:
        _MESHES[key] = make_mesh(spec.mesh.shape, spec.mesh.names)
    mesh = _MESHES[key]
    gen = torch.Generator().manual_seed(spec.seed)
    if spec.dtype.is_floating_point:
        full = (torch.randn(spec.shape, generator=gen) * 2).to(spec.dtype)
    else:
        full = torch.randint(-4, 5, spec.shape, generator=gen).to(spec.dtype)
    base = [Replicate() if p.is_partial() else p for p in spec.placements]
    d = distribute_tensor(full, mesh, base)
    if any(p.is_partial() for p in spec.placements):
        local = d.to_local() + dist.get_rank()
        d = DTensor.from_local(local, mesh, spec.placements, run_check=False, shape=d.shape, stride=d.stride())
    return d, mesh


def run_dtensor_on_rank(example: DTensorExample) -> tuple[str, str]:
    """One rank's side of ``check_dtensor``: ``("ok", "")``,
    ``("invalid", why)`` or ``("fail", what)``."""


    dynamo_dist.install()
    O.reset_dynamo()
    D.quiet_redistribute_warnings()
    try:
        d, mesh = build_dtensor(example)
        if example.backward:
            d = d.detach().requires_grad_()
        fn = example.program.function()
        _gradient(fn(d, mesh), d)
    except Exception as e:
        return "invalid", f"eager raised {type(e).__name__}: {e}"
    try:
        run = assert_compiles_like_eager(fn, d, mesh, fullgraph=True, backend="aot_eager")
        if example.backward:
            found = difference(_gradient(fn(d, mesh), d), _gradient(run.compiled_fn(d, mesh), d), "gradient")
            if found:
                raise AssertionError(f"compiled != eager: {found}")
    except AssertionError as e:
        return "fail", f"{e}\n{traceback.format_exc(limit=-3)}"
    finally:
        O.reset_dynamo()
    return "ok", ""


def _gradient(result: Any, d: Any) -> Any:
    """The gradient of a weighted sum of ``result[0]`` (the program's full
    tensor) with respect to ``d``: None where ``d`` needs none, "no grad"
    where nothing of ``result[0]`` depends on ``d``."""
    if not d.requires_grad:
        return None
    out = result[0]
    if not out.requires_grad:
        return "no grad"
    weights = torch.arange(1, out.numel() + 1, dtype=out.dtype).reshape(out.shape)
    (grad,) = torch.autograd.grad((out * weights).sum(), d, allow_unused=True)
    return grad


# ---------------------------------------------------------------------------
# stock (stock torch as a second oracle, on a 2-rank gloo world)


def check_stock(example: StockExample) -> tuple[str, str | None]:
    """On every rank of a real 2-rank gloo world, run the program eagerly,
    then compiled with the plugin, then (in a second ``pool.run``) compiled
    with stock torch (``stock.run_side``). Fails (``AssertionError``, both
    sides on every rank described) when stock compiles it like eager and the
    plugin does not, or breaks more, or compiles more frames
    (``stock.judge``). Returns the example's outcome (one of
    ``stock.OUTCOMES``) and, where stock fails, its failure in a few words.
    A side that hangs (no answer from a rank within the pool's timeout) fails
    on that side. Uses the pool of an enclosing ``gloo_pool()`` block, else
    spawns a world for this one example."""
    if _ACTIVE_POOL is None:
        with gloo_pool() as pool:
            return _check_stock_on(pool, example)
    return _check_stock_on(_ACTIVE_POOL, example)


def _check_stock_on(pool: Any, example: StockExample) -> tuple[str, str | None]:
    sides = stock_sides(pool, example)
    outcome, _ = stock.judge(sides["stock"], sides["plugin"])
    return outcome, stock.stock_note(sides["stock"])


def stock_sides(pool: Any, example: StockExample) -> dict[str, list[dict[str, Any]]]:
    """Each side's run of ``example`` on every rank of ``pool``'s world
    (``stock.run_side``); raises ``InvalidExample`` where eager raises."""
    sides: dict[str, list[dict[str, Any]]] = {}
    hung = []
    for side in stock.SIDES:
        timeout, pool.timeout = pool.timeout, min(pool.timeout, stock.SIDE_TIMEOUT)
        try:
            results = pool.run(stock.run_side, example, side)
        except TimeoutError as e:  # the pool killed the world; the next call spawns a fresh one
            hung.append(f"{side}: {e}")
            results = [{"error": f"hung: {e}", "breaks": 0, "frames": 0}] * pool.world_size
        finally:
            pool.timeout = timeout
        invalid = [r["invalid"] for r in results if "invalid" in r]
        if invalid:
            raise InvalidExample(invalid[0])
        sides[side] = results
    if len(hung) == len(stock.SIDES):
        # Each side runs eager first: a program that hangs whatever compiles it
        # (eager's own collectives never meet) has nothing to judge by. Counted
        # among the discarded, never passed.
        raise InvalidExample("no side answered: " + "; ".join(hung))
    return sides


# ---------------------------------------------------------------------------
# spmd (spmd_types programs, well and ill typed, on a 2-rank gloo world)


def check_spmd(example: spmd.SpmdExample) -> tuple[str, str | None]:
    """On every rank of a real 2-rank gloo world, under the example's
    checker mode: run the spmd_types program eagerly, then compiled with
    the plugin (``spmd.run_side``), then in a second ``pool.run`` eagerly and
    compiled with stock torch. Fails (``AssertionError``) where the plugin's
    compiled verdict differs from eager's on a rank (``spmd.verdict``): eager
    raised ``SpmdTypeError`` and the compiled program did not raise it with
    the same message, or eager ran and the compiled output, gradients or
    SPMD types differ. Returns the example's outcome (``spmd.OUTCOMES``) and
    stock's failure in a few words. An example whose eager run raises
    anything but ``SpmdTypeError`` is invalid. Uses the pool of an
    enclosing ``gloo_pool()`` block, else spawns a world for this example."""
    if importlib.util.find_spec("spmd_types") is None:
        raise RuntimeError("the spmd property needs spmd_types: pip install 'dynamo_dist[clients]' "
                           "(or spmd_types itself)")
    if _ACTIVE_POOL is None:
        with gloo_pool() as pool:
            return _check_spmd_on(pool, example)
    return _check_spmd_on(_ACTIVE_POOL, example)


def _check_spmd_on(pool: Any, example: spmd.SpmdExample) -> tuple[str, str | None]:
    sides: dict[str, list[dict[str, Any]]] = {}
    for side in spmd.SIDES:
        timeout, pool.timeout = pool.timeout, min(pool.timeout, spmd.SIDE_TIMEOUT)
        try:
            sides[side] = pool.run(spmd.run_side, example, side)
        except TimeoutError as e:  # the pool killed the world; the next call spawns a fresh one
            if side == "plugin":
                raise AssertionError(f"no answer from the world: {e}") from None
            sides[side] = [{"eager": {}, "compiled": {"error": f"hung: {e}"}}] * pool.world_size
        finally:
            pool.timeout = timeout
        if side == "plugin":
            invalid = spmd.eager_problem(sides[side])
            if invalid:
                raise InvalidExample(invalid)
    return spmd.judge(sides["plugin"], sides["stock"])


# ---------------------------------------------------------------------------
# collectives (a recording world)


def check_collectives(example: CollectivesExample) -> None:
    """In a recording world of ``example.world`` (one process posing as a
    rank), with the plugin installed: build the DTensor, run the program
    eagerly and compiled (``aot_eager``, ``fullgraph=True``). The compiled
    call runs eager's collectives (op, the sorted global ranks of each
    group, order) and returns eager's layouts (placements, global and local
    shapes, dtypes; a recording world moves no data, so values are the
    ``dtensor`` property's part). An example eager rejects is invalid.
    Each example is a new world whose meshes equal earlier worlds' meshes:
    DTensor's sharding propagation cache is cleared first, else it answers
    with output specs naming the earlier (destroyed) meshes."""
    O.reset_dynamo()
    _MESHES.clear()
    D.clear_sharding_propagation_cache()
    D.quiet_redistribute_warnings()
    try:
        with dynamo_dist.enabled(), recording_world(example.world.size, example.world.rank) as log:
            dtensor = DTensorExample(example.spec, example.program)
            try:
                d, mesh = build_dtensor(dtensor)
                fn = example.program.function()
                fn(d, mesh)
            except Exception as e:
                raise InvalidExample(f"eager raised {type(e).__name__}: {e}") from None
            assert_compiles_like_eager(fn, d, mesh, fullgraph=True, backend="aot_eager", collectives=log,
                                       same=lambda a, b: difference(a, b, values=False))
    finally:
        _MESHES.clear()
        O.reset_dynamo()


# ---------------------------------------------------------------------------
# processes (compile in one process, load in another)


# Examples checked in this process -> (invalid, what failed): hypothesis draws
# some examples again (while generating and shrinking), each seconds of compiling.
_PROCESSES_CHECKED: dict[ProcessesExample, tuple[str | None, str | None]] = {}


def check_processes(example: ProcessesExample) -> None:
    """Compile ``example.programs`` in a fresh process A in state
    ``example.compile``, then load them in a fresh process per state of
    ``example.loads`` (sharing A's inductor cache directory, or loading A's
    cache artifacts). In every process, each compiled program runs exactly
    the collectives eager runs there, as (op, sorted group ranks), and
    raises nothing: a process that hit A's entries runs A's graphs, which
    must fit its own state. An example eager rejects in some state is
    invalid. An example checked before in this process is answered as then."""
    if example not in _PROCESSES_CHECKED:
        if len(_PROCESSES_CHECKED) > 1000:
            _PROCESSES_CHECKED.clear()
        invalid = processes.eager_problem(example)
        found = [] if invalid else [p for who, state, runs in processes.run_example(example)
                                    for p in processes.problems(example, who, state, runs)]
        _PROCESSES_CHECKED[example] = (invalid, "\n".join(found) or None)
    invalid, failed = _PROCESSES_CHECKED[example]
    if invalid is not None:
        raise InvalidExample(invalid)
    if failed is not None:
        raise AssertionError(failed)


# ---------------------------------------------------------------------------
# The registry.


@dataclass(frozen=True)
class Property:
    """A fuzzing property: its examples and its check (``module:function``,
    so reproducer scripts can import it)."""

    name: str
    description: str
    strategy: Callable[[], Any]
    check: str
    ci_examples: int
    long_share: float = 1.0
    gloo: bool = False
    needs: str | None = None  # a module the check imports that the package does not require

    def check_function(self) -> Callable[[Any], None]:

        module, _, name = self.check.partition(":")
        return getattr(importlib.import_module(module), name)


def _strategy(name: str, *args: Any) -> Callable[[], Any]:
    def make() -> Any:

        return getattr(strategies, name)(*args)

    return make


_HERE = __name__
PROPERTIES: dict[str, Property] = {
    p.name: p
    for p in [
        Property("query", "compiled == eager for generated query programs (fullgraph, zero breaks)",
                 _strategy("query_examples", "query"), f"{_HERE}:check_query", ci_examples=100),
        Property("escapes", "escaping placements, meshes and groups equal the eager ones",
                 _strategy("query_examples", "escapes"), f"{_HERE}:check_escapes", ci_examples=100),
        Property("guards", "compile with A, call with B: eager(B), recompile exactly when a folded answer differs",
                 _strategy("guard_examples"), f"{_HERE}:check_guards", ci_examples=100),
        Property("wild", "no InternalTorchDynamoError, whatever is generated; compiled == eager or same exception",
                 _strategy("query_examples", "wild"), f"{_HERE}:check_wild", ci_examples=100),
        # One spawned 2-rank world serves every example (about 4 a second on 2 cores): a full share.
        Property("dtensor", "DTensor numerics and gradients on a 2-rank gloo world, compiled vs eager on every rank",
                 _strategy("dtensor_examples"), f"{_HERE}:check_dtensor", ci_examples=50, gloo=True),
        Property("collectives",
                 "DTensor programs on 1-D to 4-D meshes of 8 or 16 ranks: eager's collectives and layouts",
                 _strategy("collectives_examples"), f"{_HERE}:check_collectives", ci_examples=60),
        # Each example spawns two or three processes that compile with inductor (20-60 s on 2 cores):
        # a few per fuzz run, and no CI profile (tests/spawned/test_fuzz_processes.py checks fixed examples).
        Property("processes", "compiled in process A, loaded in a perturbed process B: eager's collectives in B",
                 _strategy("processes_examples"), f"{_HERE}:check_processes", ci_examples=0, long_share=0.025),
        # Each example runs eagerly and compiles twice (plugin and stock) on one spawned
        # 2-rank world, a few seconds on 2 cores: a few per CI run.
        Property("stock", "programs users write on a 2-rank gloo world: never worse than stock torch.compile",
                 _strategy("stock_examples"), f"{_HERE}:check_stock", ci_examples=8, gloo=True),
        # Like stock's: eager, the plugin and stock per example on one spawned 2-rank world;
        # needs spmd_types (the `clients` extra).
        Property("spmd", "spmd_types programs, well and ill typed, on a 2-rank gloo world: eager's error or values",
                 _strategy("spmd_examples"), f"{_HERE}:check_spmd", ci_examples=8, gloo=True, needs="spmd_types"),
    ]
}
