"""Kueue discovery and pod logs through the real `kubectl` against the kmock emulator (no kube-apiserver is
installable here), seeded with realistic Workload and Pod objects and container logs."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import pytest
from blueprint_helpers import run_blueprint

NS = "ml"


def condition(kind: str, when: str, reason: str = "", message: str = "") -> dict:
    return {"type": kind, "status": "True", "reason": reason or kind, "message": message,
            "lastTransitionTime": when}


def workload(name: str, owner: str, conditions: list[dict], **extra: object) -> dict:
    return {"apiVersion": "kueue.x-k8s.io/v1beta1", "kind": "Workload",
            "metadata": {"name": name, "namespace": NS, "creationTimestamp": "2026-04-02T09:59:00Z",
                         "ownerReferences": [{"apiVersion": "batch/v1", "kind": "Job", "name": owner,
                                              "uid": f"uid-{owner}", "controller": True}]},
            "spec": {"queueName": "team-ml", "podSets": [{"name": "main", "count": 2}], **extra.pop("spec", {})},
            "status": {"conditions": conditions, "admission": {"clusterQueue": "gpu-cq"}, **extra}}


def pod(name: str, job: str, node: str, restarts: int = 0, exit_code: int = 0, reason: str = "Completed") -> dict:
    terminated = {"exitCode": exit_code, "reason": reason, "startedAt": "2026-04-02T10:00:05Z",
                  "finishedAt": "2026-04-02T10:14:59Z"}
    return {"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": name, "namespace": NS,
                         "labels": {"batch.kubernetes.io/job-name": job, "kueue.x-k8s.io/queue-name": "team-ml"},
                         "ownerReferences": [{"apiVersion": "batch/v1", "kind": "Job", "name": job, "uid": f"uid-{job}"}]},
            "spec": {"nodeName": node, "containers": [{"name": "trainer", "image": "nvcr.io/nvidia/pytorch:24.05-py3"}]},
            "status": {"phase": "Failed" if exit_code else "Succeeded",
                       "containerStatuses": [{"name": "trainer", "restartCount": restarts, "ready": False,
                                              "state": {"terminated": terminated},
                                              **({"lastState": {"terminated": terminated}} if restarts else {})}]}}


ADMITTED = [condition("QuotaReserved", "2026-04-02T10:00:00Z"), condition("Admitted", "2026-04-02T10:00:01Z"),
            condition("PodsReady", "2026-04-02T10:00:09Z")]
SEED = {
    "objects": [
        workload("job-llm-7b-3f2a1", "llm-7b", [*ADMITTED, condition(
            "Finished", "2026-04-02T10:15:00Z", "Failed", "Job failed: BackoffLimitExceeded")],
            requeueState={"count": 1}),
        workload("job-eval-9c1d0", "eval", [*ADMITTED, condition("Finished", "2026-04-02T10:05:00Z", "Succeeded")]),
        workload("job-sweep-aa001", "sweep", [*ADMITTED, condition(
            "Evicted", "2026-04-02T10:07:00Z", "Preempted", "Preempted to accommodate a higher priority Workload")],
            spec={"active": False}),
        workload("job-still-running-11", "still-running", ADMITTED),
        pod("llm-7b-0", "llm-7b", "gpu-k01", restarts=1, exit_code=1, reason="Error"),
        pod("llm-7b-1", "llm-7b", "gpu-k02", restarts=0, exit_code=1, reason="Error"),
        pod("eval-0", "eval", "gpu-k03"),
        pod("still-running-0", "still-running", "gpu-k04"),
        pod("unrelated-0", "unrelated", "gpu-k09"),
    ],
    "logs": {
        f"{NS}/llm-7b-0/trainer/previous": (
            "2026-04-02T10:02:11.120433871Z [rank0]: epoch 0 step 40 loss 2.7\n"
            "2026-04-02T10:03:40.519925213Z [rank0]: torch.OutOfMemoryError: CUDA out of memory. Tried to "
            "allocate 4.00 GiB. GPU 0 has a total capacity of 79.10 GiB of which 2.06 GiB is free.\n"),
        f"{NS}/llm-7b-0/trainer": (
            "2026-04-02T10:05:02.001000000Z [rank0]: resuming from checkpoint step 0\n"
            "2026-04-02T10:14:41.845102533Z [rank0]: torch.OutOfMemoryError: CUDA out of memory. Tried to "
            "allocate 4.00 GiB. GPU 0 has a total capacity of 79.10 GiB of which 2.06 GiB is free.\n"),
        f"{NS}/llm-7b-1/trainer": (
            "2026-04-02T10:14:42.300000000Z [rank1]: epoch 1 step 12 loss 2.2\n"
            "2026-04-02T10:14:50.100000000Z [rank1]:[E ProcessGroupNCCL.cpp:616] [Rank 1] Watchdog caught "
            "collective operation timeout: WorkNCCL(SeqNum=912, OpType=ALLREDUCE, NumelIn=1, NumelOut=1, "
            "Timeout(ms)=600000) ran for 600043 milliseconds before timing out.\n"),
        f"{NS}/eval-0/trainer": "2026-04-02T10:04:59.000000000Z eval accuracy 0.71\n",
    },
}


def test_kueue_workloads_and_pod_logs(k8s_emulator, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    emulator = k8s_emulator(SEED)
    db = tmp_path / "r.db"
    code, results, err = run_blueprint([
        "--connector", "context", "kueue", "namespace", NS, "kubeconfig", str(emulator.kubeconfig),
        "--connector", "logs", "k8s", "kubeconfig", str(emulator.kubeconfig),
        "--connector", "output", "db", "sqlite", "path", str(db), "--connector", "output", "stdout"], capsys)
    assert code == 0, err
    got = {r["context"]["workload_id"]: r for r in results}
    assert set(got) == {f"kueue:{NS}/job-llm-7b-3f2a1", f"kueue:{NS}/job-eval-9c1d0", f"kueue:{NS}/job-sweep-aa001"}

    llm = got[f"kueue:{NS}/job-llm-7b-3f2a1"]
    ctx = llm["context"]
    assert (ctx["scheduler"], ctx["job_id"], ctx["attempt"]) == ("kubernetes", f"{NS}/llm-7b", 1)
    assert ctx["nodes"] == ["gpu-k01", "gpu-k02"] and ctx["scheduler_state"] == "FAILED"
    assert (ctx["start_time"], ctx["end_time"]) == ("2026-04-02T10:00:01Z", "2026-04-02T10:15:00Z")
    assert ctx["exit_code"] == "1" and ctx["metadata"]["kueue_reason"] == "Failed"
    assert ctx["metadata"]["cluster_queue"] == "gpu-cq"
    logs = next(r for r in llm["connector_reports"] if r["connector"] == "k8s")
    assert logs["status"] == "ok" and logs["observation_count"] == 6 and logs["nodes"] == ["gpu-k01", "gpu-k02"]
    origins = {o for s in llm["diagnosis"]["coverage"]["sources"] for o in s["origins"]}
    assert f"k8s:{NS}/llm-7b-0/trainer (previous)" in origins and f"k8s:{NS}/llm-7b-1/trainer" in origins
    assert any("CUDA out of memory" in s["evidence"][0]["text"] and s["node"] == "gpu-k01"
               for s in llm["diagnosis"]["symptoms"])

    assert got[f"kueue:{NS}/job-eval-9c1d0"]["context"]["scheduler_state"] == "COMPLETED"
    sweep = got[f"kueue:{NS}/job-sweep-aa001"]
    assert sweep["context"]["scheduler_state"] == "PREEMPTED" and sweep["context"]["nodes"] == []
    assert next(r for r in sweep["connector_reports"] if r["connector"] == "k8s")["status"] == "empty"

    with sqlite3.connect(db) as con:
        assert con.execute("SELECT COUNT(*) FROM workload_attempts WHERE scheduler = 'kubernetes'").fetchone()[0] == 3


def test_an_unreachable_cluster_is_a_reported_problem(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    kubeconfig = tmp_path / "kubeconfig"
    kubeconfig.write_text('{"apiVersion": "v1", "kind": "Config", "current-context": "x", "clusters": [{"name": "x", '
                          '"cluster": {"server": "http://127.0.0.1:9"}}], "users": [{"name": "u", "user": {}}], '
                          '"contexts": [{"name": "x", "context": {"cluster": "x", "user": "u"}}]}')
    code, results, err = run_blueprint(["--connector", "context", "kueue", "kubeconfig", str(kubeconfig),
                                        "timeout", "20s"], capsys)
    assert code == 1 and results == [] and "context kueue" in err and "kubectl" in err
