"""The dashboard in Chromium (Playwright), over the bundled samples written by the real Blueprint: the walk an
operator takes from the overview to the node at fault. Screenshots go to test-artifacts/dashboard/; with
FIRSTFAULT_UPDATE_SCREENSHOTS=1 they are also copied to docs/img/ (the ones docs/quickstart.md shows)."""

from __future__ import annotations

import os
import shutil
from collections.abc import Iterator

import pytest

from tests.dashboard.helpers import ARTIFACTS, DOCS_IMG, Dashboard

VIEWPORT = {"width": 1440, "height": 900}


@pytest.fixture
def errors() -> list[str]:
    return []


def watched_page(browser: object, url: str, errors: list[str]) -> Iterator[object]:
    """A page on `url` whose script errors and console errors are collected; none may have happened at the end
    (no script error, no CSP violation, no failed resource)."""
    context = browser.new_context(viewport=VIEWPORT, base_url=url)  # type: ignore[attr-defined]
    page = context.new_page()
    page.set_default_timeout(15_000)
    page.on("pageerror", lambda exc: errors.append(str(exc)))
    page.on("console", lambda msg: errors.append(msg.text) if msg.type == "error" else None)
    yield page
    context.close()
    assert errors == [], errors


@pytest.fixture
def page(browser: object, live: Dashboard, errors: list[str]) -> Iterator[object]:
    yield from watched_page(browser, live.url, errors)


def shot(page: object, name: str, full_page: bool = False, selector: str | None = None, docs: bool = True) -> None:
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    path = ARTIFACTS / f"dashboard-{name}.png"
    if selector:
        page.locator(selector).screenshot(path=str(path))  # type: ignore[attr-defined]
    else:
        page.screenshot(path=str(path), full_page=full_page)  # type: ignore[attr-defined]
    if docs and os.environ.get("FIRSTFAULT_UPDATE_SCREENSHOTS") == "1":
        DOCS_IMG.mkdir(parents=True, exist_ok=True)
        shutil.copy(path, DOCS_IMG / path.name)


def test_from_the_overview_to_the_node_at_fault(page: object) -> None:
    p = page
    # the overview: charts over time, top culprits, collectors' health
    p.goto("/")  # type: ignore[attr-defined]
    assert p.locator("h1").inner_text() == "Overview"  # type: ignore[attr-defined]
    assert p.locator("svg.chart").count() == 2  # type: ignore[attr-defined]
    assert p.locator("svg.chart rect").count() >= 5  # type: ignore[attr-defined]
    shot(p, "overview", full_page=True)

    # the workloads, then filtered by sub_domain (the select applies at once)
    p.get_by_role("link", name="Workloads", exact=True).click()  # type: ignore[attr-defined]
    p.wait_for_url("**/workloads")  # type: ignore[attr-defined]
    assert p.locator("table#workloads tbody tr").count() == 5  # type: ignore[attr-defined]
    shot(p, "workloads")
    p.locator("select[name=sub_domain]").select_option("nvlink")  # type: ignore[attr-defined]
    p.wait_for_url("**/workloads?sub_domain=nvlink")  # type: ignore[attr-defined]
    rows = p.locator("table#workloads tbody tr")  # type: ignore[attr-defined]
    assert rows.count() == 1
    assert "nvlink-walkthrough" in rows.first.inner_text()
    assert "Fail InfraHW" in rows.first.inner_text()

    # the NVLink sample: node-02 named, its Xid 149 evidence line, the timeline with the root marked
    p.get_by_role("link", name="nvlink-walkthrough").click()  # type: ignore[attr-defined]
    p.wait_for_url("**/workload?id=nvlink-walkthrough*")  # type: ignore[attr-defined]
    headline = p.locator("section.headline").inner_text()  # type: ignore[attr-defined]
    assert "XID-149.4" in headline and "node-02" in headline and "began the failure" in headline
    culprit = p.locator(".culprit-card").first  # type: ignore[attr-defined]
    assert "node-02" in culprit.inner_text() and "RESET_GPU" in culprit.inner_text()
    evidence = p.locator(".root-evidence").first  # type: ignore[attr-defined]
    assert "NVRM: Xid (PCI:0018:01:00): 149" in evidence.inner_text()
    assert "node-02/syslog.log:8" in evidence.inner_text()
    timeline = p.locator("svg.timeline")  # type: ignore[attr-defined]
    assert timeline.is_visible()
    lanes = [e.get_attribute("data-node") for e in timeline.locator("text.lane-label").all()]
    assert lanes[0] == "node-02" and set(lanes) == {"node-01", "node-02", "node-03"}
    assert timeline.locator("a.ev-root").count() == 1
    assert "XID-149.4 on node-02 (ROOT CAUSE)" in (timeline.locator("a.ev-root title").text_content() or "")
    assert timeline.locator("a.ev-demoted").count() >= 4
    assert "first fault: XID-149.4 on node-02" in (timeline.locator("text.marker-label.root").text_content() or "")
    assert p.locator("#symptoms").get_by_text("DemoteExplained").first.is_visible()  # type: ignore[attr-defined]
    shot(p, "workload", full_page=True)
    shot(p, "timeline", selector="#timeline")
    # clicking a mark on the timeline jumps to its symptom row
    timeline.locator("a.ev-root").click()
    assert p.url.endswith("#symptom-1") or "#symptom-" in p.url  # type: ignore[attr-defined]

    # follow the culprit to node-02's page
    culprit.get_by_role("link", name="node-02").click()
    p.wait_for_url("**/nodes/node-02")  # type: ignore[attr-defined]
    assert p.locator("h1").inner_text() == "node-02"  # type: ignore[attr-defined]
    assert "nvlink-walkthrough" in p.locator("table.list").inner_text()  # type: ignore[attr-defined]
    shot(p, "node")


def test_rules_and_error_pages(page: object, errors: list[str]) -> None:
    p = page
    p.goto("/rules")  # type: ignore[attr-defined]
    assert "ElectRootCause" in p.locator("table.rules").inner_text()  # type: ignore[attr-defined]
    shot(p, "rules")
    response = p.goto("/workloads?sub_domain=<oops>")  # type: ignore[attr-defined]
    assert response.status == 400
    assert "sub_domain" in p.locator(".message").inner_text()  # type: ignore[attr-defined]
    shot(p, "error", docs=False)
    assert errors == ["Failed to load resource: the server responded with a status of 400 (Bad Request)"]
    errors.clear()
