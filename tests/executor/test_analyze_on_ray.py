"""`analyze` on a real Ray cluster: one workload split into per-file tasks whose states merge in file order gives
the same JSON, byte for byte, as scanning it in one process; so does a worker killed in the middle of its task."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest

from firstfault.engine import Engine
from firstfault.engine.timing import Timings
from firstfault.executor import LocalExecutor, RayExecutor
from firstfault.samples import sample_dirs
from tests.engine.test_parallel import _noisy_workload
from tests.executor.conftest import Killer, slow_workload
from tests.support.ray_cluster import RayCluster
from tests.support.workloads import CORPUS, WorkloadFactory


def test_one_workload_split_per_file_on_ray_is_byte_identical(engine: Engine, ray_executor: RayExecutor,
                                                              big_workload: Path) -> None:
    timings = Timings()
    on_ray = engine.analyze_path(big_workload, workers=4, executor=ray_executor, timings=timings)
    assert timings.counts["tasks"] >= 5   # the four 8.9 MB applogs alone, the syslogs grouped
    assert on_ray.to_json() == engine.analyze_path(big_workload, workers=1).to_json()
    assert on_ray.root_cause is not None and on_ray.root_cause.symptom == "XID-79"


def test_samples_corpus_and_merge_edge_cases_on_ray(engine: Engine, ray_executor: RayExecutor,
                                                    make_workload: WorkloadFactory) -> None:
    paths = [*sample_dirs().values(), *sorted(CORPUS.iterdir())[:8], _noisy_workload(make_workload)]
    for path in paths:   # small files: every file a task of its own is forced by workers >= files
        assert engine.analyze_path(path, workers=8, executor=ray_executor).to_json() == \
            engine.analyze_path(path).to_json(), path.name


def test_a_worker_killed_mid_scan_is_retried_and_changes_nothing(engine: Engine, ray_executor: RayExecutor,
                                                                 killer: Callable[..., Killer], tmp_path: Path) -> None:
    path = slow_workload(tmp_path, "slow", mb=250)
    expected = engine.analyze_path(path).to_json()
    watching = killer("_scan_files")
    timings = Timings()
    on_ray = engine.analyze_path(path, workers=4, executor=ray_executor, timings=timings)
    watching.join(5)
    assert watching.killed, "no scan task ran long enough to be killed"
    assert "executor_fallbacks" not in timings.counts   # Ray ran the task again; the driver did not have to
    assert on_ray.to_json() == expected


def test_a_scan_ray_gives_up_on_is_done_in_the_driver(engine: Engine, ray_executor: RayExecutor,
                                                      killer: Callable[..., Killer], tmp_path: Path) -> None:
    path = slow_workload(tmp_path, "slow", mb=250)   # small on disk: its files make one task
    expected = engine.analyze_path(path).to_json()
    watching = killer("_scan_files", times=4)   # the first attempt and Ray's three retries
    timings = Timings()
    on_ray = engine.analyze_path(path, workers=4, executor=ray_executor, timings=timings)
    watching.join(5)
    assert len(watching.killed) == 4 and timings.counts["tasks"] == 1
    assert timings.counts["executor_fallbacks"] == 1
    assert on_ray.to_json() == expected


def test_a_lost_local_worker_is_scanned_in_the_driver(engine: Engine, tmp_path: Path) -> None:
    """The same promise with the local process pool: a worker killed mid-task breaks the pool, and the files of
    every task the pool lost are scanned in this process instead."""
    import multiprocessing
    import signal
    import threading
    import time

    path = slow_workload(tmp_path, "slow", mb=250)
    expected = engine.analyze_path(path).to_json()
    killed: list[int] = []

    def kill_a_worker() -> None:
        deadline = time.monotonic() + 120
        while not killed and time.monotonic() < deadline:
            children = multiprocessing.active_children()
            if children:
                time.sleep(0.5)
                os.kill(children[0].pid or 0, signal.SIGKILL)
                killed.append(children[0].pid or 0)
            time.sleep(0.02)

    thread = threading.Thread(target=kill_a_worker, daemon=True)
    thread.start()
    timings = Timings()
    result = engine.analyze_path(path, workers=2, executor=LocalExecutor(), timings=timings)
    thread.join(5)
    assert killed and timings.counts["executor_fallbacks"] >= 1
    assert result.to_json() == expected


def _analyze(args: list[str], env: dict[str, str] | None = None) -> subprocess.CompletedProcess[bytes]:
    return subprocess.run([sys.executable, "-m", "firstfault", "analyze", *args], capture_output=True, timeout=600,
                          env={**os.environ, **(env or {})})


def test_the_analyze_command_prints_the_same_bytes_on_ray(cluster: RayCluster, big_workload: Path) -> None:
    local = _analyze([str(big_workload), "--json", "--workers", "1"])
    on_ray = _analyze([str(big_workload), "--json", "--workers", "4", "--executor", "ray"], cluster.env)
    assert local.returncode == on_ray.returncode == 0, on_ray.stderr.decode()[-2000:]
    assert on_ray.stdout == local.stdout


@pytest.mark.parametrize("command", [["analyze", "--sample", "--executor", "ray"],
                                     ["blueprint", "--configs", "SAMPLES", "--executor", "ray", "--quiet"]])
def test_without_ray_installed_the_error_names_the_extra(command: list[str]) -> None:
    """Ray stands in as not installed: `sys.modules["ray"] = None` makes `import ray` fail as it would."""
    samples = str(next(iter(sample_dirs().values())).parent)
    code = ("import sys; sys.modules['ray'] = None; from firstfault.cli import main; "
            f"sys.exit(main({[samples if word == 'SAMPLES' else word for word in command]!r}))")
    run = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert run.returncode == 2 and "Traceback" not in run.stderr
    assert "pip install 'firstfault[ray]'" in " ".join(run.stderr.split())
    assert run.stdout == ""


def test_an_unreachable_ray_address_is_one_clear_line(tmp_path: Path) -> None:
    import socket

    with socket.socket() as s:   # a port nothing listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    run = _analyze(["--sample", "--executor", "ray"], {"RAY_ADDRESS": f"127.0.0.1:{port}"})
    stderr = " ".join(run.stderr.decode().split())
    assert run.returncode == 2 and "Traceback" not in stderr
    assert f"cannot reach the Ray cluster at RAY_ADDRESS=127.0.0.1:{port}" in stderr
