"""The outputs that reach people: `output alertmanager` against the real Alertmanager 0.25 of
tests/support/setup-alertmanager.sh (Debian's prometheus-alertmanager), and `output webhook` against a real HTTP
server on loopback that checks the signature the way a receiver would (its own HMAC code, not firstfault's).

The Alertmanager routes firstfault's alerts to a webhook receiver on 127.0.0.1:19094 (one group per alert,
send_resolved on); `am_notifications` listens there, so the tests also see Alertmanager's own firing and resolved
notifications. Each test puts a label `cluster=<unique>` on its alerts and looks only at those.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import random
import re
import shutil
import sqlite3
import subprocess
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from datetime import datetime, timedelta, timezone
from email.utils import format_datetime
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import httpx
import pytest
from blueprint_helpers import free_port, run_blueprint, wait_for

from firstfault.blueprint.outputs.delivery import full_jitter, retry_after_seconds
from firstfault.samples import samples_root

ALERTMANAGER = "http://127.0.0.1:19093"
NOTIFY_PORT = 19094   # setup-alertmanager.sh's webhook receiver
XID_SAMPLE = samples_root() / "xid79-fallen-off-bus"
SECRET = "webhook-test-secret"


# -- a real HTTP server on loopback -----------------------------------------------------------------------------
class Receiver:
    """A threaded http.server recording every POST (time, headers, body); `answer(request)` gives the reply as
    (status, headers)."""

    def __init__(self, port: int, answer: Callable[[dict[str, Any]], tuple[int, dict[str, str]]]) -> None:
        self.requests: list[dict[str, Any]] = []
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:   # noqa: N802 - http.server's name
                body = self.rfile.read(int(self.headers.get("Content-Length", "0")))
                request = {"at": time.monotonic(), "path": self.path, "headers": dict(self.headers.items()),
                           "body": body}
                receiver.requests.append(request)
                status, headers = answer(request)
                self.send_response(status)
                for name, value in headers.items():
                    self.send_header(name, value)
                self.send_header("Content-Length", "0")
                self.end_headers()

            def log_message(self, *_args: Any) -> None:
                return None

        self.server = ThreadingHTTPServer(("127.0.0.1", port), Handler)
        self.url = f"http://127.0.0.1:{port}"
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()

    def stop(self) -> None:
        self.server.shutdown()
        self.server.server_close()


# -- Alertmanager ---------------------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def alertmanager() -> str:
    """The real Alertmanager of tests/support/setup-alertmanager.sh; fails (never skips) when it is not up."""
    try:
        httpx.get(f"{ALERTMANAGER}/-/ready", timeout=5).raise_for_status()
        status = httpx.get(f"{ALERTMANAGER}/api/v2/status", timeout=5).json()
        assert "firstfault-test-webhook" in status["config"]["original"]
    except (httpx.HTTPError, AssertionError, KeyError, ValueError) as exc:
        pytest.fail(f"Alertmanager is not running with the test config (run tests/support/setup-alertmanager.sh): "
                    f"{exc!r}")
    return ALERTMANAGER


@pytest.fixture(scope="module")
def am_notifications() -> Iterator[Receiver]:
    """Alertmanager's notifications (its webhook receiver's JSON), as they arrive."""
    receiver = Receiver(NOTIFY_PORT, lambda _request: (200, {}))
    yield receiver
    receiver.stop()


@pytest.fixture
def cluster() -> str:
    return f"test-{uuid.uuid4().hex[:12]}"


def active_alerts(cluster: str) -> list[dict[str, Any]]:
    answer = httpx.get(f"{ALERTMANAGER}/api/v2/alerts", params={"filter": f'cluster="{cluster}"'}, timeout=10)
    answer.raise_for_status()
    return answer.json()


def notified(receiver: Receiver, cluster: str, status: str) -> list[dict[str, Any]]:
    """The alerts of `cluster` that Alertmanager notified with `status` (firing or resolved)."""
    found = []
    for request in list(receiver.requests):
        for alert in json.loads(request["body"])["alerts"]:
            if alert["labels"].get("cluster") == cluster and alert["status"] == status:
                found.append(alert)
    return found


def said(err: str) -> str:
    """stderr with rich's line wrapping undone."""
    return " ".join(err.split())


