"""Multi-rank numerics: compiled DTensor models and programs against eager,
forward and backward, on every rank of a real world, with the collectives
each captured graph must contain.

A :class:`Check` names what to run (a model from
:mod:`dynamo_dist.demo.models` or a program from :data:`PROGRAMS`, on
the 1-D or the 2-D mesh, with one compile backend). :func:`run_checks` runs a
whole batch inside one rank of an initialised world (spawning a world is the
slow part) and returns one :class:`CheckResult` per check; it is what the
test suite hands to :func:`dynamo_dist.testing.run_in_world`::

    checks = checks_for_world(4)
    per_rank = run_in_world(run_checks, 4, checks)

Each check: build the eager and the compiled inputs identically, run the
function eagerly, then compiled with :class:`~dynamo_dist.diagnostics.backend.CaptureBackend`
(with ``dynamo_dist`` installed unless ``plugin=False``); ``loss.backward()``
runs outside the compiled function, as users write it. Outputs, input
gradients and parameter gradients (local shards and placements) must equal
eager (``torch.testing.assert_close``) on every step; the forward and
backward graphs must contain exactly the expected collectives (as a
multiset), each naming the process group of its mesh dim and each waited on.
"""

from __future__ import annotations

import collections
import time
import traceback
from dataclasses import dataclass, field
from typing import Any, Callable, Sequence

import torch
import torch.distributed as dist
from torch.distributed.device_mesh import init_device_mesh
from torch.distributed.tensor import DTensor, Partial, Replicate, Shard
from torch.distributed.tensor.placement_types import _StridedShard

import dynamo_dist
from dynamo_dist._compat import observe as O
from dynamo_dist.demo.models import MODELS, SIZES, build_model, local_input, make_input
from dynamo_dist.diagnostics.backend import CaptureBackend

__all__ = [
    "Check",
    "CheckResult",
    "ProgramSpec",
    "PROGRAMS",
    "MODEL_COLLECTIVES",
    "checks_for_world",
    "run_checks",
    "make_meshes",
]

# One expected collective: (op, mesh dim name).
Expected = tuple[tuple[str, str], ...]

STEPS = 2  # calls per check; the second, with new values, must reuse the graph


@dataclass(frozen=True)
class Check:
    """One numerics check: ``kind`` is ``"model"`` or ``"program"``,
    ``name`` a key of ``models.MODELS`` or :data:`PROGRAMS`, ``mesh``
    ``"1d"`` (all ranks, dim ``"tp"``) or ``"2d"`` (``(2, n/2)``, dims
    ``("dp", "tp")``; models are tensor-parallel on ``"tp"``)."""

    kind: str
    name: str
    mesh: str
    backend: str

    @property
    def id(self) -> str:
        return f"{self.kind}:{self.name}-{self.mesh}-{self.backend}"


@dataclass
class CheckResult:
    """What one rank saw for one check (plain data, picklable)."""

    check: Check
    rank: int
    problems: list[str] = field(default_factory=list)
    graph_breaks: int = 0
    compiles: int = 0  # graphs compiled on the first call
    recompiles: int = 0  # graphs compiled on later calls
    forward: list[list[str]] = field(default_factory=list)  # collectives per forward graph
    backward: list[list[str]] = field(default_factory=list)
    groups: dict[str, str] = field(default_factory=dict)  # mesh dim name -> group name
    max_abs_diff: float = 0.0
    seconds: float = 0.0

    @property
    def ok(self) -> bool:
        return not self.problems

    def report(self) -> str:
        head = f"{self.check.id} on rank {self.rank}: " + ("ok" if self.ok else "FAILED")
        lines = [head, f"  graph breaks {self.graph_breaks}, compiles {self.compiles}, "
                       f"recompiles {self.recompiles}, max |compiled - eager| {self.max_abs_diff:.3g}",
                 f"  groups {self.groups}", f"  forward collectives {self.forward}",
                 f"  backward collectives {self.backward}"]
        lines += [f"  - {p}" for p in self.problems]
        return "\n".join(lines)


