"""Section ``warm_start_clients``: warm start of real client programs,
stock torch vs the plugin.

The warm-start benchmark (``warm_start``: fresh processes, a cold cache dir
and copies of it, alternating sides, the caches' outcomes and bypass
reasons) on the training step of torchtitan and HF transformers, built and
run through their own code by the client drivers
(``devtools.clients``): each sample is a new process that spawns
the case's gloo world, where every rank builds the model, compiles it the way
the client does (torchtitan: each block and the loss; transformers: the whole
model) with inductor, and times its first training step (forward, loss,
backward, optimizer step; the ranks start together). A sample is the slowest
rank's time; the outcomes are summed over the ranks and kept per rank.

Rows (``ROWS``): torchtitan's llama3 debugmodel (2 blocks) with TP=2 as its
trainer configures it (selective activation checkpointing) and without
activation checkpointing (and, when named, once more with torch's opt-in for
custom ``autograd.Function``s, which the plugin's keys make unneeded), TP=2 on
``full_dtensor`` and on ``spmd_types`` (torchtitan's default: plain tensors,
explicit collectives; also with its ``--debug.spmd_typechecking``), FSDP2
and dp2 x tp2; torchtitan's SimpleFSDP (the whole model compiled, FSDP on 2
ranks and dp2 x tp2), its deepseek_v3 debugmodel with expert parallelism (EP=2) and its llama3 with context parallelism
(CP=2, SDPA's math backend); a tiny HF Llama, Qwen3-MoE and Mixtral with
TP=2. A row whose client is not installed (or whose torch it does not
support) is skipped with the reason.
"""

from __future__ import annotations

import json
import sys
from dataclasses import dataclass, field
from typing import Any

import torch

from dynamo_dist._compat import observe as O
from devtools.clients import CPCase, HFCase, MoECase, SimpleFSDPCase, TitanCase, missing, run_driver
from dynamo_dist.worlds import run_in_world
from ._timing import Task
from .warm_start import BypassReasons, Program, measure, over_ranks

# torch's opt-in for custom autograd.Functions in the AOTAutograd cache
# (torch._functorch.config.autograd_cache_allow_custom_autograd_functions).
CUSTOM_FUNCTIONS_CACHEABLE = (("TORCHINDUCTOR_AUTOGRAD_CACHE_ALLOW_CUSTOM_AUTOGRAD", "1"),)
TORCHTITAN_MIN_TORCH = (2, 14)  # torchtitan 0.3.0


@dataclass(frozen=True)
class ClientRow:
    """One row: a client's case and what the row's name says about it."""

    client: str  # a key of devtools.clients.DRIVERS
    case: Any  # one of devtools.clients' case classes
    env: tuple[tuple[str, str], ...] = field(default=())


ROWS: dict[str, ClientRow] = {
    "torchtitan TP=2, partial_dtensor, selective AC": ClientRow("torchtitan", TitanCase("tp", "partial_dtensor")),
    "torchtitan TP=2, partial_dtensor, no AC": ClientRow("torchtitan", TitanCase("tp", "partial_dtensor", ac="none")),
    "torchtitan TP=2, partial_dtensor, no AC, custom Functions cacheable": ClientRow(
        "torchtitan", TitanCase("tp", "partial_dtensor", ac="none"), CUSTOM_FUNCTIONS_CACHEABLE),
    "torchtitan TP=2, full_dtensor, no AC": ClientRow("torchtitan", TitanCase("tp", "full_dtensor", ac="none")),
    "torchtitan TP=2, spmd_types, no AC": ClientRow("torchtitan", TitanCase("tp", "spmd_types", ac="none")),
    "torchtitan TP=2, spmd_types type-checked, no AC": ClientRow(
        "torchtitan", TitanCase("tp", "spmd_types", ac="none", spmd_typechecking=True)),
    "torchtitan FSDP2, no AC": ClientRow("torchtitan", TitanCase("fsdp", "partial_dtensor", ac="none")),
    "torchtitan dp2 x tp2, partial_dtensor, no AC": ClientRow(
        "torchtitan", TitanCase("dp_tp", "partial_dtensor", ac="none")),
    "torchtitan SimpleFSDP, FSDP": ClientRow("torchtitan", SimpleFSDPCase("fsdp")),
    "torchtitan SimpleFSDP, dp2 x tp2": ClientRow("torchtitan", SimpleFSDPCase("dp_tp")),
    "torchtitan deepseek_v3 MoE, EP=2": ClientRow("torchtitan", MoECase(ep=2)),
    "torchtitan CP=2, SDPA math": ClientRow("torchtitan", CPCase(cp=2, attention="math")),
    "transformers Llama TP=2": ClientRow("transformers", HFCase(tp_size=2)),
    "transformers Qwen3-MoE TP=2": ClientRow("transformers", HFCase(tp_size=2, family="qwen3_moe")),
    "transformers Mixtral TP=2": ClientRow("transformers", HFCase(tp_size=2, family="mixtral")),
}
# Every row but torch's opt-in: the plugin admits the Functions it opens the cache to (it runs when named).
# torchtitan's spmd_types rows run when named (``--client-rows``, the restart
# tool's ``--rows``), into results files of their own; the default rows are
# those of the full runs saved as warm_start_clients_*.json and restart_*.json.
SPMD_ROWS = ("torchtitan TP=2, spmd_types, no AC", "torchtitan TP=2, spmd_types type-checked, no AC")
DEFAULT_ROWS = tuple(name for name, row in ROWS.items() if not row.env and name not in SPMD_ROWS)
QUICK_ROWS = ("transformers Llama TP=2",)
# Named sets of rows run on their own (``--client-rows`` the set's rows, in
# the clients' warm start and in compile once): their results file writes a
# block of its own (``devtools.bench.report``, the section's marker and the
# set's name) and no README line. spmd_types' unchecked step: under the
# checker stock crashes in the trace, so there is no stock side to time
# (the type checker's cost is its own tool, ``devtools.clients.check_cost``).
ROW_SETS = {"spmd_types": ("torchtitan TP=2, spmd_types, no AC",)}


