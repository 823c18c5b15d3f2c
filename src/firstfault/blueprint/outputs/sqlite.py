"""SQLite output: one row per workload attempt, one row per attribution run (the re-run history).

The schema is versioned (`schema_migrations`, mirrored in `PRAGMA user_version`) and migrated forward on open;
the database runs in WAL mode so the dashboard can read while the Blueprint writes. Every run is written in one
transaction, so a crash never leaves a half-written run. docs/blueprint.md ("SQLite schema") documents it.
"""

from __future__ import annotations

import json
import sqlite3
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path

from firstfault.blueprint.config import ConnectorSpec
from firstfault.blueprint.options import LabelOptions, option, parse_options
from firstfault.blueprint.result import MAX_ROW_ID, MIGRATIONS, SCHEMA_VERSION, AttributionBlueprintResult
from firstfault.engine import ExecutionContext
from firstfault.errors import DatabaseError, SchemaError


def connect(path: Path) -> sqlite3.Connection:
    """Open (creating or migrating) a results database; DatabaseError when the file cannot be one."""
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        db = sqlite3.connect(path, isolation_level=None, timeout=30)
        try:
            db.execute("PRAGMA journal_mode=WAL")
            db.execute("PRAGMA foreign_keys=ON")
            db.execute("PRAGMA synchronous=NORMAL")
            migrate(db)
        except BaseException:
            db.close()
            raise
    except (OSError, sqlite3.Error) as exc:
        raise DatabaseError(f"{path}: cannot be used as a results database ({exc})") from None
    return db


def migrate(db: sqlite3.Connection) -> int:
    """Apply the migrations this database lacks, in one transaction; returns the schema version. Foreign keys
    are not enforced while they run (a table rebuild drops a table the others refer to) and are checked before
    the commit."""
    enforced = db.execute("PRAGMA foreign_keys").fetchone()[0]
    db.execute("PRAGMA foreign_keys=OFF")
    try:
        _apply_migrations(db)
    finally:
        db.execute(f"PRAGMA foreign_keys={'ON' if enforced else 'OFF'}")
    return SCHEMA_VERSION


def _apply_migrations(db: sqlite3.Connection) -> None:
    db.execute("BEGIN IMMEDIATE")
    try:
        db.execute("CREATE TABLE IF NOT EXISTS schema_migrations (version INTEGER PRIMARY KEY, "
                   "description TEXT NOT NULL, applied_at TEXT NOT NULL)")
        current = db.execute("SELECT COALESCE(MAX(version), 0) FROM schema_migrations").fetchone()[0]
        if current > SCHEMA_VERSION:
            raise SchemaError(f"the database has schema version {current}; this firstfault knows up to "
                              f"{SCHEMA_VERSION}: upgrade firstfault")
        for version, description, sql in MIGRATIONS:
            if version <= current:
                continue
            for statement in _statements(sql):
                db.execute(statement)
            db.execute("INSERT INTO schema_migrations VALUES (?, ?, ?)", (version, description, _now()))
            db.execute(f"PRAGMA user_version = {version}")
        if db.execute("PRAGMA foreign_key_check").fetchone() is not None:
            raise SchemaError("migrating the database would break its references; it was left unchanged")
        db.execute("COMMIT")
    except BaseException:
        db.execute("ROLLBACK")
        raise


def _statements(sql: str) -> list[str]:
    return [s.strip() for s in sql.split(";") if s.strip()]


def _now() -> str:
    return datetime.now(timezone.utc).isoformat()


def _iso(value: datetime | None) -> str | None:
    return value.isoformat() if value else None


def _storable(ctx: ExecutionContext) -> ExecutionContext:
    """The context, when its attempt number fits the database (SQLite integers are 64-bit)."""
    if ctx.attempt > MAX_ROW_ID:
        raise DatabaseError(f"workload {ctx.workload_id}: attempt {ctx.attempt} is beyond the largest the results "
                            f"database stores ({MAX_ROW_ID})")
    return ctx


