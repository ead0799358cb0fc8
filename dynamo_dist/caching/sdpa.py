"""The SDPA backend choice of ``with sdpa_kernel(...)`` as cacheable graph calls.

For ``with sdpa_kernel(backends, set_priority=...)`` inside a compiled
region, Dynamo (``SDPAKernelVariable``) records the context manager in the
graph as calls of two private functions of ``torch.nn.attention``:

    b0 = _backend_from_string("CUDNN_ATTENTION"); b1 = ...      # on entry
    _sdpa_kernel([b0, b1, ...], True)
    ... scaled_dot_product_attention(...) ...
    p0 = _backend_from_string("MATH"); ...                       # on exit: the
    _sdpa_kernel([p0, ...], True)                                # backends enabled when traced

The AOTAutograd cache accepts only call targets it knows, so a graph holding
them is *bypassed*: every process traces AOTAutograd again (torchtitan's
attention enters ``sdpa_kernel`` in every block; without activation
checkpointing the calls sit in the block's top-level graph and the block
never caches; inside a checkpointed region they sit in a subgraph, which the
check does not visit, and it caches).

Both are safe to cache, and the key already states everything they depend on:

- ``_backend_from_string(name)`` is ``getattr(SDPBackend, name)``: a pure
  function of the constant ``name``, which is part of the graph's code, hence
  of the key.
- ``_sdpa_kernel(backends, set_priority)`` runs while AOTAutograd traces (the
  traced graphs hold no call of it). It enables exactly the backends listed
  and disables every other one; with ``set_priority`` it puts them first in
  the priority order, in the listed order (the ones not listed keep the
  process's order behind them). SDPA's kernel choice is the first *enabled*
  backend in priority order that accepts the inputs: disabled backends are
  skipped wherever they stand, so inside the region the choice depends on the
  list (constants of the graph's code, in the key) and on what any SDPA call
  depends on (its inputs, the device, which the key holds or which stock
  caches in every graph calling SDPA without the context manager). Without
  ``set_priority`` the order of the enabled ones is the process's, as for an
  SDPA call outside any ``sdpa_kernel``, which the cache accepts.

So while the plugin is installed both are marked cacheable
(``unsafe_marked_cacheable_functions``), each with a digest of its source as
its version: a torch whose function differs keys differently.
"""

from __future__ import annotations


from .. import _compat as C
from .keys import source_digest


def marked_cacheable() -> dict[str, str]:
    """``name -> version`` entries for ``unsafe_marked_cacheable_functions``."""
    return {name: source_digest(fn) for name, fn in C.caches.sdpa_backend_calls().items()}