def am_connector(state: Path, cluster: str, url: str = ALERTMANAGER, *extra: str) -> list[str]:
    return ["--connector", "output", "alertmanager", "url", url, "state", str(state), "labels",
            f"cluster={cluster}", "dashboard_url", "http://dashboard.example:8080", *extra]


def sqlite_connector(db: Path) -> list[str]:
    return ["--connector", "output", "db", "sqlite", "path", str(db)]


def clean_workload(root: Path, name: str, node: str, start: str, end: str) -> Path:
    """A workload that ran to completion on `node` with nothing wrong in its syslog."""
    directory = root / name
    (directory / node).mkdir(parents=True)
    (directory / "scenario.toml").write_text(
        f'id = "{name}"\n[workload]\nscheduler = "slurm"\njob_id = "{name}"\nscheduler_state = "COMPLETED"\n'
        f'exit_code = "0:0"\nstart_time = "{start}"\nend_time = "{end}"\nnodes = ["{node}"]\n', encoding="utf-8")
    (directory / node / "syslog.log").write_text(benign_syslog(node), encoding="utf-8")
    return directory


def benign_syslog(node: str) -> str:
    return (f"Feb 12 03:00:01 {node} systemd[1]: Started Session 12 of user alice.\n"
            f"Feb 12 03:59:59 {node} systemd[1]: session-12.scope: Deactivated successfully.\n")


def state_rows(state: Path, table: str) -> list[tuple[Any, ...]]:
    with sqlite3.connect(state) as db:
        return db.execute(f"SELECT * FROM {table}").fetchall()


XID_LABELS = {"alertname": "FirstfaultInfrastructureFault", "node": "gpu-a03", "gpu": "0000:9a:00", "xid": "79",
              "sub_domain": "gpu", "next_action": "RESTART_BM", "severity": "critical"}


def assert_xid_alert_fires(cluster: str, receiver: Receiver) -> dict[str, Any]:
    alerts = active_alerts(cluster)
    assert len(alerts) == 1, alerts
    alert = alerts[0]
    assert alert["labels"] == XID_LABELS | {"cluster": cluster}
    assert alert["status"]["state"] == "active"
    notes = alert["annotations"]
    assert notes["summary"] == "Xid 79 on gpu-a03 GPU 0000:9a:00 failed slurm job 4100002"
    assert notes["job_id"] == "4100002" and notes["workload_id"] == "xid79-fallen-off-bus"
    assert notes["root_cause"].startswith("XID-79: Xid 79 ROBUST_CHANNEL_GPU_HAS_FALLEN_OFF_THE_BUS")
    assert notes["outcome"] == "Fail InfraHW"
    assert alert["startsAt"].startswith("2026-02-12T00:52:07")   # when the Xid was logged
    assert alert["generatorURL"] == "http://dashboard.example:8080/workload?id=xid79-fallen-off-bus&attempt=0"
    wait_for("Alertmanager's firing notification", lambda: bool(notified(receiver, cluster, "firing")), 30)
    return alert


def assert_resolved(cluster: str, receiver: Receiver, state: Path) -> None:
    assert active_alerts(cluster) == []   # Alertmanager lists no alert whose endsAt has passed
    wait_for("Alertmanager's resolved notification", lambda: bool(notified(receiver, cluster, "resolved")), 30)
    resolved = notified(receiver, cluster, "resolved")[0]
    assert resolved["labels"] == XID_LABELS | {"cluster": cluster}
    assert state_rows(state, "alerts") == [] and state_rows(state, "faults") == []   # nothing owed, nothing kept


