"""Selective activation checkpointing under the AOTAutograd cache: with the
plugin a policy it can describe keys the graph (``dynamo_dist/caching/
checkpoint_policies.py`` says why that is sound), so a changed policy misses
and an equal one hits in another process; one it cannot describe keeps
stock's bypass, and ``explain`` says why. Stock bypasses them all.

Two fresh processes share a cache dir (``cache_key_programs.py``); each
compiles its programs in turn with inductor. In the first, every program
after the first differs from it in one thing and must miss: an entry under
an equal key would be served (a hit). A policy importing the ops it saves
from a config module in its body runs in both, the second process finding
another file of that module, then in a third process with the first's file.
Then the description's rules, in process (no compile).
"""

from __future__ import annotations

import dataclasses
import functools
import random
import sys
import threading
import types
from pathlib import Path

import pytest
import torch
from torch.utils.checkpoint import checkpoint, create_selective_checkpoint_contexts

from cache_key_programs import MUST_SAVE, RECOMPUTE, ACConfig, Budget, run_fresh, titan_like
from dynamo_dist.caching.checkpoint_policies import described, policy_cache_hash
from dynamo_dist.caching.describe import Undescribable, describe

pytestmark = pytest.mark.slow

try:
    import torchtitan  # noqa: F401  (an optional client)
    TORCHTITAN = True
except ImportError:
    TORCHTITAN = False

BASE = {"program": "checkpointed", "policy": "titan_like"}
# One change each, from BASE.
CHANGED = {
    "ops to save": {**BASE, "save": ["mm", "relu"]},
    "mm shapes to recompute": {**BASE, "shapes": [[6, 5]]},
    "AC mode": {**BASE, "mode": "mm"},
    "policy code": {**BASE, "policy": "titan_like_edited"},
}
OP_LIST = {"program": "checkpointed", "policy": "op_list"}  # create_selective_checkpoint_contexts([mm])
STEP_0 = {"program": "checkpointed", "policy": "counted", "step": 0}  # a mutable global, read as it traces
UNDESCRIBABLE = {"program": "checkpointed", "policy": "over_budget"}  # closes over a plain object
TITAN = {"program": "checkpointed", "policy": "torchtitan", "save": []}  # save: its force-recompute fqns
IMPORTED = {"program": "checkpointed", "policy": "imported"}  # from ac_config import SAVE_OPS, in its body

FIRST = [BASE, *CHANGED.values(), OP_LIST, STEP_0, UNDESCRIBABLE, {**BASE, "plugin": False}, IMPORTED]
SECOND = [BASE, OP_LIST, STEP_0, {**STEP_0, "step": 1}, IMPORTED]
if TORCHTITAN:
    FIRST.append(TITAN)
    SECOND += [TITAN, {**TITAN, "save": ["gate"]}]


def config_folder(tmp_path_factory, *ops: str) -> Path:
    """A folder holding ``ac_config.py``, whose ``SAVE_OPS`` are the aten ``ops``."""
    folder = tmp_path_factory.mktemp("config")
    listed = ", ".join(f"torch.ops.aten.{op}.default" for op in ops)
    (folder / "ac_config.py").write_text(f"import torch\n\nSAVE_OPS = {{{listed}}}\n")
    return folder


@pytest.fixture(scope="module")
def cache_and_configs(tmp_path_factory) -> tuple[Path, Path, Path]:
    """The processes' cache dir; the folders of ``ac_config`` saving mm, and relu."""
    return (tmp_path_factory.mktemp("inductor_cache"), config_folder(tmp_path_factory, "mm"),
            config_folder(tmp_path_factory, "relu"))


@pytest.fixture(scope="module")
def processes(cache_and_configs) -> tuple[list[dict], list[dict]]:
    cache, saving_mm, saving_relu = cache_and_configs
    return run_fresh(cache, FIRST, path=(saving_mm,)), run_fresh(cache, SECOND, path=(saving_relu,))


@pytest.fixture(scope="module")
def third_process(processes, cache_and_configs) -> list[dict]:
    cache, saving_mm, _ = cache_and_configs
    return run_fresh(cache, [IMPORTED], path=(saving_mm,))


