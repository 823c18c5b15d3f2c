"""Faults around the Blueprint: Loki and Prometheus answering 429/500/timeouts/truncated JSON, the service
killed mid-run, the Blueprint itself killed with SIGKILL mid-write, sacct and kubectl missing or failing, a
collector that hangs.

Already covered elsewhere (docs/operations.md lists them): tests/blueprint/test_loki.py (429/502/503 retried,
read timeouts reported), tests/blueprint/test_static_and_outputs.py (retries keep their idempotency key, an
unreachable service, a failed SQLite write leaves no half-written run), tests/blueprint/test_kueue.py (an
unreachable cluster).
"""

from __future__ import annotations

import json
import os
import random
import shutil
import signal
import sqlite3
import stat
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from datetime import timedelta
from pathlib import Path

import httpx
import pytest

from firstfault.blueprint.base import LineBatch
from firstfault.blueprint.collectors.promql import PromqlCollector
from firstfault.blueprint.config import spec_from_words
from firstfault.blueprint.connectors import COLLECTORS
from firstfault.engine import ExecutionContext, SourceKind
from firstfault.samples import samples_root
from tests.blueprint.blueprint_helpers import PROMETHEUS_URL, make_workload, run_blueprint
from tests.blueprint.loki_server import LokiTestServer
from tests.reliability.fault_proxy import FaultProxy
from tests.reliability.support import Record
from tests.service.live_server import free_port

SAMPLES = samples_root()
ROOT = Path(__file__).resolve().parents[2]
XID = "Jun  1 10:41:15 gpu-l02 kernel: NVRM: Xid (PCI:0000:9a:00): 79, pid=1, name=python, GPU has fallen off the bus."
LOKI_NODES = ["gpu-l01", "gpu-l02"]
LOKI_START, LOKI_END = "2026-06-01T10:30:00Z", "2026-06-01T10:45:00Z"


def report_of(result: dict, connector: str) -> dict:
    return next(r for r in result["connector_reports"] if r["connector"] == connector)


# -- Loki ----------------------------------------------------------------------------------------------------------
@pytest.fixture
def loki() -> Iterator[tuple[LokiTestServer, FaultProxy]]:
    server = LokiTestServer()
    entries = [[str(1780310100_000_000_000 + i * 10**9), f"Jun  1 10:35:{i % 60:02d} gpu-l01 cron[{i}]: tick"]
               for i in range(9)]
    httpx.post(f"{server.url}/loki/api/v1/push", json={"streams": [
        {"stream": {"hostname": "gpu-l01", "job": "syslog"}, "values": entries},
        {"stream": {"hostname": "gpu-l02", "job": "syslog"}, "values": [["1780310475000000000", XID]]}]}).raise_for_status()
    proxy = FaultProxy(server.url)
    yield server, proxy
    proxy.stop()
    server.stop()


def _loki_run(tmp_path: Path, capsys: pytest.CaptureFixture[str], url: str, *options: str) -> tuple[int, dict, str]:
    workload = make_workload(tmp_path, f"loki-{random.randrange(10**9)}", LOKI_NODES, LOKI_START, LOKI_END,
                             files={"gpu-l01/applog": ["2026-06-01T10:40:00Z [rank0]: step 10 loss 2.0"]})
    code, results, err = run_blueprint(["--configs", str(workload), "--connector", "logs", "loki", "url", url,
                                        "limit", "4", *options], capsys)
    assert len(results) == 1, err
    return code, results[0], err


@pytest.mark.parametrize("faults", [[429, 500, 503], ["truncate"], [500, "truncate", 502], [2.0]],
                         ids=["statuses", "truncated body", "mixed", "slow but within the timeout"])
def test_loki_transient_faults_are_retried_and_nothing_is_lost(loki, tmp_path: Path, faults: list,
                                                               capsys: pytest.CaptureFixture[str]) -> None:
    server, proxy = loki
    proxy.faults = list(faults)
    code, result, err = _loki_run(tmp_path, capsys, proxy.url, "retries", "3", "timeout", "5s")
    assert code == 0, err
    report = report_of(result, "loki")
    assert report["status"] == "ok" and report["observation_count"] == 10, report   # every entry, once
    assert [c["node"] for c in result["diagnosis"]["culprit_nodes"]] == ["gpu-l02"]
    assert not proxy.faults


