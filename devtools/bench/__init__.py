"""Benchmarks of dynamo_dist against stock torch, run by ``python -m devtools bench``.

One module per family, plus the shared timing machinery:

- ``compile_time``: trace + compile time of query functions and TP models;
- ``guard_cost``: per-call overhead of a compiled function over its bare graph;
- ``guard_cost_loaded``: per-call cost of frames loaded by torch's precompile
  (``TORCH_CACHING_PRECOMPILE=1``) against the same frames traced, fresh processes;
- ``recompiles``: compile count and correctness on a workload varying its inputs;
- ``step_time``: training-step time on real gloo (and NCCL) worlds, against the
  hand-written local-tensor version in ``handwritten``;
- ``warm_start``: the first step of a new process from a cold and a warm
  inductor cache (FX-graph and AOTAutograd cache outcomes), one process per sample;
- ``_timing``: medians, alternating rounds, paired ratios, stock/plugin switching;
- ``suite`` (configurations, the run) and ``report`` (tables, docs/benchmarks.md).

The code lives inside the package so that the CLI, and the spawned ranks of
the step-time worlds (which import it by name), find it after
``pip install .`` as well as from an editable checkout. The repository's
``benchmarks/`` folder holds the runnable entry point and the saved results.
"""
