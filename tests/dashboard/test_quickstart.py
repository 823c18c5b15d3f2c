"""`firstfault quickstart`: one command writes the samples' results and serves the dashboard; Ctrl-C stops it."""

from __future__ import annotations

import os
import re
import signal
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

import httpx

from tests.dashboard.helpers import free_port

READY_TIMEOUT_S = 90.0


def _quickstart(cwd: Path, port: int) -> subprocess.Popen[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("FIRSTFAULT_")}
    env.pop("DISPLAY", None)
    return subprocess.Popen([sys.executable, "-m", "firstfault", "quickstart", "--no-browser", "--port", str(port)],
                            cwd=cwd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)


def _read_until_ready(process: subprocess.Popen[str]) -> str:
    """stdout up to the line saying how to stop (the dashboard is listening by then)."""
    assert process.stdout is not None
    lines: list[str] = []
    deadline = time.monotonic() + READY_TIMEOUT_S
    while time.monotonic() < deadline:
        line = process.stdout.readline()
        if not line:
            break
        lines.append(line)
        if line.startswith("Ctrl-C"):
            return "".join(lines)
    process.kill()
    raise AssertionError(f"quickstart never got ready:\n{''.join(lines)}\n{process.stderr.read() if process.stderr else ''}")


def test_quickstart_serves_the_samples_and_stops_on_ctrl_c(tmp_path: Path) -> None:
    port = free_port()
    process = _quickstart(tmp_path, port)
    try:
        out = _read_until_ready(process)
        urls = dict(re.findall(r"^\s+(dashboard|NVLink sample|its culprit|all workloads)\s+(http\S+)$", out, re.MULTILINE))
        assert urls["dashboard"] == f"http://127.0.0.1:{port}/"
        database = re.search(r"^\s+database\s+(\S+)$", out, re.MULTILINE)
        assert database and Path(database.group(1)) == (tmp_path / ".firstfault" / "quickstart.db").resolve()
        # the dashboard answers at every printed URL (it may still be finishing its start-up)
        for label, url in urls.items():
            for _ in range(50):
                try:
                    r = httpx.get(url, timeout=10)
                    break
                except httpx.TransportError:
                    time.sleep(0.1)
            assert r.status_code == 200, (label, url, r.status_code)
        assert "XID-149.4" in httpx.get(urls["NVLink sample"], timeout=10).text
        with sqlite3.connect(f"file:{database.group(1)}?mode=ro", uri=True) as con:
            assert con.execute("SELECT COUNT(*) FROM workload_attempts").fetchone()[0] == 5
        # a second quickstart on the same port fails at once, clearly
        second = subprocess.run([sys.executable, "-m", "firstfault", "quickstart", "--no-browser", "--port", str(port),
                                 "--db", str(tmp_path / "other.db")], capture_output=True, text=True, timeout=60,
                                check=False)
        assert second.returncode == 2 and "in use" in second.stderr and "Traceback" not in second.stderr
        assert not (tmp_path / "other.db").exists()
    finally:
        process.send_signal(signal.SIGINT)     # Ctrl-C
        try:
            code = process.wait(timeout=20)
        except subprocess.TimeoutExpired:
            process.kill()
            raise
    err = process.stderr.read() if process.stderr else ""
    assert code == 0, err
    assert "stopped" in err and "Traceback" not in err
    assert "5 attributed" in err
    with httpx.Client() as client:   # nothing is left listening
        try:
            client.get(f"http://127.0.0.1:{port}/", timeout=2)
            raise AssertionError("the dashboard still answers after Ctrl-C")
        except httpx.TransportError:
            pass