def test_an_xid_fires_and_a_clean_rerun_of_the_same_attempt_resolves_it(
        tmp_path: Path, alertmanager: str, am_notifications: Receiver, cluster: str,
        capsys: pytest.CaptureFixture[str]) -> None:
    workload = tmp_path / "w" / "xid"
    shutil.copytree(XID_SAMPLE, workload)
    db, state = tmp_path / "r.db", tmp_path / "alerts.db"
    code, _, err = run_blueprint(["--configs", str(workload), *sqlite_connector(db), *am_connector(state, cluster)],
                                 capsys)
    assert code == 0, err
    assert_xid_alert_fires(cluster, am_notifications)

    pass_instead(workload)   # the same attempt attributed again: its evidence no longer shows the fault
    code, _, err = run_blueprint(["--configs", str(workload), "--force", *sqlite_connector(db),
                                  *am_connector(state, cluster)], capsys)
    assert code == 0, err
    assert "Pass / none" in said(err)
    assert_resolved(cluster, am_notifications, state)


def test_a_later_workload_passing_on_the_node_resolves_it(
        tmp_path: Path, alertmanager: str, am_notifications: Receiver, cluster: str,
        capsys: pytest.CaptureFixture[str]) -> None:
    workloads = tmp_path / "w"
    shutil.copytree(XID_SAMPLE, workloads / "xid")
    db, state = tmp_path / "r.db", tmp_path / "alerts.db"
    code, _, err = run_blueprint(["--configs", str(workloads), *sqlite_connector(db), *am_connector(state, cluster)],
                                 capsys)
    assert code == 0, err
    assert_xid_alert_fires(cluster, am_notifications)

    # a passing job on another node clears nothing; one on gpu-a03 that started after the fault clears it
    clean_workload(workloads, "elsewhere", "gpu-a01", "2026-02-12T03:00:00Z", "2026-02-12T04:00:00Z")
    code, _, err = run_blueprint(["--configs", str(workloads), *sqlite_connector(db), *am_connector(state, cluster)],
                                 capsys)
    assert code == 0 and "1 skipped" in said(err), err
    assert len(active_alerts(cluster)) == 1
    clean_workload(workloads, "after", "gpu-a03", "2026-02-12T03:00:00Z", "2026-02-12T04:00:00Z")
    code, _, err = run_blueprint(["--configs", str(workloads), *sqlite_connector(db), *am_connector(state, cluster)],
                                 capsys)
    assert code == 0 and "2 skipped" in said(err), err
    assert_resolved(cluster, am_notifications, state)


def test_a_pass_seen_before_an_older_fault_still_clears_it(
        tmp_path: Path, alertmanager: str, cluster: str, capsys: pytest.CaptureFixture[str]) -> None:
    """The answer depends on the results, not on the order they come in: a clean job that started after the
    faulty one ended, attributed first, keeps the fault from firing; one that ran before it does not."""
    state = tmp_path / "alerts.db"
    before = clean_workload(tmp_path / "w", "before", "gpu-a03", "2026-02-11T20:00:00Z", "2026-02-11T21:00:00Z")
    after = clean_workload(tmp_path / "w", "after", "gpu-a03", "2026-02-12T03:00:00Z", "2026-02-12T04:00:00Z")
    for workload in (after, before, XID_SAMPLE):
        code, _, err = run_blueprint(["--configs", str(workload), *am_connector(state, cluster)], capsys)
        assert code == 0, err
    assert active_alerts(cluster) == []
    assert state_rows(state, "faults") == [] and state_rows(state, "alerts") == []

    other = f"{cluster}-b"
    state_b = tmp_path / "alerts-b.db"
    for workload in (before, XID_SAMPLE):
        code, _, err = run_blueprint(["--configs", str(workload), *am_connector(state_b, other)], capsys)
        assert code == 0, err
    assert [a["labels"]["node"] for a in active_alerts(other)] == ["gpu-a03"]


def xid_workload(root: Path, name: str, job_id: str) -> Path:
    """The Xid 79 sample as another workload (its own id and job id, the same evidence)."""
    directory = root / name
    shutil.copytree(XID_SAMPLE, directory)
    scenario = directory / "scenario.toml"
    scenario.write_text(scenario.read_text(encoding="utf-8").replace('id = "xid79-fallen-off-bus"', f'id = "{name}"')
                        .replace('job_id = "4100002"', f'job_id = "{job_id}"'), encoding="utf-8")
    return directory