# ---------------------------------------------------------------------------
# DTensor programs. Each takes this rank's local tensor and a mesh, builds
# DTensors inside the compiled region and returns plain tensors.


def shard_to_replicate(x: torch.Tensor, mesh) -> torch.Tensor:

    d = DTensor.from_local(x, mesh, [Shard(0)]) * 2 + 1
    return d.redistribute(mesh, [Replicate()]).to_local().sin()


def partial_to_replicate(x: torch.Tensor, mesh) -> torch.Tensor:

    d = DTensor.from_local(x, mesh, [Partial()])
    return d.redistribute(mesh, [Replicate()]).to_local().sin()


def partial_to_shard(x: torch.Tensor, mesh) -> torch.Tensor:

    d = DTensor.from_local(x, mesh, [Partial()])
    return d.redistribute(mesh, [Shard(0)]).to_local().sin()


def shard0_to_shard1(x: torch.Tensor, mesh) -> torch.Tensor:

    d = DTensor.from_local(x, mesh, [Shard(0)])
    return d.redistribute(mesh, [Shard(1)]).to_local().sin()


def strided_shard_to_replicate(x: torch.Tensor, mesh) -> torch.Tensor:

    d = DTensor.from_local(x, mesh, [_StridedShard(0, split_factor=2)])
    return d.redistribute(mesh, [Replicate()]).to_local().sin()


def matmul_partial_full_tensor(x: torch.Tensor, mesh) -> torch.Tensor:
    """DTensor math: Shard(1) @ Shard(0) is Partial; ``full_tensor`` all-reduces."""

    a = DTensor.from_local(x, mesh, [Shard(1)])
    b = DTensor.from_local(x.t().contiguous() * 0.5, mesh, [Shard(0)])
    return (a @ b).full_tensor().sin()


def submesh_shard_to_replicate(x: torch.Tensor, mesh) -> torch.Tensor:
    """The submesh is taken inside the compiled region."""

    tp = mesh["tp"]
    d = DTensor.from_local(x, tp, [Shard(0)])
    return d.redistribute(tp, [Replicate()]).to_local().sin()


def shard_partial_2d(x: torch.Tensor, mesh) -> torch.Tensor:
    """[Shard(0), Partial()] -> [Replicate(), Shard(1)]: an all-gather on dp
    and a reduce-scatter on tp."""

    d = DTensor.from_local(x, mesh, [Shard(0), Partial()])
    return d.redistribute(mesh, [Replicate(), Shard(1)]).to_local().sin()


def partial_partial_2d(x: torch.Tensor, mesh) -> torch.Tensor:

    d = DTensor.from_local(x, mesh, [Partial(), Partial()])
    return d.redistribute(mesh, [Replicate(), Replicate()]).to_local().sin()


def shard0_to_shard1_2d(x: torch.Tensor, mesh) -> torch.Tensor:

    d = DTensor.from_local(x, mesh, [Replicate(), Shard(0)])
    return d.redistribute(mesh, [Replicate(), Shard(1)]).to_local().sin()


def strided_shard_2d(x: torch.Tensor, mesh) -> torch.Tensor:
    """The FSDP2 + TP layout: [_StridedShard(0, split_factor=2), Shard(0)],
    gathered with ``full_tensor``."""

    d = DTensor.from_local(x, mesh, [_StridedShard(0, split_factor=2), Shard(0)])
    return d.full_tensor().sin()


@dataclass(frozen=True)
class ProgramSpec:
    """A DTensor program and the collectives its graphs must hold:
    ``forward``/``backward`` are ``(op, mesh dim name)`` pairs;
    ``forward_cuda``/``backward_cuda`` replace them on CUDA where DTensor
    picks other collectives there (all-to-all instead of gloo's all-gather)."""

    fn: Callable[[torch.Tensor, Any], torch.Tensor]
    mesh: str
    forward: Expected
    backward: Expected = ()
    forward_cuda: Expected | None = None
    backward_cuda: Expected | None = None
    local_shape: tuple[int, int] = (8, 8)

    def expected(self, device_type: str) -> tuple[Expected, Expected]:
        if device_type == "cuda":
            return (self.forward if self.forward_cuda is None else self.forward_cuda,
                    self.backward if self.backward_cuda is None else self.backward_cuda)
        return self.forward, self.backward


