"""Guards recompile exactly when a folded answer would differ.

Each test compiles once, then calls with a changed input and checks the
answer equals eager and the frame count rose (or did not) as it should.
"""

import copy
import dataclasses
import inspect
import pickle

import pytest
import torch
import torch.distributed as dist
from torch._dynamo.testing import CompileCounter
from torch.distributed.device_mesh import DeviceMesh
from torch.distributed.tensor.placement_types import Partial, Replicate, Shard, _StridedShard

from dynamo_dist import _compat as C
from dynamo_dist.caching.keys import mesh_identity
from dynamo_dist.guards import MeshFingerprint, known_fingerprint, mesh_fingerprint
from dynamo_dist.guards.mesh import _compact
from dynamo_dist.testing import make_mesh

pytestmark = [pytest.mark.usefixtures("plugin"), pytest.mark.release]


def compiled(fn):
    counter = CompileCounter()
    return torch.compile(fn, backend=counter, fullgraph=True), counter


def check_calls(fn, calls):
    """calls: list of (args, expect_recompile)."""
    cfn, counter = compiled(fn)
    expected_frames = 0
    for args, recompiles in calls:
        expected_frames += 1 if (recompiles or expected_frames == 0) else 0
        got = cfn(*args)
        want = fn(*args)
        # NaN where eager has NaN too: a fake world's collectives leave memory uninitialized.
        torch.testing.assert_close(got, want, equal_nan=True)
        assert counter.frame_count == expected_frames, (args, counter.frame_count, expected_frames)


def test_different_process_group_recompiles(world8):
    # Stock 2.13 reuses the graph and returns the first group's size/ranks.
    mesh = make_mesh((2, 4))
    pg_small, pg_big = mesh.get_group(0), mesh.get_group(1)

    def fn(x, pg):
        ranks = dist.get_process_group_ranks(pg)
        return x + pg.size() * 100 + dist.get_world_size(pg) * 10 + ranks[-1]

    x = torch.zeros(1)
    check_calls(fn, [((x, pg_small), True), ((x, pg_small), False), ((x, pg_big), True)])


def test_placement_change_recompiles(world8):
    def fn(x, p):
        if p.is_shard():
            return x + p.dim
        if isinstance(p, _StridedShard):
            return x + 100 + p.split_factor
        return x - 1 if p.is_replicate() else x - 2

    x = torch.zeros(1)
    check_calls(
        fn,
        [
            ((x, Shard(0)), True),
            ((x, Shard(0)), False),  # equal new object: no recompile
            ((x, Shard(1)), True),
            ((x, _StridedShard(1, split_factor=2)), True),
            ((x, _StridedShard(1, split_factor=4)), True),
            ((x, Replicate()), True),
            ((x, Partial()), True),
            ((x, Partial("max")), True),
        ],
    )


def test_placement_list_change_recompiles(world8):
    def fn(x, placements):
        return x + sum(i + 1 for i, p in enumerate(placements) if p.is_shard())

    x = torch.zeros(1)
    check_calls(
        fn,
        [
            ((x, (Shard(0), Replicate())), True),
            ((x, (Shard(0), Replicate())), False),
            ((x, (Replicate(), Shard(0))), True),
        ],
    )


def mesh_fn(x, mesh):
    out = x + mesh.ndim * 1000 + mesh.size(0) * 100 + mesh.get_coordinate()[0] * 10
    return out + len(mesh.get_group(0).group_name)


def test_equal_new_mesh_does_not_recompile(world8):
    # Slicing a submesh (or copying a mesh) outside the compiled function, as
    # training loops do every step, gives a new object over the same groups.
    import copy

    root = make_mesh((2, 4), ("dp", "tp"))
    t1, t2 = root["tp"], root["tp"]
    assert t1 is not t2 and t1._dim_group_names == t2._dim_group_names
    x = torch.zeros(1)
    check_calls(mesh_fn, [((x, t1), True), ((x, t2), False), ((x, t1), False)])
    check_calls(mesh_fn, [((x, root), True), ((x, copy.copy(root)), False)])


