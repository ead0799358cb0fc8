import subprocess
import sys


def test_example_command_runs_and_reports():
    out = subprocess.run([sys.executable, "-m", "dynamo_dist"], capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr[-3000:]
    assert "Folded at trace time:" in out.stdout
    assert "Guards installed:" in out.stdout
    assert "Distributed objects in the graph: none" in out.stdout
    assert "Compiled == eager: True" in out.stdout
