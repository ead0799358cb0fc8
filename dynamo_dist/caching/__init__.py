"""The cache-key step: stable, sound compile-cache keys for distributed
programs, so a warm process (or another rank, or another host) reuses what
one compile produced.

- ``keys.py``: the cache identity of meshes, groups, placements and other
  constants a graph depends on, and the rank tag;
- ``baked_ops.py``: DTensor calls with folded arguments as graph nodes the
  caches can key;
- ``sdpa.py``: the calls of ``with sdpa_kernel(...)`` as cacheable graph calls.

The changes to torch's caches that use them are ``_hooks/caches.py``'s.
"""
