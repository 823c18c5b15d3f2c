"""Scratch databases on the private PostgreSQL of tests/support/setup-postgres.sh (127.0.0.1:15432): each test
gets a database of its own, created by the writer role `firstfault` and dropped afterwards; the reader role
`firstfault_reader` may only SELECT what the writer creates (the dashboard's role in docs/operations.md)."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from contextlib import contextmanager
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
