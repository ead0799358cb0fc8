"""Fixes to torch's precompile (``TORCH_CACHING_PRECOMPILE``, ``aot_compile``),
each installed as a wrapper around the torch function it corrects
(``_hooks/core.py``); the facts each rests on, and the accessors it reaches
torch through, are in ``_compat/dynamo.py`` and ``_compat/packages.py``:

- ``saved_guards.py``: a frame's guards as torch saves them, and a frame
  with a guard that has no saved form declined:
  - ``plugin_guards.py``: each plugin guard in its saved form (a picklable
    description rebuilt as the same check), and the plugin's saved-by guard
    (its version, the redistribute planner's switches, the folded rank);
  - ``torch_guards.py``: torch's guards on a config override or on a value
    read through a module, saved as the values they stand for;
- ``guard_state.py``: what torch's guard pickler cannot save (a frame's
  guards and the values they were built on), saved in the plugin's forms:
  - ``function_ctx.py``: an ``autograd.Function``'s ``ctx`` (a frame
    resumed inside its ``forward`` holds it), saved as its Function and
    state, loaded as a new ``ctx`` of it;
  - ``groups.py``: a process group a guard reads (under
    ``compile_on_one_rank``), saved as its identity, loaded as the loading
    process's group of that identity;
- ``fsdp.py``: FSDP2 modules and their classes in saved guards;
- ``packages.py``: saved entries installed or traced again, recorded and
  written merged with the other packages and processes of one function,
  modules loaded through recorded aliases;
- ``new_globals.py``: a traced frame's new globals named apart from a loaded
  frame's (2.11-2.14).
"""
