"""Every change the tools make to torch's global state goes through
``_hooks.Patches`` and is undone: after ``explain`` (API and CLI), the demo's
rank entry point, the fuzzer and the benchmarks' side switches, every
attribute, config value, logger level/handler and table they may change is
what it was."""

import logging
import os

import torch

import dynamo_dist
from dynamo_dist import _hooks
from dynamo_dist import _compat as C
from dynamo_dist._compat import observe as O
from dynamo_dist.guards import _notes
from dynamo_dist.testing import make_mesh

EXAMPLE = os.path.join(os.path.dirname(os.path.dirname(os.path.dirname(__file__))), "examples", "explain_demo.py")

CONFIG = {
    O.dynamo_config: ("suppress_errors", "recompile_limit", "verbose"),
    O.inductor_config: ("fx_graph_cache", "fx_graph_remote_cache", "compile_threads"),
    O.functorch_config: ("enable_autograd_cache",),
}
LOGGERS = ("dynamo_dist", "torch", "torch._dynamo", "torch._inductor")


def snapshot():
    log = O.graph_break_logger()
    utils = __import__("torch._dynamo.utils", fromlist=["utils"])
    state = {
        "installed": dynamo_dist.is_installed(),
        "torch.compile": torch.compile,
        "graph_break_log": (log.level, log.propagate, list(log.handlers), log.disabled),
        # (torch._dynamo.reset() gives the checker a new set itself: the object is checked)
        "duplicate checker": O.duplicate_break_checker(),
        "metrics deque": (id(getattr(utils, "_compilation_metrics")), O.compilation_metrics_limit()),
        "notes listeners": list(getattr(_notes, "_listeners")),
        "hooks": (C.dynamo.VariableBuilder.__dict__["_wrap"], C.dynamo.SourcelessBuilder.__dict__["create"],
                  C.dynamo.TensorVariable.__dict__["call_method"],
                  C.dynamo.TensorVariable.__dict__[C.slots.TENSOR_GETATTR_SLOT],
                  C.dynamo.aot_runtime_wrappers.gen_alias_from_base, dict(C.dynamo.SourcelessBuilder._type_handlers)),
        "rendezvous": dict(O.rendezvous_handlers()),
        "threads": torch.get_num_threads(),
    }
    for module, names in CONFIG.items():
        for name in names:
            state[f"{module.__name__}.{name}"] = getattr(module(), name)
    for name in LOGGERS:
        logger = logging.getLogger(name)
        state[f"logger {name}"] = (logger.level, logger.propagate, list(logger.handlers))
    return state


def assert_restored(before, what):
    after = snapshot()
    changed = {k: (before[k], after[k]) for k in before if not (before[k] is after[k] or before[k] == after[k])}
    assert not changed, f"{what} left torch changed: {changed}"


def step(x, mesh):
    tp = mesh["tp"]
    print("a graph break")
    return x * tp.size() + mesh.get_group("dp").size()


def test_explain_api_restores(world8):
    before = snapshot()
    mesh = make_mesh((2, 4), ("dp", "tp"))
    report = dynamo_dist.explain(step, compare_stock=True)(torch.ones(2), mesh)
    assert report.breaks
    assert_restored(before, "explain()")


def test_explain_cli_restores(capsys):
    from dynamo_dist.cli import main

    before = snapshot()
    assert main(["explain", "--backend", "eager", "--compare-stock", EXAMPLE]) == 0
    assert "graph break" in capsys.readouterr().out.lower()
    assert_restored(before, "python -m dynamo_dist explain")


def test_patches_used_by_the_cli_restore():
    before = snapshot()
    p = _hooks.rendezvous_patches("x/")
    assert dict(O.rendezvous_handlers()) != before["rendezvous"]
    p.restore()
    from devtools.bench import _timing as T
    from devtools.bench.compile_time import no_compile_caches

    with no_compile_caches():
        assert O.inductor_config().fx_graph_cache is False and O.inductor_config().compile_threads == 1
    T.use(T.PLUGIN)
    T.use(T.STOCK)
    assert_restored(before, "the CLI's and benchmarks' patches")


def test_demo_rank_restores(monkeypatch):
    """The demo's rank entry point switches inductor's FX graph cache off for
    its run only (a 1-rank gloo world in this process; the training itself
    is replaced: test_demo runs it)."""
    import torch.distributed as dist

    from dynamo_dist.cli import demo
    from dynamo_dist.demo.models import SIZES
    from dynamo_dist.worlds.spawned import _free_port

    seen = []
    monkeypatch.setattr(demo, "_run_rank", lambda *a: (seen.append(O.inductor_config().fx_graph_cache), (0, None))[1])
    before = snapshot()
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{_free_port()}", rank=0, world_size=1)
    try:
        options = demo.DemoOptions("mlp", SIZES["tiny"], 1, "inductor", "cpu", stock=False)
        assert demo.run_rank(options) == [(0, None)]  # every rank's summary, gathered
    finally:
        dist.destroy_process_group()
    torch.set_num_threads(before["threads"])  # a rank process sets its own share of the cores
    assert seen == [False]
    assert_restored(before, "the demo's rank")


def test_fuzz_restores(tmp_path):
    from dynamo_dist.fuzzing.driver import run_property
    from dynamo_dist.fuzzing.properties import PROPERTIES

    before = snapshot()
    for name in ("query", "guards"):
        report = run_property(PROPERTIES[name], examples=3, seed=0, out_dir=tmp_path)
        assert not report.failures, [f.error for f in report.failures]
    assert_restored(before, "fuzz")