@pytest.mark.parametrize("faults,reason", [
    (["garbage"], "not JSON"),
    ([500, 500, 500], "gave up after 3 attempts"),
    ([3.0, 3.0, 3.0], "ReadTimeout"),
], ids=["truncated JSON", "500 until the retries run out", "timeouts until the retries run out"])
def test_loki_lasting_faults_are_reported_and_the_run_goes_on(loki, tmp_path: Path, faults: list, reason: str,
                                                              capsys: pytest.CaptureFixture[str]) -> None:
    server, proxy = loki
    proxy.faults = list(faults)
    code, result, err = _loki_run(tmp_path, capsys, proxy.url, "retries", "2", "timeout", "1s")
    assert code == 0, err                    # a collector error is in the report, not a failed workload
    report = report_of(result, "loki")
    assert report["status"] == "error" and reason in report["reason"], report
    assert result["diagnosis"] is not None and report_of(result, "static")["status"] == "ok"
    assert "collector error logs loki: 1 workload" in err


@pytest.mark.parametrize("fault", ["trickle", "trickle_headers"])
def test_loki_answers_that_trickle_are_cut_at_the_request_deadline(loki, tmp_path: Path, fault: str,
                                                                   capsys: pytest.CaptureFixture[str]) -> None:
    """A server sending a byte every 0.5 s (of the body, or of endless headers) never goes silent long enough for
    an idle timeout; the request's total deadline (`timeout 1s`) cuts each attempt. Were it only an idle timeout,
    the collector would run until `--collect-timeout` abandoned it, with that reason instead."""
    server, proxy = loki
    proxy.faults = [fault] * 3
    code, result, err = _loki_run(tmp_path, capsys, proxy.url, "retries", "2", "timeout", "1s",
                                  "collect_timeout", "120s")
    report = report_of(result, "loki")
    assert report["status"] == "error" and "ReadTimeout" in report["reason"] and "gave up after 3" in report["reason"]
    assert result["diagnosis"]["coverage"]["partial"] is True
    assert any(issue.startswith("logs loki: ") for issue in result["diagnosis"]["coverage"]["issues"])


def test_a_huge_loki_answer_is_abandoned_at_the_size_cap(loki, tmp_path: Path,
                                                         capsys: pytest.CaptureFixture[str]) -> None:
    """An answer that never ends (4 GiB declared) is read only up to `max_answer` (1 MiB here): the report is an
    error saying so, it is not retried, the result is partial and the rest of the workload is attributed."""
    server, proxy = loki
    proxy.faults = ["huge"]
    code, result, err = _loki_run(tmp_path, capsys, proxy.url, "max_answer", "1", "retries", "2")
    report = report_of(result, "loki")
    assert report["status"] == "error" and "larger than 1 MiB" in report["reason"], report
    assert proxy.requests == 1 and proxy.huge_bytes_sent < 64 * 2**20      # abandoned, not read to the end
    assert result["diagnosis"] is not None and result["diagnosis"]["coverage"]["partial"] is True


def test_loki_failing_mid_pagination_keeps_the_pages_delivered(loki, tmp_path: Path,
                                                               capsys: pytest.CaptureFixture[str]) -> None:
    server, proxy = loki
    proxy.faults = [None, None, 500, 500]
    code, result, err = _loki_run(tmp_path, capsys, proxy.url, "retries", "1", "timeout", "5s")
    report = report_of(result, "loki")
    # page 1: entries 1-4; page 2 starts at the 4th entry's time: entries 5-7 are new; page 3 fails for good
    assert code == 0 and report["status"] == "error" and report["observation_count"] == 7, report
    origins = {(s["node"], s["source"]): s["observations"] for s in result["diagnosis"]["coverage"]["sources"]}
    assert origins[("gpu-l01", "syslog")] == 7   # what was delivered before the failure is in the diagnosis


