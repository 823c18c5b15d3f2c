"""The PromQL collector against the real Prometheus of tests/support/setup-prometheus.sh, backfilled with
dcgm-exporter and node_exporter series for gpu-p01/gpu-p02 on 2026-06-01 (prometheus_backfill.py): GPU 3 of
gpu-p02 reports Xid 79 from 10:41:15 on."""

from __future__ import annotations

from datetime import timedelta
from pathlib import Path

import pytest
from blueprint_helpers import make_workload, run_blueprint

from firstfault.blueprint.collectors.promql import PromqlCollector
from firstfault.blueprint.config import spec_from_words
from firstfault.engine import ExecutionContext
from firstfault.errors import NothingInScope

NODES = ["gpu-p01", "gpu-p02"]
START, END = "2026-06-01T10:30:00Z", "2026-06-01T10:50:00Z"


def _collect(url: str, *options: str) -> list:
    collector = PromqlCollector(spec_from_words(["metrics", "promql", "url", url, *options]), timedelta(minutes=10))
    ctx = ExecutionContext(workload_id="w", nodes=NODES, start_time=START, end_time=END)
    return list(collector.collect(ctx))


def test_the_xid_spike_is_found_on_its_node(prometheus_url: str) -> None:
    batches = {b.origin: b for b in _collect(prometheus_url)}
    xid = batches["promql:DCGM_FI_DEV_XID_ERRORS"]
    by_gpu = {(s["metric"]["Hostname"], s["metric"]["gpu"]): s["values"] for s in xid.result}
    assert len(by_gpu) == 8
    spike = by_gpu[("gpu-p02", "3")]
    # 10:20 (window start minus the margin), the change at 10:41:15, and 11:00 (end plus the margin)
    assert [(int(t), v) for t, v in spike] == [(1780309200, "0"), (1780310475, "79"), (1780311600, "79")]
    assert all(v == "0" for key, values in by_gpu.items() if key != ("gpu-p02", "3") for _, v in values)
    ib = batches["promql:node_infiniband_link_downed_total"]
    assert {s["metric"]["instance"] for s in ib.result} == set(NODES)   # `gpu-p01:9100` -> gpu-p01
    assert "promql:DCGM_FI_DEV_NVLINK_CRC_FLIT_ERROR_COUNT_TOTAL" not in batches   # no such series: skipped


def test_promql_metrics_reach_the_diagnosis(prometheus_url: str, tmp_path: Path,
                                            capsys: pytest.CaptureFixture[str]) -> None:
    workload = make_workload(tmp_path, "prom-job", NODES, START, END)
    code, (result,), err = run_blueprint(["--configs", str(workload),
                                          "--connector", "metrics", "promql", "url", prometheus_url], capsys)
    assert code == 0, err
    report = next(r for r in result["connector_reports"] if r["connector"] == "promql")
    assert report["status"] == "ok" and report["kind"] == "metrics" and report["nodes"] == NODES
    assert report["observation_count"] > 0
    sources = {(s["node"], s["source"]) for s in result["diagnosis"]["coverage"]["sources"]}
    assert {("gpu-p01", "node_metrics"), ("gpu-p02", "node_metrics")} <= sources


def test_a_bad_query_is_reported_and_the_others_still_delivered(prometheus_url: str, tmp_path: Path,
                                                                capsys: pytest.CaptureFixture[str]) -> None:
    workload = make_workload(tmp_path, "prom-bad", NODES, START, END)
    code, (result,), err = run_blueprint([
        "--configs", str(workload), "--connector", "metrics", "promql", "url", prometheus_url,
        "query", "broken=rate(DCGM_FI_DEV_XID_ERRORS{", "query", 'temp=max by (Hostname) (DCGM_FI_DEV_GPU_TEMP{Hostname=~"$nodes"})',
        "defaults", "off"], capsys)
    assert code == 0, err
    report = next(r for r in result["connector_reports"] if r["connector"] == "promql")
    assert report["status"] == "error" and "broken" in report["reason"] and "HTTP 400" in report["reason"]
    assert report["observation_count"] > 0 and report["nodes"] == NODES


def test_an_unreachable_prometheus_is_an_error_report(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    workload = make_workload(tmp_path, "prom-down", NODES, START, END)
    code, (result,), _ = run_blueprint(["--configs", str(workload), "--connector", "metrics", "promql",
                                        "url", "http://127.0.0.1:9", "retries", "0"], capsys)
    assert code == 0 and result["diagnosis"] is not None
    report = next(r for r in result["connector_reports"] if r["connector"] == "promql")
    assert report["status"] == "error" and "ConnectError" in report["reason"]


def test_auto_finds_the_label_each_family_names_its_nodes_by(prometheus_url: str) -> None:
    """`node_label auto` (the default): the Xid gauge by dcgm-exporter's `Hostname`, power by a Kubernetes
    relabelling's `kubernetes_node`, and InfiniBand errors scraped by IP only through node_uname_info's
    `nodename` (an FQDN) - each series lands on its allocated node."""
    batches = {b.origin: b for b in _collect(
        prometheus_url, "defaults", "off", "query", 'xid=DCGM_FI_DEV_XID_ERRORS{$node_label=~"$nodes"}',
        "query", 'power=DCGM_FI_DEV_POWER_USAGE{$node_label=~"$nodes"}',
        "query", 'ib_errors=node_infiniband_port_errors_received_total{$node_label=~"$nodes"}')}
    found = {name: (b.node_label, sorted({s["metric"][b.node_label] for s in b.result}))
             for name, b in batches.items()}
    assert found == {"promql:xid": ("Hostname", NODES), "promql:power": ("kubernetes_node", NODES),
                     "promql:ib_errors": ("instance", NODES)}


def test_an_explicit_label_is_used_as_given(prometheus_url: str) -> None:
    """`node_label Hostname` queries that label only: the power series (named by kubernetes_node) are not found."""
    with pytest.raises(NothingInScope, match="no series"):
        _collect(prometheus_url, "node_label", "Hostname", "defaults", "off",
                 "query", 'power=DCGM_FI_DEV_POWER_USAGE{$node_label=~"$nodes"}')
