"""`firstfault serve` with an extra rule file loaded next to the packaged catalog (a broken one, in the tests), so
start-up meets it exactly as it would meet a broken packaged rule.

    python -m tests.service.scripts.serve_broken RULES.toml --port PORT
"""

from __future__ import annotations

import argparse
import functools
import sys
from pathlib import Path

import firstfault.tools.verify as verify
from firstfault.cli import main as cli


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("rules", type=Path, help="a rule file (TOML) loaded with the packaged catalog")
    parser.add_argument("--port", type=int, required=True)
    args = parser.parse_args(argv)
    # the files `serve` builds its verified engine from (tools/verify.py): the packaged ones and this one
    verify.catalog_sources = functools.partial(verify.catalog_sources,
                                               extra_files=[(args.rules.name, args.rules.read_bytes())])
    return cli(["serve", "--port", str(args.port)])


if __name__ == "__main__":
    sys.exit(main())
