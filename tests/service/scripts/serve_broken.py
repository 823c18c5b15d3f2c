"""`firstfault serve` with an extra rule file loaded next to the packaged catalog (a broken one, in the tests), so
start-up meets it exactly as it would meet a broken packaged rule.

    python -m tests.service.scripts.serve_broken RULES.toml --port PORT
"""

from __future__ import annotations

import argparse
import functools
import sys
from pathlib import Path

import firstfault.engine.engine as engine
from firstfault.cli import main as cli


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("rules", type=Path, help="a rule file (TOML) loaded with the packaged catalog")
    parser.add_argument("--port", type=int, required=True)
    args = parser.parse_args(argv)
    engine.load_catalog = functools.partial(engine.load_catalog,
                                            extra_files=[(args.rules.name, args.rules.read_bytes())])
    return cli(["serve", "--port", str(args.port)])


if __name__ == "__main__":
    sys.exit(main())
