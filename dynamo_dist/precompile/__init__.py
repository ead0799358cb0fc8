"""Fixes to torch's precompile (``TORCH_CACHING_PRECOMPILE``), each installed
as a wrapper around the torch function it corrects (``_hooks/core.py``):

- ``function_ctx.py``: a frame inside an ``autograd.Function``'s forward
  (resumed after a graph break) holds the Function's ``ctx``, which torch's
  guard pickler cannot save; it is saved as its Function and the state it
  has, and loads as a ``ctx`` of that Function.
"""
