"""Node fault history: counted per attempt (engine/history.py), read from a file (`analyze --history`), part of the
evidence (byte-identical results), and absent from results that were given none."""

from __future__ import annotations

import io
import json
import random
from datetime import datetime, timezone
from pathlib import Path

import pytest

from firstfault.cli import main
from firstfault.engine import Engine, ExecutionContext, SourceKind
from firstfault.engine.history import read_history
from firstfault.engine.model import NodeHistory, PriorFinding
from firstfault.errors import EvidenceError
from firstfault.samples import sample_dirs

START = datetime(2025, 3, 1, 12, tzinfo=timezone.utc)
CUDA_UNKNOWN = b"2025-03-01T12:30:00Z [rank6]: RuntimeError: CUDA error: unknown error\n"
WATCHDOG = (b"2025-03-01T12:40:00Z [rank0]:[E0301 12:40:00.000000000 ProcessGroupNCCL.cpp:1] [Rank 0] Watchdog caught "
            b"collective operation timeout: WorkNCCL(SeqNum=9, OpType=ALLREDUCE, NumelIn=1, NumelOut=1, "
            b"Timeout(ms)=600000) ran for 600010 milliseconds before timing out.\n")


def _finding(node: str, when: str, symptom: str = "CUDA unknown error", workload: str = "slurm:41",
             attempt: int = 0, gpus: list[str] | None = None) -> dict[str, object]:
    return {"node": node, "symptom": symptom, "rule": "CudaError", "sub_domain": "gpu", "time": when,
            "workload_id": workload, "attempt": attempt, "gpus": gpus or []}


def _workload(tmp_path: Path) -> Path:
    """A Slurm job whose rank 6 on n2 raised CUDA's unknown error while n1 only timed out waiting."""
    root = tmp_path / "job-77"
    for node, text in (("n1", WATCHDOG), ("n2", CUDA_UNKNOWN)):
        (root / node).mkdir(parents=True)
        (root / node / "applog.log").write_bytes(text)
    (root / "scenario.toml").write_text(
        'id = "slurm:77"\n[workload]\nscheduler = "slurm"\njob_id = "77"\nnodes = ["n1", "n2"]\n'
        'start_time = "2025-03-01T12:00:00Z"\nend_time = "2025-03-01T13:00:00Z"\nscheduler_state = "FAILED"\n'
        'exit_code = "1:0"\n', encoding="utf-8")
    return root


def _session_result(engine: Engine, history: NodeHistory | None, *, start: datetime | None = START) -> dict:
    ctx = ExecutionContext(workload_id="slurm:77", nodes=["n1.cluster", "n2.cluster"], scheduler="slurm",
                           start_time=start, scheduler_state="FAILED", history=history)
    session = engine.session(ctx)
    session.ingest_stream("n2.cluster", SourceKind.APPLOG, io.BytesIO(CUDA_UNKNOWN), "n2/applog.log")
    session.ingest_stream("n1.cluster", SourceKind.APPLOG, io.BytesIO(WATCHDOG), "n1/applog.log")
    return json.loads(session.attribute().to_json())


def test_the_same_fault_on_the_same_node_before_supports_the_culprit(engine: Engine) -> None:
    history = NodeHistory.model_validate({"findings": [
        _finding("n2", "2025-02-20T08:00:00Z", workload="slurm:41"),          # counts (short name -> n2.cluster)
        _finding("n2.cluster", "2025-02-25T08:00:00Z", workload="slurm:52", attempt=1),   # counts
        _finding("n2", "2025-02-25T09:00:00Z", symptom="XID-48"),             # another fault
        _finding("n2", "2025-01-01T08:00:00Z"),                               # outside the 30 days
        _finding("n1", "2025-02-26T08:00:00Z"),                               # another node
        _finding("n9", "2025-02-26T08:00:00Z"),                               # not a node of the workload
        _finding("n2", "2025-03-01T12:10:00Z"),                               # after the attempt began
        _finding("n2", "2025-02-28T08:00:00Z", workload="slurm:77"),          # this very attempt
    ]})
    result = _session_result(engine, history)
    assert result["sub_domain"] == "gpu" and result["confidence"] == "high"
    [culprit] = result["culprit_nodes"]
    assert culprit["node"] == "n2.cluster"
    assert [(f["workload_id"], f["attempt"], f["time"]) for f in culprit["history"]] == [
        ("slurm:41", 0, "2025-02-20T08:00:00Z"), ("slurm:52", 1, "2025-02-25T08:00:00Z")]
    assert all(f["node"] == "n2.cluster" for f in culprit["history"])
    assert result["coverage"]["history"] == {"findings": 8, "counted": 4, "window_days": 30,
                                             "since": "2025-01-30T12:00:00Z", "earliest": "2025-02-20T08:00:00Z"}
    assert any(t["rule"] == "HistoryCorroboratesCulprit" and "slurm:41" in t["detail"] for t in result["trace"])


