"""Compare the explain reports of the ranks of one run.

Every rank compiles its own graphs. When they differ (a rank folded into a
constant, a branch on the rank, a collective only some ranks issue), each
rank pays its own compile, and mismatched collectives hang. This module
points such differences out, and exchanges reports under ``torchrun``
through the launcher's own key-value store.
"""

from __future__ import annotations

import difflib
import json
import os
import re
from datetime import timedelta
from typing import Any

from torch.distributed import TCPStore

from .render import _short


def compare_ranks(reports: list[dict[str, Any]]) -> list[str]:
    """Differences between ranks' reports (``ExplainReport.to_dict()``, in rank order)."""
    if len(reports) < 2:
        return []
    found: list[str] = []
    for key in reports[0]["counts"]:
        values = [r["counts"][key] for r in reports]
        if len(set(values)) > 1:
            found.append(f"number of {key} differs: " + ", ".join(f"rank {i}: {v}" for i, v in enumerate(values)))
    graphs = [{g["compile_id"]: g for g in r["graphs"]} for r in reports]
    ids = list(dict.fromkeys(cid for per_rank in graphs for cid in per_rank))
    for cid in ids:
        have = [i for i, per_rank in enumerate(graphs) if cid in per_rank]
        first = graphs[have[0]][cid]
        where = f"graph {cid} ({first['function']} at {_short(first['file'])}:{first['line']})"
        if len(have) < len(reports):
            found.append(f"{where} exists only on ranks {have}")
            continue
        for i in have[1:]:
            other = graphs[i][cid]
            if other["code"] != first["code"]:
                found.append(f"{where} differs between rank {have[0]} and rank {i}: "
                             f"{_first_difference(first['code'], other['code'])} "
                             "(a rank-dependent graph: each rank compiles its own)")
                break
        signatures = [[_signature(c) for c in graphs[i][cid]["collectives"]] for i in have]
        if any(s != signatures[0] for s in signatures[1:]):
            found.append(f"{where} issues different collectives on different ranks (a hang risk): "
                         + "; ".join(f"rank {i}: {s or 'none'}" for i, s in zip(have, signatures)))
    breaks = [sorted(f"{_short(b['file'])}:{b['line']} {b['gb_type']}" for b in r["breaks"]) for r in reports]
    for i in range(1, len(reports)):
        if breaks[i] != breaks[0]:
            only = sorted(set(breaks[i]) ^ set(breaks[0]))
            found.append(f"graph breaks differ between rank 0 and rank {i}: {only}")
    return found


def _signature(c: dict[str, Any]) -> str:
    ranks = c["ranks"]
    size = "?" if ranks is None else ranks["count"] if isinstance(ranks, dict) else len(ranks)
    return f"{c['op']}({c['shape']}, {c['dtype']}, {size} ranks)"


def _code_lines(code: str) -> list[str]:
    # Drop FX's trailing "; x = None" (freeing temporaries): noise in a diff.
    return [re.sub(r";\s+[\w\s=]*= None$", "", line) for line in code.splitlines()]


def _first_difference(a: str, b: str) -> str:
    removed = None
    for line in difflib.ndiff(_code_lines(a), _code_lines(b)):
        if line.startswith("- ") and removed is None:
            removed = line[2:].strip()
        elif line.startswith("+ "):
            return f"`{removed}` vs `{line[2:].strip()}`" if removed else f"extra line `{line[2:].strip()}`"
    return f"missing line `{removed}`" if removed else "(same lines, different order)"


# -- exchange under torchrun ---------------------------------------------------


def launcher_world() -> tuple[int, int]:
    """(rank, world size) as the launcher (torchrun) set them; (0, 1) if none."""
    return int(os.environ.get("RANK", 0)), int(os.environ.get("WORLD_SIZE", 1))


def gather(report: dict[str, Any], timeout_s: float = 300.0) -> list[dict[str, Any]] | None:
    """On rank 0, every rank's report (rank order); None on other ranks, or
    when there is no launcher store to exchange through."""
    rank, world = launcher_world()
    if world <= 1:
        return [report]
    store = _launcher_store(timeout_s)
    if store is None:
        return None
    prefix = "dynamo_dist/explain/{}/{}/".format(os.environ.get("TORCHELASTIC_RUN_ID", "run"),
                                                 os.environ.get("TORCHELASTIC_RESTART_COUNT", "0"))
    store.set(prefix + str(rank), json.dumps(report))
    if rank != 0:
        return None
    keys = [prefix + str(r) for r in range(world)]
    store.wait(keys, timedelta(seconds=timeout_s))
    return [json.loads(store.get(k)) for k in keys]


def _launcher_store(timeout_s: float) -> Any:
    # torchrun's agent hosts a TCPStore at MASTER_ADDR:MASTER_PORT for the
    # whole run (TORCHELASTIC_USE_AGENT_STORE=True): still there after the
    # script has destroyed its own process group.
    if os.environ.get("TORCHELASTIC_USE_AGENT_STORE") != "True":
        return None
    try:
        return TCPStore(os.environ["MASTER_ADDR"], int(os.environ["MASTER_PORT"]), is_master=False,
                        timeout=timedelta(seconds=timeout_s))
    except Exception:
        return None
