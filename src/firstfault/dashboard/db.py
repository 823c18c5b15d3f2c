"""The dashboard's read-only query layer over the Blueprint's results, in SQLite or PostgreSQL (docs/blueprint.md,
"Results database"); the few expressions that differ are the dialect's (blueprint/resultsdb.py).

A SQLite connection is opened with a `file:...?mode=ro` URI plus `PRAGMA query_only`, so nothing the dashboard
does can write the database, and a missing file is an error instead of a new empty database. A PostgreSQL
session is read-only (`SET SESSION CHARACTERISTICS AS TRANSACTION READ ONLY`; docs/operations.md also gives the
dashboard a role that may only read). Every value that comes from a request is a bound parameter; the only SQL
text chosen by a request is a column or a direction picked from the whitelists below.
"""

from __future__ import annotations

import functools
import json
import sqlite3
import threading
from collections import Counter
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any, Concatenate, ParamSpec, TypeVar
from urllib.parse import quote

from firstfault.blueprint.result import SCHEMA_VERSION
from firstfault.blueprint.resultsdb import POSTGRES, SQLITE, Database, connect_postgres, driver_errors, is_postgres
from firstfault.errors import ConfigError, DatabaseError

# What a list can be sorted by: the name used in URLs -> the SQL expression (never taken from the request).
SORT_COLUMNS: dict[str, str] = {
    "time": "a.end_time",
    "workload": "a.workload_id",
    "state": "r.terminal_state",
    "outcome": "r.outcome",
    "sub_domain": "r.sub_domain",
    "attributed": "r.attributed_at",
}
NODE_ROLES = ("allocated", "culprit", "symptom")
NOT_ATTRIBUTED = "not attributed"  # the outcome filter value selecting runs without a diagnosis
_REQUIRED_TABLES = {"workload_attempts", "attribution_runs", "run_nodes", "connector_reports", "schema_migrations"}


@dataclass(frozen=True)
class RepeatPolicy:
    """When a node is a repeat offender: the culprit of at least `workloads` distinct failed workloads (the
    attempts of one workload - a requeue, a retry - count once) whose ends fall within one `window`."""

    workloads: int = 3
    window: timedelta = timedelta(days=7)

    def __post_init__(self) -> None:
        if self.workloads < 2:
            raise ConfigError(f"a repeat offender is the culprit of at least 2 workloads (got {self.workloads})")
        if self.window <= timedelta(0):
            raise ConfigError("the repeat-offender window must be longer than zero")


@dataclass(frozen=True)
class RepeatOffence:
    """The densest window of a node's culprit record: how many distinct workloads it was blamed for in it, and
    when the first and the last of them ended."""

    workloads: int
    first: datetime
    last: datetime


def densest_window(events: list[tuple[datetime, str]], window: timedelta) -> RepeatOffence | None:
    """The window of length `window` holding the most distinct workloads of (end time, workload id) events
    (the latest such window on a tie); None without events."""
    ordered = sorted(events)
    inside: Counter[str] = Counter()
    best: RepeatOffence | None = None
    start = 0
    for end_time, workload in ordered:
        inside[workload] += 1
        while end_time - ordered[start][0] > window:
            gone = ordered[start][1]
            inside[gone] -= 1
            if not inside[gone]:
                del inside[gone]
            start += 1
        if best is None or len(inside) >= best.workloads:
            best = RepeatOffence(len(inside), ordered[start][0], end_time)
    return best


@dataclass(frozen=True)
class WorkloadFilters:
    """A validated workload query (see filters.py for how it is parsed from a request)."""

    terminal_state: str | None = None
    outcome: str | None = None
    sub_domain: str | None = None
    node: str | None = None
    role: str | None = None
    since: datetime | None = None
    until: datetime | None = None
    q: str | None = None
    failed: bool = False   # only failures (an outcome other than Pass)
    sort: str = "time"
    order: str = "desc"
    page: int = 1
    per_page: int = 50


@dataclass(frozen=True)
class WorkloadRow:
    attempt_id: int
    workload_id: str
    attempt: int
    name: str
    job_id: str
    scheduler: str
    start_time: str | None
    end_time: str | None
    scheduler_state: str
    exit_code: str
    run_id: int
    attributed_at: str
    status: str
    error: str | None
    terminal_state: str | None
    outcome: str | None
    sub_domain: str | None
    root_symptom: str | None
    root_node: str | None
    culprit_nodes: list[str]
    failed_connectors: int
    roles: tuple[str, ...] = ()  # on a node's page: how that node took part

    @property
    def href(self) -> str:
        return workload_href(self.workload_id, self.attempt)


