"""How a ``python -m dynamo_dist`` process ends, and whether a launcher
(torchrun) started it as one rank of a world."""

from __future__ import annotations

import atexit
import os
import sys
from typing import NoReturn

TORCHRUN_VARS = ("RANK", "WORLD_SIZE", "LOCAL_RANK", "MASTER_ADDR")


def under_torchrun() -> bool:
    """Whether this process is a rank that torchrun launched."""
    return all(name in os.environ for name in TORCHRUN_VARS)


def exit_process(status: int) -> NoReturn:
    """End the process with ``status``; a torchrun rank skips the
    interpreter's teardown.

    ``destroy_process_group()`` does not stop gloo's threads once a program
    has used DTensor or functional collectives: stock caches (the redistribute
    planner, sharding propagation, Dynamo's guards) keep the mesh, and with it
    its process group, alive (measured on 2.13.0: two ``pt_gloo_runloop``
    threads and ``gloo_tcp_loop`` outlive it). Those threads then run through
    interpreter finalization, where a rank that has finished can abort
    (``terminate called without an active exception``, seen once in CI;
    torch PR #179291 describes the hazard), and torchrun reports the whole run
    as failed. The exit handlers still run, with the interpreter whole; only
    the teardown after them is skipped.
    """
    if not under_torchrun():
        sys.exit(status)
    atexit._run_exitfuncs()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(status)
