"""Compile once per job: where a graph's compile-cache key is the same on
every rank, the first rank to miss it compiles and the others load what it
compiled.

Under ``compile_on_one_rank`` the plugin's cache keys hold no rank
(``keys.rank_tag``), so every rank of a job looks up the same keys at about
the same time, misses together on a cold start and would compile the same
graph W times. Here each lookup that misses everywhere (local and remote
cache) goes through the job's store (``store``): one rank claims the key
and compiles; the others wait, receive the artifacts it saved
(``torch.compiler.load_cache_artifacts``' bytes, framed by ``bundles``) and
look the key up again, now a local hit. The store carries the signals; the
bytes reach each host once (``host``), from the fleet cache where torch's
remote cache is on (``fleet``), else from the store. No shared filesystem or
remote cache is needed; where they exist, they are used first.

Two levels, the coarsest that applies:

- **AOTAutograd** (``aot``): one lookup per Dynamo graph, forward and
  backward together. The claiming rank lowers the backward at once (AOTAutograd
  otherwise waits for the first ``.backward()``, and the entry is saved only
  then: after a forward whose collectives need the very ranks that wait),
  and its bundle holds the AOTAutograd entry with every FX-graph entry the
  compile touched.
- **FX graph** (``fx``): where the AOTAutograd cache bypasses (a graph it
  refuses, or it is off), each inductor graph, forward and (lazily lowered)
  backward, is claimed on its own.

A claim ends in a publish (after the cache saved the key) or an abandon (the
compile raised, or saved nothing): ``scope()`` around every compile abandons
what its block claimed and did not publish, so no rank ever waits on a key
nobody compiles. Waiters stop waiting when the compiling rank abandons, goes
silent, or takes longer than ``config.compile_once_wait_s``, and then compile
themselves.

It acts only when keys are shared and nothing in the compile needs every
rank (``inactive_reason``); otherwise every rank compiles its own graphs, as
without it. Store failures and refused bundles are warned once each and fall
back to compiling here. Each decision is logged as a structured-trace
artifact (``dynamo_dist_compile_once``) that ``explain`` reads, and counted
(``stats``).

Modules:

- ``protocol``: lookups, claims, loads, publishes and compile scopes;
- ``store``: the claim / tick / done protocol over the job's c10d store
  (blocking waits; a graph's keys deleted once every rank has its bytes);
- ``host``: the ranks of a host share one download;
- ``fleet``: the fleet cache as the data plane;
- ``bundles``: a graph's artifacts framed with their key, length and digest;
- ``kernels``: compiled C++ kernels sent with the artifacts;
- ``frames``: Dynamo's own entries (torch's precompile) shipped the same way,
  so a waiting rank loads a frame instead of tracing it;
- ``hooks``: the changes to torch it needs, as (owner, name, replacement)
  rows that ``_hooks/caches.py`` installs.

The keys it relies on (the same on every rank under ``compile_on_one_rank``)
are ``caching/``'s.
"""

from .protocol import AOT, FX, TRACE_ARTIFACT, inactive_reason, reset_stats, stats

__all__ = ["AOT", "FX", "TRACE_ARTIFACT", "inactive_reason", "reset_stats", "stats"]
