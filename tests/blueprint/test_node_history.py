"""Node fault history in the Blueprint: a second run over a node whose earlier workload's culprit finding is in the
results database (SQLite, and PostgreSQL from tests/support/setup-postgres.sh) gets it as supporting evidence and a
stronger answer; a fresh database, a window too short, or `history 0` give the answer without it."""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Iterator
from pathlib import Path

import pytest
from blueprint_helpers import run_blueprint

from firstfault.blueprint import resultsdb
from tests.support.postgres import scratch_database, writer_dsn

WATCHDOG = ("{day}T{hour}:40:00Z [rank0]:[E0101 00:40:00.000000000 ProcessGroupNCCL.cpp:1] [Rank 0] Watchdog caught "
            "collective operation timeout: WorkNCCL(SeqNum=9, OpType=ALLREDUCE, NumelIn=1, NumelOut=1, "
            "Timeout(ms)=600000) ran for 600010 milliseconds before timing out.")
CUDA_UNKNOWN = "{day}T{hour}:30:00Z [rank6]: RuntimeError: CUDA error: unknown error"


def _job(root: Path, job: int, day: str, hour: str = "10") -> Path:
    """Slurm job JOB on gpu-b07 and gpu-b08, failed by CUDA's unknown error on rank 6 (gpu-b07) at DAY HOUR:30."""
    workload = root / f"job-{job}"
    for node, line in (("gpu-b07", CUDA_UNKNOWN), ("gpu-b08", WATCHDOG)):
        (workload / node).mkdir(parents=True)
        (workload / node / "applog.log").write_text(line.format(day=day, hour=hour) + "\n")
    (workload / "scenario.toml").write_text(
        f'id = "slurm:{job}"\n[workload]\nscheduler = "slurm"\njob_id = "{job}"\nnodes = ["gpu-b07", "gpu-b08"]\n'
        f'start_time = "{day}T{hour}:00:00Z"\nend_time = "{day}T{hour}:59:00Z"\nscheduler_state = "FAILED"\n'
        'exit_code = "1:0"\n')
    return root


def _run(configs: Path, output: list[str], capsys: pytest.CaptureFixture[str]) -> None:
    code, _, err = run_blueprint(["--configs", str(configs), "--connector", "output", *output], capsys)
    assert code == 0, err


def _diagnosis(target: str, workload: str) -> dict:
    db = resultsdb.open_results(target)
    try:
        row = db.execute("SELECT r.result_json FROM workload_attempts a JOIN attribution_runs r "
                         "ON r.id = a.latest_run_id WHERE a.workload_id = ?", (workload,)).fetchone()
    finally:
        db.close()
    return dict(json.loads(row[0])["diagnosis"])


@pytest.fixture(params=["sqlite", "postgres"])
def database(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[tuple[list[str], str]]:
    """The `--connector output ...` words of a fresh results database, and its target."""
    if request.param == "sqlite":
        path = tmp_path / "results.db"
        yield ["db", "sqlite", "path", str(path)], str(path)
        return
    with scratch_database("history") as name:
        dsn = writer_dsn(name)
        yield ["db", "postgres", "dsn", dsn], dsn


def test_a_second_failure_of_the_same_gpu_is_supported_by_the_first(tmp_path: Path, database: tuple[list[str], str],
                                                                    capsys: pytest.CaptureFixture[str]) -> None:
    output, target = database
    _run(_job(tmp_path / "week1", 101, "2025-03-01"), output, capsys)
    first = _diagnosis(target, "slurm:101")
    assert first["confidence"] == "medium" and first["coverage"]["history"]["findings"] == 0   # given, empty
    assert "history" not in first["culprit_nodes"][0]

    _run(_job(tmp_path / "week2", 202, "2025-03-10"), output, capsys)
    second = _diagnosis(target, "slurm:202")
    assert second["sub_domain"] == "gpu" and second["confidence"] == "high"
    [culprit] = second["culprit_nodes"]
    assert culprit["node"] == "gpu-b07"
    [earlier] = culprit["history"]
    assert (earlier["workload_id"], earlier["attempt"], earlier["symptom"]) == ("slurm:101", 0, "CUDA unknown error")
    assert earlier["time"] == "2025-03-01T10:30:00Z"
    assert earlier["evidence"]["text"].endswith("CUDA error: unknown error")
    assert second["coverage"]["history"] == {"findings": 1, "counted": 1, "window_days": 30,
                                             "since": "2025-02-08T10:00:00Z", "earliest": "2025-03-01T10:30:00Z"}

    db = resultsdb.open_results(target)   # the stored context does not carry the history it was given
    try:
        context = db.execute("SELECT context_json FROM workload_attempts WHERE workload_id = 'slurm:202'").fetchone()[0]
    finally:
        db.close()
    assert "history" not in json.loads(context)


@pytest.mark.parametrize(("option", "counted"), [("5d", 0), ("0", None)])
def test_a_short_window_or_none_gives_the_answer_without_history(tmp_path: Path, option: str, counted: int | None,
                                                                 capsys: pytest.CaptureFixture[str]) -> None:
    db = tmp_path / "results.db"
    output = ["db", "sqlite", "path", str(db), "history", option]
    _run(_job(tmp_path / "week1", 101, "2025-03-01"), output, capsys)
    _run(_job(tmp_path / "week2", 202, "2025-03-10"), output, capsys)
    second = _diagnosis(str(db), "slurm:202")
    assert second["confidence"] == "medium" and "history" not in second["culprit_nodes"][0]
    assert second["coverage"].get("history", {}).get("counted") == counted


def test_an_unreadable_history_is_a_problem_and_the_attempt_is_attributed_without_it(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    db = tmp_path / "results.db"
    output = ["db", "sqlite", "path", str(db)]
    _run(_job(tmp_path / "week1", 101, "2025-03-01"), output, capsys)
    with sqlite3.connect(db) as con:   # a stored run whose result is not JSON any more
        con.execute("UPDATE attribution_runs SET result_json = '{not json'")
    code, _, err = run_blueprint(["--configs", str(_job(tmp_path / "week2", 202, "2025-03-10")), "--connector",
                                  "output", *output], capsys)
    assert code == 1 and "1 attributed" in err   # attributed; the problem makes the exit status 1, as every problem does
    assert "workload slurm:202 attempt 0: node history cannot be read, attributed without it: JSONDecodeError" in \
        " ".join(err.split())
    assert "history" not in _diagnosis(str(db), "slurm:202")["coverage"]   # not given
