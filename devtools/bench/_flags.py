"""Module constants a benchmark frame reads (``guard_cost_loaded``): torch
guards a value read through a module, and saves that guard with the frame."""

SCALE = 2
FLAG = False
