"""Golden results of the bundled samples: tests/data/golden/<sample>.json is `firstfault analyze --sample NAME
--json` for every sample in src/firstfault/samples, with the catalog hash replaced by a placeholder (the hash
changes with every rule file, so it would make every golden file stale at once).

Check them, or rewrite them after a change to the rules or the result format (then review the diff):

    PYTHONPATH=src python -m tests.support.golden            # exit 1 and the names of the stale files
    PYTHONPATH=src python -m tests.support.golden --update   # rewrite them all (or --update NAME...)

tests/engine/test_golden_samples.py compares byte for byte.
"""

from __future__ import annotations

import argparse
import contextlib
import difflib
import io
import json
import sys
from pathlib import Path

from firstfault.cli import main as cli
from firstfault.samples import sample_dirs

GOLDEN_DIR = Path(__file__).resolve().parents[1] / "data" / "golden"
CATALOG_HASH_PLACEHOLDER = "sha256:<catalog-hash>"
UPDATE_COMMAND = "PYTHONPATH=src python -m tests.support.golden --update"


def golden_path(name: str) -> Path:
    return GOLDEN_DIR / f"{name}.json"


def normalise(output: str) -> str:
    """The output with its catalog hash (the `catalog_hash` field's value, wherever it occurs) replaced by the
    placeholder; everything else byte for byte."""
    catalog_hash = json.loads(output)["catalog_hash"]
    assert catalog_hash.startswith("sha256:"), catalog_hash
    return output.replace(catalog_hash, CATALOG_HASH_PLACEHOLDER)


def analyze_json(name: str) -> str:
    """What `firstfault analyze --sample NAME --json` prints (run in-process)."""
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        code = cli(["analyze", "--sample", name, "--json"])
    if code != 0:
        raise RuntimeError(f"firstfault analyze --sample {name} --json exited {code}")
    return out.getvalue()


def expected(name: str) -> str:
    """The normalised output of sample NAME as it is now: what its golden file must hold."""
    return normalise(analyze_json(name))


def diff(name: str, actual: str, limit: int = 60) -> str:
    """The first `limit` lines of a unified diff from the golden file to `actual`."""
    path = golden_path(name)
    before = path.read_text(encoding="utf-8") if path.is_file() else ""
    lines = difflib.unified_diff(before.splitlines(keepends=True), actual.splitlines(keepends=True),
                                 f"tests/data/golden/{path.name}", f"analyze --sample {name} --json")
    return "".join(list(lines)[:limit])


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="Check or rewrite the golden results of the bundled samples.")
    parser.add_argument("--update", action="store_true", help="rewrite the golden files from the current code")
    parser.add_argument("names", nargs="*", help="samples (default: every bundled sample)")
    args = parser.parse_args(argv)
    names = args.names or list(sample_dirs())
    stale = []
    for name in names:
        actual = expected(name)
        path = golden_path(name)
        if path.is_file() and path.read_bytes() == actual.encode("utf-8"):
            continue
        if args.update:
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_bytes(actual.encode("utf-8"))
            print(f"wrote {path}")
        else:
            stale.append(name)
            print(diff(name, actual), end="")
    if not args.update:
        unknown = sorted(p.stem for p in GOLDEN_DIR.glob("*.json") if p.stem not in sample_dirs())
        for name in unknown:
            print(f"tests/data/golden/{name}.json: no such sample (remove it)")
        if stale or unknown:
            print(f"{len(stale)} stale golden file(s); to rewrite them: {UPDATE_COMMAND}", file=sys.stderr)
            return 1
        print(f"{len(names)} golden file(s) up to date")
    return 0


if __name__ == "__main__":
    sys.exit(main())
