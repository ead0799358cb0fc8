"""The AOTAutograd cache's key step, per graph, while the plugin is installed.

``_hooks`` wraps torch's ``autograd_cache_key(gm, ...)`` (which checks that
a Dynamo graph may be cached, then computes its key) with ``keyed_graphs``:

- selective-AC policies without a ``cache_hash`` are described for the
  duration of the call (``checkpoint_policies.described``);
- when the graph's custom ``autograd.Function`` calls depend only on what
  the key holds (``autograd_functions.examine``), the call runs under torch's
  opt-in for them, for this graph only;
- scalars read from a tensor's elements (``t.tolist()``) are method calls
  on receivers known to be tensors (``tensor_elements``);
- when the cache refuses the graph for a policy or a Function the plugin
  could not key, its reason gets the plugin's after ``REFUSED`` (what
  ``explain`` shows);
- the plugin's parts of the key are noted beside the cache
  (``key_parts``), so that a miss can name the part that differed.
"""

from __future__ import annotations

from typing import Any, Callable

from .. import _compat as C
from . import autograd_functions, checkpoint_policies, key_parts, tensor_elements

# Put between the cache's reason for a bypass and the plugin's.
REFUSED = "\ndynamo_dist cannot key it: "


def keyed_graphs(autograd_cache_key: Callable[..., Any]) -> Callable[..., Any]:
    def key(mod: Any, *args: Any, **kwargs: Any) -> Any:
        gm = C.caches.graph_module_of(mod)
        with checkpoint_policies.described(gm) as policies, tensor_elements.known_as_tensors(gm):
            functions = autograd_functions.examine_safely(gm)
            try:
                with functions.admission(), key_parts.noting(gm) as notes:
                    computed = autograd_cache_key(mod, *args, **kwargs)
                key_parts.record(computed[0] if isinstance(computed, tuple) else computed, notes)
                return computed
            except C.caches.bypass_error() as e:
                ours = _our_reason(str(e), policies.refusal, functions.refusal)
                if ours is None:
                    raise
                raise type(e)(f"{e}{REFUSED}{ours}") from e

    return key


def _our_reason(reason: str, policy: str | None, function: str | None) -> str | None:
    """The plugin's reason for the thing the cache's ``reason`` names."""
    if policy and reason.startswith(C.caches.SAC_BYPASS_REASON):
        return policy
    if function and C.caches.AUTOGRAD_FUNCTION_APPLY.name() in reason:
        return function
    return None
