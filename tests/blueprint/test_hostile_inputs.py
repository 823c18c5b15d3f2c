"""Hostile inputs at the Blueprint's edges (issue 14): a bad line in one node's file, a bad workload among good
ones, job-accounting paths outside the allowed roots, HTTP answers that are huge or trickle, option-like names."""

from __future__ import annotations

import json
import os
import sqlite3
from pathlib import Path

import pytest
from blueprint_helpers import make_workload, run_blueprint

XID = "kernel: [794287.441000] NVRM: Xid (PCI:0000:9a:00): 79, pid='<unknown>', name=<unknown>, GPU has fallen off the bus."
START, END = "2026-03-02T08:30:00Z", "2026-03-02T09:30:00Z"


def _latest_status(db: Path) -> list[tuple[str, str]]:
    with sqlite3.connect(db) as conn:
        return conn.execute("SELECT workload_id, status FROM latest_attributions ORDER BY 1").fetchall()


@pytest.mark.parametrize("bad_line", [
    b"9999-12-31T23:59:30Z n1 app: the end of time\n",
    b"9999-12-31T23:59:30-05:00 n1 app: past the end of time\n",
    b"2150-01-01T00:00:00Z n1 app: long after the file was written\n",
    b"2026-03-02T08:40:00Z n1 app: \xff\xfe\xc0 undecodable \xed\xa0\x80\n",
])
def test_a_bad_line_in_one_nodes_file_hides_no_other_nodes_xid(tmp_path: Path, bad_line: bytes,
                                                               capsys: pytest.CaptureFixture[str]) -> None:
    """n1's syslog (read with a window, so every stamp is parsed) holds a line stamped at the edge of the
    calendar, or long after the file was written; n2's syslog holds the Xid. Every line of both nodes is read
    (a stamp like these used to end n1's reading, or raise), and the workload is attributed to n2. The line
    stamped after its file was written is named: the result is partial with an issue naming n1's file, stored as
    `partial`, not `ok`, and a rerun attributes it again."""
    root = tmp_path / "logs"
    for node, lines in (("n1", [b"2026-03-02T08:35:00Z n1 systemd[1]: Started Session 1.\n", bad_line,
                                b"2026-03-02T08:45:00Z n1 systemd[1]: Started Session 2.\n"]),
                        ("n2", [f"2026-03-02T08:41:15Z n2 {XID}\n".encode()])):
        (root / node).mkdir(parents=True)
        (root / node / "syslog").write_bytes(b"".join(lines))
    workloads = tmp_path / "workloads"
    make_workload(workloads, "w1", ["n1", "n2"], START, END)
    db = tmp_path / "results.db"
    argv = ["--configs", str(workloads), "--connector", "logs", "files", "label", "syslog", "syslog",
            f"{root}/{{node}}/syslog", "--connector", "output", "stdout",
            "--connector", "output", "sqlite", "path", str(db)]
    code, (result,), err = run_blueprint(argv, capsys)
    assert "Traceback" not in err
    diagnosis = result["diagnosis"]
    assert [c["node"] for c in diagnosis["culprit_nodes"]] == ["n2"]
    assert diagnosis["root_cause"]["symptom"] == "XID-79"
    reports = {r["connector"]: r for r in result["connector_reports"] if r["kind"] == "logs"}
    assert reports["syslog"]["nodes"] == ["n1", "n2"]
    assert reports["syslog"]["observation_count"] == 4      # n1's line after the bad one is read too
    if not bad_line.startswith(b"2150"):
        # undecodable bytes are replaced; a stamp outside the engine's window of sane times leaves its line
        # undated, which the engine reports only where it matters (a symptom): nothing is lost either way
        assert reports["syslog"]["status"] == "ok"
        assert _latest_status(db) == [("w1", "partial" if diagnosis["coverage"]["issues"] else "ok")]
        return
    # a sane time, but not for this file: it neither ends nor scopes the reading, and the collector says so
    assert reports["syslog"]["status"] == "error"
    assert f"{root}/n1/syslog: 1 line(s) with an untrusted timestamp" in reports["syslog"]["reason"]
    assert diagnosis["coverage"]["partial"] is True
    assert any(f"{root}/n1/syslog" in issue for issue in diagnosis["coverage"]["issues"]), diagnosis["coverage"]
    assert _latest_status(db) == [("w1", "partial")]
    code, (again,), err = run_blueprint(argv, capsys)      # not skipped: a partial run is attributed again
    assert "0 skipped" in err and again["context"]["workload_id"] == "w1"


