"""Alertmanager output: infrastructure faults become alerts (Alertmanager API v2, `POST /api/v2/alerts`), and
are resolved when a later run clears them. docs/blueprint.md ("output alertmanager") documents it.

What raises an alert is in `alerts.py`. What clears one, both from the latest attributed run of each attempt:

- a rerun of the same workload attempt whose diagnosis no longer raises it (the alert resolves once no attempt
  raises it any more);
- with `clear_on_pass` (on by default), a workload on that node whose diagnosis is `Pass` and that started after
  the faulty attempt ended: the node has run a workload to completion since.

The state this needs is kept in a small SQLite file (`state`), so it survives restarts and the answer depends
only on the results seen, not on the order they came in (a clean workload seen before an older fault still
clears it). It holds the faults still standing, each node's latest clean start, and what Alertmanager has been
told or is still owed. It stays bounded: cleared faults and delivered resolutions are deleted.

A firing alert is sent with `endsAt` `expire` ahead and re-sent every `resend`, so it stays active while the
Blueprint runs and expires on its own if it stops for good; a resolution is sent with `endsAt` the time it was
resolved. A delivery that fails (after its retries) is reported as the output's problem, kept in the state, and
sent again at the next write or at the end of the pass (`flush`); the stored results are never affected.
"""

from __future__ import annotations

import json
import os
import sqlite3
import time
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any

from firstfault.blueprint.config import ConnectorSpec
from firstfault.blueprint.http import auth_headers
from firstfault.blueprint.options import LabelOptions, option, parse_options
from firstfault.blueprint.outputs.alerts import Fault, faults, is_clean, parse_labels
from firstfault.blueprint.outputs.delivery import DeliveryOptions, Sender, check_delivery, check_url
from firstfault.blueprint.result import AttributionBlueprintResult
from firstfault.engine import ExecutionContext
from firstfault.errors import ConfigError, OutputError, SchemaError

STATE_VERSION = 1
_STATE_SQL = """
CREATE TABLE IF NOT EXISTS faults (
    workload_id      TEXT NOT NULL,
    attempt          INTEGER NOT NULL,
    fingerprint      TEXT NOT NULL,
    node             TEXT NOT NULL,
    labels_json      TEXT NOT NULL,
    annotations_json TEXT NOT NULL,
    generator_url    TEXT NOT NULL,
    began            TEXT NOT NULL,
    ended            TEXT NOT NULL,
    PRIMARY KEY (workload_id, attempt, fingerprint)
);
CREATE INDEX IF NOT EXISTS faults_fingerprint ON faults(fingerprint);
CREATE INDEX IF NOT EXISTS faults_node ON faults(node);
CREATE TABLE IF NOT EXISTS clean_nodes (
    node        TEXT PRIMARY KEY,
    started     TEXT NOT NULL,
    workload_id TEXT NOT NULL,
    attempt     INTEGER NOT NULL
);
CREATE TABLE IF NOT EXISTS alerts (
    fingerprint      TEXT PRIMARY KEY,
    node             TEXT NOT NULL,
    labels_json      TEXT NOT NULL,
    annotations_json TEXT NOT NULL,
    generator_url    TEXT NOT NULL,
    starts_at        TEXT NOT NULL,
    resolved_at      TEXT,
    pending          INTEGER NOT NULL,
    sent_at          TEXT,
    last_error       TEXT
);
CREATE INDEX IF NOT EXISTS alerts_node ON alerts(node)
"""


def stamp(value: datetime) -> str:
    """A fixed-width UTC RFC 3339 time: sorts as text in time order, and is what Alertmanager reads."""
    return value.astimezone(timezone.utc).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def default_state_path() -> Path:
    base = os.environ.get("XDG_STATE_HOME") or str(Path.home() / ".local" / "state")
    return Path(base) / "firstfault" / "alertmanager.db"


