"""Start the real service (`python -m firstfault serve`) on a free loopback port, and sample helpers."""

from __future__ import annotations

import re
import tomllib
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import httpx

from tests.support.live_process import LiveProcess, free_port  # noqa: F401 - re-exported for tests

SAMPLE = Path(__file__).resolve().parents[2] / "src" / "firstfault" / "samples" / "nvlink-walkthrough"

# The `server` fixture's limits (conftest.py): small enough to cross in a test, large enough for the sample.
TEST_LIMITS = {
    "FIRSTFAULT_MAX_REQUEST_BYTES": str(4 * 1024 * 1024),
    "FIRSTFAULT_MAX_LINE_BYTES": "2048",
    "FIRSTFAULT_MAX_SESSION_OBSERVATIONS": "20000",
    "FIRSTFAULT_MAX_SESSION_BYTES": str(1024 * 1024),
}


@dataclass
class Server(LiveProcess):
    """A running `firstfault serve` subprocess; its stderr (JSON logs) goes to `log_path`."""

    @classmethod
    def start(cls, tmp: Path, env: dict[str, str] | None = None, args: list[str] | None = None) -> Server:
        live = LiveProcess.launch(["serve", *(args or [])], log_dir=tmp, health_path="/v2/healthz", env=env)
        return cls(**live.__dict__)

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

