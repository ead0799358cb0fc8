"""The demo's fixtures (also used by the benchmarks and the numerics tests):
seeded tensor-parallel models (``models``) and eager/compiled training runs
(``training``)."""