def test_same_shape_other_groups_recompiles(world8):
    # Two init_device_mesh calls: equal by DeviceMesh.__eq__, but backed by
    # different process groups. Stock 2.13 reuses the graph (and with DTensor,
    # its collectives name the old groups).
    m1 = make_mesh((2, 4), ("dp", "tp"))
    m2 = make_mesh((2, 4), ("dp", "tp"))
    assert m1 == m2 and m1._dim_group_names != m2._dim_group_names

    def fn(x, mesh):
        return x + int(mesh.get_group("tp").group_name)

    x = torch.zeros(1)
    check_calls(fn, [((x, m1), True), ((x, m2), True), ((x, m1), False)])


def test_mesh_ndim_change_recompiles_cleanly(world8):
    # Stock 2.13 crashes here (ndim becomes a SymInt under automatic dynamic)
    # and every later recompile of the frame fails too.
    meshes = [make_mesh((8,)), make_mesh((2, 4)), make_mesh((2, 2, 2)), make_mesh((8,))]
    x = torch.zeros(1)

    def fn(x, mesh):
        return x + mesh.ndim + sum(mesh.shape)

    check_calls(fn, [((x, meshes[0]), True), ((x, meshes[1]), True), ((x, meshes[2]), True), ((x, meshes[3]), False)])


def test_mesh_rank_layout_change_recompiles(world8):
    a = make_mesh((2, 4))
    b = DeviceMesh("cpu", torch.arange(8).flip(0).view(2, 4))  # same shape, other rank map

    def fn(x, mesh):
        return x + mesh.get_coordinate()[1] * 10 + mesh.get_coordinate()[0]

    x = torch.zeros(1)
    check_calls(fn, [((x, a), True), ((x, b), True)])


def test_world_reinitialised_recompiles():
    # dist.get_rank() without a group folds; a new world must recompile.
    from dynamo_dist.testing import fake_world

    def fn(x):
        return x + dist.get_rank() * 10 + dist.get_world_size()

    cfn, counter = compiled(fn)
    for size, rank in [(4, 1), (8, 7), (8, 7)]:
        with fake_world(size, rank):
            torch.testing.assert_close(cfn(torch.zeros(1)), fn(torch.zeros(1)))
    assert counter.frame_count == 3  # a new world object each time


# -- the mesh fingerprint follows this release's DeviceMesh.__eq__ -----------

def test_mesh_fingerprint_covers_every_field_of_this_releases_eq(world8):
    import copy

    from dynamo_dist import _compat as C
    from dynamo_dist.guards import mesh_fingerprint

    mesh = make_mesh((2, 4), ("dp", "tp"))
    # __eq__ and _hash_key read the same fields (5 up to 2.14; 2.15 adds
    # _preserve_rank_order); _thread_id has been one of them since 2.13.
    hash_key = C.distributed.mesh_hash_key(mesh)  # 2.12+; 2.11's __hash__ hashes the same fields inline
    assert hash_key is None or len(C.distributed.MESH_EQ_FIELDS) == len(hash_key)
    assert "_thread_id" in C.distributed.MESH_EQ_FIELDS
    if "preserve_rank_order" in inspect.signature(DeviceMesh.__init__).parameters:
        assert "_preserve_rank_order" in C.distributed.MESH_EQ_FIELDS
    expected = mesh_fingerprint(mesh, with_coordinate=False)
    for field in C.distributed.MESH_EQ_FIELDS:
        other = copy.copy(mesh)
        setattr(other, field, object())
        assert other != mesh, field
        assert mesh_fingerprint(other, with_coordinate=False) != expected, field


