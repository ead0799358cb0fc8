"""Programs for torch's precompile with the plugin, each run in a fresh
process (a restart is a new process): ``python tests/precompile_programs.py
'<json options>'`` prints :func:`run`'s result as JSON; :func:`aot_rank_run`
runs on each rank of a gloo world (``run_in_world``).

Every kind of plugin guard has a function of its own here (one frame each),
compiled with inductor (torch packages a frame with its AOTAutograd entry,
which only a cached backend has) in a fake world, under
``TORCH_CACHING_PRECOMPILE=1``. The result says, per kind, the value and how
many frames were traced in this process: 0 where the frame was loaded from
Dynamo's cache. Options perturb the second process the way a restart may
differ: ``world`` (its size), ``shift`` (its groups made in another order,
so each group has another name), ``version`` (another plugin version),
``flatten`` (the mesh flattened), ``registered`` (False: a registry that
one of torch's own guards reads by position holds fewer entries),
``one_rank`` (``compile_on_one_rank`` set, which a frame reads), ``scale``
(another value of a module constant a frame reads), ``no_transform`` (the
redistribute planner's switch that stops it merging collectives, set);
``only`` names the kinds to run (all by default); ``plugin``: False runs
stock torch (what stock does with each kind); ``twins`` runs only two
functions of one qualified name and first line in two modules (``twin_a``
then ``twin_b``), which torch's cache keys alike; ``wrappers`` runs only
two modules of one class, each compiled through its own ``torch.compile``
wrapper and taking its own branch of ``forward`` (``dense``, ``moe``);
``ranked`` runs only frames whose compiled code holds this rank (``rank``:
``dist.get_rank()`` folded, which no guard reads; ``coordinate``: the mesh's
coordinate, which the mesh guard holds), on the fake world's ``rank``;
``current`` runs only a frame reading the current mesh from a thread-local
stack (``helpers.current_mesh``, as torchtitan's), compiled before the
program makes the stack and called with the mesh pushed (``depth`` > 1:
that many meshes pushed, the last current).
"""

from __future__ import annotations

import collections
import contextlib
import importlib.util
import json
import os
import sys

import torch
import torch.distributed as dist
from torch._dynamo.utils import counters
from torch.distributed.device_mesh import DeviceMesh
from torch.distributed.tensor import DTensor, Replicate, Shard

import dynamo_dist
import helpers
from dynamo_dist import _version
from dynamo_dist.demo.models import SIZES, build_model, make_input
from dynamo_dist.testing import fake_world, make_mesh


class Rows(Shard):
    """A placement of the program's own, guarded by equality of its state."""

    def __init__(self, dim: int, rows: int) -> None:
        super().__init__(dim)
        self.rows = rows


class Other:
    """A class registered before ``Recorded``: the saving process's
    registry holds it, the loading one may not."""


