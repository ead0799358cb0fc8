"""The cache-key step: what a compiled graph depends on, described so that
torch's caches (inductor's FX graph cache, the AOTAutograd cache) key it
soundly and the same way in every process, and what one compile produced is
reused by a warm process, another rank or another host.

- ``keys``: the cache identity of meshes, groups, placements and other
  constants a graph depends on, the rank tag, the device a tensor is keyed on;
- ``baked_ops``: DTensor calls with folded arguments as graph nodes the
  caches can key;
- ``sdpa``: the calls of ``with sdpa_kernel(...)`` as cacheable graph calls;
- ``describe``: stable descriptions of Python values (code, closures,
  globals, op overloads, plain values, containers, dataclasses), or the
  reason a value has none;
- ``checkpoint_policies``: a selective activation checkpointing policy
  (``context_fn``) keyed by its description;
- ``autograd_functions``: whether a graph's custom ``autograd.Function``
  calls depend only on what the key holds;
- ``subgraphs``: whether the key holds everything a subgraph does;
- ``aot_key``: both applied to each graph the AOTAutograd cache keys;
- ``key_parts``: the plugin's parts of each key, kept beside the cache.

Compile once per job, which relies on these keys being the same on every
rank, is a package of its own (``compile_once/``).

The changes to torch's caches that use them are ``_hooks/caches.py``'s.
"""
