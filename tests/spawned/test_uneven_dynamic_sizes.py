"""Every rank decides alike on dynamic sizes that split unevenly.

Each rank traces a DTensor call as its own coordinate; where a sharded size
is symbolic, the sizes it asks about differ by rank (``ceil(s/2) == 1`` on
the first of two ranks, ``s - ceil(s/2) == 1`` on the second), so stock's
ranks specialize differently and compile different graphs: a rank's graph
then fails, or waits in a collective its peer never joins. With the plugin
every rank traces the call as every coordinate first, in the same order
(``variables/dtensor.py``, ``_trace_as_every_coordinate``), so all ranks
compile the same graphs, which run like eager. On 2 real gloo ranks."""

from __future__ import annotations

import pytest

from dynamo_dist.testing import run_in_world

from rank_programs import UNEVEN_DYNAMIC, uneven_dynamic_sizes

# The fake runs as other coordinates read DeviceMesh and DTensor internals
# that differ between releases.
pytestmark = pytest.mark.release


def test_ranks_compile_the_same_graphs_and_run_like_eager():
    per_rank = run_in_world(uneven_dynamic_sizes, 2, sorted(UNEVEN_DYNAMIC), True, timeout=240)
    for name in sorted(UNEVEN_DYNAMIC):
        for rank, found in enumerate(r[name] for r in per_rank):
            assert found["error"] is None, f"{name}, rank {rank}: {found['error']}"
            assert found["wrong"] <= 1e-5, f"{name}, rank {rank}: compiled differs from eager by {found['wrong']}"
        same = per_rank[0][name]["graphs"] == per_rank[1][name]["graphs"]
        assert same, f"{name}: the ranks compiled different graphs"


def test_stock_ranks_compile_different_graphs():
    """docs/dtensor.md: stock's ranks specialize an unevenly split dynamic
    size differently, and a rank's graph fails at run time (one call, so no
    rank waits on a peer that failed)."""
    per_rank = [r["redistribute"] for r in run_in_world(uneven_dynamic_sizes, 2, ["redistribute"], False, 1,
                                                          timeout=240)]
    assert per_rank[0]["graphs"] != per_rank[1]["graphs"], per_rank
    assert any(found["error"] for found in per_rank), per_rank
