"""Helpers for the dashboard tests: results databases written by the real Blueprint, a live `firstfault
dashboard` subprocess on a loopback port, and Chromium through Playwright."""

from __future__ import annotations

import hashlib
import json
import signal
from dataclasses import dataclass
from pathlib import Path

from firstfault.cli import main
from firstfault.samples import samples_root
from tests.support.live_process import LiveProcess, free_port  # noqa: F401 - re-exported for tests

ROOT = Path(__file__).resolve().parents[2]
ARTIFACTS = ROOT / "test-artifacts" / "dashboard"
DOCS_IMG = ROOT / "docs" / "img"
CHROMIUM = Path("/usr/bin/chromium")
# what works in this environment (docs: ecosystem notes); `playwright install` cannot download browsers here
CHROMIUM_ARGS = ["--no-sandbox", "--disable-gpu", "--disable-background-networking", "--disable-component-update",
                 "--disable-sync", "--no-first-run", "--disable-quic"]


def blueprint_into(db: Path, *configs: Path, extra_args: list[str] | None = None) -> None:
    """Attribute static workload directories into a SQLite database with the real Blueprint (in-process);
    `extra_args` declare more connectors (a collector)."""
    argv = ["blueprint", "--no-progress", "--quiet"]
    for config in configs:
        argv += ["--configs", str(config)]
    code = main([*argv, *(extra_args or []), "--connector", "output", "db", "sqlite", "path", str(db)])
    assert code == 0, f"the Blueprint failed ({code})"


def samples_db(path: Path) -> Path:
    blueprint_into(path, samples_root())
    return path


def fingerprint(path: Path) -> tuple[str, int, int]:
    """The database file's content hash, modification time and size."""
    stat = path.stat()
    return hashlib.sha256(path.read_bytes()).hexdigest(), stat.st_mtime_ns, stat.st_size


@dataclass
class Dashboard(LiveProcess):
    """A running `firstfault dashboard` subprocess."""

    @classmethod
    def start(cls, db: Path, log_dir: Path, *options: str) -> Dashboard:
        live = LiveProcess.launch(["dashboard", "--db", str(db), "--log-level", "warning", *options], log_dir=log_dir,
                                  health_path="/healthz", stop_signal=signal.SIGINT)
        return cls(**live.__dict__)


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
