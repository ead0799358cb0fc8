"""The DTensor fuzz's exclusion list, measured again on the running release.

``specs.DTENSOR_EXCLUDED`` leaves a statement out of generated DTensor
programs only while the plugin cannot compile it like eager on that release.
Each case below is a statement the list once held (or a sharded view, the
everyday way a ``_StridedShard`` appears), run on a real 2-rank gloo world:
with the plugin it must compile like eager wherever eager runs it, and a
statement the running release's list still holds must still fail (else the
entry is stale and must go).
"""

import pytest
from torch.distributed.tensor.placement_types import Shard, _StridedShard

from dynamo_dist import _compat as C
from dynamo_dist.fuzzing.properties import InvalidExample, check_dtensor, gloo_pool
from dynamo_dist.fuzzing.specs import DTensorExample, DTensorSpec, MeshSpec, Program, dtensor_exclusions

pytestmark = [pytest.mark.slow, pytest.mark.release]

RETURNS = "    return d.full_tensor(), d.to_local(), d.placements\n"
STRIDED = (_StridedShard(0, split_factor=2),)

# name -> (the exclusion entry it measures, the example)
CASES = {
    "redistribute to _StridedShard": ("redistribute_strided", DTensorExample(
        DTensorSpec(MeshSpec((2,)), (Shard(0),), (4, 4)),
        Program("def f(d, mesh):\n    d = d.redistribute(mesh, [_StridedShard(0, split_factor=2)])\n" + RETURNS))),
    "full_tensor of a _StridedShard input": ("strided inputs", DTensorExample(
        DTensorSpec(MeshSpec((2,)), STRIDED, (4, 4)), Program("def f(d, mesh):\n    d = d * 2\n" + RETURNS))),
    "_StridedShard input to Replicate": ("strided inputs", DTensorExample(
        DTensorSpec(MeshSpec((2,)), STRIDED, (4, 4)),
        Program("def f(d, mesh):\n    d = d.redistribute(mesh, [Replicate()])\n" + RETURNS))),
    "a sharded view returned": ("view", DTensorExample(
        DTensorSpec(MeshSpec((2,)), (Shard(1),), (2, 8, 4)), Program("def f(d, mesh):\n    d = d.view(16, 4) * 2\n"
                                                                      + RETURNS))),
    "a sharded view, gradient": ("view", DTensorExample(
        DTensorSpec(MeshSpec((2,)), (Shard(1),), (2, 8, 4)),
        Program("def f(d, mesh):\n    d = d.view(16, 4) * 2\n    return d.full_tensor(), d.placements\n"),
        backward=True)),
}


@pytest.fixture(scope="module")
def gloo2():
    with gloo_pool(2) as pool:
        yield pool


@pytest.mark.parametrize("name", list(CASES))
def test_a_case_the_list_leaves_in_compiles_like_eager(gloo2, name):
    entry, example = CASES[name]
    if entry in dtensor_exclusions():
        with pytest.raises(AssertionError):
            check_dtensor(example)
        return
    try:
        check_dtensor(example)
    except InvalidExample as e:
        # Only 2.11's eager DTensor refuses these itself (no _StridedShard
        # shard order, no flattening of a sharded dim): nothing to compile like.
        assert C.release.torch_version().startswith("2.11."), e
