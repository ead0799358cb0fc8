import pytest
import os
import subprocess
import sys


@pytest.mark.slow
def test_example_command_runs_and_reports():
    out = subprocess.run([sys.executable, "-m", "dynamo_dist"], capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr[-3000:]
    assert "Folded at trace time:" in out.stdout
    assert "Guards installed:" in out.stdout
    assert "Distributed objects in the graph: none" in out.stdout
    assert "Compiled == eager: True" in out.stdout


ENDING = """
import atexit, sys
from dynamo_dist.cli.process import exit_process
atexit.register(lambda: print("exit handler ran", flush=True))
print("unflushed output", end="")
exit_process(3)
"""


def test_a_torchrun_rank_ends_with_its_status_after_the_exit_handlers():
    # A rank skips the interpreter's teardown (gloo threads outlive destroy_process_group);
    # its status, its buffered output and its exit handlers must survive that.
    torchrun = {"RANK": "0", "WORLD_SIZE": "1", "LOCAL_RANK": "0", "MASTER_ADDR": "127.0.0.1"}
    for env in (torchrun, {}):
        clean = {k: v for k, v in os.environ.items() if k not in torchrun}
        done = subprocess.run([sys.executable, "-c", ENDING], capture_output=True, text=True, timeout=120,
                              env={**clean, **env})
        assert done.returncode == 3, done.stderr[-3000:]
        assert done.stdout == "unflushed outputexit handler ran\n"
