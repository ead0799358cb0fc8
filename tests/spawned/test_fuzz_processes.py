"""The ``processes`` property: compiled in one process, loaded in another.

The recording world it observes collectives with (eager and compiled
functional collectives reach its groups, named by kind and group ranks), and
fixed examples run through the property's check: each spawns fresh processes
that compile with inductor (~10 s a process on 2 cores, more while the
shared kernel cache is cold; about three minutes in all).
"""

from __future__ import annotations

import dataclasses

import pytest
import torch
from torch.distributed.tensor import DTensor
from torch.distributed.tensor.placement_types import Partial, Replicate, Shard

import dynamo_dist
from dynamo_dist import _compat as C
from dynamo_dist.fuzzing import processes
from dynamo_dist.fuzzing.properties import check_processes
from dynamo_dist.fuzzing.reproducer import reproducer_source
from dynamo_dist.fuzzing.specs import DTensorSpec, MeshSpec, ProcessesExample, ProcessState, Program, World
from dynamo_dist.worlds import Collective, make_mesh, recording_world

pytestmark = pytest.mark.slow

# -- the recording world ----------------------------------------------------------


def test_eager_functional_collectives_are_recorded_with_their_group_ranks():
    """Rank 5 of 8 on a (dp=2, tp=4) mesh: dp groups are {1, 5}, tp groups {4, 5, 6, 7}."""
    with recording_world(8, 5) as log:
        mesh = make_mesh((2, 4), ("dp", "tp"))
        x = torch.ones(4, 8)
        C.distributed.funcol.all_reduce(x, "sum", (mesh, 0)).wait()
        C.distributed.funcol.all_reduce(x, "avg", (mesh, 1)).wait()
        C.distributed.all_gather_single(x, 0, (mesh, 1)).wait()
        C.distributed.reduce_scatter_single(x, "max", 0, (mesh, 1)).wait()
        C.distributed.funcol.all_to_all_single(x, None, None, (mesh, 1)).wait()
        C.distributed.funcol.broadcast(x, 0, (mesh, 0)).wait()
        for t in C.distributed.funcol.all_reduce_coalesced([x, x], "sum", (mesh, 0)):
            t.wait()
        recorded = log.take()
    dp, tp = (1, 5), (4, 5, 6, 7)
    assert recorded == [
        Collective("all_reduce(sum)", dp), Collective("all_reduce(avg)", tp),
        Collective("all_gather_into_tensor", tp), Collective("reduce_scatter_tensor(max)", tp),
        Collective("all_to_all_single", tp), Collective("broadcast", dp),
        Collective("all_reduce(sum)_coalesced", dp),
    ]


def test_a_compiled_graphs_collectives_are_recorded_like_eager():
    """What compiled code runs reaches the groups too (no dispatch mode)."""
    with dynamo_dist.enabled(), recording_world(8, 0) as log:
        mesh = make_mesh((2, 2, 2), ("a", "b", "c"))
        d = DTensor.from_local(torch.ones(4, 4), mesh, [Partial(), Shard(0), Partial()], run_check=False)

        def f(d):
            return d.redistribute(mesh, [Replicate()] * 3).to_local() + 1

        torch.compile(f, backend="aot_eager", fullgraph=True)(d)
        compiled = log.take()
        f(d)
        eager = log.take()
    assert compiled == eager and len(eager) == 3, (compiled, eager)
    assert sorted(c.op for c in eager) == ["all_gather_into_tensor", "all_reduce(sum)", "all_reduce(sum)"]


def test_the_recording_world_is_a_fake_world_to_the_caches():
    with recording_world(4, 1):
        assert C.caches.is_fake_world()


# -- fixed examples ------------------------------------------------------------------

MESH = MeshSpec((2, 2, 2), ("a", "b", "c"))
TO_REPLICATE = Program("def f(d, mesh):\n    d = d.redistribute(mesh, [Replicate(), Replicate(), Replicate()])\n"
                       "    return d.to_local()\n")
PARTIAL_AC = DTensorSpec(MESH, (Partial(), Replicate(), Partial()), (4, 8))

# The regression for the flatten fault: DTensor's redistribute planner merges
# the two all-reduces of (Partial, Replicate, Partial) -> Replicate into one
# over a flattened ("a", "c") mesh when the root mesh has one, and bakes that
# flattened mesh's group name ("13") into the graph. The key left out the
# root mesh's flatten state: a process with no flatten hit A's entries and
# failed ("Could not resolve the process group registered under the name
# 13"); one that flattened ("a", "b") instead (its group "13" is a, b:
# ranks 0, 2, 4, 6) all-reduced silently over the wrong ranks.
FLATTEN_FAULT = ProcessesExample(
    PARTIAL_AC, (TO_REPLICATE,),
    compile=ProcessState(World(8, 0), flattened=(("a", "c"),)),
    loads=(ProcessState(World(8, 0)), ProcessState(World(8, 0), flattened=(("a", "b"),))),
)
# The same under compile_on_one_rank (a hit crashed there:
# device_mesh._get_flattened_submesh not registered in the loading process).
FLATTEN_FAULT_ONE_RANK = ProcessesExample(
    PARTIAL_AC, (TO_REPLICATE,),
    compile=ProcessState(World(8, 0), flattened=(("a", "c"),), one_rank=True),
    loads=(ProcessState(World(8, 0), one_rank=True), ProcessState(World(8, 0), flattened=(("a", "c"),), one_rank=True)),
)


