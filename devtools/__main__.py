"""``python -m devtools COMMAND`` from the repository root."""

import sys

from dynamo_dist.cli import main

from .cli import COMMANDS, DESCRIPTION, PROG

if __name__ == "__main__":  # the step-time worlds spawn processes: keep the guard
    sys.exit(main(commands=COMMANDS, prog=PROG, description=DESCRIPTION))
