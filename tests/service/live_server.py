"""Start the real service (`python -m firstfault serve`) on a free loopback port, and sample helpers."""

from __future__ import annotations

import os
import re
import signal
import socket
import subprocess
import sys
import time
import tomllib
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import httpx

SAMPLE = Path(__file__).resolve().parents[2] / "src" / "firstfault" / "samples" / "nvlink-walkthrough"
START_TIMEOUT_S = 60.0


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@dataclass
class Server:
    """A running `firstfault serve` subprocess; its stderr (JSON logs) goes to `log_path`."""

    process: subprocess.Popen[bytes]
    url: str
    log_path: Path

    @classmethod
    def start(cls, tmp: Path, env: dict[str, str] | None = None, args: list[str] | None = None) -> Server:
        port = free_port()
        log_path = tmp / f"server-{port}.log"
        environ = {k: v for k, v in os.environ.items() if not k.startswith("FIRSTFAULT_")}
        environ.update(env or {})
        with open(log_path, "wb") as log:
            process = subprocess.Popen([sys.executable, "-m", "firstfault", "serve", "--port", str(port), *(args or [])],
                                       stdout=log, stderr=subprocess.STDOUT, env=environ)
        server = cls(process, f"http://127.0.0.1:{port}", log_path)
        server.wait_healthy()
        return server

    def wait_healthy(self) -> None:
        deadline = time.monotonic() + START_TIMEOUT_S
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise RuntimeError(f"server exited with {self.process.returncode}:\n{self.log()}")
            try:
                if httpx.get(f"{self.url}/v2/healthz", timeout=1.0).status_code == 200:
                    return
            except httpx.TransportError:
                pass
            time.sleep(0.1)
        self.stop()
        raise RuntimeError(f"server not healthy after {START_TIMEOUT_S} s:\n{self.log()}")

    def stop(self, timeout: float = 20.0) -> int:
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
            try:
                self.process.wait(timeout)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
        return self.process.returncode

    def log(self) -> str:
        return self.log_path.read_text(encoding="utf-8", errors="replace")

    def client(self, **kwargs: Any) -> httpx.Client:
        return httpx.Client(base_url=self.url, timeout=30.0, **kwargs)


def sample_context() -> dict[str, Any]:
    """The nvlink-walkthrough sample's ExecutionContext as v2 JSON."""
    workload = tomllib.loads((SAMPLE / "scenario.toml").read_text())["workload"]
    return {"workload_id": "nvlink-walkthrough", "scheduler": workload["scheduler"], "job_id": workload["job_id"],
            "nodes": workload["nodes"], "ranks_per_node": workload["ranks_per_node"],
            "start_time": workload["start_time"], "end_time": workload["end_time"],
            "scheduler_state": workload["scheduler_state"], "exit_code": workload["exit_code"]}


def sample_files() -> list[tuple[str, str, str]]:
    """(node, source, text) of every evidence file of the sample."""
    return [(path.parent.name, path.stem, path.read_text()) for path in sorted(SAMPLE.glob("*/*.log"))]


def raw_text_batch(node: str, source: str, text: str, first_line: int = 1) -> dict[str, Any]:
    return {"format": "raw_text", "node": node, "source": source, "origin": f"{node}/{source}.log",
            "first_line": first_line, "text": text}


def verdict(result: dict[str, Any]) -> tuple[str, str, list[str]]:
    """(outcome, sub_domain, culprit nodes) of an Attribution JSON."""
    return result["outcome"], result["sub_domain"], [c["node"] for c in result["culprit_nodes"]]


EXPECTED = ("Fail InfraHW", "nvlink", ["node-02"])
_SYSLOG_TIME = re.compile(r"^([A-Z][a-z]{2} [ \d]\d \d\d:\d\d:\d\d) ")
_ISO_TIME = re.compile(r"^(\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(?:\.\d+)?Z)")


def stamped(text: str) -> list[tuple[int, str]]:
    """(unix ns, line) as a log shipper would store them: each line at its own time, else the previous one's."""
    out = []
    last = datetime.fromisoformat(sample_context()["start_time"])
    for line in text.splitlines():
        if m := _SYSLOG_TIME.match(line):
            last = datetime.strptime(f"2026 {m.group(1)}", "%Y %b %d %H:%M:%S").replace(tzinfo=UTC)
        elif m := _ISO_TIME.match(line):
            last = datetime.fromisoformat(m.group(1))
        out.append((int(last.timestamp() * 1e9), line))
    return out

