"""Test helpers for dynamo_dist and for users' own distributed code.

Importable without pytest:

- ``fake_world(world_size, rank)``: a single-process fake process-group world;
  ``make_mesh(shape, names)``: ``init_device_mesh`` on the current world.
- ``distributed_objects_in(graph_module)``: meshes, groups and placements that
  leaked into an FX graph (rule 1: there must be none).
- ``run_in_world(fn, n)``: ``fn`` on every rank of a real gloo (or NCCL) world.
- ``compile_and_run(fn, *args, fullgraph=True)``: compiled result, eager
  result, captured graphs and frame count, side by side.
- ``CaptureBackend(backend)``: a ``torch.compile`` backend that records the
  Dynamo and post-AOT graphs and their collectives (``Collective``,
  ``collectives_in``).
- ``assert_compiles_like_eager(fn, *args, fullgraph=..., backend=...)``: the
  fuzzing oracle: results, escaping objects, exceptions, graph breaks;
  ``difference(eager, compiled)``: where two results differ (None if nowhere).
- ``GlooPool(n)``: a real gloo world kept alive across many calls.
- ``dynamo_dist.testing.strategies`` (needs hypothesis): ``worlds()``,
  ``meshes(world)``, ``placements(mesh_ndim, tensor_ndim)``,
  ``dtensor_specs()``, ``programs(world, inputs)`` and whole examples.

This package only re-exports: the implementations live in ``dynamo_dist.worlds``,
``dynamo_dist.diagnostics`` (graphs, the recording backend, result comparison)
and ``dynamo_dist.fuzzing`` (the oracle, strategies).
"""

from ..diagnostics.backend import CaptureBackend
from ..diagnostics.compare import difference
from ..diagnostics.graphs import Collective, collectives_in, distributed_objects_in
from ..fuzzing.oracle import CompiledRun, assert_compiles_like_eager, compile_and_run
from ..worlds import GlooPool, fake_world, make_mesh, run_in_world

__all__ = ["fake_world", "make_mesh", "distributed_objects_in", "run_in_world", "compile_and_run", "CompiledRun"]
__all__ += ["assert_compiles_like_eager", "difference", "GlooPool", "CaptureBackend", "Collective", "collectives_in"]
