"""The compile-cache key step: what a cached graph depends on, described so
that torch's caches (inductor's FX graph cache, the AOTAutograd cache) key
it soundly and the same way in every process.

- ``describe``: stable descriptions of Python values (code, closures,
  globals, op overloads, plain values, containers, frozen dataclasses), or
  the reason a value has none;
- ``checkpoint_policies``: a selective activation checkpointing policy
  (``context_fn``) keyed by its description;
- ``autograd_functions``: whether a graph's custom ``autograd.Function``
  calls depend only on what the key holds;
- ``subgraphs``: whether the key holds everything a subgraph does;
- ``aot_key``: both applied to each graph the AOTAutograd cache keys.
"""
