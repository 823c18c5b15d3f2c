"""The PostgreSQL results output against a real PostgreSQL 15 (tests/support/setup-postgres.sh): the schema and
its migrations as on SQLite, the bundled samples giving the rows SQLite gets, claims between drivers (in-process
and as concurrent `firstfault blueprint` processes), and a driver killed with SIGKILL mid-run."""

from __future__ import annotations

import json
import os
import re
import signal
import socket
import sqlite3
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import pytest
from blueprint_helpers import run_blueprint, wait_for

from firstfault.blueprint import resultsdb
from firstfault.blueprint.config import ConnectorSpec
from firstfault.blueprint.outputs.postgres import PostgresOutput
from firstfault.blueprint.outputs.sqlite import SqliteOutput
from firstfault.blueprint.result import SCHEMA_VERSION, AttributionBlueprintResult, Timings
from firstfault.engine import ExecutionContext
from firstfault.errors import DatabaseError
from firstfault.samples import samples_root
from tests.support.postgres import query, scratch_database, writer_dsn
from tests.support.workloads import sample_copies

SAMPLES = samples_root()
ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture
def pg() -> Iterator[str]:
    """A fresh database's writer DSN."""
    with scratch_database("bp") as name:
        yield writer_dsn(name)


# -- schema ----------------------------------------------------------------------------------------------------
def _sqlite_columns(path: Path) -> dict[str, list[str]]:
    with sqlite3.connect(path) as con:
        names = [r[0] for r in con.execute("SELECT name FROM sqlite_master WHERE type IN ('table', 'view')")]
        return {n: [c[1] for c in con.execute(f"PRAGMA table_info({n})")] for n in names}


def _pg_columns(dsn: str) -> dict[str, list[str]]:
    columns: dict[str, list[str]] = {}
    for table, column in query(dsn, "SELECT table_name, column_name FROM information_schema.columns "
                                    "WHERE table_schema = 'public' ORDER BY table_name, ordinal_position"):
        columns.setdefault(table, []).append(column)
    return columns


def test_the_schema_on_postgres_is_the_sqlite_schema(pg: str, tmp_path: Path) -> None:
    """Same tables, views and columns in the same order, the same migrations recorded; the references SQLite
    declares are enforced constraints; opening again (or from a newer schema) changes nothing."""
    resultsdb.open_results(tmp_path / "r.db").close()
    resultsdb.open_results(pg).close()
    assert _pg_columns(pg) == _sqlite_columns(tmp_path / "r.db")
    assert [v for (v,) in query(pg, "SELECT version FROM schema_migrations ORDER BY 1")] == list(
        range(1, SCHEMA_VERSION + 1))
    fks = query(pg, "SELECT conname FROM pg_constraint WHERE contype = 'f' ORDER BY 1")
    assert [n for (n,) in fks] == ["attribution_runs_attempt_id_fkey", "connector_reports_run_id_fkey",
                                   "run_nodes_run_id_fkey", "workload_attempts_latest_run_id_fkey"]
    resultsdb.open_results(pg).close()    # migrated already: nothing to do
    assert len(query(pg, "SELECT * FROM schema_migrations")) == SCHEMA_VERSION
    query(pg, "INSERT INTO schema_migrations VALUES (%s, 'from the future', '')", (SCHEMA_VERSION + 1,))
    with pytest.raises(Exception, match="upgrade firstfault"):
        resultsdb.open_results(pg)


def test_drivers_starting_together_migrate_once(pg: str) -> None:
    """Three connections migrating a new database at once: one applies the migrations, the others wait for
    its advisory lock and find them applied."""
    from concurrent.futures import ThreadPoolExecutor

    with ThreadPoolExecutor(3) as pool:
        for db in pool.map(lambda _: resultsdb.open_results(pg), range(3)):
            db.close()
    assert len(query(pg, "SELECT * FROM schema_migrations")) == SCHEMA_VERSION


