"""``python -m dynamo_dist [COMMAND]``; see ``dynamo_dist.cli``."""

from dynamo_dist.cli import main
from dynamo_dist.cli.process import exit_process

if __name__ == "__main__":
    exit_process(main())
