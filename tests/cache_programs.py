"""Programs for the compile-cache tests, each run in a fresh process (the
caches have in-process layers: only a new process shows what is on disk).

``python tests/cache_programs.py '<json options>'`` runs :func:`fake_world_run`
and prints its result as JSON; :func:`gloo_rank_run` runs on each rank of a
gloo world (``dynamo_dist.testing.run_in_world`` spawns fresh processes).
Each run compiles with inductor, runs forward and backward, compares with
eager and returns the cache outcomes counted in this process.
"""

from __future__ import annotations

import glob
import json
import os
import sys
import time

import torch
import torch.distributed as dist
from torch.distributed.device_mesh import DeviceMesh
from torch._dynamo.utils import counters
from torch.distributed.tensor import DTensor, Partial, Replicate, Shard

import dynamo_dist
from dynamo_dist import _compat as C
from dynamo_dist._compat import caches, observe
from dynamo_dist import compile_once
from dynamo_dist.demo.models import SIZES, build_model, make_input
from dynamo_dist.testing import fake_world, make_mesh


def _tp_mlp(mesh):
    config = SIZES["tiny"]
    model = build_model("mlp", config, mesh=mesh)
    return model, make_input(config)


def _reshard(mesh):
    """A graph that depends on this rank's coordinate: Replicate -> Shard(0)
    keeps this rank's rows (no communication), so a graph traced on another
    rank would return the wrong rows."""

    def f(x):
        d = DTensor.from_local(x, mesh, [Replicate()], run_check=False)
        return d.redistribute(mesh, [Shard(0)]).to_local() * 2

    return f, torch.arange(8 * 4, dtype=torch.float32).reshape(8, 4).requires_grad_()


def _local_shard(scale: int):
    """A DTensor program with no collective, forward or backward: each rank
    scales its own shard by ``scale`` (a world with a dead rank can still run
    it; nothing in it depends on the rank, so it compiles under
    ``compile_on_one_rank`` on every release)."""

    def build(mesh):
        def f(x):
            return (DTensor.from_local(x, mesh, [Shard(0)], run_check=False) * scale).to_local()

        return f, torch.arange(2 * 4, dtype=torch.float32).reshape(2, 4).requires_grad_()

    return build


def _rows_of(mesh):
    """The same compiled code for every DTensor input: its rows of ``Shard(0)``."""

    def f(d):
        return d.redistribute(mesh, [Shard(0)]).to_local() * 2

    return f


def _input_placed(placement):
    """``_rows_of`` on a DTensor input whose local tensor is the same (8, 4)
    whatever ``placement`` is: only the placement tells the two programs apart
    (Replicate: this rank's 2 rows, with no communication; Shard(0): all 8)."""

    def build(mesh):
        local = torch.arange(8 * 4, dtype=torch.float32).reshape(8, 4).requires_grad_()
        return _rows_of(mesh), DTensor.from_local(local, mesh, [placement], run_check=False)

    return build


def _planned(mesh):
    """Partial on mesh dims ``a`` and ``c`` to Replicate: DTensor's planner
    runs one all_reduce on a flattened mesh covering ``a, c`` where the root
    has one, else one per dim: the graph names the flattened mesh's group."""

    def f(x):
        d = DTensor.from_local(x, mesh, [Partial(), Replicate(), Partial()], run_check=False)
        return d.redistribute(mesh, [Replicate()] * 3).to_local() * 2

    return f, torch.arange(4 * 4, dtype=torch.float32).reshape(4, 4).requires_grad_()


# name -> (builder, whether it communicates: a fake world's collectives leave
# their outputs undefined, so only gloo worlds compare such values).
PROGRAMS = {"tp_mlp": (_tp_mlp, True), "reshard": (_reshard, False), "local_shard": (_local_shard(2), False),
            "local_shard_x3": (_local_shard(3), False),
            "replicate_input": (_input_placed(Replicate()), False),
            "shard0_input": (_input_placed(Shard(0)), False), "planned": (_planned, True)}


def _step(fn, x) -> list:
    """Forward + backward: the output, the input's gradient (if it needs one)
    and each parameter's local gradient (which are then reset)."""
    x = x.detach().clone().requires_grad_(x.requires_grad)
    out = fn(x)
    out.sum().backward()
    params = list(getattr(fn, "parameters", lambda: [])())
    grads = ([x.grad] if x.requires_grad else []) + [p.grad for p in params]
    for p in params:
        p.grad = None
    return [out.detach()] + [g.to_local() if isinstance(g, DTensor) else g for g in grads]


