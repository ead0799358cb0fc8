"""Unsupported members are clean, explained `dynamo_dist:` graph breaks,
never internal errors, with and without fullgraph."""

import pytest
import torch
import torch.distributed as dist
from torch._dynamo.exc import InternalTorchDynamoError, Unsupported
from torch._dynamo.utils import counters
from torch.distributed.device_mesh import DeviceMesh, init_device_mesh

from dynamo_dist import _compat as C
from dynamo_dist.testing import make_mesh
from dynamo_dist.variables.breaks import Break, BreakDeclarationError, BreakSpec, check_break, graph_break

pytestmark = [pytest.mark.usefixtures("plugin"), pytest.mark.release]


def submesh_private_attribute(x, mesh):
    x = x * 2  # some graph before the break, so the break is recorded
    return x + mesh["tp"]._rank  # no source to read it from, and stock has no handling


def group_barrier(x, mesh):
    x = x * 2  # some graph before the break, so the break is recorded
    mesh.get_group(0).barrier()
    return x + 1


def placement_private_method(x, mesh):
    x = x * 2  # some graph before the break, so the break is recorded
    from torch.distributed.tensor.placement_types import Shard

    return x + Shard(0)._local_shard_size_and_offset(8, 2, 0)[0]


def init_mesh_inside(x, mesh):
    x = x * 2  # some graph before the break, so the break is recorded
    m = init_device_mesh("cpu", (8,))
    return x + m.ndim


def new_group_inside(x, mesh):
    x = x * 2  # some graph before the break, so the break is recorded
    dist.new_group([0, 1])
    return x + 1


def tensor_arg_to_query(x, mesh):
    x = x * 2  # some graph before the break, so the break is recorded
    return x + mesh.size(x.sum().int() - 2)


BREAKING = [
    group_barrier,
    placement_private_method,
    init_mesh_inside,
    new_group_inside,
    tensor_arg_to_query,
]


@pytest.mark.parametrize("fn", BREAKING, ids=lambda f: f.__name__)
def test_fullgraph_gives_unsupported_with_our_message(world8, fn):
    mesh = make_mesh((8,))
    with pytest.raises(Unsupported) as exc:
        torch.compile(fn, backend="eager", fullgraph=True)(torch.ones(1), mesh)
    assert not isinstance(exc.value, InternalTorchDynamoError)
    msg = str(exc.value)
    assert "dynamo_dist:" in msg, msg
    assert "Hint:" in msg, msg


@pytest.mark.parametrize("fn", BREAKING, ids=lambda f: f.__name__)
def test_without_fullgraph_breaks_and_runs(world8, fn):
    mesh = make_mesh((8,))
    expected = fn(torch.ones(1), mesh)
    counters.clear()
    got = torch.compile(fn, backend="eager")(torch.ones(1), mesh)
    torch.testing.assert_close(got, expected)
    # A break in a call resumes after it ("graph_break"); a break in an
    # attribute load makes Dynamo run that frame eagerly ("unimplemented").
    # Either way the recorded reason is ours.
    reasons = list(counters["graph_break"]) + list(counters["unimplemented"])
    assert any(r.startswith("dynamo_dist:") for r in reasons), reasons


def test_missing_attribute_is_attribute_error_as_in_eager(world8):
    mesh = make_mesh((8,))

    def fn(x, mesh):
        try:
            mesh.definitely_not_a_member
        except AttributeError:
            return x + 1
        return x

    out = torch.compile(fn, backend="eager", fullgraph=True)(torch.ones(1), mesh)
    torch.testing.assert_close(out, fn(torch.ones(1), mesh))


def test_private_attribute_of_a_submesh_made_inside_is_a_clean_break(world8):
    mesh = make_mesh((2, 4), ("dp", "tp"))
    with pytest.raises(Unsupported, match="dynamo_dist: unsupported DeviceMesh member"):
        torch.compile(submesh_private_attribute, backend="eager", fullgraph=True)(torch.ones(1), mesh)


def _unfinished(mesh, *missing):
    """A copy of ``mesh`` as its constructor leaves it before it sets ``missing``."""
    copy = object.__new__(type(mesh))
    copy.__dict__.update({k: v for k, v in vars(mesh).items() if k not in missing})
    return copy


@pytest.mark.parametrize("missing", [(), ("_coordinate_on_dim",), ("_dim_group_names", "_coordinate_on_dim")],
                         ids=["nothing set", "no coordinate", "no groups"])
