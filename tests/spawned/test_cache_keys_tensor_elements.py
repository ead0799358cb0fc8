"""Scalars read from a tensor's elements (``t.tolist()`` under
``capture_scalar_outputs``, as expert parallelism reads its all-to-all split
sizes) no longer keep a graph out of the AOTAutograd cache: with the plugin
the graph is stored, another process with other split sizes hits it and
computes what eager does; stock bypasses it (``dynamo_dist/caching/tensor_elements.py``
says why the method calls are on tensors).
"""

from __future__ import annotations

import pytest

from cache_key_programs import run_fresh

pytestmark = pytest.mark.slow

PROGRAM = {"program": "split_by_counts"}
OTHER_SIZES = {**PROGRAM, "counts": [[2, 2], [0, 2]]}  # other splits of the same 6 rows


@pytest.fixture(scope="module")
def processes(tmp_path_factory) -> tuple[list, list]:
    cache = tmp_path_factory.mktemp("inductor_cache")
    first = run_fresh(cache, [PROGRAM, {**PROGRAM, "plugin": False}])
    second = run_fresh(cache, [OTHER_SIZES, {**PROGRAM, "scale": 2}])
    return first, second


def test_stock_bypasses_the_element_reads(processes):
    stock = processes[0][1]
    assert stock["aot"] == ["bypass"] and stock["same_as_eager"]
    # (2.15 names the method and its receiver, 2.11-2.14 the receiver's getitem.)
    assert "Unsupported call_method" in stock["reasons"][0] and "getitem" in stock["reasons"][0]


def test_the_plugin_stores_the_graph_and_another_process_hits_it_with_other_sizes(processes):
    (cold, _), (warm, changed) = processes
    assert cold["aot"] == ["miss"] and cold["same_as_eager"]
    assert warm["aot"] == ["hit"] and warm["same_as_eager"]  # other split sizes, the same compiled graph
    assert changed["aot"] == ["miss"] and changed["same_as_eager"]  # other code: another key
