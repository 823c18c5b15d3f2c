"""Kueue: finished Workloads (`kubectl get workloads.kueue.x-k8s.io -o json`), their pods and nodes.

    --connector context kueue namespace team-a [kubeconfig ~/.kube/config] [context prod] [since 1d]

A Workload is finished when its `Finished` condition is True (reason `Succeeded` or `Failed`), or when it was
evicted and deactivated (`spec.active: false`). Its window runs from admission to that condition; its pods are
found through the Workload's owner (ownerReferences, or the job-name labels of Job, JobSet and Kubeflow jobs);
their `spec.nodeName`s are the allocation. The attempt number is `status.requeueState.count`.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any

from firstfault.blueprint.base import Discovery
from firstfault.blueprint.config import ConnectorSpec
from firstfault.blueprint.kubectl import Kubectl, namespace_args
from firstfault.blueprint.options import KubectlOptions, LabelOptions, option, parse_options
from firstfault.engine import ExecutionContext
from firstfault.timeinput import parse_time

WORKLOADS = "workloads.kueue.x-k8s.io"
OWNER_LABELS = ("batch.kubernetes.io/job-name", "job-name", "jobset.sigs.k8s.io/jobset-name",
                "training.kubeflow.org/job-name", "kueue.x-k8s.io/pod-group-name")
_EVICTION_STATE = {"Preempted": "PREEMPTED", "NodeFailures": "NODE_FAIL", "PodsReadyTimeout": "FAILED"}


def _conditions(workload: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {c.get("type", ""): c for c in workload.get("status", {}).get("conditions", []) if c.get("status") == "True"}


def _time(value: str | None) -> datetime | None:
    return parse_time(value) if value else None


def terminal(workload: dict[str, Any]) -> tuple[str, dict[str, Any]] | None:
    """(terminal state, the deciding condition) of a finished Workload; None while it may still run."""
    conditions = _conditions(workload)
    finished = conditions.get("Finished")
    if finished:
        if finished.get("reason") == "Succeeded":
            return "COMPLETED", finished
        message = finished.get("message", "")
        return ("TIMEOUT" if "DeadlineExceeded" in message else "FAILED"), finished
    evicted = conditions.get("Evicted")
    if evicted and workload.get("spec", {}).get("active") is False:
        return _EVICTION_STATE.get(evicted.get("reason", ""), "CANCELLED"), evicted
    return None


def owners(workload: dict[str, Any]) -> set[str]:
    meta = workload.get("metadata", {})
    return {o.get("name", "") for o in meta.get("ownerReferences", [])} | {meta.get("name", "")}


def pods_of(workload: dict[str, Any], pods: list[dict[str, Any]]) -> list[dict[str, Any]]:
    names = owners(workload) - {""}
    namespace = workload.get("metadata", {}).get("namespace")
    mine = []
    for pod in pods:
        meta = pod.get("metadata", {})
        if meta.get("namespace", namespace) != namespace:
            continue
        linked = {o.get("name") for o in meta.get("ownerReferences", [])}
        linked |= {meta.get("labels", {}).get(label) for label in OWNER_LABELS}
        if linked & names:
            mine.append(pod)
    return sorted(mine, key=lambda p: p["metadata"]["name"])


def exit_status(pods: list[dict[str, Any]]) -> tuple[str, str]:
    """(exit code, reason) of the first container that terminated with a failure."""
    for pod in pods:
        for status in pod.get("status", {}).get("containerStatuses", []):
            for state in (status.get("state", {}), status.get("lastState", {})):
                done = state.get("terminated")
                if done and (done.get("exitCode") or done.get("reason") == "OOMKilled"):
                    return str(done.get("exitCode", "")), str(done.get("reason", ""))
    return "", pods[0].get("status", {}).get("reason", "") if pods else ""


def to_context(workload: dict[str, Any], pods: list[dict[str, Any]]) -> ExecutionContext | None:
    decided = terminal(workload)
    if decided is None:
        return None
    state, condition = decided
    meta, status = workload["metadata"], workload.get("status", {})
    admitted = _conditions(workload).get("Admitted") or _conditions(workload).get("QuotaReserved") or {}
    owner: dict[str, Any] = next(iter(meta.get("ownerReferences", [])), {})
    namespace = meta.get("namespace", "default")
    code, reason = exit_status(pods)
    metadata = {"namespace": namespace, "workload": meta["name"], "owner": f"{owner.get('kind', '')}/{owner.get('name', '')}",
                "pods": ",".join(p["metadata"]["name"] for p in pods), "kueue_reason": condition.get("reason", ""),
                "kueue_message": condition.get("message", ""), "container_reason": reason,
                "cluster_queue": status.get("admission", {}).get("clusterQueue", "")}
    return ExecutionContext(
        workload_id=f"kueue:{namespace}/{meta['name']}", attempt=int(status.get("requeueState", {}).get("count", 0)),
        scheduler="kubernetes", job_id=f"{namespace}/{owner.get('name') or meta['name']}",
        name=owner.get("name") or meta["name"],
        nodes=[p["spec"]["nodeName"] for p in pods if p.get("spec", {}).get("nodeName")],
        start_time=_time(admitted.get("lastTransitionTime") or meta.get("creationTimestamp")),
        end_time=_time(condition.get("lastTransitionTime")), scheduler_state=state, exit_code=code,
        metadata={k: v for k, v in metadata.items() if v and v != "/"})


@dataclass(frozen=True)
class KueueOptions(LabelOptions, KubectlOptions):
    namespace: str | None = option(None, "the namespace of the Workloads and pods", shown="all namespaces")
    since: str | None = option(None, "only Workloads that finished after this time", kind="time")


class KueueContexts:
    kind = "context"
    Options = KueueOptions

    def __init__(self, spec: ConnectorSpec) -> None:
        options = parse_options(KueueOptions, spec)
        self.label = options.label or spec.name
        self.kubectl = Kubectl(options)
        self.namespace = options.namespace
        self.since = options.since

    def discover(self) -> Discovery:
        scope = namespace_args(self.namespace)
        workloads = self.kubectl.items(WORKLOADS, *scope)
        pods = self.kubectl.items("pods", *scope)
        since = parse_time(self.since) if self.since else None
        found = Discovery()
        for workload in workloads:
            try:
                ctx = to_context(workload, pods_of(workload, pods))
            except (KeyError, ValueError, TypeError) as exc:
                found.problems.append(f"workload {workload.get('metadata', {}).get('name')}: {exc}")
                continue
            if ctx is not None and (since is None or (ctx.end_time and ctx.end_time >= since)):
                found.contexts.append(ctx)
        return found
