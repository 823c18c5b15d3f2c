"""Issue 8 §5: XSS through log lines, workload names, node names and filters is inert; SQL injection through
filters is impossible; the database is opened read-only and never created or modified by the dashboard."""

from __future__ import annotations

import re
import shutil
import sqlite3
from collections.abc import Iterator
from pathlib import Path
from urllib.parse import quote, urljoin

import httpx
import pytest
from fastapi.testclient import TestClient

from firstfault.cli import main
from firstfault.dashboard.app import create_app
from firstfault.dashboard.db import ResultsDB, check_database, connect_readonly
from firstfault.errors import DatabaseError
from firstfault.samples import samples_root
from tests.dashboard.helpers import (
    HOSTILE_ID,
    HOSTILE_NODES,
    IMG,
    RAW_PAYLOADS,
    SCRIPT,
    SQL,
    SVG,
    Dashboard,
    blueprint_into,
    fingerprint,
    hostile_workload,
)


@pytest.fixture(scope="module")
def hostile_db(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The samples plus the hostile workload, attributed by the real Blueprint."""
    root = tmp_path_factory.mktemp("hostile")
    db = root / "results.db"
    blueprint_into(db, samples_root(), hostile_workload(root / "workloads"))
    with sqlite3.connect(db) as con:   # the premise: the payloads really are in the stored results
        stored = con.execute("SELECT result_json FROM attribution_runs").fetchall()
    text = "".join(row[0] for row in stored)
    for payload in ("<script>alert('xss-script')</script>", "<img src=x onerror", "<svg onload", "gpu<b>01"):
        assert payload in text
    return db


@pytest.fixture(scope="module")
def hclient(hostile_db: Path) -> Iterator[TestClient]:
    with TestClient(create_app(hostile_db, allowed_hosts=["testserver"])) as c:
        yield c


def _hostile_pages() -> list[str]:
    wid = quote(HOSTILE_ID, safe="")
    return ["/", "/workloads", f"/workloads?q={quote(SCRIPT)}", f"/workload?id={wid}",
            f"/nodes/{quote(HOSTILE_NODES[0], safe='')}", f"/nodes/{quote(HOSTILE_NODES[1], safe='')}", "/nodes",
            f"/nodes?q={quote('<b>')}", "/rules", f"/rules?q={quote(SCRIPT)}",
            f"/workloads?node={quote(HOSTILE_NODES[1], safe='')}"]


def _assert_inert(html: str, where: str) -> None:
    for payload in RAW_PAYLOADS:
        assert payload not in html, f"{payload!r} unescaped on {where}"
    scripts = re.findall(r"<script[^>]*>", html)
    assert len(scripts) == 1 and scripts[0].startswith('<script src="/static/app.js'), where


def test_payloads_are_escaped_in_every_page(hclient: TestClient) -> None:
    for path in _hostile_pages():
        r = hclient.get(path)
        assert r.status_code == 200, (path, r.status_code)
        _assert_inert(r.text, path)
    detail = hclient.get("/workload", params={"id": HOSTILE_ID}).text
    # the payloads are shown, as text
    assert "name=&lt;script&gt;alert(&#39;xss-script&#39;)&lt;/script&gt;" in detail      # the root evidence line
    assert "&lt;img src=x onerror=alert(&#39;xss-img&#39;)&gt;" in detail               # name and a log line
    assert "gpu&lt;b&gt;01" in detail                                                        # a node name
    assert f'href="/nodes/{quote(HOSTILE_NODES[0], safe="")}"' in detail                    # links are quoted
    # the sample's own `name=<unknown>` is text too
    assert "name=&lt;unknown&gt;" in hclient.get("/workload", params={"id": "xid79-fallen-off-bus"}).text


def test_payloads_in_filters_and_errors_are_escaped(hclient: TestClient) -> None:
    for path in (f"/workloads?sub_domain={quote(SCRIPT)}", f"/workloads?state={quote(IMG)}",
                 f"/workloads?from={quote(SVG)}", f"/workload?id={quote(SCRIPT)}", f"/nodes/{quote(IMG, safe='')}",
                 f"/no-such-page/{quote(SCRIPT)}"):
        r = hclient.get(path)
        assert r.status_code in (400, 404), path
        _assert_inert(r.text, path)
    assert "&lt;script&gt;" in hclient.get(f"/workloads?sub_domain={quote(SCRIPT)}").text   # echoed, as text
    r = hclient.get(f"/workloads?q={quote(IMG)}")
    _assert_inert(r.text, "search box")
    assert 'value="&#34;&gt;&lt;img src=x onerror=alert(&#39;xss-img&#39;)&gt;"' in r.text


def _count(html: str) -> int:
    return html.count('class="wl"')


def test_sql_injection_through_filters_is_impossible(hclient: TestClient, hostile_db: Path) -> None:
    before = fingerprint(hostile_db)
    everything = _count(hclient.get("/workloads").text)
    assert everything == 6
    # a quote in the search is a literal: only the workload whose job id holds it matches
    assert _count(hclient.get("/workloads", params={"q": SQL}).text) == 1
    assert _count(hclient.get("/workloads", params={"q": "x' OR '1'='1"}).text) == 0
    assert _count(hclient.get("/workloads", params={"node": "x' OR '1'='1"}).text) == 0
    assert _count(hclient.get("/workloads", params={"node": "node-01' --"}).text) == 0
    assert _count(hclient.get("/workloads", params={"node": HOSTILE_NODES[1]}).text) == 1
    # LIKE wildcards are literals too
    assert _count(hclient.get("/workloads", params={"q": "%"}).text) == 0
    assert _count(hclient.get("/workloads", params={"q": "nvlink_walkthrough"}).text) == 0
    for params in ({"sub_domain": "nvlink' OR '1'='1"}, {"outcome": "Pass' OR 1=1 --"},
                   {"sort": "time; DROP TABLE attribution_runs; --"}, {"order": "desc, (SELECT 1)"},
                   {"page": "1 OR 1=1"}, {"per_page": "50; DELETE FROM run_nodes"}):
        assert hclient.get("/workloads", params=params).status_code == 400, params
    assert hclient.get("/nodes/" + quote("node-02' OR '1'='1", safe="")).status_code == 404
    assert hclient.get("/workload", params={"id": "x' OR 1=1 --"}).status_code == 404
    assert fingerprint(hostile_db) == before
    with sqlite3.connect(f"file:{hostile_db}?mode=ro", uri=True) as con:
        assert con.execute("SELECT COUNT(*) FROM attribution_runs").fetchone()[0] == 6


def test_the_connection_is_read_only(hostile_db: Path) -> None:
    results = ResultsDB(hostile_db)
    db = results.connection
    with pytest.raises(sqlite3.OperationalError, match="readonly"):
        db.execute("DELETE FROM attribution_runs")
    # not just `PRAGMA query_only`: the file itself is opened read-only
    db.execute("PRAGMA query_only = OFF")
    with pytest.raises(sqlite3.OperationalError, match="readonly"):
        db.execute("INSERT INTO schema_migrations VALUES (99, 'x', 'y')")
    with pytest.raises(sqlite3.OperationalError, match="readonly"):
        db.execute("CREATE TABLE evil (x)")
    assert db.execute("SELECT COUNT(*) FROM attribution_runs").fetchone()[0] == 6


def test_a_missing_database_is_never_created(tmp_path: Path) -> None:
    missing = tmp_path / "nope.db"
    with pytest.raises(sqlite3.OperationalError):
        connect_readonly(missing)
    with pytest.raises(DatabaseError, match="no such file"):
        check_database(missing)
    with pytest.raises(DatabaseError):
        create_app(missing, allowed_hosts=["testserver"])
    assert not missing.exists() and list(tmp_path.iterdir()) == []


def test_bad_database_files_are_clear_cli_errors(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    (tmp_path / "notes.txt").write_text("this is not a database\n" * 100)
    empty = tmp_path / "empty.db"
    sqlite3.connect(empty).execute("CREATE TABLE t (x)").connection.close()
    (tmp_path / "dir.db").mkdir()
    cases = {"missing.db": "no such file", "notes.txt": "not a SQLite database", "empty.db":
             "not a firstfault results database", "dir.db": "not a file"}
    for name, message in cases.items():
        code = main(["dashboard", "--db", str(tmp_path / name), "--port", "0"])
        err = capsys.readouterr().err
        assert code == 2, name
        assert message in err and "Traceback" not in err, (name, err)
    assert not (tmp_path / "missing.db").exists()


def test_the_dashboard_never_modifies_the_database(hostile_db: Path, tmp_path: Path) -> None:
    """Crawl every page a live dashboard links to (two levels deep) and compare the file before and after."""
    db = tmp_path / "copy.db"
    shutil.copy(hostile_db, db)
    before = fingerprint(db)
    dashboard = Dashboard.start(db, tmp_path)
    try:
        seen: set[str] = set()
        frontier = ["/", "/workloads", "/nodes", "/rules"]
        with httpx.Client(base_url=dashboard.url, timeout=30) as client:
            for _ in range(2):
                found: list[str] = []
                for path in frontier:
                    if path in seen or len(seen) > 150:
                        continue
                    seen.add(path)
                    r = client.get(path)
                    assert r.status_code == 200, (path, r.status_code)
                    if r.headers["content-type"].startswith("text/html"):
                        found += [h.replace("&amp;", "&") for h in re.findall(r'href="(/[^"]*)"', r.text)
                                  if not h.startswith("/static/")]
                frontier = found
            for method in ("POST", "PUT", "DELETE"):
                assert client.request(method, "/workloads").status_code == 405
        assert len(seen) > 20
    finally:
        assert dashboard.stop() == 0, dashboard.log()
    assert fingerprint(db) == before
    assert "Traceback" not in dashboard.log()


def test_no_script_runs_in_the_browser(hostile_db: Path, tmp_path: Path, browser: object) -> None:
    """In Chromium: no dialog fires on any page, the payloads are visible as text, no injected element exists."""
    dashboard = Dashboard.start(hostile_db, tmp_path)
    page = browser.new_page()  # type: ignore[attr-defined]
    dialogs: list[str] = []
    page.on("dialog", lambda dialog: (dialogs.append(dialog.message), dialog.dismiss()))
    try:
        for path in _hostile_pages() + [f"/workloads?sub_domain={quote(SCRIPT)}"]:
            page.goto(urljoin(dashboard.url, path))
            page.wait_for_load_state("load")
            assert page.locator("img[onerror], svg[onload], script:not([src])").count() == 0, path
            assert page.evaluate("document.scripts.length") == 1, path
        page.goto(urljoin(dashboard.url, "/workload?id=" + quote(HOSTILE_ID, safe="")))
        assert page.get_by_text("name=<script>alert('xss-script')</script>", exact=False).first.is_visible()
        assert page.locator("h1").inner_text().startswith("train \"><img src=x onerror=")
        # the workload link on the list leads back to the same workload (an id with / ? & # survives)
        page.goto(urljoin(dashboard.url, "/workloads?q=" + quote(SQL)))
        page.locator("a.wl").first.click()
        page.wait_for_load_state("load")
        assert HOSTILE_ID in page.locator("dl.meta").inner_text()
        page.wait_for_timeout(300)
    finally:
        page.close()
        dashboard.stop()
    assert dialogs == []


def test_a_host_header_outside_the_allowed_names_is_refused(live: Dashboard) -> None:
    """DNS rebinding: a page of another site whose name now resolves to 127.0.0.1 sends its own name as Host; the
    dashboard answers only its loopback names and its bind address (by default; --allowed-hosts changes it)."""
    port = live.url.rsplit(":", 1)[1]
    for host in ("rebind.attacker.example", f"rebind.attacker.example:{port}", "127.0.0.2", "localhost.evil"):
        response = httpx.get(f"{live.url}/", headers={"Host": host})
        assert response.status_code == 400, host
        assert "<script" not in response.text
    for host in (f"localhost:{port}", f"127.0.0.1:{port}", f"[::1]:{port}"):
        assert httpx.get(f"{live.url}/healthz", headers={"Host": host}).status_code == 200, host
