"""The README and the docs keep their promises without building anything:
each generated block lives in exactly one file, every page is in the site's
navigation, the README stays short and its links resolve, skipped examples
say why, and nothing in them is about how the project was made."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
README = ROOT / "README.md"
DOCS = ROOT / "docs"
PAGES = [README, *sorted(DOCS.glob("*.md"))]

# Every block a generator rewrites, and the file that holds it (the one the
# generator's command is given).
GENERATED = {
    "coverage": "docs/coverage.md",  # python -m devtools coverage --update-readme docs/coverage.md
    "stock-diff": "docs/coverage.md",
    "stock-diff-counts": "docs/coverage.md",
    "c10d": "docs/coverage.md",
    "bench": "docs/benchmarks.md",  # python -m devtools bench --write-doc docs/benchmarks.md
    "bench-warm": "docs/benchmarks.md",
    "bench-warm-clients": "docs/benchmarks.md",
    "bench-warm-clients-spmd_types": "docs/benchmarks.md",  # a named row set (--client-rows)
    "bench-compile-once-spmd_types": "docs/benchmarks.md",
    "bench-scale": "docs/benchmarks.md",
    "bench-compile-once": "docs/benchmarks.md",
    "bench-compile-once-scale": "docs/benchmarks.md",
    "bench-planner": "docs/benchmarks.md",
    "bench-demo": "docs/benchmarks.md",
    # The standalone tools' results, a block each, named after the file
    # (python -m devtools bench --from-json FILE --write-doc docs/benchmarks.md).
    "result-precompile_2.15.0": "docs/benchmarks.md",
    "result-guard_cost_loaded_2.15.0": "docs/benchmarks.md",
    "result-guard_cost_loaded_2.13.0": "docs/benchmarks.md",
    "result-restart_2.15.0": "docs/benchmarks.md",
    "result-restart_shared_2.15.0": "docs/benchmarks.md",
    "result-restart_spmd_2.15.0": "docs/benchmarks.md",
    "result-check_cost_spmd_2.15.0": "docs/benchmarks.md",
    "bench-summary": "README.md",  # python -m devtools bench --update-readme README.md
    "bench-warm-summary": "README.md",
    "bench-warm-clients-summary": "README.md",
    "bench-scale-summary": "README.md",
    "bench-compile-once-summary": "README.md",
    "bench-compile-once-scale-summary": "README.md",
    "bench-planner-summary": "README.md",
    "bench-demo-summary": "README.md",
    "bench-compile-once-jobs": "docs/compile-once.md",  # written with docs/benchmarks.md (beside it)
}
README_MAX_LINES = 200


def _holders(marker: str) -> list[str]:
    begin, end = f"<!-- {marker}:begin -->", f"<!-- {marker}:end -->"
    found = []
    for page in PAGES:
        text = page.read_text()
        if begin in text or end in text:
            assert text.count(begin) == text.count(end) == 1, (page, marker)
            assert text.index(begin) < text.index(end), (page, marker)
            found.append(str(page.relative_to(ROOT)))
    return found


@pytest.mark.parametrize("marker", sorted(GENERATED))
def test_each_generated_block_lives_in_exactly_one_file(marker):
    assert _holders(marker) == [GENERATED[marker]]


def test_the_generators_point_at_those_files():
    from devtools.bench import report
    from devtools.cli import bench, coverage

    own_doc, own_readme = zip(*report.OWN_BLOCKS.values())
    standalone = {report.standalone_marker(_load(r)) for r in STANDALONE_RESULTS}
    row_sets = {report.doc_marker(_load(r), s) for r in RESULTS for s in report.ROWS_FIELD
                if s in _load(r) and report.row_set_of(_load(r), s) is not None}
    assert {report.DOC_MARKER, *own_doc, *standalone, *row_sets} == {
        m for m, f in GENERATED.items() if f == report.DOC_PATH}
    assert {report.README_MARKER, *own_readme} == {m for m, f in GENERATED.items() if f == "README.md"}
    assert {bench.MAIN_SUMMARY_MARKER, *bench.SUMMARY_MARKERS.values()} == {report.README_MARKER, *own_readme}
    once_page = str(Path(report.DOC_PATH).parent / report.ONCE_PAGE)
    assert {report.ONCE_PAGE_MARKER} == {m for m, f in GENERATED.items() if f == once_page}
    assert set(coverage.MARKERS) == {m for m, f in GENERATED.items() if f == "docs/coverage.md"}


def test_every_page_is_in_the_navigation():
    nav = re.findall(r"^\s*- [^:]+: (\S+\.md)\s*$", (ROOT / "mkdocs.yml").read_text(), re.M)
    assert sorted(nav) == sorted(p.name for p in DOCS.glob("*.md"))


def test_readme_is_short():
    assert len(README.read_text().splitlines()) <= README_MAX_LINES


def test_readme_links_resolve():
    text = README.read_text()
    for target in re.findall(r"\]\(([^)\s]+)\)", text):
        if re.match(r"[a-z]+://", target):
            continue
        path, _, anchor = target.partition("#")
        assert (ROOT / path).exists(), target
        if anchor and path.endswith(".md"):
            slugs = {_slug(h) for h in re.findall(r"^#+ (.+)$", (ROOT / path).read_text(), re.M)}
            assert anchor in slugs, target


def _slug(heading: str) -> str:
    """The anchor MkDocs' toc extension gives a heading."""
    text = re.sub(r"[`*]", "", heading).strip().lower()
    text = re.sub(r"[^\w\s-]", "", text)
    return re.sub(r"[-\s]+", "-", text)


