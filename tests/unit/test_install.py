"""install/uninstall are idempotent and uninstall restores stock exactly."""

import pytest
import torch
import torch._dynamo
from torch._dynamo.variables.builder import SourcelessBuilder, VariableBuilder

import dynamo_dist
from dynamo_dist import _compat
from dynamo_dist.testing import compile_and_run, distributed_objects_in, make_mesh

pytestmark = pytest.mark.release


def _snapshot():
    from torch._dynamo.variables.tensor import TensorVariable
    from torch._functorch._aot_autograd import runtime_wrappers

    return (
        VariableBuilder._wrap,
        SourcelessBuilder.__dict__["create"],
        dict(SourcelessBuilder._type_handlers),
        TensorVariable.__dict__["call_method"],
        TensorVariable.__dict__[_compat.slots.TENSOR_GETATTR_SLOT],
        runtime_wrappers.gen_alias_from_base,
        *_cache_hook_points(),
        *_guard_and_aot_hook_points(),
    )


def _guard_and_aot_hook_points() -> tuple:
    """Where ``is`` is decided, a DTensor input's spec guard, and the RNG
    states under activation checkpointing."""
    points = [module.__dict__["vt_identity_compare"] for module in _compat.dynamo.IDENTITY_HOOK_POINTS]
    points.append(getattr(*_compat.dynamo.DTENSOR_SPEC_GUARD_POINT))
    if _compat.aot.RNG_STATES_HOOK_POINT is not None:
        points.append(getattr(*_compat.aot.RNG_STATES_HOOK_POINT))
    if _compat.distributed.UNFLATTEN_LOSES_SHARD_ORDER_FLAG:
        points.append(getattr(*_compat.distributed.DTENSOR_UNFLATTEN_POINT))
    return tuple(points)


def _cache_hook_points() -> tuple:
    """What the plugin changes for the compile caches (``_hooks/caches.py``)."""
    caches = _compat.caches
    points = [caches.fx_cache_pickler().__dict__["__init__"], caches.hash_details().__dict__["__init__"],
              *(loader.__dict__["unwrap"] for loader in caches.constants_loaders()),
              dict(_compat.observe.inductor_config().unsafe_marked_cacheable_functions)]
    if caches.MESH_STABLE_HASH is not None:
        owner, name = caches.MESH_STABLE_HASH
        points.append(owner.__dict__.get(name))
    points.append(getattr(*caches.tensor_metadata_point()))
    points.append(getattr(*caches.aot_key_hook_point()))
    # Compile once: the lookups, saves and hit records of both caches, the compile scopes, the Redis backend.
    aot, fx = caches.aot_autograd_cache(), caches.fx_graph_cache()
    points += [aot.__dict__[n] for n in ("_lookup", "try_load", "save", "_record_result")]
    points += [fx.__dict__[n] for n in ("_lookup_graph", "_save_graph", "_record_result")]
    points += [getattr(owner, name) for owner, name in caches.compile_scope_points()]
    points += [caches.redis_backend().__dict__[n] for n in ("_get", "_put")]
    return tuple(points)


def program(x, mesh):
    return x + mesh["tp"].size() + mesh.ndim


def test_install_is_idempotent_and_uninstall_restores_stock(world8):
    mesh = make_mesh((2, 4), ("dp", "tp"))
    assert not dynamo_dist.is_installed()
    before = _snapshot()
    stock = compile_and_run(program, torch.ones(1), mesh)

    dynamo_dist.install()
    dynamo_dist.install()
    assert dynamo_dist.is_installed()
    during = compile_and_run(program, torch.ones(1), mesh)
    patched = _snapshot()
    assert all(p is not b and p != b for p, b in zip(patched, before)), "install left a hook point unpatched"

    dynamo_dist.uninstall()
    dynamo_dist.uninstall()
    assert not dynamo_dist.is_installed()
    after = compile_and_run(program, torch.ones(1), mesh)

    after_hooks = _snapshot()
    assert all(a is b or a == b for a, b in zip(after_hooks, before)), "a hook was not restored"
    for run in (stock, during, after):
        torch.testing.assert_close(run.compiled, run.eager)
    # Stock (2.12+, opaque meshes) puts the mesh in the graph, 2.11's in-tree
    # tracker folds it; the plugin never does; after uninstall the graph is
    # stock's again, node for node.
    assert bool(distributed_objects_in(stock.graphs[0])) == _compat.distributed.STOCK_MESH_OPAQUE
    assert not distributed_objects_in(during.graphs[0])
    assert after.graphs[0].code == stock.graphs[0].code


