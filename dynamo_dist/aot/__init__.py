"""Fixes to AOTAutograd for DTensor programs, each installed as a wrapper
around the AOTAutograd function it corrects (``_hooks/core.py``):

- ``alias.py``: outputs that are views of DTensor inputs, rebuilt at run time;
- ``rng_states.py``: where a checkpointed random op's RNG state is saved
  (2.12 / 2.13).
"""
