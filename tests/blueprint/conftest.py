"""Fixtures for the Blueprint's end-to-end tests: the real Slurm and Prometheus that tests/support/setup-*.sh
started (missing ones fail the tests loudly), the kmock Kubernetes emulator and the Loki test server."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import httpx
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


@pytest.fixture(scope="session")
def slurm_cluster() -> Path:
    """The real Slurm 22.05 of tests/support/setup-slurm.sh; fails (never skips) when it is not up."""
    try:
        slurm("scontrol", "ping")
        states = slurm("sinfo", "-h", "-N", "-o", "%T").split()
    except (AssertionError, OSError) as exc:
        pytest.fail(f"Slurm is not running (run tests/support/setup-slurm.sh as root): {exc}")
    if len(states) != 2 or any(s.startswith(("down", "drain", "fail", "unk", "not_resp")) for s in states):
        pytest.fail(f"Slurm nodes are not usable: {states} (run tests/support/setup-slurm.sh)")
    os.environ["SLURM_CONF"] = str(SLURM_CONF)
    return SLURM_CONF


# -- Prometheus ----------------------------------------------------------------------------------------------
@pytest.fixture(scope="session")
def prometheus_url() -> str:
    """The real Prometheus of tests/support/setup-prometheus.sh, with its backfill; fails when it is not up."""
    try:
        httpx.get(f"{PROMETHEUS_URL}/-/ready", timeout=5).raise_for_status()
        answer = httpx.get(f"{PROMETHEUS_URL}/api/v1/query", timeout=5, params={
            "query": "count(DCGM_FI_DEV_XID_ERRORS)", "time": "2026-06-01T10:00:00Z"}).json()
        assert answer["data"]["result"][0]["value"][1] == "8"
    except (httpx.HTTPError, AssertionError, KeyError, IndexError) as exc:
        pytest.fail(f"Prometheus with the test backfill is not running (run tests/support/setup-prometheus.sh): "
                    f"{exc!r}")
    return PROMETHEUS_URL


# -- Kubernetes emulator ---------------------------------------------------------------------------------------
@dataclass
class Emulator:
    url: str
    kubeconfig: Path


@pytest.fixture
def k8s_emulator(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Callable[[dict], Emulator]]:
    """Start tests/support/k8s_emulator.py with a seed; kubectl is pointed at it through a kubeconfig."""
    processes: list[subprocess.Popen[str]] = []
    monkeypatch.setenv("KUBECACHEDIR", str(tmp_path / "kube-cache"))

    def start(seed: dict) -> Emulator:
        seed_path = tmp_path / "seed.json"
        seed_path.write_text(json.dumps(seed), encoding="utf-8")
        port = free_port()
        process = subprocess.Popen([sys.executable, str(SUPPORT / "k8s_emulator.py"), str(seed_path), str(port)],
                                   stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        processes.append(process)
        line = process.stdout.readline() if process.stdout else ""
        if not line.startswith("listening"):
            raise AssertionError(f"the k8s emulator did not start: {line} {process.stderr.read() if process.stderr else ''}")
        url = f"http://127.0.0.1:{port}"
        kubeconfig = tmp_path / "kubeconfig"
        kubeconfig.write_text(json.dumps({
            "apiVersion": "v1", "kind": "Config", "current-context": "emulator",
            "clusters": [{"name": "emulator", "cluster": {"server": url}}],
            "users": [{"name": "tester", "user": {"token": "not-checked"}}],
            "contexts": [{"name": "emulator", "context": {"cluster": "emulator", "user": "tester"}}]}),
            encoding="utf-8")
        return Emulator(url, kubeconfig)

    yield start
    for process in processes:
        process.terminate()
        process.wait(timeout=10)


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