def test_a_batch_the_engine_rejects_stops_only_that_batch(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                                         monkeypatch: pytest.MonkeyPatch) -> None:
    """The engine refusing one node's batch leaves the collector's other batches delivered."""
    from firstfault.blueprint import attribution
    from firstfault.errors import CollectorError

    real = attribution.ingest_batch

    def refuse_n1(session, batch):   # noqa: ANN001 - the engine's refusal of one batch
        if batch.node == "n1":
            raise CollectorError("the engine rejected a batch: crafted")
        real(session, batch)

    monkeypatch.setattr(attribution, "ingest_batch", refuse_n1)
    workloads = tmp_path / "workloads"
    make_workload(workloads, "w1", ["n1", "n2"], START, END, files={
        "n1/syslog": ["2026-03-02T08:35:00Z n1 systemd[1]: Started Session 1."],
        "n2/syslog": [f"2026-03-02T08:41:15Z n2 {XID}"]})
    code, (result,), err = run_blueprint(["--configs", str(workloads), "--connector", "output", "stdout"], capsys)
    (static,) = [r for r in result["connector_reports"] if r["kind"] == "logs"]
    assert static["status"] == "error" and "n1/syslog.log" in static["reason"] and "crafted" in static["reason"]
    assert static["nodes"] == ["n2"]
    assert [c["node"] for c in result["diagnosis"]["culprit_nodes"]] == ["n2"]
    assert result["diagnosis"]["coverage"]["partial"] is True


def test_a_version_1_database_is_migrated_and_its_partial_runs_attributed_again(tmp_path: Path) -> None:
    """Runs stored as `ok` with a failed collector or coverage issues before `partial` existed become `partial`
    (so the next run attributes them again); the other runs, and every reference to them, are kept."""
    from firstfault.blueprint.outputs.sqlite import connect
    from firstfault.blueprint.result import MIGRATIONS
    from firstfault.blueprint.resultsdb import statements as _statements

    db = tmp_path / "v1.db"
    with sqlite3.connect(db) as conn:
        for statement in _statements(MIGRATIONS[0][2]):
            conn.execute(statement)
        conn.execute("CREATE TABLE schema_migrations (version INTEGER PRIMARY KEY, description TEXT NOT NULL, "
                     "applied_at TEXT NOT NULL)")
        conn.execute("INSERT INTO schema_migrations VALUES (1, 'v1', '2026-01-01')")
        issues = '{"diagnosis": {"coverage": {"issues": ["n1/syslog.log: line 3: a time outside 1970-2200"]}}}'
        for number, failed, result in ((1, 0, "{}"), (2, 1, "{}"), (3, 0, issues)):
            conn.execute("INSERT INTO workload_attempts VALUES (?, ?, 0, 'none', '', '', NULL, NULL, '', '', '[]', "
                         "'{}', '2026-01-01', ?)", (number, f"w{number}", number))
            conn.execute("INSERT INTO attribution_runs VALUES (?, ?, '2026-01-01', 'ok', NULL, 'embedded', '', NULL, "
                         "NULL, NULL, NULL, NULL, '[]', ?, 0, 0, 0, '[]', ?)", (number, number, failed, result))
            conn.execute("INSERT INTO run_nodes VALUES (?, 'n1', 'allocated')", (number,))
    migrated = connect(db)
    assert migrated.execute("SELECT workload_id, status FROM latest_attributions ORDER BY 1").fetchall() == [
        ("w1", "ok"), ("w2", "partial"), ("w3", "partial")]
    assert migrated.execute("SELECT COUNT(*) FROM run_nodes").fetchone()[0] == 3
    assert migrated.execute("PRAGMA foreign_keys").fetchone()[0] == 1
    assert migrated.execute("PRAGMA foreign_key_check").fetchall() == []
    with pytest.raises(sqlite3.IntegrityError):     # the rebuilt table still refers to its attempts
        migrated.execute("INSERT INTO attribution_runs (attempt_id, attributed_at, status, mode, catalog_hash, "
                         "culprit_nodes_json, failed_connectors, collect_s, attribute_s, total_s, "
                         "connector_reports_json, result_json) VALUES (99, '', 'partial', '', '', '[]', 0, 0, 0, 0, "
                         "'[]', '{}')")


