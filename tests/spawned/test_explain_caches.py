"""explain with inductor reports each graph's compile-cache outcomes:
a miss in a fresh cache dir, a hit in a second process, bypasses in plain
words, and nothing for backends that use no cache. Inductor compiles cost
seconds each: the programs are the tiniest DTensor ones."""

import json
import logging
import os
import pathlib
import subprocess
import sys

import pytest
import torch
from torch.distributed.tensor import DTensor, Replicate, Shard

import dynamo_dist
from dynamo_dist.testing import make_mesh

pytestmark = pytest.mark.slow

ROOT = pathlib.Path(__file__).resolve().parents[2]

# Forward and backward: one AOTAutograd lookup and two FX-graph lookups.
PROGRAM = """
import torch
from torch.distributed.tensor import DTensor, Replicate, Shard
from dynamo_dist.testing import fake_world, make_mesh


def scatter(x, mesh):
    return DTensor.from_local(x, mesh, (Replicate(),)).redistribute(mesh, (Shard(0),)).to_local()


with fake_world(4, 1):
    mesh = make_mesh((4,), ("tp",))
    x = torch.ones(8, 3, requires_grad=True)
    torch.compile(scatter)(x, mesh).sum().backward()
"""


def explain_in_a_new_process(script: pathlib.Path, cache_dir: pathlib.Path, out: pathlib.Path,
                             **extra_env: str) -> tuple[dict, str]:
    env = dict(os.environ, TORCHINDUCTOR_CACHE_DIR=str(cache_dir), PYTHONPATH=str(ROOT), **extra_env)
    proc = subprocess.run([sys.executable, "-m", "dynamo_dist", "explain", "--backend", "inductor", "--json",
                           str(out), str(script)], capture_output=True, text=True, env=env, cwd=ROOT, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return json.loads(out.read_text()), proc.stdout


def outcomes(report: dict) -> list[tuple[str, str, str]]:
    [graph] = report["graphs"]
    return [(o["cache"], o["stage"], o["state"]) for o in graph["cache"]]


def test_miss_in_a_fresh_cache_dir_then_hit_in_a_second_process(tmp_path):
    script, cache_dir = tmp_path / "prog.py", tmp_path / "inductor_cache"
    script.write_text(PROGRAM)
    first, text = explain_in_a_new_process(script, cache_dir, tmp_path / "first.json")
    assert outcomes(first) == [("aot_autograd", "", "miss"), ("fx_graph", "forward", "miss"),
                               ("fx_graph", "backward", "miss")]
    reason = first["graphs"][0]["cache"][0]["reason"]
    assert reason.startswith(f"no entry for this key in {cache_dir} (first compile of this graph")
    assert first["cache_dir"] == str(cache_dir)
    assert "AOT miss, FX fw miss, bw miss" in " ".join(text.split())  # the graphs table (cell may wrap)
    assert "Compile caches (3 lookups" in text
    assert [c["stage"] for c in first["graphs"][0]["collectives"]] == ["backward"]  # traced: collectives seen

    second, text = explain_in_a_new_process(script, cache_dir, tmp_path / "second.json")
    assert outcomes(second) == [("aot_autograd", "", "hit"), ("fx_graph", "forward", "hit"),
                                ("fx_graph", "backward", "hit")]
    assert all(o["reason"].startswith("saved ") for o in second["graphs"][0]["cache"])
    # AOTAutograd loaded the graphs, tracing nothing: their collectives are
    # read from the printed graphs torch logs on a hit, the same as traced.
    assert "backward" in second["graphs"][0]["stages"] and not second["graphs"][0].get("note")
    assert second["graphs"][0]["collectives"] == first["graphs"][0]["collectives"]
    assert "AOT hit, FX fw hit, bw hit" in " ".join(text.split())


def forward_only(x, mesh):
    return DTensor.from_local(x, mesh, (Shard(0),)).redistribute(mesh, (Replicate(),)).to_local()


@pytest.mark.usefixtures("world8")
def test_bypass_reasons_in_plain_words(tmp_path, monkeypatch):
    monkeypatch.setenv("TORCHINDUCTOR_CACHE_DIR", str(tmp_path))
    mesh = make_mesh((8,), ("tp",))
    trace = logging.getLogger("torch.__trace")  # torch's structured trace: explain listens there
    before = (list(trace.handlers), trace.propagate)
    with torch._inductor.config.patch(fx_graph_cache=False):
        report = dynamo_dist.explain(forward_only, backend="inductor")(torch.ones(2, 3), mesh)
    assert (trace.handlers, trace.propagate) == before
    [graph] = report.graphs
    assert [(o.cache, o.stage, o.state) for o in graph.cache] == [("aot_autograd", "", "bypass"),
                                                                  ("fx_graph", "forward", "bypass")]
    aot, fx = graph.cache
    assert aot.reason.startswith("the FX graph cache is off (torch._inductor.config.fx_graph_cache=False)")
    assert aot.detail == "FX graph cache is not enabled"  # torch's words, kept
    assert fx.reason == "FX graph cache disabled (torch._inductor.config.fx_graph_cache=False)"
    text = " ".join(str(report).split())
    assert "AOT bypass, FX fw bypass" in text and "bypass: FX graph cache disabled" in text
    assert json.loads(json.dumps(report.to_dict()))["graphs"][0]["cache"][1]["state"] == "bypass"

    # A function AOTAutograd cannot key (a closure put in the graph as a call).
    def flip(t):
        return t.t()

    allowed = torch._dynamo.allow_in_graph(flip)

    def calls_closure(x):
        return allowed(x)

    report = dynamo_dist.explain(calls_closure, backend="inductor")(torch.ones(2, 3))
    [aot, *fx] = report.graphs[0].cache
    assert (aot.cache, aot.state) == ("aot_autograd", "bypass")
    assert aot.reason == ("the graph calls a function the AOTAutograd cache cannot key: "
                          f"`flip` (a closure in {__name__})")
    assert [(o.stage, o.state) for o in fx] == [("forward", "miss")]


@pytest.mark.usefixtures("world8")
def test_backends_without_caches_report_none():
    mesh = make_mesh((8,), ("tp",))
    report = dynamo_dist.explain(forward_only, backend="eager")(torch.ones(2, 3), mesh)
    assert report.graphs[0].cache == [] and report.cache_dir is None
    assert "Compile caches" not in str(report) and "cache" not in str(report).split("Graphs")[1].splitlines()[1]



def test_dtensor_closure_bypass_points_at_the_plugin():
    # What stock Dynamo's DTensor.from_local closure makes AOTAutograd log
    # (torch 2.11 without the plugin; later releases' stock graphs differ).
    from dynamo_dist.diagnostics.caches import lookup_reason
    from dynamo_dist.diagnostics.report import PLUGIN, STOCK

    raw = ("Unsupported call_function target <function TorchInGraphFunctionVariable._get_handlers.<locals>."
           "handle_from_local.<locals>.fn_with_prim_types at 0x7f0>. \n Function module: "
           "torch._dynamo.variables.torch, \nFunction name: prim from_local")
    reason, detail = lookup_reason("aot_autograd", "bypass", {"cache_bypass_reason": raw}, "/cache", STOCK)
    assert reason == ("the graph calls a function the AOTAutograd cache cannot key: `prim from_local` (a closure "
                      "in torch._dynamo.variables.torch); dynamo_dist bakes DTensor calls as baked_ops.call — "
                      "is the plugin installed?")
    assert detail == raw.splitlines()[0]
    reason, _ = lookup_reason("aot_autograd", "bypass", {"cache_bypass_reason": raw}, "/cache", PLUGIN)
    assert reason.endswith("a DTensor call dynamo_dist did not bake (please report it)")


def tp_step(x, w1, w2):
    # A forward with an all-reduce and a backward with gathers.
    h = torch.relu(x @ w1.redistribute(w1.device_mesh, (Shard(1),)).to_local())
    return (h @ w2.to_local()).sum()


class _PrintedGraphs(logging.Handler):
    """The post-AOTAutograd graphs torch prints to its structured trace."""

    def __init__(self) -> None:
        super().__init__(logging.DEBUG)
        self.printed: dict[str, str] = {}

    def emit(self, record: logging.LogRecord) -> None:
        from dynamo_dist._compat import observe as O

        found = O.aot_graph_event(record)
        if found is not None:
            self.printed[found[0]] = found[1]


@pytest.mark.usefixtures("world8")
def test_collectives_read_from_a_printed_graph_equal_the_traced_ones():
    """What explain reads of a graph the AOTAutograd cache served (its code
    as torch prints it to the structured trace) lists the same collectives,
    with their groups, ranks, shapes and bytes, as the traced graph."""
    from dynamo_dist.diagnostics.graphs import collectives_in, collectives_in_printed
    from dynamo_dist.testing import CaptureBackend

    mesh = make_mesh((2, 4), ("dp", "tp"))
    w1 = DTensor.from_local(torch.randn(3, 8, requires_grad=True), mesh["tp"], (Shard(0),))
    w2 = DTensor.from_local(torch.randn(2, 5, requires_grad=True), mesh["tp"], (Shard(0),))
    backend, handler = CaptureBackend("aot_eager"), _PrintedGraphs()
    trace = logging.getLogger("torch.__trace")
    trace.addHandler(handler)
    try:
        with dynamo_dist.enabled():
            torch.compile(tp_step, backend=backend)(torch.randn(4, 12), w1, w2).backward()
    finally:
        trace.removeHandler(handler)
    traced = {"forward": backend.forward_graphs, "backward": backend.backward_graphs}
    assert set(handler.printed) == {"forward", "backward"}
    for stage, code in handler.printed.items():
        [gm] = traced[stage]
        want, got = collectives_in(gm, stage), collectives_in_printed(code, stage)
        assert want and got == want
        assert [(c.ranks, c.shape, c.dtype, c.bytes_per_rank) for c in got] == \
            [(c.ranks, c.shape, c.dtype, c.bytes_per_rank) for c in want]


@pytest.mark.parametrize("raw, words", [
    # torchtitan's attention block without activation checkpointing, stock
    ("Unsupported call_function target <function _backend_from_string at 0x7f6>. \n Function module: "
     "torch.nn.attention, \nFunction name: _backend_from_string",
     "the graph chooses the SDPA backend (`with sdpa_kernel(...)`, recorded as torch.nn.attention."
     "_backend_from_string), which the AOTAutograd cache does not accept by default; dynamo_dist marks it "
     "cacheable, keyed by the backends named — is the plugin installed?"),
    # torchtitan's block under its default selective activation checkpointing
    ("SAC context_fn does not have a cache_hash attribute. To enable caching with selective activation "
     "checkpointing, add a 'cache_hash' attribute to your context_fn.",
     "the graph runs selective activation checkpointing whose policy (`context_fn`) has no `cache_hash`"),
    # torchtitan's tensor-parallel loss (_LossParallelCrossEntropy)
    ("Unsupported call_function target autograd_function_apply. \n Function module: torch.ops.higher_order, "
     "\nFunction name: autograd_function_apply",
     "the graph calls a custom torch.autograd.Function (traced as autograd_function_apply), which the "
     "AOTAutograd cache refuses unless you vouch"),
])
def test_client_bypasses_in_plain_words(raw, words):
    """What stops torchtitan's graphs from caching, as explain says it."""
    from dynamo_dist.diagnostics.caches import lookup_reason
    from dynamo_dist.diagnostics.report import STOCK

    reason, detail = lookup_reason("aot_autograd", "bypass", {"cache_bypass_reason": raw}, "/cache", STOCK)
    assert reason.startswith(words) and detail == raw.splitlines()[0]


FLATTENED = """
import torch
from torch.distributed.tensor import DTensor, Partial, Replicate
from dynamo_dist.testing import fake_world, make_mesh


def reduce(x, mesh):
    d = DTensor.from_local(x, mesh, (Partial(), Replicate(), Partial()), run_check=False)
    return d.redistribute(mesh, (Replicate(),) * 3).to_local()


with fake_world(8, 0):
    mesh = make_mesh((2, 2, 2), ("a", "b", "c"))
    mesh[{dims}]._flatten("{name}")
    torch.compile(reduce)(torch.ones(4, 4, requires_grad=True), mesh).sum().backward()
"""


def test_a_miss_names_the_part_of_the_key_that_differed(tmp_path):
    """A process that flattened other dims of the mesh misses the entry of
    one that flattened ``a, c``; explain says it was the flattened meshes."""
    cache_dir = tmp_path / "inductor_cache"
    for n, (dims, name) in enumerate([('"a", "c"', "ac"), ('"a", "b"', "ab")]):
        script = tmp_path / f"prog{n}.py"
        script.write_text(FLATTENED.format(dims=dims, name=name))
        report, _ = explain_in_a_new_process(script, cache_dir, tmp_path / f"{n}.json")
    aot = report["graphs"][0]["cache"][0]
    assert (aot["cache"], aot["state"]) == ("aot_autograd", "miss")
    assert "this graph is stored for another state: mesh (a=2, b=2, c=2): flattened meshes" in aot["reason"]
    assert "['ab on group" in aot["reason"] and "['ac on group" in aot["reason"]
    assert "groups:" not in aot["reason"] and "switches" not in aot["reason"]


# torch's precompile saves what Dynamo traced (inductor frames) when
# save_cache_artifacts() is called; a later process's torch.compile(f) loads it.
PRECOMPILED = """
import torch


def f(x):
    return x.sin() + 1


torch.compile(f)(torch.ones(3))
torch.compiler.save_cache_artifacts()
"""


def test_precompile_frames_traced_here_then_loaded_from_dynamos_cache(tmp_path):
    """Under TORCH_CACHING_PRECOMPILE=1 each frame says where it came from:
    traced (and packaged) in the first process, loaded from Dynamo's cache
    in the second, which traces nothing."""
    script, cache_dir = tmp_path / "prog.py", tmp_path / "inductor_cache"
    script.write_text(PRECOMPILED)
    first, text = explain_in_a_new_process(script, cache_dir, tmp_path / "first.json", TORCH_CACHING_PRECOMPILE="1")
    [frame] = first["frames"]
    assert (frame["function"], frame["line"], frame["origin"], frame["package"]) == ("f", 5, "traced here", "packaged")
    assert frame["why"] == "no entry for it in Dynamo's cache" and frame["compile_ids"] == ["0/0"]
    assert first["precompile"] == f"Dynamo's cache in {cache_dir / 'dynamo'}"
    assert "Frames under torch's precompile (1;" in text and "traced because: no entry for it" in text

    second, text = explain_in_a_new_process(script, cache_dir, tmp_path / "second.json", TORCH_CACHING_PRECOMPILE="1")
    assert second["graphs"] == []  # nothing traced
    [frame] = second["frames"]
    assert (frame["function"], frame["origin"], frame["compile_ids"], frame["package"]) == \
        ("f", "loaded from Dynamo's cache", [], "")
    assert "loaded from Dynamo's cache" in text


def by_group(x, group):
    return x * group.size()


def make_local():
    class Local:  # defined in a function: torch cannot save a guard on its type
        scale = 2

    return Local()


def by_local(x, o):
    return x * o.scale


@pytest.fixture
def precompile_on(tmp_path, monkeypatch):
    monkeypatch.setenv("TORCHINDUCTOR_CACHE_DIR", str(tmp_path))
    with torch._dynamo.config.patch(caching_precompile=True):
        yield


@pytest.mark.usefixtures("world8", "precompile_on")
def test_a_declined_package_says_why(monkeypatch):
    """A compile Dynamo leaves out of the package is reported with the
    reason, and who declined it: the plugin (a guard on a group c10d does
    not know has no saved form) or stock Dynamo."""
    import torch.distributed as dist

    from dynamo_dist._compat import dynamo as dynamo_compat

    monkeypatch.setattr(dynamo_compat, "group_identity", lambda group: None)  # as for a group made outside new_group
    report = dynamo_dist.explain(by_group)(torch.ones(2), dist.new_group([2, 3]))  # rank 3 is in it
    [frame] = report.frames
    assert (frame.function, frame.origin, frame.package, frame.declined_by) == \
        ("by_group", "traced here", "declined", "dynamo_dist")
    assert frame.reason.startswith("dynamo_dist: this frame's guards on L['group'] (the identity of an object")
    text = " ".join(str(report).split())
    assert "declined by dynamo_dist" in text and "declined: dynamo_dist: this frame's guards on L['group']" in text

    # Stock: a guard on the type of an object whose class was defined in a
    # function. 2.15 declines the package; earlier releases fail the compile
    # (the frame then runs eagerly: nothing to save).
    report = dynamo_dist.explain(by_local)(torch.ones(2), make_local())
    [frame] = report.frames
    if frame.package == "declined":
        assert frame.declined_by == "stock Dynamo" and "defined in local scope" in frame.reason
    else:
        assert frame.package == "not saved" and frame.reason.startswith("its compile failed") and report.failures

    # A frame nothing declined, compiled with a backend precompile does not save.
    mesh = make_mesh((8,), ("tp",))
    report = dynamo_dist.explain(forward_only)(torch.ones(2, 3), mesh)
    [frame] = report.frames
    assert frame.package == "not saved" and "aot_eager backend" in frame.reason

    # Without precompile the report has no such part.
    with torch._dynamo.config.patch(caching_precompile=False):
        report = dynamo_dist.explain(forward_only)(torch.ones(2, 3), mesh)
    assert report.frames == [] and not report.precompile and "Frames under" not in str(report)

