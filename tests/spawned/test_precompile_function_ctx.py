"""torch's precompile on a frame resumed inside an ``autograd.Function``'s
``forward`` (a graph break there: torchtitan's vocab-parallel loss under
``compile_on_one_rank``, where its rank is a run-time value). The resumed
frame holds ``ctx`` (the Function's backward node), which torch's guard
pickler cannot save: stock bypasses the package ("cannot pickle
'ScaleBackward' object": the frame is not saved, so a restart traces it
again); the plugin
saves ``ctx`` as its Function and state, and a restart traces nothing,
while a call whose guards fail on it is traced again. Each run is a fresh
process (a restart) with inductor, both sharing one cache dir."""

import json
import os
import pathlib
import subprocess
import sys

import pytest

pytestmark = [pytest.mark.slow, pytest.mark.release]

ROOT = pathlib.Path(__file__).resolve().parents[2]

PROGRAM = """
import json, sys
import torch
import torch._dynamo
import torch.distributed._functional_collectives as funcol
from torch._dynamo.utils import counters

if sys.argv[1] == "plugin":
    import dynamo_dist
    dynamo_dist.install()
from dynamo_dist.testing import fake_world, make_mesh

if hasattr(torch.compiler.config, "compile_on_one_rank"):  # 2.12+: the group reaches the graph as an object
    torch.compiler.config.compile_on_one_rank = True


class Scale(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, k, group):
        y = x * 2
        ctx.k = k
        torch._dynamo.graph_break()  # the rest of forward is a resumed frame holding ctx and the group
        ctx.scale = k + 1
        return funcol.all_reduce(y, "sum", group).sum() * ctx.k

    @staticmethod
    def backward(ctx, g):
        return g * 2 * ctx.k, None, None


def step(x, k, group):
    return Scale.apply(x, k, group) + 1


world = int(sys.argv[3])
with fake_world(world, 0):
    group = make_mesh((world,), ("tp",)).get_group("tp")
    x = torch.arange(4.0)
    compiled = torch.compile(step, backend="inductor")
    calls = []
    for k in json.loads(sys.argv[2]):
        before = counters["stats"]["unique_graphs"]
        out = compiled(x, k, group)
        calls.append({"k": k, "value": out.item(), "eager": step(x, k, group).item(),
                      "traced": counters["stats"]["unique_graphs"] - before})
    torch.compiler.save_cache_artifacts()
print(json.dumps(calls))
"""


def _process(script: pathlib.Path, cache: pathlib.Path, side: str, ks: list[int],
             world: int = 2) -> subprocess.CompletedProcess:
    env = dict(os.environ, TORCHINDUCTOR_CACHE_DIR=str(cache), TORCH_CACHING_PRECOMPILE="1",
               PYTHONPATH=str(ROOT))
    return subprocess.run([sys.executable, str(script), side, json.dumps(ks), str(world)], capture_output=True,
                          text=True, env=env, cwd=ROOT, timeout=600)


def _run(script: pathlib.Path, cache: pathlib.Path, side: str, ks: list[int],
         world: int = 2) -> tuple[list[dict], str]:
    proc = _process(script, cache, side, ks, world)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return json.loads(proc.stdout.strip().splitlines()[-1]), proc.stderr


BYPASS = "cannot pickle 'ScaleBackward' object"
GROUP_BYPASS = "a guard reads a ProcessGroup, which cannot be serialized"


def test_a_frame_resumed_inside_a_functions_forward_is_saved_and_loads(tmp_path):
    script = tmp_path / "program.py"
    script.write_text(PROGRAM)
    first, first_log = _run(script, tmp_path / "cache", "plugin", [3])
    second, _ = _run(script, tmp_path / "cache", "plugin", [3, 5])
    assert all(c["value"] == c["eager"] for c in first + second), (first, second)
    assert first[0]["traced"] == 3  # step, forward up to the break, the rest of forward
    assert BYPASS not in first_log and GROUP_BYPASS not in first_log
    assert second[0]["traced"] == 0, second  # every frame loaded
    assert second[1]["traced"] > 0, second  # k is guarded (on ctx.k too): traced again
    # A restart in a world of 4 sharing the cache dir: its group of that name
    # has another size, so the frames that read it (the step, the rest of
    # forward) cannot load there and are traced again (a loaded resume frame
    # inside forward is undone too: it called a resume function the failed
    # load had removed, NameError). forward up to the break reads no group:
    # 2.11-2.14 load it (2 graphs traced), 2.15 traces it with the rest (3).
    [other], _ = _run(script, tmp_path / "cache", "plugin", [3], world=4)
    assert other["traced"] in (2, 3) and other["value"] == other["eager"], other


def test_stock_does_not_save_a_frame_holding_ctx(tmp_path):
    """2.12+ bypass the package of each frame holding ``ctx`` or guarding the
    group; 2.11 raises the pickling error from ``torch.compile``
    (InternalTorchDynamoError)."""
    script = tmp_path / "program.py"
    script.write_text(PROGRAM)
    proc = _process(script, tmp_path / "cache", "stock", [3])
    if proc.returncode != 0:
        assert f"InternalTorchDynamoError: TypeError: {BYPASS}" in proc.stderr, proc.stderr[-3000:]
        return
    [first] = json.loads(proc.stdout.strip().splitlines()[-1])
    assert first["value"] == first["eager"] and first["traced"] == 3, first
    assert f"Guard evaluation failed: TypeError: {BYPASS}" in proc.stderr, proc.stderr[-3000:]
    assert GROUP_BYPASS in proc.stderr, proc.stderr[-3000:]
