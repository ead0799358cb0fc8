"""``python -m dynamo_dist [example|coverage]``.

example   (default) compile a small mesh/placement/group program in a fake
          8-rank world and show what folded, which guards were installed and
          the captured graph.
coverage  run the named cases with the plugin and with stock torch and print
          the coverage tables (``--update-readme README.md`` rewrites them).
"""

from __future__ import annotations

import argparse
import logging
import sys


class _Collect(logging.Handler):
    def __init__(self) -> None:
        super().__init__(logging.DEBUG)
        self.records: list[logging.LogRecord] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.records.append(record)


def example() -> int:
    import torch
    import torch.distributed as dist
    from torch.distributed.tensor.placement_types import Replicate, Shard

    import dynamo_dist
    from dynamo_dist.testing import compile_and_run, distributed_objects_in, fake_world, make_mesh

    def step(x, mesh, placements):
        tp = mesh["tp"]
        scale = tp.size() * 10 + tp.get_local_rank()
        if placements[0].is_shard():
            scale = scale + placements[0].dim
        group = mesh.get_group("dp")
        return x * scale + dist.get_world_size(group), Shard(1), tp

    collect = _Collect()
    logger = logging.getLogger("dynamo_dist")
    logger.addHandler(collect)
    logger.setLevel(logging.DEBUG)
    print(f"dynamo_dist {dynamo_dist.__version__} on torch {torch.__version__}: fake world of 8 ranks, rank 3")
    with fake_world(8, 3), dynamo_dist.enabled():
        mesh = make_mesh((2, 4), ("dp", "tp"))
        run = compile_and_run(step, torch.ones(2), mesh, (Shard(0), Replicate()))
    logger.removeHandler(collect)

    folds = [r.getMessage() for r in collect.records if r.name == "dynamo_dist.fold"]
    guards = [r.getMessage() for r in collect.records if r.name == "dynamo_dist.guards"]
    print("\nFolded at trace time:")
    for line in dict.fromkeys(folds):
        print(f"  {line}")
    print("\nGuards installed:")
    for line in dict.fromkeys(guards):
        print(f"  {line}")
    print(f"\nCaptured graphs: {len(run.graphs)}  (fullgraph=True, graph breaks: {run.graph_breaks})")
    print(run.graphs[0].code.strip())
    leaks = distributed_objects_in(run.graphs[0])
    same = torch.equal(run.compiled[0], run.eager[0]) and run.compiled[1:] == run.eager[1:]
    print(f"\nDistributed objects in the graph: {leaks or 'none'}")
    print(f"Escaping objects rebuilt in bytecode: {run.compiled[1]!r}, {run.compiled[2]!r}")
    print(f"Compiled == eager: {same}")
    return 0 if same and not leaks else 1


def coverage(update_readme: str | None) -> int:
    from dynamo_dist.diagnostics.coverage import differences_table, member_table, replace_block
    from dynamo_dist.testing.cases import run_all

    plugin, stock = run_all(plugin=True), run_all(plugin=False)
    members, diffs = member_table(stock), differences_table(plugin, stock)
    print(members, "\n")
    print(diffs)
    from dynamo_dist.testing.cases import CASES

    ok = sum(o.status == c.expect for o, c in zip(plugin, CASES))
    stock_ok = sum(o.status == "ok" for o in stock)
    clean = sum(c.expect == "ok" for c in CASES)
    print(f"\n{len(plugin)} cases: {ok} as expected with dynamo_dist "
          f"({clean} compile with zero breaks and match eager, the rest break cleanly); "
          f"{stock_ok} compile with zero breaks and match eager with stock torch")
    if update_readme:
        with open(update_readme) as f:
            text = f.read()
        text = replace_block(text, "coverage", members)
        text = replace_block(text, "stock-diff", diffs)
        with open(update_readme, "w") as f:
            f.write(text)
    return 0 if ok == len(plugin) else 1


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m dynamo_dist", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = parser.add_subparsers(dest="command")
    sub.add_parser("example", help="compile an example in a fake world (default)")
    cov = sub.add_parser("coverage", help="coverage tables, plugin vs stock")
    cov.add_argument("--update-readme", metavar="PATH", help="rewrite the tables in this README")
    args = parser.parse_args(argv)
    if args.command == "coverage":
        return coverage(args.update_readme)
    return example()


if __name__ == "__main__":
    sys.exit(main())
