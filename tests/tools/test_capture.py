"""CaptureBackend records post-AOT graphs; collectives_in names each
collective's group and whether it is waited on (fake world, one process)."""

import pytest
import torch
import torch.distributed._functional_collectives as funcol

from dynamo_dist.testing import make_mesh
from dynamo_dist.testing import CaptureBackend, Collective, collectives_in


def reduce_on_tp(x, mesh):
    return funcol.all_reduce(x * 2, "sum", mesh.get_group("tp")) + 1


@pytest.mark.usefixtures("plugin")
@pytest.mark.parametrize("backend", ["aot_eager", "inductor"])
def test_records_forward_and_backward_collectives(world8, backend):
    mesh = make_mesh((2, 4), ("dp", "tp"))
    tp = mesh.get_group("tp").group_name
    capture = CaptureBackend(backend)
    x = torch.ones(4, requires_grad=True)
    out = torch.compile(reduce_on_tp, backend=capture, fullgraph=True)(x, mesh)
    out.sum().backward()
    assert capture.compiles == 1 and len(capture.dynamo_graphs) == 1
    reduce = [Collective("all_reduce", tp, True), Collective("wait_tensor", None)]
    assert capture.forward_collectives == [reduce]
    assert len(capture.backward_graphs) == 1  # the gradient of a sum all-reduce is all-reduced
    assert capture.collectives() == {"forward": [reduce], "backward": [reduce]}
    assert str(reduce[0]) == f"all_reduce[{tp}]"


def test_unwaited_collective_is_reported():
    graph = torch.fx.Graph()
    x = graph.placeholder("x")
    y = graph.call_function(torch.ops._c10d_functional.all_reduce.default, (x, "sum", "7"))
    graph.output(y)
    assert collectives_in(torch.fx.GraphModule({}, graph)) == [Collective("all_reduce", "7", False)]


def test_unknown_backend_is_refused():
    with pytest.raises(ValueError, match="backend must be one of"):
        CaptureBackend("cudagraphs")
