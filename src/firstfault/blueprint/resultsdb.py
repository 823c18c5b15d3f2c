"""The results database, on SQLite or PostgreSQL: one schema, one way to store a run, claims on attempts.

The schema is `result.MIGRATIONS`, written once in SQLite's SQL. SQLite runs it as written; PostgreSQL runs a
translation (`PostgresDialect.migrations`): 64-bit integers, identity ids, byte-order text (SQLite's BINARY
collation, so lists sort the same), SQLite's JSON path functions as PostgreSQL's, and foreign keys added once
the tables they name exist (SQLite refers to tables by name; a rebuilt table keeps its references).

Every statement is written with `?` placeholders; `Database.execute` rewrites them for psycopg. The few
expressions that differ between the two (JSON arrays, epoch seconds, string aggregation, the clock) are
`Dialect` methods.

Claims (`attempt_claims`): before a driver attributes an attempt it claims it for a lease, and only when no run
was written for the attempt since the driver looked (compare and claim, one transaction). The claim is renewed
while the driver works (`Heartbeat`) and removed in the transaction that writes the run, which is refused when the
claim was taken over (its lease ran out). So several drivers attribute each attempt once, and a driver that dies
leaves a claim that another takes once its lease has run out (at once when the dead driver ran on the same host:
a restart redoes its work without waiting).
"""

from __future__ import annotations

import json
import os
import re
import select
import socket
import sqlite3
import threading
import uuid
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import datetime, timedelta, timezone
from functools import cache
from pathlib import Path
from typing import Any
from urllib.parse import quote

from firstfault.blueprint.result import MAX_ROW_ID, MIGRATIONS, SCHEMA_VERSION, AttributionBlueprintResult
from firstfault.engine import ExecutionContext
from firstfault.engine.model import NodeHistory, PriorFinding
from firstfault.errors import DatabaseError, SchemaError

POSTGRES_SCHEMES = ("postgresql://", "postgres://")
_MIGRATIONS_TABLE = ("CREATE TABLE IF NOT EXISTS schema_migrations (version INTEGER PRIMARY KEY, "
                     "description TEXT NOT NULL, applied_at TEXT NOT NULL)")


def is_postgres(target: str | Path) -> bool:
    return str(target).startswith(POSTGRES_SCHEMES)


def statements(sql: str) -> list[str]:
    """The statements of a migration (none of them holds a `;` of its own)."""
    return [s.strip() for s in sql.split(";") if s.strip()]


# -- dialects ---------------------------------------------------------------------------------------------------
class Dialect:
    """What differs between the two databases, as SQL text."""

    name = ""
    like = "LIKE"   # case-insensitive for ASCII on SQLite

    def sql(self, text: str) -> str:
        return text

    def json_array(self, column: str, alias: str) -> str:
        """A FROM item: the elements of the JSON array (of strings) in `column`, as rows `alias.value`."""
        raise NotImplementedError

    def json_objects(self, column: str, path: tuple[str, ...], alias: str) -> str:
        """A FROM item: the objects of the JSON array at `path` in `column`, as rows `alias.value`."""
        raise NotImplementedError

    def json_field(self, value: str, key: str) -> str:
        """The text of `key` of a JSON object from `json_objects`."""
        raise NotImplementedError

    def epoch(self, text: str) -> str:
        """Whole seconds since 1970 of an ISO 8601 text column."""
        raise NotImplementedError

    def group_concat(self, expr: str) -> str:
        raise NotImplementedError

    def now(self) -> str:
        """The database's clock, in seconds since 1970 (claims expire by it, whatever the drivers' clocks say)."""
        raise NotImplementedError

    def migrations(self) -> list[tuple[int, str, list[str]]]:
        return [(version, description, statements(sql)) for version, description, sql in MIGRATIONS]


class SqliteDialect(Dialect):
    name = "sqlite"

    def json_array(self, column: str, alias: str) -> str:
        return f"json_each({column}) {alias}"

    def json_objects(self, column: str, path: tuple[str, ...], alias: str) -> str:
        return f"json_each({column}, '$.{'.'.join(path)}') {alias}"

    def json_field(self, value: str, key: str) -> str:
        return f"json_extract({value}, '$.{key}')"

    def epoch(self, text: str) -> str:
        return f"CAST(strftime('%s', {text}) AS INTEGER)"

    def group_concat(self, expr: str) -> str:
        return f"GROUP_CONCAT({expr})"

    def now(self) -> str:
        return "((julianday('now') - 2440587.5) * 86400.0)"


