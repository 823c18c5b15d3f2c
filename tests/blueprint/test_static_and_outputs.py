"""Static workloads (the bundled samples) into SQLite, embedded and through the v2 HTTP API; SQLite behaviour."""

from __future__ import annotations

import json
import shutil
import sqlite3
import subprocess
import sys
from pathlib import Path

import httpx
import pytest
from blueprint_helpers import free_port, run_blueprint, wait_for
from service_stub import ServiceStub

from firstfault.blueprint import resultsdb
from firstfault.blueprint.attribution import EmbeddedAttributor, ServiceAttributor
from firstfault.blueprint.base import LineBatch
from firstfault.blueprint.outputs import sqlite as sqlite_output
from firstfault.engine import ExecutionContext, SourceKind
from firstfault.errors import AttributionError, CollectorError
from firstfault.samples import samples_root

SAMPLES = samples_root()


def _diagnoses(db: Path) -> dict[str, dict]:
    with sqlite3.connect(db) as con:
        rows = con.execute("SELECT a.workload_id, r.result_json FROM workload_attempts a "
                           "JOIN attribution_runs r ON r.id = a.latest_run_id").fetchall()
    return {workload: json.loads(result)["diagnosis"] for workload, result in rows}


@pytest.fixture
def service() -> ServiceStub:
    stub = ServiceStub(token="s3cret")
    yield stub
    stub.stop()


