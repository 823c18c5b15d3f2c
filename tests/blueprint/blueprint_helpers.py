"""Helpers of the Blueprint's end-to-end tests (run the CLI in-process, wait, talk to the real Slurm, write
static workloads); conftest.py holds the fixtures."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from firstfault.cli import main

SUPPORT = Path(__file__).resolve().parents[1] / "support"
SLURM_CONF = Path(os.environ.get("SLURM_CI_DIR", "/tmp/slurm-ci")) / "slurm.conf"
PROMETHEUS_URL = "http://127.0.0.1:19090"


def run_blueprint(argv: list[str], capsys: pytest.CaptureFixture[str]) -> tuple[int, list[dict], str]:
    """Run `firstfault blueprint ARGV` in-process: (exit code, stdout JSON lines, stderr)."""
    code = main(["blueprint", "--no-progress", *argv])
    out, err = capsys.readouterr()
    return code, [json.loads(line) for line in out.splitlines() if line.strip()], err


def wait_for(what: str, check: Callable[[], bool], timeout: float, every: float = 0.5) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if check():
            return
        time.sleep(every)
    raise AssertionError(f"timed out after {timeout:.0f} s waiting for {what}")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


# -- Slurm ---------------------------------------------------------------------------------------------------
def slurm(*argv: str) -> str:
    done = subprocess.run(argv, capture_output=True, text=True, timeout=60, check=False,
                          env={**os.environ, "SLURM_CONF": str(SLURM_CONF)})
    if done.returncode != 0:
        raise AssertionError(f"{' '.join(argv)}: {done.stderr.strip()}")
    return done.stdout.strip()


def make_workload(root: Path, name: str, nodes: list[str], start: str, end: str, state: str = "FAILED",
                  files: dict[str, list[str]] | None = None, scheduler: str = "slurm") -> Path:
    """A static workload directory (corpus format): scenario.toml and `<node>/<source>.log` files."""
    directory = root / name
    directory.mkdir(parents=True)
    node_list = ", ".join(f'"{n}"' for n in nodes)
    (directory / "scenario.toml").write_text(
        f'id = "{name}"\n[workload]\nscheduler = "{scheduler}"\njob_id = "{name}"\nscheduler_state = "{state}"\n'
        f'start_time = "{start}"\nend_time = "{end}"\nnodes = [{node_list}]\n', encoding="utf-8")
    for where, lines in (files or {}).items():
        path = directory / f"{where}.log"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return directory