@dataclass(frozen=True)
class ForeignKey:
    table: str
    column: str
    target: str
    target_column: str

    @property
    def name(self) -> str:
        return f"{self.table}_{self.column}_fkey"


# SQLite's SQL -> PostgreSQL's, statement by statement (the forms result.MIGRATIONS uses)
_PG_TYPES: list[tuple[re.Pattern[str], str | Callable[[re.Match[str]], str]]] = [
    (re.compile(r"\bINTEGER PRIMARY KEY\b"), "BIGINT GENERATED BY DEFAULT AS IDENTITY PRIMARY KEY"),
    (re.compile(r"\bINTEGER\b"), "BIGINT"),
    (re.compile(r"\bREAL\b"), "DOUBLE PRECISION"),
    (re.compile(r"\bTEXT\b"), 'TEXT COLLATE "C"'),
    (re.compile(r"\)\s*WITHOUT ROWID$"), ")"),
    (re.compile(r"json_array_length\((\w+), '\$\.([\w.]+)'\)"),
     lambda m: f"json_array_length(({m[1]})::json #> '{{{m[2].replace('.', ',')}}}')"),
]
_CREATE_INDEX = re.compile(r"^(CREATE (?:UNIQUE )?INDEX \w+ ON \w+)\((.*)\)$")
_CREATE_TABLE = re.compile(r"^CREATE TABLE (?:IF NOT EXISTS )?(\w+)")
_REFERENCE = re.compile(r"^(\s*(\w+)\s.*?)\s+REFERENCES (\w+)\((\w+)\)", re.M)
_IDENTITY = re.compile(r"^\s*(\w+)\s+INTEGER PRIMARY KEY\b", re.M)
_DROP_TABLE = re.compile(r"^DROP TABLE (\w+)$")
_RENAME_TABLE = re.compile(r"^ALTER TABLE (\w+) RENAME TO (\w+)$")


@dataclass
class _PgSchema:
    """What translating the migrations so far has declared: the references and the identity columns by table."""

    references: dict[str, list[ForeignKey]] = field(default_factory=dict)
    identities: dict[str, str] = field(default_factory=dict)

    def translate(self, statement: str) -> str:
        if index := _CREATE_INDEX.match(statement):
            return f"{index[1]}({', '.join(map(_sqlite_nulls, index[2].split(',')))})"
        if created := _CREATE_TABLE.match(statement):
            table = created[1]
            self.references[table] = [ForeignKey(table, m[2], m[3], m[4]) for m in _REFERENCE.finditer(statement)]
            if identity := _IDENTITY.search(statement):
                self.identities[table] = identity[1]
            statement = _REFERENCE.sub(r"\1", statement)
        elif dropped := _DROP_TABLE.match(statement):
            self.references.pop(dropped[1], None)
            self.identities.pop(dropped[1], None)
            return statement + " CASCADE"   # with the references to it, added again after the migration
        elif renamed := _RENAME_TABLE.match(statement):
            old, new = renamed[1], renamed[2]
            if old in self.references:
                self.references[new] = [ForeignKey(new, f.column, f.target, f.target_column)
                                        for f in self.references.pop(old)]
            if old in self.identities:
                self.identities[new] = self.identities.pop(old)
        for pattern, replacement in _PG_TYPES:
            statement = pattern.sub(replacement, statement)
        return statement

    def after(self) -> list[str]:
        """Statements that end a migration: identities continue after the ids a rebuild copied, and every
        reference the schema declares exists (added when missing, as a SQLite reference by name would be)."""
        out = [f"SELECT setval(pg_get_serial_sequence('{table}', '{column}'), COALESCE(MAX({column}), 0) + 1, false) "
               f"FROM {table}" for table, column in sorted(self.identities.items())]
        for table in sorted(self.references):
            for fk in self.references[table]:
                out.append(f"DO $$ BEGIN IF NOT EXISTS (SELECT 1 FROM pg_constraint WHERE conname = '{fk.name}' "
                           f"AND conrelid = '{fk.table}'::regclass) THEN "
                           f"ALTER TABLE {fk.table} ADD CONSTRAINT {fk.name} FOREIGN KEY ({fk.column}) "
                           f"REFERENCES {fk.target}({fk.target_column}); END IF; END $$")
        return out


