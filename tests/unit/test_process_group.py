"""Process groups and torch.distributed queries fold; tracked groups work with
functional collectives exactly as in stock."""

import pytest
import torch
import torch.distributed as dist
import torch.distributed._functional_collectives as funcol

import dynamo_dist
from dynamo_dist import _compat as C
from dynamo_dist.testing import compile_and_run, make_mesh
from helpers import check_like_eager

pytestmark = [pytest.mark.usefixtures("plugin"), pytest.mark.release]


def group_queries(x, pg):
    return x + pg.size(), (
        pg.rank(),
        pg.size(),
        pg.group_name,
        pg._get_backend_name(),
        dist.get_rank(pg),
        dist.get_world_size(pg),
        dist.get_world_size(group=pg),
        dist.get_process_group_ranks(pg),
        dist.get_rank(),
        dist.get_world_size(),
        pg == pg,
    )


def test_group_queries_fold(world):
    size, _ = world
    for shape in [(size,), (1, size)] + ([(2, size // 2)] if size % 2 == 0 else []):
        mesh = make_mesh(shape)
        for i in range(mesh.ndim):
            check_like_eager(group_queries, torch.ones(2), mesh.get_group(i))


def test_world_group(world):
    def fn(x):
        pg = dist.group.WORLD
        return x + 1, (pg.size(), pg.rank(), dist.get_world_size(dist.group.WORLD))

    check_like_eager(fn, torch.ones(2))


def test_group_escapes_as_itself(world8):
    mesh = make_mesh((2, 4))
    pg = mesh.get_group(1)

    def fn(x, pg):
        return x + 1, pg

    run = check_like_eager(fn, torch.ones(1), pg)
    assert run.compiled[1] is pg


def _funcol_program(x, pg, mesh):
    a = funcol.all_reduce(x, "sum", pg)
    b = C.distributed.all_gather_single(x, 0, (mesh, 1))
    c = C.distributed.reduce_scatter_single(x.repeat(mesh.size(0), 1), "sum", 0, (mesh, 0))
    return a + 1, b * 2, c - 1


def test_functional_collectives_same_graph_as_stock(world8):
    mesh = make_mesh((2, 4))
    pg = mesh.get_group(1)
    x = torch.ones(4, 4)

    plugin_run = compile_and_run(_funcol_program, x, pg, mesh)
    dynamo_dist.uninstall()
    try:
        stock_run = compile_and_run(_funcol_program, x, pg, mesh, fullgraph=False)
    finally:
        dynamo_dist.install()

    def collective_calls(run):
        return [
            (str(n.target), tuple(a for a in n.args if isinstance(a, (str, int))))
            for gm in run.graphs
            for n in gm.graph.nodes
            if n.op == "call_function" and "_c10d_functional" in str(n.target)
        ]

    assert collective_calls(plugin_run), "expected functional collectives in the graph"
    assert collective_calls(plugin_run) == collective_calls(stock_run)
    assert plugin_run.frame_count == 1


def _c10d_collective_on(x, pg):
    # dist.all_reduce is traced as a functional collective; on its way it asks
    # `group or dist.group.WORLD`: the truth of the tracked group.
    dist.all_reduce(x, group=pg)
    return x + 1


def _truths(x, mesh):
    pg = mesh.get_group(0)
    return x + (1 if pg else 2) + (3 if not mesh else 4) + (5 if pg is not None else 6) + (7 if mesh and pg else 8)


def test_c10d_collectives_and_the_truth_of_meshes_and_groups_compile_whole(world8):
    """On every release, as stock does (2.11 / 2.12 jumped only on Python
    constants, so the plugin's trackers broke the graph there)."""
    mesh = make_mesh((2, 4))
    run = check_like_eager(_c10d_collective_on, torch.ones(4), mesh.get_group(1))
    assert run.frame_count == 1 and "all_reduce" in run.graphs[0].code
    run = check_like_eager(_truths, torch.zeros(2), mesh)
    assert run.frame_count == 1
    torch.testing.assert_close(run.compiled, torch.full((2,), 17.0))


@pytest.mark.skipif(C.aot.GRAPH_HELD_GROUP_CLASS is None,
                    reason="a graph holds a process group as an object only on torch 2.12+")
def test_a_group_among_a_graphs_inputs_is_in_its_cache_key_by_name(world8):
    """torch keys an opaque graph input by its position alone, and
    AOTAutograd's trace turns a group input into the constant its
    collectives use (``compile_on_one_rank``): two graphs alike but for the
    group must not share an entry. Saved and loaded, a group is this
    process's group of the same name (tests/spawned/test_spmd_types_group_constants.py)."""
    from torch._library.fake_class_registry import FakeScriptObject

    from dynamo_dist.caching import keys

    gm = torch.fx.symbolic_trace(lambda x: x + 1)
    tp, dp = dist.new_group([0, 1, 2, 3]), dist.new_group([2, 3])  # this rank is 3

    def key(group, inputs=None):
        inputs = [torch.ones(2), FakeScriptObject(None, "ProcessGroup", group)] if inputs is None else inputs
        details = C.caches.hash_details()(gm, inputs, {}, [])
        return C.caches.fx_cache_pickler()(gm).get_hash(details)

    assert key(tp) == key(tp)
    assert key(tp) != key(dp)
    assert key(None, [torch.ones(2)]) == key(None, [torch.ones(2)])
    stored = keys.saved_group(dp)
    assert keys.saved_group_here(stored) is dp
    with pytest.raises(RuntimeError, match="make the same groups in the same order"):
        keys.saved_group_here(keys.SavedGroup(stored.name, 4))