def pass_instead(workload: Path) -> None:
    """The same attempt, now with evidence of nothing wrong and a clean end."""
    scenario = workload / "scenario.toml"
    scenario.write_text(scenario.read_text().replace('"FAILED"', '"COMPLETED"').replace('"1:0"', '"0:0"'))
    for node in ("gpu-a01", "gpu-a02", "gpu-a03", "gpu-a04"):
        (workload / node / "syslog.log").write_text(benign_syslog(node), encoding="utf-8")
        (workload / node / "applog.log").unlink()


def test_two_jobs_hit_by_one_fault_raise_one_alert_that_resolves_when_neither_raises_it(
        tmp_path: Path, alertmanager: str, cluster: str, capsys: pytest.CaptureFixture[str]) -> None:
    first, second = xid_workload(tmp_path / "w", "job-a", "5001"), xid_workload(tmp_path / "w", "job-b", "5002")
    state = tmp_path / "alerts.db"
    code, _, err = run_blueprint(["--configs", str(tmp_path / "w"), *am_connector(state, cluster)], capsys)
    assert code == 0, err
    [alert] = active_alerts(cluster)
    assert alert["labels"]["node"] == "gpu-a03" and alert["annotations"]["job_id"] in ("5001", "5002")
    assert len(state_rows(state, "faults")) == 2

    pass_instead(first)
    code, _, err = run_blueprint(["--configs", str(first), *am_connector(state, cluster)], capsys)
    assert code == 0, err
    [alert] = active_alerts(cluster)   # job-b still raises it
    assert alert["annotations"]["job_id"] == "5002"

    pass_instead(second)
    code, _, err = run_blueprint(["--configs", str(second), *am_connector(state, cluster)], capsys)
    assert code == 0, err
    assert active_alerts(cluster) == []


def test_a_firing_alert_is_sent_again_to_stay_active(tmp_path: Path, alertmanager: str, cluster: str,
                                                     capsys: pytest.CaptureFixture[str]) -> None:
    state = tmp_path / "alerts.db"
    code, _, err = run_blueprint(["--configs", str(XID_SAMPLE), *am_connector(state, cluster)], capsys)
    assert code == 0, err
    [before] = active_alerts(cluster)
    ends = datetime.fromisoformat(before["endsAt"].replace("Z", "+00:00"))
    assert ends > datetime.now(timezone.utc) + timedelta(hours=23)   # `expire` (1 day) ahead

    # nothing new to attribute: with `resend 0s` the end of the pass sends the firing alert again
    code, _, err = run_blueprint(["--configs", str(XID_SAMPLE), *am_connector(state, cluster, ALERTMANAGER,
                                                                            "resend", "0s")], capsys)
    assert code == 0, err
    [after] = active_alerts(cluster)
    assert after["endsAt"] > before["endsAt"] and after["updatedAt"] > before["updatedAt"]
    assert after["startsAt"] == before["startsAt"]


def test_without_clear_on_pass_a_passing_job_leaves_the_alert(tmp_path: Path, alertmanager: str, cluster: str,
                                                              capsys: pytest.CaptureFixture[str]) -> None:
    state = tmp_path / "alerts.db"
    after = clean_workload(tmp_path / "w", "after", "gpu-a03", "2026-02-12T03:00:00Z", "2026-02-12T04:00:00Z")
    for workload in (XID_SAMPLE, after):
        code, _, err = run_blueprint(["--configs", str(workload), *am_connector(state, cluster, ALERTMANAGER,
                                                                                "clear_on_pass", "off")], capsys)
        assert code == 0, err
    assert [a["labels"]["node"] for a in active_alerts(cluster)] == ["gpu-a03"]


