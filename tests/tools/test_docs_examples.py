"""Every Python example in the README and in docs/ runs (Sybil).

Each ```python block is one test, run in page order; the blocks of one page
share a namespace, as a reader's session would. An example that only
illustrates is marked in the page, right above it, with an HTML comment
that says why: ``<!-- skip: next "needs 2 GPUs" -->`` (tests/tools/test_docs_site.py
requires the reason). Examples run in a fake world or a spawned gloo world,
never on a real cluster. Needs the ``docs`` extra.
"""

from __future__ import annotations

from pathlib import Path

import pytest

pytest.importorskip("sybil", reason="the docs examples need the docs extra: pip install -e '.[docs]'")

from sybil import Sybil  # noqa: E402
from sybil.evaluators.skip import Skipper  # noqa: E402
from sybil.parsers.markdown import PythonCodeBlockParser, SkipParser  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
SYBIL = Sybil(parsers=[PythonCodeBlockParser(), SkipParser()])


def _examples():
    """(skip directives right above it, the example) per Python block."""
    for page in PAGES:
        document = SYBIL.parse(page)
        document.namespace["__name__"] = f"docs_example_{page.stem.replace('-', '_')}"
        directives = []
        for example in document:
            if isinstance(example.region.evaluator, Skipper):
                directives.append(example)
                continue
            yield pytest.param(directives, example, id=f"{page.relative_to(ROOT)}:{example.line}")
            directives = []


EXAMPLES = list(_examples())


@pytest.mark.parametrize("directives, example", EXAMPLES)
def test_example_runs(directives, example):
    for directive in directives:
        directive.evaluate()
    example.evaluate()


def test_there_are_examples():
    assert len(EXAMPLES) >= 10
