"""Fixtures of the executor tests: one real Ray cluster on this machine for the session (tests/support/
ray_cluster.py), this test process connected to it as a driver, and the workloads the tests run on it."""

from __future__ import annotations

import gzip
import os
import signal
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from bench.generate import Spec, generate
from firstfault.executor import RayExecutor
from tests.support.ray_cluster import RayCluster, ray_cluster
from tests.support.workloads import write_workload

# One line of ordinary syslog chatter that no rule matches, repeated: evidence that costs time to read and scan
# (about a second of CPU per 100 MB here) while nothing in it changes the result.
QUIET = b"2025-01-01T00:30:00Z n1 systemd[1]: Started Session 5 of user root.\n"
_MEMBER = gzip.compress(QUIET * 150_000)   # ~10 MB of text per gzip member


@pytest.fixture(scope="session")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RayCluster]:
    # a short base path: Ray's unix sockets live under it (at most 107 bytes)
    base = Path(tmp_path_factory.mktemp("ray", numbered=True))
    with ray_cluster(base) as running:
        yield running


@pytest.fixture(scope="session")
def ray_executor(cluster: RayCluster) -> Iterator[RayExecutor]:
    """This process as a driver of the test cluster, through RAY_ADDRESS like any user."""
    saved = {key: os.environ.get(key) for key in cluster.env}
    os.environ.update(cluster.env)
    executor = RayExecutor()
    try:
        yield executor
    finally:
        executor.close()
        for key, value in saved.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value


@pytest.fixture(scope="session")
def big_workload(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The benchmark generator's workload: 4 nodes x 10 MiB (8 files, the applogs 8.9 MB each: one task each),
    a planted Xid 79."""
    out = tmp_path_factory.mktemp("big") / "wl"
    generate(Spec(nodes=4, mib_per_node=10), out)
    return out


def slow_workload(parent: Path, name: str, mb: int) -> Path:
    """A small failing workload plus `mb` MB (gzipped) of quiet syslog per node: a task that runs long enough
    to be killed in the middle."""
    root = write_workload(parent, {
        "n1/syslog": ["2025-01-01T00:10:00Z n1 kernel: NVRM: Xid (PCI:0000:9a:00): 79, pid=1, name=x, GPU has "
                      "fallen off the bus."],
        "n2/applog": ["2025-01-01T00:20:00Z [rank9]: RuntimeError: NCCL communicator was aborted on rank 9."]},
        nodes=["n1", "n2"], name=name)
    for path in (root / "n1" / "applog.log.gz", root / "n2" / "syslog.log.gz"):
        path.write_bytes(_MEMBER * max(1, mb // 10))   # gzip members concatenated: one stream when read
    return root


class Killer(threading.Thread):
    """SIGKILLs worker processes of `cluster` once each has run a task of `function` for `after` seconds
    (`times` of them): a worker lost in the middle of its task."""

    def __init__(self, cluster: RayCluster, function: str, *, times: int = 1, after: float = 0.5,
                 timeout: float = 300) -> None:
        super().__init__(daemon=True)
        self.cluster, self.function, self.times, self.after, self.timeout = cluster, function, times, after, timeout
        self.killed: list[int] = []
        self.stop = threading.Event()

    def run(self) -> None:
        seen: dict[int, float] = {}
        deadline = time.monotonic() + self.timeout
        while len(self.killed) < self.times and not self.stop.is_set() and time.monotonic() < deadline:
            now = time.monotonic()
            running = set(self.cluster.worker_pids(self.function))
            seen = {pid: since for pid, since in seen.items() if pid in running}
            for pid in running - seen.keys():
                seen[pid] = now
            for pid, since in seen.items():
                if now - since >= self.after and pid not in self.killed:
                    os.kill(pid, signal.SIGKILL)
                    self.killed.append(pid)
                    break
            time.sleep(0.05)


@pytest.fixture
def killer(cluster: RayCluster) -> Iterator[Callable[..., Killer]]:
    started: list[Killer] = []

    def start(function: str, times: int = 1, after: float = 0.5) -> Killer:
        thread = Killer(cluster, function, times=times, after=after)
        thread.start()
        started.append(thread)
        return thread

    yield start
    for thread in started:
        thread.stop.set()
        thread.join(5)