def _upsert_attempt(db: sqlite3.Connection, ctx: ExecutionContext) -> int:
    db.execute(
        """INSERT INTO workload_attempts (workload_id, attempt, scheduler, job_id, name, start_time, end_time,
               scheduler_state, exit_code, nodes_json, context_json, first_seen_at)
           VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)
           ON CONFLICT (workload_id, attempt) DO UPDATE SET scheduler = excluded.scheduler,
               job_id = excluded.job_id, name = excluded.name, start_time = excluded.start_time,
               end_time = excluded.end_time, scheduler_state = excluded.scheduler_state,
               exit_code = excluded.exit_code, nodes_json = excluded.nodes_json,
               context_json = excluded.context_json""",
        (ctx.workload_id, ctx.attempt, ctx.scheduler, ctx.job_id, ctx.name, _iso(ctx.start_time),
         _iso(ctx.end_time), ctx.scheduler_state, ctx.exit_code, json.dumps(ctx.nodes),
         ctx.model_dump_json(), _now()))
    row = db.execute("SELECT id FROM workload_attempts WHERE workload_id = ? AND attempt = ?",
                     (ctx.workload_id, ctx.attempt)).fetchone()
    return int(row[0])


def _run_nodes(result: AttributionBlueprintResult) -> set[tuple[str, str]]:
    rows = {(node, "allocated") for node in result.context.nodes}
    if result.diagnosis is not None:
        rows |= {(c.node, "culprit") for c in result.diagnosis.culprit_nodes}
        rows |= {(s.node, "symptom") for s in result.diagnosis.symptoms if s.node}
    return rows


def store(db: sqlite3.Connection, result: AttributionBlueprintResult) -> int:
    """Write one attribution run (and its attempt row) in a single transaction; returns the run id."""
    d = result.diagnosis
    root = d.root_cause if d else None
    db.execute("BEGIN IMMEDIATE")
    try:
        attempt_id = _upsert_attempt(db, _storable(result.context))
        cursor = db.execute(
            """INSERT INTO attribution_runs (attempt_id, attributed_at, status, error, mode, catalog_hash,
                   terminal_state, outcome, sub_domain, root_symptom, root_node, culprit_nodes_json,
                   failed_connectors, collect_s, attribute_s, total_s, connector_reports_json, result_json)
               VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)""",
            (attempt_id, result.attributed_at.isoformat(), result.status(), result.error, result.mode,
             result.catalog_hash, d.terminal_state.value if d else None, d.outcome.value if d else None,
             d.sub_domain.value if d else None, root.symptom if root else None, root.node if root else None,
             json.dumps([c.node for c in d.culprit_nodes] if d else []), len(result.failed_connectors()),
             result.timings.collect_s, result.timings.attribute_s, result.timings.total_s,
             json.dumps([r.model_dump() for r in result.connector_reports]), result.model_dump_json()))
        run_id = int(cursor.lastrowid or 0)
        db.executemany("INSERT INTO run_nodes VALUES (?, ?, ?)",
                       [(run_id, node, role) for node, role in sorted(_run_nodes(result))])
        db.executemany("INSERT INTO connector_reports VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
                       [(run_id, r.connector, r.kind, r.status, r.reason, r.observation_count, json.dumps(r.nodes),
                         r.seconds) for r in result.connector_reports])
        db.execute("UPDATE workload_attempts SET latest_run_id = ? WHERE id = ?", (run_id, attempt_id))
        db.execute("COMMIT")
    except BaseException:
        db.execute("ROLLBACK")
        raise
    return run_id


@dataclass(frozen=True)
class SqliteOptions(LabelOptions):
    path: str | None = option(None, "the results database (created and migrated on open)", required=True)
    db: str = option("sqlite", "the database kind (`output db sqlite` declares it)", choices=["sqlite"])


class SqliteOutput:
    kind = "output"
    Options = SqliteOptions

    def __init__(self, spec: ConnectorSpec) -> None:
        options = parse_options(SqliteOptions, spec)
        self.label = options.label or spec.name
        assert options.path is not None   # required
        self.path = Path(options.path).expanduser()
        self.db = connect(self.path)

    def already_attributed(self, ctx: ExecutionContext) -> bool:
        row = self.db.execute(
            """SELECT 1 FROM workload_attempts a JOIN attribution_runs r ON r.id = a.latest_run_id
               WHERE a.workload_id = ? AND a.attempt = ? AND r.status = 'ok'""",
            (ctx.workload_id, _storable(ctx).attempt)).fetchone()
        return row is not None

    def write(self, result: AttributionBlueprintResult) -> None:
        store(self.db, result)

    def flush(self) -> None:
        return None

    def close(self) -> None:
        self.db.close()
