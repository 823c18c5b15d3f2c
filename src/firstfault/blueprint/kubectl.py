"""A thin runner for the real `kubectl` (the Kueue connector and the pod-log collector shell out to it)."""

from __future__ import annotations

import json
import subprocess
from typing import Any

from firstfault.blueprint.options import KubectlOptions
from firstfault.errors import KubectlError


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
        """`kubectl get ... -o json` items."""
        try:
            doc = json.loads(self.run("get", *args, "-o", "json"))
        except json.JSONDecodeError as exc:
            raise KubectlError(f"kubectl get {' '.join(args)}: not JSON: {exc}") from None
        return list(doc["items"]) if "items" in doc else [doc]


def namespace_args(namespace: str | None) -> list[str]:
    return ["-n", namespace] if namespace else ["--all-namespaces"]
