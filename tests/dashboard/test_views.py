"""The pure view logic: the headline sentence, the timeline's time axis with cut-out gaps, chart buckets."""

from __future__ import annotations

import itertools
import json
import sqlite3
from datetime import UTC, datetime, timedelta
from pathlib import Path

from firstfault.blueprint.result import AttributionBlueprintResult
from firstfault.dashboard import views
from firstfault.dashboard.db import Bucket, bucket_seconds
from firstfault.engine.model import Attribution, Candidate, Outcome, SubDomain, TerminalState

T0 = datetime(2026, 3, 2, 8, 0, tzinfo=UTC)


def _diagnosis(db: Path, workload: str) -> Attribution:
    with sqlite3.connect(db) as con:
        text = con.execute("SELECT r.result_json FROM workload_attempts a JOIN attribution_runs r "
                           "ON r.id = a.latest_run_id WHERE a.workload_id = ?", (workload,)).fetchone()[0]
    result = AttributionBlueprintResult.model_validate(json.loads(text))
    assert result.diagnosis is not None
    return result.diagnosis


def test_headline_names_the_root_where_and_when(sample_db: Path) -> None:
    d = _diagnosis(sample_db, "nvlink-walkthrough")
    text = views.headline_text(d)
    assert text.startswith("XID-149.4 (NVLink signal integrity issue on this link) on node-02 (GPU 0018:01:00, "
                           "link 05) at 2026-03-02 08:57:31Z began the failure.")
    assert text.endswith("The workload ended FAILED (Fail InfraHW, nvlink).")
    nodes = [s for s in views.headline(d) if s.kind == "node"]
    assert [(s.text, s.href) for s in nodes] == [("node-02", "/nodes/node-02")]
    oom = views.headline_text(_diagnosis(sample_db, "cuda-oom-rank"))
    assert oom.startswith("CUDA out of memory") and "on dgx-b12" in oom


def test_headline_for_no_fault_ambiguity_and_unknown(sample_db: Path) -> None:
    d = _diagnosis(sample_db, "nvlink-walkthrough")
    passed = d.model_copy(update={"sub_domain": SubDomain.NONE, "outcome": Outcome.PASS, "root_cause": None,
                                  "terminal_state": TerminalState.COMPLETED})
    assert views.headline_text(passed) == ("No failure: the evidence names no fault. The workload ended COMPLETED "
                                           "(Pass, none).")
    unknown = d.model_copy(update={"sub_domain": SubDomain.UNKNOWN, "root_cause": None})
    assert views.headline_text(unknown).startswith("Cause unknown:")
    candidate = Candidate(symptom="XID-79", sub_domain=SubDomain.GPU, nodes=["a", "b"], first_time=T0, evidence=[])
    ambiguous = d.model_copy(update={"sub_domain": SubDomain.AMBIGUOUS, "root_cause": None,
                                     "candidates": [candidate, candidate]})
    text = views.headline_text(ambiguous)
    assert text.startswith("Ambiguous: 2 causes fit the evidence: XID-79 on a, b; XID-79 on a, b.")


def test_timeline_lanes_order_and_root(sample_db: Path) -> None:
    d = _diagnosis(sample_db, "nvlink-walkthrough")
    t = views.timeline(d)
    assert t is not None
    assert t.lanes[0].name == "node-02" and t.lanes[0].culprit and t.lanes[0].root
    roots = [e for e in t.events if e.kind == "root"]
    assert len(roots) == 1 and roots[0].symptom == "XID-149.4" and roots[0].lane == 0
    assert len(t.events) == len(d.symptoms) and t.hidden_lanes == 0 and t.untimed == 0
    # every event sits inside the plot, and in time order along x
    assert all(t.plot_left <= e.x <= e.x2 <= t.plot_right for e in t.events)
    by_time = sorted(t.events, key=lambda e: d.symptoms[e.index].first_time)
    assert [e.x for e in by_time] == sorted(e.x for e in by_time)
    root_marker = [m for m in t.markers if m.kind == "root"]
    assert root_marker and root_marker[0].x == roots[0].x
    # the hour of quiet training before the fault is cut out, so the seconds of the cascade stay apart
    assert any(b.label.startswith("+55m") for b in t.breaks)
    cascade = sorted((d.symptoms[e.index].first_time, e.x) for e in t.events if e.kind in ("root", "demoted"))
    for (t1, x1), (t2, x2) in itertools.pairwise(cascade):
        if (t2 - t1).total_seconds() >= 1:
            assert x2 - x1 >= 5, (t1, t2)