AG, AR, RS, A2A = "all_gather_into_tensor", "all_reduce", "reduce_scatter_tensor", "all_to_all_single"

PROGRAMS: dict[str, ProgramSpec] = {
    "shard_to_replicate": ProgramSpec(shard_to_replicate, "1d", ((AG, "tp"),)),
    "partial_to_replicate": ProgramSpec(partial_to_replicate, "1d", ((AR, "tp"),)),
    "partial_to_shard": ProgramSpec(partial_to_shard, "1d", ((RS, "tp"),), ((AG, "tp"),)),
    # gloo has no all-to-all: DTensor all-gathers and chunks on CPU.
    "shard0_to_shard1": ProgramSpec(shard0_to_shard1, "1d", ((AG, "tp"),), ((AG, "tp"),),
                                    ((A2A, "tp"),), ((A2A, "tp"),)),
    "strided_shard_to_replicate": ProgramSpec(strided_shard_to_replicate, "1d", ((AG, "tp"),)),
    "matmul_partial_full_tensor": ProgramSpec(matmul_partial_full_tensor, "1d", ((AR, "tp"),)),
    "submesh_shard_to_replicate": ProgramSpec(submesh_shard_to_replicate, "2d", ((AG, "tp"),)),
    "shard_partial_2d": ProgramSpec(shard_partial_2d, "2d", ((RS, "tp"), (AG, "dp")), ((AG, "tp"),)),
    "partial_partial_2d": ProgramSpec(partial_partial_2d, "2d", ((AR, "dp"), (AR, "tp"))),
    "shard0_to_shard1_2d": ProgramSpec(shard0_to_shard1_2d, "2d", ((AG, "tp"),), ((AG, "tp"),),
                                       ((A2A, "tp"),), ((A2A, "tp"),)),
    "strided_shard_2d": ProgramSpec(strided_shard_2d, "2d", ((AG, "dp"), (AG, "tp"))),
}

# Collectives of the tensor-parallel models (all on "tp"); the input
# requires grad, so the backward all-reduces the Colwise input's gradient.
MODEL_COLLECTIVES: dict[str, tuple[Expected, Expected]] = {
    "mlp": (((AR, "tp"),), ((AR, "tp"),)),
    "sp_block": (((AG, "tp"), (RS, "tp")), ((AG, "tp"), (RS, "tp"))),
    # forward: attention's and the MLP's Rowwise outputs; backward: the
    # gradients of the four Colwise inputs (wq, wk, wv, w1).
    "transformer": (((AR, "tp"),) * 2, ((AR, "tp"),) * 4),
}

# Which checks use inductor (slow to compile on CPU): a model and a program
# per world; aot_eager runs everything.
INDUCTOR_CHECKS: dict[int, tuple[tuple[str, str, str], ...]] = {
    2: (("model", "mlp", "1d"), ("program", "partial_to_shard", "1d")),
    4: (("model", "transformer", "2d"), ("program", "shard_partial_2d", "2d")),
}


def checks_for_world(world_size: int, backends: Sequence[str] = ("aot_eager", "inductor")) -> list[Check]:
    """The batch run in one world of ``world_size`` ranks: every model on
    every mesh the world has and every program, under ``aot_eager``; a subset
    (:data:`INDUCTOR_CHECKS`) under ``inductor``."""

    meshes = ["1d"] + (["2d"] if world_size >= 4 and world_size % 2 == 0 else [])
    checks: list[Check] = []
    if "aot_eager" in backends:
        for mesh in meshes:
            checks += [Check("model", name, mesh, "aot_eager") for name in MODELS]
            checks += [Check("program", name, mesh, "aot_eager") for name, spec in PROGRAMS.items()
                       if spec.mesh == mesh]
    if "inductor" in backends:
        subset = INDUCTOR_CHECKS.get(world_size, INDUCTOR_CHECKS[2])
        checks += [Check(kind, name, mesh, "inductor") for kind, name, mesh in subset if mesh in meshes]
    return checks


