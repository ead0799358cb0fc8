"""Every saved result (``benchmarks/results/*.json``) was written whole by the
command its ``meta.command`` names: that command parses with the tool's
current options and names the file as its ``--json`` output, the meta is the
one writer's (``dynamo_dist.cli.results``: date, machine, load average, torch, the
run's settings), the settings are those the command runs, and the fields
beside the meta are those the tool writes."""

from __future__ import annotations

import dataclasses
import json
import re
import shlex
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
RESULTS = sorted((ROOT / "benchmarks" / "results").glob("*.json"))
# The standalone tools that save a result: module -> its fields' home.
STANDALONE = ("devtools.bench.guard_cost_loaded", "devtools.bench.precompile", "devtools.clients.restart",
              "devtools.clients.check_cost")
# Options that say where output goes, not what the run measures.
OUTPUT_OPTIONS = ("json", "logs")


def _load(path: Path) -> dict:
    with open(path) as f:
        return json.load(f)


def _command(path: Path) -> list[str]:
    words = shlex.split(_load(path)["meta"]["command"])
    assert words[:2] == ["python", "-m"], words
    return words[2:]


def test_there_are_results():
    assert len(RESULTS) >= 10


@pytest.mark.parametrize("path", RESULTS, ids=lambda p: p.name)
def test_meta_is_the_one_writers(path):
    from dynamo_dist.cli import results

    meta = _load(path)["meta"]
    assert tuple(meta) == results.META_FIELDS, sorted(meta)
    assert tuple(meta["machine"]) == results.MACHINE_FIELDS, sorted(meta["machine"])
    assert re.fullmatch(r"\d{4}-\d\d-\d\d \d\d:\d\d UTC", meta["date"]), meta["date"]
    for when in ("load_average_start", "load_average_end"):
        load = meta["machine"][when]
        assert isinstance(load, list) and len(load) == 3 and all(v >= 0 for v in load), (when, load)
    assert re.fullmatch(r"2\.\d+\.\d+(\+\w+)?", meta["machine"]["torch"]), meta["machine"]["torch"]
    assert meta["seconds"] > 0


def _suite_case(path: Path, words: list[str], monkeypatch) -> None:
    from dynamo_dist.cli import build_parser
    from devtools.bench import suite
    from devtools.cli import COMMANDS, DESCRIPTION, PROG, bench

    monkeypatch.chdir(ROOT)  # --update-readme names a file of the checkout
    assert words[0] == "devtools", words
    args = build_parser(COMMANDS, PROG, DESCRIPTION).parse_args(words[1:])
    assert args.command == "bench" and not args.from_json, words
    assert args.json == str(path.relative_to(ROOT)), (args.json, path)
    assert bench.command_line(args) == _load(path)["meta"]["command"], "not the tool's canonical command"
    result = _load(path)
    sections = tuple(args.only or suite.DEFAULT_SECTIONS)
    assert set(result) == {"meta", *sections}
    # The settings: every one the run's sections read is saved, with the value
    # this command runs (a file saved before a later section's settings existed
    # lacks only those).
    cfg = dataclasses.asdict(bench.config(args))
    saved = result["meta"]["config"]
    assert set(saved) <= set(cfg), sorted(set(saved) - set(cfg))
    read = {name for s in sections for name in re.findall(r"\bcfg\.(\w+)",
                                                              Path(suite.MODULES[s].__file__).read_text())}
    assert read <= set(saved), sorted(read - set(saved))
    lists = json.loads(json.dumps(cfg))  # tuples, nested too, as the JSON holds them
    assert {k: saved[k] for k in read} == {k: lists[k] for k in read}


def _standalone_case(path: Path, words: list[str]) -> None:
    import importlib

    module = importlib.import_module(words[0])
    args = module.parser().parse_args(words[1:])
    assert args.json == str(path.relative_to(ROOT)), (args.json, path)
    result = _load(path)
    assert set(result) == {"meta", *module.FIELDS}
    options = {k: v for k, v in vars(args).items() if k not in OUTPUT_OPTIONS}
    saved = result["meta"]["config"]
    # An option the tool gained after the file was saved is absent from it;
    # the command then runs it at its default, which is what the file ran.
    newer = {k for k in set(options) - set(saved) if options[k] == module.parser().get_default(k)}
    assert saved == {k: v for k, v in options.items() if k not in newer}


def _fuzz_case(path: Path, words: list[str]) -> None:
    from dynamo_dist.cli import COMMANDS, DESCRIPTION, PROG, build_parser

    args = build_parser(COMMANDS, PROG, DESCRIPTION).parse_args(words[1:])
    assert args.command == "fuzz" and args.json == str(path.relative_to(ROOT)), (args.json, path)
    result = _load(path)
    assert set(result) == {"meta", "properties"}
    assert result["meta"]["config"] == {"examples": args.examples, "seed": args.seed, "property": args.property}
    assert set(result["properties"]) == set(args.property or result["properties"])


@pytest.mark.parametrize("path", RESULTS, ids=lambda p: p.name)
def test_command_names_the_file_and_its_fields_are_the_tools(path, monkeypatch):
    words = _command(path)
    if words[0] == "dynamo_dist":
        _fuzz_case(path, words)
    elif words[0] in STANDALONE:
        _standalone_case(path, words)
    else:
        _suite_case(path, words, monkeypatch)


def test_the_one_writer_refuses_a_result_without_its_meta(tmp_path):
    from dynamo_dist.cli import results

    with pytest.raises(ValueError, match="lacks"):
        results.write(str(tmp_path / "x.json"), {"meta": {"date": "today"}, "rows": []})
    run = results.Run("python -m devtools.clients.restart --json x.json", {"steps": 2})
    results.write(str(tmp_path / "x.json"), run.result({"rows": []}))
    saved = _load(tmp_path / "x.json")
    assert tuple(saved["meta"]) == results.META_FIELDS and saved["rows"] == []
    assert not (tmp_path / "x.json.partial").exists()