def _sqlite_nulls(column: str) -> str:
    """An index column ordering NULLs as SQLite does (smaller than every value), so PostgreSQL reads a page sorted
    `DESC NULLS LAST` (or `ASC NULLS FIRST`) in index order, as SQLite does."""
    column = column.strip()
    return f"{column} NULLS LAST" if column.upper().endswith(" DESC") else f"{column} NULLS FIRST"


class PostgresDialect(Dialect):
    name = "postgresql"
    like = "ILIKE"   # as SQLite's LIKE: case-insensitive

    def sql(self, text: str) -> str:
        return _pg_placeholders(text)

    def json_array(self, column: str, alias: str) -> str:
        return f"json_array_elements_text(({column})::json) AS {alias}(value)"

    def json_objects(self, column: str, path: tuple[str, ...], alias: str) -> str:
        return f"json_array_elements(({column})::json #> '{{{','.join(path)}}}') AS {alias}(value)"

    def json_field(self, value: str, key: str) -> str:
        return f"({value} ->> '{key}')"

    def epoch(self, text: str) -> str:
        return f"CAST(FLOOR(EXTRACT(EPOCH FROM CAST({text} AS TIMESTAMPTZ))) AS BIGINT)"

    def group_concat(self, expr: str) -> str:
        return f"string_agg({expr}, ',')"

    def now(self) -> str:
        return "CAST(EXTRACT(EPOCH FROM clock_timestamp()) AS DOUBLE PRECISION)"

    def migrations(self) -> list[tuple[int, str, list[str]]]:
        return _postgres_migrations()


@cache
def _postgres_migrations() -> list[tuple[int, str, list[str]]]:
    schema = _PgSchema()
    out = []
    for version, description, sql in MIGRATIONS:
        translated = [schema.translate(s) for s in statements(sql)]
        out.append((version, description, translated + schema.after()))
    return out


@cache
def _pg_placeholders(text: str) -> str:
    return text.replace("%", "%%").replace("?", "%s")


SQLITE = SqliteDialect()
POSTGRES = PostgresDialect()


# -- connections ------------------------------------------------------------------------------------------------
class Database:
    """One connection to a results database with `?` placeholders on either kind; the driver's own errors
    (sqlite3.Error, psycopg.Error) pass through."""

    def __init__(self, raw: Any, dialect: Dialect, name: str) -> None:
        self.raw = raw
        self.dialect = dialect
        self.name = name   # for messages and pages: the file, or the DSN without its password

    def execute(self, sql: str, params: Sequence[Any] = ()) -> Any:
        return self.raw.execute(self.dialect.sql(sql), params)

    def executemany(self, sql: str, rows: Sequence[Sequence[Any]]) -> None:
        if rows:
            self.raw.cursor().executemany(self.dialect.sql(sql), rows)

    @contextmanager
    def transaction(self, begin: str = "BEGIN") -> Iterator[None]:
        self.raw.execute(begin)
        try:
            yield
        except BaseException:
            self.raw.execute("ROLLBACK")
            raise
        self.raw.execute("COMMIT")

    def write(self) -> Any:
        """A write transaction (on SQLite, holding the write lock from its start)."""
        return self.transaction("BEGIN IMMEDIATE" if self.dialect is SQLITE else "BEGIN")

    def snapshot(self) -> Any:
        """A read transaction: the queries inside see one state of the database."""
        return self.transaction("BEGIN" if self.dialect is SQLITE else
                                "BEGIN ISOLATION LEVEL REPEATABLE READ READ ONLY")

    def broken(self) -> bool:
        """A PostgreSQL connection that is closed, was lost, or (idle) has something unasked to read: the
        server's goodbye (a restart, a failover, an administrator ending it). Never true for SQLite."""
        if self.dialect is SQLITE:
            return False
        if self.raw.closed or self.raw.broken:
            return True
        readable, _, _ = select.select([self.raw.fileno()], [], [], 0)
        return bool(readable)

    def close(self) -> None:
        self.raw.close()


