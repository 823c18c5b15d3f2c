"""A real, small Ray cluster on this machine for the executor tests: `ray start --head --block` with 2 CPUs and a
200 MB object store, token authentication with a token of its own, workers importing this checkout's firstfault.

Ray is a pip package (the `ray` extra, also in the `test` extra), not a server a setup script installs: the
fixture starts the head itself in a session of its own and stops it by the id of the process it started
(SIGTERM lets `ray start --block` stop what it started; what is left of that session is killed if that takes
too long).
"""

from __future__ import annotations

import os
import secrets
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import firstfault

SRC = Path(firstfault.__file__).resolve().parents[1]   # the checkout's src/, which the workers must import
RAY = Path(sys.executable).with_name("ray")


@dataclass(frozen=True)
class RayCluster:
    address: str
    env: dict[str, str]      # what a driver needs to reach it: RAY_ADDRESS and the token
    pid: int                 # `ray start --block`
    log: Path

    def worker_pids(self, function: str) -> list[int]:
        """Worker processes of this cluster running `function` now (Ray titles them `ray::NAME` while they
        run a task of NAME, `ray::IDLE` otherwise)."""
        return [pid for pid, title in _session_processes(self.pid) if title == f"ray::{function}"]


def _session_processes(sid: int) -> list[tuple[int, str]]:
    """(pid, title) of every process of the session `ray start` began (its workers have groups of their own)."""
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            if os.getsid(int(entry.name)) != sid:
                continue
            title = (entry / "cmdline").read_bytes().split(b"\0")[0].decode(errors="replace").strip()
        except OSError:   # gone meanwhile
            continue
        found.append((int(entry.name), title))
    return found


def _free_port() -> int:
    """A port outside Ray's default worker range (10002-19999), free now."""
    for _ in range(50):
        port = secrets.randbelow(20000) + 30000
        with socket.socket() as s:
            try:
                s.bind(("127.0.0.1", port))
            except OSError:
                continue
            return port
    raise RuntimeError("no free port for the Ray head")


@contextmanager
def ray_cluster(base: Path, cpus: int = 2, object_store_mb: int = 200) -> Iterator[RayCluster]:
    token = base / "token"
    token.write_text(secrets.token_hex(32))
    token.chmod(0o600)
    auth = {"RAY_AUTH_MODE": "token", "RAY_AUTH_TOKEN_PATH": str(token)}
    port = _free_port()
    env = {**os.environ, **auth, "PYTHONPATH": str(SRC), "RAY_USAGE_STATS_ENABLED": "0"}
    env.pop("RAY_ADDRESS", None)
    log = base / "ray-head.log"
    with open(log, "wb") as out:
        head = subprocess.Popen(
            [str(RAY), "start", "--head", "--block", f"--port={port}", f"--num-cpus={cpus}",
             f"--object-store-memory={object_store_mb * 1024 * 1024}", "--node-ip-address=127.0.0.1",
             "--include-dashboard=false", "--disable-usage-stats", f"--temp-dir={base / 'r'}"],
            env=env, stdout=out, stderr=subprocess.STDOUT, start_new_session=True)
    try:
        address = _wait_ready(head, log, port)
        yield RayCluster(address=address, env={**auth, "RAY_ADDRESS": address}, pid=head.pid, log=log)
    finally:
        _stop(head)


def _wait_ready(head: subprocess.Popen[bytes], log: Path, port: int, timeout: float = 120) -> str:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if head.poll() is not None:
            raise RuntimeError(f"ray start exited with {head.returncode}: {log.read_text(errors='replace')[-3000:]}")
        if b"Ray runtime started" in log.read_bytes():
            return f"127.0.0.1:{port}"
        time.sleep(0.2)
    raise RuntimeError(f"the Ray head did not start in {timeout:g} s: {log.read_text(errors='replace')[-3000:]}")


def _stop(head: subprocess.Popen[bytes], grace: float = 45) -> None:
    if head.poll() is None:
        head.send_signal(signal.SIGTERM)
        try:
            head.wait(grace)
        except subprocess.TimeoutExpired:
            pass
    for pid, _title in _session_processes(head.pid):   # whatever of the cluster is left
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
    head.wait()
