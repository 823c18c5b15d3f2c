"""Hostile evidence: whatever a cluster produces gives a correct result, or one that says it is partial - in
bounded time and memory.

Already covered elsewhere (docs/operations.md lists them): tests/engine/test_bad_evidence.py (invalid UTF-8,
a 10 MB line, a binary file, NUL padding, unreadable files), tests/service/test_limits.py (the same over HTTP).
"""

from __future__ import annotations

import copy
import gzip
import json
import os
import random
import re
import shutil
import sqlite3
import subprocess
import sys
from dataclasses import replace
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from firstfault.blueprint.base import Window
from firstfault.blueprint.collectors.files import FileScope, read_batches
from firstfault.cli import main
from firstfault.engine import Attribution, Engine, ExecutionContext, Observation, SourceKind
from firstfault.engine.model import MetricSample, Provenance
from firstfault.engine.timestamps import TimestampParser
from firstfault.samples import samples_root
from firstfault.wire import LokiBatch, PromBatch, RawTextBatch, prepare
from tests.blueprint.blueprint_helpers import make_workload as make_static_workload
from tests.blueprint.blueprint_helpers import run_blueprint
from tests.reliability.support import Record, measured

SAMPLES = samples_root()
SAMPLE_NAMES = sorted(p.name for p in SAMPLES.iterdir() if (p / "scenario.toml").is_file())
XID79 = ("Jan  1 00:10:00 n1 kernel: NVRM: Xid (PCI:0000:91:00): 79, pid='<unknown>', name=<unknown>, "
         "GPU has fallen off the bus.")


def verdict(result: Attribution) -> tuple[str, str, list[str], str | None]:
    return (result.outcome.value, result.sub_domain.value, [c.node for c in result.culprit_nodes],
            result.root_cause.symptom if result.root_cause else None)


def copy_sample(name: str, tmp_path: Path) -> Path:
    target = tmp_path / name
    shutil.copytree(SAMPLES / name, target)
    return target


# -- lines crafted against backtracking regex engines ------------------------------------------------------------
# scripts/crafted_lines.py pairs, per extractor family, a hostile line with a benign one of the same length and
# shape. Before the capture step ran long lines through RE2 (engine/captures.py), the hostile lines cost time
# quadratic in their length: a 16 kB line took seconds, a 1 MB one hours.
def _crafted_lines(record: Record, sizes: tuple[int, ...], total: int, repeats: int, timeout: float) -> None:
    result = measured("crafted_lines", "--sizes", *map(str, sizes), "--total", str(total), "--repeats", str(repeats),
                      timeout=timeout)
    worst = max(result["rows"], key=lambda row: row[4])
    # Linear: per MB, a family's crafted lines cost about the same at every line length from 4 kB up (a
    # quadratic step makes 64 kB lines 16x dearer per MB than 4 kB ones, and it was thousands before RE2).
    per_mb: dict[str, dict[int, float]] = {}
    for name, size, _benign_ms, hostile_ms, _ratio in result["rows"]:
        per_mb.setdefault(name, {})[size] = hostile_ms
    long_sizes = [size for size in sizes if size >= 4000]
    for name, costs in per_mb.items():
        growth = costs[long_sizes[-1]] / costs[long_sizes[0]]
        assert growth < 4, f"{name}: {costs} ms/MB by line length"
    # And within a bounded factor of benign lines of the same shape. The factor is linear work, not
    # backtracking: a crafted line dense with matches of one pattern (an exception name every 20 characters)
    # costs hyperscan a callback per match, and benign long lines that match one literal are nearly free, so
    # the ratio reaches 10-25 on a loaded machine; a backtracking capture step made it hundreds at 4 kB.
    for name, size, benign_ms, hostile_ms, ratio in result["rows"]:
        assert ratio < 50, f"{name}, {size}-char lines: {hostile_ms} ms/MB against {benign_ms} ms/MB benign"
    # 16x longer lines cost 16x more per MB if the capture step were quadratic
    assert result["line_scaling"] < 4, result
    record(families=len({row[0] for row in result["rows"]}), sizes=list(sizes), worst_family=worst[0],
           worst_size=worst[1], worst_ratio=worst[4], line_scaling_1mb_vs_64kb=result["line_scaling"],
           rows=[[name, size, benign_ms, hostile_ms] for name, size, benign_ms, hostile_ms, _ in result["rows"]])


def test_crafted_lines_scan_in_linear_time(record: Record) -> None:
    """Per MB, crafted lines cost a small factor of benign lines of the same shape, at every line length."""
    _crafted_lines(record, sizes=(100, 4000, 64 * 1024), total=300_000, repeats=2, timeout=240)


