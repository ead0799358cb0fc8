"""DeviceMesh queries fold to constants under fullgraph=True, equal to eager."""

import pytest
import torch

from dynamo_dist.testing import make_mesh
from helpers import check_like_eager
from conftest import mesh_shapes

pytestmark = [pytest.mark.usefixtures("plugin"), pytest.mark.release]


def all_queries(x, mesh):
    names = mesh.mesh_dim_names
    out = [
        mesh.ndim,
        mesh.shape,
        mesh.size(),
        len(mesh.shape),
        mesh.get_rank(),
        mesh.get_coordinate(),
        mesh.mesh_dim_names,
        mesh.device_type,
        mesh == mesh,
        mesh != mesh,
        hash(mesh) == hash(mesh),
    ]
    for i in range(mesh.ndim):
        out += [mesh.size(i), mesh.size(mesh_dim=i), mesh.get_local_rank(i)]
        out += [mesh.get_group(i).size(), mesh.get_group(i).rank()]
        if names:
            out += [mesh.get_local_rank(names[i]), mesh.get_local_rank(mesh_dim=names[i])]
            out += [mesh[names[i]].size(), mesh[names[i]].get_local_rank()]
            out += [mesh.get_group(names[i]).group_name]
    if mesh.ndim == 1:
        out.append(mesh.get_local_rank())
    out += [len(mesh.get_all_groups()), [g.size() for g in mesh.get_all_groups()]]
    return x + mesh.ndim, tuple(out)


@pytest.mark.parametrize("named", [True, False], ids=["named", "unnamed"])
def test_mesh_queries_fold(world, named):
    size, _ = world
    for shape in mesh_shapes(size):
        names = ("a", "b", "c")[: len(shape)] if named else None
        mesh = make_mesh(shape, names)
        check_like_eager(all_queries, torch.ones(2), mesh)


def test_submesh_multi_dim_and_flatten(world8):
    mesh = make_mesh((2, 2, 2), ("dp", "cp", "tp"))

    def fn(x, m):
        sub = m["dp", "tp"]
        sub2 = m[("cp", "tp")]
        flat = m["dp", "cp"]._flatten("dp_cp")
        return x + 1, (
            sub.shape,
            sub.mesh_dim_names,
            sub.get_coordinate(),
            sub2.get_local_rank("tp"),
            flat.size(),
            flat.get_local_rank(),
            flat.mesh_dim_names,
        )

    check_like_eager(fn, torch.ones(2), mesh)


def test_mesh_from_global_and_module_attribute(world8):
    mesh = make_mesh((2, 4), ("dp", "tp"))
    globals()["GLOBAL_MESH"] = mesh

    class Holder(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.mesh = mesh

        def forward(self, x):
            return x * self.mesh["tp"].size() + GLOBAL_MESH.get_local_rank("dp")  # noqa: F821

    check_like_eager(Holder(), torch.ones(3))


def test_submesh_and_group_escape_rebuilt_from_parent(world8):
    mesh = make_mesh((2, 4), ("dp", "tp"))

    def fn(x, m):
        return x + 1, m["tp"], m.get_group("dp"), m.get_all_groups()

    run = check_like_eager(fn, torch.ones(2), mesh)
    assert run.compiled[1] == mesh["tp"]
    assert run.compiled[2] is mesh.get_group("dp")


def test_bad_mesh_queries_raise_like_eager(world8):
    mesh = make_mesh((2, 4), ("dp", "tp"))

    def bad_size(x, m):
        return x + m.size(5)

    def bad_name(x, m):
        return x + m.get_local_rank("nope")

    def bad_key(x, m):
        return x + m["nope"].size()

    for fn in (bad_size, bad_name, bad_key):
        with pytest.raises(Exception) as eager_exc:
            fn(torch.ones(1), mesh)
        # Without fullgraph the user sees exactly the eager exception.
        with pytest.raises(type(eager_exc.value)):
            torch.compile(fn, backend="eager")(torch.ones(1), mesh)
        torch._dynamo.reset()

    # Inside the compiled region the exception is the eager type: it can be caught.
    def caught(x, m):
        try:
            m.size(5)
        except IndexError:
            x = x + 1
        try:
            m.get_local_rank("nope")
        except KeyError:
            x = x + 10
        return x

    check_like_eager(caught, torch.ones(1), mesh)