@dataclass(frozen=True)
class Page:
    rows: list[WorkloadRow]
    total: int
    page: int
    per_page: int

    @property
    def pages(self) -> int:
        return max(1, -(-self.total // self.per_page))


@dataclass(frozen=True)
class RunSummary:
    run_id: int
    attributed_at: str
    status: str
    outcome: str | None
    sub_domain: str | None
    root_symptom: str | None
    root_node: str | None
    mode: str
    catalog_hash: str


@dataclass(frozen=True)
class AttemptDetail:
    row: WorkloadRow
    runs: list[RunSummary]
    result: dict[str, Any]
    result_json: str
    other_attempts: list[int]


@dataclass(frozen=True)
class Count:
    key: str
    count: int


@dataclass(frozen=True)
class NodeStats:
    node: str
    allocated: int
    culprit: int
    symptom: int
    culprit_by_sub_domain: list[Count]
    symptom_by_sub_domain: list[Count]
    culprit_root_symptoms: list[Count]
    last_culprit_time: str | None
    repeat: RepeatOffence | None = None   # set when the node is a repeat offender


@dataclass(frozen=True)
class NodeRank:
    node: str
    culprit: int
    symptom: int
    last_time: str | None
    sub_domains: list[Count] = field(default_factory=list)
    repeat: RepeatOffence | None = None   # set when the node is a repeat offender


@dataclass(frozen=True)
class CollectorHealth:
    kind: str
    connector: str
    ok: int
    empty: int
    error: int
    last_error: str | None
    last_error_workload: str | None
    last_error_attempt: int | None


@dataclass(frozen=True)
class Bucket:
    start: datetime
    counts: dict[str, int]


@dataclass(frozen=True)
class Overview:
    total: int
    failed: int
    not_attributed: int
    by_outcome: list[Count]
    by_sub_domain: list[Count]
    bucket_seconds: int
    buckets_outcome: list[Bucket]
    buckets_sub_domain: list[Bucket]
    top_culprits: list[NodeRank]
    culprit_nodes: int
    top_root_symptoms: list[Count]
    collectors: list[CollectorHealth]
    recent_failures: list[WorkloadRow]
    first_time: str | None
    last_time: str | None


@dataclass(frozen=True)
class DatabaseInfo:
    path: str
    schema_version: int
    attempts: int
    runs: int
    latest_attributed_at: str | None


def workload_href(workload_id: str, attempt: int | None = None, run_id: int | None = None) -> str:
    href = f"/workload?id={quote(workload_id, safe='')}"
    if attempt is not None:
        href += f"&attempt={attempt}"
    if run_id is not None:
        href += f"&run={run_id}"
    return href


def node_href(node: str) -> str:
    return f"/nodes/{quote(node, safe='')}"


def iso(value: datetime) -> str:
    """The text form the Blueprint stores times in (ISO 8601, UTC, `+00:00`), for comparisons in SQL."""
    return value.astimezone(UTC).isoformat()


def readonly_uri(path: Path) -> str:
    return f"file:{quote(str(path.resolve()))}?mode=ro"


def connect_readonly(path: Path) -> sqlite3.Connection:
    """A read-only connection: opening never creates the file, and any write fails."""
    db = sqlite3.connect(readonly_uri(path), uri=True, timeout=10, check_same_thread=False)
    db.execute("PRAGMA query_only = ON")
    return db


def open_readonly(target: str | Path) -> Database:
    """A read-only connection to a results database: a SQLite file, or a PostgreSQL DSN (`postgresql://...`)."""
    if is_postgres(target):
        return connect_postgres(str(target), readonly=True, application="firstfault dashboard")
    return Database(connect_readonly(Path(target)), SQLITE, str(target))


def check_database(target: str | Path) -> int:
    """Raise DatabaseError unless TARGET is a results database this firstfault can read; return its schema
    version."""
    if is_postgres(target):
        return _check_postgres(str(target))
    path = Path(target)
    if not path.exists():
        raise DatabaseError(f"{path}: no such file (write one with `firstfault blueprint ... --connector output db "
                            f"sqlite path {path}`, or run `firstfault quickstart`)")
    if not path.is_file():
        raise DatabaseError(f"{path}: not a file")
    try:
        db = connect_readonly(path)
    except sqlite3.Error as exc:
        raise DatabaseError(f"{path}: cannot open it read-only: {exc}") from None
    try:
        tables = {row[0] for row in db.execute("SELECT name FROM sqlite_master WHERE type IN ('table', 'view')")}
        missing = _REQUIRED_TABLES - tables
        if missing:
            raise DatabaseError(f"{path}: not a firstfault results database (no {', '.join(sorted(missing))} "
                                f"table)")
        version = db.execute("SELECT COALESCE(MAX(version), 0) FROM schema_migrations").fetchone()[0]
    except sqlite3.DatabaseError as exc:
        raise DatabaseError(f"{path}: not a SQLite database ({exc})") from None
    finally:
        db.close()
    return _readable_version(str(path), version)


def _check_postgres(dsn: str) -> int:
    db = open_readonly(dsn)
    try:
        tables = {row[0] for row in db.execute(
            "SELECT table_name FROM information_schema.tables WHERE table_schema = current_schema()")}
        missing = _REQUIRED_TABLES - tables
        if missing:
            raise DatabaseError(f"{db.name}: not a firstfault results database (no {', '.join(sorted(missing))} "
                                f"table that this role may read; write one with `firstfault blueprint ... "
                                f"--connector output db postgres dsn DSN`)")
        version = db.execute("SELECT COALESCE(MAX(version), 0) FROM schema_migrations").fetchone()[0]
    except driver_errors() as exc:
        raise DatabaseError(f"{db.name}: cannot read it ({str(exc).strip().splitlines()[0]})") from None
    finally:
        db.close()
    return _readable_version(db.name, version)


def _readable_version(name: str, version: int) -> int:
    if version > SCHEMA_VERSION:
        raise DatabaseError(f"{name}: written by a newer firstfault (schema version {version}; this one reads up to "
                            f"{SCHEMA_VERSION}): upgrade firstfault")
    if version < 1:
        raise DatabaseError(f"{name}: the results schema was never applied")
    return int(version)


_ROW_COLUMNS = """a.id, a.workload_id, a.attempt, a.name, a.job_id, a.scheduler, a.start_time, a.end_time,
    a.scheduler_state, a.exit_code, r.id, r.attributed_at, r.status, r.error, r.terminal_state, r.outcome,
    r.sub_domain, r.root_symptom, r.root_node, r.culprit_nodes_json, r.failed_connectors"""
# Each attempt with its latest run. On SQLite, `r.attempt_id = a.id` (implied by the first condition) is stated
# too, so that either table can lead the join through a primary key (workload_attempts.latest_run_id has no
# index). PostgreSQL's planner would multiply the two conditions into an estimate of one row and sort every
# attempt for a page; with the first alone it reads the page in index order.
_LATEST = {SQLITE.name: "workload_attempts a JOIN attribution_runs r ON r.id = a.latest_run_id AND a.id = r.attempt_id",
           POSTGRES.name: "workload_attempts a JOIN attribution_runs r ON r.id = a.latest_run_id"}
# the nodes (and the connector reports) of the latest run of each attempt
_NODES = ("run_nodes n JOIN attribution_runs r ON r.id = n.run_id "
          "JOIN workload_attempts a ON a.id = r.attempt_id AND a.latest_run_id = r.id")
# a failure: the latest run names an outcome other than Pass (node history and culprit counts read only these)
_FAILED = "r.outcome IS NOT NULL AND r.outcome != 'Pass'"
# how many of the reports are `ok`, `empty`, `error`
_STATUS_COUNTS = ", ".join(f"SUM(CASE WHEN c.status = '{status}' THEN 1 ELSE 0 END)" for status in ("ok", "empty", "error"))
_REPORTS = ("connector_reports c JOIN attribution_runs r ON r.id = c.run_id "
            "JOIN workload_attempts a ON a.id = r.attempt_id AND a.latest_run_id = r.id")


def _row(values: tuple[Any, ...], roles: tuple[str, ...] = ()) -> WorkloadRow:
    """A WorkloadRow from the columns of _ROW_COLUMNS, in order."""
    try:
        culprits = [str(n) for n in json.loads(values[19] or "[]")]
    except (ValueError, TypeError):
        culprits = []
    (attempt_id, workload_id, attempt, name, job_id, scheduler, start_time, end_time, scheduler_state, exit_code,
     run_id, attributed_at, status, error, terminal_state, outcome, sub_domain, root_symptom, root_node) = values[:19]
    return WorkloadRow(
        attempt_id=attempt_id, workload_id=workload_id, attempt=attempt, name=name, job_id=job_id,
        scheduler=scheduler, start_time=start_time, end_time=end_time, scheduler_state=scheduler_state,
        exit_code=exit_code, run_id=run_id, attributed_at=attributed_at, status=status, error=error,
        terminal_state=terminal_state, outcome=outcome, sub_domain=sub_domain, root_symptom=root_symptom,
        root_node=root_node, culprit_nodes=culprits, failed_connectors=int(values[20] or 0), roles=roles)


def _escape_like(text: str) -> str:
    return text.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_")


def _where(f: WorkloadFilters, like_op: str = "LIKE") -> tuple[str, list[Any]]:
    clauses: list[str] = []
    params: list[Any] = []
    if f.terminal_state:
        clauses.append("r.terminal_state = ?")
        params.append(f.terminal_state)
    if f.outcome == NOT_ATTRIBUTED:
        clauses.append("r.status = 'error'")
    elif f.outcome:
        clauses.append("r.outcome = ?")
        params.append(f.outcome)
    if f.sub_domain:
        clauses.append("r.sub_domain = ?")
        params.append(f.sub_domain)
    if f.node:
        if f.role:
            clauses.append("r.id IN (SELECT run_id FROM run_nodes WHERE node = ? AND role = ?)")
            params += [f.node, f.role]
        else:
            clauses.append("r.id IN (SELECT run_id FROM run_nodes WHERE node = ?)")
            params.append(f.node)
    if f.since:
        clauses.append("a.end_time >= ?")
        params.append(iso(f.since))
    if f.until:
        clauses.append("a.end_time < ?")
        params.append(iso(f.until))
    if f.failed:
        clauses.append(_FAILED)
    if f.q:
        like = f"%{_escape_like(f.q)}%"
        clauses.append("(" + " OR ".join(f"{column} {like_op} ? ESCAPE '\\'" for column in (
            "a.workload_id", "a.name", "a.job_id", "r.root_symptom", "r.root_node")) + ")")
        params += [like] * 5
    return (" WHERE " + " AND ".join(clauses)) if clauses else "", params


_P = ParamSpec("_P")
_R = TypeVar("_R")


def _reconnecting(read: Callable[Concatenate[ResultsDB, _P], _R]) -> Callable[Concatenate[ResultsDB, _P], _R]:
    """Run a read once more, on a new connection, when the server ended this thread's connection during it: the
    goodbye of a restart or a failover can arrive after `connection` checked and before the page's queries. Only
    reads are run again; a connection that is still sound re-raises the error."""
    @functools.wraps(read)
    def run(self: ResultsDB, /, *args: _P.args, **kwargs: _P.kwargs) -> _R:
        try:
            return read(self, *args, **kwargs)
        except driver_errors():
            db: Database | None = getattr(self._local, "db", None)
            if db is None or not db.broken():
                raise
            self._local.db = None
            db.close()
        return read(self, *args, **kwargs)
    return run


class ResultsDB:
    """Typed read-only queries. One connection per thread (FastAPI runs sync routes in a thread pool)."""

    def __init__(self, target: str | Path, repeat: RepeatPolicy | None = None) -> None:
        self.target = target
        self.repeat = repeat or RepeatPolicy()
        self.schema_version = check_database(target)
        db = open_readonly(target)
        self.name = db.name    # shown on every page: the file, or the DSN without its password
        self.sql = db.dialect
        self.latest = _LATEST[db.dialect.name]
        db.close()
        self._local = threading.local()
        self._cache: dict[str, tuple[int, Any]] = {}
        self._cache_lock = threading.Lock()

    # -- connections ------------------------------------------------------------------------------------
    @property
    def connection(self) -> Database:
        """This thread's read-only connection (tests use it to show that writes fail); a PostgreSQL connection
        that broke (the server restarted) is replaced."""
        db: Database | None = getattr(self._local, "db", None)
        if db is None or db.broken():
            db = open_readonly(self.target)
            self._local.db = db
        return db

    @contextmanager
    def _read(self) -> Iterator[Database]:
        """One consistent snapshot for the queries of one page (a read transaction; WAL never blocks it)."""
        db = self.connection
        with db.snapshot():
            yield db

    @_reconnecting
    def version(self) -> int:
        """Changes whenever the Blueprint writes a run (runs are only ever appended)."""
        row = self.connection.execute("SELECT COALESCE(MAX(id), 0) FROM attribution_runs").fetchone()
        return int(row[0])

    def _cached(self, key: str, compute: Any) -> Any:
        version = self.version()
        with self._cache_lock:
            hit = self._cache.get(key)
            if hit is not None and hit[0] == version:
                return hit[1]
        value = compute()
        with self._cache_lock:
            if len(self._cache) > 64:  # keys carry the minute for relative ranges: never let them pile up
                self._cache.clear()
            self._cache[key] = (version, value)
        return value

    # -- pages ------------------------------------------------------------------------------------------
    @_reconnecting
    def info(self) -> DatabaseInfo:
        def compute() -> DatabaseInfo:
            with self._read() as db:
                attempts = db.execute("SELECT COUNT(*) FROM workload_attempts").fetchone()[0]
                runs, latest = db.execute("SELECT COUNT(*), MAX(attributed_at) FROM attribution_runs").fetchone()
            return DatabaseInfo(self.name, self.schema_version, attempts, runs, latest)

        return self._cached("info", compute)  # type: ignore[no-any-return]

    @_reconnecting
    def workloads(self, f: WorkloadFilters) -> Page:
        """One page of attempts. Pages past the middle are read from the other end (a small OFFSET on the
        reversed order), so the last page of 100k rows costs what the first one does."""
        where, params = _where(f, self.sql.like)
        column = SORT_COLUMNS[f.sort]
        with self._read() as db:
            count_sql = (f"SELECT COUNT(*) FROM {self.latest}{where}" if where else
                         "SELECT COUNT(*) FROM workload_attempts WHERE latest_run_id IS NOT NULL")
            total = db.execute(count_sql, params).fetchone()[0]
            offset = (f.page - 1) * f.per_page
            limit = f.per_page
            descending = f.order != "asc"
            reverse = offset > total // 2 and offset < total
            if reverse:
                limit = min(f.per_page, total - offset)
                offset = max(0, total - offset - limit)
                descending = not descending
            direction = "DESC" if descending else "ASC"
            # NULLs stay last in the page order, so they come first when reading backwards
            nulls = "NULLS FIRST" if reverse else "NULLS LAST"
            rows = db.execute(
                f"SELECT {_ROW_COLUMNS} FROM {self.latest}{where} ORDER BY {column} {direction} {nulls}, "
                f"a.id {direction} LIMIT ? OFFSET ?", [*params, limit, offset]).fetchall()
        if reverse:
            rows.reverse()
        return Page([_row(r) for r in rows], total, f.page, f.per_page)

    @_reconnecting
    def attempt(self, workload_id: str, attempt: int | None = None, run_id: int | None = None) -> AttemptDetail | None:
        with self._read() as db:
            attempts = [r[0] for r in db.execute(
                "SELECT attempt FROM workload_attempts WHERE workload_id = ? ORDER BY attempt", (workload_id,))]
            if not attempts:
                return None
            if attempt is None:
                attempt = attempts[-1]
            elif attempt not in attempts:
                return None
            row = db.execute(f"SELECT {_ROW_COLUMNS} FROM {self.latest} WHERE a.workload_id = ? AND a.attempt = ?",
                             (workload_id, attempt)).fetchone()
            if row is None:
                return None
            runs = [RunSummary(*r) for r in db.execute(
                "SELECT id, attributed_at, status, outcome, sub_domain, root_symptom, root_node, mode, catalog_hash "
                "FROM attribution_runs WHERE attempt_id = ? ORDER BY id DESC", (row[0],))]
            chosen = run_id if run_id is not None else row[10]
            if chosen not in {r.run_id for r in runs}:
                return None
            if chosen != row[10]:
                row = db.execute(
                    f"SELECT {_ROW_COLUMNS} FROM workload_attempts a "
                    "JOIN attribution_runs r ON r.attempt_id = a.id WHERE r.id = ?", (chosen,)).fetchone()
            result_json = db.execute("SELECT result_json FROM attribution_runs WHERE id = ?", (chosen,)).fetchone()[0]
        try:
            result = json.loads(result_json)
        except ValueError:
            result = {}
        return AttemptDetail(_row(row), runs, result if isinstance(result, dict) else {}, result_json,
                             [a for a in attempts if a != attempt])

    @_reconnecting
    def run_json(self, run_id: int) -> tuple[str, str, int] | None:
        """(result JSON, workload id, attempt) of one run."""
        row = self.connection.execute(
            "SELECT r.result_json, a.workload_id, a.attempt FROM attribution_runs r "
            "JOIN workload_attempts a ON a.id = r.attempt_id WHERE r.id = ?", (run_id,)).fetchone()
        return (row[0], row[1], int(row[2])) if row else None

    @_reconnecting
    def node(self, node: str, page: int = 1, per_page: int = 50) -> tuple[NodeStats, Page] | None:
        repeat = self.repeat_offence(node)
        with self._read() as db:
            # every workload it ran; as culprit or with symptoms, only the failures
            counts = dict(db.execute(
                f"SELECT n.role, COUNT(*) FROM {_NODES} WHERE n.node = ? AND (n.role = 'allocated' OR {_FAILED}) "
                "GROUP BY n.role", (node,)).fetchall())
            if not counts:
                known = db.execute("SELECT 1 FROM run_nodes WHERE node = ? LIMIT 1", (node,)).fetchone()
                if known is None:
                    return None

            def by(role: str, column: str) -> list[Count]:
                return [Count(k or "", c) for k, c in db.execute(
                    f"SELECT {column}, COUNT(*) FROM {_NODES} "
                    f"WHERE n.node = ? AND n.role = ? AND {_FAILED} GROUP BY 1 ORDER BY 2 DESC, 1", (node, role))]

            last = db.execute(f"SELECT MAX(a.end_time) FROM {_NODES} "
                              f"WHERE n.node = ? AND n.role = 'culprit' AND {_FAILED}", (node,)).fetchone()[0]
            stats = NodeStats(node, counts.get("allocated", 0), counts.get("culprit", 0), counts.get("symptom", 0),
                              by("culprit", "r.sub_domain"), by("symptom", "r.sub_domain"),
                              by("culprit", "r.root_symptom"), last, repeat)
            involved = ("FROM " + _NODES + " "
                        f"WHERE n.node = ? AND n.role IN ('culprit', 'symptom') AND {_FAILED}")
            total = db.execute(f"SELECT COUNT(DISTINCT r.id) {involved}", (node,)).fetchone()[0]
            rows = db.execute(
                f"SELECT {_ROW_COLUMNS}, {self.sql.group_concat('n.role')} {involved} GROUP BY r.id, a.id "
                "ORDER BY a.end_time DESC NULLS LAST, a.id DESC LIMIT ? OFFSET ?",
                (node, per_page, (page - 1) * per_page)).fetchall()
        page_rows = [_row(r[:21], tuple(sorted(set(str(r[21]).split(","))))) for r in rows]
        return stats, Page(page_rows, total, page, per_page)

    @_reconnecting
    def repeat_offenders(self) -> dict[str, RepeatOffence]:
        """The repeat offenders under this database's RepeatPolicy, by node."""
        return self._cached("repeat", self._offences)  # type: ignore[no-any-return]

    @_reconnecting
    def repeat_offence(self, node: str) -> RepeatOffence | None:
        """One node's RepeatOffence when it is a repeat offender (through the node index: a node page stays cheap)."""
        return self._offences(node).get(node)

    def _offences(self, node: str | None = None) -> dict[str, RepeatOffence]:
        """The repeat offenders among every node, or one node."""
        events: dict[str, list[tuple[datetime, str]]] = {}
        only, params = (" AND n.node = ?", (node,)) if node is not None else ("", ())
        with self._read() as db:
            for culprit, workload, end in db.execute(
                    f"SELECT n.node, a.workload_id, a.end_time FROM {_NODES} WHERE n.role = 'culprit'{only} AND "
                    f"{_FAILED} AND a.end_time IS NOT NULL", params):
                try:
                    ended = datetime.fromisoformat(end)
                except (TypeError, ValueError):   # a time the Blueprint did not write: not placed in a window
                    continue
                ended = ended if ended.tzinfo else ended.replace(tzinfo=UTC)
                events.setdefault(str(culprit), []).append((ended, str(workload)))
        found = {n: densest_window(e, self.repeat.window) for n, e in events.items()}
        return {n: o for n, o in found.items() if o is not None and o.workloads >= self.repeat.workloads}

    @_reconnecting
    def node_ranking(self, q: str | None = None, limit: int = 200) -> list[NodeRank]:
        """Nodes that were a culprit or showed symptoms in failed workloads, most often blamed first."""
        def compute() -> list[NodeRank]:
            counts: dict[str, list[Any]] = {}
            with self._read() as db:
                for node, count, when in db.execute(
                        f"SELECT j.value, COUNT(*), MAX(a.end_time) FROM {self.latest}, "
                        f"{self.sql.json_array('r.culprit_nodes_json', 'j')} "
                        f"WHERE r.culprit_nodes_json != '[]' AND {_FAILED} GROUP BY 1"):
                    counts[str(node)] = [count, 0, when]
                for node, count, when in db.execute(
                        f"SELECT n.node, COUNT(*), MAX(a.end_time) FROM {_NODES} WHERE n.role = 'symptom' AND {_FAILED} "
                        "GROUP BY 1"):
                    entry = counts.setdefault(str(node), [0, 0, None])
                    entry[1] = count
                    entry[2] = max(filter(None, (entry[2], when)), default=None)
            ranked = sorted(counts.items(), key=lambda kv: (-kv[1][0], -kv[1][1], kv[0]))
            offenders = self.repeat_offenders()
            return [NodeRank(n, c, s, t, repeat=offenders.get(n)) for n, (c, s, t) in ranked]

        ranking: list[NodeRank] = self._cached("node_ranking", compute)
        if q:
            ranking = [r for r in ranking if q.lower() in r.node.lower()]
        return ranking[:limit]

    @_reconnecting
    def overview(self, since: datetime | None, max_buckets: int = 40) -> Overview:
        return self._cached(f"overview:{since.isoformat() if since else ''}",  # type: ignore[no-any-return]
                            lambda: self._overview(since, max_buckets))

    def _overview(self, since: datetime | None, max_buckets: int) -> Overview:
        where, params = ("WHERE a.end_time >= ?", [iso(since)]) if since else ("", [])
        also = " AND" if where else " WHERE"
        offenders = self.repeat_offenders()
        with self._read() as db:
            first, last = db.execute(
                "SELECT MIN(end_time), MAX(end_time) FROM workload_attempts WHERE latest_run_id IS NOT NULL"
                + (" AND end_time >= ?" if since else ""), params).fetchone()
            seconds = bucket_seconds(first, last, since, max_buckets)
            # one pass over the latest runs: totals, outcomes, sub-domains and both time series
            total = failed = not_attributed = 0
            by_outcome: dict[str, int] = {}
            by_sub: dict[str, int] = {}
            series: dict[str, dict[int, dict[str, int]]] = {"outcome": {}, "sub_domain": {}}
            for bucket, outcome, sub, status, count in db.execute(
                    f"SELECT {self.sql.epoch('a.end_time')} / ?, r.outcome, r.sub_domain, r.status, "
                    f"COUNT(*) FROM {self.latest} {where} GROUP BY 1, 2, 3, 4", [seconds, *params]):
                outcome, sub = outcome or NOT_ATTRIBUTED, sub or NOT_ATTRIBUTED
                total += count
                failed += count if outcome not in ("Pass", NOT_ATTRIBUTED) else 0
                not_attributed += count if status == "error" else 0
                by_outcome[outcome] = by_outcome.get(outcome, 0) + count
                by_sub[sub] = by_sub.get(sub, 0) + count
                if bucket is not None:
                    for column, key in (("outcome", outcome), ("sub_domain", sub)):
                        counts = series[column].setdefault(int(bucket), {})
                        counts[key] = counts.get(key, 0) + count
            # culprits from the runs' culprit lists (cheaper than the node table, which also holds allocations)
            blamed: dict[str, dict[str, int]] = {}
            last_blamed: dict[str, str] = {}
            for node, sub, count, when in db.execute(
                    f"SELECT j.value, r.sub_domain, COUNT(*), MAX(a.end_time) FROM {self.latest}, "
                    f"{self.sql.json_array('r.culprit_nodes_json', 'j')} {where}{also} r.culprit_nodes_json != '[]' AND {_FAILED} "
                    "GROUP BY 1, 2", params):
                blamed.setdefault(str(node), {})[sub or ""] = count
                last_blamed[str(node)] = max(last_blamed.get(str(node), ""), when or "")
            ranked = sorted(blamed, key=lambda n: (-sum(blamed[n].values()), -_epoch(last_blamed[n]), n))
            top_culprits = [NodeRank(n, sum(blamed[n].values()), 0, last_blamed[n] or None,
                                     [Count(k, c) for k, c in sorted(blamed[n].items(), key=lambda kv: -kv[1])],
                                     offenders.get(n))
                            for n in ranked[:10]]
            top_roots = [Count(k, c) for k, c in db.execute(
                f"SELECT r.root_symptom, COUNT(*) FROM {self.latest} {where}{also} r.root_symptom IS NOT NULL "
                "GROUP BY 1 ORDER BY 2 DESC, 1 LIMIT 10", params)]
            collectors = []
            for kind, connector, ok, empty, error in db.execute(
                    f"SELECT c.kind, c.connector, {_STATUS_COUNTS} FROM {_REPORTS} {where} "
                    "GROUP BY 1, 2 ORDER BY 5 DESC, 1, 2", params):
                last_error = db.execute(
                    f"SELECT c.reason, a.workload_id, a.attempt FROM {_REPORTS} WHERE c.status = 'error' AND "
                    f"c.connector = ? AND c.kind = ? {'AND a.end_time >= ?' if since else ''} "
                    "ORDER BY r.attributed_at DESC LIMIT 1", [connector, kind, *params]).fetchone() if error else None
                collectors.append(CollectorHealth(kind, connector, ok, empty, error,
                                                  *(last_error or (None, None, None))))
            recent = [_row(r) for r in db.execute(
                f"SELECT {_ROW_COLUMNS} FROM {self.latest} {where}{also} (r.outcome IS NULL OR r.outcome != 'Pass') "
                "ORDER BY a.end_time DESC NULLS LAST, a.id DESC LIMIT 8", params)]
        return Overview(
            total=total, failed=failed, not_attributed=not_attributed,
            by_outcome=[Count(k, c) for k, c in sorted(by_outcome.items(), key=lambda kv: (-kv[1], kv[0]))],
            by_sub_domain=[Count(k, c) for k, c in sorted(by_sub.items(), key=lambda kv: (-kv[1], kv[0]))],
            bucket_seconds=seconds, buckets_outcome=_buckets(series["outcome"], seconds),
            buckets_sub_domain=_buckets(series["sub_domain"], seconds), top_culprits=top_culprits,
            culprit_nodes=len(blamed), top_root_symptoms=top_roots, collectors=collectors, recent_failures=recent,
            first_time=first, last_time=last)

    @_reconnecting
    def rule_counts(self, sample: int = 20_000) -> tuple[dict[str, int], int, int]:
        """How many of the latest attributions each rule took part in (extracted lines, produced or demoted a
        symptom, or left another trace entry), over the `sample` most recent ones: (counts, attributions counted,
        attributions in all)."""
        return self._cached(f"rules:{sample}", lambda: self._rule_counts(sample))  # type: ignore[no-any-return]

    def _rule_counts(self, sample: int) -> tuple[dict[str, int], int, int]:
        sql = self.sql
        with self._read() as db:
            total = db.execute(f"SELECT COUNT(*) FROM {self.latest} WHERE r.status != 'error'").fetchone()[0]
            rows = db.execute(
                f"""WITH recent AS (SELECT r.id, r.result_json FROM {self.latest} WHERE r.status != 'error'
                                    ORDER BY r.attributed_at DESC LIMIT ?)
                SELECT name, COUNT(DISTINCT id) FROM (
                    SELECT recent.id, {sql.json_field('t.value', 'rule')} AS name
                      FROM recent, {sql.json_objects('recent.result_json', ('diagnosis', 'trace'), 't')}
                    UNION ALL
                    SELECT recent.id, {sql.json_field('s.value', 'rule')}
                      FROM recent, {sql.json_objects('recent.result_json', ('diagnosis', 'symptoms'), 's')}
                    UNION ALL
                    SELECT recent.id, {sql.json_field('s.value', 'demoted_by')}
                      FROM recent, {sql.json_objects('recent.result_json', ('diagnosis', 'symptoms'), 's')}) AS used
                WHERE name IS NOT NULL GROUP BY name""", (sample,)).fetchall()
        return {name: int(count) for name, count in rows}, min(total, sample), total


    @_reconnecting
    def root_symptoms(self) -> list[tuple[str, int]]:
        """How often each symptom was the root cause in the latest attributions."""
        def compute() -> list[tuple[str, int]]:
            with self._read() as db:
                return [(str(k), int(c)) for k, c in db.execute(
                    f"SELECT r.root_symptom, COUNT(*) FROM {self.latest} WHERE r.root_symptom IS NOT NULL "
                    "GROUP BY 1 ORDER BY 2 DESC, 1")]

        return self._cached("root_symptoms", compute)  # type: ignore[no-any-return]


def _epoch(text: str) -> float:
    if not text:
        return 0.0
    try:
        return datetime.fromisoformat(text).timestamp()
    except ValueError:
        return 0.0


def bucket_seconds(first: str | None, last: str | None, since: datetime | None, max_buckets: int) -> int:
    """The chart's bucket width: the smallest of hour, 6 h, day, week, 30 days giving at most max_buckets bars."""
    start = datetime.fromisoformat(first) if first else None
    end = datetime.fromisoformat(last) if last else None
    if since is not None:
        start = since
        end = max(end or since, datetime.now(UTC))
    span = (end - start).total_seconds() if start and end else 0
    for width in (3600, 6 * 3600, 86400, 7 * 86400, 30 * 86400):
        if span / width <= max_buckets:
            return width
    return 86400 * -(-int(span) // (max_buckets * 86400))


def _buckets(series: dict[int, dict[str, int]], seconds: int) -> list[Bucket]:
    """Fill the gaps so the chart shows empty periods as empty bars."""
    if not series:
        return []
    first, last = min(series), max(series)
    return [Bucket(datetime.fromtimestamp(b * seconds, UTC), series.get(b, {}))
            for b in range(first, last + 1)]


def since_for(range_name: str, now: datetime | None = None) -> datetime | None:
    """The start of a named range ending now, to the minute (so a page reloaded within a minute is cached)."""
    now = (now or datetime.now(UTC)).replace(second=0, microsecond=0)
    return {"24h": now - timedelta(hours=24), "7d": now - timedelta(days=7), "30d": now - timedelta(days=30),
            "90d": now - timedelta(days=90)}.get(range_name)