def test_mesh_fingerprint_is_a_frozen_named_value_with_its_hash_made_once(world8):
    mesh = make_mesh((2, 4), ("dp", "tp"))
    fp = mesh_fingerprint(mesh, with_coordinate=True)
    assert [f.name for f in dataclasses.fields(fp) if f.compare] == [
        "mesh_type", "eq_fields", "group_names", "coordinate", "flattened"]
    assert fp.mesh_type is DeviceMesh and fp.group_names == C.distributed.mesh_dim_group_names(mesh)
    assert fp.eq_fields == tuple(C.distributed.mesh_eq_key(mesh)) and fp.coordinate == tuple(mesh.get_coordinate())
    assert mesh_fingerprint(mesh, with_coordinate=False).coordinate is None
    assert not hasattr(fp, "__dict__")
    with pytest.raises(dataclasses.FrozenInstanceError):
        fp.coordinate = None
    assert hash(fp) == fp._hash == hash((fp.mesh_type, fp.eq_fields, fp.group_names, fp.coordinate, fp.flattened))
    copied = pickle.loads(pickle.dumps(fp))
    assert copied == fp and hash(copied) == hash(fp) and copied is not fp
    assert fp != mesh_fingerprint(make_mesh((2, 4), ("dp", "tp")), with_coordinate=True)  # other groups
    # Equal meshes share one fingerprint object: the guard compares with `is`.
    twin = copy.copy(mesh)
    assert known_fingerprint(twin, True) is known_fingerprint(mesh, True) == fp
    assert known_fingerprint(twin, False) is not known_fingerprint(twin, True)
    assert isinstance(known_fingerprint(mesh, True), MeshFingerprint)


def test_a_meshs_cache_key_identity_is_its_fingerprint_as_text(world8):
    """The compile caches key a mesh by this text: it changes only with what
    the mesh is (its root's flattened meshes included)."""
    for mesh in (make_mesh((8,)), make_mesh((2, 4), ("dp", "tp")), make_mesh((2, 4), ("dp", "tp"))["tp"]):
        assert mesh_identity(mesh) == repr(("torch.distributed.device_mesh.DeviceMesh",
                                            tuple(_compact(v) for v in C.distributed.mesh_eq_key(mesh)),
                                            C.distributed.mesh_dim_group_names(mesh), None,
                                            C.distributed.mesh_flatten_state(mesh)))


def _mesh_with_preserve_rank_order(ranks, on):
    if "preserve_rank_order" in inspect.signature(DeviceMesh.__init__).parameters:  # 2.15+
        return DeviceMesh("cpu", ranks, preserve_rank_order=on)
    mesh = DeviceMesh("cpu", ranks)
    mesh._preserve_rank_order = on  # no effect before 2.15: not an __eq__ field
    return mesh


def test_meshes_differing_only_in_preserve_rank_order_are_not_stale(world8):
    # Identity rank order: both meshes reuse the default group, so only the
    # __eq__ field tells them apart (2.15: a != b, eager answers differ).
    a = _mesh_with_preserve_rank_order(list(range(8)), False)
    b = _mesh_with_preserve_rank_order(list(range(8)), True)
    ref = DeviceMesh("cpu", list(range(8)))

    def fn(x, m):
        return x + 1, m == ref, hash(m) == hash(ref)

    cfn, counter = compiled(fn)
    for m in (a, b, a):
        got, want = cfn(torch.zeros(1), m), fn(torch.zeros(1), m)
        assert got[1:] == want[1:], (m._hash_key(), got[1:], want[1:])
    assert counter.frame_count == (2 if a != b else 1)


def test_mesh_guard_identity_fast_path_skips_the_fingerprint(world8, monkeypatch):
    import copy

    import dynamo_dist.guards.mesh as mesh_guard

    mesh = make_mesh((2, 4), ("dp", "tp"))
    cfn, counter = compiled(mesh_fn)
    x = torch.zeros(1)
    cfn(x, mesh)
    calls = []
    original = mesh_guard.mesh_fingerprint
    monkeypatch.setattr(mesh_guard, "mesh_fingerprint", lambda *a, **k: calls.append(a) or original(*a, **k))
    cfn(x, mesh)
    assert calls == []  # the same mesh object: one `is`, no field read
    cfn(x, copy.copy(mesh))
    assert len(calls) == 1 and counter.frame_count == 1


