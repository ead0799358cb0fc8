"""The ``processes`` property's machinery: compile in one process, load in another.

A ``ProcessesExample``'s programs are compiled (inductor, the plugin
installed, ``fullgraph=True``) in a fresh process A, then loaded by a fresh
process B per loading state, each sharing A's inductor cache directory (FX
graph cache and AOTAutograd cache), or loading A's
``torch.compiler.save_cache_artifacts()`` into a cache without A's entries
(the compiled C++ kernels, keyed by their source, are kept). Each process
first makes its own state (``ProcessState``: groups made in another order,
another mesh first, meshes flattened, another world or rank, the
redistribute planner's switches, ``compile_on_one_rank``), so B may be in a
state A's graphs do not fit.

Every process runs in a recording world (``worlds.recording``): for each
program it writes down the collectives the compiled program ran and those
eager runs, as (op, sorted ranks of the group), never by group name. The
parent (``properties.check_processes``) then asks of every process: the
compiled program ran exactly eager's collectives, and raised nothing. A B
that missed the caches compiled anew in its own state; one that hit them
ran A's graph, which must fit B's state all the same.

``python -m dynamo_dist.fuzzing.processes ROLE INDEX DIR`` is one process
(``compile 0`` or ``load i``): it reads the example from ``DIR`` and writes
what it saw there as JSON.
"""

from __future__ import annotations

import atexit
import contextlib
import dataclasses
import json
import math
import os
import pickle
import shutil
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterator

import torch
import torch.distributed as dist
from torch.distributed.tensor import DTensor

import dynamo_dist

from .. import _compat as C
from .. import _hooks
from .._compat import caches as K
from .._compat import observe as O
from ..worlds import Collective, make_mesh, recording_world
from .oracle import _call, data_dependent, one_rank
from .specs import DTensorSpec, MeshSpec, ProcessesExample, ProcessState, code_of, world_objects

# Seconds a process may take (it imports torch, and compiles with inductor).
PROCESS_TIMEOUT_S = 300
EXAMPLE_FILE = "example.pkl"
ARTIFACTS_FILE = "artifacts.bin"