def redacted(dsn: str) -> str:
    """A PostgreSQL DSN without its password, for messages and pages."""
    try:
        from psycopg.conninfo import conninfo_to_dict
        parts = conninfo_to_dict(dsn)
    except ImportError:
        return re.sub(r"//([^:/@]*):[^@]*@", r"//\1@", dsn)
    except Exception:  # noqa: BLE001 - psycopg.ProgrammingError: the message would quote the password
        return "a PostgreSQL DSN that cannot be parsed"
    host = parts.get("host") or "localhost"
    port = f":{parts['port']}" if parts.get("port") else ""
    user = f"{quote(str(parts['user']), safe='')}@" if parts.get("user") else ""
    return f"postgresql://{user}{host}{port}/{quote(str(parts.get('dbname') or ''), safe='')}"


def connect_postgres(dsn: str, *, readonly: bool = False, application: str = "firstfault") -> Database:
    """A connection to a PostgreSQL results database (psycopg 3, the `postgres` extra); DatabaseError naming the
    server, never the password, when it cannot be had."""
    name = redacted(dsn)
    try:
        import psycopg
    except ImportError:
        raise DatabaseError(f"{name}: PostgreSQL needs psycopg 3: pip install 'firstfault[postgres]'") from None
    try:
        raw = psycopg.connect(dsn, autocommit=True, connect_timeout=10, application_name=application)
    except psycopg.Error as exc:
        raise DatabaseError(f"{name}: cannot connect ({_first_line(exc)})") from None
    if readonly:
        raw.execute("SET SESSION CHARACTERISTICS AS TRANSACTION READ ONLY")
    return Database(raw, POSTGRES, name)


def connect_sqlite(path: Path) -> sqlite3.Connection:
    """A writer's connection to a SQLite results database (created, WAL), not yet migrated."""
    path.parent.mkdir(parents=True, exist_ok=True)
    db = sqlite3.connect(path, isolation_level=None, timeout=30, check_same_thread=False)
    try:
        db.execute("PRAGMA journal_mode=WAL")
        db.execute("PRAGMA foreign_keys=ON")
        db.execute("PRAGMA synchronous=NORMAL")
    except BaseException:
        db.close()
        raise
    return db


def driver_errors() -> tuple[type[BaseException], ...]:
    """The errors of the database drivers that are installed."""
    try:
        import psycopg
    except ImportError:
        return (sqlite3.Error,)
    return (sqlite3.Error, psycopg.Error)


def _first_line(exc: BaseException) -> str:
    return (str(exc).strip().splitlines() or [exc.__class__.__name__])[0]


def open_results(target: str | Path) -> Database:
    """A writer's connection to the results database at `target` (a SQLite file, or a PostgreSQL DSN), created
    or migrated to this firstfault's schema; DatabaseError or SchemaError when it cannot be one."""
    if is_postgres(target):
        db = connect_postgres(str(target))
    else:
        path = Path(target).expanduser()
        try:
            db = Database(connect_sqlite(path), SQLITE, str(path))
        except (OSError, sqlite3.Error) as exc:
            raise DatabaseError(f"{path}: cannot be used as a results database ({exc})") from None
    try:
        migrate(db)
    except SchemaError:
        db.close()
        raise
    except (OSError, *driver_errors()) as exc:  # type: ignore[misc]
        db.close()
        raise DatabaseError(f"{db.name}: cannot be used as a results database ({_first_line(exc)})") from None
    return db


# -- migrations -------------------------------------------------------------------------------------------------
def migrate(db: Database) -> int:
    """Apply the migrations this database lacks, in one transaction; returns the schema version.

    SQLite: foreign keys are not enforced while they run (a table rebuild drops a table the others refer to) and
    are checked before the commit. PostgreSQL: one migrating driver at a time (an advisory lock), the others
    wait and find the work done."""
    if db.dialect is not SQLITE:
        with db.write():
            db.execute("SELECT pg_advisory_xact_lock(7146435)")   # any constant: firstfault's migrations
            _apply_migrations(db)
        return SCHEMA_VERSION
    enforced = db.execute("PRAGMA foreign_keys").fetchone()[0]
    db.execute("PRAGMA foreign_keys=OFF")
    try:
        with db.write():
            _apply_migrations(db)
            if db.execute("PRAGMA foreign_key_check").fetchone() is not None:
                raise SchemaError("migrating the database would break its references; it was left unchanged")
    finally:
        db.execute(f"PRAGMA foreign_keys={'ON' if enforced else 'OFF'}")
    return SCHEMA_VERSION