def test_a_failing_hook_point_leaves_torch_stock(world8, monkeypatch):
    """install() is all or nothing: a change that fails after others were
    made undoes them, raises one clear error, and a later install works."""
    from dynamo_dist._hooks import core

    mesh = make_mesh((2, 4), ("dp", "tp"))
    before = _snapshot()
    stock = compile_and_run(program, torch.ones(1), mesh)

    def fail(p):
        raise AttributeError("compile-once hook point moved")

    monkeypatch.setattr(core, "compile_once_patches", fail)  # late: most changes are made by then
    with pytest.raises(RuntimeError, match=r"install\(\) failed while changing torch \(AttributeError: "
                                           r"compile-once hook point moved\); every change it had made is undone"):
        dynamo_dist.install()
    assert not dynamo_dist.is_installed()
    assert all(a is b or a == b for a, b in zip(_snapshot(), before)), "a failed install left a hook"
    assert compile_and_run(program, torch.ones(1), mesh).graphs[0].code == stock.graphs[0].code

    monkeypatch.undo()
    dynamo_dist.install()
    try:
        assert dynamo_dist.is_installed()
        assert not distributed_objects_in(compile_and_run(program, torch.ones(1), mesh).graphs[0])
    finally:
        dynamo_dist.uninstall()


def test_enabled_context_restores_previous_state(world8):
    mesh = make_mesh((8,))
    with dynamo_dist.enabled():
        assert dynamo_dist.is_installed()
        run = compile_and_run(lambda x, m: x + m.size(), torch.ones(1), mesh)
        assert not distributed_objects_in(run.graphs[0])
    assert not dynamo_dist.is_installed()

    dynamo_dist.install()
    try:
        with dynamo_dist.enabled():
            pass
        assert dynamo_dist.is_installed()  # was installed before: stays installed
    finally:
        dynamo_dist.uninstall()


def test_install_and_uninstall_reset_dynamo_caches(world8):
    mesh = make_mesh((2, 4), ("dp", "tp"))
    calls = []

    def backend(gm, example_inputs):
        calls.append(gm)
        return gm.forward

    fn = torch.compile(program, backend=backend)
    fn(torch.ones(1), mesh)
    dynamo_dist.install()
    try:
        fn(torch.ones(1), mesh)  # stock's cached graph must not be reused
        assert len(calls) == 2
        assert not distributed_objects_in(calls[1])
    finally:
        dynamo_dist.uninstall()
    fn(torch.ones(1), mesh)
    # Stock's graph again (2.12+ stock passes the mesh in; 2.11's folds it too).
    assert len(calls) == 3 and bool(distributed_objects_in(calls[2])) == _compat.distributed.STOCK_MESH_OPAQUE


def _stock_state():
    from torch._dynamo.variables.builtin import BuiltinVariable

    hooks = sorted({name for family in _compat.slots.BUILTIN_HOOKS_BY_FAMILY.values() for name in family})
    return (*_snapshot(), *(BuiltinVariable.__dict__.get(name) for name in hooks))