@pytest.mark.long
def test_crafted_lines_scan_in_linear_time_long(record: Record) -> None:
    _crafted_lines(record, sizes=(100, 1000, 8000, 200_000, 1000 * 1024), total=4_000_000, repeats=3, timeout=1800)


# -- one huge line, a million identical lines -------------------------------------------------------------------
def test_a_100_mb_line_costs_bounded_memory(make_workload, tmp_path: Path, record: Record) -> None:
    """A 100 MB line without a newline, then a Xid: the engine and the Blueprint's file reader keep a bounded
    piece of it, say so, and still find the Xid on the next line."""
    root = make_workload({"n1/syslog": [XID79], "n2/applog": ["hello"]})
    syslog = root / "n1" / "syslog.log"
    with open(syslog, "wb") as out:
        chunk = b"x" * (1024 * 1024)
        for _ in range(100):
            out.write(chunk)
        out.write(b"\n" + XID79.encode() + b"\n")
    result = measured("huge_line", str(root), timeout=180)
    assert result["culprits"] == ["n1"] and result["blueprint_culprits"] == ["n1"]
    assert any("longer than" in issue for issue in result["issues"])
    assert result["lines"] == 2
    assert result["engine_kib"] < 64 * 1024, result        # the line is 100 MiB; memory grows far less
    assert result["blueprint_kib"] < 64 * 1024, result
    record(line_mib=100, engine_peak_growth_mib=round(result["engine_kib"] / 1024, 1),
           blueprint_peak_growth_mib=round(result["blueprint_kib"] / 1024, 1))


