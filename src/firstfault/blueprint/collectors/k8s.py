"""Kubernetes pod logs: every container of the workload's pods, current and previous, via `kubectl logs`.

    --connector logs k8s [kubeconfig PATH] [context NAME] [previous on] [timestamps on]

Applies to Kubernetes contexts (the Kueue connector records the namespace and pod names). Each container's log
is an applog of the node its pod ran on; with `timestamps on` (the default) kubectl prefixes every line with
its RFC 3339 time, which the engine reads.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

from firstfault.blueprint.base import LineBatch
from firstfault.blueprint.config import ConnectorSpec
from firstfault.blueprint.kubectl import Kubectl, namespace_args, object_name
from firstfault.blueprint.options import CollectorOptions, KubectlOptions, option, parse_options
from firstfault.engine import ExecutionContext, SourceKind
from firstfault.errors import CollectorError, KubectlError, NothingInScope

BATCH_LINES = 20_000


def containers(pod: dict[str, Any]) -> list[tuple[str, bool]]:
    """(container, has a previous instance) for the init and main containers of a pod."""
    spec, status = pod.get("spec", {}), pod.get("status", {})
    restarts = {s.get("name"): int(s.get("restartCount", 0))
                for s in status.get("containerStatuses", []) + status.get("initContainerStatuses", [])}
    names = [c["name"] for c in spec.get("initContainers", []) + spec.get("containers", [])]
    return [(name, restarts.get(name, 0) > 0) for name in names]


@dataclass(frozen=True)
class PodLogsOptions(CollectorOptions, KubectlOptions):
    previous: bool = option(True, "also read the previous instance of restarted containers")
    timestamps: bool = option(True, "ask kubectl for RFC 3339 line stamps")


class PodLogsCollector:
    kind = "logs"
    Options = PodLogsOptions

    def __init__(self, spec: ConnectorSpec, margin: timedelta) -> None:
        options = parse_options(PodLogsOptions, spec)
        self.label = options.label or spec.name
        self.kubectl = Kubectl(options)
        self.previous = options.previous
        self.timestamps = options.timestamps

    def applies(self, ctx: ExecutionContext) -> bool:
        return ctx.scheduler == "kubernetes"

    def collect(self, ctx: ExecutionContext) -> Iterator[LineBatch]:
        namespace, names = ctx.metadata.get("namespace"), [p for p in ctx.metadata.get("pods", "").split(",") if p]
        if not namespace or not names:
            raise NothingInScope("the workload has no pods on record")
        try:
            pods = self.kubectl.items("pods", *namespace_args(namespace), "--",
                                      *(object_name(n, "pod") for n in names))
        except KubectlError as exc:
            raise CollectorError(str(exc)) from None
        failures: list[str] = []
        for pod in pods:
            node = pod.get("spec", {}).get("nodeName")
            for container, restarted in containers(pod):
                for previous in ([True] if self.previous and restarted else []) + [False]:
                    try:
                        yield from self._log(namespace, pod["metadata"]["name"], container, node, previous)
                    except KubectlError as exc:  # one missing log must not hide the others
                        failures.append(str(exc))
        if failures:
            raise CollectorError(f"{len(failures)} container log(s) unreadable: {failures[0]}")

    def _log(self, namespace: str, pod: str, container: str, node: str | None, previous: bool) -> Iterator[LineBatch]:
        args = ["logs", *namespace_args(namespace), f"--container={object_name(container, 'container', 'label')}"]
        args += ["--timestamps"] if self.timestamps else []
        args += ["--previous"] if previous else []
        text = self.kubectl.run(*args, "--", object_name(pod, "pod"))
        lines = text.splitlines()
        origin = f"k8s:{namespace}/{pod}/{container}" + (" (previous)" if previous else "")
        for start in range(0, len(lines), BATCH_LINES):
            yield LineBatch(node, SourceKind.APPLOG, origin, lines[start:start + BATCH_LINES], start + 1)
