"""The three things an SRE reads on the node and workload pages, in Chromium (Playwright) over a live `firstfault
dashboard` on a small fleet's results written by the real Blueprint (tests/dashboard/fleet.py): a repeat offender
is a node blamed for distinct workloads within the window, not one job retried; the incomplete-evidence warning
appears only when a collector returned less than it should; a node's history lists its failures only.
Screenshots go to test-artifacts/dashboard/."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.dashboard.fleet import PASSED, REQUEUED, STDOUT_ONCE, SYSLOG_MISSING, SYSLOG_PARTIAL
from tests.dashboard.helpers import Dashboard
from tests.dashboard.test_browser import VIEWPORT, shot, watched_page


@pytest.fixture(scope="module")
def fleet_live(fleet_db: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Dashboard]:
    # the documented defaults, said out loud: three distinct workloads within seven days
    dashboard = Dashboard.start(fleet_db, tmp_path_factory.mktemp("fleet-live"), "--repeat-workloads", "3",
                                "--repeat-window", "7d")
    yield dashboard
    dashboard.stop()


@pytest.fixture
def page(browser: object, fleet_live: Dashboard) -> Iterator[object]:
    yield from watched_page(browser, fleet_live.url, [])


def _row(p: object, table: str, node: str) -> object:
    return p.locator(f"{table} tbody tr").filter(has=p.locator(f"a.node:text-is('{node}')"))  # type: ignore[attr-defined]


def test_a_repeat_offender_is_blamed_for_distinct_workloads(page: object) -> None:
    p = page
    p.goto("/nodes")  # type: ignore[attr-defined]
    assert "3 or more distinct workloads within 7d" in p.locator(".titlebar").inner_text()  # type: ignore[attr-defined]
    gpu = _row(p, "table.list", "gpu-a03")
    assert gpu.count() == 1 and gpu.locator(".repeat-badge").inner_text().lower() == "repeat offender"
    assert "culprit in 3 distinct failed workloads" in (gpu.locator(".repeat-badge").get_attribute("title") or "")
    # node-02 was blamed three times, in the three attempts of one requeued job: not a repeat offender
    node02 = _row(p, "table.list", "node-02")
    assert node02.locator("td.num").first.inner_text() == "3" and node02.locator(".repeat-badge").count() == 0
    shot(p, "fleet-nodes", docs=False)

    node02.locator("a.node").click()
    p.wait_for_url("**/nodes/node-02")  # type: ignore[attr-defined]
    assert p.locator(".repeat-badge").count() == 0  # type: ignore[attr-defined]
    assert "culprit 3 times, not a repeat offender" in p.locator(".titlebar").inner_text()  # type: ignore[attr-defined]
    assert p.locator("table.list tbody a.wl").all_inner_texts() == [REQUEUED] * 3  # type: ignore[attr-defined]

    p.goto("/nodes/gpu-a03")  # type: ignore[attr-defined]
    badge = p.locator(".titlebar .repeat-badge")  # type: ignore[attr-defined]
    assert badge.inner_text().lower() == "repeat offender: culprit in 3 workloads within 7d"
    shot(p, "fleet-repeat-offender", docs=False)

    p.goto("/")  # type: ignore[attr-defined]
    top = "section.card:has(h2:text-is('Top culprit nodes')) table"
    assert _row(p, top, "gpu-a03").locator(".repeat-badge").count() == 1
    assert _row(p, top, "node-02").count() == 1 and _row(p, top, "node-02").locator(".repeat-badge").count() == 0


def test_node_history_lists_failures_only(page: object) -> None:
    p = page
    p.goto("/nodes")  # type: ignore[attr-defined]
    cn101 = _row(p, "table.list", "cn-101")
    # it showed symptoms in the time-limit failure (04:00:37) and in a training run that passed at 06:00:37
    assert cn101.locator("td").last.inner_text() == "2026-05-03 04:00:37Z"
    cn101.locator("a.node").click()
    p.wait_for_url("**/nodes/cn-101")  # type: ignore[attr-defined]
    history = p.locator("table.list tbody a.wl").all_inner_texts()  # type: ignore[attr-defined]
    assert history == ["time-limit"] and PASSED not in p.locator("main").inner_text()  # type: ignore[attr-defined]
    stat = p.locator("a.stat", has_text="failed workloads where it showed symptoms")  # type: ignore[attr-defined]
    assert stat.locator(".n").inner_text() == "1"
    shot(p, "fleet-node-history", docs=False)
    # the count links to the same failures in the workload list
    stat.click()
    p.wait_for_url("**/workloads?node=cn-101&role=symptom&failed=1")  # type: ignore[attr-defined]
    assert p.locator("table#workloads tbody a.wl").all_inner_texts() == ["time-limit"]  # type: ignore[attr-defined]
    assert p.locator(".chips").get_by_text("failures only").is_visible()  # type: ignore[attr-defined]


def test_the_incomplete_evidence_warning_only_when_a_collector_fell_short(page: object) -> None:
    p = page
    # three nodes, one stdout file (read for the batch host), every syslog collected: no warning
    p.goto(f"/workload?id={STDOUT_ONCE}")  # type: ignore[attr-defined]
    assert p.locator("section.headline").is_visible()  # type: ignore[attr-defined]
    assert p.locator("#coverage-warning").count() == 0  # type: ignore[attr-defined]
    coverage = p.locator("#coverage").inner_text()  # type: ignore[attr-defined]
    assert "trn-c02" in coverage and "trn-c03" in coverage
    shot(p, "fleet-complete-evidence", docs=False)

    # a collector whose per-node syslogs were not there
    p.goto(f"/workload?id={SYSLOG_MISSING}")  # type: ignore[attr-defined]
    warning = p.locator("#coverage-warning")  # type: ignore[attr-defined]
    assert warning.is_visible()
    text = warning.inner_text()
    assert "logs collector files: empty — no file matched" in text and "dgx-b11.log" in text
    shot(p, "fleet-collector-empty", docs=False)

    # a collector that found two of the three nodes' syslogs names the node it missed
    p.goto(f"/workload?id={SYSLOG_PARTIAL}")  # type: ignore[attr-defined]
    warning = p.locator("#coverage-warning")  # type: ignore[attr-defined]
    assert "logs collector files: partial — delivered for 2 of 3 nodes, nothing for 1" in warning.inner_text()
    assert warning.locator("a.node").all_inner_texts() == ["trn-c03"]
    warning.locator("a.node").click()
    p.wait_for_url("**/nodes/trn-c03")  # type: ignore[attr-defined]


def test_the_repeat_policy_is_the_operators(browser: object, fleet_db: Path,
                                            tmp_path_factory: pytest.TempPathFactory) -> None:
    """`--repeat-workloads 4 --repeat-window 14d`: gpu-a03's fourth Xid 79, eleven days after the first three,
    makes it a repeat offender only under a window that long."""
    for options, badge in ((("--repeat-workloads", "4"), None),
                           (("--repeat-workloads", "4", "--repeat-window", "14d"),
                            "repeat offender: culprit in 4 workloads within 14d")):
        dashboard = Dashboard.start(fleet_db, tmp_path_factory.mktemp("policy"), *options)
        try:
            context = browser.new_context(viewport=VIEWPORT, base_url=dashboard.url)  # type: ignore[attr-defined]
            p = context.new_page()
            p.goto("/nodes/gpu-a03")
            found = p.locator(".titlebar .repeat-badge")
            assert (found.inner_text().lower() if found.count() else None) == badge
            if badge is None:
                assert "culprit 4 times, not a repeat offender" in p.locator(".titlebar").inner_text()
            context.close()
        finally:
            dashboard.stop()
