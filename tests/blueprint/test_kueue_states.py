"""How a Kueue Workload's attempt ended, read through the real `kubectl` from the kmock emulator (no kube-apiserver
is installable here; the emulator is the stand-in, see tests/support/k8s_emulator.py) and attributed by the real
Blueprint and engine.

The seeds are pinned to Kueue's documented wire format: the Workload condition types `Finished`, `Evicted` and
`Preempted` and their reasons as apis/kueue/v1beta1/workload_types.go declares them (Succeeded, Failed; Preempted,
NodeFailures, PodsReadyTimeout, AdmissionCheck, Deactivated / DeactivatedDueTo<cause>, InactiveWorkload before
0.10; InClusterQueue, InCohortReclamation, ...), `status.unhealthyNodes`, and the messages Kueue writes (the Job
condition's message copied into `Finished`; pkg/scheduler/preemption's "Preempted to accommodate a workload ...";
pkg/scheduler's and pkg/controller/tas's node-failure evictions; the deactivation messages of
pkg/controller/core/workload_controller.go). Pods carry Kubernetes' core/v1 `DisruptionTarget` condition with the
taint manager's and pod garbage collector's reasons and messages, and batch/v1's DeadlineExceeded message."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from blueprint_helpers import run_blueprint
from test_kueue import ADMITTED, NS, condition, pod, workload

PREEMPTION_MESSAGE = ("Preempted to accommodate a workload (UID: 5f0c2b1e-0d1c-4c3e-9d65-1f0a2b3c4d5e, JobUID: "
                      "a41d93e0-77aa-4b0e-8f51-6c2d9e0f1a2b) due to reclamation within the cohort; preemptor path: "
                      "/gpu-cohort/cq-b; preemptee path: /gpu-cohort/cq-a")


def lost_with_node(name: str, job: str, node: str, reason: str, message: str) -> dict[str, Any]:
    """A pod deleted with its node: phase Failed, the DisruptionTarget condition Kubernetes sets."""
    p = pod(name, job, node, exit_code=137, reason="Error")
    p["status"]["conditions"] = [{"type": "DisruptionTarget", "status": "True", "reason": reason, "message": message,
                                  "lastTransitionTime": "2026-04-02T10:11:30Z"}]
    return p


def node_lost(name: str, job: str, node: str) -> dict[str, Any]:
    """A pod on a node whose kubelet stopped answering: the node controller's status reason NodeLost."""
    p = pod(name, job, node, exit_code=1, reason="Error")
    p["status"].update(reason="NodeLost", message=f"Node {node} which was running pod {name} is unresponsive")
    return p


def past_deadline(name: str, job: str, node: str) -> dict[str, Any]:
    """A pod the kubelet stopped at its activeDeadlineSeconds: phase Failed, status reason DeadlineExceeded."""
    p = pod(name, job, node, exit_code=137, reason="Error")
    p["status"].update(reason="DeadlineExceeded", message="Pod was active on the node longer than the specified "
                                                          "deadline")
    return p


def attribute(k8s_emulator: Any, tmp_path: Path, capsys: pytest.CaptureFixture[str],
              objects: list[dict[str, Any]], logs: dict[str, str] | None = None) -> dict[str, dict[str, Any]]:
    """Seed the emulator, run the Blueprint over it; the results by Workload name."""
    emulator = k8s_emulator({"objects": objects, "logs": logs or {}})
    code, results, err = run_blueprint([
        "--connector", "context", "kueue", "namespace", NS, "kubeconfig", str(emulator.kubeconfig),
        "--connector", "logs", "k8s", "kubeconfig", str(emulator.kubeconfig),
        "--connector", "output", "db", "sqlite", "path", str(tmp_path / "r.db"), "--connector", "output", "stdout"],
        capsys)
    assert code == 0, err
    return {r["context"]["metadata"]["workload"]: r for r in results}


def symptoms(result: dict[str, Any]) -> set[tuple[str | None, str]]:
    return {(s["node"], s["symptom"]) for s in result["diagnosis"]["symptoms"]}