def row_set(rows: Any) -> str | None:
    """The name of the row set ``rows`` are, or None."""
    return next((name for name, members in ROW_SETS.items() if tuple(rows or ()) == members), None)


def skip_reason(name: str) -> str | None:
    """Why ``name`` cannot run here, or None."""
    row = ROWS[name]
    absent = missing(row.client)
    if absent:
        return f"not installed: {', '.join(absent)} (pip install 'dynamo-dist[clients]')"
    torch_version = tuple(int(p) for p in torch.__version__.split("+")[0].split(".")[:2])
    if row.client == "torchtitan" and torch_version < TORCHTITAN_MIN_TORCH:
        return f"torchtitan 0.3.0 needs torch >= {'.'.join(map(str, TORCHTITAN_MIN_TORCH))}"
    return None


def program(name: str) -> Program:
    row = ROWS[name]
    return Program(name, "gloo", row.case.world_size, None, __name__, (name,), row.env, frames=None)


# ---------------------------------------------------------------------------
# The child: one first training step on every rank of a fresh world.


def first_step_on_rank(side: str, name: str) -> dict[str, Any]:
    """This rank's first training step of ``name``'s case (module level: run
    in a spawned rank)."""
    torch.set_num_threads(1)  # the ranks share the machine's cores
    row = ROWS[name]
    with BypassReasons(side) as bypasses:
        [result] = run_driver(row.client, "run_case", row.case, steps=1, modes=(side,), backend="inductor",
                              explain=False)
    if result.error:
        raise RuntimeError(result.error)
    return {"wall": result.step_seconds[0], "cpu": result.step_cpu_seconds[0],
            "frames": O.dynamo_counters()["stats"]["unique_graphs"], "caches": O.outcome_counts(),
            "bypass_reasons": bypasses.reasons}


def child_main(side: str, name: str, timeout: float = 900) -> dict[str, Any]:
    torch.set_num_threads(1)  # as every benchmark process
    ranks = run_in_world(first_step_on_rank, ROWS[name].case.world_size, side, name, timeout=timeout)
    return over_ranks(ranks)


# ---------------------------------------------------------------------------
# The parent.


def tasks(cfg: Any) -> list[Task]:
    """One task per row of ``cfg.warm_clients``; a row that cannot run here
    gives its reason."""
    def run(name: str, progress: Any) -> dict[str, Any]:
        reason = skip_reason(name)
        if reason is not None:
            return {"model": name, "world": "gloo", "ranks": ROWS[name].case.world_size, "skipped": reason}
        return measure(program(name), cfg.warm_cold_repeats, cfg.warm_clients_repeats, cfg.warm_timeout, progress)

    return [Task(f"warm_start_clients {name}", lambda progress, name=name: run(name, progress))
            for name in cfg.warm_clients]


if __name__ == "__main__":
    # python -m devtools.bench.warm_clients SIDE NAME
    print(json.dumps(child_main(*sys.argv[1:3])), flush=True)
