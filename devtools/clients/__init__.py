"""Drivers for real client programs that users compile with dynamo_dist:
torchtitan (``torchtitan.py``: llama3 with TP / FSDP2, and through
``torchtitan_simple_fsdp.py``, ``torchtitan_moe.py`` and
``torchtitan_cp.py`` SimpleFSDP, expert parallelism and context parallelism)
and Hugging Face transformers tensor parallelism on dense and
mixture-of-experts models (``transformers.py``). Each builds the client's
model through the client's own code, trains it a few steps eagerly, compiled
with stock torch and compiled with dynamo_dist, and reports per mode
(``runs.py``): losses and gradients against eager, graph breaks, recompiles,
failed compiles and the collectives of each captured graph.

The configurations (``cases.py``) and :func:`run_driver` import no client:
a process that only spawns the ranks (a test, a benchmark) stays free of
what importing a client does to torch (torchtitan patches
``FakeTensorMode.__init__`` when imported).
"""

from __future__ import annotations

import importlib
from typing import Any

from .cases import CPCase, HFCase, MoECase, SimpleFSDPCase, TitanCase, missing

__all__ = ["CPCase", "HFCase", "MoECase", "SimpleFSDPCase", "TitanCase", "missing", "run_driver"]

DRIVERS = {"torchtitan": f"{__name__}.torchtitan", "transformers": f"{__name__}.transformers"}


def run_driver(client: str, function: str, *args: Any, **kwargs: Any) -> Any:
    """``function(*args, **kwargs)`` of ``client``'s driver, imported in this
    process (a spawned rank): what ``run_in_world`` / ``GlooPool`` call."""
    return getattr(importlib.import_module(DRIVERS[client]), function)(*args, **kwargs)
