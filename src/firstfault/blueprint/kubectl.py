"""A thin runner for the real `kubectl` (the Kueue connector and the pod-log collector shell out to it).

Object names read from the cluster or a workload's record become kubectl arguments only through `object_name`,
which holds them to the Kubernetes DNS-1123 rules (so none can read as an option), and they are placed after
`--`, with namespaces and containers given as `--namespace=NAME` and `--container=NAME`.
"""

from __future__ import annotations

import json
import re
import subprocess
from typing import Any

from firstfault.blueprint.options import KubectlOptions
from firstfault.errors import KubectlError

# RFC 1123 as Kubernetes applies it: a label (namespaces, containers) and a subdomain (pods and most objects).
_LABEL = r"[a-z0-9](?:[-a-z0-9]{0,61}[a-z0-9])?"
_NAMES = {"label": re.compile(_LABEL), "subdomain": re.compile(rf"(?=.{{1,253}}$){_LABEL}(?:\.{_LABEL})*")}


def object_name(value: str, what: str, rule: str = "subdomain") -> str:
    """`value` when it is a valid Kubernetes name under `rule` (`label` or `subdomain`), else KubectlError."""
    if not _NAMES[rule].fullmatch(value):
        raise KubectlError(f"not a valid Kubernetes {what} name (RFC 1123 {rule}): {value[:100]!r}")
    return value


class Kubectl:
    def __init__(self, options: KubectlOptions) -> None:
        self.base = [options.kubectl]
        if options.kubeconfig:
            self.base += ["--kubeconfig", options.kubeconfig]
        if options.context:
            self.base += ["--context", options.context]
        self.timeout = options.timeout.total_seconds()

    def run(self, *args: str) -> str:
        argv = [*self.base, *args]
        try:
            done = subprocess.run(argv, capture_output=True, text=True, timeout=self.timeout, check=False)
        except (OSError, subprocess.TimeoutExpired) as exc:
            raise KubectlError(f"kubectl: {exc}") from None
        if done.returncode != 0:
            raise KubectlError(f"kubectl {' '.join(args)}: exit {done.returncode}: {done.stderr.strip()[:500]}",
                               done.stderr)
        return done.stdout

    def items(self, *args: str) -> list[dict[str, Any]]:
        """`kubectl get -o json ...` items."""
        try:
            doc = json.loads(self.run("get", "-o", "json", *args))
        except json.JSONDecodeError as exc:
            raise KubectlError(f"kubectl get {' '.join(args)}: not JSON: {exc}") from None
        return list(doc["items"]) if "items" in doc else [doc]


def namespace_args(namespace: str | None) -> list[str]:
    return [f"--namespace={object_name(namespace, 'namespace', 'label')}"] if namespace else ["--all-namespaces"]
