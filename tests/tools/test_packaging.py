"""What a new user's environment needs: the README's commands as CI reads
them, and a clear message where an optional dependency is missing."""

from __future__ import annotations

import pytest
import runpy
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_ci_reads_the_readme_two_commands_demo_then_tests():
    block = runpy.run_path(str(ROOT / ".ci" / "readme_block.py"))
    commands = block["commands"]((ROOT / "README.md").read_text())
    assert len(commands) == 2
    assert "python -m dynamo_dist demo" in commands[0]
    assert "pytest" in commands[1] and "tests" in commands[1]


def test_readme_block_without_the_heading_is_a_clear_error():
    block = runpy.run_path(str(ROOT / ".ci" / "readme_block.py"))
    try:
        block["commands"]("# README\n\nno commands here\n")
    except SystemExit as e:
        assert "Two commands" in str(e)
    else:
        raise AssertionError("a README without the block must stop CI")


def test_fuzz_without_hypothesis_says_which_extra_to_install():
    code = ("import sys; sys.modules['hypothesis'] = None; sys.argv = ['dynamo_dist', 'fuzz', '--examples', '1'];"
            "import runpy; runpy.run_module('dynamo_dist', run_name='__main__')")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 2, proc.stderr
    assert "pip install 'dynamo-dist[fuzz]'" in proc.stderr


@pytest.mark.slow
def test_import_prints_nothing():
    """``import dynamo_dist`` is silent on every supported release (2.14+
    warned on each import that ``is_opaque_type`` is deprecated). The package
    loads torch on first use, so the modules that touch it are imported too."""
    code = "import dynamo_dist, dynamo_dist._hooks, dynamo_dist.testing"
    proc = subprocess.run([sys.executable, "-W", "default", "-c", code],
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert (proc.stdout, proc.stderr) == ("", "")