# The same fault as the fuzzer found it (shrunk): two all-gathers on a (2, 2)
# mesh, merged into one over the flattened ("dp", "tp") group in A's graph.
FLATTEN_FAULT_GATHER = ProcessesExample(
    DTensorSpec(MeshSpec((2, 2), ("dp", "tp")), (Shard(0), Shard(0)), (4, 8)),
    (Program("def f(d, mesh):\n    d = d + 1\n    return d.full_tensor()\n"),),
    compile=ProcessState(World(4), flattened=(("dp", "tp"),)),
    loads=(ProcessState(World(4)),),
)


@pytest.mark.parametrize("example", [FLATTEN_FAULT, FLATTEN_FAULT_GATHER], ids=["all-reduce", "all-gather"])
def test_flatten_state_is_in_the_mesh_identity(example):
    check_processes(example)


def test_flatten_state_is_in_the_mesh_identity_on_one_rank():
    check_processes(FLATTEN_FAULT_ONE_RANK)


# Perturbations a loading process must survive (miss, or run eager's
# collectives), next to A's own state loaded again (which must hit).
PROGRAMS = (
    TO_REPLICATE,
    Program("def f(d, mesh):\n    d = d + 1\n    d = d.redistribute(mesh, [Shard(0), Replicate(), Shard(1)])\n"
            "    return d.full_tensor()\n"),
)
A_STATE = ProcessState(World(8, 0), flattened=(("a", "c"),))
PERTURBED = {
    "the same state": A_STATE,
    "groups made in another order": ProcessState(World(8, 0), groups_first=((0, 1, 2, 3), (4, 5, 6, 7)),
                                                 flattened=(("a", "c"),)),
    "another rank": ProcessState(World(8, 3), flattened=(("a", "c"),)),
    "the planner's switches": ProcessState(World(8, 0), flattened=(("a", "c"),), force_min_cost=False,
                                           no_transform_optimization=True),
    "compile_on_one_rank": ProcessState(World(8, 0), flattened=(("a", "c"),), one_rank=True),
    "artifacts, the same state": ProcessState(World(8, 0), flattened=(("a", "c"),), artifacts=True),
}
PERTURBATIONS = ProcessesExample(PARTIAL_AC, PROGRAMS, A_STATE, tuple(PERTURBED.values()))


def test_a_perturbed_process_misses_or_runs_eagers_collectives():
    results = processes.run_example(PERTURBATIONS)
    found = [p for who, state, runs in results for p in processes.problems(PERTURBATIONS, who, state, runs)]
    assert not found, "\n".join(found)
    hits = {name: [run.hits() > 0 for run in runs] for name, (_, _, runs) in zip(PERTURBED, results[1:])}
    # Loading in A's own state (shared cache or artifacts) serves A's graphs:
    # the property does check loaded graphs.
    assert hits["the same state"] == [True, True] and hits["artifacts, the same state"] == [True, True], hits


# Under precompile: A's own state (shared cache, artifacts), and the two
# perturbations a saved frame's guards must refuse.
PRECOMPILED = ("the same state", "artifacts, the same state", "another rank", "the planner's switches")
PERTURBATIONS_PRECOMPILED = dataclasses.replace(PERTURBATIONS, loads=tuple(PERTURBED[name] for name in PRECOMPILED),
                                                precompile=True)


def test_under_precompile_a_perturbed_process_traces_again_or_runs_eagers_collectives():
    """Perturbations under torch's precompile: a process in A's own
    state runs A's saved bytecode without tracing (so the check sees loaded
    frames); every other one passes its rebuilt guards only where A's code
    runs its own collectives, else traces again."""
    results = processes.run_example(PERTURBATIONS_PRECOMPILED)
    found = [p for who, state, runs in results
             for p in processes.problems(PERTURBATIONS_PRECOMPILED, who, state, runs)]
    assert not found, "\n".join(found)
    traced = {name: [run.traced for run in runs] for name, (_, _, runs) in zip(PRECOMPILED, results[1:])}
    assert [run.traced for run in results[0][2]] == [1, 1], results[0][2]  # A traced each program
    assert traced["the same state"] == [0, 0] and traced["artifacts, the same state"] == [0, 0], traced
    # A's frames hold rank 0's coordinate: another rank traces again; so does
    # a process whose planner would plan other collectives.
    assert traced["another rank"] == [1, 1] and traced["the planner's switches"] == [1, 1], traced


def test_a_reproducer_holds_the_example():
    source = reproducer_source("processes", "dynamo_dist.fuzzing.properties:check_processes", FLATTEN_FAULT)
    namespace: dict = {"__name__": "reproducer"}
    exec(compile(source, "<reproducer>", "exec"), namespace)
    assert namespace["EXAMPLE"] == FLATTEN_FAULT
    assert "SOURCE_0 = " in source
