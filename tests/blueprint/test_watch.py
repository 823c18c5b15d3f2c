"""`firstfault blueprint --watch` as a daemon: one JSON line per pass, SIGTERM/SIGINT finish the workload in
progress and exit 0, and memory stays bounded over many passes."""

from __future__ import annotations

import gc
import json
import os
import signal
import sqlite3
import subprocess
import sys
import threading
import time
import tracemalloc
from datetime import datetime, timedelta, timezone
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest
from blueprint_helpers import run_blueprint

from firstfault.blueprint.base import Discovery
from firstfault.blueprint.config import BlueprintConfig, spec_from_words
from firstfault.blueprint.connectors import Plan, build_plan
from firstfault.blueprint.runner import PROBLEMS_KEPT, Runner
from firstfault.engine import Attribution, ExecutionContext
from firstfault.samples import samples_root
from firstfault.tools.verify import default_engine

SRC = Path(__file__).resolve().parents[2] / "src"


# -- the log line ----------------------------------------------------------------------------------------------
def test_one_json_line_per_pass(tmp_path: Path) -> None:
    config = BlueprintConfig(watch=True, interval=timedelta(0), connectors=[
        spec_from_words(["context", "static", "path", str(samples_root())]),
        spec_from_words(["output", "db", "sqlite", "path", str(tmp_path / "r.db")])])
    plan = build_plan(config)
    lines: list[str] = []
    runner = Runner(plan, config, log=lines.append)
    try:
        runner.watch(cycles=3)
    finally:
        plan.close()
    records = [json.loads(line) for line in lines]
    assert [r["cycle"] for r in records] == [1, 2, 3] and {r["event"] for r in records} == {"cycle"}
    samples = len([p for p in samples_root().iterdir() if (p / "scenario.toml").is_file()])
    first, second = records[0], records[1]
    assert (first["discovered"], first["attributed"], first["failed"], first["skipped"], first["known"]) == (
        samples, samples, 0, 0, samples)
    assert (second["discovered"], second["attributed"], second["skipped"], second["known"]) == (samples, 0, 0, samples)
    assert all(r["seconds"] >= 0 and r["rss_mb"] > 0 and r["problems"] == 0 for r in records)
    datetime.fromisoformat(first["time"])


