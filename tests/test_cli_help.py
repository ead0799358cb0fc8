"""The first minute with the CLI: ``--help`` answers at once (no torch
import), and a missing or unsupported dependency or a bad argument ends in
one line that names the fix, never a traceback."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from dynamo_dist.cli import COMMANDS

PYPROJECT = str(Path(__file__).resolve().parents[1] / "pyproject.toml")  # a file with no generated blocks

# Run the CLI in a fresh interpreter and report which torch modules it loaded.
HELP_PROBE = """
import runpy, sys
sys.argv = ["dynamo_dist", *{argv!r}]
try:
    runpy.run_module("dynamo_dist", run_name="__main__")
except SystemExit as e:
    assert e.code == 0, e.code
print("TORCH_MODULES", sorted(m for m in sys.modules if m == "torch" or m.startswith("torch.")))
"""

# Run the CLI with one import made impossible, or with torch claiming another version.
BLOCKED = "import sys; sys.modules[{module!r}] = None\n"
OLD_TORCH = "import torch; torch.__version__ = '2.10.0'\n"
RUN = "import runpy, sys; sys.argv = ['dynamo_dist', *{argv!r}]; runpy.run_module('dynamo_dist', run_name='__main__')"


def _python(code: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)


@pytest.mark.parametrize("argv", [["--help"]] + [[name, "--help"] for name in COMMANDS], ids=" ".join)
def test_help_imports_no_torch(argv):
    proc = _python(HELP_PROBE.format(argv=argv))
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "usage: python -m dynamo_dist" in proc.stdout
    assert proc.stdout.rstrip().endswith("TORCH_MODULES []"), proc.stdout[-500:]


@pytest.mark.parametrize("name", list(COMMANDS))
def test_help_works_without_torch_installed(name):
    proc = _python(BLOCKED.format(module="torch") + RUN.format(argv=[name, "--help"]))
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert f"usage: python -m dynamo_dist {name}" in proc.stdout


def test_help_choices_are_the_real_ones():
    """The choices help offers are written out in the command modules (so
    help needs no torch); they must stay those the code runs."""
    from dynamo_dist.benchmarks.suite import DEFAULT_SECTIONS, SECTIONS
    from dynamo_dist.cli import bench, demo, fuzz
    from dynamo_dist.demo.models import MODELS, SIZES
    from dynamo_dist.fuzzing.properties import PROPERTIES

    assert demo.MODEL_NAMES == tuple(sorted(MODELS))
    assert demo.SIZE_NAMES == tuple(sorted(SIZES))
    assert demo.DEFAULT_SIZE_TEXT == demo._describe(SIZES[demo.DEFAULT_SIZE])
    assert (bench.SECTIONS, bench.DEFAULT_SECTIONS) == (SECTIONS, DEFAULT_SECTIONS)
    assert fuzz.PROPERTY_NAMES == tuple(PROPERTIES)


def _one_line_error(proc: subprocess.CompletedProcess, *expected: str) -> str:
    assert proc.returncode == 2, (proc.returncode, proc.stderr[-3000:])
    assert "Traceback" not in proc.stderr, proc.stderr
    line = proc.stderr.strip().splitlines()[-1]
    for text in expected:
        assert text in line, line
    return line


def test_without_torch_a_command_says_what_to_install():
    proc = _python(BLOCKED.format(module="torch") + RUN.format(argv=["example"]))
    line = _one_line_error(proc, "python -m dynamo_dist example: needs torch", "pip install 'torch")
    assert proc.stderr.strip() == line


@pytest.mark.parametrize("name", ["example", "demo", "coverage", "bench", "fuzz"])
def test_an_unsupported_torch_is_one_line(name):
    proc = _python(OLD_TORCH + RUN.format(argv=[name]))
    line = _one_line_error(proc, f"python -m dynamo_dist {name}: ", "found torch 2.10.0", "Install a supported torch")
    assert proc.stderr.strip() == line


def test_fuzz_without_hypothesis_is_one_line():
    proc = _python(BLOCKED.format(module="hypothesis") + RUN.format(argv=["fuzz", "--examples", "1"]))
    line = _one_line_error(proc, "pip install 'dynamo-dist[fuzz]'")
    assert proc.stderr.strip() == line


@pytest.mark.parametrize("argv, expected", [
    (["demo", "--ranks", "0"], "argument --ranks: must be at least 1"),
    (["demo", "--dim", "x"], "argument --dim: expected a whole number"),
    (["fuzz", "--examples", "-3"], "argument --examples: must be at least 1"),
    (["explain", "no_such_script.py"], "argument script: no such file: no_such_script.py"),
    (["bench", "--from-json", "no_such.json"], "argument --from-json: no such file"),
    (["coverage", "--update-readme", PYPROJECT], "has no <!-- coverage:begin -->"),
    (["frobnicate"], "invalid choice: 'frobnicate'"),
])
def test_a_bad_argument_is_one_line_before_any_work(argv, expected):
    proc = _python(RUN.format(argv=argv))
    _one_line_error(proc, expected)


def test_bench_checks_its_summary_blocks_before_running(tmp_path):
    readme = tmp_path / "README.md"
    readme.write_text("<!-- bench-summary:begin -->\n<!-- bench-summary:end -->\n")
    proc = _python(RUN.format(argv=["bench", "--only", "warm_start", "--update-readme", str(readme)]))
    _one_line_error(proc, "--update-readme", "bench-warm-summary")
