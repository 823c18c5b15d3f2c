"""`firstfault analyze` and `firstfault rules patterns --ere` with generated extra rules appended to the
catalog (the rule-count series). Same engine calls as the CLI: the packaged catalog plus the extra file is
loaded, compiled (with the CLI's database cache) and verified, then `Engine.analyze_path(workers=...)`.

    python -m bench.driver analyze PATH [--extra-rules FILE] [--workers N] [--timings FILE]
    python -m bench.driver patterns [--extra-rules FILE]
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from firstfault.engine.catalog import load_catalog
from firstfault.engine.engine import Engine, default_cache_dir
from firstfault.engine.timing import Timings
from firstfault.tools.ere import to_ere
from firstfault.tools.verify import verify_catalog


def _catalog(extra: Path | None):  # type: ignore[no-untyped-def]
    files = [(extra.name, extra.read_bytes())] if extra else []
    return load_catalog(extra_files=files)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.driver")
    sub = parser.add_subparsers(dest="command", required=True)
    a = sub.add_parser("analyze")
    a.add_argument("path", type=Path)
    a.add_argument("--extra-rules", type=Path)
    a.add_argument("--workers", type=int, default=1)
    a.add_argument("--timings", type=Path)
    p = sub.add_parser("patterns")
    p.add_argument("--extra-rules", type=Path)
    args = parser.parse_args(argv)
    if args.command == "patterns":
        catalog = _catalog(args.extra_rules)
        sys.stdout.write("".join(to_ere(e.match_re) + "\n" for e in catalog.extractors))
        return 0
    startup = Timings()
    with startup.phase("catalog.load"):
        catalog = _catalog(args.extra_rules)
    with startup.phase("catalog.compile"):
        engine = Engine(catalog, cache_dir=default_cache_dir())
    with startup.phase("catalog.verify"):
        verify_catalog(catalog)
    timings = Timings()
    result = engine.analyze_path(args.path, workers=args.workers, timings=timings)
    with timings.phase("output"):
        sys.stdout.write(result.to_json() + "\n")
        sys.stdout.flush()
    if args.timings:
        timings.merge(startup)
        timings.count("extractors", len(catalog.extractors))
        args.timings.write_text(json.dumps({"path": str(args.path), **timings.as_dict()}) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