def _apply_migrations(db: Database) -> None:
    db.raw.execute(_PgSchema().translate(_MIGRATIONS_TABLE) if db.dialect is POSTGRES else _MIGRATIONS_TABLE)
    current = db.execute("SELECT COALESCE(MAX(version), 0) FROM schema_migrations").fetchone()[0]
    if current > SCHEMA_VERSION:
        raise SchemaError(f"{db.name}: the database has schema version {current}; this firstfault knows up to "
                          f"{SCHEMA_VERSION}: upgrade firstfault")
    for version, _description, migration in db.dialect.migrations():
        if version <= current:
            continue
        for statement in migration:
            db.raw.execute(statement)   # DDL as translated: no placeholders
        db.execute("INSERT INTO schema_migrations VALUES (?, ?, ?)", (version, _description, _now()))
        if db.dialect is SQLITE:
            db.execute(f"PRAGMA user_version = {version}")


def _now() -> str:
    return datetime.now(timezone.utc).isoformat()


def _iso(value: datetime | None) -> str | None:
    return value.isoformat() if value else None


# -- storing runs -----------------------------------------------------------------------------------------------
class ClaimLost(DatabaseError):
    """The driver's claim on an attempt ran out and another driver took it: this driver's run is not written."""


def storable(ctx: ExecutionContext) -> ExecutionContext:
    """The context, when its attempt number fits the database (64-bit integers)."""
    if ctx.attempt > MAX_ROW_ID:
        raise DatabaseError(f"workload {ctx.workload_id}: attempt {ctx.attempt} is beyond the largest the results "
                            f"database stores ({MAX_ROW_ID})")
    return ctx


def _upsert_attempt(db: Database, ctx: ExecutionContext) -> int:
    row = db.execute(
        """INSERT INTO workload_attempts (workload_id, attempt, scheduler, job_id, name, start_time, end_time,
               scheduler_state, exit_code, nodes_json, context_json, first_seen_at)
           VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)
           ON CONFLICT (workload_id, attempt) DO UPDATE SET scheduler = excluded.scheduler,
               job_id = excluded.job_id, name = excluded.name, start_time = excluded.start_time,
               end_time = excluded.end_time, scheduler_state = excluded.scheduler_state,
               exit_code = excluded.exit_code, nodes_json = excluded.nodes_json,
               context_json = excluded.context_json
           RETURNING id""",
        (ctx.workload_id, ctx.attempt, ctx.scheduler, ctx.job_id, ctx.name, _iso(ctx.start_time),
         _iso(ctx.end_time), ctx.scheduler_state, ctx.exit_code, json.dumps(ctx.nodes),
         ctx.model_dump_json(), _now())).fetchone()
    return int(row[0])


def run_nodes(result: AttributionBlueprintResult) -> set[tuple[str, str]]:
    """The (node, role) rows of a run: every allocated node, the culprits, the nodes with symptoms."""
    rows = {(node, "allocated") for node in result.context.nodes}
    if result.diagnosis is not None:
        rows |= {(c.node, "culprit") for c in result.diagnosis.culprit_nodes}
        rows |= {(s.node, "symptom") for s in result.diagnosis.symptoms if s.node}
    return rows


def store(db: Database, result: AttributionBlueprintResult, owner: str | None = None) -> int:
    """Write one attribution run (and its attempt row) in a single transaction; returns the run id. With an
    `owner`, the run is written only while that owner's claim on the attempt stands (ClaimLost otherwise), and
    the claim ends with the write."""
    d = result.diagnosis
    root = d.root_cause if d else None
    ctx = storable(result.context)
    with db.write():
        if owner is not None and db.execute(
                "DELETE FROM attempt_claims WHERE workload_id = ? AND attempt = ? AND owner = ?",
                (ctx.workload_id, ctx.attempt, owner)).rowcount != 1:
            raise ClaimLost(f"workload {ctx.workload_id} attempt {ctx.attempt}: this driver's claim ran out and "
                            "another driver took the attempt over; its result was not written (the other's is)")
        attempt_id = _upsert_attempt(db, ctx)
        run_id = int(db.execute(
            """INSERT INTO attribution_runs (attempt_id, attributed_at, status, error, mode, catalog_hash,
                   terminal_state, outcome, sub_domain, root_symptom, root_node, culprit_nodes_json,
                   failed_connectors, collect_s, attribute_s, total_s, connector_reports_json, result_json)
               VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?) RETURNING id""",
            (attempt_id, result.attributed_at.isoformat(), result.status(), result.error, result.mode,
             result.catalog_hash, d.terminal_state.value if d else None, d.outcome.value if d else None,
             d.sub_domain.value if d else None, root.symptom if root else None, root.node if root else None,
             json.dumps([c.node for c in d.culprit_nodes] if d else []), len(result.failed_connectors()),
             result.timings.collect_s, result.timings.attribute_s, result.timings.total_s,
             json.dumps([r.model_dump() for r in result.connector_reports]), result.model_dump_json())
        ).fetchone()[0])
        db.executemany("INSERT INTO run_nodes VALUES (?, ?, ?)",
                       [(run_id, node, role) for node, role in sorted(run_nodes(result))])
        db.executemany("INSERT INTO connector_reports VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
                       [(run_id, r.connector, r.kind, r.status, r.reason, r.observation_count, json.dumps(r.nodes),
                         r.seconds) for r in result.connector_reports])
        db.execute("UPDATE workload_attempts SET latest_run_id = ? WHERE id = ?", (run_id, attempt_id))
    return run_id