def test_a_job_past_its_deadline_is_a_timeout(k8s_emulator: Any, tmp_path: Path,
                                              capsys: pytest.CaptureFixture[str]) -> None:
    """batch/v1: the Job condition Failed, reason DeadlineExceeded, message 'Job was active longer than specified
    deadline'; Kueue's `Finished` carries reason Failed and that message only. A pod's own activeDeadlineSeconds:
    the kubelet's status reason DeadlineExceeded."""
    got = attribute(k8s_emulator, tmp_path, capsys, [
        workload("job-deadline-1", "deadline", [*ADMITTED, condition(
            "Finished", "2026-04-02T11:00:01Z", "Failed", "Job was active longer than specified deadline")]),
        workload("job-backoff-1", "backoff", [*ADMITTED, condition(
            "Finished", "2026-04-02T10:15:00Z", "Failed", "Job has reached the specified backoff limit")]),
        workload("job-pod-deadline-1", "pod-deadline", [*ADMITTED, condition(
            "Finished", "2026-04-02T10:30:00Z", "Failed", "Job has reached the specified backoff limit")]),
        pod("deadline-0", "deadline", "gpu-k05", exit_code=137, reason="Error"),
        pod("backoff-0", "backoff", "gpu-k06", exit_code=1, reason="Error"),
        past_deadline("pod-deadline-0", "pod-deadline", "gpu-k07")])
    deadline = got["job-deadline-1"]
    assert deadline["context"]["scheduler_state"] == "TIMEOUT"
    assert deadline["context"]["metadata"]["kueue_reason"] == "Failed"
    # the record is evidence: the catalog's Job-deadline extractor reads the message Kueue copied
    d = deadline["diagnosis"]
    assert d["terminal_state"] == "TIMEOUT" and d["root_cause"]["symptom"] == "Job deadline exceeded"
    records = next(r for r in deadline["connector_reports"] if r["connector"] == "kueue-status")
    assert (records["kind"], records["status"], records["observation_count"]) == ("logs", "ok", 1)
    assert got["job-backoff-1"]["context"]["scheduler_state"] == "FAILED"
    # the kubelet stopped a pod at the pod's own activeDeadlineSeconds: the Job then failed on its backoff limit
    late = got["job-pod-deadline-1"]["context"]
    assert late["scheduler_state"] == "TIMEOUT"
    assert late["metadata"]["kueue_records"].split("\n")[1] == (
        "2026-04-02T10:30:00Z Pod ml/pod-deadline-0 on node gpu-k07 status reason=DeadlineExceeded: Pod was "
        "active on the node longer than the specified deadline")


def test_a_node_failure_names_the_node(k8s_emulator: Any, tmp_path: Path,
                                       capsys: pytest.CaptureFixture[str]) -> None:
    """Kueue's Evicted reason NodeFailures (Topology-Aware Scheduling) names the nodes in `status.unhealthyNodes`
    and in its messages; pods the taint manager or the pod GC deleted with their node name theirs."""
    got = attribute(k8s_emulator, tmp_path, capsys, [
        workload("job-tas-1", "tas", [*ADMITTED, condition(
            "Evicted", "2026-04-02T10:12:00Z", "NodeFailures",
            "Workload was evicted as there was no replacement for unhealthy node(s): gpu-k12")],
            spec={"active": False}, unhealthyNodes=[{"name": "gpu-k12"}]),
        workload("job-tas-2", "tas2", [*ADMITTED, condition(
            "Evicted", "2026-04-02T10:12:00Z", "NodeFailures",
            "Workload eviction triggered due to multiple TAS assigned node failures, including: gpu-k21, gpu-k22")],
            spec={"active": False}),
        workload("job-lost-1", "lost", [*ADMITTED, condition(
            "Finished", "2026-04-02T10:12:30Z", "Failed", "Job has reached the specified backoff limit")]),
        pod("tas-0", "tas", "gpu-k11", exit_code=143, reason="Error"),
        pod("tas-1", "tas", "gpu-k12", exit_code=143, reason="Error"),
        pod("tas2-0", "tas2", "gpu-k21", exit_code=143, reason="Error"),
        pod("tas2-1", "tas2", "gpu-k22", exit_code=143, reason="Error"),
        pod("lost-0", "lost", "gpu-k30", exit_code=1, reason="Error"),
        lost_with_node("lost-1", "lost", "gpu-k31", "DeletionByTaintManager",
                       "Taint manager: deleting due to NoExecute taint"),
        # the node deleted (pod GC), and the node controller's older status reason, before a PodsReady timeout
        workload("job-gone-1", "gone", [*ADMITTED[:2], condition(
            "Evicted", "2026-04-02T10:14:00Z", "PodsReadyTimeout", "Exceeded the PodsReady timeout ml/job-gone-1")],
            spec={"active": False}),
        lost_with_node("gone-0", "gone", "gpu-k33", "DeletionByPodGC", "PodGC: node no longer exists"),
        workload("job-unresponsive-1", "unresponsive", [*ADMITTED, condition(
            "Finished", "2026-04-02T10:16:00Z", "Failed", "Job has reached the specified backoff limit")]),
        node_lost("unresponsive-0", "unresponsive", "gpu-k34")])

    tas = got["job-tas-1"]
    assert tas["context"]["scheduler_state"] == "NODE_FAIL"
    assert tas["context"]["metadata"]["failed_nodes"] == "gpu-k12"
    d = tas["diagnosis"]
    # the node Kueue named is the culprit, as a Kubernetes node failure (reported by the job's status record)
    assert d["terminal_state"] == "NODE_FAIL" and [c["node"] for c in d["culprit_nodes"]] == ["gpu-k12"]
    assert d["root_cause"]["symptom"] == "Kubernetes node failure"
    assert d["culprit_nodes"][0]["symptoms"] == ["Kubernetes node failure"]

    two = got["job-tas-2"]["context"]
    assert (two["scheduler_state"], two["metadata"]["failed_nodes"]) == ("NODE_FAIL", "gpu-k21,gpu-k22")

    lost = got["job-lost-1"]
    assert lost["context"]["scheduler_state"] == "NODE_FAIL"
    assert lost["context"]["metadata"]["failed_nodes"] == "gpu-k31"
    gone, unresponsive = got["job-gone-1"]["context"], got["job-unresponsive-1"]["context"]
    assert (gone["scheduler_state"], gone["metadata"]["failed_nodes"]) == ("NODE_FAIL", "gpu-k33")
    assert (unresponsive["scheduler_state"], unresponsive["metadata"]["failed_nodes"]) == ("NODE_FAIL", "gpu-k34")
    lines = lost["context"]["metadata"]["kueue_records"].split("\n")
    assert lines[1] == ("2026-04-02T10:11:30Z Pod ml/lost-1 on node gpu-k31 DisruptionTarget=True "
                        "reason=DeletionByTaintManager: Taint manager: deleting due to NoExecute taint")