@dataclass(frozen=True)
class ProgramRun:
    """What one process saw of one program: the collectives the compiled
    program ran and those eager ran, what either raised, and the compile
    caches' outcomes while it compiled (``{cache: {outcome: count}}``)."""

    compiled: tuple[Collective, ...]
    compiled_error: str | None
    eager: tuple[Collective, ...]
    eager_error: str | None
    outcomes: dict[str, dict[str, int]]
    limitation: str | None = None  # the known limitation that stopped the compile (nothing to compare)
    traced: int | None = None  # frames Dynamo traced for the compiled call (0: run from Dynamo's cache)

    def hits(self) -> int:
        return sum(counts.get("hit", 0) for counts in self.outcomes.values())

    def to_json(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> "ProgramRun":
        def collectives(items: list[dict[str, Any]]) -> tuple[Collective, ...]:
            return tuple(Collective(c["op"], tuple(c["ranks"])) for c in items)

        return cls(collectives(data["compiled"]), data["compiled_error"], collectives(data["eager"]),
                   data["eager_error"], data["outcomes"], data["limitation"], data.get("traced"))


# ---------------------------------------------------------------------------
# A process's state.


@contextlib.contextmanager
def process_state(state: ProcessState, spec: MeshSpec, recording: bool) -> Iterator[tuple[Any, Any]]:
    """Make ``state`` (see ``ProcessState``) around the programs' mesh of
    ``spec``; yields ``(mesh, log)``: the mesh, and the world's
    ``CollectiveLog`` (a ``recording`` world) or None (a plain fake world)."""
    world = recording_world(state.world.size, state.world.rank) if recording else world_objects(state.world)
    with world as handle:
        log = handle if recording else None
        for ranks in state.groups_first:
            dist.new_group(list(ranks))
        if state.mesh_first is not None:
            make_mesh(state.mesh_first)
        mesh = make_mesh(spec.shape, spec.names)
        for dims in state.flattened:
            O.flatten_mesh(mesh, dims, "_".join(dims))
        with _planner(state.force_min_cost, state.no_transform_optimization), one_rank(state.one_rank):
            yield mesh, log


@contextlib.contextmanager
def _planner(force_min_cost: bool | None, disable_optimization: bool) -> Iterator[None]:
    patches = _hooks.planner_patches(force_min_cost, disable_optimization)
    try:
        yield
    finally:
        patches.restore()
        O.forget_dtensor_plans()


def program_input(tensor: DTensorSpec, mesh: Any) -> DTensor:
    """The program's DTensor: ``DTensor.from_local`` of this rank's
    ``tensor.shape`` tensor with ``tensor.placements`` (no collective)."""
    local = torch.arange(math.prod(tensor.shape), dtype=tensor.dtype).reshape(tensor.shape) + dist.get_rank()
    return DTensor.from_local(local, mesh, list(tensor.placements), run_check=False)


def eager_problem(example: ProcessesExample) -> str | None:
    """Why the example is not valid eager code in one of its processes'
    states (in a fake world, in this process), or None."""
    for who, state in _processes(example):
        where = f"{who}'s state"
        try:
            with process_state(state, example.tensor.mesh, recording=False) as (mesh, _):
                for i, program in enumerate(example.programs):
                    where = f"{who}, program {i}"
                    program.function()(program_input(example.tensor, mesh), mesh)
        except Exception as e:
            return f"{where}: eager raised {type(e).__name__}: {e}"
    return None


def _processes(example: ProcessesExample) -> list[tuple[str, ProcessState]]:
    loads = [(f"process B{i}" if len(example.loads) > 1 else "process B", s) for i, s in enumerate(example.loads)]
    return [("process A", example.compile), *loads]


# ---------------------------------------------------------------------------
# One process (``python -m dynamo_dist.fuzzing.processes ROLE INDEX DIR``).


def _error(e: BaseException | None) -> str | None:
    return None if e is None else f"{type(e).__name__}: {str(e)[:600]}"


def _outcomes() -> dict[str, dict[str, int]]:
    """The compile caches' outcomes so far: FX graph, AOTAutograd, and
    Dynamo's own cache (torch's precompile)."""
    return {**K.outcome_counts(), "dynamo": O.dynamo_cache_counts()}


def run_program(program: Any, index: int, tensor: DTensorSpec, mesh: Any, log: Any, on_one_rank: bool,
                workdir: Path) -> ProgramRun:
    """Compile program ``index`` (inductor, ``fullgraph=True``) and call it,
    then call it eagerly; the collectives each ran, from the world's ``log``.
    Each program is defined in a module of its own name, the same in every
    process, starting on a line of its own (torch's precompile keys a
    function by its name and first line, and binds its saved globals in its
    module), from a file of its own in ``workdir`` (as user code is: torch
    2.11 and 2.12 compile a function without a source file through one
    shared wrapper frame whose guard on the function ``caching_precompile``
    drops, so a second such function runs the first's code, stock and
    plugin alike).
    Under ``compile_on_one_rank``, Dynamo's data-dependent error (a runtime
    rank where Python needs an int) is the known limitation, not a failure."""
    module = f"dynamo_dist_fuzz_program_{index}"
    fn = program.function(module=module, line=index + 1, file=str(workdir / f"{module}.py"))
    before, traced = _outcomes(), O.dynamo_counters()["stats"]["unique_graphs"]
    _, compiled_error = _call(torch.compile(fn, backend="inductor", fullgraph=True),
                              (program_input(tensor, mesh), mesh), {})
    compiled = log.take()
    after, traced = _outcomes(), O.dynamo_counters()["stats"]["unique_graphs"] - traced
    outcomes = {cache: {k: n - before[cache][k] for k, n in counts.items()} for cache, counts in after.items()}
    _, eager_error = _call(fn, (program_input(tensor, mesh), mesh), {})
    limitation = None
    if on_one_rank and data_dependent(compiled_error):
        limitation, compiled_error = f"compile_on_one_rank, data-dependent: {_error(compiled_error)}", None
    return ProgramRun(tuple(compiled), _error(compiled_error), tuple(log.take()), _error(eager_error), outcomes,
                      limitation, traced)


def run_process(example: ProcessesExample, state: ProcessState, workdir: Path, compiling: bool) -> list[ProgramRun]:
    """One process's side: make ``state``, run every program; the compiling
    process then saves its cache artifacts, a loading one with
    ``state.artifacts`` loads them first. Under ``example.precompile``
    A's artifacts and cache directory hold Dynamo's entries too."""
    dynamo_dist.install()
    artifacts = workdir / ARTIFACTS_FILE  # none when A's compiles left nothing in the caches
    with C.dynamo.precompile_caching_set(example.precompile):
        if state.artifacts and not compiling and artifacts.exists():
            K.load_artifacts(artifacts.read_bytes())
        with process_state(state, example.tensor.mesh, recording=True) as (mesh, log):
            runs = [run_program(program, i, example.tensor, mesh, log, state.one_rank, workdir)
                    for i, program in enumerate(example.programs)]
        if compiling:
            saved = torch.compiler.save_cache_artifacts()
            if saved is not None:
                (workdir / ARTIFACTS_FILE).write_bytes(saved[0])
    return runs


def main(argv: list[str]) -> int:
    role, index, workdir = argv[0], int(argv[1]), Path(argv[2])
    example = pickle.loads((workdir / EXAMPLE_FILE).read_bytes())
    compiling = role == "compile"
    state = example.compile if compiling else example.loads[index]
    start = time.monotonic()
    runs = run_process(example, state, workdir, compiling)
    result = {"runs": [run.to_json() for run in runs], "seconds": round(time.monotonic() - start, 2)}
    (workdir / f"{role}{index}.json").write_text(json.dumps(result))
    return 0


# ---------------------------------------------------------------------------
# The parent: spawn the processes.

_CACHE_DIR: list[Path] = []


def _kernels(entry: Path) -> bool:
    """Inductor keeps compiled C++ kernels in two-letter directories, keyed by their source."""
    return entry.is_dir() and len(entry.name) == 2


def _empty(cache: Path) -> None:
    for entry in cache.iterdir():
        if not _kernels(entry):
            shutil.rmtree(entry) if entry.is_dir() else entry.unlink()


def _cache_dir() -> Path:
    """An inductor cache directory with no compile-cache entries (FX graph,
    AOTAutograd, Dynamo's profiles): the examples of a run share one,
    emptied each time but for the compiled C++ kernels, which spares each
    process a cold C++ compile (a kernel is keyed by its source)."""
    if not _CACHE_DIR:
        _CACHE_DIR.append(Path(tempfile.mkdtemp(prefix="dynamo_dist-processes-")))
        atexit.register(shutil.rmtree, _CACHE_DIR[0], True)
    _empty(_CACHE_DIR[0])
    return _CACHE_DIR[0]


@contextlib.contextmanager
def _entries_aside(cache: Path, stash: Path) -> Iterator[None]:
    """``cache`` without its compile-cache entries for the block (they wait
    in ``stash``; the kernels stay), and with them again after it."""
    stash.mkdir()
    for entry in list(cache.iterdir()):
        if not _kernels(entry):
            entry.rename(stash / entry.name)
    try:
        yield
    finally:
        _empty(cache)
        for entry in list(stash.iterdir()):
            entry.rename(cache / entry.name)
        stash.rmdir()


def _spawn(who: str, role: str, index: int, workdir: Path, cache_dir: Path) -> list[ProgramRun]:
    """Run one process and read what it saw; raises AssertionError when it
    fails or does not finish within ``PROCESS_TIMEOUT_S``."""
    package_root = str(Path(dynamo_dist.__file__).resolve().parents[1])  # the same dynamo_dist in the child
    env = {**os.environ, "TORCHINDUCTOR_CACHE_DIR": str(cache_dir), "TORCHINDUCTOR_FX_GRAPH_CACHE": "1",
           "TORCHINDUCTOR_AUTOGRAD_CACHE": "1", "TORCHINDUCTOR_COMPILE_THREADS": "1",
           "PYTHONPATH": os.pathsep.join(p for p in (package_root, os.environ.get("PYTHONPATH")) if p)}
    command = [sys.executable, "-m", __name__, role, str(index), str(workdir)]
    try:
        done = subprocess.run(command, env=env, capture_output=True, text=True, timeout=PROCESS_TIMEOUT_S)
    except subprocess.TimeoutExpired:
        raise AssertionError(f"{who} ({role} {index}): no answer within {PROCESS_TIMEOUT_S} s "
                             f"(waited for {' '.join(command)})") from None
    if done.returncode != 0:
        raise AssertionError(f"{who} ({role} {index}) exited with {done.returncode}:\n{done.stderr[-3000:]}")
    data = json.loads((workdir / f"{role}{index}.json").read_text())
    return [ProgramRun.from_json(run) for run in data["runs"]]


def run_example(example: ProcessesExample) -> list[tuple[str, ProcessState, list[ProgramRun]]]:
    """Process A, then each loading process: ``(who, state, runs)`` per process."""
    with tempfile.TemporaryDirectory(prefix="dynamo_dist-example-") as tmp:
        workdir = Path(tmp)
        (workdir / EXAMPLE_FILE).write_bytes(pickle.dumps(example))
        cache = _cache_dir()
        out = []
        for n, (who, state) in enumerate(_processes(example)):
            # A load through artifacts starts from a compile cache without A's entries.
            aside = _entries_aside(cache, workdir / "entries") if n and state.artifacts else contextlib.nullcontext()
            with aside:
                out.append((who, state, _spawn(who, "compile" if n == 0 else "load", max(n - 1, 0), workdir, cache)))
        return out


# ---------------------------------------------------------------------------
# What the parent checks.


def _sequence(collectives: tuple[Collective, ...]) -> str:
    return "[" + ", ".join(str(c) for c in collectives) + "]" if collectives else "no collective"


def _compared(collectives: tuple[Collective, ...]) -> tuple[Collective, ...]:
    """Collectives as the oracle compares them: a reduction with ``avg`` as one
    with ``sum`` (DTensor merges sum and avg partials into one sum and scales
    the result locally: the same collective as an avg over the same ranks)."""
    return tuple(Collective(c.op.replace("(avg)", "(sum)"), c.ranks) for c in collectives)


def _caches(run: ProgramRun) -> str:
    parts = ", ".join(f"{cache} " + " ".join(f"{k} {n}" for k, n in counts.items() if n)
                      for cache, counts in run.outcomes.items() if any(counts.values()))
    how = ("run from Dynamo's cache, not traced" if run.traced == 0 else
           "loaded from the caches" if run.hits() else "compiled anew")
    return f"{how} ({parts or 'no cache lookup'})"


def perturbation(base: ProcessState, state: ProcessState) -> str:
    """How ``state`` differs from ``base``, field by field, as source."""
    changed = [f"{f.name} {code_of(getattr(base, f.name))} -> {code_of(getattr(state, f.name))}"
               for f in dataclasses.fields(ProcessState) if getattr(base, f.name) != getattr(state, f.name)]
    return "; ".join(changed) or "none (A's state)"


def problems(example: ProcessesExample, who: str, state: ProcessState, runs: list[ProgramRun]) -> list[str]:
    """What is wrong with one process's runs: a compiled program that raised,
    or ran other collectives than eager (compared by op and group ranks,
    ``_compared``).
    A program the known ``compile_on_one_rank`` limitation stopped compiling
    has nothing to compare."""
    found = []
    for i, run in enumerate(runs):
        where = f"{who}, program {i}"
        if run.limitation is not None:
            continue
        if run.eager_error is not None:
            found.append(f"{where}: eager raised {run.eager_error} in the recording world (not in a fake world)")
        elif run.compiled_error is not None:
            found.append(f"{where}: the compiled program raised {run.compiled_error}; eager runs "
                         f"{_sequence(run.eager)}; {_caches(run)}")
        elif _compared(run.compiled) != _compared(run.eager):
            found.append(f"{where}: the compiled program ran {_sequence(run.compiled)} where eager runs "
                         f"{_sequence(run.eager)}; {_caches(run)}")
    if found and state is not example.compile:
        found.append(f"{who}'s state, perturbed from A's: {perturbation(example.compile, state)}")
    return found


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