def test_history_without_a_matching_finding_changes_nothing_but_coverage(engine: Engine) -> None:
    without = _session_result(engine, None)
    other = _session_result(engine, NodeHistory.model_validate({"findings": [_finding("n2", "2025-02-20T08:00:00Z",
                                                                                       symptom="XID-79")]}))
    assert other.pop("coverage")["history"]["counted"] == 1
    without_coverage = without.pop("coverage")
    assert "history" not in without_coverage and "history" not in json.dumps(without["culprit_nodes"])
    assert other == without and without["confidence"] == "medium"


def test_an_attempt_without_any_time_counts_no_history(engine: Engine) -> None:
    ctx = ExecutionContext(workload_id="w", nodes=["n2"], history=NodeHistory.model_validate(
        {"findings": [_finding("n2", "2025-02-20T08:00:00Z")]}))
    result = engine.session(ctx).attribute()
    assert result.coverage.history is not None
    assert (result.coverage.history.counted, result.coverage.history.since) == (0, None)


def test_same_history_and_evidence_give_the_same_bytes_whatever_the_findings_order(engine: Engine) -> None:
    findings = [_finding("n2", f"2025-02-{day:02d}T08:00:00Z", workload=f"slurm:{day}") for day in range(3, 28, 2)]
    texts = set()
    for seed in range(3):
        random.Random(seed).shuffle(findings)
        texts.add(json.dumps(_session_result(engine, NodeHistory.model_validate({"findings": findings}))))
    assert len(texts) == 1


def test_no_history_leaves_the_results_as_they_were(engine: Engine) -> None:
    path = sample_dirs()["xid79-fallen-off-bus"]
    text = engine.analyze_path(path).to_json()
    assert '"history"' not in text
    assert engine.analyze_path(path, history=None).to_json() == text


# -- the history file and `analyze --history` ------------------------------------------------------------------
def test_analyze_with_a_history_file(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    workload = _workload(tmp_path)
    assert main(["analyze", str(workload), "--json"]) == 0
    before = json.loads(capsys.readouterr().out)
    assert before["confidence"] == "medium" and "history" not in before["coverage"]
    history = tmp_path / "history.jsonl"
    history.write_text(json.dumps(_finding("n2", "2025-02-27T03:00:00Z")) + "\n\n" +
                       json.dumps(_finding("n2", "2025-01-02T03:00:00Z", workload="slurm:12")) + "\n")
    assert main(["analyze", str(workload), "--json", "--history", str(history)]) == 0
    after = json.loads(capsys.readouterr().out)
    assert after["confidence"] == "high"
    assert [f["workload_id"] for f in after["culprit_nodes"][0]["history"]] == ["slurm:41"]
    assert after["coverage"]["history"]["counted"] == 1
    assert main(["analyze", str(workload), "--json", "--history", str(history), "--history-window", "90"]) == 0
    wider = json.loads(capsys.readouterr().out)
    assert [f["workload_id"] for f in wider["culprit_nodes"][0]["history"]] == ["slurm:12", "slurm:41"]
    assert main(["analyze", str(workload), "--history", str(history)]) == 0
    assert "slurm:41" in capsys.readouterr().out   # the report names the earlier finding


def test_a_history_file_in_each_documented_form(tmp_path: Path) -> None:
    finding = _finding("n2", "2025-02-27T03:00:00Z")
    forms = {"object.json": {"window_days": 7, "findings": [finding]}, "list.json": [finding], "one.json": finding}
    for name, document in forms.items():
        path = tmp_path / name
        path.write_text(json.dumps(document, indent=2))
        history = read_history(path)
        assert history.findings == [PriorFinding.model_validate(finding)]
        assert history.window_days == (7 if name == "object.json" else 30)
    assert read_history(tmp_path / "object.json", window_days=60).window_days == 60


@pytest.mark.parametrize(("content", "named"), [
    ('{"node": "n2"}\n{"node": "n3", ', "line 2 is not JSON"),
    (json.dumps([_finding("n2", "yesterday")]), "findings.0.time"),
    (json.dumps([{**_finding("n2", "2025-02-27T03:00:00Z"), "gpu": "0"}]), "findings.0.gpu: Extra inputs"),
    (json.dumps({"window_days": 0, "findings": []}), "window_days"),
    (json.dumps([_finding("n2", "1900-01-01T00:00:00Z")]), "findings[0].time 1900-01-01T00:00:00+00:00 lies outside"),
    ("42", "not a JSON int"),
])
def test_a_malformed_history_file_is_a_clear_error(tmp_path: Path, content: str, named: str,
                                                   capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "history.json"
    path.write_text(content)
    with pytest.raises(EvidenceError, match="history.json") as raised:
        read_history(path)
    assert named in str(raised.value)
    assert main(["analyze", str(_workload(tmp_path)), "--history", str(path)]) == 2
    err = capsys.readouterr().err
    assert "history.json" in err and "Traceback" not in err


def test_history_options_need_each_other_and_a_file(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    workload = _workload(tmp_path)
    assert main(["analyze", str(workload), "--history-window", "10"]) == 2
    assert "--history-window needs --history" in capsys.readouterr().err
    assert main(["analyze", str(workload), "--history", str(tmp_path / "missing.json")]) == 2
    assert "missing.json: the history file cannot be read" in capsys.readouterr().err