def test_an_unreachable_alertmanager_is_reported_and_the_alert_delivered_later(
        tmp_path: Path, alertmanager: str, cluster: str, capsys: pytest.CaptureFixture[str]) -> None:
    db, state = tmp_path / "r.db", tmp_path / "alerts.db"
    nowhere = f"http://127.0.0.1:{free_port()}"   # nothing listens there
    code, _, err = run_blueprint(["--configs", str(XID_SAMPLE), *sqlite_connector(db),
                                  *am_connector(state, cluster, nowhere, "retries", "1", "backoff", "0.1s")], capsys)
    assert code == 1
    assert "output alertmanager" in said(err) and "1 alert(s) not delivered" in said(err)
    assert "ConnectError" in said(err) and str(state) in said(err)
    with sqlite3.connect(db) as con:   # the stored result is not affected
        assert con.execute("SELECT outcome FROM latest_attributions").fetchall() == [("Fail InfraHW",)]
    [owed] = state_rows(state, "alerts")
    assert owed[7] == 1 and "gave up after 2 tries" in owed[9]   # pending, with the reason
    assert active_alerts(cluster) == []

    # the next run has nothing new to attribute; the end of its pass delivers what is owed
    code, _, err = run_blueprint(["--configs", str(XID_SAMPLE), *sqlite_connector(db), *am_connector(state, cluster)],
                                 capsys)
    assert code == 0 and "1 skipped" in said(err), err
    assert [a["labels"]["xid"] for a in active_alerts(cluster)] == ["79"]
    [sent] = state_rows(state, "alerts")
    assert sent[7] == 0 and sent[8] is not None and sent[9] is None


@pytest.mark.parametrize(("words", "message"), [
    (["labels", "node=x"], "label 'node' is set by the output itself"),
    (["labels", "9x=1"], "'9x' is not a label name"),
    (["labels", "team"], "takes key=value pairs"),
    (["retries", "99"], "`retries` must be between 0 and 20"),
    (["resend", "2d"], "`resend` must be shorter than `expire`"),
])
def test_alertmanager_options_are_checked(tmp_path: Path, words: list[str], message: str,
                                          capsys: pytest.CaptureFixture[str]) -> None:
    code, _, err = run_blueprint(["--configs", str(XID_SAMPLE), "--connector", "output", "alertmanager", "url",
                                  ALERTMANAGER, "state", str(tmp_path / "s.db"), *words], capsys)
    assert code == 2 and message in said(err), err


