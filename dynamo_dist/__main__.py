"""``python -m dynamo_dist [COMMAND]``; see ``dynamo_dist.cli``."""

import sys

from dynamo_dist.cli import main

if __name__ == "__main__":
    sys.exit(main())