def outcome(run: dict) -> str:
    [aot] = run["aot"]  # one graph, one AOTAutograd lookup
    assert run["same_as_eager"], run
    return aot


def test_a_described_policy_is_stored(processes):
    first, _ = processes
    assert outcome(first[0]) == "miss"


@pytest.mark.parametrize("change", list(CHANGED))
def test_a_changed_policy_misses(processes, change):
    first, _ = processes
    assert outcome(first[1 + list(CHANGED).index(change)]) == "miss"


def test_equal_policies_in_another_process_hit(processes):
    first, second = processes
    assert [outcome(r) for r in first[len(CHANGED) + 1:len(CHANGED) + 3]] == ["miss", "miss"]
    assert [outcome(r) for r in second[:3]] == ["hit", "hit", "hit"]  # BASE, an op list, the counter at 0


def test_a_mutable_value_is_keyed_by_its_value_when_traced(processes):
    _, second = processes
    assert outcome(second[3]) == "miss"  # the step counter at 1: the trace would save nothing


def test_an_undescribable_policy_keeps_the_bypass_and_says_why(processes):
    first, _ = processes
    run = first[FIRST.index(UNDESCRIBABLE)]
    assert outcome(run) == "bypass"
    [explained] = run["explained"]
    assert "selective activation checkpointing that dynamo_dist cannot key (its policy" in explained
    # (the program runs as __main__)
    assert "closure variable budget: a __main__.Budget object, which has no description" in explained


def test_stock_bypasses_every_policy(processes):
    first, _ = processes
    run = first[FIRST.index({**BASE, "plugin": False})]
    assert outcome(run) == "bypass"
    assert run["reasons"][0].startswith("SAC context_fn does not have a cache_hash attribute")


def test_a_policy_importing_its_config_in_its_body_is_keyed_by_the_imported_values(processes, third_process):
    first, second = processes
    # Saving mm, then relu: keyed by the names alone, the second would run the first's plan.
    assert [outcome(first[FIRST.index(IMPORTED)]), outcome(second[SECOND.index(IMPORTED)])] == ["miss", "miss"]
    assert [outcome(r) for r in third_process] == ["hit"]  # saving mm again


@pytest.mark.skipif(not TORCHTITAN, reason="torchtitan (a client) is not installed")
def test_torchtitans_own_policy_hits_and_misses_when_its_config_changes(processes):
    first, second = processes
    assert outcome(first[-1]) == "miss"
    assert [outcome(r) for r in second[-2:]] == ["hit", "miss"]  # then the gate's mm forced to recompute


# -- the description's rules, in process ---------------------------------------


def digest_of(context_fn) -> str:
    return policy_cache_hash(context_fn)


def test_the_description_is_of_the_values_not_the_objects():
    a, b = titan_like(ACConfig(), {(4, 6)}), titan_like(ACConfig(), {(4, 6)})
    assert a is not b and digest_of(a) == digest_of(b)
    assert digest_of(a) != digest_of(titan_like(ACConfig(), {(4, 7)}))
    assert digest_of(a) != digest_of(titan_like(ACConfig(save=("mm", "sin")), {(4, 6)}))


def test_an_op_list_is_described_by_its_ops():
    def with_ops(*ops):
        return functools.partial(create_selective_checkpoint_contexts, list(ops))

    mm, addmm = torch.ops.aten.mm.default, torch.ops.aten.addmm.default
    assert digest_of(with_ops(mm, addmm)) == digest_of(with_ops(mm, addmm))
    assert digest_of(with_ops(mm)) != digest_of(with_ops(mm, addmm))


def test_a_module_is_described_by_the_attributes_the_code_reads():
    def policy(ctx, func, *args, **kwargs):
        return torch.utils.checkpoint.CheckpointPolicy.MUST_SAVE if func == torch.ops.aten.mm.default else None

    [(name, read)] = [g for g in describe(policy)[4] if g[0] == "torch"]
    assert read == ("module", ((("ops", "aten", "mm", "default"), ("op", "aten.mm.default")),
                               (("utils", "checkpoint", "CheckpointPolicy", "MUST_SAVE"),
                                ("class", "torch.utils.checkpoint", "CheckpointPolicy"))))


