"""Write the OpenMetrics backfill that setup-prometheus.sh loads into the test Prometheus.

dcgm-exporter and node_exporter style series for two GPU nodes, `gpu-p01` and `gpu-p02`, every 15 s over a
fixed window (2026-06-01 09:30 to 11:30 UTC). At 10:41:15 GPU 3 of gpu-p02 falls off the bus: its
DCGM_FI_DEV_XID_ERRORS gauge jumps from 0 to 79 and stays there. Everything else is healthy. The fixed
window keeps the data deterministic; tests/blueprint/test_promql.py queries inside it.

Two families name their nodes the other ways deployments do: DCGM_FI_DEV_POWER_USAGE by a Kubernetes relabelling
(`kubernetes_node`), and node_infiniband_port_errors_received_total only by the scrape target's IP
(`instance="10.9.0.N:9100"`), which node_exporter's node_uname_info maps to the host (`nodename`, an FQDN here).

Usage: python3 prometheus_backfill.py OUTPUT.om
"""

from __future__ import annotations

import sys
from datetime import datetime, timezone

NODES = ("gpu-p01", "gpu-p02")
GPUS = 4
START = int(datetime(2026, 6, 1, 9, 30, tzinfo=timezone.utc).timestamp())
END = int(datetime(2026, 6, 1, 11, 30, tzinfo=timezone.utc).timestamp())
XID_AT = int(datetime(2026, 6, 1, 10, 41, 15, tzinfo=timezone.utc).timestamp())
XID_NODE, XID_GPU, XID = "gpu-p02", 3, 79
STEP = 15
TARGETS = {"10.9.0.1": "gpu-p01", "10.9.0.2": "gpu-p02"}   # node_exporter scrape targets by IP


def gpu_series(name: str, value_of) -> list[str]:
    return [f'{name}{{Hostname="{node}",gpu="{gpu}",device="nvidia{gpu}",modelName="NVIDIA H100 80GB HBM3"}} '
            f"{value_of(node, gpu, t)} {t}"
            for node in NODES for gpu in range(GPUS) for t in range(START, END + 1, STEP)]


def xid(node: str, gpu: int, t: int) -> int:
    return XID if (node, gpu) == (XID_NODE, XID_GPU) and t >= XID_AT else 0


def main(out: str) -> None:
    families = [
        ("DCGM_FI_DEV_XID_ERRORS", "gauge", "Value of the last XID error encountered.", gpu_series(
            "DCGM_FI_DEV_XID_ERRORS", xid)),
        ("DCGM_FI_DEV_GPU_TEMP", "gauge", "GPU temperature (in C).", gpu_series(
            "DCGM_FI_DEV_GPU_TEMP", lambda n, g, t: 55 + g)),
        ("DCGM_FI_DEV_ECC_DBE_VOL_TOTAL", "gauge", "Total number of double-bit volatile ECC errors.", gpu_series(
            "DCGM_FI_DEV_ECC_DBE_VOL_TOTAL", lambda n, g, t: 0)),
        ("node_infiniband_link_downed_total", "counter", "Number of times the link failed to recover.", [
            f'node_infiniband_link_downed_total{{instance="{node}:9100",device="mlx5_{d}",port="1"}} 0 {t}'
            for node in NODES for d in range(2) for t in range(START, END + 1, STEP)]),
        ("DCGM_FI_DEV_POWER_USAGE", "gauge", "Power draw (in W).", [
            f'DCGM_FI_DEV_POWER_USAGE{{kubernetes_node="{node}",gpu="{gpu}"}} 400 {t}'
            for node in NODES for gpu in range(GPUS) for t in range(START, END + 1, STEP)]),
        ("node_infiniband_port_errors_received_total", "counter", "Number of packets received with errors.", [
            f'node_infiniband_port_errors_received_total{{instance="{ip}:9100",device="mlx5_0",port="1"}} 0 {t}'
            for ip in TARGETS for t in range(START, END + 1, STEP)]),
        ("node_uname_info", "gauge", "Labeled system information as provided by the uname system call.", [
            f'node_uname_info{{instance="{ip}:9100",nodename="{node}.cluster.local",sysname="Linux"}} 1 {t}'
            for ip, node in TARGETS.items() for t in range(START, END + 1, STEP)]),
    ]
    lines: list[str] = []
    for name, kind, help_text, series in families:
        lines += [f"# HELP {name} {help_text}", f"# TYPE {name} {kind}", *series]
    lines.append("# EOF")
    with open(out, "w", encoding="utf-8") as fh:
        fh.write("\n".join(lines) + "\n")


if __name__ == "__main__":
    main(sys.argv[1])
