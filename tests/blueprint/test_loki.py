"""The Loki collector against the Loki-API test server (loki_server.py) over real HTTP: scoping by node label
and window, pagination past `limit`, window splitting, 429/5xx retries, timeouts, multi-tenancy."""

from __future__ import annotations

import json
from datetime import timedelta
from pathlib import Path

import httpx
import pytest
from blueprint_helpers import make_workload, run_blueprint
from loki_server import LokiTestServer

from firstfault.blueprint.collectors.loki import LokiCollector
from firstfault.blueprint.config import spec_from_words
from firstfault.engine import ExecutionContext

DATA = Path(__file__).parent / "data" / "loki"
NODES = ["gpu-l01", "gpu-l02"]
START, END = "2026-06-01T10:30:00Z", "2026-06-01T10:45:00Z"
T0 = 1780308000 * 10**9   # 2026-06-01T10:00:00Z


@pytest.fixture
def loki() -> LokiTestServer:
    server = LokiTestServer(tenants=True)
    yield server
    server.stop()


def push(server: LokiTestServer, body: dict, tenant: str = "team-a") -> None:
    httpx.post(f"{server.url}/loki/api/v1/push", json=body, headers={"X-Scope-OrgID": tenant}).raise_for_status()


def chatter(node: str, count: int, start_ns: int, step_s: int = 7) -> dict:
    values = [[str(start_ns + i * step_s * 10**9), f"{node} cron[{100 + i}]: (root) CMD (run-parts /etc/cron.hourly)"]
              for i in range(count)]
    return {"stream": {"hostname": node, "job": "syslog"}, "values": values}


def test_the_server_answers_as_the_documentation_shows(loki: LokiTestServer) -> None:
    push(loki, json.loads((DATA / "push.json").read_text()))
    answer = httpx.get(f"{loki.url}/loki/api/v1/query_range", headers={"X-Scope-OrgID": "team-a"}, params={
        "query": '{job="syslog"}', "start": str(T0), "end": str(T0 + 3600 * 10**9), "limit": "100",
        "direction": "forward"})
    assert answer.status_code == 200
    assert answer.json() == json.loads((DATA / "query_range_streams.json").read_text())
    for query in ('sum(rate({job="syslog"}[5m]))', '{job="syslog"} | json', "{}"):
        bad = httpx.get(f"{loki.url}/loki/api/v1/query_range", headers={"X-Scope-OrgID": "team-a"},
                        params={"query": query, "start": str(T0), "end": str(T0 + 1)})
        assert bad.status_code == 400, query
    assert httpx.get(f"{loki.url}/loki/api/v1/query_range", params={"query": '{job="x"}'}).status_code == 401


def test_loki_evidence_is_paged_split_and_attributed(loki: LokiTestServer, tmp_path: Path,
                                                     capsys: pytest.CaptureFixture[str]) -> None:
    push(loki, json.loads((DATA / "push.json").read_text()))
    in_window = T0 + 32 * 60 * 10**9
    push(loki, {"streams": [chatter("gpu-l01", 40, in_window), chatter("gpu-l02", 25, in_window),
                            chatter("gpu-l99", 30, in_window),                     # not in the allocation
                            chatter("gpu-l01", 20, T0 - 3600 * 10**9)]})           # long before the window
    push(loki, {"streams": [chatter("gpu-l02", 50, in_window)]}, tenant="team-b")  # another tenant's logs
    workload = make_workload(tmp_path, "loki-job", NODES, START, END)
    code, (result,), err = run_blueprint([
        "--configs", str(workload), "--margin", "5m",
        "--connector", "logs", "loki", "url", loki.url, "tenant", "team-a", "selector", 'job="syslog"',
        "limit", "7", "split", "10m"], capsys)
    assert code == 0, err
    report = next(r for r in result["connector_reports"] if r["connector"] == "loki")
    assert report["status"] == "ok", report
    assert report["observation_count"] == 2 + 1 + 40 + 25      # every entry in scope, exactly once
    assert report["nodes"] == NODES
    diagnosis = result["diagnosis"]
    assert diagnosis["sub_domain"] == "gpu" and [c["node"] for c in diagnosis["culprit_nodes"]] == ["gpu-l02"]
    queries = [r for r in loki.state.requests if r["path"] == "/loki/api/v1/query_range"]
    assert all(r["tenant"] == "team-a" for r in queries)
    assert all(r["params"]["direction"] == "forward" and r["params"]["limit"] == "7" for r in queries)
    assert {r["params"]["query"] for r in queries} == {'{hostname=~"gpu\\\\-l01|gpu\\\\-l02", job="syslog"}'}
    slices = {r["params"]["end"] for r in queries}
    assert len(slices) == 3                               # 10:25-10:50 in 10-minute slices
    assert len(queries) > len(slices) + 5                 # and pages within them


def test_loki_retries_on_429_and_5xx(loki: LokiTestServer) -> None:
    push(loki, json.loads((DATA / "push.json").read_text()))
    loki.state.fail_next = [429, 503, 502]
    collector = LokiCollector(spec_from_words(["logs", "loki", "url", loki.url, "tenant", "team-a"]),
                              timedelta(minutes=5))
    collector.client.sleep = lambda _s: None
    ctx = ExecutionContext(workload_id="w", nodes=NODES, start_time=START, end_time=END)
    batches = list(collector.collect(ctx))
    assert sum(b.count() for b in batches) == 3
    assert collector.client.retried == 3


def test_loki_timeouts_are_reported_and_do_not_stop_the_run(loki: LokiTestServer, tmp_path: Path,
                                                            capsys: pytest.CaptureFixture[str]) -> None:
    loki.state.delay_next = [1.5, 1.5]
    workload = make_workload(tmp_path, "slow-loki", NODES, START, END,
                             files={"gpu-l01/applog": ["2026-06-01T10:40:00Z [rank0]: step 10 loss 2.0"]})
    code, (result,), err = run_blueprint([
        "--configs", str(workload),
        "--connector", "logs", "loki", "url", loki.url, "tenant", "team-a", "timeout", "0.3s", "retries", "1"],
        capsys)
    assert code == 0, err
    reports = {r["connector"]: r for r in result["connector_reports"]}
    assert reports["loki"]["status"] == "error" and "gave up after 2 attempts" in reports["loki"]["reason"]
    assert "ReadTimeout" in reports["loki"]["reason"]
    assert reports["static"]["status"] == "ok" and result["diagnosis"] is not None
    assert "collector error logs loki: 1 workload" in err


def test_queries_outside_the_supported_subset_fail_loudly(loki: LokiTestServer) -> None:
    spec = spec_from_words(["logs", "loki", "url", loki.url, "tenant", "team-a",
                            "query", '{hostname=~"$nodes"} | logfmt'])
    collector = LokiCollector(spec, timedelta(0))
    ctx = ExecutionContext(workload_id="w", nodes=NODES, start_time=START, end_time=END)
    with pytest.raises(Exception, match="HTTP 400"):
        list(collector.collect(ctx))
