"""Kueue: finished Workloads (`kubectl get workloads.kueue.x-k8s.io -o json`), their pods and nodes.

    --connector context kueue namespace team-a [kubeconfig ~/.kube/config] [context prod] [since 1d]

A Workload is finished when its `Finished` condition is True (reason `Succeeded` or `Failed`), or when it was
evicted and deactivated (`spec.active: false`). Its window runs from admission to that condition; its pods are
found through the Workload's owner (ownerReferences, or the job-name labels of Job, JobSet and Kubeflow jobs);
their `spec.nodeName`s are the allocation. The attempt number is `status.requeueState.count`.

The terminal state comes from the documented condition reasons and messages (`terminal`): `Finished` Succeeded
is COMPLETED; a Job stopped at its activeDeadlineSeconds (Kueue copies the Job's message "Job was active longer
than specified deadline"), or a pod at its own, is TIMEOUT; an eviction for Preempted is PREEMPTED, for NodeFailures NODE_FAIL (the nodes
Kueue names are recorded in the metadata's `failed_nodes`, and a failed attempt whose pods were deleted with
their NotReady or vanished node is NODE_FAIL of those nodes); PodsReadyTimeout and the re-queuing limit are
FAILED, the maximum execution time TIMEOUT, an admission check, a stopped queue or a plain deactivation
CANCELLED. The records that decided it are also evidence: the `kueue-status` collector, added with this connector,
gives them to the engine as scheduler lines.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from firstfault.blueprint.base import Discovery, LineBatch
from firstfault.blueprint.config import ConnectorSpec
from firstfault.blueprint.kubectl import Kubectl, namespace_args
from firstfault.blueprint.options import KubectlOptions, LabelOptions, option, parse_options
from firstfault.engine import ExecutionContext, SourceKind
from firstfault.timeinput import parse_time

WORKLOADS = "workloads.kueue.x-k8s.io"
OWNER_LABELS = ("batch.kubernetes.io/job-name", "job-name", "jobset.sigs.k8s.io/jobset-name",
                "training.kubeflow.org/job-name", "kueue.x-k8s.io/pod-group-name")
RECORDS = "kueue_records"   # the metadata key of the status records the `kueue-status` collector reads

# The wire format this maps, from Kueue's API (apis/kueue/v1beta1 and v1beta2 workload_types.go: the `Finished`,
# `Evicted` and `Preempted` condition types and their reasons) and Kubernetes' (batch/v1 and core/v1 types.go).
# A Job's own end is copied by Kueue into `Finished` (reason Succeeded or Failed) with the Job condition's message
# only - so the Job controller's deadline (Job condition Failed, reason DeadlineExceeded) is known by its message.
JOB_DEADLINE_MESSAGE = "Job was active longer than specified deadline"
# `Evicted` reasons: what ended the attempt when the Workload was then deactivated (spec.active false).
_EVICTION_STATE = {
    "Preempted": "PREEMPTED",            # with a `Preempted` condition: InClusterQueue, InCohortReclamation, ...
    "NodeFailures": "NODE_FAIL",         # Topology-Aware Scheduling found no replacement for a failed node
    "PodsReadyTimeout": "FAILED",        # the pods did not become ready within waitForPodsReady's timeout
    "AdmissionCheck": "CANCELLED",       # an admission check (e.g. a ProvisioningRequest) was rejected
    "ClusterQueueStopped": "CANCELLED",  # an operator stopped the queue
    "LocalQueueStopped": "CANCELLED",
}
# Deactivation (reason `Deactivated`; `InactiveWorkload` before Kueue 0.10; `DeactivatedDueTo<cause>` in some
# releases) says its cause in the reason's suffix or the message ("The workload is deactivated due to ...").
_DEACTIVATED = ("Deactivated", "InactiveWorkload")
_DEACTIVATION_CAUSE = {
    "MaximumExecutionTimeExceeded": ("exceeding the maximum execution time", "TIMEOUT"),
    "RequeuingLimitExceeded": ("exceeding the maximum number of re-queuing retries", "FAILED"),
    "AdmissionCheck": ("", "CANCELLED"),
}
# A pod lost with its node: the DisruptionTarget condition the taint manager (the node NotReady/unreachable) or the
# pod garbage collector (the node gone) sets, or the node controller's older status reason.
_NODE_LOST_DISRUPTIONS = ("DeletionByTaintManager", "DeletionByPodGC")
_NODE_LOST_REASON = "NodeLost"
# The kubelet's status reason for a pod stopped at its own activeDeadlineSeconds ("Pod was active on the node
# longer than the specified deadline").
_POD_DEADLINE_REASON = "DeadlineExceeded"
# Kueue's node-failure eviction messages name the nodes after the colon (pkg/scheduler/scheduler.go,
# pkg/controller/tas/node_controller.go).
_NODE_FAILURE_MESSAGE = re.compile(r"(?:unhealthy node\(s\)|node failures, including): (?P<nodes>.+)$")


@dataclass(frozen=True)
class Ending:
    """How a Workload's attempt ended: the terminal state, the Workload condition that says so, and the nodes that
    failed under it (named by Kueue's status or message, or the nodes of pods lost with their node)."""

    state: str
    condition: dict[str, Any]
    failed_nodes: tuple[str, ...] = ()


def _conditions(workload: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {c.get("type", ""): c for c in workload.get("status", {}).get("conditions", []) if c.get("status") == "True"}


def _time(value: str | None) -> datetime | None:
    return parse_time(value) if value else None


def pod_causes(pods: list[dict[str, Any]]) -> list[tuple[dict[str, Any], dict[str, Any]]]:
    """(pod, the condition or status saying so) for each pod lost with its node or stopped at its deadline."""
    found = []
    for pod in pods:
        status = pod.get("status", {})
        cause = next((c for c in status.get("conditions", []) if c.get("type") == "DisruptionTarget"
                      and c.get("status") == "True" and c.get("reason") in _NODE_LOST_DISRUPTIONS), None)
        if cause is None and status.get("reason") in (_NODE_LOST_REASON, _POD_DEADLINE_REASON):
            cause = {"reason": status["reason"], "message": status.get("message", "")}   # status, not a condition
        if cause is not None and pod.get("spec", {}).get("nodeName"):
            found.append((pod, cause))
    return found


def lost_nodes(pods: list[dict[str, Any]]) -> tuple[str, ...]:
    """The nodes of the pods lost with their node."""
    return tuple(dict.fromkeys(p["spec"]["nodeName"] for p, cause in pod_causes(pods)
                               if cause["reason"] != _POD_DEADLINE_REASON))


def _named_nodes(workload: dict[str, Any], condition: dict[str, Any]) -> list[str]:
    """The failed nodes Kueue names: status.unhealthyNodes, and the list its eviction message ends with."""
    names = [n.get("name", "") for n in workload.get("status", {}).get("unhealthyNodes", [])]
    found = _NODE_FAILURE_MESSAGE.search(condition.get("message", ""))
    if found:
        names += [n.strip() for n in found.group("nodes").split(",")]
    return names


def _deactivation_state(condition: dict[str, Any]) -> str:
    reason, message = condition.get("reason", ""), condition.get("message", "")
    for cause, (phrase, state) in _DEACTIVATION_CAUSE.items():
        if reason.endswith(cause) or (phrase and phrase in message):
            return state
    return "CANCELLED"   # deactivated by a person or a controller: stopped


def terminal(workload: dict[str, Any], pods: list[dict[str, Any]] | None = None) -> Ending | None:
    """How a finished Workload ended; None while it may still run (admitted, queued, or evicted and requeued).

    The Job's deadline (or a pod's own) is TIMEOUT; a preemption is PREEMPTED; a node failure (Kueue's NodeFailures eviction, or a
    pod of a failed attempt lost with its node) is NODE_FAIL naming the node; other evictions by meaning."""
    conditions = _conditions(workload)
    lost = lost_nodes(pods or [])
    finished = conditions.get("Finished")
    if finished:
        reason = finished.get("reason")
        if reason == "Succeeded":
            return Ending("COMPLETED", finished)
        late = any(c["reason"] == _POD_DEADLINE_REASON for _, c in pod_causes(pods or []))
        if JOB_DEADLINE_MESSAGE in finished.get("message", "") or late:
            return Ending("TIMEOUT", finished)
        if reason == "OutOfSync":   # Kueue finished a prebuilt Workload its job no longer matches: stopped
            return Ending("CANCELLED", finished)
        return Ending("NODE_FAIL", finished, lost) if lost else Ending("FAILED", finished)
    evicted = conditions.get("Evicted")
    if not evicted or workload.get("spec", {}).get("active") is not False:
        return None
    reason = evicted.get("reason", "")
    if reason.startswith(_DEACTIVATED):
        state = _deactivation_state(evicted)
    else:
        state = _EVICTION_STATE.get(reason, "CANCELLED")
    if state == "NODE_FAIL":
        named = dict.fromkeys(n for n in (*_named_nodes(workload, evicted), *lost) if n)
        return Ending(state, evicted, tuple(named))
    if lost and state == "FAILED":   # pods that never became ready because their node failed
        return Ending("NODE_FAIL", evicted, lost)
    return Ending(state, evicted)


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


def records(workload: dict[str, Any], ending: Ending, pods: list[dict[str, Any]]) -> list[str]:
    """The status records that decided the ending, one line each, stamped with their transition time: the
    Workload's deciding condition (and its `Preempted` condition), and the conditions of pods lost with their
    node or stopped at their deadline. Their messages are Kueue's and Kubernetes' own, so the catalog's Kubernetes extractors read them."""
    meta = workload.get("metadata", {})
    name = f"{meta.get('namespace', 'default')}/{meta.get('name', '')}"
    shown = [ending.condition] + [c for t, c in _conditions(workload).items()
                                  if t == "Preempted" and c is not ending.condition]
    lines = [f"{c.get('lastTransitionTime', '')} Workload {name} {c.get('type', '')}=True reason={c.get('reason', '')}: "
             f"{c.get('message', '')}" for c in shown]
    for pod, cause in pod_causes(pods):
        when = cause.get("lastTransitionTime") or ending.condition.get("lastTransitionTime", "")
        what = f"{cause['type']}=True reason" if "type" in cause else "status reason"
        lines.append(f"{when} Pod {pod['metadata'].get('namespace', '')}/{pod['metadata']['name']} on node "
                     f"{pod['spec']['nodeName']} {what}={cause['reason']}: {cause.get('message', '')}")
    return [" ".join(line.split()) for line in lines]


def to_context(workload: dict[str, Any], pods: list[dict[str, Any]]) -> ExecutionContext | None:
    ending = terminal(workload, pods)
    if ending is None:
        return None
    condition = ending.condition
    meta, status = workload["metadata"], workload.get("status", {})
    conditions = _conditions(workload)
    admitted = conditions.get("Admitted") or conditions.get("QuotaReserved") or {}
    owner: dict[str, Any] = next(iter(meta.get("ownerReferences", [])), {})
    namespace = meta.get("namespace", "default")
    code, reason = exit_status(pods)
    metadata = {"namespace": namespace, "workload": meta["name"], "owner": f"{owner.get('kind', '')}/{owner.get('name', '')}",
                "pods": ",".join(p["metadata"]["name"] for p in pods), "kueue_condition": condition.get("type", ""),
                "kueue_reason": condition.get("reason", ""), "kueue_message": condition.get("message", ""),
                "kueue_preemption": conditions.get("Preempted", {}).get("reason", ""),
                "failed_nodes": ",".join(ending.failed_nodes), "container_reason": reason,
                "cluster_queue": status.get("admission", {}).get("clusterQueue", ""),
                RECORDS: "\n".join(records(workload, ending, pods))}
    return ExecutionContext(
        workload_id=f"kueue:{namespace}/{meta['name']}", attempt=int(status.get("requeueState", {}).get("count", 0)),
        scheduler="kubernetes", job_id=f"{namespace}/{owner.get('name') or meta['name']}",
        name=owner.get("name") or meta["name"],
        nodes=[p["spec"]["nodeName"] for p in pods if p.get("spec", {}).get("nodeName")],
        start_time=_time(admitted.get("lastTransitionTime") or meta.get("creationTimestamp")),
        end_time=_time(condition.get("lastTransitionTime")), scheduler_state=ending.state, exit_code=code,
        metadata={k: v for k, v in metadata.items() if v and v != "/"})


class KueueRecords:
    """The status records of a Kueue workload's ending (`records`), as scheduler lines of the whole job; added to
    the plan with the Kueue context connector, as the static one brings its files."""

    kind = "logs"
    label = "kueue-status"

    def applies(self, ctx: ExecutionContext) -> bool:
        return RECORDS in ctx.metadata

    def collect(self, ctx: ExecutionContext) -> Iterator[LineBatch]:
        origin = f"kueue:{ctx.metadata.get('namespace', '')}/{ctx.metadata.get('workload', '')} status"
        yield LineBatch(node=None, source=SourceKind.SCHEDULER, origin=origin,
                        lines=ctx.metadata[RECORDS].split("\n"))


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