# -- Prometheus ------------------------------------------------------------------------------------------------------
@pytest.fixture
def prometheus() -> Iterator[FaultProxy]:
    """The real Prometheus of tests/support/setup-prometheus.sh behind the fault proxy (fails when it is down)."""
    try:
        httpx.get(f"{PROMETHEUS_URL}/-/ready", timeout=5).raise_for_status()
    except httpx.HTTPError as exc:
        pytest.fail(f"Prometheus is not running (run tests/support/setup-prometheus.sh): {exc!r}")
    proxy = FaultProxy(PROMETHEUS_URL)
    yield proxy
    proxy.stop()


def _promql(url: str, *options: str) -> tuple[list, PromqlCollector, str | None]:
    collector = PromqlCollector(spec_from_words(["metrics", "promql", "url", url, "defaults", "off",
                                                 "query", 'xid=DCGM_FI_DEV_XID_ERRORS{Hostname=~"$nodes"}',
                                                 "query", 'temp=DCGM_FI_DEV_GPU_TEMP{Hostname=~"$nodes"}',
                                                 *options]), timedelta(minutes=10))
    collector.client.backoff = 0.05
    ctx = ExecutionContext(workload_id="w", nodes=["gpu-p01", "gpu-p02"], start_time="2026-06-01T10:30:00Z",
                           end_time="2026-06-01T10:50:00Z")
    batches: list = []
    try:
        for batch in collector.collect(ctx):
            batches.append(batch)
    except Exception as exc:  # noqa: BLE001 - the test looks at what it was
        return batches, collector, f"{exc.__class__.__name__}: {exc}"
    return batches, collector, None


@pytest.mark.parametrize("faults", [[429, 500, 503], ["truncate", "truncate"], [1.5]],
                         ids=["statuses", "truncated bodies", "slow"])
def test_prometheus_transient_faults_are_retried(prometheus: FaultProxy, faults: list) -> None:
    clean, _, error = _promql(PROMETHEUS_URL)
    assert error is None
    prometheus.faults = list(faults)
    batches, collector, error = _promql(prometheus.url, "retries", "3", "timeout", "5s")
    assert error is None and not prometheus.faults
    assert [b.result for b in batches] == [b.result for b in clean]    # the same series, none lost or doubled
    assert collector.client.retried == sum(1 for f in faults if not isinstance(f, float))


@pytest.mark.parametrize("faults,reason", [
    (["garbage"], "not JSON"), ([500, 500], "gave up after 2 attempts"), ([2.0, 2.0], "ReadTimeout"),
    (["trickle", "trickle"], "ReadTimeout"), (["huge"], "the answer is larger than 1 MiB")])
def test_prometheus_lasting_faults_fail_one_query_and_the_others_are_delivered(prometheus: FaultProxy, faults: list,
                                                                               reason: str) -> None:
    """Including a body trickled a byte every 0.5 s (cut at the 1 s request deadline) and an endless answer (cut
    at `max_answer`, not retried)."""
    prometheus.faults = list(faults)
    batches, _, error = _promql(prometheus.url, "retries", "1", "timeout", "1s", "max_answer", "1")
    assert error is not None and "CollectorError" in error and "1 of 2 queries failed" in error and reason in error
    assert [b.origin for b in batches] == ["promql:temp"]               # the second query still delivered


# -- the service killed mid-run --------------------------------------------------------------------------------------
def _workloads(root: Path, copies: int) -> Path:
    """`copies` renamed copies of every bundled sample (a static workload is identified by its directory)."""
    names = sorted(p.name for p in SAMPLES.iterdir() if (p / "scenario.toml").is_file())
    for i in range(copies):
        for name in names:
            target = root / f"{name}-{i:03d}"
            shutil.copytree(SAMPLES / name, target)
            scenario = target / "scenario.toml"
            scenario.write_text(scenario.read_text().replace(f'id = "{name}"', f'id = "{name}-{i:03d}"', 1))
    return root