def latest_run(db: Database, ctx: ExecutionContext) -> tuple[int | None, str | None]:
    """(id, status) of the attempt's latest run; (None, None) when it has none."""
    row = db.execute(
        """SELECT a.latest_run_id, r.status FROM workload_attempts a LEFT JOIN attribution_runs r
           ON r.id = a.latest_run_id WHERE a.workload_id = ? AND a.attempt = ?""",
        (ctx.workload_id, storable(ctx).attempt)).fetchone()
    return (row[0], row[1]) if row else (None, None)


# -- node fault history ----------------------------------------------------------------------------------------
HISTORY_RUNS = 1000   # the most recent runs with a culprit on the workload's nodes read for one attempt


def node_history(db: Database, ctx: ExecutionContext, window: timedelta) -> NodeHistory:
    """The culprit findings of earlier attempts on `ctx`'s nodes (their latest runs), that began before it and
    within `window` of it (docs/blueprint.md, "Node fault history"): one finding per culprit and symptom, with the
    GPUs the culprit was blamed for and the line its root cause was cited on. An attempt without a start or end
    time cannot be placed: it gets the history of the `window` before now, and the engine counts what is before it."""
    reference = ctx.start_time or ctx.end_time or datetime.now(timezone.utc)
    since = reference - window
    rows = db.execute(
        f"""SELECT DISTINCT r.id, a.workload_id, a.attempt, a.start_time, a.end_time, r.result_json
            FROM run_nodes n JOIN attribution_runs r ON r.id = n.run_id
                 JOIN workload_attempts a ON a.latest_run_id = r.id
            WHERE n.role = 'culprit' AND n.node IN (SELECT j.value FROM {db.dialect.json_array('?', 'j')})
              AND NOT (a.workload_id = ? AND a.attempt = ?) AND COALESCE(a.end_time, a.start_time) >= ?
            ORDER BY r.id DESC LIMIT ?""",
        (json.dumps(ctx.nodes), ctx.workload_id, storable(ctx).attempt, since.isoformat(), HISTORY_RUNS)).fetchall()
    nodes = set(ctx.nodes)
    findings = [f for row in rows for f in _findings(row, nodes) if since <= f.time < reference]
    findings.sort(key=lambda f: (f.time, f.node, f.workload_id, f.attempt, f.symptom))
    return NodeHistory(window_days=max(1, round(window / timedelta(days=1))), findings=findings)


def _findings(row: Sequence[Any], nodes: set[str]) -> list[PriorFinding]:
    """The findings of one stored run: each culprit on one of `nodes`, once per symptom it was blamed for."""
    _run, workload_id, attempt, start, end, result_json = row
    diagnosis = json.loads(result_json).get("diagnosis") or {}
    root = diagnosis.get("root_cause") or {}
    views = {(s.get("node"), s.get("symptom")): s for s in diagnosis.get("symptoms", [])}
    findings = []
    for culprit in diagnosis.get("culprit_nodes", []):
        if culprit["node"] not in nodes:
            continue
        for symptom in culprit["symptoms"]:
            view = views.get((culprit["node"], symptom)) or {}
            time = view.get("first_time") or root.get("time") or end or start
            if time is None:
                continue
            cited = root.get("evidence") if root.get("symptom") == symptom else view.get("evidence")
            findings.append(PriorFinding.model_validate({
                "node": culprit["node"], "gpus": culprit.get("gpus", []), "symptom": symptom,
                "rule": view.get("rule") or root.get("rule") or "",
                "sub_domain": view.get("sub_domain") or root.get("sub_domain") or diagnosis["sub_domain"],
                "time": time, "workload_id": workload_id, "attempt": attempt,
                "evidence": (cited or [None])[0]}))
    return findings


