"""Worlds to run distributed code in: a single-process fake world (also one
that records its collectives), a real multi-process gloo (or NCCL) world, and
a gloo world kept alive across many calls. Public through ``dynamo_dist.testing``; the CLI, the benchmarks, the
fuzzer and the coverage cases use them from here."""

from .fake import fake_world, make_mesh
from .spawned import run_in_world
from .pool import GlooPool
from .recording import Collective, CollectiveLog, recording_world

__all__ = ["fake_world", "make_mesh", "run_in_world", "GlooPool", "recording_world", "Collective",
           "CollectiveLog"]