def _burst(tmp_path: Path, count: int, block_size: int) -> dict:
    root = tmp_path / f"burst-{count}"
    (root / "n1").mkdir(parents=True)
    (root / "n2").mkdir()
    (root / "scenario.toml").write_text(
        'id = "burst"\n[workload]\nscheduler = "slurm"\njob_id = "1"\nscheduler_state = "FAILED"\n'
        'start_time = "2025-01-01T00:00:00Z"\nend_time = "2025-01-01T02:00:00Z"\nnodes = ["n1", "n2"]\n')
    line = (XID79 + "\n").encode()
    with open(root / "n1" / "syslog.log", "wb") as out:
        for _ in range(count // 10_000):
            out.write(line * 10_000)
        out.write(line * (count % 10_000))
    (root / "n2" / "applog.log").write_text(
        "2025-01-01T00:12:00Z [rank8]: RuntimeError: NCCL error: unhandled system error\n")
    return measured("burst", str(root), "--block-size", str(block_size), timeout=900)


def _identical_lines(tmp_path: Path, record: Record, small: int, large: int, block_size: int) -> None:
    """Memory is bounded by the scan block (its matching lines are handled together), not by the input: both
    sizes span several blocks, and the larger one needs no more memory than the smaller."""
    few, many = _burst(tmp_path, small, block_size), _burst(tmp_path, large, block_size)
    for run, count in ((few, small), (many, large)):
        assert run["culprits"] == ["n1"] and run["count"] == count and run["evidence"] <= 3
    # the output differs only in the digits of the count; memory does not grow with the number of lines
    assert abs(many["json_bytes"] - few["json_bytes"]) < 64, (few, many)
    assert many["growth_kib"] < few["growth_kib"] + 16 * 1024, (few, many)
    record(lines=[small, large], block_kib=block_size // 1024, json_bytes=[few["json_bytes"], many["json_bytes"]],
           peak_growth_mib=[round(few["growth_kib"] / 1024, 1), round(many["growth_kib"] / 1024, 1)],
           seconds=[round(few["seconds"], 2), round(many["seconds"], 2)],
           us_per_line=round(many["seconds"] / large * 1e6, 1))


def test_identical_error_lines_are_coalesced_in_bounded_memory_and_output(tmp_path: Path, record: Record) -> None:
    _identical_lines(tmp_path, record, 5_000, 50_000, block_size=128 * 1024)


@pytest.mark.long
def test_a_million_identical_error_lines(tmp_path: Path, record: Record) -> None:
    _identical_lines(tmp_path, record, 100_000, 1_000_000, block_size=4 * 1024 * 1024)  # the default block


# -- binary content, NUL bytes, control characters ----------------------------------------------------------------
def test_binary_file_among_the_evidence_is_skipped_and_the_rest_read(make_workload, tmp_path: Path,
                                                                      capsys: pytest.CaptureFixture[str],
                                                                      engine: Engine) -> None:
    """analyze and the Blueprint agree: the binary file is named, every other file is still read."""
    elf = b"\x7fELF\x02\x01\x01" + bytes(range(256)) * 300 + b"NVRM: Xid (PCI:0000:01:00): 48, inside a binary"
    root = make_workload({"n1/applog": elf, "n1/syslog": [XID79], "n2/applog": ["2025-01-01T00:20:00Z ok"]})
    result = engine.analyze_path(root)
    assert verdict(result)[2] == ["n1"] and result.coverage.partial
    assert any("binary content" in issue for issue in result.coverage.issues)
    code, (blueprint,), err = run_blueprint(["--configs", str(root), "--connector", "output", "stdout"], capsys)
    assert code == 0, err
    assert [c["node"] for c in blueprint["diagnosis"]["culprit_nodes"]] == ["n1"]
    (static,) = [r for r in blueprint["connector_reports"] if r["connector"] == "static" and r["kind"] == "logs"]
    assert static["status"] == "error" and "binary content" in static["reason"] and "1 of 3" in static["reason"]
    assert static["observation_count"] == 2


def test_nul_bytes_and_control_characters_inside_lines(make_workload, tmp_path: Path, engine: Engine,
                                                       capsys: pytest.CaptureFixture[str]) -> None:
    """NULs, escape sequences and other C0 characters inside lines neither hide a fault nor break the JSON or
    the SQLite row that carry it."""
    nasty = XID79.replace("GPU has", "GPU\x00\x1b[31m has\x07\x08") + "\x00\x00"
    noise = "Jan  1 00:09:00 n1 kernel: noise\x00\x00 \x1b[0m\x7f\n"  # few enough controls to be text
    root = make_workload({"n1/syslog": (noise * 20 + nasty + "\n").encode(),
                          "n2/applog": ["2025-01-01T00:20:00Z\x00 ok\x1b[0m"]})
    result = engine.analyze_path(root)
    assert verdict(result)[2] == ["n1"]
    assert "\x00" in result.root_cause.evidence[0].text
    assert Attribution.model_validate_json(result.to_json()) == result
    db = tmp_path / "r.db"
    code, _, err = run_blueprint(["--configs", str(root), "--connector", "output", "sqlite", "path", str(db)], capsys)
    assert code == 0, err
    with sqlite3.connect(db) as con:
        (stored,) = con.execute("SELECT result_json FROM attribution_runs").fetchone()
    assert [c["node"] for c in json.loads(stored)["diagnosis"]["culprit_nodes"]] == ["n1"]


# -- time: out of order, clock skew --------------------------------------------------------------------------------
def _rewrite(root: Path, change) -> None:
    for path in sorted(root.glob("*/*.log")):
        lines = path.read_text().splitlines()
        path.write_text("\n".join(change(path, lines)) + "\n")


@pytest.mark.parametrize("sample", SAMPLE_NAMES)
def test_local_disorder_changes_nothing(sample: str, tmp_path: Path, engine: Engine) -> None:
    """Neighbouring lines swapped (ranks and threads interleaving their output) give the same result."""
    baseline = engine.analyze_path(SAMPLES / sample)
    root = copy_sample(sample, tmp_path)

    parser = TimestampParser(baseline.workload.start_time)

    def swap_neighbours(_path: Path, lines: list[str]) -> list[str]:
        for i in range(0, len(lines) - 1, 2):
            a, b = parser.parse(lines[i]), parser.parse(lines[i + 1])
            if a and b and abs((b - a).total_seconds()) < 60:
                lines[i], lines[i + 1] = lines[i + 1], lines[i]
        return lines

    _rewrite(root, swap_neighbours)
    result = engine.analyze_path(root)
    assert verdict(result) == verdict(baseline)
    assert not any("out of time order" in issue for issue in result.coverage.issues)


@pytest.mark.parametrize("sample", SAMPLE_NAMES)
@pytest.mark.parametrize("how", ["reversed", "shuffled"])
def test_lines_out_of_order_give_the_same_result_or_say_it_is_partial(sample: str, how: str, tmp_path: Path,
                                                                      engine: Engine) -> None:
    baseline = engine.analyze_path(SAMPLES / sample)
    root = copy_sample(sample, tmp_path)
    rng = random.Random(sample)

    def disorder(_path: Path, lines: list[str]) -> list[str]:
        if how == "reversed":
            return lines[::-1]
        rng.shuffle(lines)
        return lines

    _rewrite(root, disorder)
    result = engine.analyze_path(root)
    flagged = any("out of time order" in issue for issue in result.coverage.issues)
    assert verdict(result) == verdict(baseline) or (flagged and result.coverage.partial)


def test_a_shuffled_log_that_changes_the_answer_is_marked_partial(tmp_path: Path, engine: Engine) -> None:
    """Progress markers are read as the first and last of a chronological stream: shuffled, the time-limit run
    looks like a hang, and the result says the stream was out of order."""
    root = copy_sample("slurm-time-limit", tmp_path)
    _rewrite(root, lambda _p, lines: random.Random(1).sample(lines, len(lines)))
    result = engine.analyze_path(root)
    assert verdict(result) != verdict(engine.analyze_path(SAMPLES / "slurm-time-limit"))
    assert result.coverage.partial
    assert any("applog.log" in issue and "out of time order" in issue for issue in result.coverage.issues)


_ISO = re.compile(r"^(\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(?:\.\d+)?)Z")
_SYSLOG = re.compile(r"^([A-Z][a-z]{2} [ \d]\d \d\d:\d\d:\d\d)")


def shift(line: str, delta: timedelta, year: int) -> str:
    """The line with its own timestamp moved by `delta` (ISO 8601 and syslog stamps)."""
    if m := _ISO.match(line):
        moved = datetime.fromisoformat(m.group(1)) + delta
        return moved.isoformat(timespec="milliseconds") + "Z" + line[m.end():]
    if m := _SYSLOG.match(line):
        moved = datetime.strptime(f"{year} {m.group(1)}", "%Y %b %d %H:%M:%S") + delta
        return moved.strftime("%b %e %H:%M:%S") + line[m.end():]
    return line


@pytest.mark.parametrize("sample,culprit", [("nvlink-walkthrough", "node-02"), ("xid79-fallen-off-bus", "gpu-a03")])
@pytest.mark.parametrize("minutes", [-10, -5, -2, 2, 5, 10])
@pytest.mark.parametrize("skewed", ["culprit", "others"])
def test_clock_skew_of_minutes_between_nodes(sample: str, culprit: str, minutes: int, skewed: str, tmp_path: Path,
                                             engine: Engine) -> None:
    """A node whose clock is minutes off (the culprit's, or every other node's) does not move the blame: the
    downstream errors it makes look earlier do not outrank the hardware fault."""
    baseline = engine.analyze_path(SAMPLES / sample)
    root = copy_sample(sample, tmp_path)
    year = baseline.workload.start_time.year

    def skew(path: Path, lines: list[str]) -> list[str]:
        if (path.parent.name == culprit) != (skewed == "culprit"):
            return lines
        return [shift(line, timedelta(minutes=minutes), year) for line in lines]

    _rewrite(root, skew)
    result = engine.analyze_path(root)
    assert verdict(result) == verdict(baseline)
    assert verdict(result)[2] == [culprit]


# -- nodes outside the allocation, duplicate files ----------------------------------------------------------------
def test_evidence_from_nodes_outside_the_allocation_is_set_aside(tmp_path: Path, engine: Engine) -> None:
    root = copy_sample("nvlink-walkthrough", tmp_path)
    (root / "intruder-9").mkdir()
    (root / "intruder-9" / "syslog.log").write_text(
        "Mar  2 08:00:30 intruder-9 kernel: NVRM: Xid (PCI:0000:01:00): 79, pid=1, name=x, GPU has fallen off the bus.\n")
    result = engine.analyze_path(root)
    assert verdict(result) == verdict(engine.analyze_path(SAMPLES / "nvlink-walkthrough"))
    assert result.coverage.nodes_outside_allocation == ["intruder-9"]
    assert any("outside the allocation" in issue for issue in result.coverage.issues)
    assert "intruder-9" not in {s.node for s in result.symptoms}


@pytest.mark.parametrize("sample", SAMPLE_NAMES)
def test_duplicate_files_give_the_same_diagnosis(sample: str, tmp_path: Path, engine: Engine) -> None:
    """A log present twice (`syslog.log` next to a `syslog.log.gz` copy, as a half-finished rotation leaves it)
    counts its lines twice and changes nothing else."""
    baseline = engine.analyze_path(SAMPLES / sample)
    root = copy_sample(sample, tmp_path)
    for path in sorted(root.glob("*/syslog.log")) + sorted(root.glob("*/applog.log")):
        path.with_name(path.name + ".gz").write_bytes(gzip.compress(path.read_bytes()))
    result = engine.analyze_path(root)
    assert verdict(result) == verdict(baseline)
    counts = {(s.node, s.symptom, s.status): s.count for s in baseline.symptoms}
    doubled = {(s.node, s.symptom, s.status): s.count for s in result.symptoms}
    assert doubled.keys() == counts.keys()
    assert all(counts[k] <= doubled[k] <= 2 * counts[k] for k in counts)  # lines twice; job-level facts once


def test_the_blueprint_reads_a_file_named_twice_once(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    logs = tmp_path / "logs"
    logs.mkdir()
    (logs / "n1.log").write_text("2025-01-01T00:10:00Z [rank0]: step 1 loss 2.0\n" + XID79 + "\n")
    workload = make_static_workload(tmp_path / "w", "dup", ["n1"], "2025-01-01T00:00:00Z", "2025-01-01T02:00:00Z")
    code, (result,), err = run_blueprint([
        "--configs", str(workload), "--connector", "logs", "files", "label", "twice",
        "applog", f"{logs}/{{node}}.log", "applog", f"{logs}/n1.*", "syslog", f"{logs}/{{node}}.log"], capsys)
    assert code == 0, err
    (report,) = [r for r in result["connector_reports"] if r["connector"] == "twice"]
    assert report["observation_count"] == 2


def test_reading_a_file_keeps_a_bounded_piece_of_each_line(tmp_path: Path) -> None:
    path = tmp_path / "long.log"
    path.write_bytes(b"y" * (3 * 1024 * 1024) + b"\nshort\n")
    batches = list(read_batches(path, FileScope("n1", SourceKind.SYSLOG, "long.log", None, (path.parent.resolve(),)), max_bytes=1 << 30))
    lines = [line for batch in batches for line in batch.lines]
    assert [len(line) for line in lines] == [1024 * 1024, 5]


def test_a_session_keeps_a_bounded_number_of_coalesced_events(engine: Engine) -> None:
    """Past `max_event_keys` distinct events, new ones are dropped, counted, and the result says it is partial."""
    from dataclasses import replace

    from firstfault.engine import ExecutionContext
    from firstfault.engine.params import Params
    from firstfault.engine.session import Session

    session = Session(ExecutionContext(workload_id="w", nodes=["n1"]), engine.compiled,
                      replace(Params(), max_event_keys=50))
    for i in range(80):                        # every line names another host: a new event each
        session.ingest_lines(f"host-{i}", SourceKind.SYSLOG, [XID79], "loki")
    assert session.event_keys() == 50
    result = session.attribute()
    assert result.coverage.partial
    assert any("30 events dropped: more than 50 distinct event keys" in issue for issue in result.coverage.issues)


def test_evidence_text_is_cut_at_max_evidence_chars(engine: Engine, make_workload) -> None:
    root = make_workload({"n1/syslog": [XID79 + " " + "z" * 20_000]})
    (evidence,) = engine.analyze_path(root).root_cause.evidence
    assert evidence.text.startswith(XID79) and evidence.text.endswith(" chars]")
    assert len(evidence.text) < 4096 + 64


# -- times at the edge of the calendar ------------------------------------------------------------------------------
# Each stamps an Xid 79 on n1 earlier (or far later) than n2's real one. Before the time window, a year-1 line became
# the root cause with high confidence, and the offsets and the zone-less 9999 overflowed date arithmetic (a traceback).
EDGE_STAMPS = ["0001-01-01T00:00:00Z", "0001-01-01T00:00:00+01:00", "0001-01-01 00:00:00", "[Jan 01 0001 00:00:00]",
               "1969-12-31T23:59:59Z", "9999-12-31T23:59:30Z", "9999-12-31 23:59:30", "9999-12-31T23:00:00-05:00",
               "[Fri Dec 31 23:59:59 9999]", "2200-01-01T00:00:00Z"]
XID79_N2 = XID79.replace(" n1 ", " n2 ").replace("00:10:00", "00:20:00")


def _json_bytes(result: Attribution) -> bytes:
    """What a caller writes out: the result as JSON, non-ASCII kept, encoded as UTF-8 (must never fail)."""
    return json.dumps(result.model_dump(mode="json"), ensure_ascii=False).encode("utf-8")


def _assert_undated_edge_line(result: Attribution, origin: str) -> None:
    assert verdict(result)[3] == "XID-79" and result.root_cause.node == "n2", verdict(result)
    assert result.coverage.partial
    assert any(issue.startswith(f"{origin}:1: stamped ") and "outside 1970-01-01 and 2200-01-01" in issue
               for issue in result.coverage.issues), result.coverage.issues
    (kept,) = [s for s in result.symptoms if s.node == "n1"]
    assert kept.evidence[0].time_inferred and kept.first_time == result.workload.end_time   # kept, undated
    _json_bytes(result)


@pytest.mark.parametrize("stamp", EDGE_STAMPS)
def test_a_stamp_at_the_edge_of_the_calendar_leaves_its_line_undated(stamp: str, make_workload,
                                                                     capsys: pytest.CaptureFixture[str]) -> None:
    """analyze: the line is kept as evidence without a time, the coverage names its file and line, the result is
    partial, and its absurd time does not make it the root cause. The CLI prints the result, not a traceback."""
    root = make_workload({"n1/syslog": [stamp + XID79.removeprefix("Jan  1 00:10:00")], "n2/syslog": [XID79_N2]})
    assert main(["analyze", str(root), "--json"]) == 0
    out = capsys.readouterr()
    assert "Traceback" not in out.out + out.err
    _assert_undated_edge_line(Attribution.model_validate_json(out.out), "n1/syslog.log")


@pytest.mark.parametrize("stamp", EDGE_STAMPS)
def test_a_stamp_at_the_edge_of_the_calendar_over_the_wire(stamp: str, engine: Engine) -> None:
    """The service's and the Blueprint's path (a raw_text batch through firstfault.wire) gives the same answer."""
    context = ExecutionContext(workload_id="w", nodes=["n1", "n2"], start_time=datetime(2025, 1, 1, tzinfo=UTC),
                               end_time=datetime(2025, 1, 1, 2, tzinfo=UTC), scheduler_state="FAILED")
    session = engine.session(context)
    for node, line in (("n1", stamp + XID79.removeprefix("Jan  1 00:10:00")), ("n2", XID79_N2)):
        prepare(RawTextBatch(format="raw_text", node=node, source="syslog", origin=f"{node}/syslog", text=line),
                65536).apply(session)
    _assert_undated_edge_line(session.attribute(), "n1/syslog")


@pytest.mark.parametrize("field", ["start_time", "end_time"])
@pytest.mark.parametrize("when", ["0001-01-01T00:00:00Z", "9999-12-31T23:59:30Z"])
def test_a_workload_time_at_the_edge_of_the_calendar_is_not_used(field: str, when: str, make_workload,
                                                                 engine: Engine) -> None:
    """A scenario's start or end outside the window is set aside with an issue: rules that add the clock-skew
    tolerance to the job's end no longer overflow."""
    times = {"start": "2025-01-01T00:00:00Z", "end": "2025-01-01T02:00:00Z"} | {field.removesuffix("_time"): when}
    root = make_workload({"n1/syslog": [XID79], "n2/applog": ["2025-01-01T00:20:00Z ok"]}, **times)
    result = engine.analyze_path(root)
    assert getattr(result.workload, field) is None and result.coverage.partial
    assert any(issue.startswith(f"workload {field} ") and "not used" in issue for issue in result.coverage.issues)
    assert verdict(result)[2] == ["n1"]
    _json_bytes(result)


def test_sample_and_transport_times_outside_the_window_are_not_used(engine: Engine) -> None:
    """Library callers of the session (times given with lines and samples) meet the same window."""
    session = engine.session(ExecutionContext(workload_id="w", nodes=["n1"]))
    session.ingest_lines("n1", SourceKind.SYSLOG, [XID79], "loki", times=[datetime(1, 1, 1)])
    session.ingest([Observation(source=SourceKind.NODE_METRICS, node="n1", observed_at=datetime(9999, 12, 31),
                                metric=MetricSample(name="DCGM_FI_DEV_XID_ERRORS", labels={"gpu": "0"}, value=79),
                                provenance=Provenance(origin="prom"))])
    result = session.attribute()
    issues = result.coverage.issues
    assert any(i.startswith("loki:1: time 0001-01-01T00:00:00") for i in issues), issues
    assert any(i.startswith("prom: sample time 9999-12-31T00:00:00") for i in issues), issues
    assert result.root_cause.time == datetime(2025, 1, 1, 0, 10, tzinfo=UTC) or result.root_cause.time is None
    _json_bytes(result)


# -- text that UTF-8 cannot encode -----------------------------------------------------------------------------------
def test_a_lone_surrogate_hostname_in_a_loki_envelope_is_replaced(engine: Engine) -> None:
    """One Loki line whose JSON envelope names a host `\\ud800` poisoned the session: every result failed to
    encode. The engine's text rule replaces it with U+FFFD (one per UTF-8 byte of the surrogate)."""
    line = json.dumps({"body": XID79, "attributes": {"hostname": "\ud800"}})
    batch = LokiBatch.model_validate({"format": "raw_loki_streams", "source": "syslog", "streams": [
        {"stream": {"job": "\udfff"}, "values": [["1735690200000000000", line]]}]})
    session = engine.session(ExecutionContext(workload_id="w"))
    prepare(batch, 65536).apply(session)
    result = session.attribute()
    assert result.root_cause.node == "\ufffd" * 3
    assert result.root_cause.evidence[0].provenance.labels == {"job": "\ufffd" * 3}
    assert "\ud800" not in _json_bytes(result).decode("utf-8")


def test_lone_surrogates_in_prometheus_labels_are_replaced(engine: Engine) -> None:
    """The Blueprint hands the wire what `json.loads` made of a Prometheus answer: `\\ud800` escapes are lone
    surrogates there."""
    series = {"metric": {"__name__": "DCGM_FI_DEV_XID_ERRORS", "Hostname": "n\ud800", "gpu": "\udc00"},
              "values": [[1735690200, "79"]]}
    batch = PromBatch.model_validate({"format": "prometheus_metrics", "result": [series]})
    session = engine.session(ExecutionContext(workload_id="w"))
    prepare(batch, 65536).apply(session)
    result = session.attribute()
    assert {s.node for s in result.symptoms} <= {"n\ufffd\ufffd\ufffd"}
    _json_bytes(result)


def test_a_node_directory_whose_name_is_not_utf8(make_workload, engine: Engine) -> None:
    """Linux file names are bytes: a directory `n\\xff` reaches Python as `n\\udcff` (a lone surrogate)."""
    root = make_workload({"n1/syslog": [XID79]})
    odd = Path(os.fsdecode(bytes(root) + b"/n\xff"))
    odd.mkdir()
    (odd / "applog.log").write_text("2025-01-01T00:20:00Z [rank8]: RuntimeError: NCCL error: unhandled system error\n")
    result = engine.analyze_path(root)
    (odd_source,) = [s for s in result.coverage.sources if s.node != "n1"]
    assert odd_source.node == "n\ufffd\ufffd\ufffd" and odd_source.origins == ["n\ufffd\ufffd\ufffd/applog.log"]
    _json_bytes(result)


def test_session_text_passes_one_rule(engine: Engine) -> None:
    """Node names, origins, labels, lines and the context's text given to a session by a library caller."""
    context = ExecutionContext(workload_id="w", nodes=["n1", "n\udc80"], metadata={"k\ud800": "v\udfff"})
    session = engine.session(context)
    # the line's own host field names its node (a line naming another node would be moved there: RelayedOutput)
    session.ingest_lines("n\udc80", SourceKind.SYSLOG, [XID79.replace(" n1 ", " n\udc80 ") + " \ud800\x00\x07"], "o\ud800",
                         labels={"l": "\udcff"})
    result = session.attribute()
    assert result.workload.nodes == ["n1", "n\ufffd\ufffd\ufffd"]
    assert result.root_cause.node == "n\ufffd\ufffd\ufffd"
    assert result.root_cause.evidence[0].text.endswith(" \ufffd\ufffd\ufffd\x00\x07")   # NUL and BEL are kept
    _json_bytes(result)


# -- what a workload directory may point at -------------------------------------------------------------------------
def test_links_out_of_the_workload_and_special_files_are_never_read(make_workload, tmp_path: Path) -> None:
    """A link to a file, a directory or /proc/kmsg outside the workload, and FIFOs inside and outside it: none is
    read (before, a FIFO or /proc/kmsg blocked `analyze` forever and a linked secret became evidence); each is
    named in the coverage with its reason, and the rest is analysed. Run as the CLI, in a process of its own."""
    outside = tmp_path / "outside"
    (outside / "n9").mkdir(parents=True)
    (outside / "secret.log").write_text(XID79.replace("GPU has", "SECRET GPU has") + "\n")
    (outside / "n9" / "syslog.log").write_text(XID79 + "\n")
    os.mkfifo(outside / "pipe")
    root = make_workload({"n1/applog": ["2025-01-01T00:20:00Z ok"], "n2/syslog": [XID79_N2]}, nodes=["n1", "n2", "n3"])
    (root / "n1" / "syslog.log").symlink_to(outside / "secret.log")
    (root / "n2" / "applog.log").symlink_to(outside / "pipe")
    (root / "n3").symlink_to(outside / "n9", target_is_directory=True)
    (root / "n1" / "scheduler.log").symlink_to("/proc/kmsg")
    os.mkfifo(root / "n2" / "scheduler.log")
    (root / "n2" / "rotated.gz").write_bytes(gzip.compress((XID79_N2 + "\n").encode()))
    (root / "n2" / "syslog.log.gz").symlink_to(root / "n2" / "rotated.gz")   # inside the workload: followed
    run = subprocess.run([sys.executable, "-m", "firstfault", "analyze", str(root), "--json"], capture_output=True,
                         text=True, timeout=120, check=False)
    assert run.returncode == 0, run.stderr
    result = Attribution.model_validate_json(run.stdout)
    issues = result.coverage.issues
    for name in ("n1/syslog.log", "n2/applog.log", "n3", "n1/scheduler.log"):
        assert any(i.startswith(f"{root / name}: a symlink out of the workload directory") for i in issues), (name, issues)
    assert f"{root / 'n2/scheduler.log'}: a FIFO, not a regular file; not read" in issues
    assert "SECRET" not in run.stdout and result.coverage.partial
    assert verdict(result)[2] == ["n2"]
    (n2_syslog,) = [s for s in result.coverage.sources if s.node == "n2" and s.source == SourceKind.SYSLOG]
    assert n2_syslog.origins == ["n2/syslog.log", "n2/syslog.log.gz"]


def test_a_gzip_that_inflates_without_end_is_read_up_to_the_cap(make_workload, engine: Engine) -> None:
    """A few kB of gzip that decompress to 64 MiB, with the cap at 1 MiB: the fault in the first MiB is found, the
    rest is skipped, and the result says so."""
    root = make_workload({"n2/applog": ["2025-01-01T00:20:00Z ok"]})
    with gzip.open(root / "n2" / "syslog.log.gz", "wb") as out:
        out.write((XID79_N2 + "\n").encode())
        zeros = b"\n" * (1024 * 1024)
        for _ in range(64):
            out.write(zeros)
    capped = copy.copy(engine)
    capped.params = replace(engine.params, max_decompressed_bytes=1024 * 1024)
    result = capped.analyze_path(root)
    assert verdict(result)[2] == ["n2"] and result.coverage.partial
    assert f"n2/syslog.log.gz: decompresses to more than {1024 * 1024} bytes (max_decompressed_bytes); read up to " \
           "there, the rest skipped" in result.coverage.issues
    (source,) = [s for s in result.coverage.sources if s.source == SourceKind.SYSLOG]
    assert source.bytes <= 1024 * 1024 + 1


def test_the_decompression_cap_is_set_on_the_command_line(make_workload, capsys: pytest.CaptureFixture[str]) -> None:
    root = make_workload({"n2/applog": ["2025-01-01T00:20:00Z ok"]})
    (root / "n2" / "syslog.log.gz").write_bytes(gzip.compress((XID79_N2 + "\n").encode() + b"\n" * (3 * 1024 * 1024)))
    assert main(["analyze", str(root), "--json", "--max-decompressed-mib", "2"]) == 0
    result = Attribution.model_validate_json(capsys.readouterr().out)
    assert verdict(result)[2] == ["n2"]
    assert any(i.startswith("n2/syslog.log.gz: decompresses to more than 2097152 bytes") for i in result.coverage.issues)
    with pytest.raises(SystemExit) as refused:
        main(["analyze", str(root), "--max-decompressed-mib", "0"])
    assert refused.value.code == 2 and "a whole number of MiB >= 1" in capsys.readouterr().err


def test_the_blueprints_file_reader_keeps_lines_stamped_at_the_edge_of_the_calendar(tmp_path: Path) -> None:
    """The Blueprint reads files through the engine's timestamp parser: a stamp outside the window is no stamp (the
    line keeps the fate of the lines before it), so the reader no longer stops at it with an OverflowError."""
    path = tmp_path / "n1.log"
    edge = [stamp + XID79.removeprefix("Jan  1 00:10:00") for stamp in EDGE_STAMPS]
    path.write_text("\n".join(["2025-01-01T00:10:00Z first", *edge, "2025-01-01T00:11:00Z last"]) + "\n")
    window = Window(datetime(2025, 1, 1, tzinfo=UTC), datetime(2025, 1, 1, 2, tzinfo=UTC))
    scope = FileScope("n1", SourceKind.SYSLOG, "n1.log", window, (tmp_path.resolve(),), utc_offset=timedelta(hours=-5))
    lines = [line for batch in read_batches(path, scope) for line in batch.lines]
    assert lines == ["2025-01-01T00:10:00Z first", *edge, "2025-01-01T00:11:00Z last"]