def test_a_mesh_whose_construction_has_not_finished_is_a_clean_break(world8, missing):
    """What Dynamo meets when it traces mesh construction: stock crashes."""
    mesh = make_mesh((2, 4), ("dp", "tp"))
    unfinished = _unfinished(mesh, *missing) if missing else DeviceMesh.__new__(DeviceMesh)
    assert C.distributed.mesh_is_constructed(mesh) and C.distributed.mesh_is_constructed(mesh["tp"])
    assert C.distributed.mesh_is_constructed(mesh._flatten("dp_tp"))
    assert not C.distributed.mesh_is_constructed(unfinished)

    def fn(x, m):
        return x + len(getattr(m, "_mesh_dim_names", None) or ())

    with pytest.raises(Unsupported, match="dynamo_dist: DeviceMesh under construction"):
        torch.compile(fn, backend="eager", fullgraph=True)(torch.ones(1), unfinished)


# 2.12's Dynamo (the 2.11 slot family with opaque meshes) can neither take
# len() of a _MeshLayout nor call its methods, stock included: the attribute
# is read, its use breaks.
_LAYOUT = pytest.param("_layout", marks=pytest.mark.xfail(
    C.slots.FAMILY == "2.11" and C.distributed.STOCK_MESH_OPAQUE, strict=True,
    reason="torch 2.12's Dynamo cannot trace len() of a _MeshLayout"))


@pytest.mark.parametrize("attr", [_LAYOUT, "_pg_registry", "_rank"])
def test_other_mesh_attributes_of_an_input_are_read_like_any_python_attribute(world8, attr):
    """Never worse than stock: stock compiles len(mesh._layout) and
    len(mesh._pg_registry) (and crashes on mesh._rank)."""
    from dynamo_dist.testing import compile_and_run, distributed_objects_in

    def fn(x, mesh):
        value = getattr(mesh, attr)
        return x + (value if isinstance(value, int) else len(value))

    mesh = make_mesh((2, 4), ("dp", "tp"))
    run = compile_and_run(fn, torch.ones(1), mesh)
    torch.testing.assert_close(run.compiled, run.eager)
    assert distributed_objects_in(run.graphs[0]) == []


# -- breaks are declared once and raised by name ----------------------------------

def test_a_break_is_raised_by_name_with_exactly_its_fields(monkeypatch):
    raised = []
    monkeypatch.setattr(C.dynamo, "break_graph", lambda *args: raised.append(args) or 1 / 0)
    with pytest.raises(ZeroDivisionError):
        graph_break(Break.UNSUPPORTED_MEMBER, context="DeviceMesh.frob", label="DeviceMesh",
                    what="DeviceMesh.frob", hint="Use x instead.")
    assert raised == [("dynamo_dist: unsupported DeviceMesh member", "DeviceMesh.frob",
                       "`DeviceMesh.frob` is not supported inside a compiled region by dynamo_dist.",
                       ["Use x instead."])]
    with pytest.raises(TypeError, match=r"UNSUPPORTED_MEMBER takes the fields \['hint', 'label', 'what'\]"):
        graph_break(Break.UNSUPPORTED_MEMBER, context="c", label="DeviceMesh", what="DeviceMesh.frob")
    with pytest.raises(TypeError, match="IDENTITY_HASH takes the fields"):
        graph_break(Break.IDENTITY_HASH, context="c", label="ProcessGroup")
    with pytest.raises(TypeError):
        graph_break(Break.IDENTITY_HASH, "c")  # context is a keyword
    assert len(raised) == 1


@pytest.mark.parametrize("spec,problem", [
    (dict(gb_type="", explanation="e", hints=("Use x.",)), "must be non-empty text"),
    (dict(gb_type="dynamo_dist: x", explanation="e", hints=("Use x.",)), "without the 'dynamo_dist:' prefix"),
    (dict(gb_type="x", explanation=" ", hints=("Use x.",)), "an explanation is needed"),
    (dict(gb_type="x", explanation="e", hints=()), "at least one non-empty hint"),
    (dict(gb_type="x", explanation="e", hints=["Use x."]), "at least one non-empty hint"),
    (dict(gb_type="x", explanation="e", hints=("",)), "at least one non-empty hint"),
    (dict(gb_type="x of {what}", explanation="e", hints=("Use x.",)), r"gb_type may only name \['label'\]"),
    (dict(gb_type="x", explanation="e {}", hints=("Use x.",)), "is not a named field"),
])
def test_a_bad_declaration_fails_naming_the_break(spec, problem):
    with pytest.raises(BreakDeclarationError, match=f"graph break SOME_BREAK: .*{problem}"):
        check_break("SOME_BREAK", BreakSpec(**spec))


def test_the_fields_of_a_declaration():
    spec = BreakSpec("unsupported {label} member", "`{what}` is not {label}.", ("Use {hint}.", "Move it."))
    assert check_break("B", spec) == {"label", "what", "hint"}
    assert Break.UNKNOWN_MEMBER.fields == {"label", "what", "members"}
    assert Break.MESH_UNDER_CONSTRUCTION.fields == frozenset()
