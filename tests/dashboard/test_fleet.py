"""Node history, repeat offenders and incomplete evidence, below the pages: the query layer and the view logic over
a small fleet's results written by the real Blueprint (tests/dashboard/fleet.py)."""

from __future__ import annotations

import json
import sqlite3
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from firstfault.blueprint.result import AttributionBlueprintResult, ConnectorReport
from firstfault.cli import main
from firstfault.dashboard import views
from firstfault.dashboard.db import RepeatOffence, RepeatPolicy, ResultsDB, WorkloadFilters, densest_window
from firstfault.errors import ConfigError
from tests.dashboard.fleet import (
    PASSED,
    REQUEUED,
    STDOUT_ONCE,
    SYSLOG_MISSING,
    SYSLOG_PARTIAL,
    XID_JOBS,
    XID_LATER,
    copy_sample,
)
from tests.dashboard.helpers import blueprint_into

T0 = datetime(2026, 2, 1, tzinfo=UTC)


def _result(db: Path, workload: str) -> AttributionBlueprintResult:
    with sqlite3.connect(db) as con:
        text = con.execute("SELECT r.result_json FROM workload_attempts a JOIN attribution_runs r "
                           "ON r.id = a.latest_run_id WHERE a.workload_id = ? ORDER BY a.attempt DESC",
                           (workload,)).fetchone()[0]
    return AttributionBlueprintResult.model_validate(json.loads(text))


# -- repeat offenders ---------------------------------------------------------------------------------------
def test_the_densest_window_counts_distinct_workloads() -> None:
    day = timedelta(days=1)
    # one workload's three attempts count once; two more workloads within a week make three
    events = [(T0, "a"), (T0 + day, "a"), (T0 + 2 * day, "a"), (T0 + 3 * day, "b"), (T0 + 6 * day, "c")]
    assert densest_window(events, timedelta(days=7)) == RepeatOffence(3, T0, T0 + 6 * day)
    # a window of two days holds at most two of them (a, from its second attempt, and b)
    assert densest_window(events, 2 * day) == RepeatOffence(2, T0 + day, T0 + 3 * day)
    # the window's end is inclusive; a tie keeps the latest window
    assert densest_window([(T0, "x"), (T0 + day, "y"), (T0 + 5 * day, "z"), (T0 + 6 * day, "w")], day) == \
        RepeatOffence(2, T0 + 5 * day, T0 + 6 * day)
    assert densest_window([], day) is None


def test_a_repeat_policy_is_checked() -> None:
    with pytest.raises(ConfigError, match="at least 2"):
        RepeatPolicy(workloads=1)
    with pytest.raises(ConfigError, match="longer than zero"):
        RepeatPolicy(window=timedelta(0))


def test_a_repeat_offender_is_blamed_for_distinct_workloads_within_the_window(fleet_db: Path) -> None:
    default = ResultsDB(fleet_db)
    assert default.repeat == RepeatPolicy(3, timedelta(days=7))
    offenders = default.repeat_offenders()
    # gpu-a03: three workloads that ended together (the fourth is eleven days later); node-02: one workload,
    # blamed in each of its three attempts - the same fault retried, not a repeat offender
    assert set(offenders) == {"gpu-a03"}
    assert offenders["gpu-a03"].workloads == 3
    assert offenders["gpu-a03"].last == datetime(2026, 2, 12, 1, 3, 12, tzinfo=UTC)
    ranking = {r.node: r for r in default.node_ranking()}
    assert ranking["node-02"].culprit == 3 and ranking["node-02"].repeat is None
    assert ranking["gpu-a03"].culprit == 4 and ranking["gpu-a03"].repeat == offenders["gpu-a03"]
    stats, _ = default.node("gpu-a03")  # type: ignore[misc]
    assert stats.repeat == offenders["gpu-a03"]
    assert [n.node for n in default.overview(None).top_culprits if n.repeat] == ["gpu-a03"]

    # four within a week: none; four within two weeks: gpu-a03; two within an hour: gpu-a03 still (three at once)
    assert ResultsDB(fleet_db, RepeatPolicy(4, timedelta(days=7))).repeat_offenders() == {}
    two_weeks = ResultsDB(fleet_db, RepeatPolicy(4, timedelta(days=14))).repeat_offenders()
    assert two_weeks == {"gpu-a03": RepeatOffence(4, datetime(2026, 2, 12, 1, 3, 12, tzinfo=UTC),
                                                  datetime(2026, 2, 23, 1, 3, 12, tzinfo=UTC))}
    assert set(ResultsDB(fleet_db, RepeatPolicy(2, timedelta(hours=1))).repeat_offenders()) == {"gpu-a03"}


# -- node history: failures only ----------------------------------------------------------------------------
def test_node_history_lists_failures_only(fleet_db: Path) -> None:
    results = ResultsDB(fleet_db)
    # cn-101 showed symptoms in the time-limit failure (ended 04:00:37) and in a training run that passed later
    stats, listing = results.node("cn-101")  # type: ignore[misc]
    assert (stats.allocated, stats.symptom, stats.culprit) == (2, 1, 0)
    assert [row.workload_id for row in listing.rows] == ["time-limit"] and listing.total == 1
    assert [(c.key, c.count) for c in stats.symptom_by_sub_domain] == [("scheduler", 1)]
    rank = next(r for r in results.node_ranking() if r.node == "cn-101")
    assert rank.last_time == "2026-05-03T04:00:37+00:00" and rank.symptom == 1
    # the list behind the node page's links: its failures; without `failed`, every workload it showed symptoms in
    assert [r.workload_id for r in results.workloads(
        WorkloadFilters(node="cn-101", role="symptom", failed=True)).rows] == ["time-limit"]
    assert {r.workload_id for r in results.workloads(WorkloadFilters(node="cn-101", role="symptom")).rows} == \
        {"time-limit", PASSED}