@pytest.mark.parametrize("page", PAGES, ids=lambda p: str(p.relative_to(ROOT)))
def test_skipped_examples_say_why(page):
    # A directive starts a line (as Sybil reads it); one quoted in prose is not one.
    for directive in re.findall(r"^[ \t]*<!--\s*skip\b.*$", page.read_text(), re.M):
        assert re.fullmatch(r'\s*<!-- skip: next "[^"]{8,}" -->', directive), directive


@pytest.mark.parametrize("page", PAGES, ids=lambda p: str(p.relative_to(ROOT)))
def test_pages_speak_of_the_software_not_of_its_making(page):
    text = page.read_text()
    for pattern in (r"\bissue \d+", r"\b(this|that|no|any|the) sessions?\b", r"\bthe lead\b", r"\bwas lent\b"):
        assert not re.search(pattern, text, re.I), (page.name, pattern)


# The saved results (benchmarks/results/, their one home) the README's summaries and the
# benchmark page's blocks show, each regenerated in this order.
RESULTS = ("benchmarks/results/latest.json", "benchmarks/results/warm_start_2.13.0_gloo.json",
           "benchmarks/results/warm_start_clients_2.15.0.json", "benchmarks/results/scale_2.15.0.json",
           "benchmarks/results/compile_once_2.15.0.json", "benchmarks/results/compile_once_scale_2.15.0.json",
           "benchmarks/results/planner_2.15.0.json", "benchmarks/results/demo_2.15.0.json",
           "benchmarks/results/spmd_types_clients_2.15.0.json")
# The warm start on every release, the benchmark page's table of the releases.
RELEASE_RESULTS = tuple(f"benchmarks/results/warm_start_{v}.json" for v in ("2.11.0", "2.12.1", "2.13.0", "2.14.1",
                                                                            "2.15.0"))


def _standalone_results() -> tuple[str, ...]:
    """The saved results of the standalone tools (guard_cost_loaded,
    precompile, the restart tool), each shown in a block of its own."""
    import json

    from devtools.bench import report

    out = []
    for path in sorted((ROOT / "benchmarks" / "results").glob("*.json")):
        with open(path) as f:
            if report.standalone_tool(json.load(f)):
                out.append(str(path.relative_to(ROOT)))
    return tuple(out)


STANDALONE_RESULTS = _standalone_results()


def _load(result: str) -> dict:
    import json

    with open(ROOT / result) as f:
        return json.load(f)


def test_readme_summaries_are_the_saved_results(tmp_path):
    """Regenerating the README's benchmark summaries from the saved results
    changes nothing: a new result is committed with the README it produces."""
    import os

    from devtools.bench import report

    copy = tmp_path / "README.md"
    copy.write_text(README.read_text())
    (tmp_path / "docs").mkdir()
    for result in RESULTS:
        report.update_readme(str(copy), _load(result), doc=os.path.join(tmp_path, report.DOC_PATH))
    hint = "python -m devtools bench --from-json FILE --update-readme README.md"
    assert copy.read_text() == README.read_text(), hint


def test_readme_summary_blocks_all_come_from_saved_results():
    """Every README block the bench writes is filled by one of the saved results."""
    from devtools.bench import report

    sections = {k for result in RESULTS for k in _load(result)
                if k != "meta" and report.row_set_of(_load(result), k) is None}  # a row set has no README line
    blocks = {report.OWN_BLOCKS[s][1] if s in report.OWN_BLOCKS else report.README_MARKER for s in sections}
    assert blocks == {m for m, f in GENERATED.items() if f == "README.md"}


def test_benchmark_pages_are_the_saved_results(tmp_path):
    """Regenerating the blocks of docs/benchmarks.md and docs/compile-once.md
    from the saved results changes nothing: every generated table on those
    pages is what its JSON says."""
    from devtools.bench import report

    pages = [ROOT / report.DOC_PATH, ROOT / Path(report.DOC_PATH).parent / report.ONCE_PAGE]
    (tmp_path / "docs").mkdir()
    for page in pages:
        (tmp_path / "docs" / page.name).write_text(page.read_text())
    for result in (*RESULTS, *STANDALONE_RESULTS):
        report.write_doc(str(tmp_path / report.DOC_PATH), _load(result))
    hint = "python -m devtools bench --from-json FILE --write-doc docs/benchmarks.md"
    for page in pages:
        assert (tmp_path / "docs" / page.name).read_text() == page.read_text(), (page.name, hint)


def test_benchmark_page_blocks_all_come_from_saved_results():
    """Every block of the benchmark page is filled by one of the saved results."""
    from devtools.bench import report

    blocks = {report.doc_marker(_load(result), k if k in report.OWN_BLOCKS else None)
              for result in RESULTS for k in _load(result) if k != "meta"}
    blocks |= {report.standalone_marker(_load(r)) for r in STANDALONE_RESULTS}
    assert blocks == {m for m, f in GENERATED.items() if f == report.DOC_PATH}


def test_benchmark_page_release_table_is_the_saved_results():
    """The table of the warm start on every release holds what the releases' results say."""
    from devtools.bench import report

    table = report.warm_releases_table([_load(result) for result in RELEASE_RESULTS])
    assert table in (ROOT / report.DOC_PATH).read_text()
