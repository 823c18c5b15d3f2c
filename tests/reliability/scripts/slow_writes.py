"""The Blueprint, with every SQLite write held open for 0.2 s between its first and its last statement; it appends
a line `inside` to MARKER each time it is there, so a test can kill it inside a transaction.

    python -m tests.reliability.scripts.slow_writes MARKER BLUEPRINT_ARG...
"""

from __future__ import annotations

import argparse
import os
import sys
import time

from firstfault.blueprint import resultsdb as out
from firstfault.blueprint.result import AttributionBlueprintResult
from firstfault.cli import main as cli

HOLD_S = 0.2


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("marker", help="a file to append `inside` to at each write")
    parser.add_argument("blueprint_args", nargs=argparse.REMAINDER, help="the arguments of `firstfault blueprint`")
    args = parser.parse_args(argv)
    original = out.run_nodes
    marker = os.open(args.marker, os.O_WRONLY | os.O_APPEND | os.O_CREAT)

    def slow(result: AttributionBlueprintResult) -> set[tuple[str, str]]:
        os.write(marker, b"inside\n")
        time.sleep(HOLD_S)
        return original(result)

    out.run_nodes = slow
    return cli(["blueprint", "--no-progress", *args.blueprint_args])


if __name__ == "__main__":
    sys.exit(main())