class Recorded(torch.nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x * helpers.REGISTRY.get(self).get("scale", 1)


@helpers.keeps_name
def wrapped_output(x: torch.Tensor) -> collections.OrderedDict:
    """A frame whose code is another module's (a ``functools.wraps``
    wrapper) and whose output is rebuilt through a module it loads
    (``collections``), as HF transformers' decorated ``forward`` returning a
    ``ModelOutput``."""
    return collections.OrderedDict(out=x * 2)


def one_rank_config():
    """The config module of this release's canonical ``compile_on_one_rank``."""
    if hasattr(torch.compiler.config, "compile_on_one_rank"):
        return torch.compiler.config
    return torch.distributed.config


def kinds(world: int, registered: bool = True) -> dict:
    """Each kind of plugin guard: (function, arguments); the last, a frame
    whose saved guards cannot be rebuilt where ``registered`` is False."""
    if registered:
        helpers.REGISTRY[str(Other)] = {"scale": 2}
    helpers.REGISTRY[str(Recorded)] = {"scale": 3}
    pair = dist.new_group([0, 1])
    mesh = make_mesh((2, world // 2), ("dp", "tp"))
    local = torch.arange(4, dtype=torch.float32).reshape(2, 2)
    dtensor = DTensor.from_local(local, mesh, [Shard(0), Replicate()], run_check=False)

    def group(x, g):  # identity of a process group (its name, ranks, backend)
        return x * g.size()

    def world_size(x):  # identity of the default group
        return x * dist.get_world_size()

    def mesh_query(x, m):  # a mesh's fingerprint
        return x * m.size(1) + m.get_local_rank("tp")

    def placement(x, p):  # a built-in placement: torch's own guards
        return x * (p.dim + 1) if p.is_shard() else x

    def own_placement(x, p):  # a placement of the program's own
        return x * p.rows

    def spec(d):  # a DTensor input's spec (mesh, placements, shard order, dtype)
        return (d * 2).to_local()

    def tracked_class(x, p):  # identity of a tracked class, by qualified name
        return x + isinstance(p, Shard)

    def same_object(x, a, b):  # `a is b` between two arguments
        return x * 2 if a is b else x

    def module_constant(x):  # torch's own guard on a value read through a module
        return x * helpers.SCALE

    def config_read(x):  # torch's own guard on a config entry's override
        return x + 1 if one_rank_config().compile_on_one_rank else x - 1

    x = torch.ones(2)
    return {
        "group": (group, (x, pair)),
        "world": (world_size, (x,)),
        "mesh": (mesh_query, (x, mesh)),
        "placement": (placement, (x, Shard(1))),
        "own_placement": (own_placement, (x, Rows(0, 3))),
        "spec": (spec, (dtensor,)),
        "class": (tracked_class, (x, Shard(0))),
        "same_object": (same_object, (x, pair, pair)),
        "registry": (Recorded(), (x,)),
        "wrapped": (wrapped_output, (x,)),
        "config": (config_read, (x,)),
        "module": (module_constant, (x,)),
    }


# Two modules whose function ``twin`` starts on the same line: torch keys
# Dynamo's cache by a function's qualified name and first line only.
TWINS = {"twin_a": "def twin(x):\n    return x * 2\n", "twin_b": "def twin(x):\n    return x + 100\n"}


def twins() -> dict:
    """The two modules, imported from files in the cache dir (a function
    with no source file is compiled another way on 2.11 and 2.12)."""
    made = {}
    directory = os.path.join(os.environ["TORCHINDUCTOR_CACHE_DIR"], "twins")
    os.makedirs(directory, exist_ok=True)
    for name, source in TWINS.items():
        path = os.path.join(directory, f"precompile_{name}.py")
        with open(path, "w") as f:
            f.write(source)
        spec = importlib.util.spec_from_file_location(f"precompile_{name}", path)
        module = importlib.util.module_from_spec(spec)
        sys.modules[module.__name__] = module
        spec.loader.exec_module(module)
        made[name] = (module.twin, (torch.ones(2),))
    return made


class Block(torch.nn.Module):
    """One ``forward``, two variants (as deepseek_v3's dense and MoE blocks)."""

    def __init__(self, moe: bool) -> None:
        super().__init__()
        self.moe = moe
        self.linear = torch.nn.Linear(2, 2).requires_grad_(False)  # inference: the entry is whole at once

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.linear(x) * 2 if self.moe else self.linear(x) + 1


def wrappers() -> dict:
    torch.manual_seed(0)
    x = torch.ones(2)
    return {"dense": (Block(False), (x,)), "moe": (Block(True), (x,))}


def ranked() -> dict:
    """Frames whose compiled code holds this rank (no ``compile_on_one_rank``)."""
    def rank_answer(x):  # the rank folded; the default group's guard is the same on every rank
        return x * (dist.get_rank() + 2)

    def coordinate(x, m):  # the mesh's fingerprint holds this rank's coordinate
        return x * (m.get_coordinate()[0] + 2)

    x = torch.ones(2)
    return {"rank": (rank_answer, (x,)), "coordinate": (coordinate, (x, make_mesh((dist.get_world_size(),))))}


def current(world: int, depth: int = 1) -> dict:
    """A frame reading a value the program makes after ``torch.compile``
    wrapped it: (function, arguments, the context each call runs in)."""
    def current_mesh_step(x):
        mesh = helpers.current_mesh()
        return x * mesh.size(1) + mesh.get_local_rank("tp")

    mesh = make_mesh((2, world // 2), ("dp", "tp"))
    return {"current_mesh": (current_mesh_step, (torch.ones(2),), lambda: helpers.current_mesh_set(*[mesh] * depth))}


def _equal(a, b) -> bool:
    if isinstance(a, dict):
        return type(a) is type(b) and a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)
    return torch.equal(a, b)


# The functions a saved guard names (pickled by qualified name), where a
# plugin that kept its saved guard forms inside ``_compat/dynamo.py`` had them.
FORMERLY_IN_COMPAT = {
    "plugin_guards": ("DYNAMO_DIST_SAVED", "DYNAMO_DIST_SAVED_BY", "same_group", "same_importable"),
    "torch_guards": ("config_value_check", "constant_check", "type_check", "length_check", "has_attribute_check"),
}


def save_under_former_names() -> None:
    """This process saves guards as that plugin did: each function of
    ``FORMERLY_IN_COMPAT`` pickles as ``dynamo_dist._compat.dynamo.<name>``."""
    from dynamo_dist._compat import dynamo as former_home
    for module_name, names in FORMERLY_IN_COMPAT.items():
        module = importlib.import_module(f"dynamo_dist.precompile.{module_name}")
        for name in names:
            fn = getattr(module, name)
            fn.__module__ = former_home.__name__
            setattr(former_home, name, fn)


def run(world: int = 8, shift: bool = False, version: str | None = None, flatten: bool = False,
        registered: bool = True, only: list[str] | None = None, one_rank: bool = False,
        scale: int | None = None, no_transform: bool = False, twins: bool = False,
        wrappers: bool = False, ranked: bool = False, rank: int = 0, plugin: bool = True,
        current: bool = False, depth: int = 1, former_names: bool = False) -> dict:
    """Compile and call each kind once; save Dynamo's cache entries.
    ``flatten``: the mesh's dims flattened before anything compiles;
    ``former_names``: guards saved as a former layout saved them."""
    if version is not None:
        _version.__version__ = version
    if former_names:
        save_under_former_names()
    if plugin:
        dynamo_dist.install()
    if one_rank:
        one_rank_config().compile_on_one_rank = True
    if scale is not None:
        helpers.SCALE = scale
    if no_transform:
        torch.distributed.tensor._redistribute._DISABLE_REDISTRIBUTE_TRANSFORM_OPTIMIZATION = True
    result = {}
    with fake_world(world, rank=rank):
        if shift:
            dist.new_group([world - 2, world - 1])
        programs = (globals()["twins"]() if twins else globals()["wrappers"]() if wrappers
                    else globals()["ranked"]() if ranked else globals()["current"](world, depth) if current
                    else kinds(world, registered))
        if flatten:
            _, (_, mesh) = programs["mesh"]
            mesh._flatten("dp_tp")
        for name, (fn, args, *context) in programs.items():
            if only is not None and name not in only:
                continue
            before = counters["stats"]["unique_graphs"]
            compiled = torch.compile(fn)
            with (context[0]() if context else contextlib.nullcontext()):
                out = compiled(*args)
                eager = fn(*args)
            result[name] = {"traced": counters["stats"]["unique_graphs"] - before,
                            "same_as_eager": _equal(out, eager)}
        torch.compiler.save_cache_artifacts()
    return result


def aot_rank_run(directory: str, save: bool, other_group: bool = False, plugin: bool = True) -> dict:
    """A TP MLP's forward through ``aot_compile`` on a 1-D mesh over a group
    of both ranks: ``save`` compiles and saves it (a file per rank),
    otherwise it is loaded and called. ``other_group``: a group made first,
    so the mesh's group has another name than when it was saved. Returns the
    loss, eager's, and the guard failure the loaded function raised, if any.
    ``plugin``: False runs stock torch."""
    if plugin:
        dynamo_dist.install()
    if other_group:
        dist.new_group([0, 1])
    mesh = DeviceMesh.from_group(dist.new_group([0, 1]), "cpu", mesh_dim_names=("tp",))
    config = SIZES["tiny"]
    model, x = build_model("mlp", config, mesh=mesh), make_input(config)
    path = os.path.join(directory, f"rank{dist.get_rank()}.bin")
    eager = model(x).sum().item()
    # 2.11 / 2.12 offer aot_compile behind a config switch.
    switch = {"enable_aot_compile": True} if hasattr(torch._dynamo.config, "enable_aot_compile") else {}
    with torch._dynamo.config.patch(**switch):
        if save:
            compiled = torch.compile(model.forward, fullgraph=True).aot_compile(((x,), {}))
            compiled.save_compiled_function(path)
        else:
            with open(path, "rb") as f:
                compiled = torch.compiler.load_compiled_function(f)
        try:
            loss = compiled(model, x).sum().item()
        except RuntimeError as e:
            if "GuardManager check failed" not in str(e):
                raise
            return {"eager": eager, "loss": None, "guard_failed": str(e)}
    return {"eager": eager, "loss": loss, "guard_failed": None}


if __name__ == "__main__":
    print(json.dumps(run(**json.loads(sys.argv[1]))))