# -- item 6: one bad workload fails alone ------------------------------------------------------------------------
_BAD_WORKLOADS = {
    "metadata-not-a-table": 'metadata = "x"',
    "attempt-not-a-number": 'attempt = "x"',
    "start-not-a-time": "start_time = 5",
    "attempt-beyond-64-bits": f"attempt = {2**63}",
    "end-of-time": 'start_time = "9999-12-31T23:59:00Z"\nend_time = "9999-12-31T23:59:59Z"',
}


def test_one_bad_workload_fails_alone_and_the_others_are_attributed(tmp_path: Path,
                                                                   capsys: pytest.CaptureFixture[str]) -> None:
    """Each bad scenario.toml fails its own workload with a recorded reason naming it; the good workload in the
    same directory is attributed and stored; exit status 1 (a workload failed), never a traceback."""
    root = tmp_path / "workloads"
    make_workload(root, "good", ["n1"], START, END, files={"n1/syslog": [f"2026-03-02T08:41:15Z n1 {XID}"]})
    for name, body in _BAD_WORKLOADS.items():
        (root / name).mkdir()
        (root / name / "scenario.toml").write_text(f'id = "{name}"\n[workload]\nscheduler = "slurm"\n'
                                                   f'nodes = ["n1"]\n{body}\n', encoding="utf-8")
    db = tmp_path / "results.db"
    code, _, err = run_blueprint(["--configs", str(root), "--connector", "output", "sqlite", "path", str(db)], capsys)
    assert code == 1 and "Traceback" not in err
    with sqlite3.connect(db) as conn:
        stored = dict(conn.execute("SELECT workload_id, status FROM latest_attributions").fetchall())
        (culprits,) = conn.execute("SELECT culprit_nodes_json FROM latest_attributions "
                                   "WHERE workload_id = 'good'").fetchone()
    assert stored["good"] == "ok" and culprits == '["n1"]'
    flat = "".join(err.split())     # the summary wraps long lines
    for name in ("metadata-not-a-table", "attempt-not-a-number", "start-not-a-time", "attempt-beyond-64-bits"):
        assert f"{root / name / 'scenario.toml'}:" in flat and name not in stored
    assert f"attemptmustbeawholenumberfrom0to{2**63 - 1}" in flat
    assert "[workload]" in flat             # the reason is printed as written, not taken for markup
    assert stored.get("end-of-time") in (None, "error", "partial", "ok")   # recorded or named, never fatal