def test_a_node_only_in_passing_workloads_is_not_ranked(fleet_db: Path, tmp_path: Path) -> None:
    db = tmp_path / "passed.db"
    with sqlite3.connect(fleet_db) as source, sqlite3.connect(db) as target:
        source.backup(target)
    with sqlite3.connect(db) as con:   # keep only the passing training run
        con.execute("PRAGMA foreign_keys = OFF")
        keep = con.execute("SELECT id, latest_run_id FROM workload_attempts WHERE workload_id = ?",
                           (PASSED,)).fetchone()
        con.execute("DELETE FROM run_nodes WHERE run_id != ?", (keep[1],))
        con.execute("DELETE FROM connector_reports WHERE run_id != ?", (keep[1],))
        con.execute("DELETE FROM attribution_runs WHERE id != ?", (keep[1],))
        con.execute("DELETE FROM workload_attempts WHERE id != ?", (keep[0],))
    results = ResultsDB(db)
    assert results.node_ranking() == []
    stats, listing = results.node("cn-101")  # type: ignore[misc]
    assert (stats.allocated, stats.symptom, stats.last_culprit_time, listing.total) == (1, 0, None, 0)


# -- incomplete evidence ------------------------------------------------------------------------------------
def test_a_multi_node_job_with_every_log_collected_has_no_gap(fleet_db: Path) -> None:
    once = _result(fleet_db, STDOUT_ONCE)
    assert once.diagnosis is not None
    # the engine notes that trn-c02 and trn-c03 have no applog of their own (the job's stdout is one file) ...
    assert once.diagnosis.coverage.missing_sources == ["trn-c02/applog", "trn-c03/applog"]
    # ... which is not a collector returning less than it should
    assert views.evidence_gaps(once) == []
    for job in (*XID_JOBS, XID_LATER, REQUEUED):
        assert views.evidence_gaps(_result(fleet_db, job)) == [], job


def test_a_collector_that_returned_less_is_a_gap(fleet_db: Path) -> None:
    missing = views.evidence_gaps(_result(fleet_db, SYSLOG_MISSING))
    assert [(g.kind, g.connector, g.status, g.nodes) for g in missing] == [("logs", "files", "empty", ())]
    assert missing[0].reason.startswith("no file matched: ") and "dgx-b11.log" in missing[0].reason
    partial = views.evidence_gaps(_result(fleet_db, SYSLOG_PARTIAL))
    assert [(g.kind, g.connector, g.status, g.reason, g.nodes) for g in partial] == [
        ("logs", "files", "partial", "delivered for 2 of 3 nodes, nothing for 1", ("trn-c03",))]


def test_gaps_from_statuses_and_the_engine(fleet_db: Path) -> None:
    base = _result(fleet_db, STDOUT_ONCE)
    assert base.diagnosis is not None

    def with_report(status: str, nodes: list[str]) -> AttributionBlueprintResult:
        report = ConnectorReport(connector="prom", kind="metrics", status=status, reason="why")  # type: ignore[arg-type]
        context = base.context.model_copy(update={"nodes": nodes})
        return base.model_copy(update={"context": context, "connector_reports": [report]})

    assert [g.status for g in views.evidence_gaps(with_report("error", ["trn-c01"]))] == ["error"]
    assert [g.status for g in views.evidence_gaps(with_report("empty", ["trn-c01"]))] == ["empty"]
    # a workload that ran on no node (evicted before its pods started): nothing was there to find, but an error
    # is still an error
    assert views.evidence_gaps(with_report("empty", [])) == []
    assert [g.status for g in views.evidence_gaps(with_report("error", []))] == ["error"]
    # the engine's own reading problems are gaps; its note on nodes without any evidence is not
    coverage = base.diagnosis.coverage.model_copy(update={"issues": [
        "no evidence at all from 2 of 3 allocated nodes", "12 events dropped: more than 1000 distinct event keys"]})
    read = base.model_copy(update={"diagnosis": base.diagnosis.model_copy(update={"coverage": coverage})})
    assert [(g.kind, g.reason) for g in views.evidence_gaps(read)] == [
        ("engine", "12 events dropped: more than 1000 distinct event keys")]


def test_the_cli_takes_the_repeat_policy(fleet_db: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["dashboard", "--db", str(fleet_db), "--repeat-workloads", "1", "--port", "0"]) == 2
    assert "at least 2 workloads" in capsys.readouterr().err
    assert main(["dashboard", "--db", str(fleet_db), "--repeat-window", "a week", "--port", "0"]) == 2
    assert "not a duration: 'a week'" in capsys.readouterr().err


def test_a_node_without_any_evidence_is_named_by_its_collector(tmp_path: Path) -> None:
    """The engine's own note on a node without evidence (the text the warning leaves to its collector's report)."""
    copy_sample("cuda-oom-rank", tmp_path / "w", "third-node-silent", nodes='["dgx-b11", "dgx-b12", "dgx-b13"]')
    blueprint_into(tmp_path / "r.db", tmp_path / "w")
    result = _result(tmp_path / "r.db", "third-node-silent")
    assert result.diagnosis is not None
    assert "no evidence at all from 1 of 3 allocated nodes" in result.diagnosis.coverage.issues
    assert [(g.kind, g.connector, g.status, g.nodes) for g in views.evidence_gaps(result)] == [
        ("logs", "static", "partial", ("dgx-b13",))]
