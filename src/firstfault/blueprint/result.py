"""The Blueprint's results contract: `AttributionBlueprintResult` (what it writes for one workload attempt) and
the SQL schema it is stored in (`MIGRATIONS`, on SQLite and PostgreSQL: resultsdb.py). The dashboard reads results
through this module and resultsdb.py only."""

from __future__ import annotations

from datetime import datetime
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

from firstfault.engine import Attribution, ExecutionContext

RESULT_SCHEMA_VERSION = "1.0"
ReportStatus = Literal["ok", "empty", "error"]
# How an attribution run is stored: `ok`; `partial` (attributed, but evidence was lost or set aside: a collector
# failed, or the engine could not use a file or a line - the diagnosis's `coverage.issues` say what; a later run
# attributes it again) or `error` (not attributed at all).
RunStatus = Literal["ok", "partial", "error"]
# The largest row id (and integer) SQLite stores: a run id beyond it names no run.
MAX_ROW_ID = 2**63 - 1
Mode = Literal["embedded", "service"]


class ConnectorReport(BaseModel):
    """How one connector did for one workload: `ok` (delivered), `empty` (nothing in scope) or `error`."""

    model_config = ConfigDict(extra="forbid")

    connector: str
    kind: str
    status: ReportStatus
    reason: str = ""
    observation_count: int = 0
    nodes: list[str] = Field(default_factory=list)
    seconds: float = 0.0


class Timings(BaseModel):
    model_config = ConfigDict(extra="forbid")

    collect_s: float
    attribute_s: float
    total_s: float


class AttributionBlueprintResult(BaseModel):
    """The execution context, the engine's diagnosis, collector coverage, timings and the catalog hash.

    `diagnosis` is None (and `error` says why) when the workload could not be attributed at all.
    """

    model_config = ConfigDict(extra="forbid")

    schema_version: str = RESULT_SCHEMA_VERSION
    context: ExecutionContext
    diagnosis: Attribution | None
    error: str | None = None
    connector_reports: list[ConnectorReport]
    timings: Timings
    catalog_hash: str
    mode: Mode
    attributed_at: datetime

    def failed_connectors(self) -> list[ConnectorReport]:
        return [r for r in self.connector_reports if r.status == "error"]

    def status(self) -> RunStatus:
        if self.diagnosis is None:
            return "error"
        return "partial" if self.diagnosis.coverage.issues else "ok"


# The attempts with their latest run (a view every migration that rebuilds `attribution_runs` recreates).
_LATEST_VIEW = """
CREATE VIEW latest_attributions AS
SELECT a.id AS attempt_id, a.workload_id, a.attempt, a.scheduler, a.job_id, a.name, a.start_time, a.end_time,
       a.scheduler_state, a.exit_code, a.nodes_json, r.id AS run_id, r.attributed_at, r.status, r.error, r.mode,
       r.catalog_hash, r.terminal_state, r.outcome, r.sub_domain, r.root_symptom, r.root_node,
       r.culprit_nodes_json, r.failed_connectors, r.total_s
FROM workload_attempts a JOIN attribution_runs r ON r.id = a.latest_run_id;
"""

