"""Every page over the bundled samples (written by the real Blueprint): content, filters, sorting, errors."""

from __future__ import annotations

import json
import re
import sqlite3
from collections import Counter
from pathlib import Path

import pytest
from fastapi.testclient import TestClient


def test_overview(client: TestClient) -> None:
    r = client.get("/")
    assert r.status_code == 200
    html = r.text
    assert "<h1>Overview</h1>" in html
    assert html.count('class="chart"') == 2          # outcomes and sub-domains over time
    assert "Fail InfraHW" in html and "nvlink" in html
    assert 'href="/nodes/node-02"' in html and 'href="/nodes/gpu-a03"' in html   # top culprits
    assert "Collectors' health" in html and "logs static" in html
    for name in ("24h", "7d", "30d", "90d", "all"):
        assert client.get(f"/?range={name}").status_code == 200


def test_workloads_list_and_filters(client: TestClient) -> None:
    html = client.get("/workloads").text
    assert html.count('class="wl"') == 5
    html = client.get("/workloads?sub_domain=nvlink").text
    assert html.count('class="wl"') == 1 and ">nvlink-walkthrough<" in html
    assert client.get("/workloads?outcome=Fail+InfraHW").text.count('class="wl"') == 2
    assert client.get("/workloads?state=TIMEOUT").text.count('class="wl"') == 1
    assert client.get("/workloads?node=node-02").text.count('class="wl"') == 1
    assert client.get("/workloads?node=node-02&role=culprit").text.count('class="wl"') == 1
    assert client.get("/workloads?node=node-01&role=culprit").text.count('class="wl"') == 0
    assert client.get("/workloads?q=xid").text.count('class="wl"') == 2          # ids and root causes
    assert client.get("/workloads?from=2026-03-01&to=2026-04-01").text.count('class="wl"') == 1
    assert client.get("/workloads?outcome=not+attributed").text.count('class="wl"') == 0
    assert "No workload matches." in client.get("/workloads?q=no-such-thing").text


def _ids(html: str) -> list[str]:
    return re.findall(r'class="wl" href="[^"]*">([^<]+)</a>', html)


def test_workloads_sorting_and_paging(client: TestClient) -> None:
    by_time = _ids(client.get("/workloads").text)
    assert by_time == ["slurm-time-limit", "python-exception-rank0", "nvlink-walkthrough", "xid79-fallen-off-bus",
                       "cuda-oom-rank"]
    assert _ids(client.get("/workloads?sort=time&order=asc").text) == by_time[::-1]
    assert _ids(client.get("/workloads?sort=workload&order=asc").text) == sorted(by_time)
    page1 = _ids(client.get("/workloads?per_page=25&sort=workload&order=asc&page=1").text)
    assert page1 == sorted(by_time)
    assert _ids(client.get("/workloads?page=2").text) == []
    html = client.get("/workloads?page=2").text
    assert "go to the last page" in html


def test_workload_detail(client: TestClient) -> None:
    r = client.get("/workload", params={"id": "nvlink-walkthrough"})
    assert r.status_code == 200
    html = r.text
    headline = html[html.index('<section class="headline'):html.index("</section>", html.index('<section class="headline'))]
    assert "XID-149.4" in headline and ">node-02</a>" in headline and "began the failure" in headline
    assert "RESET_GPU" in html and "INVESTIGATE_LINK_SI" in html            # the culprit's next action
    assert "NVRM: Xid (PCI:0018:01:00): 149" in html                          # the root evidence line
    assert "node-02/syslog.log:8" in html                                     # its file and line
    assert '<svg class="timeline"' in html and "ev-root" in html and "first fault: XID-149.4 on node-02" in html
    assert "demoted by <strong>DemoteExplained</strong>" in html              # supporting symptoms and their rule
    assert "XidBurstRoot" in html and "ElectRootCause" in html                # the rule trace
    assert "node-01/applog.log" in html                                       # coverage
    assert 'href="/runs/' in html
    run = re.search(r'href="/runs/(\d+)\.json"', html)
    assert run
    download = client.get(f"/runs/{run.group(1)}.json")
    assert download.status_code == 200 and download.headers["content-type"] == "application/json"
    assert "attachment" in download.headers["content-disposition"]
    assert json.loads(download.text)["diagnosis"]["root_cause"]["node"] == "node-02"
    assert client.get("/workload", params={"id": "nvlink-walkthrough", "attempt": 0}).status_code == 200


def test_every_sample_renders(client: TestClient) -> None:
    for workload in ("cuda-oom-rank", "python-exception-rank0", "slurm-time-limit", "xid79-fallen-off-bus"):
        r = client.get("/workload", params={"id": workload})
        assert r.status_code == 200, workload
        assert '<section class="headline' in r.text


def test_node_pages(client: TestClient) -> None:
    html = client.get("/nodes/node-02").text
    assert "nvlink-walkthrough" in html and "culprit once" in html and "XID-149.4" in html
    html = client.get("/nodes/node-01").text         # symptoms only, never blamed
    assert "nvlink-walkthrough" in html and "Never blamed." in html
    html = client.get("/nodes").text
    assert html.index(">node-02<") < html.index(">node-01<")      # blamed nodes first
    assert ">gpu-a03<" in client.get("/nodes?q=a03").text and ">node-02<" not in client.get("/nodes?q=a03").text


def _expected_firing(db: Path) -> Counter[str]:
    """Per rule, the stored attributions naming it (computed here in Python, independently of the SQL)."""
    counts: Counter[str] = Counter()
    with sqlite3.connect(db) as con:
        for (text,) in con.execute("SELECT r.result_json FROM workload_attempts a "
                                   "JOIN attribution_runs r ON r.id = a.latest_run_id"):
            d = json.loads(text)["diagnosis"]
            names = {t["rule"] for t in d["trace"]} | {s["rule"] for s in d["symptoms"]}
            names |= {s["demoted_by"] for s in d["symptoms"] if s["demoted_by"]}
            counts.update(names)
    return counts


