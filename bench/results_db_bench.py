"""Benchmark of the results databases: `firstfault blueprint` drivers writing copies of the bundled samples into
SQLite and PostgreSQL, one driver or several at once on one database (claims), and what an attempt takes on disk.

Each round builds a fresh database, starts the drivers together (`--workers 1` each), waits for them, checks that
every attempt has exactly one run, and prints the wall time; the table gives the median and the spread of the
rounds. PostgreSQL: give a DSN of a role that may CREATE DATABASE (tests/support/setup-postgres.sh starts one).

    .venv/bin/python bench/results_db_bench.py --copies 200 --rounds 3 \\
        --postgres postgresql://firstfault:firstfault@127.0.0.1:15432/firstfault
"""

from __future__ import annotations

import argparse
import sqlite3
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from tests.support.workloads import sample_copies  # noqa: E402 - after the sys.path entry above

TABLES = ("workload_attempts", "attribution_runs", "run_nodes", "connector_reports", "attempt_claims")


def _run_drivers(workloads: Path, output: list[str], drivers: int) -> float:
    command = [sys.executable, "-m", "firstfault", "blueprint", "--no-progress", "--quiet", "--configs",
               str(workloads), "--connector", "output", "db", *output]
    started = time.perf_counter()
    processes = [subprocess.Popen(command, cwd=ROOT) for _ in range(drivers)]
    codes = [p.wait() for p in processes]
    seconds = time.perf_counter() - started
    assert codes == [0] * drivers, codes
    return seconds


def _runs_per_attempt(rows: list[tuple[Any, ...]]) -> set[int]:
    return {int(count) for _, count in rows}


def _sqlite_round(workloads: Path, drivers: int, tmp: Path, attempts: int) -> tuple[float, float]:
    db = tmp / f"{uuid.uuid4().hex}.db"
    seconds = _run_drivers(workloads, ["sqlite", "path", str(db)], drivers)
    with sqlite3.connect(db) as con:
        con.execute("PRAGMA wal_checkpoint(TRUNCATE)")
        rows = con.execute("SELECT attempt_id, COUNT(*) FROM attribution_runs GROUP BY 1").fetchall()
    assert len(rows) == attempts and _runs_per_attempt(rows) == {1}
    return seconds, db.stat().st_size / attempts


def _postgres_round(workloads: Path, drivers: int, admin_dsn: str, attempts: int) -> tuple[float, float]:
    import psycopg

    name = f"ff_bench_{uuid.uuid4().hex[:10]}"
    dsn = admin_dsn.rsplit("/", 1)[0] + f"/{name}"
    with psycopg.connect(admin_dsn, autocommit=True) as admin:
        admin.execute(f"CREATE DATABASE {name}")
    try:
        seconds = _run_drivers(workloads, ["postgres", "dsn", dsn], drivers)
        with psycopg.connect(dsn, autocommit=True) as con:
            con.execute("ANALYZE")
            rows = con.execute("SELECT attempt_id, COUNT(*) FROM attribution_runs GROUP BY 1").fetchall()
            size = sum(con.execute(f"SELECT pg_total_relation_size('{t}')").fetchone()[0] for t in TABLES)
    finally:
        with psycopg.connect(admin_dsn, autocommit=True) as admin:
            admin.execute(f"DROP DATABASE IF EXISTS {name} WITH (FORCE)")
    assert len(rows) == attempts and _runs_per_attempt(rows) == {1}
    return seconds, size / attempts


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--copies", type=int, default=200, help="copies of each of the 5 samples")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--drivers", type=int, nargs="+", default=[1, 2])
    parser.add_argument("--postgres", metavar="DSN", help="a role that may CREATE DATABASE (else SQLite only)")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as name:
        tmp = Path(name)
        workloads = sample_copies(tmp / "workloads", args.copies)
        attempts = 5 * args.copies
        print(f"| database | drivers | wall s (median, min-max of {args.rounds}) | attempts/s | bytes per attempt |")
        print("|---|---|---|---|---|")
        for kind in ["sqlite", *(["postgres"] if args.postgres else [])]:
            for drivers in args.drivers:
                rounds = [_sqlite_round(workloads, drivers, tmp, attempts) if kind == "sqlite" else
                          _postgres_round(workloads, drivers, args.postgres, attempts) for _ in range(args.rounds)]
                walls = [r[0] for r in rounds]
                median = statistics.median(walls)
                print(f"| {kind} | {drivers} | {median:.1f} ({min(walls):.1f}-{max(walls):.1f}) | "
                      f"{attempts / median:.0f} | {statistics.median(r[1] for r in rounds):,.0f} |", flush=True)


if __name__ == "__main__":
    main()