def test_samples_embedded_into_sqlite(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    db = tmp_path / "r.db"
    code, _, err = run_blueprint(["--configs", str(SAMPLES), "--connector", "output", "db", "sqlite", "path", str(db)],
                                 capsys)
    assert code == 0, err
    diagnoses = _diagnoses(db)
    assert set(diagnoses) == {p.name for p in SAMPLES.iterdir() if (p / "scenario.toml").exists()}
    nvlink = diagnoses["nvlink-walkthrough"]
    assert nvlink["sub_domain"] == "nvlink" and [c["node"] for c in nvlink["culprit_nodes"]] == ["node-02"]
    xid = diagnoses["xid79-fallen-off-bus"]
    assert xid["sub_domain"] == "gpu" and [c["node"] for c in xid["culprit_nodes"]] == ["gpu-a03"]
    assert "5 attributed" in err
    with sqlite3.connect(db) as con:
        assert con.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
        assert con.execute("SELECT MAX(version) FROM schema_migrations").fetchone()[0] == sqlite_output.SCHEMA_VERSION
        assert con.execute("SELECT node FROM run_nodes WHERE role = 'culprit' ORDER BY node").fetchall() == \
            [("gpu-a03",), ("node-02",)]
        reports = con.execute("SELECT DISTINCT connector, kind, status FROM connector_reports").fetchall()
        assert sorted(reports) == [("static", "context", "ok"), ("static", "logs", "ok")]


def test_service_retries_reuse_the_idempotency_key(service: ServiceStub) -> None:
    ctx = ExecutionContext(workload_id="w", nodes=["n1"])
    line = "Feb 12 00:52:07 n1 kernel: NVRM: Xid (PCI:0000:9a:00): 79, pid=1, name=python, GPU has fallen off the bus."
    batch = LineBatch("n1", SourceKind.SYSLOG, "x.log", [line])
    client = ServiceAttributor(service.url, token="s3cret", timeout=5, retries=3)
    client.client.sleep = lambda _s: None
    session = client.open(ctx)
    service.fail_after_ingest = 2      # applied, but answered 503: the client must retry with the same key
    session.add(batch)
    assert service.applied == 1
    assert client.client.retried == 2
    result = session.attribute()
    assert result.workload.workload_id == "w"
    session.close()


def test_service_errors_are_reported(tmp_path: Path, service: ServiceStub, capsys: pytest.CaptureFixture[str]) -> None:
    client = ServiceAttributor(service.url, token="wrong", timeout=5, retries=0)
    with pytest.raises(AttributionError, match="unauthorized"):
        client.open(ExecutionContext(workload_id="w"))
    db = tmp_path / "r.db"
    code, _, err = run_blueprint(["--configs", str(SAMPLES / "nvlink-walkthrough"),
                                  "--connector", "attribution", "service_url", "http://127.0.0.1:9", "retries", "0",
                                  "--connector", "output", "db", "sqlite", "path", str(db)], capsys)
    assert code == 1 and "1 failed" in err
    with sqlite3.connect(db) as con:
        status, error = con.execute("SELECT status, error FROM attribution_runs").fetchone()
    assert status == "error" and "service" in error


def test_rerun_skips_and_force_keeps_history(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    db = tmp_path / "r.db"
    argv = ["--configs", str(SAMPLES / "nvlink-walkthrough"), "--connector", "output", "db", "sqlite", "path", str(db),
            "--connector", "output", "stdout"]
    assert len(run_blueprint(argv, capsys)[1]) == 1
    code, lines, err = run_blueprint(argv, capsys)
    assert code == 0 and lines == [] and "1 skipped" in err
    code, lines, _ = run_blueprint([*argv, "--force"], capsys)
    assert len(lines) == 1
    with sqlite3.connect(db) as con:
        assert con.execute("SELECT COUNT(*) FROM workload_attempts").fetchone()[0] == 1
        runs = con.execute("SELECT id FROM attribution_runs ORDER BY id").fetchall()
        latest = con.execute("SELECT latest_run_id FROM workload_attempts").fetchone()[0]
    assert len(runs) == 2 and latest == runs[-1][0]


def test_a_failed_write_leaves_no_half_written_run(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    db = tmp_path / "r.db"
    argv = ["--configs", str(SAMPLES / "nvlink-walkthrough"), "--connector", "output", "db", "sqlite", "path", str(db)]

    def crash(*_args: object) -> set[tuple[str, str]]:
        raise RuntimeError("power cut")

    monkeypatch.setattr(resultsdb, "run_nodes", crash)   # fails after the attempt and run rows were inserted
    code, _, err = run_blueprint(argv, capsys)
    assert code == 1 and "power cut" in err
    with sqlite3.connect(db) as con:
        assert con.execute("SELECT COUNT(*) FROM workload_attempts").fetchone()[0] == 0
        assert con.execute("SELECT COUNT(*) FROM attribution_runs").fetchone()[0] == 0
    monkeypatch.undo()
    code, _, err = run_blueprint(argv, capsys)     # and the next run attributes it normally: the failed run gave
    assert code == 0 and "1 attributed" in err    # its claim back


def test_a_newer_schema_is_refused(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    db = tmp_path / "r.db"
    sqlite_output.connect(db).close()
    with sqlite3.connect(db) as con:
        con.execute("INSERT INTO schema_migrations VALUES (999, 'future', 'x')")
    code, _, err = run_blueprint(["--configs", str(SAMPLES), "--connector", "output", "sqlite", "path", str(db)], capsys)
    assert code == 2 and "schema version 999" in err


def test_stdout_lines_are_blueprint_results(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    workloads = tmp_path / "w"
    shutil.copytree(SAMPLES / "xid79-fallen-off-bus", workloads / "xid79")
    (workloads / "broken").mkdir()
    (workloads / "broken" / "scenario.toml").write_text("not toml [", encoding="utf-8")
    code, lines, err = run_blueprint(["--configs", str(workloads)], capsys)
    # reported (the summary table wraps long paths, so whitespace is normalised); the good workload still done
    assert code == 1 and "cannot be read as TOML" in " ".join(err.split())
    (result,) = lines
    assert set(result) >= {"context", "diagnosis", "connector_reports", "timings", "catalog_hash", "mode"}
    assert result["catalog_hash"] == result["diagnosis"]["catalog_hash"] and result["mode"] == "embedded"
    assert result["timings"]["total_s"] >= result["timings"]["collect_s"]


@pytest.fixture(scope="module")
def real_service() -> str:
    """`firstfault serve` in a subprocess on a free port."""
    port = free_port()
    server = subprocess.Popen([sys.executable, "-m", "firstfault", "serve", "--port", str(port)],
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    url = f"http://127.0.0.1:{port}"
    try:
        wait_for("the service", lambda: _healthy(url), 60)
        yield url
    finally:
        server.terminate()
        server.wait(timeout=10)


def _healthy(url: str) -> bool:
    try:
        return httpx.get(f"{url}/v2/healthz", timeout=2).status_code == 200
    except httpx.HTTPError:
        return False


def test_samples_through_the_service_give_identical_diagnoses(real_service: str, tmp_path: Path,
                                                              capsys: pytest.CaptureFixture[str]) -> None:
    embedded, remote = tmp_path / "embedded.db", tmp_path / "service.db"
    assert run_blueprint(["--configs", str(SAMPLES), "--connector", "output", "db", "sqlite", "path",
                          str(embedded)], capsys)[0] == 0
    code, _, err = run_blueprint(["--configs", str(SAMPLES), "--connector", "attribution", "service_url", real_service,
                                  "--workers", "3", "--connector", "output", "db", "sqlite", "path", str(remote)],
                                 capsys)
    assert code == 0, err
    assert _diagnoses(embedded) == _diagnoses(remote)
    with sqlite3.connect(remote) as con:
        assert {m for (m,) in con.execute("SELECT mode FROM attribution_runs")} == {"service"}


def test_a_rejected_batch_is_the_collectors_error_on_both_paths(real_service: str) -> None:
    ctx = ExecutionContext(workload_id="w", nodes=["n1"])
    bad = LineBatch("n1", SourceKind.NODE_METRICS, "x", ["not a line source"])
    remote = ServiceAttributor(real_service, token=None, timeout=10, retries=0).open(ctx)
    embedded = EmbeddedAttributor().open(ctx)
    for session in (remote, embedded):
        with pytest.raises(CollectorError, match="rejected a batch"):
            session.add(bad)
        session.close()