def test_the_command_line_logs_each_pass_on_stderr(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, _, err = run_blueprint(["--configs", str(samples_root() / "nvlink-walkthrough"), "--watch", "--interval",
                                  "0s", "--cycles", "2", "--connector", "output", "db", "sqlite", "path",
                                  str(tmp_path / "r.db")], capsys)
    assert code == 0, err
    records = [json.loads(line) for line in err.splitlines() if line.startswith('{"event":"cycle"')]
    assert [(r["cycle"], r["attributed"]) for r in records] == [(1, 1), (2, 0)]


# -- bounded memory --------------------------------------------------------------------------------------------
def _ctx(n: int) -> ExecutionContext:
    end = datetime(2026, 1, 1, tzinfo=timezone.utc) + timedelta(minutes=n)
    return ExecutionContext(workload_id=f"sim:{n}", nodes=["n1"], start_time=end - timedelta(minutes=5), end_time=end)


class Sliding:
    """A context connector like a Slurm watch: each pass reports the attempts of a window that moves on."""

    kind = "context"

    def __init__(self, label: str, width: int) -> None:
        self.label, self.width, self.passes = label, width, 0

    def discover(self) -> Discovery:
        self.passes += 1
        return Discovery(contexts=[_ctx(n) for n in range(self.passes, self.passes + self.width)],
                         problems=[f"pass {self.passes}: one record could not be read"])


class Flaky:
    """Reports the same attempts every other pass, fails in between (a cluster that is sometimes unreachable)."""

    kind = "context"
    label = "flaky"

    def __init__(self) -> None:
        self.passes = 0

    def discover(self) -> Discovery:
        self.passes += 1
        if self.passes % 2 == 0:
            raise OSError("unreachable")
        return Discovery(contexts=[_ctx(-1), _ctx(-2)])


class CannedSession:
    def __init__(self, diagnosis: Attribution) -> None:
        self.diagnosis = diagnosis

    def add(self, batch) -> None: ...

    def attribute(self) -> Attribution:
        return self.diagnosis

    def close(self) -> None: ...


class CannedAttributor:
    """Attributes every workload with one ready-made diagnosis (the engine's cost is not what is measured)."""

    mode = "embedded"

    def __init__(self, diagnosis: Attribution) -> None:
        self.diagnosis, self.opened = diagnosis, 0

    def open(self, ctx: ExecutionContext) -> CannedSession:
        self.opened += 1
        return CannedSession(self.diagnosis)

    def close(self) -> None: ...


class Discarding:
    kind, label = "output", "discard"

    def __init__(self) -> None:
        self.written = 0

    def already_attributed(self, ctx: ExecutionContext) -> bool:
        return False

    def write(self, result) -> None:
        self.written += 1

    def flush(self) -> None: ...

    def close(self) -> None: ...


def test_done_and_problems_stay_bounded_over_many_passes() -> None:
    diagnosis = default_engine().session(_ctx(0)).attribute()
    sliding, flaky, attributor, output = Sliding("sliding", 10), Flaky(), CannedAttributor(diagnosis), Discarding()
    plan = Plan(contexts=[sliding, flaky], collectors=[], outputs=[output], attributor=attributor)
    config = BlueprintConfig(watch=True, interval=timedelta(0))
    lines: list[str] = []
    runner = Runner(plan, config, log=lines.append)
    cycles = 3000
    most_done = most_problems = 0
    tracemalloc.start()
    try:
        for cycle in range(1, cycles + 1):
            runner.run_cycle()
            most_done = max(most_done, len(runner.done))
            most_problems = max(most_problems, len(runner.summary.problems))
            if cycle == 500:
                lines.clear()
                gc.collect()
                warm, _ = tracemalloc.get_traced_memory()
            if cycle % 500 == 0:
                lines.clear()
        gc.collect()
        grown = tracemalloc.get_traced_memory()[0] - warm
    finally:
        tracemalloc.stop()
    # every attempt attributed exactly once: the sliding window's, and the flaky connector's two, which are not
    # forgotten on the passes where that connector fails
    assert attributor.opened == output.written == cycles + 10 - 1 + 2
    assert most_done <= 10 + 2 and most_problems == PROBLEMS_KEPT
    assert runner.done.keys() >= {("sim:-1", 0), ("sim:-2", 0)}
    assert len(runner.summary.problems) == PROBLEMS_KEPT
    assert runner.summary.problem_count == cycles + cycles // 2      # one per pass, plus each failed flaky pass
    assert runner.summary.problems[-1] == "context flaky: OSError: unreachable"   # the newest are kept
    assert grown < 64 * 1024, f"{grown} bytes more after {cycles - 500} more passes"


# -- SIGTERM and SIGINT ----------------------------------------------------------------------------------------
class _BlockingLoki(BaseHTTPRequestHandler):
    """Answers Loki queries with no streams; the first one only once the test releases it."""

    arrived = threading.Event()
    release = threading.Event()
    first = threading.Lock()

    def do_GET(self) -> None:  # noqa: N802 - http.server's name
        if self.first.acquire(blocking=False):
            type(self).arrived.set()
            type(self).release.wait(60)
        body = json.dumps({"status": "success", "data": {"resultType": "streams", "result": []}}).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args) -> None:
        pass


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT])
def test_a_stop_signal_finishes_the_workload_in_progress_then_exits_0(sig: signal.Signals, tmp_path: Path) -> None:
    handler = type("Handler", (_BlockingLoki,), {"arrived": threading.Event(), "release": threading.Event(),
                                                 "first": threading.Lock()})
    server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    db = tmp_path / "results.db"
    argv = [sys.executable, "-m", "firstfault", "blueprint", "--no-progress", "--configs", str(samples_root()),
            "--watch", "--interval", "1h",
            "--connector", "logs", "loki", "url", f"http://127.0.0.1:{server.server_address[1]}",
            "--connector", "output", "db", "sqlite", "path", str(db)]
    env = {**os.environ, "PYTHONPATH": f"{SRC}{os.pathsep}{os.environ.get('PYTHONPATH', '')}"}
    process = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
    try:
        assert handler.arrived.wait(120), "the first workload never queried Loki"
        process.send_signal(sig)                   # while the first workload is being collected
        threading.Timer(1.0, handler.release.set).start()
        _, err = process.communicate(timeout=120)
    finally:
        handler.release.set()
        if process.poll() is None:
            process.kill()
        server.shutdown()
    assert process.returncode == 0, err
    with sqlite3.connect(db) as con:
        rows = con.execute("SELECT a.workload_id, r.status FROM workload_attempts a "
                           "JOIN attribution_runs r ON r.id = a.latest_run_id").fetchall()
    assert len(rows) == 1 and rows[0][1] == "ok", rows          # the workload in progress, and no other
    records = [json.loads(line) for line in err.splitlines() if line.startswith("{")]
    assert records[0]["event"] == "cycle" and records[0]["attributed"] == 1
    assert records[-1] == {"event": "stopped", "signal": sig.name, "cycles": 1}


def test_without_a_signal_the_watch_exits_as_before(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """`--cycles` ends a watch without a signal: the exit status still says whether anything failed."""
    code, _, err = run_blueprint(["--configs", str(tmp_path / "missing"), "--watch", "--interval", "0s",
                                  "--cycles", "1"], capsys)
    assert code == 1 and "problem context static" in err


def test_sigterm_ends_the_wait_between_passes_at_once(tmp_path: Path) -> None:
    argv = [sys.executable, "-m", "firstfault", "blueprint", "--no-progress", "--quiet", "--configs",
            str(samples_root() / "nvlink-walkthrough"), "--watch", "--interval", "1h",
            "--connector", "output", "db", "sqlite", "path", str(tmp_path / "r.db")]
    env = {**os.environ, "PYTHONPATH": f"{SRC}{os.pathsep}{os.environ.get('PYTHONPATH', '')}"}
    process = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, env=env)
    try:
        assert process.stderr is not None
        first = json.loads(process.stderr.readline())            # the first pass is over: waiting for an hour
        assert (first["cycle"], first["attributed"]) == (1, 1)
        started = time.monotonic()
        process.send_signal(signal.SIGTERM)
        assert process.wait(timeout=30) == 0
        assert time.monotonic() - started < 10
        assert json.loads(process.stderr.readline()) == {"event": "stopped", "signal": "SIGTERM", "cycles": 1}
    finally:
        if process.poll() is None:
            process.kill()
        if process.stderr is not None:
            process.stderr.close()