def run_program(program: str, mesh, plugin: bool = True, one_rank: bool = False,
                load_artifacts: str | None = None, save_artifacts: str | None = None,
                before_compile=lambda: None) -> dict:
    """Compile ``program`` on ``mesh`` (inductor), run it and eager; return
    the cache outcomes, whether compiled == eager, and the compiled values."""
    if plugin:
        dynamo_dist.install()
    C.distributed.one_rank_config().compile_on_one_rank = one_rank
    if load_artifacts:
        with open(load_artifacts, "rb") as f:
            torch.compiler.load_cache_artifacts(f.read())
    build, communicates = PROGRAMS[program]
    fn, x = build(mesh)
    eager = _step(fn, x)
    before_compile()
    start = time.perf_counter()
    compiled = _step(torch.compile(fn, backend="inductor", fullgraph=True), x)
    seconds = time.perf_counter() - start
    if save_artifacts:
        saved = torch.compiler.save_cache_artifacts()
        assert saved is not None, "torch.compiler.save_cache_artifacts() saved nothing"
        with open(save_artifacts, "wb") as f:
            f.write(saved[0])
    # torch.testing.assert_close's float32 tolerances (inductor fuses, eager does not).
    same = len(eager) == len(compiled) and all(a.shape == b.shape and torch.allclose(a, b, rtol=1.3e-6, atol=1e-5)
                                               for a, b in zip(eager, compiled))
    worst = max((float((a - b).abs().max()) if a.shape == b.shape else float("inf"))
                for a, b in zip(eager, compiled))
    defined = not (communicates and dist.get_backend() == "fake")
    return {"outcomes": caches.outcome_counts(), "compile_once": compile_once.stats(),
            "same_as_eager": bool(same) if defined else None,
            "out": compiled[0].tolist() if defined else None, "max_difference": worst,
            "first_step_s": round(seconds, 2), "rank": dist.get_rank(),
            "traced": counters["stats"]["unique_graphs"]}


def fake_world_run(program: str, rank: int = 3, extra_groups: int = 0, **options) -> dict:
    """``program`` on ``mesh["tp"]`` of a (2, 4) mesh in a fake 8-rank world
    seen from ``rank``. ``extra_groups``: groups created before the mesh, so
    the mesh's groups get other names (the same layout over other groups)."""
    with fake_world(8, rank):
        for _ in range(extra_groups):
            dist.new_group(list(range(8)))
        mesh = make_mesh((2, 4), ("dp", "tp"))
        return run_program(program, mesh["tp"], **options)


def cube_world_run(program: str, rank: int = 0, flatten: tuple = (), planner: dict | None = None,
                   **options) -> dict:
    """``program`` on a (2, 2, 2) mesh ``a, b, c`` in a fake 8-rank world seen
    from ``rank``, after flattening each dim-name list of ``flatten`` (in
    order: flattened groups are named in creation order) and setting the
    redistribute planner's switches of ``planner`` (module globals of
    ``torch.distributed.tensor._redistribute``)."""
    import torch.distributed.tensor._redistribute as planner_module

    for name, value in (planner or {}).items():
        setattr(planner_module, name, value)
    with fake_world(8, rank):
        mesh = make_mesh((2, 2, 2), ("a", "b", "c"))
        for dims in flatten:
            mesh[tuple(dims)]._flatten("".join(dims))
        return run_program(program, mesh, **options)


def wait_for_aot_entry(cache_dir: str, timeout: float = 300.0) -> None:
    """Block until an AOTAutograd cache entry is on disk (written last, after
    the forward and backward graphs' entries)."""
    deadline = time.monotonic() + timeout
    while not glob.glob(os.path.join(cache_dir, "aotautograd", "*", "*")):
        if time.monotonic() > deadline:
            raise TimeoutError(f"no AOTAutograd cache entry in {cache_dir} after {timeout} s")
        time.sleep(0.2)


def gloo_rank_run(program: str, one_rank: bool = False, rank0_first: bool = False,
                  own_group: bool = False) -> dict:
    """``program`` on a 1-D mesh over a 2-rank gloo world. ``rank0_first``:
    rank 1 starts compiling only once rank 0's entries are on disk (rank 0
    compiles, the others hit). ``own_group``: the mesh is built over a new
    group of both ranks (an equal mesh layout over another group than the
    world's, which a mesh spanning the world uses otherwise)."""
    if own_group:
        mesh = DeviceMesh.from_group(dist.new_group([0, 1]), "cpu", mesh_dim_names=("tp",))
    else:
        mesh = make_mesh((2,), ("tp",))
    if not rank0_first:
        return run_program(program, mesh, one_rank=one_rank)
    cache_dir = os.environ["TORCHINDUCTOR_CACHE_DIR"]
    wait = (lambda: wait_for_aot_entry(cache_dir)) if dist.get_rank() != 0 else (lambda: None)
    # The backward is compiled with the forward (it is lazy by default, and
    # the AOTAutograd entry is written after it), so rank 0's entry is on disk
    # before its compiled forward waits for rank 1 in a collective.
    with observe.functorch_config().patch(force_non_lazy_backward_lowering=True):
        return run_program(program, mesh, one_rank=one_rank, before_compile=wait)


if __name__ == "__main__":
    options = json.loads(sys.argv[1])
    entry = {"fake": fake_world_run, "cube": cube_world_run}[options.pop("world", "fake")]
    print(json.dumps(entry(**options)))
