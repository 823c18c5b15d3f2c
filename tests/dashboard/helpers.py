"""Helpers for the dashboard tests: results databases written by the real Blueprint, a live `firstfault
dashboard` subprocess on a loopback port, and Chromium through Playwright."""

from __future__ import annotations

import hashlib
import json
import os
import signal
import socket
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import httpx

from firstfault.cli import main
from firstfault.engine.commands import samples_root

ROOT = Path(__file__).resolve().parents[2]
ARTIFACTS = ROOT / "test-artifacts" / "dashboard"
DOCS_IMG = ROOT / "docs" / "img"
CHROMIUM = Path("/usr/bin/chromium")
# what works in this environment (docs: ecosystem notes); `playwright install` cannot download browsers here
CHROMIUM_ARGS = ["--no-sandbox", "--disable-gpu", "--disable-background-networking", "--disable-component-update",
                 "--disable-sync", "--no-first-run", "--disable-quic"]
START_TIMEOUT_S = 60.0


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def blueprint_into(db: Path, *configs: Path) -> None:
    """Attribute static workload directories into a SQLite database with the real Blueprint (in-process)."""
    argv = ["blueprint", "--no-progress", "--quiet"]
    for config in configs:
        argv += ["--configs", str(config)]
    code = main([*argv, "--connector", "output", "db", "sqlite", "path", str(db)])
    assert code == 0, f"the Blueprint failed ({code})"


def samples_db(path: Path) -> Path:
    blueprint_into(path, samples_root())
    return path


def fingerprint(path: Path) -> tuple[str, int, int]:
    """The database file's content hash, modification time and size."""
    stat = path.stat()
    return hashlib.sha256(path.read_bytes()).hexdigest(), stat.st_mtime_ns, stat.st_size


@dataclass
class Dashboard:
    """A running `firstfault dashboard` subprocess."""

    process: subprocess.Popen[bytes]
    url: str
    log_path: Path

    @classmethod
    def start(cls, db: Path, log_dir: Path) -> Dashboard:
        port = free_port()
        log_path = log_dir / f"dashboard-{port}.log"
        env = {k: v for k, v in os.environ.items() if not k.startswith("FIRSTFAULT_")}
        with open(log_path, "wb") as log:
            process = subprocess.Popen(
                [sys.executable, "-m", "firstfault", "dashboard", "--db", str(db), "--port", str(port),
                 "--log-level", "warning"], stdout=log, stderr=subprocess.STDOUT, env=env)
        dashboard = cls(process, f"http://127.0.0.1:{port}", log_path)
        dashboard.wait_ready()
        return dashboard

    def wait_ready(self) -> None:
        deadline = time.monotonic() + START_TIMEOUT_S
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise RuntimeError(f"the dashboard exited with {self.process.returncode}:\n{self.log()}")
            try:
                if httpx.get(f"{self.url}/healthz", timeout=1.0).status_code == 200:
                    return
            except httpx.TransportError:
                pass
            time.sleep(0.1)
        self.stop()
        raise RuntimeError(f"the dashboard was not ready after {START_TIMEOUT_S} s:\n{self.log()}")

    def stop(self, timeout: float = 20.0) -> int:
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGINT)
            try:
                self.process.wait(timeout)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
        return self.process.returncode

    def log(self) -> str:
        return self.log_path.read_text(encoding="utf-8", errors="replace")


# -- a workload whose names and log lines are hostile ---------------------------------------------------------
SCRIPT = "<script>alert('xss-script')</script>"
IMG = "\"><img src=x onerror=alert('xss-img')>"
SVG = "'><svg onload=alert('xss-svg')>"
SQL = "' OR 1=1 --"
HOSTILE_ID = f"kueue:ml/{SCRIPT}?a=1&b=2#frag"
HOSTILE_NODES = ["gpu<b>01", f"n2{SVG}"]
# substrings that must never reach a page unescaped
RAW_PAYLOADS = ("<script>alert", "<img src=x", "<svg onload", "<b>01")


def _toml(text: str) -> str:
    return json.dumps(text)  # a JSON string is a valid TOML basic string


def hostile_workload(root: Path) -> Path:
    """A static workload whose id, name, job id, node names and log lines carry HTML/JS and SQL payloads."""
    directory = root / "hostile"
    directory.mkdir(parents=True)
    nodes = ", ".join(_toml(n) for n in HOSTILE_NODES)
    (directory / "scenario.toml").write_text(
        f"id = {_toml(HOSTILE_ID)}\n"
        "[workload]\nscheduler = \"slurm\"\n"
        f"job_id = {_toml(SQL)}\nname = {_toml('train ' + IMG + ' ' + SCRIPT)}\n"
        "scheduler_state = \"FAILED\"\nexit_code = \"1:0\"\n"
        "start_time = \"2026-06-01T10:00:00Z\"\nend_time = \"2026-06-01T10:20:00Z\"\n"
        f"nodes = [{nodes}]\nranks_per_node = 8\n", encoding="utf-8")
    first, second = HOSTILE_NODES
    files = {
        f"{first}/syslog.log": [
            (f"Jun  1 10:05:00 gpu01 kernel: NVRM: Xid (PCI:0000:9a:00): 79, pid=4242, name={SCRIPT}, "
             "GPU has fallen off the bus."),
        ],
        f"{first}/applog.log": [
            f"2026-06-01T10:05:01.000Z [rank0]: KeyError: '{IMG}'",
        ],
        f"{second}/applog.log": [
            ("2026-06-01T10:05:02.000Z [rank8]:[E601 10:05:02.000000000 ProcessGroupNCCL.cpp:1601] [PG ID 0 PG GUID "
             "0(default_pg) Rank 8] Process group watchdog thread terminated with exception: NCCL error: remote "
             f"process exited or there was a network error, NCCL version 2.26.6 </pre>{SVG}{SQL}"),
        ],
    }
    for name, lines in files.items():
        path = directory / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return directory