def test_a_preemption_is_preempted(k8s_emulator: Any, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """Evicted reason Preempted with the `Preempted` condition's reason (here InCohortReclamation) and Kueue's
    preemption message. A preempted Workload that is still active is requeued: its attempt is not over."""
    got = attribute(k8s_emulator, tmp_path, capsys, [
        workload("job-reclaimed-1", "reclaimed", [*ADMITTED,
                                                  condition("Evicted", "2026-04-02T10:09:00Z", "Preempted", PREEMPTION_MESSAGE),
                                                  condition("Preempted", "2026-04-02T10:09:00Z", "InCohortReclamation",
                                                            PREEMPTION_MESSAGE)],
                 spec={"active": False}),
        workload("job-requeued-1", "requeued", [
            condition("Evicted", "2026-04-02T10:09:00Z", "Preempted", PREEMPTION_MESSAGE),
            condition("Preempted", "2026-04-02T10:09:00Z", "InClusterQueue", PREEMPTION_MESSAGE)]),
        pod("reclaimed-0", "reclaimed", "gpu-k40", exit_code=143, reason="Error")])
    assert set(got) == {"job-reclaimed-1"}
    ctx = got["job-reclaimed-1"]["context"]
    assert ctx["scheduler_state"] == "PREEMPTED" and ctx["metadata"]["kueue_preemption"] == "InCohortReclamation"
    d = got["job-reclaimed-1"]["diagnosis"]
    assert d["terminal_state"] == "PREEMPTED" and d["culprit_nodes"] == []
    assert (None, "Kubernetes eviction") in symptoms(got["job-reclaimed-1"])


@pytest.mark.parametrize(("reason", "message", "state"), [
    ("PodsReadyTimeout", "Exceeded the PodsReady timeout ml/job-x-1", "FAILED"),
    ("Deactivated", "The workload is deactivated due to exceeding the maximum execution time", "TIMEOUT"),
    ("DeactivatedDueToMaximumExecutionTimeExceeded",
     "The workload is deactivated due to exceeding the maximum execution time", "TIMEOUT"),
    ("Deactivated", "The workload is deactivated due to exceeding the maximum number of re-queuing retries",
     "FAILED"),
    ("Deactivated", 'The workload is deactivated due to AdmissionCheck in Rejected state: "prov-req" '
                    '(capacity not available)', "CANCELLED"),
    ("AdmissionCheck", 'Evicted due to AdmissionCheck in Retry state: "prov-req"', "CANCELLED"),
    ("ClusterQueueStopped", "The ClusterQueue is stopped", "CANCELLED"),
    ("InactiveWorkload", "The workload is deactivated", "CANCELLED"),
])
def test_other_evictions_by_meaning(k8s_emulator: Any, tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                    reason: str, message: str, state: str) -> None:
    """The other `Evicted` reasons of a deactivated Workload: pods never ready in time, the maximum execution
    time (Kueue's own time limit), the re-queuing limit, a rejected admission check, a stopped queue, a plain
    deactivation (`InactiveWorkload` before Kueue 0.10)."""
    got = attribute(k8s_emulator, tmp_path, capsys, [
        workload("job-x-1", "x", [*ADMITTED, condition("Evicted", "2026-04-02T10:20:00Z", reason, message)],
                 spec={"active": False}),
        pod("x-0", "x", "gpu-k50", exit_code=143, reason="Error")])
    ctx = got["job-x-1"]["context"]
    assert ctx["scheduler_state"] == state
    assert (ctx["metadata"]["kueue_reason"], ctx["metadata"]["kueue_message"]) == (reason, message)
    assert ctx["end_time"] == "2026-04-02T10:20:00Z" and got["job-x-1"]["diagnosis"]["terminal_state"] == state
