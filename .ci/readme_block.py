"""Print the commands of the README's "Two commands" block, one per line.

CI runs exactly these lines, so the README and CI cannot drift apart: the
block is the first ```bash fence after the "## Two commands" heading.
"""

from __future__ import annotations

import sys
from pathlib import Path

HEADING = "## Two commands"


def commands(readme: str) -> list[str]:
    lines = readme.splitlines()
    try:
        start = lines.index(HEADING)
    except ValueError:
        raise SystemExit(f"README has no '{HEADING}' heading: CI cannot find the commands to run")
    fence = next((i for i in range(start + 1, len(lines)) if lines[i].strip() == "```bash"), None)
    if fence is None:
        raise SystemExit(f"no ```bash block after '{HEADING}' in the README")
    block = []
    for line in lines[fence + 1:]:
        if line.strip() == "```":
            return [c for c in block if c.strip() and not c.lstrip().startswith("#")]
        block.append(line)
    raise SystemExit(f"the ```bash block after '{HEADING}' is not closed")


if __name__ == "__main__":
    found = commands(Path(sys.argv[1]).read_text())
    if len(found) != 2:
        raise SystemExit(f"expected two commands in the README block, found {len(found)}: {found}")
    print("\n".join(found))
