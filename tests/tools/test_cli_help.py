"""The first minute with the CLIs (``python -m dynamo_dist`` and a
checkout's ``python -m devtools``): ``--help`` answers at once (no torch
import), and a missing or unsupported dependency or a bad argument ends in
one line that names the fix, never a traceback."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from devtools import cli as devtools_cli
from dynamo_dist import cli as dynamo_dist_cli

ROOT = Path(__file__).resolve().parents[2]
PYPROJECT = str(ROOT / "pyproject.toml")  # a file with no generated blocks
# package run with ``python -m`` -> its commands
CLIS = {"dynamo_dist": dynamo_dist_cli.COMMANDS, "devtools": devtools_cli.COMMANDS}
EVERY = [(package, name) for package, commands in CLIS.items() for name in commands]

# Run a CLI in a fresh interpreter and report which torch modules it loaded.
HELP_PROBE = """
import runpy, sys
sys.argv = [{package!r}, *{argv!r}]
try:
    runpy.run_module({package!r}, run_name="__main__")
except SystemExit as e:
    assert e.code == 0, e.code
print("TORCH_MODULES", sorted(m for m in sys.modules if m == "torch" or m.startswith("torch.")))
"""

# Run a CLI with one import made impossible, or with torch claiming another version.
BLOCKED = "import sys; sys.modules[{module!r}] = None\n"
OLD_TORCH = "import torch; torch.__version__ = '2.10.0'\n"
RUN = "import runpy, sys; sys.argv = [{package!r}, *{argv!r}]; runpy.run_module({package!r}, run_name='__main__')"


def _run(argv: list[str], package: str = "dynamo_dist", prefix: str = "") -> subprocess.CompletedProcess:
    return _python(prefix + RUN.format(package=package, argv=argv))


def _python(code: str) -> subprocess.CompletedProcess:
    # From the checkout's root, as a contributor runs python -m devtools.
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, cwd=ROOT)


@pytest.mark.parametrize("package, argv", [(p, ["--help"]) for p in CLIS] + [(p, [n, "--help"]) for p, n in EVERY],
                         ids=lambda v: " ".join(v) if isinstance(v, list) else v)
def test_help_imports_no_torch(package, argv):
    proc = _python(HELP_PROBE.format(package=package, argv=argv))
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert f"usage: python -m {package}" in proc.stdout
    assert proc.stdout.rstrip().endswith("TORCH_MODULES []"), proc.stdout[-500:]


@pytest.mark.parametrize("package, name", EVERY)
def test_help_works_without_torch_installed(package, name):
    proc = _run([name, "--help"], package, BLOCKED.format(module="torch"))
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert f"usage: python -m {package} {name}" in proc.stdout


def test_help_choices_are_the_real_ones():
    """The choices help offers are written out in the command modules (so
    help needs no torch); they must stay those the code runs."""
    from devtools.bench.suite import DEFAULT_SECTIONS, SECTIONS
    from devtools.cli import bench
    from dynamo_dist.cli import demo, fuzz
    from dynamo_dist.demo.models import MODELS, SIZES
    from dynamo_dist.fuzzing.properties import PROPERTIES

    assert demo.MODEL_NAMES == tuple(sorted(MODELS))
    assert demo.SIZE_NAMES == tuple(sorted(SIZES))
    assert demo.DEFAULT_SIZE_TEXT == demo._config_text(SIZES[demo.DEFAULT_SIZE])
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
    proc = _run(["example"], prefix=BLOCKED.format(module="torch"))
    line = _one_line_error(proc, "python -m dynamo_dist example: needs torch", "pip install 'torch")
    assert proc.stderr.strip() == line


@pytest.mark.slow
@pytest.mark.parametrize("package, name", [("dynamo_dist", "example"), ("dynamo_dist", "demo"),
                                           ("dynamo_dist", "fuzz"), ("devtools", "coverage"), ("devtools", "bench")])
def test_an_unsupported_torch_is_one_line(package, name):
    proc = _run([name], package, OLD_TORCH)
    line = _one_line_error(proc, f"python -m {package} {name}: ", "found torch 2.10.0", "Install a supported torch")
    assert proc.stderr.strip() == line


def test_fuzz_without_hypothesis_is_one_line():
    proc = _run(["fuzz", "--examples", "1"], prefix=BLOCKED.format(module="hypothesis"))
    line = _one_line_error(proc, "pip install 'dynamo-dist[fuzz]'")
    assert proc.stderr.strip() == line


@pytest.mark.parametrize("package, argv, expected", [
    ("dynamo_dist", ["demo", "--ranks", "0"], "argument --ranks: must be at least 1"),
    ("dynamo_dist", ["demo", "--dim", "x"], "argument --dim: expected a whole number"),
    ("dynamo_dist", ["fuzz", "--examples", "-3"], "argument --examples: must be at least 1"),
    ("dynamo_dist", ["explain", "no_such_script.py"], "argument script: no such file: no_such_script.py"),
    ("devtools", ["bench", "--from-json", "no_such.json"], "argument --from-json: no such file"),
    ("devtools", ["coverage", "--update-readme", PYPROJECT], "has no <!-- coverage:begin -->"),
    ("dynamo_dist", ["frobnicate"], "invalid choice: 'frobnicate'"),
    ("dynamo_dist", ["bench"], "invalid choice: 'bench'"),
])
def test_a_bad_argument_is_one_line_before_any_work(package, argv, expected):
    _one_line_error(_run(argv, package), expected)


@pytest.mark.slow
def test_bench_checks_its_summary_blocks_before_running(tmp_path):
    readme = tmp_path / "README.md"
    readme.write_text("<!-- bench-summary:begin -->\n<!-- bench-summary:end -->\n")
    proc = _run(["bench", "--only", "warm_start", "--update-readme", str(readme)], "devtools")
    _one_line_error(proc, "--update-readme", "bench-warm-summary")
