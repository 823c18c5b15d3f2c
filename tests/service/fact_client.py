"""A client of the v1 API written against the public contract of the "FACT" client (docs/service.md, "v1 compatibility API").

It builds the same payloads: a workload + metadata to create an attributor, dmesg lines turned into Loki streams
whose lines are JSON envelopes (`body`, `severity`, `attributes`, `resources`), posted with the stream list
encoded as a JSON string in `body`, and an attribution read as "every node with a non-empty inner list is faulty".
"""

from __future__ import annotations

import json
from datetime import datetime
from typing import Any

import httpx


def dmesg_envelope(message: str, hostname: str) -> str:
    lowered = message.lower()
    severity = "err" if ("xid" in lowered or "error" in lowered or "failed" in lowered) else "info"
    payload = {"body": message, "severity": severity,
               "attributes": {"hostname": hostname, "appname": "kernel", "facility": 0}, "resources": {}}
    return json.dumps(payload, separators=(",", ":"))


def loki_streams(entries: list[tuple[str, int, str]], envelope: bool = True) -> list[dict[str, Any]]:
    """Loki streams, one per node, from (node, unix ns, message) entries."""
    streams: dict[str, list[list[str]]] = {}
    for node, ns, message in entries:
        line = dmesg_envelope(message, node) if envelope else message
        streams.setdefault(node, []).append([str(ns), line])
    return [{"stream": {"job": "nvrx", "app": "dmesg", "hostname": node}, "values": values}
            for node, values in streams.items()]


def split_prefixed(line: str, default_host: str) -> tuple[str, str]:
    """`host: message` lines as the public client reads them (a host has no space or slash)."""
    head, sep, rest = line.partition(": ")
    if sep and head and " " not in head and "/" not in head:
        return head, rest
    return default_host, line


class FactClient:
    def __init__(self, base_url: str, timeout: float = 30.0) -> None:
        self.base = base_url.rstrip("/") + "/latest"
        self.http = httpx.Client(timeout=timeout, headers={"accept": "application/json"})

    def close(self) -> None:
        self.http.close()

    def create_attributor(self, *, job_id: str, nodes: list[str], ranks_per_node: int, start: datetime,
                          end: datetime) -> str:
        info = {
            "workload": {"id": job_id, "type": "slurm", "srun_cmd": "unknown", "job_start_time": start.isoformat(),
                         "job_end_time": end.isoformat(), "status": "FAILED",
                         "nranks": ranks_per_node * len(nodes), "ranks_per_node": ranks_per_node,
                         "nodes": sorted(nodes), "name": "unknown", "username": "tester", "framework": "unknown",
                         "exit_code_signal": 1},
            "metadata": {"cluster": "test", "agent": "nvrx-ft-launcher", "tenant": "unknown", "ruleset": "default"},
        }
        response = self.http.post(f"{self.base}/attributor", json=info)
        response.raise_for_status()
        return str(response.json()["attributor_id"])

    def post_streams(self, attributor_id: str, streams: list[dict[str, Any]], *, source: str, start: datetime,
                     end: datetime) -> Any:
        payload = {
            "context": {"time_interval": {"start": start.isoformat(), "end": end.isoformat()},
                        "resources": "AllJobResources", "source": source, "format": "raw_loki_streams"},
            "body": json.dumps(streams, separators=(",", ":")),
        }
        response = self.http.post(f"{self.base}/attributor/{attributor_id}/observation", json=payload)
        response.raise_for_status()
        return response.json().get("observation_id")

    def attribution(self, attributor_id: str) -> dict[str, Any]:
        response = self.http.get(f"{self.base}/attributor/{attributor_id}/attribution")
        response.raise_for_status()
        return dict(response.json())

    @staticmethod
    def faulty_nodes(attribution: dict[str, Any]) -> list[str]:
        return sorted({str(item["node"]) for item in attribution.get("attributions", [])
                       if item.get("type") == "NodeAttribution" and item.get("attributions") and item.get("node")})
