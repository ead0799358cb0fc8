"""Hypothesis strategies for meshes, placements, DTensor specs and small
programs (public; implemented in ``dynamo_dist.fuzzing.strategies``, which the
fuzzer behind ``python -m dynamo_dist fuzz`` uses)."""

from ..fuzzing.strategies import *  # noqa: F401,F403
from ..fuzzing.strategies import __all__  # noqa: F401
