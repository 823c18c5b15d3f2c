"""Fixtures for the Blueprint's end-to-end tests: the real Slurm and Prometheus that tests/support/setup-*.sh
started (missing ones fail the tests loudly), the kmock Kubernetes emulator and the Loki test server."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import httpx
import pytest
from blueprint_helpers import PROMETHEUS_URL, SLURM_CONF, SUPPORT, free_port, slurm


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