# The results database, versioned: each entry is (version, what it adds, SQL). `SCHEMA_VERSION` is the newest.
# Written in SQLite's SQL; PostgreSQL runs a translation of it (resultsdb.py: keep to the forms it translates and
# test both). On SQLite they run with foreign keys off (a table rebuild drops the table the others refer to).
MIGRATIONS: list[tuple[int, str, str]] = [
    (1, "workload attempts, attribution runs, run nodes, connector reports", """
CREATE TABLE workload_attempts (
    id               INTEGER PRIMARY KEY,
    workload_id      TEXT NOT NULL,
    attempt          INTEGER NOT NULL,
    scheduler        TEXT NOT NULL,
    job_id           TEXT NOT NULL,
    name             TEXT NOT NULL,
    start_time       TEXT,
    end_time         TEXT,
    scheduler_state  TEXT NOT NULL,
    exit_code        TEXT NOT NULL,
    nodes_json       TEXT NOT NULL,
    context_json     TEXT NOT NULL,
    first_seen_at    TEXT NOT NULL,
    latest_run_id    INTEGER REFERENCES attribution_runs(id),
    UNIQUE (workload_id, attempt)
);
CREATE INDEX workload_attempts_end ON workload_attempts(end_time);
CREATE INDEX workload_attempts_job ON workload_attempts(scheduler, job_id);

CREATE TABLE attribution_runs (
    id                      INTEGER PRIMARY KEY,
    attempt_id              INTEGER NOT NULL REFERENCES workload_attempts(id),
    attributed_at           TEXT NOT NULL,
    status                  TEXT NOT NULL CHECK (status IN ('ok', 'error')),
    error                   TEXT,
    mode                    TEXT NOT NULL,
    catalog_hash            TEXT NOT NULL,
    terminal_state          TEXT,
    outcome                 TEXT,
    sub_domain              TEXT,
    root_symptom            TEXT,
    root_node               TEXT,
    culprit_nodes_json      TEXT NOT NULL,
    failed_connectors       INTEGER NOT NULL,
    collect_s               REAL NOT NULL,
    attribute_s             REAL NOT NULL,
    total_s                 REAL NOT NULL,
    connector_reports_json  TEXT NOT NULL,
    result_json             TEXT NOT NULL
);
CREATE INDEX attribution_runs_attempt ON attribution_runs(attempt_id, id);
CREATE INDEX attribution_runs_time ON attribution_runs(attributed_at);
CREATE INDEX attribution_runs_outcome ON attribution_runs(outcome, attributed_at);
CREATE INDEX attribution_runs_sub_domain ON attribution_runs(sub_domain, attributed_at);

CREATE TABLE run_nodes (
    run_id   INTEGER NOT NULL REFERENCES attribution_runs(id),
    node     TEXT NOT NULL,
    role     TEXT NOT NULL CHECK (role IN ('allocated', 'culprit', 'symptom')),
    PRIMARY KEY (run_id, node, role)
) WITHOUT ROWID;
CREATE INDEX run_nodes_node ON run_nodes(node, role);

CREATE TABLE connector_reports (
    run_id             INTEGER NOT NULL REFERENCES attribution_runs(id),
    connector          TEXT NOT NULL,
    kind               TEXT NOT NULL,
    status             TEXT NOT NULL CHECK (status IN ('ok', 'empty', 'error')),
    reason             TEXT NOT NULL,
    observation_count  INTEGER NOT NULL,
    nodes_json         TEXT NOT NULL,
    seconds            REAL NOT NULL
);
CREATE INDEX connector_reports_run ON connector_reports(run_id);
CREATE INDEX connector_reports_status ON connector_reports(status, connector);

""" + _LATEST_VIEW),
    (2, "attribution runs may be `partial`: attributed while evidence was lost or set aside (attributed again)",
     """
DROP VIEW latest_attributions;
CREATE TABLE attribution_runs_v2 (
    id                      INTEGER PRIMARY KEY,
    attempt_id              INTEGER NOT NULL REFERENCES workload_attempts(id),
    attributed_at           TEXT NOT NULL,
    status                  TEXT NOT NULL CHECK (status IN ('ok', 'partial', 'error')),
    error                   TEXT,
    mode                    TEXT NOT NULL,
    catalog_hash            TEXT NOT NULL,
    terminal_state          TEXT,
    outcome                 TEXT,
    sub_domain              TEXT,
    root_symptom            TEXT,
    root_node               TEXT,
    culprit_nodes_json      TEXT NOT NULL,
    failed_connectors       INTEGER NOT NULL,
    collect_s               REAL NOT NULL,
    attribute_s             REAL NOT NULL,
    total_s                 REAL NOT NULL,
    connector_reports_json  TEXT NOT NULL,
    result_json             TEXT NOT NULL
);
INSERT INTO attribution_runs_v2 SELECT * FROM attribution_runs;
UPDATE attribution_runs_v2 SET status = 'partial' WHERE status = 'ok' AND (failed_connectors > 0
    OR json_array_length(result_json, '$.diagnosis.coverage.issues') > 0);
DROP TABLE attribution_runs;
ALTER TABLE attribution_runs_v2 RENAME TO attribution_runs;
CREATE INDEX attribution_runs_attempt ON attribution_runs(attempt_id, id);
CREATE INDEX attribution_runs_time ON attribution_runs(attributed_at);
CREATE INDEX attribution_runs_outcome ON attribution_runs(outcome, attributed_at);
CREATE INDEX attribution_runs_sub_domain ON attribution_runs(sub_domain, attributed_at);
""" + _LATEST_VIEW),
    (3, "claims on workload attempts, so several Blueprint drivers attribute each attempt once", """
CREATE TABLE attempt_claims (
    workload_id  TEXT NOT NULL,
    attempt      INTEGER NOT NULL,
    owner        TEXT NOT NULL,
    claimed_at   TEXT NOT NULL,
    expires_at   REAL NOT NULL,
    PRIMARY KEY (workload_id, attempt)
) WITHOUT ROWID;
CREATE INDEX attempt_claims_owner ON attempt_claims(owner);
"""),
    (4, "the output patterns of Slurm jobs seen while slurmctld held them (sacct before 24.05 has none)", """
CREATE TABLE slurm_job_output (
    job_id        TEXT NOT NULL,
    submit_time   TEXT NOT NULL,
    array_job_id  TEXT NOT NULL,
    user_name     TEXT NOT NULL,
    batch         INTEGER NOT NULL,
    batch_host    TEXT NOT NULL,
    stdout        TEXT NOT NULL,
    stderr        TEXT NOT NULL,
    seen_at       TEXT NOT NULL,
    PRIMARY KEY (job_id, submit_time)
) WITHOUT ROWID;
CREATE INDEX slurm_job_output_array ON slurm_job_output(array_job_id);
CREATE INDEX slurm_job_output_seen ON slurm_job_output(seen_at);
"""),
]
SCHEMA_VERSION = MIGRATIONS[-1][0]