def test_loaded_mesh_and_spec_checks_answer_as_the_fingerprint_and_skip_it_for_what_matched(world8, monkeypatch):
    """The checks a guard saved by torch's precompile is rebuilt as (from
    unpickled expectations, no live mesh): the first call on a mesh computes
    its fingerprint; the same mesh, and the same placements tuple, are then
    matched by identity, until the mesh's root flattens a dim."""
    import dynamo_dist.guards.mesh as mesh_guard
    from dynamo_dist.guards.dtensor import spec_check, spec_expected

    mesh = make_mesh((2, 4), ("dp", "tp"))
    dtensor = _dtensor_on(mesh, [Shard(0), Replicate()])
    loaded = mesh_guard.mesh_check(pickle.loads(pickle.dumps(mesh_guard.mesh_expected(mesh))))
    loaded_spec = spec_check(pickle.loads(pickle.dumps(spec_expected(dtensor._spec))))
    assert loaded(mesh) and loaded_spec(dtensor._spec)
    lookups = []
    original = mesh_guard.known_fingerprint
    monkeypatch.setattr(mesh_guard, "known_fingerprint", lambda *a: lookups.append(a) or original(*a))
    assert loaded(mesh) and loaded_spec(dtensor._spec)
    assert lookups == []
    other = make_mesh((4, 2), ("dp", "tp"))
    assert not loaded(other) and not loaded_spec(_dtensor_on(other, [Shard(0), Replicate()])._spec)
    assert not loaded_spec(_dtensor_on(mesh, [Replicate(), Shard(0)])._spec)
    assert loaded(copy.copy(mesh)) and loaded_spec(_dtensor_on(mesh, [Shard(0), Replicate()])._spec)
    assert loaded(mesh) and loaded_spec(dtensor._spec)
    lookups.clear()
    mesh._flatten("dp_tp")  # the fingerprint holds the flattened meshes: it differs now
    assert not loaded(mesh) and not loaded_spec(dtensor._spec)
    assert lookups


# -- a DTensor input's spec guard: the same facts as stock's, at a cost
# independent of the world size ----------------------------------------------

def _dtensor_on(mesh, placements, dtype=torch.float32):
    """An (8, 4) DTensor of ones. Its local shard is made here (``from_local``):
    a fake world's scatter moves no data and would leave it uninitialized."""
    from torch.distributed.tensor import DTensor

    local = [8, 4]
    for mesh_dim, p in enumerate(placements):
        if p.is_shard():
            local[p.dim] //= mesh.size(mesh_dim)
    return DTensor.from_local(torch.ones(local, dtype=dtype), mesh, placements, run_check=False)


def test_dtensor_spec_guard_recompiles_exactly_when_the_spec_differs(world8):
    import copy

    mesh = make_mesh((2, 4), ("dp", "tp"))
    other_groups = make_mesh((2, 4), ("dp", "tp"))

    def fn(x):
        return x.to_local() * 2

    check_calls(fn, [
        ((_dtensor_on(mesh, [Shard(0), Replicate()]),), True),
        ((_dtensor_on(mesh, [Shard(0), Replicate()]),), False),  # a new DTensor, same spec
        ((_dtensor_on(copy.copy(mesh), [Shard(0), Replicate()]),), False),  # an equal new mesh
        ((_dtensor_on(mesh, [Replicate(), Replicate()]),), True),  # other placements
        ((_dtensor_on(other_groups, [Shard(0), Replicate()]),), True),  # same layout, other groups
        ((_dtensor_on(mesh, [Shard(0), Replicate()], torch.float64),), True),  # other dtype
    ])


def test_dtensor_spec_guard_never_compares_rank_maps(world8, monkeypatch):
    """Stock's guard compares the live mesh with a deep copy on every call
    (``DeviceMesh.__eq__``: the whole rank map); the plugin's checks identity,
    and an equal new mesh's fingerprint once per mesh object."""
    import copy

    import dynamo_dist.guards.mesh as mesh_guard

    mesh = make_mesh((2, 4), ("dp", "tp"))
    x = _dtensor_on(mesh, [Shard(0), Replicate()])
    cfn, counter = compiled(lambda x: x.to_local() + 1)
    cfn(x)
    eq_calls, fingerprints = [], []
    monkeypatch.setattr(DeviceMesh, "__eq__", lambda a, b: eq_calls.append(1) or a is b)
    original = mesh_guard.mesh_fingerprint
    monkeypatch.setattr(mesh_guard, "mesh_fingerprint", lambda *a, **k: fingerprints.append(a) or original(*a, **k))
    for _ in range(5):
        cfn(x)
    assert eq_calls == [] and fingerprints == []
    y = _dtensor_on(copy.copy(mesh), [Shard(0), Replicate()])
    for _ in range(5):
        cfn(y)
    assert eq_calls == [] and len(fingerprints) == 1  # the new mesh object, once
    assert counter.frame_count == 1


