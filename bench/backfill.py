"""A Blueprint backfill of many small workloads, local threads against Ray tasks (docs/benchmarks.md).

    python -m bench backfill [--workloads 1000] [--repeat 3] [--runs local:1 local:auto ray:auto] [--out bench/out]

Builds N distinct static workloads (the dev corpus and the bundled samples over and over, each copy with an id
of its own, its evidence hard-linked), then times `firstfault blueprint --configs DIR --executor E --workers W`
into a fresh SQLite database per run, the runs interleaved. Every run must store each attempt once, with the
diagnosis of the first run (canonical JSON), or the benchmark fails. Ray runs use the cluster at RAY_ADDRESS
(without it, Ray starts one inside each run, and its start is in the time).
"""

from __future__ import annotations

import argparse
import json
import os
import re
import sqlite3
import statistics
import sys
from pathlib import Path

from bench import measure
from firstfault.engine import Attribution

CORPUS = Path(__file__).resolve().parents[1] / "tests" / "data" / "corpus" / "dev"
SAMPLES = Path(__file__).resolve().parents[1] / "src" / "firstfault" / "samples"
_ID = re.compile(r'^id = "(?P<id>[^"]*)"$', re.M)


def make_workloads(out: Path, count: int) -> Path:
    """`out/backfill-N`: N workload directories; kept between runs (rebuilt when missing)."""
    root = out / f"backfill-{count}"
    if (root / "complete").exists():
        return root
    sources = sorted(p for base in (CORPUS, SAMPLES) for p in base.iterdir() if (p / "scenario.toml").is_file())
    root.mkdir(parents=True, exist_ok=True)
    for k in range(count):
        source = sources[k % len(sources)]
        target = root / f"w{k:05d}"
        for path in sorted(source.rglob("*")):
            dest = target / path.relative_to(source)
            if path.is_dir():
                dest.mkdir(parents=True, exist_ok=True)
            elif path.name != "scenario.toml":
                dest.parent.mkdir(parents=True, exist_ok=True)
                if not dest.exists():
                    os.link(path, dest)
        text = (source / "scenario.toml").read_text(encoding="utf-8")
        copy_id = f"backfill-{k:05d}"
        text = _ID.sub(f'id = "{copy_id}"', text, count=1) if _ID.search(text) else f'id = "{copy_id}"\n{text}'
        (target / "scenario.toml").write_text(text, encoding="utf-8")
    (root / "complete").touch()
    return root


def stored_diagnoses(db: Path) -> dict[tuple[str, int], list[str]]:
    """Every run a results database holds, per attempt: its diagnosis as canonical JSON (or its error)."""
    runs: dict[tuple[str, int], list[str]] = {}
    with sqlite3.connect(db) as conn:
        for workload_id, attempt, result_json in conn.execute(
                "SELECT a.workload_id, a.attempt, r.result_json FROM attribution_runs r "
                "JOIN workload_attempts a ON a.id = r.attempt_id ORDER BY r.id"):
            result = json.loads(result_json)
            diagnosis = result["diagnosis"]
            text = Attribution.model_validate(diagnosis).to_json() if diagnosis else f"error: {result['error']}"
            runs.setdefault((workload_id, attempt), []).append(text)
    return runs


def run_backfill(args: argparse.Namespace) -> int:
    out = args.out / "backfill"
    out.mkdir(parents=True, exist_ok=True)
    root = make_workloads(out, args.workloads)
    src = Path(__file__).resolve().parents[1] / "src"
    env = {**os.environ, "PYTHONPATH": str(src), "FIRSTFAULT_CACHE_DIR": str(args.out / "cache")}
    reference: dict[tuple[str, int], list[str]] | None = None
    times: dict[str, list[measure.Measurement]] = {run: [] for run in args.runs}
    for round_ in range(args.repeat):
        for run in args.runs:
            executor, workers = run.split(":")
            db = out / f"{executor}-{workers}-{round_}.db"
            db.unlink(missing_ok=True)
            cmd = [sys.executable, "-m", "firstfault", "blueprint", "--configs", str(root), "--quiet",
                   "--executor", executor, "--workers", workers, "--connector", "output", "db", "sqlite", "path",
                   str(db)]
            measure.wait_quiet(args.quiet)
            m = measure.run(cmd, stdout=None, env=env)
            if m.exit_code:
                raise SystemExit(f"{run}: exit {m.exit_code}: {m.stderr}")
            stored = stored_diagnoses(db)
            if len(stored) != args.workloads or any(len(r) != 1 for r in stored.values()):
                raise SystemExit(f"{run}: {len(stored)} attempts stored, some more than once")
            reference = reference or stored
            if stored != reference:
                raise SystemExit(f"{run}: a diagnosis differs from the first run's")
            times[run].append(m)
            print(f"{run} round {round_ + 1}: {m.wall_s:.1f} s", file=sys.stderr)
    print(f"{args.workloads} workloads ({root}), {args.repeat} interleaved rounds; every run stored each attempt "
          "once, every diagnosis identical to the first run's")
    print("| executor | workers | wall median | wall min-max | workloads/s (median) | driver CPU median |")
    print("|---|---|---|---|---|---|")
    for run, ms in times.items():
        executor, workers = run.split(":")
        walls = [m.wall_s for m in ms]
        median = statistics.median(walls)
        print(f"| {executor} | {workers} | {median:.1f} s | {min(walls):.1f}-{max(walls):.1f} s | "
              f"{args.workloads / median:.0f} | {statistics.median(m.cpu_s for m in ms):.1f} s |")
    return 0