def test_a_dataclass_is_described_by_its_fields_and_the_methods_it_defines():
    @dataclasses.dataclass(frozen=True)
    class Limits:
        mm: int

        def saves(self, n):
            return n < self.mm

    @dataclasses.dataclass(frozen=True)
    class LimitsEdited:
        mm: int

        def saves(self, n):
            return n <= self.mm

    assert describe(Limits(2)) == describe(Limits(2)) != describe(Limits(3))
    _, (_, _, *parameters_fields_bases, methods), state = describe(Limits(2))
    _, (_, _, *edited_parameters_fields_bases, edited_methods), edited_state = describe(LimitsEdited(2))
    assert (parameters_fields_bases, state) == (edited_parameters_fields_bases, edited_state)
    assert methods != edited_methods


def reason(value) -> str:
    with pytest.raises(Undescribable) as refused:
        describe(value)
    return str(refused.value)


def test_what_cannot_be_described_is_refused_with_the_path_to_it():
    lock = threading.Lock()
    assert reason(lambda: lock).endswith("closure variable lock: a _thread.lock object, which has no description")
    assert "the module torch used as a value" in reason(lambda: torch)
    assert "calls the compiled function builtins.id" in reason(lambda ctx, op: id(op) % 2)
    # Random numbers: the module's hidden generator is an object with no description.
    assert "global random > random.random" in reason(lambda ctx, op: random.random() > 0.5)
    assert reason(lambda: Budget(1)).endswith(
        "global Budget: the class cache_key_programs.Budget (only dataclasses, enums and the classes of torch "
        "and builtins are described)")


def test_a_closure_cell_not_yet_assigned_is_refused():
    def make():
        def policy():
            return later

        assert "closure variable later: not assigned yet" in reason(policy)
        later = 1
        return policy

    assert describe(make())


# Policies importing their config in their body, from the package ``ac_settings``
# (``settings`` registers it in this process).


def imports_its_ops(ctx, func, *args, **kwargs):
    from ac_settings.ops import SAVE_OPS

    return MUST_SAVE if func in SAVE_OPS else RECOMPUTE


def imports_the_module(ctx, func, *args, **kwargs):
    import ac_settings.ops

    return MUST_SAVE if func in ac_settings.ops.SAVE_OPS else RECOMPUTE


def imports_the_module_as(ctx, func, *args, **kwargs):
    import ac_settings.ops as ops

    return MUST_SAVE if func in ops.SAVE_OPS else RECOMPUTE


def imports_the_module_from_its_package(ctx, func, *args, **kwargs):
    from ac_settings import ops

    return MUST_SAVE if func in ops.SAVE_OPS else RECOMPUTE


def imports_relatively(ctx, func, *args, **kwargs):
    from .ops import SAVE_OPS  # (run as a function of a module of ``ac_settings``: see ``in_package``)

    return MUST_SAVE if func in SAVE_OPS else RECOMPUTE


def imports_in_nested_code(ctx, func, *args, **kwargs):
    import ac_settings.ops as ops

    def saved():
        from ac_settings.ops import SAVE_OPS

        return SAVE_OPS | ops.SAVE_OPS  # ops: a closure's variable

    return MUST_SAVE if func in saved() else RECOMPUTE


def in_package(fn, package: str | None):
    """``fn`` as if defined in a module of ``package`` (its relative imports resolve there)."""
    return types.FunctionType(fn.__code__, {**fn.__globals__, "__package__": package}, fn.__name__)


def settings_package(monkeypatch, name: str) -> types.ModuleType:
    """The package ``name`` with a module ``ops`` saving mm, imported (until the test ends); its ``ops``."""
    package, ops = types.ModuleType(name), types.ModuleType(f"{name}.ops")
    package.__path__, package.ops, ops.SAVE_OPS = [], ops, {torch.ops.aten.mm.default}
    monkeypatch.setitem(sys.modules, name, package)
    monkeypatch.setitem(sys.modules, f"{name}.ops", ops)
    return ops


@pytest.fixture
def settings(monkeypatch) -> types.ModuleType:
    return settings_package(monkeypatch, "ac_settings")


@pytest.mark.parametrize("policy", [imports_its_ops, imports_the_module, imports_the_module_as,
                                    imports_the_module_from_its_package, in_package(imports_relatively, "ac_settings"),
                                    imports_in_nested_code], ids=lambda policy: policy.__name__)