@pytest.mark.parametrize("version", ["2.10.2", "2.16.0", "3.0.0", "2.9.0+cu126"])
def test_install_refuses_a_torch_outside_the_supported_range(world8, monkeypatch, version):
    before = _stock_state()
    monkeypatch.setattr(torch, "__version__", version)
    with pytest.raises(RuntimeError) as e:
        dynamo_dist.install()
    assert version in str(e.value) and ">=2.11,<2.16" in str(e.value)
    assert not dynamo_dist.is_installed()
    assert all(a is b or a == b for a, b in zip(_stock_state(), before)), "a refused install patched torch"
    dynamo_dist.uninstall()
    assert all(a is b or a == b for a, b in zip(_stock_state(), before))


# Slots every family binds (2.11 / 2.12 reach comparisons through dunders).
@pytest.mark.parametrize("missing", ["vt_hasattr", "vt_getattr", "tensor attribute hook"])
def test_install_refuses_a_torch_whose_hook_point_moved(world8, monkeypatch, missing):
    from torch._dynamo.variables.base import VariableTracker
    from torch._dynamo.variables.tensor import TensorVariable

    before = _stock_state()
    if missing == "tensor attribute hook":
        monkeypatch.delattr(TensorVariable, _compat.slots.TENSOR_GETATTR_SLOT)
        name = _compat.slots.TENSOR_GETATTR_SLOT
    else:
        name = _compat.slots.SLOTS[missing]
        monkeypatch.delattr(VariableTracker, name)
    with pytest.raises(RuntimeError) as e:
        dynamo_dist.install()
    assert torch.__version__ in str(e.value) and ">=2.11,<2.16" in str(e.value) and name in str(e.value)
    assert not dynamo_dist.is_installed()
    dynamo_dist.uninstall()
    monkeypatch.undo()
    assert all(a is b or a == b for a, b in zip(_stock_state(), before)), "a refused install patched torch"


# A torch of another layout: a package named ``torch`` that has a version and
# none of the private modules the plugin hooks (no ``torch._dynamo``, no
# ``torch.distributed``). Run in a fresh process with it first on sys.path.
FAKE_TORCH = '''
__version__ = {version!r}
def __getattr__(name):
    raise AttributeError(f"fake torch has no {{name}}")
'''
TRY_INSTALL = r'''
import sys
import dynamo_dist
try:
    dynamo_dist.install()
except RuntimeError as e:
    print("RuntimeError:", " ".join(str(e).split()))
except BaseException as e:
    print("OTHER", type(e).__name__, e)
else:
    print("INSTALLED")
print("is_installed:", dynamo_dist.is_installed())
dynamo_dist.uninstall()
print("loaded:", sorted(m for m in sys.modules if m.startswith("torch")))
'''


@pytest.mark.parametrize("version", ["2.16.0", "2.9.1+cpu", "2.15.0"])
def test_install_refuses_a_torch_laid_out_otherwise_without_loading_its_internals(tmp_path, version):
    """Out of range: refused from the version string before anything reaches
    into torch (only ``torch`` itself is loaded). In range but laid out
    otherwise: one ``RuntimeError`` naming what is missing, not an
    ``ImportError`` from deep inside the hooks."""
    import os
    import subprocess
    import sys
    from pathlib import Path

    (tmp_path / "torch").mkdir()
    (tmp_path / "torch" / "__init__.py").write_text(FAKE_TORCH.format(version=version))
    root = Path(dynamo_dist.__file__).resolve().parents[1]
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(tmp_path), str(root)])}
    proc = subprocess.run([sys.executable, "-S", "-c", TRY_INSTALL], capture_output=True, text=True, env=env,
                          timeout=120, cwd=tmp_path)
    out = proc.stdout
    assert proc.returncode == 0, proc.stderr
    assert f"RuntimeError: dynamo_dist supports torch >=2.11,<2.16 (2.11.x to 2.15.x), found torch {version}" in out, \
        out + proc.stderr
    assert "is_installed: False" in out
    if version == "2.15.0":
        assert "its internals differ where dynamo_dist hooks them: ModuleNotFoundError" in out, out
    else:
        assert "loaded: ['torch']" in out, out  # nothing private was imported