def test_time_scale_is_monotonic_across_breaks() -> None:
    times = [T0, T0 + timedelta(seconds=1), T0 + timedelta(seconds=2), T0 + timedelta(hours=10),
             T0 + timedelta(hours=10, seconds=30), T0 + timedelta(days=2)]
    scale = views._Scale(times, 100, 1000)
    assert len(scale.segments) == 3
    # the stretch to a start or end anchor is cut sooner than one between events
    assert len(views._Scale(times[:5], 100, 1000, (T0 + timedelta(hours=11),)).segments) == 3
    assert len(views._Scale(times[:5] + [T0 + timedelta(hours=11)], 100, 1000).segments) == 2
    probe = sorted(times + [T0 + timedelta(hours=1), T0 + timedelta(hours=10, seconds=10), T0 + timedelta(days=1)])
    xs = [scale.x(t) for t in probe]
    assert xs == sorted(xs) and xs[0] >= 100 and xs[-1] <= 1000
    ticks, breaks = scale.ticks()
    assert len(breaks) == 2 and all(100 <= tick.x <= 1000 for tick in ticks)
    single = views._Scale([T0], 100, 1000)
    assert single.x(T0) == 550


def test_bucket_sizes_and_bar_chart() -> None:
    assert bucket_seconds("2026-03-01T00:00:00+00:00", "2026-03-01T12:00:00+00:00", None, 40) == 3600
    assert bucket_seconds("2026-03-01T00:00:00+00:00", "2026-03-20T00:00:00+00:00", None, 40) == 86400
    assert bucket_seconds("2026-01-01T00:00:00+00:00", "2026-05-01T00:00:00+00:00", None, 40) == 7 * 86400
    assert bucket_seconds("2020-01-01T00:00:00+00:00", "2026-01-01T00:00:00+00:00", None, 40) > 30 * 86400
    assert bucket_seconds(None, None, None, 40) == 3600
    buckets = [Bucket(T0, {"Fail InfraHW": 3, "Pass": 5}), Bucket(T0 + timedelta(hours=1), {}),
               Bucket(T0 + timedelta(hours=2), {"Fail User": 1})]
    chart = views.bar_chart(buckets, 3600, views.OUTCOME_COLORS, ["Fail InfraHW", "Fail User", "Pass"],
                            "/workloads", "outcome")
    assert chart is not None and [b.total for b in chart.bars] == [8, 0, 1]
    first = chart.bars[0].parts
    assert [p.key for p in first] == ["Fail InfraHW", "Pass"]
    assert first[0].href == "/workloads?outcome=Fail+InfraHW&from=2026-03-02T08:00:00Z&to=2026-03-02T09:00:00Z"
    assert abs(sum(p.h for p in first) - (chart.plot_bottom - chart.plot_top) * 8 / int(chart.yticks[-1][1])) < 0.5
    assert [k for k, _, _ in chart.legend] == ["Fail InfraHW", "Fail User", "Pass"]
    assert views.bar_chart([], 3600, {}, [], "/", "x") is None


def test_formats() -> None:
    assert views.fmt_time("2026-03-02T09:12:40+00:00") == "2026-03-02 09:12:40Z"
    assert views.fmt_time(None) == "—" and views.fmt_time("garbage") == "—"
    assert views.fmt_clock("2026-03-02T08:57:32.154000+00:00") == "08:57:32.154"
    assert [views.fmt_duration(s) for s in (0.2, 5.5, 42, 125, 3600, 4355, 200000)] == [
        "200 ms", "5.5 s", "42 s", "2m 05s", "1h 00m", "1h 12m", "2d 7h"]
    assert views.outcome_class("Fail InfraHW") == "o-hw" and views.outcome_class("<script>") == "o-none"