def _serve(port: int, log: Path) -> subprocess.Popen[bytes]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("FIRSTFAULT_")}
    with open(log, "ab") as out:
        process = subprocess.Popen([sys.executable, "-m", "firstfault", "serve", "--port", str(port),
                                    "--log-level", "warning"], stdout=out, stderr=subprocess.STDOUT, env=env)
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        try:
            if httpx.get(f"http://127.0.0.1:{port}/v2/healthz", timeout=1).status_code == 200:
                return process
        except httpx.TransportError:
            pass
        time.sleep(0.1)
    process.kill()
    raise AssertionError(f"the service did not start: {log.read_text()[-2000:]}")


def _blueprint(argv: list[str], log: Path) -> subprocess.Popen[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("FIRSTFAULT_")}
    with open(log, "a") as err:
        return subprocess.Popen([sys.executable, "-m", "firstfault", "blueprint", "--no-progress", *argv],
                                stdout=subprocess.DEVNULL, stderr=err, text=True, env=env, cwd=ROOT)


def _runs(db: Path) -> list[tuple[str, str]]:
    """(workload_id, status) of every attribution run, oldest first."""
    if not db.exists():
        return []
    try:
        with sqlite3.connect(db, timeout=10) as con:
            return con.execute("SELECT a.workload_id, r.status FROM attribution_runs r "
                               "JOIN workload_attempts a ON a.id = r.attempt_id ORDER BY r.id").fetchall()
    except sqlite3.OperationalError:      # not created yet
        return []


