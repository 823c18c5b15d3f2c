"""A Kubernetes API emulator (kmock 0.8, in memory, real HTTP) that the real `kubectl` can talk to.

No kube-apiserver is installable on the test machines; this is the stand-in (see docs/blueprint.md). It serves
discovery for pods (with the `log` subresource) and Kueue Workloads, the objects of a seed file, and pod logs
per container, current and previous (`?container=...&previous=true`).

Usage: python k8s_emulator.py SEED.json PORT
SEED.json: {"objects": [Pod and Workload objects...], "logs": {"<ns>/<pod>/<container>[/previous]": "text"}}
Prints `listening <url>` once it serves.
"""

from __future__ import annotations

import asyncio
import json
import sys
from typing import Any

import kmock

PODS = "v1/pods"
WORKLOADS = "kueue.x-k8s.io/v1beta1/workloads"
VERBS = {"get", "list", "watch", "create", "delete", "patch"}


class KubectlFriendlyEmulator(kmock.KubernetesEmulator):
    """kmock 0.8 gaps kubectl trips over: '/v1' as the core groupVersion, and lists without kind/apiVersion."""

    async def _serve_version(self, request: kmock.Request) -> Any:
        doc = await super()._serve_version(request)
        doc["groupVersion"] = doc["groupVersion"].lstrip("/")
        return doc

    async def _serve_list(self, request: kmock.Request) -> Any:
        doc = await super()._serve_list(request)
        info = self.resources[request.resource]
        group_version = "/".join(x for x in (request.resource.group, request.resource.version) if x)
        doc.update({"apiVersion": group_version, "kind": (info.kind or "Object") + "List"})
        doc["metadata"]["resourceVersion"] = "1"
        return doc


def log_reaction(logs: dict[str, str], namespace: str, pod: str) -> Any:
    def serve(request: kmock.Request) -> bytes:
        container = request.params.get("container", "")
        suffix = "/previous" if request.params.get("previous") == "true" else ""
        return logs.get(f"{namespace}/{pod}/{container}{suffix}", "").encode()
    return serve


async def main(seed: dict[str, Any], port: int) -> None:
    async with KubectlFriendlyEmulator() as k8s, kmock.Server(k8s, port=port) as server:
        k8s["get /version"] << {"major": "1", "minor": "31", "gitVersion": "v1.31.0"}
        k8s.resources[PODS] = kmock.ResourceInfo(kind="Pod", singular="pod", namespaced=True, verbs=VERBS,
                                                 subresources={"log"})
        k8s.resources[WORKLOADS] = kmock.ResourceInfo(kind="Workload", singular="workload", namespaced=True,
                                                      verbs=VERBS)
        for obj in seed["objects"]:
            resource = PODS if obj["kind"] == "Pod" else WORKLOADS
            meta = obj["metadata"]
            k8s.objects[resource, meta["namespace"], meta["name"]] = obj
            if obj["kind"] == "Pod":
                path = f"get /api/v1/namespaces/{meta['namespace']}/pods/{meta['name']}/log"
                k8s[path] << kmock.headers({"Content-Type": "text/plain"}) << log_reaction(
                    seed.get("logs", {}), meta["namespace"], meta["name"])
        print("listening", server.url, flush=True)
        await asyncio.Event().wait()


if __name__ == "__main__":
    with open(sys.argv[1], encoding="utf-8") as fh:
        asyncio.run(main(json.load(fh), int(sys.argv[2])))
