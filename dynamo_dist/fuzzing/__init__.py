"""The fuzzer behind ``python -m dynamo_dist fuzz``: specs of worlds, meshes,
placements and small programs (``specs``, ``programs``), hypothesis
strategies (``strategies``; public as ``dynamo_dist.testing.strategies``), the
eager-vs-compiled oracle (``oracle``; public through ``dynamo_dist.testing``),
the properties (``properties``), the driver (``driver``) and reproducer
scripts (``reproducer``)."""