# -- flattened meshes: what DTensor's planner bakes into a graph -------------

def _planned_all_reduces(mesh):
    """A redistribution DTensor's planner merges onto a flattened mesh
    covering ``a, c`` where the root has one: Partial on ``a`` and ``c``."""
    from torch.distributed.tensor import DTensor

    def fn(local):
        d = DTensor.from_local(local, mesh, [Partial(), Replicate(), Partial()], run_check=False)
        return d.redistribute(mesh, [Replicate()] * 3).to_local()

    return fn


def test_mesh_identity_holds_the_flattened_meshes_of_its_root(world8):
    mesh = make_mesh((2, 2, 2), ("a", "b", "c"))
    before, submesh_before = mesh_identity(mesh), mesh_identity(mesh["b"])
    ac = mesh["a", "c"]._flatten("ac")
    after = mesh_identity(mesh)
    assert after != before and "'ac'" in after
    # A submesh's root is the same mesh: its identity moves too (the planner
    # searches the root's flattened meshes whichever submesh a DTensor is on).
    assert mesh_identity(mesh["b"]) != submesh_before
    flattened = known_fingerprint(mesh, with_coordinate=False).flattened
    assert [(name, groups) for name, _, groups in flattened] == [("ac", C.distributed.mesh_dim_group_names(ac))]
    # Without the flattened meshes (how a pickled mesh is matched to a live one).
    assert mesh_identity(mesh, flattened=False) == before.replace(", ())", ")")


def test_a_later_flatten_recompiles_to_eagers_plan(world8):
    """Compiled, then a flatten of ``a, c``: eager now runs one all_reduce on
    the flattened group; the guard fails and the new graph runs that too."""
    from dynamo_dist.diagnostics.backend import CaptureBackend

    mesh = make_mesh((2, 2, 2), ("a", "b", "c"))
    fn = _planned_all_reduces(mesh)
    backend = CaptureBackend("aot_eager")
    cfn = torch.compile(fn, backend=backend, fullgraph=True)
    local = torch.ones(4, 4)
    cfn(local)
    cfn(local)
    assert backend.compiles == 1
    ac = mesh["a", "c"]._flatten("ac")
    cfn(local)
    assert backend.compiles == 2
    groups = [[c.group for c in graph if c.op != "wait_tensor"] for graph in backend.forward_collectives]
    assert groups[0] == [*C.distributed.mesh_dim_group_names(mesh["a"]), *C.distributed.mesh_dim_group_names(mesh["c"])]
    assert groups[1] == list(C.distributed.mesh_dim_group_names(ac))


def test_the_same_flatten_state_reuses_the_graph(world8):
    mesh = make_mesh((2, 2, 2), ("a", "b", "c"))
    mesh["a", "c"]._flatten("ac")
    check_calls(_planned_all_reduces(mesh), [((torch.ones(4, 4),), True), ((torch.ones(4, 4),), False)])
    # An equal submesh sliced anew each call, with the root's flatten state unchanged.
    fn = _planned_all_reduces(mesh)
    check_calls(lambda t, m: fn(t) + m.size(), [((torch.ones(4, 4), mesh["a", "b"]), True),
                                                 ((torch.ones(4, 4), mesh["a", "b"]), False)])


def test_every_key_holds_the_planners_switches():
    import torch.distributed.tensor._redistribute as planner

    from dynamo_dist.caching.keys import planner_tag, process_tag

    flags = [name for name, _ in C.distributed.redistribute_planner_flags()]
    assert "_DISABLE_REDISTRIBUTE_TRANSFORM_OPTIMIZATION" in flags or not hasattr(
        planner, "_DISABLE_REDISTRIBUTE_TRANSFORM_OPTIMIZATION")
    before = process_tag()
    assert planner_tag() in before
    for name in flags:
        old = getattr(planner, name)
        setattr(planner, name, True if old is not True else False)
        try:
            assert process_tag() != before, name
        finally:
            setattr(planner, name, old)
    assert process_tag() == before
