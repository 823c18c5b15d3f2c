"""Scratch databases on the private PostgreSQL of tests/support/setup-postgres.sh (127.0.0.1:15432): each test
gets a database of its own, created by the writer role `firstfault` and dropped afterwards; the reader role
`firstfault_reader` may only SELECT what the writer creates (the dashboard's role in docs/operations.md)."""

from __future__ import annotations

import sqlite3
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest

SERVER = "127.0.0.1:15432"
ADMIN_DSN = f"postgresql://firstfault:firstfault@{SERVER}/firstfault"


def writer_dsn(name: str) -> str:
    return f"postgresql://firstfault:firstfault@{SERVER}/{name}"


def reader_dsn(name: str) -> str:
    return f"postgresql://firstfault_reader:firstfault_reader@{SERVER}/{name}"


def _admin() -> Any:
    import psycopg

    try:
        return psycopg.connect(ADMIN_DSN, autocommit=True, connect_timeout=5)
    except psycopg.OperationalError as exc:
        pytest.fail(f"PostgreSQL is not running (run tests/support/setup-postgres.sh as root): {exc}")


@contextmanager
def scratch_database(prefix: str = "t") -> Iterator[str]:
    """A new empty database's name; dropped (with whatever still connects to it) on exit."""
    name = f"ff_{prefix}_{uuid.uuid4().hex[:10]}"
    with _admin() as admin:
        admin.execute(f"CREATE DATABASE {name}")
    try:
        yield name
    finally:
        with _admin() as admin:
            admin.execute(f"DROP DATABASE IF EXISTS {name} WITH (FORCE)")


def query(dsn: str, sql: str, params: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
    """The rows of one statement (none for a statement that returns none), on a connection of its own."""
    import psycopg

    with psycopg.connect(dsn, autocommit=True) as con:
        cursor = con.execute(sql, params)
        return cursor.fetchall() if cursor.description is not None else []


# the tables of the results schema in an order that keeps every reference satisfied
_TABLES = ("workload_attempts", "attribution_runs", "run_nodes", "connector_reports")


def copy_results(sqlite_path: Path, dsn: str) -> None:
    """Every row of a SQLite results database into a new PostgreSQL one (created with the same migrations): the
    same ids, so both serve the same pages. Attempts go in first without their latest run, which is set once
    the runs are in."""
    import psycopg

    from firstfault.blueprint import resultsdb

    resultsdb.open_results(dsn).close()
    with sqlite3.connect(sqlite_path) as source, psycopg.connect(dsn) as target:
        for table in _TABLES:
            columns = [c[1] for c in source.execute(f"PRAGMA table_info({table})")]
            rows = source.execute(f"SELECT {', '.join(columns)} FROM {table}").fetchall()
            if table == "workload_attempts":
                latest = [(row[-1], row[0]) for row in rows]
                rows = [(*row[:-1], None) for row in rows]
            with target.cursor() as cursor:
                cursor.executemany(f"INSERT INTO {table} ({', '.join(columns)}) VALUES "
                                   f"({', '.join(['%s'] * len(columns))})", rows)
        with target.cursor() as cursor:
            cursor.executemany("UPDATE workload_attempts SET latest_run_id = %s WHERE id = %s", latest)
        for table in _TABLES[:2]:
            target.execute(f"SELECT setval(pg_get_serial_sequence('{table}', 'id'), MAX(id)) FROM {table}")