def _wait(what: str, check, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if check():
            return
        time.sleep(0.05)
    raise AssertionError(f"timed out waiting for {what}")


def test_the_service_killed_mid_run(tmp_path: Path, record: Record) -> None:
    """The service is killed with SIGKILL while the Blueprint works through 25 workloads, and restarted a few
    seconds later. Workloads in flight or attempted while it is down are retried, then recorded as failed to
    attribute; the run goes on and the others are attributed. A rerun attributes exactly the failed ones."""
    workloads = _workloads(tmp_path / "w", 5)
    total = len(list(workloads.iterdir()))
    db, log = tmp_path / "r.db", tmp_path / "blueprint.log"
    port = free_port()
    service = _serve(port, tmp_path / "service.log")
    argv = ["--configs", str(workloads), "--connector", "attribution", "service_url", f"http://127.0.0.1:{port}",
            "retries", "1", "timeout", "10s", "--connector", "output", "sqlite", "path", str(db)]
    blueprint = _blueprint(argv, log)
    try:
        _wait("a few workloads attributed", lambda: sum(s == "ok" for _, s in _runs(db)) >= 3, 120)
        service.send_signal(signal.SIGKILL)
        service.wait()
        _wait("workloads failing while the service is down", lambda: sum(s == "error" for _, s in _runs(db)) >= 2, 120)
        service = _serve(port, tmp_path / "service.log")
        assert blueprint.wait(timeout=300) == 1                      # some workloads failed: exit status 1
    finally:
        for process in (blueprint, service):
            if process.poll() is None:
                process.kill()
    first = _runs(db)
    ok = {w for w, s in first if s == "ok"}
    failed = {w for w, s in first if s == "error"}
    assert len(first) == total and ok | failed == {p.name for p in workloads.iterdir()} and not ok & failed
    assert f"{len(ok)} attributed, 0 skipped (already attributed), {len(failed)} failed" in log.read_text()
    with sqlite3.connect(db) as con:
        errors = [e for (e,) in con.execute("SELECT error FROM attribution_runs WHERE status = 'error'")]
    assert all(e.startswith("service:") for e in errors), errors
    assert any("gave up after 2 attempts" in e or "session_not_found" in e for e in errors), errors
    # the rerun completes exactly the missing work
    service = _serve(port, tmp_path / "service.log")
    try:
        rerun = subprocess.run([sys.executable, "-m", "firstfault", "blueprint", "--no-progress", *argv],
                               capture_output=True, text=True, timeout=300, cwd=ROOT, check=False)
    finally:
        service.kill()
    assert rerun.returncode == 0, rerun.stderr[-2000:]
    assert f"{len(failed)} attributed, {len(ok)} skipped" in rerun.stderr
    second = _runs(db)[len(first):]
    assert sorted(w for w, _ in second) == sorted(failed) and all(s == "ok" for _, s in second)
    record(workloads=total, attributed_before_the_kill_and_after_the_restart=len(ok), failed=len(failed))


# -- the Blueprint killed with SIGKILL mid-write ---------------------------------------------------------------------
def check_consistent(db: Path) -> int:
    """The SQLite invariants a crash must not break; returns how many runs are committed."""
    with sqlite3.connect(db, timeout=10) as con:
        assert con.execute("PRAGMA integrity_check").fetchone()[0] == "ok"
        assert con.execute("PRAGMA foreign_key_check").fetchall() == []
        attempts = con.execute("SELECT id, nodes_json, latest_run_id FROM workload_attempts").fetchall()
        runs = con.execute("SELECT id, attempt_id, connector_reports_json, result_json FROM attribution_runs").fetchall()
        for attempt_id, nodes_json, latest in attempts:
            assert latest is not None                   # an attempt row exists only with its run
            (owner,) = con.execute("SELECT attempt_id FROM attribution_runs WHERE id = ?", (latest,)).fetchone()
            assert owner == attempt_id
            allocated = con.execute("SELECT COUNT(*) FROM run_nodes WHERE run_id = ? AND role = 'allocated'",
                                    (latest,)).fetchone()[0]
            assert allocated == len(json.loads(nodes_json))
        for run_id, _, reports, result in runs:
            assert con.execute("SELECT COUNT(*) FROM connector_reports WHERE run_id = ?", (run_id,)).fetchone()[0] \
                == len(json.loads(reports))
            json.loads(result)
        assert con.execute("SELECT COUNT(*) FROM workload_attempts WHERE latest_run_id NOT IN "
                           "(SELECT id FROM attribution_runs)").fetchone()[0] == 0
        return len(runs)


def _sigkill_rounds(tmp_path: Path, record: Record, copies: int, rounds: int) -> None:
    workloads = _workloads(tmp_path / "w", copies)
    total = len(list(workloads.iterdir()))
    db = tmp_path / "r.db"
    argv = ["--configs", str(workloads), "--connector", "output", "sqlite", "path", str(db)]
    marker = tmp_path / "marker"
    rng = random.Random(20260302)
    committed: list[int] = []
    mid_write = 0
    for round_ in range(rounds):
        if len(_runs(db)) == total:
            break
        marker.write_bytes(b"")
        # the Blueprint with every SQLite write held open for 0.2 s, saying `inside` in MARKER each time
        process = subprocess.Popen([sys.executable, "-m", "tests.reliability.scripts.slow_writes", str(marker), *argv],
                                   stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, cwd=ROOT)
        inside = 1 + rng.randrange(3)         # kill inside the 1st, 2nd or 3rd write of this round
        _wait("a write to begin", lambda inside=inside, process=process: marker.read_bytes().count(b"inside") >= inside
              or process.poll() is not None, 120)
        if round_ % 2:
            time.sleep(rng.uniform(0.0, 0.3))  # every other round: a moment later, inside or between writes
        process.send_signal(signal.SIGKILL)
        process.wait()
        before = committed[-1] if committed else 0
        committed.append(check_consistent(db))
        if round_ % 2 == 0 and process.returncode == -signal.SIGKILL:
            began = marker.read_bytes().count(b"inside")
            assert committed[-1] - before == began - 1   # killed inside its last write: that run is not there
            mid_write += 1
    final = subprocess.run([sys.executable, "-m", "firstfault", "blueprint", "--no-progress", *argv],
                           capture_output=True, text=True, timeout=600, cwd=ROOT, check=False)
    assert final.returncode == 0, final.stderr[-2000:]
    done = committed[-1] if committed else 0
    assert f"{total - done} attributed, {done} skipped" in final.stderr   # exactly the missing work
    assert check_consistent(db) == total
    with sqlite3.connect(db) as con:                                        # one run per workload: none twice
        assert con.execute("SELECT COUNT(*), COUNT(DISTINCT attempt_id) FROM attribution_runs").fetchone() == (total, total)
        assert con.execute("SELECT COUNT(*) FROM attribution_runs WHERE status != 'ok'").fetchone()[0] == 0
    assert mid_write >= 1
    record(workloads=total, kills=len(committed), killed_inside_a_write=mid_write, committed_after_each_kill=committed)


def test_the_blueprint_killed_mid_write_leaves_sqlite_consistent(tmp_path: Path, record: Record) -> None:
    _sigkill_rounds(tmp_path, record, copies=4, rounds=3)


@pytest.mark.long
def test_the_blueprint_killed_mid_write_many_times(tmp_path: Path, record: Record) -> None:
    _sigkill_rounds(tmp_path, record, copies=40, rounds=40)


# -- sacct and kubectl missing or failing ----------------------------------------------------------------------------
def fake(tmp_path: Path, name: str, body: str) -> str:
    script = tmp_path / name
    script.write_text("#!/bin/sh\n" + body + "\n")
    script.chmod(script.stat().st_mode | stat.S_IXUSR)
    return str(script)


@pytest.mark.parametrize("sacct,problem", [
    ("/nonexistent/sacct", "No such file"),
    ("fail", "exit 1: sacct: error: Problem talking to the database: Connection refused"),
    ("hang", "timed out"),
    ("garbage", "not JSON"),
    ("not-a-job-list", "no list of jobs"),
], ids=["missing", "failing", "hanging", "garbage", "unexpected JSON"])
def test_sacct_missing_or_failing_is_a_reported_problem(tmp_path: Path, sacct: str, problem: str,
                                                        capsys: pytest.CaptureFixture[str]) -> None:
    bodies = {"fail": 'echo "sacct: error: Problem talking to the database: Connection refused" >&2; exit 1',
              "hang": "exec sleep 60", "garbage": 'echo "{\\"jobs\\": ["', "not-a-job-list": 'echo "[1, 2]"'}
    command = fake(tmp_path, "sacct", bodies[sacct]) if sacct in bodies else sacct
    scontrol = fake(tmp_path, "scontrol", "exit 1")
    started = time.monotonic()
    code, results, err = run_blueprint(["--configs", str(SAMPLES / "nvlink-walkthrough"),
                                        "--connector", "context", "slurm", "since", "1h", "sacct", command,
                                        "scontrol", scontrol, "timeout", "2s"], capsys)
    assert code == 1 and "problem" in err and "context slurm" in err and problem in " ".join(err.split())
    assert "Traceback" not in err
    assert [r["context"]["workload_id"] for r in results] == ["nvlink-walkthrough"]   # the other context still ran
    assert time.monotonic() - started < 30


def test_a_bad_accounting_record_is_skipped_and_the_others_discovered(tmp_path: Path,
                                                                      capsys: pytest.CaptureFixture[str]) -> None:
    good = {"job_id": 7, "name": "train", "user": "u", "cluster": "c", "nodes": "gpu[1-2]",
            "state": {"current": ["FAILED"], "reason": "None"},
            "time": {"start": {"set": True, "infinite": False, "number": 1780300000},
                     "end": {"set": True, "infinite": False, "number": 1780303600}},
            "exit_code": {"return_code": {"set": True, "infinite": False, "number": 1}}}
    bad = {**good, "job_id": 8, "nodes": "gpu[1-"}
    doc = tmp_path / "sacct.json"
    doc.write_text(json.dumps({"jobs": [bad, good]}))
    sacct = fake(tmp_path, "sacct", f'cat "{doc}"')
    code, results, err = run_blueprint(["--connector", "context", "slurm", "since", "1h", "sacct", sacct,
                                        "scontrol", fake(tmp_path, "scontrol", "exit 1")], capsys)
    assert code == 1 and "job '8'" in " ".join(err.split()) and "unbalanced brackets" in err
    assert [r["context"]["job_id"] for r in results] == ["7"]


@pytest.mark.parametrize("kubectl,problem", [
    ("/nonexistent/kubectl", "No such file"), ("fail", "exit 1"), ("hang", "timed out")],
    ids=["missing", "failing", "hanging"])
def test_kubectl_missing_or_failing_is_a_reported_problem(tmp_path: Path, kubectl: str, problem: str,
                                                          capsys: pytest.CaptureFixture[str]) -> None:
    bodies = {"fail": 'echo "error: You must be logged in to the server (Unauthorized)" >&2; exit 1',
              "hang": "exec sleep 60"}
    command = fake(tmp_path, "kubectl", bodies[kubectl]) if kubectl in bodies else kubectl
    code, results, err = run_blueprint(["--configs", str(SAMPLES / "nvlink-walkthrough"),
                                        "--connector", "context", "kueue", "kubectl", command, "timeout", "2s"], capsys)
    assert code == 1 and "context kueue" in err and problem in " ".join(err.split()) and "Traceback" not in err
    assert len(results) == 1


def test_pod_logs_with_kubectl_failing_are_a_collector_error(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    workload = make_workload(tmp_path, "k8s-job", ["gpu-k01"], "2026-06-01T10:30:00Z", "2026-06-01T10:50:00Z",
                             scheduler="kubernetes", files={"gpu-k01/syslog": [XID.replace("gpu-l02", "gpu-k01")]})
    scenario = workload / "scenario.toml"
    scenario.write_text(scenario.read_text() + '[workload.metadata]\nnamespace = "ml"\npods = "trainer-0"\n')
    kubectl = fake(tmp_path, "kubectl", 'echo "error: the server doesn\'t have a resource type pods" >&2; exit 1')
    code, (result,), err = run_blueprint(["--configs", str(workload), "--connector", "logs", "k8s", "kubectl", kubectl,
                                          "timeout", "2s"], capsys)
    assert code == 0, err
    report = report_of(result, "k8s")
    assert report["status"] == "error" and "resource type pods" in report["reason"]
    assert [c["node"] for c in result["diagnosis"]["culprit_nodes"]] == ["gpu-k01"]


# -- a collector that hangs ------------------------------------------------------------------------------------------
class HangingCollector:
    """A collector that delivers one batch, then blocks for ever (a hung mount, a stuck client library)."""

    kind = "logs"
    OPTIONS = ("label",)
    released = threading.Event()

    def __init__(self, spec, margin) -> None:
        self.label = spec.label

    def applies(self, ctx: ExecutionContext) -> bool:
        return True

    def collect(self, ctx: ExecutionContext):
        yield LineBatch("node-02", SourceKind.SYSLOG, "hung.log", [
            "Mar  2 08:57:40 node-02 kernel: NVRM: Xid (PCI:0018:01:00): 79, pid=1, name=x, GPU has fallen off the bus."])
        self.released.wait()
        yield LineBatch("node-01", SourceKind.SYSLOG, "hung.log", ["never delivered"])


def test_a_hung_collector_is_abandoned_at_its_deadline(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(COLLECTORS, ("logs", "hang"), HangingCollector)
    started = time.monotonic()
    try:
        code, (result,), err = run_blueprint(["--configs", str(SAMPLES / "nvlink-walkthrough"),
                                              "--collect-timeout", "1s", "--connector", "logs", "hang"], capsys)
        elapsed = time.monotonic() - started
    finally:
        HangingCollector.released.set()
    assert code == 0, err
    report = report_of(result, "hang")
    assert report["status"] == "error" and "timed out after 1 s" in report["reason"]
    assert report["observation_count"] == 1                               # what it delivered before is kept
    assert any(s["symptom"] == "XID-79" and s["node"] == "node-02" for s in result["diagnosis"]["symptoms"])
    assert elapsed < 20


def test_a_server_that_never_answers_is_cut_at_the_collector_deadline(loki, tmp_path: Path,
                                                                      capsys: pytest.CaptureFixture[str]) -> None:
    """Each request may wait 60 s (and be retried); the collector as a whole gets 2 s (its `collect_timeout`)."""
    server, proxy = loki
    proxy.faults = ["hang"] * 10
    started = time.monotonic()
    code, result, err = _loki_run(tmp_path, capsys, proxy.url, "timeout", "60s", "retries", "4",
                                  "collect_timeout", "2s")
    assert code == 0, err
    report = report_of(result, "loki")
    assert report["status"] == "error" and "timed out after 2 s" in report["reason"]
    assert time.monotonic() - started < 20 and result["diagnosis"] is not None