@dataclass
class AlertState:
    """The durable state of the output (module docstring). Every change is one transaction."""

    db: sqlite3.Connection

    @classmethod
    def open(cls, path: Path) -> AlertState:
        path.parent.mkdir(parents=True, exist_ok=True)
        db = sqlite3.connect(path, isolation_level=None, timeout=30)
        version = db.execute("PRAGMA user_version").fetchone()[0]
        if version > STATE_VERSION:
            db.close()
            raise SchemaError(f"{path}: alert state version {version}; this firstfault knows up to "
                              f"{STATE_VERSION}: upgrade firstfault")
        db.execute("PRAGMA journal_mode=WAL")
        for statement in _STATE_SQL.split(";"):
            db.execute(statement)
        db.execute(f"PRAGMA user_version = {STATE_VERSION}")
        return cls(db)

    def record(self, result: AttributionBlueprintResult, raised: list[Fault], clean: bool, now: datetime) -> None:
        """Replace what this attempt said with what its latest run says, then settle every alert it touches."""
        ctx = result.context
        ended = stamp(ctx.end_time or result.attributed_at)
        with self._transaction():
            touched = {row[0] for row in self.db.execute(
                "SELECT fingerprint FROM faults WHERE workload_id = ? AND attempt = ?", (ctx.workload_id, ctx.attempt))}
            self.db.execute("DELETE FROM faults WHERE workload_id = ? AND attempt = ?", (ctx.workload_id, ctx.attempt))
            self.db.executemany(
                "INSERT OR REPLACE INTO faults VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)",
                [(ctx.workload_id, ctx.attempt, f.fingerprint, f.node, json.dumps(f.labels, sort_keys=True),
                  json.dumps(f.annotations, sort_keys=True), f.generator_url, stamp(f.began), ended) for f in raised])
            touched |= {f.fingerprint for f in raised}
            if clean:
                touched |= self._mark_clean(ctx, stamp(ctx.start_time or ctx.end_time or result.attributed_at))
            for fingerprint in sorted(touched):
                self._settle(fingerprint, stamp(now))

    @contextmanager
    def _transaction(self) -> Iterator[None]:
        self.db.execute("BEGIN IMMEDIATE")
        try:
            yield
        except BaseException:
            self.db.execute("ROLLBACK")
            raise
        self.db.execute("COMMIT")

    def _mark_clean(self, ctx: ExecutionContext, started: str) -> set[str]:
        """Each node's latest clean start; returns the alerts and faults on the nodes whose mark moved."""
        moved = []
        for node in ctx.nodes:
            row = self.db.execute("SELECT started FROM clean_nodes WHERE node = ?", (node,)).fetchone()
            if row is None or row[0] < started:
                self.db.execute("INSERT OR REPLACE INTO clean_nodes VALUES (?, ?, ?, ?)",
                                (node, started, ctx.workload_id, ctx.attempt))
                moved.append(node)
        touched: set[str] = set()
        for node in moved:
            touched |= {r[0] for r in self.db.execute("SELECT fingerprint FROM faults WHERE node = ? UNION "
                                                      "SELECT fingerprint FROM alerts WHERE node = ?", (node, node))}
        return touched

    def _settle(self, fingerprint: str, now: str) -> None:
        """Bring one alert to what the faults say: firing while a fault raising it ended after the node's latest
        clean start, resolved (at `now`) otherwise. Faults a clean run has cleared are deleted."""
        alert = self.db.execute("SELECT node, annotations_json, generator_url, starts_at, resolved_at FROM alerts "
                                "WHERE fingerprint = ?", (fingerprint,)).fetchone()
        any_fault = self.db.execute("SELECT node FROM faults WHERE fingerprint = ? LIMIT 1", (fingerprint,)).fetchone()
        node = any_fault[0] if any_fault else alert[0] if alert else None
        if node is None:
            return
        clean = self.db.execute("SELECT started FROM clean_nodes WHERE node = ?", (node,)).fetchone()
        if clean is not None:
            self.db.execute("DELETE FROM faults WHERE fingerprint = ? AND ended <= ?", (fingerprint, clean[0]))
        standing = self.db.execute(
            "SELECT labels_json, annotations_json, generator_url, began FROM faults WHERE fingerprint = ? "
            "ORDER BY ended DESC, workload_id DESC, attempt DESC", (fingerprint,)).fetchall()
        if standing:
            labels, annotations, url = standing[0][:3]
            starts = min(row[3] for row in standing)
            if alert is None or alert[4] is not None or (alert[1], alert[2], alert[3]) != (annotations, url, starts):
                self.db.execute("INSERT OR REPLACE INTO alerts VALUES (?, ?, ?, ?, ?, ?, NULL, 1, NULL, NULL)",
                                (fingerprint, node, labels, annotations, url, starts))
        elif alert is not None and alert[4] is None:
            self.db.execute("UPDATE alerts SET resolved_at = ?, pending = 1 WHERE fingerprint = ?", (now, fingerprint))

    def due(self, now: datetime, resend: timedelta) -> list[dict[str, Any]]:
        """The alerts to send now: every change not delivered yet, and firing alerts last sent `resend` ago."""
        rows = self.db.execute(
            "SELECT fingerprint, labels_json, annotations_json, generator_url, starts_at, resolved_at FROM alerts "
            "WHERE pending = 1 OR (resolved_at IS NULL AND (sent_at IS NULL OR sent_at <= ?)) ORDER BY fingerprint",
            (stamp(now - resend),)).fetchall()
        return [{"fingerprint": r[0], "labels": json.loads(r[1]), "annotations": json.loads(r[2]),
                 "generatorURL": r[3], "startsAt": r[4], "resolvedAt": r[5]} for r in rows]

    def delivered(self, fingerprints: Iterable[str], now: datetime) -> None:
        """Sent: firing alerts are marked sent; resolutions are done with and deleted."""
        keys = [(f,) for f in fingerprints]
        with self._transaction():
            self.db.executemany("DELETE FROM alerts WHERE fingerprint = ? AND resolved_at IS NOT NULL", keys)
            self.db.executemany("UPDATE alerts SET pending = 0, sent_at = ?, last_error = NULL WHERE fingerprint = ?",
                                [(stamp(now), f) for (f,) in keys])

    def failed(self, fingerprints: Iterable[str], error: str) -> None:
        with self._transaction():
            self.db.executemany("UPDATE alerts SET pending = 1, last_error = ? WHERE fingerprint = ?",
                                [(error, f) for f in fingerprints])

    def close(self) -> None:
        self.db.close()