def test_a_version_1_postgres_database_is_migrated(pg: str) -> None:
    """The translated migration 2 on data: runs stored `ok` with a failed collector or coverage issues become
    `partial`; the rebuilt table keeps its references (enforced) and its ids continue after the copied ones."""
    import psycopg

    version, description, statements = resultsdb.POSTGRES.migrations()[0]
    issues = '{"diagnosis": {"coverage": {"issues": ["n1/syslog.log: line 3: a time outside 1970-2200"]}}}'
    with psycopg.connect(pg, autocommit=True) as con:
        for statement in statements:
            con.execute(statement)
        con.execute('CREATE TABLE schema_migrations (version BIGINT PRIMARY KEY, description TEXT NOT NULL, '
                    'applied_at TEXT NOT NULL)')
        con.execute("INSERT INTO schema_migrations VALUES (%s, %s, '2026-01-01')", (version, description))
        for number, failed, result in ((1, 0, "{}"), (2, 1, "{}"), (3, 0, issues)):
            con.execute("INSERT INTO workload_attempts VALUES (%s, %s, 0, 'none', '', '', NULL, NULL, '', '', '[]', "
                        "'{}', '2026-01-01', NULL)", (number, f"w{number}"))
            con.execute("INSERT INTO attribution_runs VALUES (%s, %s, '2026-01-01', 'ok', NULL, 'embedded', '', NULL, "
                        "NULL, NULL, NULL, NULL, '[]', %s, 0, 0, 0, '[]', %s)", (number, number, failed, result))
            con.execute("UPDATE workload_attempts SET latest_run_id = %s WHERE id = %s", (number, number))
            con.execute("INSERT INTO run_nodes VALUES (%s, 'n1', 'allocated')", (number,))
    resultsdb.open_results(pg).close()
    assert query(pg, "SELECT workload_id, status FROM latest_attributions ORDER BY 1") == [
        ("w1", "ok"), ("w2", "partial"), ("w3", "partial")]
    assert query(pg, "SELECT COUNT(*) FROM run_nodes") == [(3,)]
    insert = ("INSERT INTO attribution_runs (attempt_id, attributed_at, status, mode, catalog_hash, culprit_nodes_json, "
              "failed_connectors, collect_s, attribute_s, total_s, connector_reports_json, result_json) VALUES "
              "(%s, '', 'partial', '', '', '[]', 0, 0, 0, 0, '[]', '{}') RETURNING id")
    with pytest.raises(psycopg.errors.ForeignKeyViolation):   # the rebuilt table still refers to its attempts
        query(pg, insert, (99,))
    (new_id,), = query(pg, insert, (1,))   # past the copied ids (the refused insert used one up)
    assert new_id > 3


def test_a_database_that_cannot_be_reached_is_a_clear_error(capsys: pytest.CaptureFixture[str]) -> None:
    dsn = "postgresql://firstfault:hunter2-secret@127.0.0.1:15432/no_such_database"
    with pytest.raises(DatabaseError, match="no_such_database: cannot connect") as caught:
        resultsdb.open_results(dsn)
    assert "hunter2" not in str(caught.value)
    code, _, err = run_blueprint(["--configs", str(SAMPLES), "--connector", "output", "db", "postgres", "dsn", dsn],
                                 capsys)
    assert code == 2 and "cannot connect" in err and "hunter2" not in err and "Traceback" not in err


# -- the same rows as SQLite -------------------------------------------------------------------------------------
def _stable(result_json: str) -> dict[str, Any]:
    """A stored result without what differs between two runs: when, and how long it took."""
    result = json.loads(result_json)
    result.pop("attributed_at")
    result.pop("timings")
    result["connector_reports"] = _timeless(result["connector_reports"])
    return dict(result)