def test_a_policy_importing_its_config_is_described_by_the_values_imported(settings, policy):
    saving_mm = describe(policy)
    settings.SAVE_OPS = {torch.ops.aten.mm.default}  # an equal set
    assert describe(policy) == saving_mm
    settings.SAVE_OPS = {torch.ops.aten.mm.default, torch.ops.aten.relu.default}
    assert describe(policy) != saving_mm


def test_an_import_is_described_by_the_module_and_attribute_it_names(settings, monkeypatch):
    assert describe(imports_its_ops)[5] == (
        ("import", "ac_settings.ops", (("SAVE_OPS", ("SAVE_OPS",), ("set", ("op", "aten.mm.default"))),)),)
    # The same code in another package, whose ops are equal: another module.
    settings_package(monkeypatch, "ac_settings_2")
    assert describe(in_package(imports_relatively, "ac_settings_2")) != describe(in_package(imports_relatively,
                                                                                            "ac_settings"))


def test_an_import_it_cannot_follow_is_refused_with_a_fix(settings):
    def uses_the_module_as_a_value(ctx, func, *args, **kwargs):
        from ac_settings import ops

        return func in getattr(ops, "SAVE_OPS")

    def imports_what_is_not_imported_yet(ctx, func, *args, **kwargs):
        from ac_settings_later import SAVE_OPS

        return func in SAVE_OPS

    def stores_it_in_a_global(ctx, func, *args, **kwargs):
        global ac_settings
        import ac_settings.ops

        return func in ac_settings.ops.SAVE_OPS

    assert reason(uses_the_module_as_a_value).endswith(
        "from ac_settings import ops: the module ac_settings.ops, stored in the local ops, used as a value (only "
        "attributes read from it can be described): read attributes from ops only, or import them (from "
        "ac_settings.ops import ...)")
    assert reason(imports_what_is_not_imported_yet).endswith(
        "from ac_settings_later import SAVE_OPS: imports ac_settings_later, which is not imported in this process "
        "yet (describing it would run its code): import it at module level")
    assert reason(in_package(imports_relatively, None)).endswith(
        "from .ops import SAVE_OPS: a relative import its module cannot resolve (no package specified for '.ops' "
        "(required for relative module names)): import it at module level")
    assert reason(stores_it_in_a_global).endswith(
        "import ac_settings.ops: the imported value goes where it cannot be followed (STORE_GLOBAL ac_settings): "
        "import it at module level")


# -- a graph's policies while its key is computed, in process ---------------------


def scaled_by_user_code(t):
    return t * 5


torch._dynamo.allow_in_graph(scaled_by_user_code)


def dynamo_graph(block, context_fn):
    graphs = []

    def backend(gm, example_inputs):
        graphs.append(gm)
        return gm.forward

    torch._dynamo.reset()
    x = torch.randn(3, 4, requires_grad=True)
    torch.compile(lambda x: checkpoint(block, x, use_reentrant=False, context_fn=context_fn), backend=backend,
                  fullgraph=True)(x)
    [gm] = graphs
    return gm


def held_policies(gm) -> list:
    return [m.meta["_checkpoint_context_fn"] for m in gm.modules() if "_checkpoint_context_fn" in m.meta]


def test_a_policy_is_described_only_while_the_key_is_computed():
    context_fn = titan_like(ACConfig(), set())
    gm = dynamo_graph(lambda x: torch.relu(x @ x.T), context_fn)
    with described(gm) as policies:
        [held] = held_policies(gm)
        assert policies.refusal is None and held.cache_hash == policy_cache_hash(context_fn)
    assert held_policies(gm) == [context_fn]  # AOTAutograd traces with the policy itself


def test_a_checkpointed_region_the_key_does_not_hold_keeps_the_bypass():
    context_fn = titan_like(ACConfig(), set())
    gm = dynamo_graph(lambda x: scaled_by_user_code(x).sin(), context_fn)
    with described(gm) as policies:
        assert held_policies(gm) == [context_fn]
    assert policies.refusal == ("the checkpointed region calls `test_cache_keys_checkpoint.scaled_by_user_code`, "
                                "which the cache does not accept in a graph")