def test_rules_page_counts_firing(client: TestClient, sample_db: Path) -> None:
    html = client.get("/rules").text
    expected = _expected_firing(sample_db)
    assert expected["HandleXidBurstEvents"] == 2 and expected["ElectRootCause"] >= 4
    assert expected["NvrmXid"] == 2                  # extractors count through their extraction trace entries
    for rule in ("ElectRootCause", "HandleXidBurstEvents", "DemoteExplained", "TrainingProgress", "NvrmXid"):
        row = re.search(rf'<span class="mono">{rule}</span>.*?<td class="num">(\d+)</td>', html, re.DOTALL)
        assert row and int(row.group(1)) == expected[rule], rule
    assert "XID-149.4" in html                     # root causes in the stored results
    assert client.get("/rules?kind=refiner").status_code == 200
    assert "No rule matches." in client.get("/rules?q=zzzz-nothing").text


@pytest.mark.parametrize("query", [
    "/workloads?sub_domain=bogus", "/workloads?outcome=Fail", "/workloads?state=done", "/workloads?page=abc",
    "/workloads?page=0", "/workloads?page=-1", "/workloads?page=99999999999999999999", "/workloads?per_page=7",
    "/workloads?sort=end_time", "/workloads?sort=time;DROP+TABLE+attribution_runs", "/workloads?order=sideways",
    "/workloads?from=yesterday", "/workloads?from=2026-13-45", "/workloads?to=1e999d", "/workloads?from=9999999999w",
    "/workloads?from=2026-03-02&to=2026-03-01", "/workloads?role=culprit", "/workloads?role=king&node=n",
    "/workloads?q=" + "x" * 300, "/workloads?node=a%00b", "/?range=forever", "/workload", "/workload?id=x&attempt=-1",
    "/workload?id=x&attempt=zero", "/workload?id=x&run=abc", "/nodes/n?page=0", "/rules?kind=magic",
])
def test_malformed_parameters_are_400_pages(client: TestClient, query: str) -> None:
    r = client.get(query)
    assert r.status_code == 400, (query, r.status_code)
    assert r.headers["content-type"].startswith("text/html")
    assert "Bad request" in r.text and 'class="message"' in r.text


@pytest.mark.parametrize("query", ["/workload?id=nope", "/workload?id=nvlink-walkthrough&attempt=3",
                                   "/workload?id=nvlink-walkthrough&run=999999", "/nodes/no-such-node",
                                   "/runs/999999.json", f"/runs/{2**64}.json", f"/runs/-{2**63 + 1}.json",
                                   "/no/such/page"])
def test_unknown_things_are_404_pages(client: TestClient, query: str) -> None:
    r = client.get(query)
    assert r.status_code == 404, query
    assert "Not found" in r.text


def test_read_only_methods_and_headers(client: TestClient) -> None:
    for method in ("POST", "PUT", "DELETE", "PATCH"):
        assert client.request(method, "/workloads").status_code == 405
    r = client.get("/")
    csp = r.headers["content-security-policy"]
    assert "script-src 'self'" in csp and "unsafe-inline" not in csp
    assert r.headers["x-content-type-options"] == "nosniff"
    static = client.get("/static/style.css")
    assert static.status_code == 200 and "timeline" in static.text
    assert client.get("/static/app.js").status_code == 200


def test_overview_auto_refresh(client: TestClient) -> None:
    assert 'http-equiv="refresh"' not in client.get("/").text
    html = client.get("/?refresh=60&range=7d").text
    assert '<meta http-equiv="refresh" content="60">' in html and "auto-refresh: every 60 s" in html
    assert 'href="/?range=all&refresh=60"' in html.replace("&amp;", "&")      # ranges keep it
    for bad in ("5", "x", "99999"):
        assert client.get(f"/?refresh={bad}").status_code == 400


def test_long_lists_are_capped(client: TestClient, monkeypatch: pytest.MonkeyPatch) -> None:
    from firstfault.dashboard import app as app_module

    monkeypatch.setattr(app_module, "MAX_ROWS", 3)
    monkeypatch.setattr(app_module, "MAX_INLINE_JSON", 100)
    html = client.get("/workload", params={"id": "nvlink-walkthrough"}).text
    assert html.count('<tr id="symptom-') == 3 and "6 more symptoms are in the result JSON." in html
    assert "more trace entries are in the result JSON." in html
    assert '<pre class="json">' not in html and "download it to read it" in html


def test_new_results_appear_while_the_dashboard_is_open(tmp_path: Path) -> None:
    """The Blueprint writes (WAL) while the dashboard reads; cached aggregates follow the new runs."""
    from firstfault.dashboard.app import create_app
    from firstfault.samples import sample_dirs
    from tests.dashboard.helpers import blueprint_into

    db = tmp_path / "live.db"
    blueprint_into(db, sample_dirs()["nvlink-walkthrough"])
    with TestClient(create_app(db, allowed_hosts=["testserver"])) as live:
        assert ">1</span><span class=\"l\">workload attempts" in live.get("/").text
        assert live.get("/nodes").text.count('class="node culprit"') == 1
        blueprint_into(db, sample_dirs()["xid79-fallen-off-bus"])
        assert ">2</span><span class=\"l\">workload attempts" in live.get("/").text
        assert live.get("/nodes").text.count('class="node culprit"') == 2
        assert ">xid79-fallen-off-bus<" in live.get("/workloads").text
