"""The member tables drive the code: walk them."""

import pytest

from dynamo_dist.coverage.cases import CASES
from dynamo_dist.variables.members import ALL_TABLES, Kind


def test_every_break_row_has_a_concrete_hint():
    for type_name, table in ALL_TABLES.items():
        for name, member in table.items():
            if member.kind is Kind.BREAK:
                assert len(member.hint) > 20, (type_name, name)


def test_every_member_is_exercised_by_a_case():
    covered = {m for case in CASES for m in case.members}
    for type_name, table in ALL_TABLES.items():
        for name in table:
            assert f"{type_name}.{name}" in covered, f"{type_name}.{name} has no case"


@pytest.mark.parametrize("type_name", ["DeviceMesh", "Placement", "ProcessGroup"])
def test_table_members_exist_on_the_real_types(type_name):
    import torch.distributed as dist
    from torch.distributed.device_mesh import DeviceMesh
    from torch.distributed.tensor.placement_types import Partial, Shard, _StridedShard

    classes = {"DeviceMesh": [DeviceMesh], "Placement": [Shard, Partial, _StridedShard],
               "ProcessGroup": [dist.ProcessGroup]}[type_name]
    for name in ALL_TABLES[type_name]:
        assert any(hasattr(c, name) for c in classes) or name in ("dim", "reduce_op", "split_factor"), name