# -- claims -----------------------------------------------------------------------------------------------------
def new_owner() -> str:
    """A claim owner unique to one output of one driver process: host, process, random."""
    return f"{socket.gethostname()}:{os.getpid()}:{uuid.uuid4().hex[:12]}"


def dead_here(owner: str) -> bool:
    """Whether a claim's owner was a process on this host that no longer runs (a driver that crashed and was
    restarted here: its claims need not wait for their lease). A reused process id reads as alive: safe."""
    host, _, rest = owner.partition(":")
    pid = rest.partition(":")[0]
    if host != socket.gethostname() or not pid.isdigit():
        return False
    try:
        os.kill(int(pid), 0)
    except ProcessLookupError:
        return True
    except OSError:   # alive, another user's
        return False
    return False


def claim(db: Database, ctx: ExecutionContext, owner: str, lease_s: float, seen_run: int | None) -> bool:
    """Claim the attempt for `lease_s` seconds: True when no other owner holds an unexpired claim on it (a dead
    process of this host holds none) and its latest run is still `seen_run` (what the driver saw when it decided
    to attribute it)."""
    now = db.dialect.now()
    key = (ctx.workload_id, storable(ctx).attempt)
    with db.write():
        taken = db.execute(
            f"""INSERT INTO attempt_claims (workload_id, attempt, owner, claimed_at, expires_at)
                VALUES (?, ?, ?, ?, {now} + ?)
                ON CONFLICT (workload_id, attempt) DO UPDATE SET owner = excluded.owner,
                    claimed_at = excluded.claimed_at, expires_at = excluded.expires_at
                WHERE attempt_claims.owner = excluded.owner OR attempt_claims.expires_at < {now}
                RETURNING owner""",
            (*key, owner, _now(), lease_s)).fetchone()
        if taken is None:
            holder = db.execute("SELECT owner FROM attempt_claims WHERE workload_id = ? AND attempt = ?",
                                key).fetchone()
            if holder is None or not dead_here(holder[0]) or db.execute(
                    f"""UPDATE attempt_claims SET owner = ?, claimed_at = ?, expires_at = {now} + ?
                        WHERE workload_id = ? AND attempt = ? AND owner = ?""",
                    (owner, _now(), lease_s, *key, holder[0])).rowcount != 1:
                return False
        if latest_run(db, ctx)[0] != seen_run:   # another driver wrote a run since: give the claim back
            release(db, ctx, owner)
            return False
    return True


def release(db: Database, ctx: ExecutionContext, owner: str) -> None:
    db.execute("DELETE FROM attempt_claims WHERE workload_id = ? AND attempt = ? AND owner = ?",
               (ctx.workload_id, ctx.attempt, owner))


def release_all(db: Database, owner: str) -> None:
    db.execute("DELETE FROM attempt_claims WHERE owner = ?", (owner,))


def renew(db: Database, owner: str, lease_s: float) -> int:
    """Extend every claim of `owner` by a lease from now; how many it holds."""
    return int(db.execute(f"UPDATE attempt_claims SET expires_at = {db.dialect.now()} + ? WHERE owner = ?",
                          (lease_s, owner)).rowcount)


class Heartbeat:
    """Renews an owner's claims every third of the lease, on a connection (and a daemon thread) of its own. A
    failed renewal is tried again at the next beat; a claim that runs out meanwhile is caught by `store`."""

    def __init__(self, connect: Any, owner: str, lease_s: float) -> None:
        self._connect = connect
        self.owner = owner
        self.lease_s = lease_s
        self.failures = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name=f"claims {owner}", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        db: Database | None = None
        while not self._stop.wait(self.lease_s / 3):
            try:
                db = db or self._connect()
                renew(db, self.owner, self.lease_s)
            except (OSError, DatabaseError, *driver_errors()):  # type: ignore[misc]
                self.failures += 1
                if db is not None:
                    db.close()
                db = None
        if db is not None:
            db.close()

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(timeout=5)