@dataclass(frozen=True)
class AlertmanagerOptions(DeliveryOptions, LabelOptions):
    url: str | None = option(None, "Alertmanager's base URL; alerts are posted to URL`/api/v2/alerts`",
                             required=True)
    state: str | None = option(None, "the SQLite file holding the faults still standing and what Alertmanager "
                                     "was told (created on open; keep it on persistent storage)",
                               shown="`$XDG_STATE_HOME/firstfault/alertmanager.db`")
    labels: tuple[str, ...] = option((), "extra labels on every alert, `key=value` (e.g. `cluster=prod-a`), to "
                                         "route on", split=True)
    severity: str = option("critical", "the `severity` label")
    dashboard_url: str | None = option(None, "the dashboard's base URL: each alert's `generatorURL` links to its "
                                             "workload page")
    expire: timedelta = option(timedelta(hours=24), "a firing alert is sent with `endsAt` this far ahead (it "
                                                    "resolves on its own if the Blueprint stops re-sending it)")
    resend: timedelta = option(timedelta(hours=1), "firing alerts are sent again when last sent this long ago")
    clear_on_pass: bool = option(True, "a workload that passes on a node resolves the node's alerts from faults "
                                       "that ended before it started")
    token: str | None = option(None, "bearer token (an authenticating proxy in front of Alertmanager)")
    tenant: str | None = option(None, "sent as `X-Scope-OrgID` (Mimir's or Cortex's multi-tenant Alertmanager)")


class AlertmanagerOutput:
    kind = "output"
    Options = AlertmanagerOptions

    def __init__(self, spec: ConnectorSpec) -> None:
        options = parse_options(AlertmanagerOptions, spec)
        where = f"output {spec.name}"
        check_delivery(options, where)
        assert options.url is not None   # required
        if options.resend >= options.expire:
            raise ConfigError(f"{where}: option `resend` must be shorter than `expire`, or alerts lapse between sends")
        self.label = options.label or spec.name
        self.endpoint = check_url(options.url, where) + "/api/v2/alerts"
        self.extra = parse_labels(options.labels, where)
        self.options = options
        self.state_path = Path(options.state).expanduser() if options.state else default_state_path()
        self.headers = {"Content-Type": "application/json", **auth_headers(options.token, options.tenant)}
        self.sender = Sender.of(options)
        try:
            self.state = AlertState.open(self.state_path)
        except (OSError, sqlite3.Error) as exc:
            raise ConfigError(f"{where}: cannot use {self.state_path} as the alert state file: {exc}") from None
        self._quiet_until = 0.0   # after a failed delivery, writes only queue until then; flush always tries

    def already_attributed(self, ctx: ExecutionContext) -> bool:
        return False   # the results outputs say what was attributed; this one only reacts to new runs

    def write(self, result: AttributionBlueprintResult) -> None:
        if result.diagnosis is not None:   # a run that failed to attribute clears nothing and raises nothing
            raised = faults(result, severity=self.options.severity, extra=self.extra,
                            dashboard_url=self.options.dashboard_url)
            clean = self.options.clear_on_pass and is_clean(result.diagnosis)
            self.state.record(result, raised, clean, datetime.now(timezone.utc))
        if time.monotonic() >= self._quiet_until:
            self.deliver()

    def flush(self) -> None:
        """At the end of a pass: deliver what is owed (failed before, or due to be re-sent)."""
        self.deliver()

    def deliver(self) -> None:
        now = datetime.now(timezone.utc)
        due = self.state.due(now, self.options.resend)
        if not due:
            return
        body = json.dumps([self._postable(alert, now) for alert in due]).encode()
        delivery = self.sender.post(self.endpoint, body, lambda: self.headers)
        fingerprints = [alert["fingerprint"] for alert in due]
        if delivery.ok:
            self.state.delivered(fingerprints, now)
            return
        self.state.failed(fingerprints, delivery.detail)
        self._quiet_until = time.monotonic() + self.options.max_backoff.total_seconds()
        raise OutputError(f"POST {self.endpoint}: {len(due)} alert(s) not delivered ({delivery.detail}); kept in "
                          f"{self.state_path} and sent again at the next write or pass")

    def _postable(self, alert: dict[str, Any], now: datetime) -> dict[str, Any]:
        """One alert in Alertmanager's `postableAlert` shape."""
        ends = max(alert["resolvedAt"] or stamp(now + self.options.expire), alert["startsAt"])   # never before
        postable = {"labels": alert["labels"], "annotations": alert["annotations"], "startsAt": alert["startsAt"],
                    "endsAt": ends}
        return postable | ({"generatorURL": alert["generatorURL"]} if alert["generatorURL"] else {})

    def close(self) -> None:
        self.sender.close()
        self.state.close()
