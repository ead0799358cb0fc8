"""torch's precompile with the plugin installed: ``caching_precompile``
(``TORCH_CACHING_PRECOMPILE=1``) and ``aot_compile``.

torch saves a packaged frame's guards by their builder functions and rebuilds
them on load; it cannot save the plugin's (closures over compile-time facts),
and under ``caching_precompile`` it drops every ``ID_MATCH`` from the live
guards. So a frame with a plugin guard is declined (a package bypass, never
a saved entry that fails to load), the plugin's identity guards stay live,
and ``aot_compile`` refuses with the reason.
"""

from __future__ import annotations

import pytest
import torch
import torch.distributed as dist
from torch._dynamo.exc import PackageError

import dynamo_dist
from dynamo_dist.demo.models import SIZES, build_model, make_input
from dynamo_dist.testing import fake_world, make_mesh

from test_compile_caches import FORWARD_AND_BACKWARD, run_fresh



@pytest.fixture
def precompile_caching(tmp_path, monkeypatch):
    """``caching_precompile`` on, its entries in a fresh cache dir."""
    monkeypatch.setenv("TORCHINDUCTOR_CACHE_DIR", str(tmp_path))
    with dynamo_dist.enabled(), torch._dynamo.config.patch(caching_precompile=True):
        torch._dynamo.reset()
        yield
    torch._dynamo.reset()


@pytest.mark.release
def test_a_group_guard_stays_live_under_caching_precompile(precompile_caching):
    """torch drops ID_MATCH from the live guards under the flag (stock's
    answer is stale: 8 twice); the plugin's group guard is its own check."""
    with fake_world(8, rank=0):
        pair = dist.new_group([0, 1])

        def f(x, group):
            return x * group.size()

        compiled = torch.compile(f, backend="eager")
        x = torch.ones(2)
        assert compiled(x, dist.group.WORLD).tolist() == [8.0, 8.0]
        assert compiled(x, pair).tolist() == [2.0, 2.0]
        assert compiled(x, dist.group.WORLD).tolist() == [8.0, 8.0]


@pytest.mark.release
def test_the_default_group_guard_stays_live_under_caching_precompile(precompile_caching):
    """``dist.get_world_size()`` without a group is guarded on WORLD's
    identity: a world made again recompiles."""

    def f(x):
        return x * dist.get_world_size()

    compiled = torch.compile(f, backend="eager")
    with fake_world(8, rank=0):
        assert compiled(torch.ones(1)).item() == 8.0
    with fake_world(4, rank=0):
        assert compiled(torch.ones(1)).item() == 4.0


@pytest.mark.release
def test_a_mesh_guard_stays_live_under_caching_precompile(precompile_caching):
    with fake_world(8, rank=0):
        mesh = make_mesh((2, 4), ("dp", "tp"))

        def f(x, m):
            return x * m.size(0) + m.get_local_rank(0)

        compiled = torch.compile(f, backend="eager", fullgraph=True)
        x = torch.ones(1)
        assert compiled(x, mesh["dp"]).item() == 2.0
        assert compiled(x, mesh["tp"]).item() == 4.0


@pytest.mark.slow
@pytest.mark.release
def test_aot_compile_refuses_a_function_with_plugin_guards(precompile_caching):
    with fake_world(4, rank=0):
        mesh = make_mesh((4,), ("tp",))
        config = SIZES["tiny"]
        model, x = build_model("mlp", config, mesh=mesh), make_input(config)
        # 2.11 / 2.12 offer aot_compile behind a config switch.
        switch = {"enable_aot_compile": True} if hasattr(torch._dynamo.config, "enable_aot_compile") else {}
        refused = (r"dynamo_dist: aot_compile cannot save this function: its guards on .*"
                   r"DeviceMesh, ProcessGroup, placement or DTensor spec.*torch\.compile instead")
        with torch._dynamo.config.patch(**switch), pytest.raises(PackageError, match=refused):
            torch.compile(lambda t: model(t), fullgraph=True).aot_compile(((x,), {}))
        assert model(x).shape == x.shape  # the model still runs eagerly (a fake world: no values to compare)


@pytest.mark.release
def test_frames_without_plugin_guards_are_still_packaged(precompile_caching, monkeypatch):
    """Only frames with a plugin guard are declined."""
    from torch._dynamo.package import DynamoCache

    recorded = []
    record = DynamoCache.record_package
    monkeypatch.setattr(DynamoCache, "record_package", lambda package: recorded.append(package) or record(package))

    def plain(x):
        return x.sin() + 1

    torch.compile(plain, backend="eager")(torch.ones(3))
    assert any(entry.guarded_codes for package in recorded for entry in package._codes.values())


@pytest.mark.slow
def test_a_restart_with_caching_precompile_loads_the_fx_graphs_and_never_a_broken_package(tmp_path):
    """A TP MLP compiled with inductor, then a second process, both with the
    flag: the frame is declined (the log says why), nothing fails on load (a
    saved plugin guard failed there), and its FX graphs hit. (Its
    AOTAutograd entry misses under the flag, stock's too: torch then bundles
    it into Dynamo's package, which a declined frame does not save.)"""
    env = {"TORCH_CACHING_PRECOMPILE": "1"}
    first = run_fresh(tmp_path, env=env, program="tp_mlp", rank=3)
    assert "dynamo_dist: this frame's guards on" in first["stderr"]
    second = run_fresh(tmp_path, env=env, program="tp_mlp", rank=3)
    assert "dynamo_dist: this frame's guards on" in second["stderr"]
    fx = second["outcomes"]["fx_graph"]
    assert (fx["hit"], fx["miss"], fx["bypass"]) == (FORWARD_AND_BACKWARD, 0, 0), second["outcomes"]
    assert second["same_as_eager"] is not False
