"""Fixes to torch's precompile (``TORCH_CACHING_PRECOMPILE``), each installed
as a wrapper around the torch function it corrects (``_hooks/core.py``):

- ``guard_state.py``: what torch's guard pickler cannot save (a frame's
  guards and the values they were built on), saved in the plugin's forms:
  - ``function_ctx.py``: an ``autograd.Function``'s ``ctx`` (a frame
    resumed inside its ``forward`` holds it), saved as its Function and
    state, loaded as a new ``ctx`` of it;
  - ``groups.py``: a process group a guard reads (under
    ``compile_on_one_rank``), saved as its identity, loaded as the loading
    process's group of that identity.
"""