def test_nodes_given_as_a_string_fail_that_workload_not_split_into_characters(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """`nodes = "n1"` is not a list of node names: the workload fails with an error naming the field, instead of
    being attributed over nodes "n" and "1"."""
    root = tmp_path / "workloads"
    (root / "w1").mkdir(parents=True)
    (root / "w1" / "scenario.toml").write_text('[workload]\nnodes = "n1"\n', encoding="utf-8")
    code, results, err = run_blueprint(["--configs", str(root), "--connector", "output", "stdout"], capsys)
    assert results == [] and "nodes" in err and code == 1


@pytest.mark.parametrize(("setup", "argv", "message"), [
    (lambda d: (d / "db").mkdir(), ["--connector", "output", "sqlite", "path", "{d}/db"], "cannot be used as a results database"),
    (lambda d: (d / "junk.db").write_bytes(b"not a database " * 100), ["--connector", "output", "sqlite", "path", "{d}/junk.db"],
     "cannot be used as a results database (file is not a database)"),
    (lambda d: (d / "c.toml").write_text('workers = "x"\n'), ["--config", "{d}/c.toml"], "`workers` must be an integer"),
    (lambda d: (d / "c.toml").write_text('watch = "no"\n'), ["--config", "{d}/c.toml"], "`watch` must be true or false"),
    (lambda d: (d / "c.toml").write_text("margin = [1]\n"), ["--config", "{d}/c.toml"], "not a duration: [1]"),
    (None, ["--margin", "99999999999d"], "duration out of range"),
    (None, ["--collect-timeout", "36501d"], "duration out of range"),
    (None, ["--connector", "context", "slurm", "since", "99999999999d"], "duration out of range"),
    (None, ["--connector", "metrics", "promql", "url", "http://[::1"], "is not a URL"),
    (None, ["--connector", "attribution", "service_url", "http://[::1"], "is not a URL"),
    (None, ["--connector", "logs", "loki", "url", "notaurl"], "is not an http:// or https:// URL"),
    (None, ["--connector", "logs", "loki", "url", "http://127.0.0.1:1", "max_answer", "0"], "`max_answer`: at least 1"),
])
def test_blueprint_command_errors_are_one_line_exit_2(setup, argv: list[str], message: str, tmp_path: Path,
                                                      capsys: pytest.CaptureFixture[str]) -> None:
    """Every way the command line, a config file or an output can be wrong is a one-line error and exit 2 from
    main's FirstfaultError handler (run in-process: any other exception would fail this test)."""
    if setup is not None:
        setup(tmp_path)
    workloads = tmp_path / "workloads"
    make_workload(workloads, "w1", ["n1"], START, END)
    code, _, err = run_blueprint(["--configs", str(workloads), *[a.format(d=tmp_path) for a in argv]], capsys)
    assert code == 2 and "error:" in err and message in " ".join(err.split())


def test_quickstart_on_a_file_that_is_not_a_database_is_an_error(tmp_path: Path,
                                                                 capsys: pytest.CaptureFixture[str]) -> None:
    from firstfault.cli import main

    junk = tmp_path / "junk.db"
    junk.write_bytes(b"not a database " * 100)
    assert main(["quickstart", "--db", str(junk), "--no-browser", "--port", "0"]) == 2
    assert "cannot be used as a results database" in capsys.readouterr().err


# -- item 7: paths from job accounting are read only inside the allowed roots ------------------------------------
def _job_with_stdout(root: Path, stdout: Path) -> Path:
    workloads = root / "workloads"
    directory = make_workload(workloads, "job", ["n1"], START, END,
                              files={"n1/syslog": [f"2026-03-02T08:41:15Z n1 {XID}"]})
    with (directory / "scenario.toml").open("a", encoding="utf-8") as fh:
        fh.write(f'[workload.metadata]\nstdout = "{stdout}"\n')
    return workloads


@pytest.mark.parametrize("case", ["outside", "symlink out", "no roots", "fifo", "inside"])
def test_a_path_from_job_accounting_is_read_only_inside_the_allowed_roots(case: str, tmp_path: Path,
                                                                         capsys: pytest.CaptureFixture[str]) -> None:
    """A job's recorded stdout naming a mode-600 file outside the roots, or a symlink inside them that leads to
    it, is refused with its reason in the report and its content stored nowhere; without `roots`, a template that
    begins with a field reads nothing; a FIFO is refused without being opened (it would block); a regular file
    inside is read."""
    allowed, outside = tmp_path / "jobs", tmp_path / "private"
    allowed.mkdir()
    outside.mkdir()
    secret = outside / "secret"
    secret.write_text("2026-03-02T08:40:00Z SECRET-TOKEN-1234\n")
    secret.chmod(0o600)
    stdout = {"outside": secret, "symlink out": allowed / "slurm-1.out", "no roots": allowed / "slurm-1.out",
              "fifo": allowed / "fifo.out", "inside": allowed / "slurm-1.out"}[case]
    if case in ("symlink out", "no roots"):
        stdout.symlink_to(secret)
    elif case == "fifo":
        os.mkfifo(stdout)
    elif case == "inside":
        stdout.write_text("2026-03-02T08:40:00Z [rank0]: step 10 loss 2.0\n")
    roots = [] if case == "no roots" else ["roots", str(allowed)]
    db = tmp_path / "r.db"
    code, (result,), err = run_blueprint([
        "--configs", str(_job_with_stdout(tmp_path, stdout)),
        "--connector", "logs", "files", "label", "stdout", "applog", "{stdout}", *roots,
        "--connector", "output", "stdout", "--connector", "output", "sqlite", "path", str(db)], capsys)
    (report,) = [r for r in result["connector_reports"] if r["connector"] == "stdout"]
    assert [c["node"] for c in result["diagnosis"]["culprit_nodes"]] == ["n1"]
    if case == "inside":
        assert report["status"] == "ok" and report["observation_count"] == 1
        return
    if case == "fifo":   # not a file: it matches no template, and is never opened
        assert report["status"] == "empty" and "no file matched" in report["reason"]
        return
    assert report["status"] == "error" and report["observation_count"] == 0 and "refused" in report["reason"]
    assert {"outside": f"outside the allowed roots ({allowed.resolve()})",
            "symlink out": f"resolves to {secret.resolve()}, outside the allowed roots",
            "no roots": "set the collector's `roots`"}[case] in report["reason"]
    assert "SECRET-TOKEN" not in db.read_bytes().decode("latin-1") and "SECRET-TOKEN" not in json.dumps(result)


def test_a_symlink_in_a_static_workload_does_not_lead_out_of_it(tmp_path: Path,
                                                                capsys: pytest.CaptureFixture[str]) -> None:
    """A workload directory's `<node>/syslog.log` linking to a private file elsewhere, or a FIFO, is not read
    and is named in the static report (as analyze names it in its issues); the workload's other files are read,
    and the result is partial."""
    secret = tmp_path / "secret"
    secret.write_text("2026-03-02T08:40:00Z SECRET-TOKEN-1234\n")
    secret.chmod(0o600)
    workloads = tmp_path / "workloads"
    directory = make_workload(workloads, "w1", ["n1", "n2", "n3"], START, END,
                              files={"n1/applog": [f"2026-03-02T08:41:15Z n1 {XID}"]})
    (directory / "n2").mkdir()
    (directory / "n2" / "syslog.log").symlink_to(secret)
    (directory / "n3").mkdir()
    os.mkfifo(directory / "n3" / "syslog.log")
    code, (result,), err = run_blueprint(["--configs", str(workloads), "--connector", "output", "stdout"], capsys)
    (static,) = [r for r in result["connector_reports"] if r["kind"] == "logs"]
    assert static["status"] == "error" and static["nodes"] == ["n1"] and "SECRET-TOKEN" not in json.dumps(result)
    assert "2 entries not read" in static["reason"]
    assert f"{directory / 'n2' / 'syslog.log'}: a symlink out of the workload directory" in static["reason"]
    assert f"{directory / 'n3' / 'syslog.log'}: a FIFO" in static["reason"]
    assert result["diagnosis"]["coverage"]["partial"] is True


# -- item 11: Kubernetes names never become kubectl options ------------------------------------------------------
_KUBECTL_STUB = r'''#!/usr/bin/env python3
import json, sys
with open(sys.argv[0] + ".calls", "a") as calls:
    calls.write(json.dumps(sys.argv[1:]) + "\n")
if sys.argv[1] == "get":
    containers = [{"name": "trainer"}, {"name": "--kubeconfig=/tmp/evil"}]
    print(json.dumps({"items": [{"metadata": {"name": "train-0"}, "spec": {"nodeName": "n1", "containers": containers},
                                 "status": {}}]}))
else:
    print("2026-03-02T08:41:15Z [rank0]: step 1 loss 2.0")
'''


@pytest.mark.parametrize("pods", ["train-0", "train-0,--kubeconfig=/tmp/evil"])
def test_pod_and_container_names_never_reach_kubectl_as_options(pods: str, tmp_path: Path) -> None:
    """Names are checked against the DNS-1123 rules before kubectl sees them, and pod names come after `--`: a
    name that reads as an option is refused and named in the report; the valid containers are still read."""
    from datetime import datetime, timezone

    from firstfault.blueprint.collectors.k8s import PodLogsCollector
    from firstfault.blueprint.config import spec_from_words
    from firstfault.blueprint.workload import _run_collector
    from firstfault.engine import ExecutionContext

    stub = tmp_path / "kubectl"
    stub.write_text(_KUBECTL_STUB)
    stub.chmod(0o755)
    collector = PodLogsCollector(spec_from_words(["logs", "k8s", "kubectl", str(stub)]), margin=None)  # type: ignore[arg-type]
    ctx = ExecutionContext(workload_id="kueue:ml/w", scheduler="kubernetes", nodes=["n1"],
                           start_time=datetime(2026, 3, 2, 8, 30, tzinfo=timezone.utc),
                           metadata={"namespace": "ml", "pods": pods})
    report = _run_collector(collector, ctx, lambda batch: None)
    calls = [json.loads(line) for line in Path(f"{stub}.calls").read_text().splitlines()] if \
        Path(f"{stub}.calls").exists() else []
    assert not any(arg.startswith("--kubeconfig") for call in calls for arg in call)
    assert all(call[call.index("--") + 1:] in (["train-0"], []) for call in calls)
    assert report.status == "error"
    if "," in pods:      # the workload's record names an invalid pod: kubectl is never run for it
        assert calls == [] and "not a valid Kubernetes pod name" in report.reason
        return
    assert ["logs", "--namespace=ml", "--container=trainer", "--timestamps", "--", "train-0"] in calls
    assert report.observation_count == 1 and "not a valid Kubernetes container name" in report.reason
