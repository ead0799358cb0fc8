"""``--slow-share K/N@SEED`` (tests/conftest.py), how CI spreads the slow tier
over its runs and releases: the N shares of one seed are disjoint, make up
the slow tier, keep a file's slow tests together and every fast test; a bad
share is a usage error."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow  # each collection imports torch in a fresh process

ROOT = Path(__file__).resolve().parents[2]
# A file with slow and fast tests, and a folder of files with slow ones: collected, never run.
FILES = ["tests/unit/test_compile_on_one_rank.py", "tests/spawned"]


def _collect(*args: str) -> tuple[int, set[str], str]:
    proc = subprocess.run([sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "--collect-only", "-q",
                           *args, *FILES], cwd=ROOT, capture_output=True, text=True, timeout=300)
    ids = {line for line in proc.stdout.splitlines() if "::" in line}
    return proc.returncode, ids, proc.stdout + proc.stderr


def test_the_shares_of_a_seed_split_the_slow_tier_by_file_and_keep_the_fast_one():
    shares = []
    for k in range(2):
        rc, ids, out = _collect("--slow-share", f"{k}/2@20261130")
        assert rc == 0, out
        shares.append(ids)
    fast = shares[0] & shares[1]
    _, slow, _ = _collect("-m", "slow")
    assert len(slow) > 10 and fast and not fast & slow, "the files hold slow and fast tests"
    assert (shares[0] | shares[1]) - fast == slow, "the shares make up the slow tier, with every fast test"
    files = [{i.split("::", 1)[0] for i in share - fast} for share in shares]
    assert files[0] and files[1], "neither share of the folder's files is empty"
    assert not files[0] & files[1], "a file's slow tests are in one share (its fixtures are built once)"


def test_a_bad_share_is_a_usage_error_naming_the_form():
    rc, _, out = _collect("--slow-share", "2/2")
    assert rc == 4, out
    assert "expected K/N or K/N@SEED with 0 <= K < N" in out
