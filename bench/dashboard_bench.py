"""Benchmark of the dashboard over a large results database: page latencies through a real `firstfault dashboard`.

Builds a synthetic database in the Blueprint's schema (tests/dashboard/synthetic.py: N attempts on two nodes
each, sub_domains cycling through the closed set), starts the dashboard on a free loopback port, fetches each
page once cold (right after start: caches empty) and then `--repeat` times, and prints a Markdown table.

    .venv/bin/python bench/dashboard_bench.py                     # 100k attempts
    .venv/bin/python bench/dashboard_bench.py --rows 1000000 --db /tmp/1m.db
    .venv/bin/python bench/dashboard_bench.py --postgres postgresql://firstfault:firstfault@127.0.0.1:15432/firstfault

With `--postgres DSN` (a role that may CREATE DATABASE), the same rows are copied into a new PostgreSQL database
(tests/support/postgres.py: copy_results) and the dashboard reads that instead; the database is dropped after.
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import httpx

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from tests.dashboard import synthetic  # noqa: E402 - after the sys.path entry above
from tests.dashboard.helpers import free_port  # noqa: E402
from tests.support.postgres import copy_results  # noqa: E402

PAGES = [
    ("overview", "/"),
    ("workloads, first page", "/workloads"),
    ("workloads, page 1,000", "/workloads?page=1000"),
    ("workloads, last page", "/workloads?page={last}"),
    ("sub_domain=nvlink", "/workloads?sub_domain=nvlink"),
    ("sub_domain=nvlink, last page", "/workloads?sub_domain=nvlink&page={nvlink_last}"),
    ("outcome + time range", "/workloads?outcome=Fail+InfraHW&from=2026-03-01&to=2026-03-15"),
    ("node (culprit)", "/workloads?node=gpu-0040&role=culprit"),
    ("search", "/workloads?q=synth:0999"),
    ("sorted by workload, page 1,234", "/workloads?sort=workload&order=asc&page=1234"),
    ("nodes ranking", "/nodes"),
    ("node page", "/nodes/gpu-0040"),
    ("rules (fired counts)", "/rules"),
]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rows", type=int, default=100_000)
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--db", type=Path, help="where to build the database (default: a temporary directory)")
    parser.add_argument("--postgres", metavar="DSN", help="read the same rows from a new PostgreSQL database")
    args = parser.parse_args()
    tmp = tempfile.TemporaryDirectory()
    db = args.db or Path(tmp.name) / "bench.db"
    if not db.exists():
        started = time.perf_counter()
        synthetic.build(db, args.rows)
        print(f"built {args.rows:,} attempts in {time.perf_counter() - started:.1f} s ({db.stat().st_size / 1e6:.0f} MB)",
              file=sys.stderr)
    nvlink = sum(1 for i in range(1, args.rows + 1) if synthetic.sub_domain(i) == "nvlink")
    values = {"last": -(-args.rows // 50), "nvlink_last": -(-nvlink // 50)}
    with _target(db, args.postgres) as target:
        _measure(target, args.rows, args.repeat, values)
    tmp.cleanup()


@contextmanager
def _target(db: Path, admin_dsn: str | None) -> Iterator[str]:
    """The SQLite file, or a new PostgreSQL database holding its rows (dropped on exit)."""
    if admin_dsn is None:
        yield str(db)
        return
    import psycopg

    name = f"ff_dash_bench_{uuid.uuid4().hex[:10]}"
    dsn = admin_dsn.rsplit("/", 1)[0] + f"/{name}"
    with psycopg.connect(admin_dsn, autocommit=True) as admin:
        admin.execute(f"CREATE DATABASE {name}")
    try:
        started = time.perf_counter()
        copy_results(db, dsn)
        with psycopg.connect(dsn, autocommit=True) as con:
            con.execute("ANALYZE")
            size = con.execute("SELECT pg_database_size(current_database())").fetchone()[0]
        print(f"copied into PostgreSQL in {time.perf_counter() - started:.1f} s ({size / 1e6:.0f} MB)", file=sys.stderr)
        yield dsn
    finally:
        with psycopg.connect(admin_dsn, autocommit=True) as admin:
            admin.execute(f"DROP DATABASE IF EXISTS {name} WITH (FORCE)")


def _measure(target: str, rows: int, repeat: int, values: dict[str, int]) -> None:
    port = free_port()
    process = subprocess.Popen([sys.executable, "-m", "firstfault", "dashboard", "--db", target, "--port", str(port),
                                "--log-level", "warning"])
    url = f"http://127.0.0.1:{port}"
    try:
        with httpx.Client(base_url=url, timeout=120) as client:
            for _ in range(300):
                try:
                    client.get("/healthz")
                    break
                except httpx.TransportError:
                    time.sleep(0.1)
            print(f"| page ({rows:,} attempts) | cold | warm p50 | warm max |")
            print("|---|---|---|---|")
            for label, path in PAGES:
                path = path.format(**values)
                timings = []
                for _ in range(repeat + 1):
                    started = time.perf_counter()
                    response = client.get(path)
                    timings.append(time.perf_counter() - started)
                    assert response.status_code == 200, (path, response.status_code)
                cold, warm = timings[0], timings[1:]
                print(f"| {label} | {cold * 1000:.0f} ms | {statistics.median(warm) * 1000:.0f} ms | "
                      f"{max(warm) * 1000:.0f} ms |")
    finally:
        process.terminate()
        process.wait()


if __name__ == "__main__":
    main()