def test_an_unusable_state_file_is_a_config_error(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    not_sqlite = tmp_path / "alerts.db"
    not_sqlite.write_text("this is not a database\n" * 100)
    code, _, err = run_blueprint(["--configs", str(XID_SAMPLE), "--connector", "output", "alertmanager", "url",
                                  ALERTMANAGER, "state", str(not_sqlite)], capsys)
    assert code == 2 and "cannot use" in said(err) and "as the alert state file" in said(err), err


def test_an_alertmanager_url_that_is_not_http_is_refused(capsys: pytest.CaptureFixture[str]) -> None:
    code, _, err = run_blueprint(["--configs", str(XID_SAMPLE), "--connector", "output", "alertmanager", "url",
                                  "ftp://am:9093"], capsys)
    assert code == 2 and "is not an http:// or https:// URL" in said(err), err


def test_the_routing_example_is_a_valid_alertmanager_config(tmp_path: Path) -> None:
    """docs/operations.md's Alertmanager configuration passes the real amtool 0.25, and routes as it says."""
    amtool = shutil.which("amtool")
    if amtool is None:
        pytest.fail("amtool is missing (run tests/support/setup-alertmanager.sh)")
    text = (Path(__file__).parents[2] / "docs" / "operations.md").read_text(encoding="utf-8")
    [block] = [b for b in re.findall(r"```yaml\n(.*?)```", text, re.S) if "FirstfaultInfrastructureFault" in b]
    config = tmp_path / "alertmanager.yml"
    config.write_text(block, encoding="utf-8")
    checked = subprocess.run([amtool, "check-config", str(config)], capture_output=True, text=True, timeout=60)
    assert checked.returncode == 0 and "SUCCESS" in checked.stdout, checked.stdout + checked.stderr

    def receivers(*labels: str) -> str:
        done = subprocess.run([amtool, "config", "routes", "test", f"--config.file={config}",
                               "alertname=FirstfaultInfrastructureFault", *labels],
                              capture_output=True, text=True, timeout=60)
        assert done.returncode == 0, done.stderr
        return done.stdout.strip()

    assert receivers("next_action=RESTART_BM", "node=gpu-a03") == "gpu-fleet-pager,gpu-fleet-slack"
    assert receivers("next_action=CHECK_FILESYSTEM", "node=fs-01") == "gpu-fleet-slack"


# -- webhook ---------------------------------------------------------------------------------------------------
def verify(request: dict[str, Any], secret: str, tolerance: float = 300) -> bool:
    """A receiver's check, written from docs/blueprint.md: HMAC-SHA256 over `<t>.<body>`, t within tolerance."""
    fields = dict(part.split("=", 1) for part in request["headers"]["Firstfault-Signature"].split(","))
    expected = hmac.new(secret.encode(), fields["t"].encode() + b"." + request["body"], hashlib.sha256).hexdigest()
    return hmac.compare_digest(expected, fields["v1"]) and abs(time.time() - int(fields["t"])) <= tolerance


@pytest.fixture
def secret_env(monkeypatch: pytest.MonkeyPatch) -> str:
    monkeypatch.setenv("FF_TEST_WEBHOOK_SECRET", SECRET)
    return "FF_TEST_WEBHOOK_SECRET"


def webhook_connector(url: str, env: str, *extra: str) -> list[str]:
    return ["--connector", "output", "webhook", "url", url, "secret_env", env, *extra]


def test_the_webhook_is_signed_honours_retry_after_in_both_forms_and_is_delivered(
        tmp_path: Path, secret_env: str, capsys: pytest.CaptureFixture[str]) -> None:
    def answer(request: dict[str, Any]) -> tuple[int, dict[str, str]]:
        if not verify(request, SECRET):
            return 401, {}
        tries = len(receiver.requests)
        if tries == 1:
            return 503, {"Retry-After": "1"}
        if tries == 2:
            in_two = datetime.now(timezone.utc) + timedelta(seconds=2)
            return 503, {"Retry-After": format_datetime(in_two, usegmt=True)}
        return 200, {}

    receiver = Receiver(free_port(), answer)
    try:
        db = tmp_path / "r.db"
        code, _, err = run_blueprint(["--configs", str(XID_SAMPLE), *sqlite_connector(db),
                                      *webhook_connector(f"{receiver.url}/hooks/ff", secret_env)], capsys)
    finally:
        receiver.stop()
    assert code == 0, err
    first, second, third = receiver.requests
    assert all(verify(r, SECRET) for r in receiver.requests)
    assert first["body"] == second["body"] == third["body"]   # the exact same body, signed anew each try
    assert len({r["headers"]["Firstfault-Delivery"] for r in receiver.requests}) == 1
    assert first["headers"]["Firstfault-Delivery"] == hashlib.sha256(first["body"]).hexdigest()
    assert first["path"] == "/hooks/ff" and first["headers"]["Content-Type"] == "application/json"
    result = json.loads(third["body"])
    assert result["context"]["workload_id"] == "xid79-fallen-off-bus"
    assert result["diagnosis"]["sub_domain"] == "gpu"
    # Retry-After honoured: at least 1 s, then at least until the date (whole seconds: over 1 s from now)
    assert second["at"] - first["at"] >= 1.0
    assert third["at"] - second["at"] >= 1.0
    with sqlite3.connect(db) as con:
        assert con.execute("SELECT COUNT(*) FROM attribution_runs").fetchone()[0] == 1


def test_a_refused_webhook_is_not_retried_and_is_reported(tmp_path: Path, secret_env: str,
                                                          capsys: pytest.CaptureFixture[str]) -> None:
    receiver = Receiver(free_port(), lambda r: (200, {}) if verify(r, "another secret") else (401, {}))
    try:
        db = tmp_path / "r.db"
        code, _, err = run_blueprint(["--configs", str(XID_SAMPLE), *sqlite_connector(db),
                                      *webhook_connector(receiver.url, secret_env)], capsys)
    finally:
        receiver.stop()
    assert code == 1
    assert len(receiver.requests) == 1
    assert "output webhook" in said(err) and "not delivered (refused: HTTP 401)" in said(err)
    with sqlite3.connect(db) as con:
        assert con.execute("SELECT COUNT(*) FROM attribution_runs").fetchone()[0] == 1


def test_a_webhook_down_for_good_gives_up_after_its_retries(tmp_path: Path, secret_env: str,
                                                            capsys: pytest.CaptureFixture[str]) -> None:
    receiver = Receiver(free_port(), lambda _r: (503, {}))
    try:
        code, _, err = run_blueprint(["--configs", str(XID_SAMPLE), *webhook_connector(
            receiver.url, secret_env, "retries", "2", "backoff", "0.05s", "max_backoff", "0.1s")], capsys)
    finally:
        receiver.stop()
    assert code == 1
    assert len(receiver.requests) == 3
    assert "gave up after 3 tries (HTTP 503)" in said(err)


def test_a_retry_after_beyond_max_backoff_ends_the_delivery(tmp_path: Path, secret_env: str,
                                                            capsys: pytest.CaptureFixture[str]) -> None:
    receiver = Receiver(free_port(), lambda _r: (429, {"Retry-After": "3600"}))
    try:
        code, _, err = run_blueprint(["--configs", str(XID_SAMPLE), *webhook_connector(receiver.url, secret_env)],
                                     capsys)
    finally:
        receiver.stop()
    assert code == 1
    assert len(receiver.requests) == 1
    assert "Retry-After asks 3600 s, more than max_backoff 60 s" in said(err)


def test_the_webhook_sends_only_what_it_is_asked_to(tmp_path: Path, secret_env: str,
                                                    capsys: pytest.CaptureFixture[str]) -> None:
    receiver = Receiver(free_port(), lambda _r: (204, {}))
    try:
        code, _, err = run_blueprint(["--configs", str(samples_root()), *webhook_connector(
            receiver.url, secret_env, "send", "infrastructure")], capsys)
    finally:
        receiver.stop()
    assert code == 0, err
    sent = sorted(json.loads(r["body"])["context"]["workload_id"] for r in receiver.requests)
    assert sent == ["nvlink-walkthrough", "xid79-fallen-off-bus"]


def test_a_webhook_secret_missing_from_the_environment_is_a_config_error(
        monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.delenv("FF_TEST_NO_SUCH_SECRET", raising=False)
    code, _, err = run_blueprint(["--configs", str(XID_SAMPLE), *webhook_connector(
        "http://127.0.0.1:9/x", "FF_TEST_NO_SUCH_SECRET")], capsys)
    assert code == 2 and "FF_TEST_NO_SUCH_SECRET, which is not set or empty" in said(err)


# -- the retry policy ------------------------------------------------------------------------------------------
def test_retry_after_reads_both_forms() -> None:
    now = datetime(2026, 12, 1, 8, 0, 0, tzinfo=timezone.utc)
    assert retry_after_seconds("120", now) == 120.0
    assert retry_after_seconds("Tue, 01 Dec 2026 08:00:30 GMT", now) == 30.0
    assert retry_after_seconds("Tue, 01 Dec 2026 07:59:00 GMT", now) == 0.0    # in the past: now
    assert retry_after_seconds("soon", now) is None
    assert retry_after_seconds("", now) is None
    assert retry_after_seconds(None, now) is None


def test_full_jitter_stays_under_the_doubling_ceiling_and_the_cap() -> None:
    rng = random.Random(7)
    for retry in range(12):
        ceiling = min(60.0, 1.0 * 2 ** retry)
        waits = [full_jitter(retry, 1.0, 60.0, rng) for _ in range(200)]
        assert all(0.0 <= w <= ceiling for w in waits)
        assert max(waits) > ceiling * 0.8 and min(waits) < ceiling * 0.2   # spread over the whole range
