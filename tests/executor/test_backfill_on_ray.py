"""The Blueprint on a real Ray cluster: a backfill fans its workloads out as Ray tasks and writes every result
once, each diagnosis byte for byte the local run's; a worker killed mid-task is retried; a task Ray gives up on
is a failed result that the next pass attributes again."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest

from bench.backfill import stored_diagnoses
from firstfault.blueprint.config import BlueprintConfig, ConnectorSpec, spec_from_words
from firstfault.blueprint.connectors import build_plan, with_environment
from firstfault.blueprint.runner import Runner
from firstfault.blueprint.workload import WorkloadTask, run_workload
from firstfault.engine import ExecutionContext
from firstfault.errors import ExecutorError
from firstfault.executor import RayExecutor
from firstfault.samples import samples_root
from tests.executor.conftest import Killer, slow_workload
from tests.support.ray_cluster import RayCluster
from tests.support.workloads import CORPUS


def _blueprint(db: Path, roots: list[Path], *args: str, env: dict[str, str] | None = None) -> None:
    command = [sys.executable, "-m", "firstfault", "blueprint", *[w for r in roots for w in ("--configs", str(r))],
               "--connector", "output", "db", "sqlite", "path", str(db), "--quiet", *args]
    run = subprocess.run(command, capture_output=True, text=True, timeout=900, env={**os.environ, **(env or {})})
    assert run.returncode == 0, run.stderr[-3000:]


def test_a_backfill_on_ray_writes_each_result_once_and_identical(cluster: RayCluster, tmp_path: Path) -> None:
    roots = [CORPUS, samples_root()]
    _blueprint(tmp_path / "local.db", roots)
    _blueprint(tmp_path / "ray.db", roots, "--executor", "ray", "--workers", "auto", env=cluster.env)
    local, on_ray = stored_diagnoses(tmp_path / "local.db"), stored_diagnoses(tmp_path / "ray.db")
    assert len(local) >= 60 and all(len(runs) == 1 for runs in on_ray.values())
    assert on_ray == local


def _plan_config(db: Path, root: Path) -> BlueprintConfig:
    return BlueprintConfig(connectors=[spec_from_words(["context", "static", "path", str(root)]),
                                       spec_from_words(["output", "db", "sqlite", "path", str(db)])], workers=0)


def _workloads(parent: Path, slow: int) -> Path:
    root = parent / "workloads"
    root.mkdir()
    for i in range(slow):
        slow_workload(root, f"slow-{i}", mb=40)
    for sample in sorted(samples_root().iterdir()):
        if (sample / "scenario.toml").is_file():
            (root / sample.name).symlink_to(sample, target_is_directory=True)
    return root


def _backfill(config: BlueprintConfig, executor: RayExecutor | None, passes: int = 1) -> Runner:
    plan = build_plan(config)
    runner = Runner(plan, config, executor=executor)
    try:
        for _ in range(passes):
            runner.run_once()
    finally:
        plan.close()
    return runner


def test_a_worker_killed_mid_task_loses_and_duplicates_nothing(ray_executor: RayExecutor,
                                                               killer: Callable[..., Killer], tmp_path: Path) -> None:
    root = _workloads(tmp_path, slow=3)
    _backfill(_plan_config(tmp_path / "local.db", root), None)
    watching = killer("run_workload")
    runner = _backfill(_plan_config(tmp_path / "ray.db", root), ray_executor)
    watching.join(5)
    assert watching.killed, "no workload task ran long enough to be killed"
    assert runner.summary.failed == 0 and runner.summary.attributed == 8
    on_ray = stored_diagnoses(tmp_path / "ray.db")
    assert all(len(runs) == 1 for runs in on_ray.values())
    assert on_ray == stored_diagnoses(tmp_path / "local.db")


def test_a_task_ray_gives_up_on_is_failed_then_attributed_again(ray_executor: RayExecutor,
                                                                 killer: Callable[..., Killer],
                                                                 tmp_path: Path) -> None:
    root = tmp_path / "one"
    root.mkdir()
    slow_workload(root, "slow-0", mb=40)
    _backfill(_plan_config(tmp_path / "local.db", root), None)
    config = _plan_config(tmp_path / "ray.db", root)
    plan = build_plan(config)
    runner = Runner(plan, config, executor=ray_executor)
    try:
        watching = killer("run_workload", times=4)   # the first attempt and Ray's three retries
        runner.run_once()
        watching.join(5)
        assert len(watching.killed) == 4
        assert runner.summary.failed == 1 and not runner.done
        runner.run_once()   # the attempt was not done: the next pass attributes it
        assert runner.summary.attributed == 1 and len(runner.done) == 1
    finally:
        plan.close()
    (failed, attributed), = stored_diagnoses(tmp_path / "ray.db").values()
    assert failed.startswith("error: executor ray: the task failed:") and "Worker" in failed
    assert [attributed] == next(iter(stored_diagnoses(tmp_path / "local.db").values()))


def test_a_worker_with_another_catalog_refuses_the_work(tmp_path: Path) -> None:
    """What a Ray worker does with a task from a driver it has no plan of (run here, in this process)."""
    config = _plan_config(tmp_path / "unused.db", samples_root())
    ctx = ExecutionContext(workload_id="w", nodes=["n1"])
    task = WorkloadTask(plan_key="a driver elsewhere", config=config, catalog_hash="0" * 64,
                        context=ctx.model_dump(mode="json"), found_by="static", found_kind="context")
    with pytest.raises(ExecutorError, match=r"is not the driver's \(000000000000\): run the same firstfault"):
        run_workload(task)


def test_the_config_shipped_to_workers_carries_the_drivers_environment() -> None:
    config = BlueprintConfig(connectors=[ConnectorSpec("logs", "loki", {"selector": '{job="x"}'}),
                                         ConnectorSpec("output", "sqlite", {"path": "r.db"})])
    shipped = with_environment(config, {"FIRSTFAULT_LOKI_URL": "http://loki:3100", "FIRSTFAULT_LOKI_SELECTOR": "no",
                                        "FIRSTFAULT_SQLITE_PATH": "other.db"})
    assert shipped.connectors[0].options == {"selector": '{job="x"}', "url": "http://loki:3100"}
    assert shipped.connectors[1].options == {"path": "r.db"}   # outputs are written by the driver only
    assert config.connectors[0].options == {"selector": '{job="x"}'}   # the driver's own config is unchanged


def test_the_backfill_benchmark_runs_and_checks_its_results(cluster: RayCluster, tmp_path: Path) -> None:
    """bench/backfill.py at a tiny size (its numbers are in docs/benchmarks.md; nothing here is timed)."""
    run = subprocess.run([sys.executable, "-m", "bench", "backfill", "--workloads", "12", "--repeat", "1",
                          "--runs", "local:1", "ray:auto", "--quiet", "1", "--out", str(tmp_path)],
                         capture_output=True, text=True, timeout=900, env={**os.environ, **cluster.env})
    assert run.returncode == 0, run.stderr[-3000:]
    assert "every diagnosis identical to the first run's" in run.stdout and "| ray | auto |" in run.stdout


def test_the_executor_setting_from_the_command_line_and_the_config_file(tmp_path: Path) -> None:
    from firstfault.cli import build_parser
    from firstfault.cli.blueprint import build_config
    from firstfault.errors import ConfigError

    toml = tmp_path / "blueprint.toml"
    toml.write_text('executor = "ray"\nworkers = 0\n')
    config = build_config(build_parser().parse_args(["blueprint", "--config", str(toml)]))
    assert (config.executor, config.workers) == ("ray", 0)
    config = build_config(build_parser().parse_args(["blueprint", "--config", str(toml), "--executor", "local",
                                                     "--workers", "3"]))
    assert (config.executor, config.workers) == ("local", 3)
    assert build_config(build_parser().parse_args(["blueprint", "--workers", "auto"])).workers == 0
    for text, message in (('executor = "dask"', "`executor` must be one of local, ray"),
                          ("executor = 1", "`executor` must be a string"),
                          ("workers = -1", "`workers` must be 0 \\(auto\\) or more")):
        toml.write_text(text + "\n")
        with pytest.raises(ConfigError, match=message):
            build_config(build_parser().parse_args(["blueprint", "--config", str(toml)]))
