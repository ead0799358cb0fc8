"""Test helpers for dynamo_dist and for users' own distributed code.

Importable without pytest:

- ``fake_world(world_size, rank)``: a single-process fake process-group world.
- ``distributed_objects_in(graph_module)``: meshes, groups and placements that
  leaked into an FX graph (rule 1: there must be none).
- ``run_in_gloo_world(fn, n)``: ``fn`` on every rank of a real gloo world.
- ``compile_and_run(fn, *args, fullgraph=True)``: compiled result, eager
  result, captured graphs and frame count, side by side.
- ``dynamo_dist.testing.models``: seeded tensor-parallel models (``MLP``,
  ``SequenceParallelBlock``, ``TransformerBlock``), their ``parallelize_*``
  functions and sizes; ``numerics``: the multi-rank compiled-vs-eager checks;
  ``capture.CaptureBackend``: a backend that records post-AOT graphs and
  their collectives; ``training.Trainer``: eager/compiled training runs.
- ``assert_compiles_like_eager(fn, *args, fullgraph=..., backend=...)``: the
  fuzzing oracle: results, escaping objects, exceptions, graph breaks.
- ``GlooPool(n)``: a real gloo world kept alive across many calls.
- ``dynamo_dist.testing.strategies`` (needs hypothesis): ``worlds()``,
  ``meshes(world)``, ``placements(mesh_ndim, tensor_ndim)``,
  ``dtensor_specs()``, ``programs(world, inputs)`` and whole examples;
  ``dynamo_dist.testing.properties``: the fuzzing properties' checks.
"""

from .fake_world import fake_world, make_mesh
from .gloo_world import run_in_gloo_world
from .graph_checks import distributed_objects_in
from .oracle import CompiledRun, compile_and_run
from .oracle import assert_compiles_like_eager, difference
from .gloo_pool import GlooPool

__all__ = ["fake_world", "make_mesh", "distributed_objects_in", "run_in_gloo_world", "compile_and_run", "CompiledRun"]
__all__ += ["assert_compiles_like_eager", "difference", "GlooPool"]