def make_meshes(device_type: str = "cpu") -> dict[str, Any]:
    """The 1-D mesh over the world (dim ``"tp"``) and, for an even world of
    4 or more, the 2-D ``(2, n/2)`` mesh (dims ``("dp", "tp")``)."""

    n = dist.get_world_size()
    meshes = {"1d": init_device_mesh(device_type, (n,), mesh_dim_names=("tp",))}
    if n >= 4 and n % 2 == 0:
        meshes["2d"] = init_device_mesh(device_type, (2, n // 2), mesh_dim_names=("dp", "tp"))
    return meshes


# ---------------------------------------------------------------------------
# Running checks.


def _local(t: torch.Tensor) -> torch.Tensor:
    return t.to_local() if hasattr(t, "to_local") else t


def _graph_breaks() -> int:

    return O.graph_break_count()


class _Diff:
    """assert_close with the largest difference seen kept."""

    def __init__(self) -> None:
        self.max = 0.0

    def __call__(self, actual: torch.Tensor, expected: torch.Tensor, what: str) -> None:
        actual, expected = _local(actual), _local(expected)
        if actual.shape == expected.shape:
            self.max = max(self.max, (actual.detach() - expected.detach()).abs().max().item() if actual.numel() else 0.)
        torch.testing.assert_close(actual, expected, msg=lambda m: f"{what}: {m}")


def _check_collectives(result: CheckResult, capture, expected: tuple[Expected, Expected]) -> None:
    for phase, graphs, want in (("forward", capture.forward_collectives, expected[0]),
                                ("backward", capture.backward_collectives, expected[1])):
        if not graphs:
            result.problems.append(f"no {phase} graph was captured")
            continue
        got = [c for graph in graphs for c in graph if c.op != "wait_tensor"]
        want_named = collections.Counter((op, result.groups[dim]) for op, dim in want)
        # DTensor's synchronous all-to-all op counts as all_to_all_single.
        got_named = collections.Counter((A2A if c.op == "shard_dim_alltoall" else c.op, c.group) for c in got)
        if got_named != want_named:
            result.problems.append(
                f"{phase} collectives {sorted(got_named.elements())} != expected {sorted(want_named.elements())} "
                f"(groups: {result.groups})")
        unwaited = [str(c) for c in got if c.waited is False]
        if unwaited:
            result.problems.append(f"{phase} collectives without wait_tensor: {unwaited}")


def _run_model(check: Check, mesh, result: CheckResult, capture, diff: _Diff, device: torch.device) -> None:

    config = SIZES["small"]
    tp = mesh["tp"] if mesh.ndim == 2 else mesh
    dp = mesh.get_local_rank("dp") if mesh.ndim == 2 else 0
    reference = build_model(check.name, config, device=device)
    eager = build_model(check.name, config, mesh=tp, device=device)
    model = build_model(check.name, config, mesh=tp, device=device)
    compiled = torch.compile(model, backend=capture)
    for step in range(STEPS):
        full = make_input(config, seed=1 + step + 100 * dp, device=device)
        x = local_input(check.name, full, tp)
        x_eager, x_comp = x.clone().requires_grad_(), x.clone().requires_grad_()
        out_eager = eager(x_eager)
        out_eager.pow(2).sum().backward()
        if step == 0:  # the eager tensor-parallel model itself is right
            x_ref = full.clone().requires_grad_()
            out_ref = reference(x_ref)
            out_ref.pow(2).sum().backward()
            torch.testing.assert_close(out_eager, local_input(check.name, out_ref, tp),
                                       msg=lambda m: f"eager tensor-parallel model != single-device model: {m}")
        out = compiled(x_comp)
        if step == 0:
            result.compiles = capture.compiles
        out.pow(2).sum().backward()  # outside the compiled region
        diff(out, out_eager, f"step {step} output")
        diff(x_comp.grad, x_eager.grad, f"step {step} input grad")
        for (name, p_eager), (_, p) in zip(eager.named_parameters(), model.named_parameters()):
            if p.grad is None or p_eager.grad is None:
                raise AssertionError(f"step {step} {name}.grad: compiled {p.grad is not None}, "
                                     f"eager {p_eager.grad is not None}")
            diff(p.grad, p_eager.grad, f"step {step} {name}.grad")
            if getattr(p.grad, "placements", None) != getattr(p_eager.grad, "placements", None):
                raise AssertionError(f"step {step} {name}.grad placements {p.grad.placements} "
                                     f"!= eager {p_eager.grad.placements}")
        eager.zero_grad(set_to_none=True)
        model.zero_grad(set_to_none=True)


def _run_program(check: Check, mesh, result: CheckResult, capture, diff: _Diff, device: torch.device) -> None:

    spec = PROGRAMS[check.name]
    compiled = torch.compile(spec.fn, backend=capture, fullgraph=True)
    for step in range(STEPS):
        gen = torch.Generator().manual_seed(1000 * step + dist.get_rank())
        x = torch.randn(*spec.local_shape, generator=gen).to(device)
        x_eager, x_comp = x.clone().requires_grad_(), x.clone().requires_grad_()
        out_eager = spec.fn(x_eager, mesh)
        out_eager.pow(2).sum().backward()
        out = compiled(x_comp, mesh)
        if step == 0:
            result.compiles = capture.compiles
        out.pow(2).sum().backward()
        diff(out, out_eager, f"step {step} output")
        diff(x_comp.grad, x_eager.grad, f"step {step} input grad")


def _run_one(check: Check, meshes: dict[str, Any], device: torch.device) -> CheckResult:


    result = CheckResult(check, dist.get_rank())
    mesh = meshes[check.mesh]
    result.groups = {name: mesh.get_group(name).group_name for name in mesh.mesh_dim_names}
    if check.kind == "model":
        expected = MODEL_COLLECTIVES[check.name]
    else:
        expected = PROGRAMS[check.name].expected(device.type)
    O.reset_dynamo()
    capture = CaptureBackend(check.backend)
    diff = _Diff()
    breaks = _graph_breaks()
    start = time.perf_counter()
    try:
        (_run_model if check.kind == "model" else _run_program)(check, mesh, result, capture, diff, device)
    except AssertionError as e:
        result.problems.append(f"mismatch with eager: {e}")
    except Exception:
        result.problems.append("error:\n" + traceback.format_exc(limit=-12))
    result.seconds = time.perf_counter() - start
    result.graph_breaks = _graph_breaks() - breaks
    result.recompiles = max(0, capture.compiles - result.compiles)
    result.max_abs_diff = diff.max
    result.forward = [[str(c) for c in g] for g in capture.forward_collectives]
    result.backward = [[str(c) for c in g] for g in capture.backward_collectives]
    if not result.problems:
        if result.graph_breaks:
            result.problems.append(f"{result.graph_breaks} graph break(s)")
        if result.recompiles:
            result.problems.append(f"{result.recompiles} recompile(s) on a call with new values, same shapes")
        _check_collectives(result, capture, expected)
    O.reset_dynamo()
    return result


def run_checks(checks: Sequence[Check], plugin: bool = True, device_type: str = "cpu") -> list[CheckResult]:
    """Run ``checks`` on this rank of the initialised default world (with
    ``dynamo_dist`` installed unless ``plugin=False``; uninstalled after).
    Every rank must run the same checks in the same order."""

    device = torch.device(device_type, torch.cuda.current_device()) if device_type == "cuda" \
        else torch.device(device_type)
    meshes = make_meshes(device_type)
    if plugin:
        dynamo_dist.install()
    try:
        return [_run_one(check, meshes, device) for check in checks]
    finally:
        if plugin:
            dynamo_dist.uninstall()
