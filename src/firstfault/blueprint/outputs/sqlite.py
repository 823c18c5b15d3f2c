"""SQL outputs: one row per workload attempt, one row per attribution run (the re-run history), in a SQLite file
(`output db sqlite path FILE`) or a PostgreSQL database (outputs/postgres.py), with one schema (result.py) and
one way of storing (resultsdb.py).

The schema is versioned (`schema_migrations`, mirrored in SQLite's `PRAGMA user_version`) and migrated forward on
open; SQLite runs in WAL mode so the dashboard can read while the Blueprint writes. Every run is written in one
transaction, so a crash never leaves a half-written run. Each attempt is claimed before it is attributed, so
several drivers on one database attribute it once. docs/blueprint.md ("Results database") documents it.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Callable
from dataclasses import dataclass
from datetime import timedelta
from pathlib import Path
from typing import Any, TypeVar

from firstfault.blueprint import resultsdb
from firstfault.blueprint.config import ConnectorSpec
from firstfault.blueprint.options import LabelOptions, option, parse_options
from firstfault.blueprint.result import SCHEMA_VERSION, AttributionBlueprintResult
from firstfault.engine import ExecutionContext
from firstfault.engine.model import NodeHistory
from firstfault.errors import ConfigError, DatabaseError

__all__ = ["SCHEMA_VERSION", "SqlOutput", "SqliteOutput", "connect", "migrate"]
T = TypeVar("T")
DEFAULT_LEASE = timedelta(minutes=5)
LEASE_DOC = ("how long a claim on an attempt lasts without renewal (renewed every third of it while the attempt "
             "is attributed): another driver takes over an attempt whose driver died once it has run out")
DEFAULT_HISTORY = timedelta(days=30)
HISTORY_DOC = ("how far back the earlier culprits on a workload's nodes are read and given to its attribution as node "
               "fault history (the same fault on the same node and GPU before supports blaming it); 0 turns it off")


def connect(path: Path) -> sqlite3.Connection:
    """Open (creating or migrating) a SQLite results database; DatabaseError when the file cannot be one."""
    return resultsdb.open_results(path).raw  # type: ignore[no-any-return]


def migrate(db: sqlite3.Connection) -> int:
    """Apply the migrations this SQLite database lacks; returns the schema version."""
    return resultsdb.migrate(resultsdb.Database(db, resultsdb.SQLITE, "results database"))


def lease_seconds(lease: timedelta) -> float:
    if lease < timedelta(seconds=1):
        raise ConfigError(f"lease {lease}: a claim must last at least 1s")
    return lease.total_seconds()


class SqlOutput:
    """An output into a results database that claims each attempt before the driver attributes it.

    `already_attributed` remembers (until the end of the pass) the latest run it saw for an attempt it answered
    False for; `claim` succeeds only while that is still the latest run (and no other driver holds a claim), so
    an attempt another driver attributed meanwhile is not attributed again. Without a look first (`--force`),
    the claim compares with the latest run it finds.

    A connection lost (a database restarted or failed over) is opened again, and the operation it broke is tried
    once more on the new one: a lookup, a claim (its transaction was rolled back), or a claimed write (which the
    claim fences: a write that was committed before the connection broke is refused, not written twice)."""

    kind = "output"

    def __init__(self, label: str, target: str | Path, lease: timedelta, history: timedelta = DEFAULT_HISTORY) -> None:
        self.label = label
        self.lease_s = lease_seconds(lease)
        self.history = history
        self.target = target
        self.db = resultsdb.open_results(target)
        self.owner = resultsdb.new_owner()
        self._seen: dict[tuple[str, int], int | None] = {}
        self._claimed: set[tuple[str, int]] = set()
        self._heartbeat: resultsdb.Heartbeat | None = None

    def connect(self) -> resultsdb.Database:
        """A second connection (the heartbeat's), not migrating."""
        raise NotImplementedError

    def _call(self, operation: Callable[..., T], *args: Any, retry: bool = True) -> T:
        """`operation(db, *args)` on a live connection, once more on a new one when the connection was lost."""
        if self.db.broken():
            self._reopen()
        try:
            return operation(self.db, *args)
        except resultsdb.driver_errors():
            if not retry or not self.db.broken():
                raise
        self._reopen()
        return operation(self.db, *args)

    def _reopen(self) -> None:
        self.db.close()
        self.db = resultsdb.open_results(self.target)

    def already_attributed(self, ctx: ExecutionContext) -> bool:
        run_id, status = self._call(resultsdb.latest_run, ctx)
        if status == "ok":
            return True
        self._seen[(ctx.workload_id, ctx.attempt)] = run_id
        return False

    def claim(self, ctx: ExecutionContext) -> bool:
        key = (ctx.workload_id, ctx.attempt)
        seen = self._seen[key] if key in self._seen else self._call(resultsdb.latest_run, ctx)[0]
        if self._heartbeat is None:
            self._heartbeat = resultsdb.Heartbeat(self.connect, self.owner, self.lease_s)
        if not self._call(resultsdb.claim, ctx, self.owner, self.lease_s, seen):
            return False
        self._seen.pop(key, None)
        self._claimed.add(key)
        return True

    def node_history(self, ctx: ExecutionContext) -> NodeHistory | None:
        """The earlier culprit findings on the attempt's nodes within `history` (None: turned off)."""
        if not self.history:
            return None
        return self._call(resultsdb.node_history, ctx, self.history)

    def release(self, ctx: ExecutionContext) -> None:
        self._claimed.discard((ctx.workload_id, ctx.attempt))
        self._call(resultsdb.release, ctx, self.owner)

    def write(self, result: AttributionBlueprintResult) -> None:
        key = (result.context.workload_id, result.context.attempt)
        owner = self.owner if key in self._claimed else None
        self._claimed.discard(key)
        self._call(resultsdb.store, result, owner, retry=owner is not None)

    def flush(self) -> None:
        self._seen.clear()

    def close(self) -> None:
        if self._heartbeat is not None:   # it claimed: give back what it still holds (a write that failed)
            self._heartbeat.stop()
        try:
            if self._heartbeat is not None:
                resultsdb.release_all(self.db, self.owner)
        except resultsdb.driver_errors():
            pass   # a database gone: the claims run out by themselves
        finally:
            self.db.close()


@dataclass(frozen=True)
class SqliteOptions(LabelOptions):
    path: str | None = option(None, "the results database (created and migrated on open)", required=True)
    db: str = option("sqlite", "the database kind (`output db sqlite` declares it)", choices=["sqlite"])
    lease: timedelta = option(DEFAULT_LEASE, LEASE_DOC)
    history: timedelta = option(DEFAULT_HISTORY, HISTORY_DOC)


class SqliteOutput(SqlOutput):
    Options = SqliteOptions

    def __init__(self, spec: ConnectorSpec) -> None:
        options = parse_options(SqliteOptions, spec)
        assert options.path is not None   # required
        self.path = Path(options.path).expanduser()
        super().__init__(options.label or spec.name, self.path, options.lease, options.history)

    def connect(self) -> resultsdb.Database:
        try:
            return resultsdb.Database(resultsdb.connect_sqlite(self.path), resultsdb.SQLITE, str(self.path))
        except sqlite3.Error as exc:
            raise DatabaseError(f"{self.path}: {exc}") from None
