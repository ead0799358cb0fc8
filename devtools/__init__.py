"""The contributor's tools of a dynamo_dist source checkout; not installed
with the package (``pip install dynamo-dist`` ships ``dynamo_dist`` only).

- ``bench/``: the benchmarks behind docs/benchmarks.md (``python -m devtools bench``);
- ``coverage/``: the coverage cases and the tables of docs/coverage.md
  (``python -m devtools coverage``);
- ``clients/``: drivers that train torchtitan and HF transformers eager,
  with stock torch and with the plugin (the client tests and benchmarks);
- ``numerics.py``: the multi-rank compiled-vs-eager numerics checks;
- ``module_graph.py``: the package's import graph, as docs/design.md draws
  it (``python -m devtools graph``);
- ``cli/``: those commands, made like ``python -m dynamo_dist``'s.

They reach the plugin only through the package's named functions
(``dynamo_dist._hooks`` to switch it on and off and patch what a tool needs,
``dynamo_dist._compat.observe`` for what the tools read of torch) and its
public modules. Run them from the repository root (``python -m devtools
--help``): the spawned ranks and benchmark children import them by name.
"""

import re

# The two sides every benchmark and client run compares, spelled once: stock
# torch and torch with the plugin. They are also the keys of the saved results
# (benchmarks/results/*.json) that the README and docs/benchmarks.md are made
# from, so they do not change.
STOCK, PLUGIN = "stock", "plugin"


def error_line(error: str) -> str:
    """A failed run's error in one line: its last line that names what was
    raised (Dynamo follows it with the user's stack and advice), else its
    last line. The tools that report a side's failure say it so."""
    lines = [line.strip() for line in error.strip().splitlines() if line.strip()]
    raised = [line for line in lines if _RAISED.match(line)]
    return raised[-1] if raised else (lines[-1] if lines else error)


_RAISED = re.compile(r"^[\w.]*(Error|Exception|Unsupported|Interrupt)\b")