def _timeless(reports: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [{k: v for k, v in report.items() if k != "seconds"} for report in reports]


def _rows(execute: Callable[[str], list[tuple[Any, ...]]]) -> dict[str, list[tuple[Any, ...]]]:
    """Every table's rows, ids included, less the columns that hold times and durations."""
    return {
        "workload_attempts": execute(
            "SELECT id, workload_id, attempt, scheduler, job_id, name, start_time, end_time, scheduler_state, "
            "exit_code, nodes_json, context_json, latest_run_id FROM workload_attempts ORDER BY id"),
        "attribution_runs": [(*row[:-2], _timeless(json.loads(row[-2])), _stable(row[-1])) for row in execute(
            "SELECT id, attempt_id, status, error, mode, catalog_hash, terminal_state, outcome, sub_domain, "
            "root_symptom, root_node, culprit_nodes_json, failed_connectors, connector_reports_json, result_json "
            "FROM attribution_runs ORDER BY id")],
        "run_nodes": execute("SELECT run_id, node, role FROM run_nodes ORDER BY run_id, node, role"),
        "connector_reports": execute(
            "SELECT run_id, connector, kind, status, reason, observation_count, nodes_json FROM connector_reports "
            "ORDER BY run_id, connector, kind"),
        "attempt_claims": execute("SELECT workload_id FROM attempt_claims"),
    }


def test_the_samples_into_postgres_give_the_rows_sqlite_gets(pg: str, tmp_path: Path,
                                                             capsys: pytest.CaptureFixture[str]) -> None:
    db = tmp_path / "r.db"
    for output in (["sqlite", "path", str(db)], ["postgres", "dsn", pg]):
        code, _, err = run_blueprint(["--configs", str(SAMPLES), "--connector", "output", "db", *output], capsys)
        assert code == 0 and "5 attributed" in err, err
    with sqlite3.connect(db) as con:
        expected = _rows(lambda sql: con.execute(sql).fetchall())
    got = _rows(lambda sql: query(pg, sql))
    assert got == expected
    assert len(got["attribution_runs"]) == 5 and got["attempt_claims"] == []
    code, _, err = run_blueprint(["--configs", str(SAMPLES), "--connector", "output", "db", "postgres", "dsn", pg],
                                 capsys)
    assert code == 0 and "0 attributed, 5 skipped" in err


# -- claims ------------------------------------------------------------------------------------------------------
def _result(ctx: ExecutionContext) -> AttributionBlueprintResult:
    return AttributionBlueprintResult(context=ctx, diagnosis=None, error="stand-in run of a claims test",
                                      connector_reports=[], timings=Timings(collect_s=0, attribute_s=0, total_s=0),
                                      catalog_hash="", mode="embedded", attributed_at=datetime.now(timezone.utc))


@pytest.fixture(params=["sqlite", "postgres"])
def shared(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Callable[..., Any]]:
    """Outputs of several drivers on one database (the same code on both kinds)."""
    opened: list[Any] = []
    with scratch_database("claims") as name:
        def output(lease: str = "5m") -> Any:
            if request.param == "sqlite":
                made: Any = SqliteOutput(ConnectorSpec("output", "sqlite", {"path": str(tmp_path / "r.db"),
                                                                            "lease": lease}))
            else:
                made = PostgresOutput(ConnectorSpec("output", "postgres", {"dsn": writer_dsn(name), "lease": lease}))
            opened.append(made)
            return made

        yield output
        for made in opened:
            made.close()


def _runs(output: Any, ctx: ExecutionContext) -> int:
    return int(output.db.execute("SELECT COUNT(*) FROM attribution_runs r JOIN workload_attempts a ON "
                                 "a.id = r.attempt_id WHERE a.workload_id = ?", (ctx.workload_id,)).fetchone()[0])


def test_a_claimed_or_meanwhile_attributed_attempt_is_not_claimed_again(shared: Callable[..., Any]) -> None:
    a, b = shared(), shared()
    ctx = ExecutionContext(workload_id="w1", nodes=["n1"])
    assert not a.already_attributed(ctx) and not b.already_attributed(ctx)    # both decide to attribute it
    assert a.claim(ctx)
    assert not b.claim(ctx)                       # a holds it
    a.write(_result(ctx))
    assert not b.claim(ctx)                       # free again, but a run was written since b looked
    assert _runs(a, ctx) == 1
    assert not b.already_attributed(ctx)          # an `error` run: attributed again by the next pass ...
    assert b.claim(ctx)                           # ... which claims it, having seen a's run
    b.write(_result(ctx))
    assert _runs(a, ctx) == 2
    assert a.db.execute("SELECT COUNT(*) FROM attempt_claims").fetchone()[0] == 0


def test_a_dead_drivers_claim_runs_out_and_its_late_write_is_refused(shared: Callable[..., Any]) -> None:
    a, b = shared("1s"), shared("1s")
    ctx = ExecutionContext(workload_id="w2", nodes=["n1"])
    assert a.claim(ctx)
    time.sleep(1.5)                               # a's heartbeat keeps it
    assert not b.claim(ctx)
    a._heartbeat.stop()                           # a hangs: no more renewals
    wait_for("a's claim to run out", lambda: b.claim(ctx), timeout=5, every=0.2)
    with pytest.raises(resultsdb.ClaimLost, match="another driver took the attempt over"):
        a.write(_result(ctx))
    b.write(_result(ctx))
    assert _runs(a, ctx) == 1


def test_a_claim_of_a_dead_process_of_this_host_is_taken_at_once(shared: Callable[..., Any]) -> None:
    """A driver restarted on the host where the previous one died does not wait for the dead one's lease."""
    a, b = shared(), shared()
    finished = subprocess.Popen(["true"])
    finished.wait()
    a.owner = f"{socket.gethostname()}:{finished.pid}:dead"   # the claims of a process that is gone
    ctx = ExecutionContext(workload_id="w4", nodes=["n1"])
    assert a.claim(ctx)
    assert b.claim(ctx)
    with pytest.raises(resultsdb.ClaimLost):
        a.write(_result(ctx))
    b.write(_result(ctx))
    assert _runs(a, ctx) == 1
    assert not resultsdb.dead_here(b.owner) and not resultsdb.dead_here(f"another-host:{finished.pid}:x")


def test_a_lease_shorter_than_a_second_is_refused(tmp_path: Path) -> None:
    with pytest.raises(Exception, match="at least 1s"):
        SqliteOutput(ConnectorSpec("output", "sqlite", {"path": str(tmp_path / "r.db"), "lease": "500ms"}))


# -- several driver processes ------------------------------------------------------------------------------------
def _driver(workloads: Path, dsn: str, *extra: str, lease: str = "5m", slow_writes: Path | None = None
            ) -> subprocess.Popen[str]:
    """`firstfault blueprint` on the workloads into PostgreSQL, in a process of its own; with `slow_writes`, each
    write holds its transaction open for 0.2 s and appends a line to that file when it starts
    (tests/reliability/scripts/slow_writes.py)."""
    env = {**os.environ, "PYTHONPATH": f"{ROOT / 'src'}{os.pathsep}{ROOT}"}
    command = ([sys.executable, "-m", "tests.reliability.scripts.slow_writes", str(slow_writes)] if slow_writes
               else [sys.executable, "-m", "firstfault", "blueprint", "--no-progress"])
    return subprocess.Popen(
        [*command, "--configs", str(workloads), "--connector", "output", "db", "postgres", "dsn", dsn,
         "lease", lease, *extra], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env, cwd=ROOT)


def _attempt_runs(dsn: str) -> dict[str, int]:
    return dict(query(dsn, "SELECT a.workload_id, COUNT(r.id) FROM workload_attempts a "
                           "LEFT JOIN attribution_runs r ON r.attempt_id = a.id GROUP BY 1"))


def _attributed(stderr: str) -> int:
    found = re.search(r"firstfault blueprint: (\d+) attributed", stderr)
    assert found, stderr
    return int(found[1])


def test_two_drivers_at_once_attribute_each_attempt_once(pg: str, tmp_path: Path,
                                                         capsys: pytest.CaptureFixture[str]) -> None:
    """Two `firstfault blueprint` processes started together on the same 40 workloads, two workers each: every
    attempt has one run, the two attributed 40 between them, and each diagnosis is the one a single driver
    writes into SQLite."""
    workloads = sample_copies(tmp_path / "w", 8)
    drivers = [_driver(workloads, pg, "--workers", "2") for _ in range(2)]
    outcomes = [d.communicate(timeout=300) for d in drivers]
    assert [d.returncode for d in drivers] == [0, 0], outcomes
    attributed = [_attributed(err) for _, err in outcomes]
    assert sum(attributed) == 40, attributed
    runs = _attempt_runs(pg)
    assert len(runs) == 40 and set(runs.values()) == {1}
    assert query(pg, "SELECT COUNT(*) FROM attempt_claims") == [(0,)]
    single = tmp_path / "single.db"
    code, _, err = run_blueprint(["--configs", str(workloads), "--connector", "output", "db", "sqlite", "path",
                                  str(single)], capsys)
    assert code == 0, err
    with sqlite3.connect(single) as con:
        expected = {w: json.loads(r)["diagnosis"] for w, r in con.execute(
            "SELECT a.workload_id, r.result_json FROM workload_attempts a JOIN attribution_runs r ON r.attempt_id = a.id")}
    assert {w: json.loads(r)["diagnosis"] for w, r in query(
        pg, "SELECT a.workload_id, r.result_json FROM workload_attempts a JOIN attribution_runs r "
            "ON r.attempt_id = a.id")} == expected


def test_a_driver_killed_mid_run_loses_and_duplicates_nothing(pg: str, tmp_path: Path) -> None:
    """SIGKILL one driver (of another host) inside the transaction writing its fifth run: that run is not in the
    database and its claim stands. A second driver (a watch) attributes every other attempt at once and that one
    only after the claim's lease has run out; every attempt ends with exactly one run and no claim is left.

    The dead driver's claim is set to run out 30 s after the kill (its renewals kept it at most 10 s ahead): the
    second driver's start (a cold catalog compile on a slow machine) and first pass must not outlast the lease,
    or the first pass would find the claim expired and take it at once."""
    workloads = sample_copies(tmp_path / "w", 8)
    marker = tmp_path / "writes"
    first = _driver(workloads, pg, lease="10s", slow_writes=marker)
    try:
        wait_for("the first driver to be inside its fifth write", lambda: marker.exists() and
                 marker.read_text().count("inside") >= 5, timeout=120, every=0.02)
    finally:
        first.send_signal(signal.SIGKILL)
        first.communicate(timeout=30)
    writes = marker.read_text().count("inside")
    # as if it had run on another host (a dead driver of this host would be taken over at once: the next test)
    query(pg, "UPDATE attempt_claims SET owner = 'another-host:' || split_part(owner, ':', 2) || ':x', "
              "expires_at = CAST(EXTRACT(EPOCH FROM clock_timestamp()) AS DOUBLE PRECISION) + 30")
    (workload, expires_at), = query(pg, "SELECT workload_id, expires_at FROM attempt_claims")
    assert query(pg, "SELECT COUNT(*) FROM attribution_runs") == [(writes - 1,)]   # the killed one rolled back
    assert _attempt_runs(pg).get(workload, 0) == 0

    second = _driver(workloads, pg, "--watch", "--interval", "1s", lease="10s")
    try:
        wait_for("every attempt to be attributed", lambda: len(_attempt_runs(pg)) == 40 and
                 0 not in _attempt_runs(pg).values(), timeout=180, every=0.5)
    finally:
        second.send_signal(signal.SIGTERM)
        _, err = second.communicate(timeout=60)
    assert second.returncode == 0, err
    runs = _attempt_runs(pg)
    assert len(runs) == 40 and set(runs.values()) == {1}, runs
    assert query(pg, "SELECT COUNT(*) FROM attempt_claims") == [(0,)]
    cycles = [json.loads(line) for line in err.splitlines() if line.startswith('{"event":"cycle"')]
    assert sum(c["attributed"] for c in cycles) == 40 - (writes - 1)
    assert cycles[0]["elsewhere"] == 1     # the held attempt, left to its (dead) driver until the lease ran out
    (attributed_at,), = query(pg, "SELECT r.attributed_at FROM attribution_runs r JOIN workload_attempts a ON "
                                  "a.id = r.attempt_id WHERE a.workload_id = %s", (workload,))
    assert datetime.fromisoformat(attributed_at).timestamp() >= expires_at - 0.5



def test_a_lost_connection_is_opened_again(pg: str) -> None:
    """The server ends every connection of the driver (as a restart or a failover does): the next lookup, claim
    and write go through on a new connection, and the claim still fences the write."""
    output = PostgresOutput(ConnectorSpec("output", "postgres", {"dsn": pg}))
    try:
        ctx = ExecutionContext(workload_id="w3", nodes=["n1"])
        terminate = ("SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE datname = current_database() "
                     "AND pid != pg_backend_pid()")
        assert not output.already_attributed(ctx)
        query(pg, terminate)
        assert output.claim(ctx)
        query(pg, terminate)
        output.write(_result(ctx))
        assert _runs(output, ctx) == 1
        assert query(pg, "SELECT COUNT(*) FROM attempt_claims") == [(0,)]
    finally:
        output.close()
