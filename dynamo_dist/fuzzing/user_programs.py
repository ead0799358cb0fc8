"""The programs users write, as generated source: the ``stock`` property's grammar.

A program is a function ``f(x, mesh)`` (``f(x, mesh, model)`` with a model)
of a plain local tensor ``x`` on each rank of a 2-rank world, written as
training code is: plain tensors turned into DTensors by ``DTensor.from_local``
(every placement kind, ``run_check`` both ways) or ``distribute_tensor``,
DTensor math, redistributes (``async_op=True`` too), ``to_local`` /
``full_tensor``, ``torch._dynamo.graph_break()`` between DTensor ops (a
DTensor is then a graph's output and the next graph's input), regions under
``loss_parallel()`` and ``implicit_replication()``, torch.distributed calls
(``DIST_CALLS``: c10d's and the functional collectives) and, in about a third
of the programs, a ``parallelize_module`` model (``MODELS``: ColwiseParallel,
RowwiseParallel, SequenceParallel, PrepareModuleInput, ``use_local_output``
both ways) whose input and output hooks run inside the compiled function. The
program returns its last value (a DTensor, its local tensor or its full
tensor, or a plain tensor).

Being text, a program is written verbatim into a reproducer script. A
model's source is part of it: ``model_of(mesh)`` builds and parallelizes the
model (seeded, so every build holds the same weights).

The generator tracks what the current value is (a plain tensor or a DTensor,
its number of dims, the mesh it lives on) so that every statement is valid
for it, whatever sizes the calls pass: sizes are never written as literals.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable

from hypothesis import strategies as st

from .specs import MeshSpec, Program

# ---------------------------------------------------------------------------
# The meshes: every layout of the 2-rank world.

MESHES: tuple[MeshSpec, ...] = (
    MeshSpec((2,)),
    MeshSpec((2,), ("tp",)),
    MeshSpec((1, 2), ("dp", "tp")),
    MeshSpec((2, 1), ("dp", "tp")),
)

# The reduce ops of the Partial placements ``from_local`` is given.
PARTIAL_OPS: tuple[str, ...] = ("sum", "avg", "max", "min")


# ---------------------------------------------------------------------------
# torch.distributed calls: one row each.


@dataclass(frozen=True)
class DistCall:
    """A torch.distributed call as the lines of a statement on the current
    plain tensor. ``groups``: which group arguments fit (``"c10d"``: none (the
    default group) or a process group, as ``{group}``, a keyword argument with
    its leading comma, or ``{group_only}``, the same without the comma;
    ``"funcol"``: a process group, a 1-D mesh or ``(mesh, dim)``, as ``{g}``;
    ``"world"``: the default group only). Placeholders: ``{x}`` the tensor
    (assigned again where the call's result feeds back), ``{s}``, ``{o}``
    fresh names, ``{w}`` the group's size. ``min_ndim``: the fewest dims the
    tensor needs. c10d's calls work on a detached copy (they have no
    gradient: training loops call them on metrics); the ``_autograd``
    functional collectives keep the gradient path."""

    groups: str
    lines: tuple[str, ...]
    min_ndim: int = 0


DIST_CALLS: dict[str, DistCall] = {
    # c10d collectives, in place on a detached copy.
    "dist.all_reduce": DistCall("c10d", (
        "{s} = {x}.detach().sum()", "dist.all_reduce({s}{group})", "{x} = {x} + {s}")),
    "dist.all_reduce(op=MAX)": DistCall("c10d", (
        "{s} = {x}.detach().amax()", "dist.all_reduce({s}, op=dist.ReduceOp.MAX{group})", "{x} = {x} + {s}")),
    "dist.all_reduce(async_op=True)": DistCall("c10d", (
        "{s} = {x}.detach().sum()", "dist.all_reduce({s}{group}, async_op=True).wait()", "{x} = {x} + {s}")),
    "dist.broadcast": DistCall("c10d", (
        "{s} = {x}.detach().sum()", "dist.broadcast({s}, group_src=0{group})", "{x} = {x} + {s}")),
    "dist.all_gather": DistCall("c10d", (
        "{s} = {x}.detach().sum()", "{o} = [torch.zeros_like({s}) for _ in range({w})]",
        "dist.all_gather({o}, {s}{group})", "{x} = {x} + torch.stack({o}).sum()")),
    "dist.all_gather_into_tensor": DistCall("c10d", (
        "{s} = {x}.detach().reshape(-1)", "{o} = {s}.new_zeros({s}.numel() * {w})",
        "dist.all_gather_into_tensor({o}, {s}{group})", "{x} = {x} + {o}.sum()")),
    "dist.reduce_scatter_tensor": DistCall("c10d", (
        "{s} = {x}.detach().reshape(-1)", "{o} = torch.zeros_like({s})",
        "dist.reduce_scatter_tensor({o}, {s}.repeat({w}){group})", "{x} = {x} + {o}.sum()")),
    "dist.all_to_all_single": DistCall("c10d", (
        "{s} = {x}.detach().reshape(-1).repeat({w})", "{o} = torch.zeros_like({s})",
        "dist.all_to_all_single({o}, {s}{group})", "{x} = {x} + {o}.sum()")),
    "dist.barrier": DistCall("c10d", ("dist.barrier({group_only})",)),
    "dist.all_gather_object": DistCall("c10d", (
        "{o} = [None] * {w}", "dist.all_gather_object({o}, dist.get_rank(){group})", "{x} = {x} + sum({o})")),
    "dist.broadcast_object_list": DistCall("c10d", (
        "{o} = [dist.get_rank()]", "dist.broadcast_object_list({o}, group_src=0{group})", "{x} = {x} + {o}[0]")),
    "dist.get_rank, dist.get_world_size": DistCall("c10d", (
        "{x} = {x} * dist.get_world_size({group_only}) + dist.get_rank({group_only})",)),
    "dist.send / dist.recv": DistCall("world", (
        "{s} = {x}.detach().clone()",
        "if dist.get_rank() == 0:",
        "    dist.send({s}, dst=1)",
        "else:",
        "    dist.recv({s}, src=0)",
        "{x} = {x} + {s}")),
    "dist.isend / dist.irecv": DistCall("world", (
        "{s} = {x}.detach().clone()",
        "if dist.get_rank() == 0:",
        "    dist.isend({s}, dst=1).wait()",
        "else:",
        "    dist.irecv({s}, src=0).wait()",
        "{x} = {x} + {s}")),
    # Functional collectives: on a detached copy, or (the _autograd ones) on the gradient path.
    "funcol.all_reduce": DistCall("funcol", ("{x} = {x} + funcol.all_reduce({x}.detach(), 'sum', {g})",)),
    "funcol.all_gather_tensor": DistCall("funcol", (
        "{x} = {x} + funcol.all_gather_tensor({x}.detach(), 0, {g}).sum()",), min_ndim=1),
    "funcol.reduce_scatter_tensor": DistCall("funcol", (
        "{x} = {x} + funcol.reduce_scatter_tensor(torch.cat([{x}.detach()] * {w}), 'sum', 0, {g})",), min_ndim=1),
    "funcol.all_to_all_single": DistCall("funcol", (
        "{x} = {x} + funcol.all_to_all_single(torch.cat([{x}.detach()] * {w}), None, None, {g}).sum()",),
        min_ndim=1),
    "funcol.broadcast": DistCall("funcol", ("{x} = {x} + funcol.broadcast({x}.detach(), 0, {g})",)),
    "funcol.all_gather_tensor_autograd": DistCall("funcol", (
        "{x} = funcol.all_gather_tensor_autograd({x}, 0, {g})",), min_ndim=1),
    "funcol.reduce_scatter_tensor_autograd": DistCall("funcol", (
        "{x} = funcol.reduce_scatter_tensor_autograd(torch.cat([{x}] * {w}), 'sum', 0, {g})",), min_ndim=1),
    "funcol.all_to_all_single_autograd": DistCall("funcol", (
        "{x} = funcol.all_to_all_single_autograd(torch.cat([{x}] * {w}), None, None, {g})",), min_ndim=1),
}


def _groups(groups: str, mesh: MeshSpec) -> list[tuple[dict[str, str], int]]:
    """The group arguments a call whose ``groups`` are these takes on ``mesh``: (the
    placeholders' text, the group's size)."""
    world = 2
    if groups == "world":
        return [({"group": "", "group_only": ""}, world)]
    dims = range(len(mesh.shape))
    if groups == "c10d":
        out = [({"group": "", "group_only": ""}, world),
               ({"group": ", group=dist.group.WORLD", "group_only": "group=dist.group.WORLD"}, world)]
        for i in dims:
            out.append(({"group": f", group=mesh.get_group({i})", "group_only": f"group=mesh.get_group({i})"},
                        mesh.shape[i]))
        return out
    out = [({"g": "dist.group.WORLD"}, world)]
    for i in dims:
        out.append(({"g": f"mesh.get_group({i})"}, mesh.shape[i]))
        out.append(({"g": f"(mesh, {i})"}, mesh.shape[i]))
    if len(mesh.shape) == 1:
        out.append(({"g": "mesh"}, mesh.shape[0]))
    return out


# ---------------------------------------------------------------------------
# parallelize_module models: one recipe each.

# Sizes of the models' layers: the input's last dim, the hidden dim, the vocabulary.
HIDDEN, FFN, VOCAB = 4, 8, 8


@dataclass(frozen=True)
class ModelOut:
    """What a model returns: a plain tensor or a DTensor (on ``mesh_code``),
    of ``ndim`` dims; ``input`` says how its input is laid out (for the
    reader: ``"replicated"``, ``"sequence shards"`` or ``"batch shards"``)."""

    dtensor: bool
    ndim: int
    input: str


@dataclass
class _Model:
    layers: list[str]
    plan: dict[str, str]
    out: ModelOut


def _mlp(draw: Any, ndim: int) -> _Model:
    use_local = draw(st.booleans())
    return _Model([f"torch.nn.Linear({HIDDEN}, {FFN})", "torch.nn.ReLU()", f"torch.nn.Linear({FFN}, {HIDDEN})"],
                  {"0": "ColwiseParallel()", "2": f"RowwiseParallel(use_local_output={use_local})"},
                  ModelOut(not use_local, ndim, "replicated"))


def _sequence_parallel(draw: Any, ndim: int) -> _Model:
    use_local = draw(st.booleans())
    return _Model([f"torch.nn.LayerNorm({HIDDEN})", f"torch.nn.Linear({HIDDEN}, {FFN})", "torch.nn.GELU()",
                   f"torch.nn.Linear({FFN}, {HIDDEN})"],
                  {"0": "SequenceParallel()", "1": "ColwiseParallel(input_layouts=Shard(1))",
                   "3": f"RowwiseParallel(output_layouts=Shard(1), use_local_output={use_local})"},
                  ModelOut(not use_local, ndim, "sequence shards"))


def _head(draw: Any, ndim: int) -> _Model:
    use_local = draw(st.booleans())
    return _Model([f"torch.nn.Linear({HIDDEN}, {VOCAB})"],
                  {"0": f"ColwiseParallel(use_local_output={use_local})"},
                  ModelOut(not use_local, ndim, "replicated"))


def _prepared_mlp(draw: Any, ndim: int) -> _Model:
    use_local_in = draw(st.booleans())
    use_local = draw(st.booleans())
    return _Model(["torch.nn.Identity()", f"torch.nn.Linear({HIDDEN}, {FFN})", "torch.nn.ReLU()",
                   f"torch.nn.Linear({FFN}, {HIDDEN})"],
                  {"0": "PrepareModuleInput(input_layouts=(Shard(0),), desired_input_layouts=(Replicate(),), "
                        f"use_local_output={use_local_in})",
                   "1": "ColwiseParallel()", "3": f"RowwiseParallel(use_local_output={use_local})"},
                  ModelOut(not use_local, ndim, "batch shards"))


# recipe -> (its builder, the input dims it takes)
MODELS: dict[str, tuple[Callable[[Any, int], _Model], tuple[int, ...]]] = {
    "tensor-parallel MLP": (_mlp, (2, 3)),
    "sequence-parallel block": (_sequence_parallel, (3,)),
    "vocabulary-parallel head": (_head, (2, 3)),
    "PrepareModuleInput, then an MLP": (_prepared_mlp, (2, 3)),
}


def _model_source(model: _Model, seed: int, tp_mesh: str) -> str:
    layers = ",\n        ".join(model.layers)
    plan = ", ".join(f"{k!r}: {v}" for k, v in model.plan.items())
    return (f"def model_of(mesh):\n"
            f"    torch.manual_seed({seed})\n"
            f"    model = torch.nn.Sequential(\n        {layers},\n    )\n"
            f"    return parallelize_module(model, {tp_mesh}, {{{plan}}})\n")


# ---------------------------------------------------------------------------
# The statement grammar.

# The statements (names for ``user_programs(statements=...)``).
STATEMENTS: tuple[str, ...] = (
    "math", "from_local", "distribute_tensor", "redistribute", "to_local", "full_tensor", "sum", "transpose",
    "query", "graph_break", "implicit_replication", "loss_parallel", "dist",
)


# How often a statement is drawn where it applies, against 1 for the others:
# programs make DTensors from plain tensors and work on them.
WEIGHTS = {"from_local": 3, "redistribute": 2, "math": 2}


@dataclass
class _State:
    dtensor: bool
    ndim: int
    mesh_ndim: int = 1  # the dims of the mesh a DTensor lives on
    grad: bool = False  # the value requires grad


@dataclass
class _Builder:
    mesh: MeshSpec
    statements: tuple[str, ...]
    dist_calls: tuple[str, ...]
    state: _State
    fresh: bool = True  # x is still the input (a leaf), or made by no statement yet
    lines: list[str] = field(default_factory=list)
    counter: int = 0

    def new_name(self) -> str:
        self.counter += 1
        return f"v{self.counter}"

    def emit(self, *lines: str, indent: int = 1) -> None:
        self.lines.extend("    " * indent + line for line in lines)
        self.fresh = False

    def meshes(self) -> list[tuple[str, int]]:
        """The mesh expressions a DTensor can be made on: the mesh, and a
        submesh of each named dim (taken inside the function)."""
        out = [("mesh", len(self.mesh.shape))]
        if self.mesh.names and len(self.mesh.shape) > 1:
            out += [(f"mesh[{n!r}]", 1) for n in self.mesh.names]
        return out

    def placements(self, draw: Any, mesh_ndim: int, ndim: int, partial: bool) -> str:
        options = ["Replicate()"] + [f"Shard({i})" for i in range(ndim)]
        if partial:
            options += [f"Partial({op!r})" for op in PARTIAL_OPS]
        return "[" + ", ".join(draw(st.sampled_from(options)) for _ in range(mesh_ndim)) + "]"

    def applicable(self) -> list[str]:
        s = self.state
        ok = []
        for name in self.statements:
            if name in ("math", "graph_break"):
                ok.append(name)
            elif name == "from_local":
                if not s.dtensor:
                    ok.append(name)
            elif name == "distribute_tensor":
                # eager distributes leaves only, when they require grad
                if not s.dtensor and (self.fresh or not s.grad):
                    ok.append(name)
            elif name == "dist":
                if not s.dtensor and any(DIST_CALLS[c].min_ndim <= s.ndim for c in self.dist_calls):
                    ok.append(name)
            elif not s.dtensor:
                continue
            elif name in ("sum", "implicit_replication"):
                if s.ndim >= 1:
                    ok.append(name)
            elif name == "transpose":
                if s.ndim >= 2:
                    ok.append(name)
            elif name == "loss_parallel":
                if s.ndim == 2 and s.mesh_ndim == 1:
                    ok.append(name)
            else:
                ok.append(name)
        return ok

    def statement(self, draw: Any) -> None:
        options = [name for name in self.applicable() for _ in range(WEIGHTS.get(name, 1))]
        if not options:
            return
        name = draw(st.sampled_from(options))
        getattr(self, "_" + name)(draw)

    # -- the statements ---------------------------------------------------------
    def _math(self, draw: Any) -> None:
        v = "d" if self.state.dtensor else "x"
        expr = draw(st.sampled_from(["{v} * 2", "{v} + 1", "{v}.sin()", "torch.relu({v})", "{v} * {v}", "-{v}",
                                     "{v} + {v}", "torch.tanh({v}) * 3"]))
        self.emit(f"{v} = {expr.format(v=v)}")

    def _from_local(self, draw: Any) -> None:
        code, mesh_ndim = draw(st.sampled_from(self.meshes()))
        ps = self.placements(draw, mesh_ndim, self.state.ndim, partial=True)
        check = draw(st.booleans())
        self.emit(f"d = DTensor.from_local(x, {code}, {ps}, run_check={check})")
        self.state = _State(True, self.state.ndim, mesh_ndim, self.state.grad)

    def _distribute_tensor(self, draw: Any) -> None:
        code, mesh_ndim = draw(st.sampled_from(self.meshes()))
        ps = self.placements(draw, mesh_ndim, self.state.ndim, partial=False)
        self.emit(f"d = distribute_tensor(x, {code}, {ps})")
        self.state = _State(True, self.state.ndim, mesh_ndim, self.state.grad)

    def _redistribute(self, draw: Any) -> None:
        s = self.state
        ps = self.placements(draw, s.mesh_ndim, s.ndim, partial=False)
        asynchronous = ", async_op=True" if draw(st.integers(0, 3)) == 0 else ""
        self.emit(f"d = d.redistribute(d.device_mesh, {ps}{asynchronous})")

    def _to_local(self, draw: Any) -> None:
        self.emit("x = d.to_local()")
        self.state = _State(False, self.state.ndim, grad=self.state.grad)

    def _full_tensor(self, draw: Any) -> None:
        self.emit("x = d.full_tensor()")
        self.state = _State(False, self.state.ndim, grad=self.state.grad)

    def _sum(self, draw: Any) -> None:
        s = self.state
        if s.ndim >= 2 and draw(st.booleans()):
            self.emit(f"d = d.sum({draw(st.integers(0, s.ndim - 1))})")
            s.ndim -= 1
        else:
            self.emit("d = d.sum()")
            s.ndim = 0

    def _transpose(self, draw: Any) -> None:
        self.emit("d = d.transpose(0, 1)")

    def _query(self, draw: Any) -> None:
        self.emit("d = " + draw(st.sampled_from([
            "d * d.device_mesh.size()",
            "d + len(d.placements)",
            "d + sum(p.is_shard() for p in d.placements)",
            "d * (2 if d.placements[0].is_replicate() else 3)",
            "d + d.device_mesh.get_local_rank(0)",
        ])))

    def _graph_break(self, draw: Any) -> None:
        self.emit("torch._dynamo.graph_break()")

    def _implicit_replication(self, draw: Any) -> None:
        self.emit("with implicit_replication():",
                  "    d = d * torch.arange(d.shape[-1], dtype=d.dtype) + 1")

    def _loss_parallel(self, draw: Any) -> None:
        t = self.new_name()
        self.emit("d = d.redistribute(d.device_mesh, [Shard(1)])",
                  f"{t} = torch.arange(d.shape[0]) % d.shape[1]",
                  "with loss_parallel():",
                  f"    d = torch.nn.functional.cross_entropy(d, {t})")
        if self.state.grad and draw(st.integers(0, 2)) == 0:  # the backward inside, as a training step does it
            self.emit("    d.backward()")
            self.emit("d = d.detach()")
            self.state.grad = False
        self.state.ndim = 0

    def _dist(self, draw: Any) -> None:
        calls = [c for c in self.dist_calls if DIST_CALLS[c].min_ndim <= self.state.ndim]
        call = DIST_CALLS[draw(st.sampled_from(calls))]
        group, size = draw(st.sampled_from(_groups(call.groups, self.mesh)))
        names = {"x": "x", "s": self.new_name(), "o": self.new_name(), "w": str(size), **group}
        self.emit(*(line.format(**names) for line in call.lines))

    def render(self, draw: Any, header: str, first: list[str], model: str = "") -> Program:
        if self.state.dtensor:
            ret = draw(st.sampled_from(["d", "d", "d.to_local()", "d.full_tensor()"]))
        else:
            ret = "x"
        body = "\n".join([header, *first, *self.lines, f"    return {ret}"]) + "\n"
        return Program((model + "\n\n" if model else "") + body)


@st.composite
def user_programs(draw: Any, mesh: MeshSpec, ndim: int, *, max_statements: int = 5,
                  statements: tuple[str, ...] = STATEMENTS, dist_calls: tuple[str, ...] = tuple(DIST_CALLS),
                  model: str | None = None, seed: int = 0, grad: bool = False) -> Program:
    """A program ``f(x, mesh)`` for an ``ndim``-D local tensor on ``mesh`` (one
    of ``MESHES``): 1 to ``max_statements`` of ``statements`` (torch.distributed
    calls drawn from ``dist_calls``). With ``model`` (a recipe of ``MODELS``),
    ``f(x, mesh, model)`` calls the model first, and the source defines
    ``model_of(mesh)`` (built with ``seed``) before ``f``. ``grad``: the input
    requires grad, so a loss may run its backward inside."""
    header = "def f(x, mesh):"
    first: list[str] = []
    model_text = ""
    state = _State(False, ndim, grad=grad)
    if model is not None:
        made = MODELS[model][0](draw, ndim)
        tp_mesh = "mesh" if len(mesh.shape) == 1 else "mesh['tp']"
        model_text = _model_source(made, seed, tp_mesh)
        header = "def f(x, mesh, model):"
        if made.out.dtensor:
            first = ["    d = model(x)"]
            state = _State(True, made.out.ndim, 1, grad=True)
        else:
            first = ["    x = model(x)"]
            state = _State(False, made.out.ndim, grad=True)
    b = _Builder(mesh, statements, dist_calls, state)
    low = 0 if model is not None else 1
    draw(st.lists(_statement(b), min_size=low, max_size=max_statements))
    return b.render(draw, header, first, model_text)


@st.composite
def _statement(draw: Any, builder: _Builder) -> None:
    builder.statement(draw)
