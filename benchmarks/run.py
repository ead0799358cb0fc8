"""Run the benchmarks from a source checkout: ``python benchmarks/run.py [--quick] ...``
is ``python -m dynamo_dist bench [--quick] ...`` (see ``--help``)."""

import sys

from dynamo_dist.cli import main

if __name__ == "__main__":  # the step-time worlds spawn processes: keep the guard
    sys.exit(main(["bench", *sys.argv[1:]]))
