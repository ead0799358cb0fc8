"""Fixes to AOTAutograd for DTensor programs, each installed as a wrapper
around the AOTAutograd function it corrects (``_hooks/core.py``):

- ``alias.py``: outputs that are views of DTensor inputs, rebuilt at run time;
- ``rng_states.py``: where a checkpointed random op's RNG state is saved
  (2.12 / 2.13);
- ``object_constants.py``: a tracked object (a mesh) a graph holds as a
  constant is the object itself, never a tangent's graph value or a fake
  wrapper (a DTensor made in the graph by ``from_local`` and returned);
- ``collective_inputs.py``: an ``AsyncCollectiveTensor`` input that requires
  grad keeps its gradient (2.12+);
- ``symbol_proxies.py``: a symbol's graph value is the first the tracer made
  (a TP model with a dynamic size and grad recursed forever, 2.13+).
"""
