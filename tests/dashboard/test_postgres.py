"""The dashboard over PostgreSQL (tests/support/setup-postgres.sh): the same results copied from the SQLite
databases the real Blueprint wrote give the same pages, byte for byte, through the reader role; the session is
read-only; `firstfault dashboard --db postgresql://...` serves it live and follows new runs; bad DSNs are clear
errors."""

from __future__ import annotations

import re
import time
import warnings
from collections.abc import Iterator
from datetime import UTC, date, datetime, timedelta
from pathlib import Path
from urllib.parse import quote

import httpx
import pytest

from firstfault.cli import main
from firstfault.dashboard.app import create_app
from firstfault.dashboard.db import ResultsDB, WorkloadFilters
from firstfault.samples import sample_dirs
from tests.dashboard.helpers import HOSTILE_ID, Dashboard
from tests.support.postgres import copy_results, query, reader_dsn, scratch_database, writer_dsn

with warnings.catch_warnings():
    warnings.simplefilter("ignore")
    from fastapi.testclient import TestClient

# what a crawl starts from, besides every link it finds: filters, each sort both ways, case-insensitive search
# (SQLite's LIKE; ILIKE on PostgreSQL), time ranges, paging
EXTRA_PAGES = [
    "/?range=24h", "/?range=30d", "/?range=all", "/workloads?failed=1", "/workloads?q=XID", "/workloads?q=node-0",
    "/workloads?q=100%25", "/workloads?outcome=not%20attributed", "/workloads?per_page=25&page=2",
    "/workloads?sub_domain=gpu&terminal_state=FAILED", "/workloads?node=gpu-a03&role=culprit",
    "/workloads?since=2026-02-01&until=2026-03-01", "/nodes?q=GPU", "/rules",
    *[f"/workloads?sort={s}&order={o}" for s in ("time", "workload", "state", "outcome", "sub_domain", "attributed")
      for o in ("asc", "desc")],
]


@pytest.fixture(scope="module")
def pg_copies(sample_db: Path, fleet_db: Path, hostile_db: Path) -> Iterator[dict[Path, str]]:
    """Each SQLite database's rows in a PostgreSQL database of its own: SQLite file -> the reader's DSN."""
    copies: dict[Path, str] = {}
    with scratch_database("samples") as samples, scratch_database("fleet") as fleet, \
            scratch_database("hostile") as hostile:
        for path, name in ((sample_db, samples), (fleet_db, fleet), (hostile_db, hostile)):
            copy_results(path, writer_dsn(name))
            copies[path] = reader_dsn(name)
        yield copies


@pytest.fixture(scope="module")
def hostile_db(tmp_path_factory: pytest.TempPathFactory) -> Path:
    from tests.dashboard.helpers import blueprint_into, hostile_workload

    root = tmp_path_factory.mktemp("hostile")
    db = root / "hostile.db"
    blueprint_into(db, hostile_workload(root / "w"))
    return db


def _timeless(html: str) -> str:
    """The page without the times of the last 100 days, to the second: a relative range (`from=90d`) starts at
    the moment of the request, which the two requests do not share (the results' own times are months older)."""
    recent = datetime.now(UTC).date() - timedelta(days=100)

    def mask(m: re.Match[str]) -> str:
        return "(recent)" if date.fromisoformat(m[1]) >= recent else m[0]

    return re.sub(r"(\d{4}-\d\d-\d\d)[T ]\d\d:\d\d(:\d\d)?Z?", mask, html)


def _links(html: str) -> list[str]:
    return [h.replace("&amp;", "&") for h in re.findall(r'href="(/[^"]*)"', html) if not h.startswith("/static/")]


@pytest.mark.parametrize("which", ["sample_db", "fleet_db", "hostile_db"])
def test_every_page_is_the_same_on_postgres(which: str, request: pytest.FixtureRequest,
                                            pg_copies: dict[Path, str]) -> None:
    """Crawl two levels of links (and EXTRA_PAGES) on the SQLite dashboard; the PostgreSQL one answers every page
    with the same status and the same HTML, but for the database's name."""
    path: Path = request.getfixturevalue(which)
    dsn = pg_copies[path]
    with TestClient(create_app(path, allowed_hosts=["testserver"])) as lite, \
            TestClient(create_app(dsn, allowed_hosts=["testserver"])) as pg:
        shown = pg.app.state.results.name   # type: ignore[attr-defined]
        assert "firstfault_reader" in shown and "firstfault_reader@" in shown and ":firstfault_reader" not in shown
        frontier, seen = ["/", "/workloads", "/nodes", *EXTRA_PAGES], set()
        if which == "hostile_db":
            frontier.append("/workload?id=" + quote(HOSTILE_ID, safe=""))
        for _ in range(2):
            found: list[str] = []
            for page in frontier:
                if page in seen or len(seen) > 120:
                    continue
                seen.add(page)
                expected, got = lite.get(page), pg.get(page)
                assert got.status_code == expected.status_code, page
                text = got.text.replace(shown, str(path)).replace(shown.rsplit("/", 1)[1], path.name)
                assert _timeless(text) == _timeless(expected.text), page
                found += _links(expected.text)
            frontier = found
    assert len(seen) > 40


def test_the_postgres_session_is_read_only(pg_copies: dict[Path, str], sample_db: Path) -> None:
    """The reader role may not write; neither may the dashboard's session with a role that could."""
    import psycopg

    reader = pg_copies[sample_db]
    writer = reader.replace("firstfault_reader:firstfault_reader@", "firstfault:firstfault@")
    for dsn in (reader, writer):
        db = ResultsDB(dsn).connection
        for statement in ("DELETE FROM attribution_runs", "INSERT INTO schema_migrations VALUES (99, 'x', 'y')",
                          "CREATE TABLE evil (x INTEGER)"):
            with pytest.raises(psycopg.errors.ReadOnlySqlTransaction):
                db.execute(statement)
        assert db.execute("SELECT COUNT(*) FROM attribution_runs").fetchone()[0] == 5
    assert query(writer, "SELECT COUNT(*) FROM attribution_runs") == [(5,)]


def test_the_live_dashboard_follows_the_blueprint_on_postgres(tmp_path: Path) -> None:
    """`firstfault dashboard --db postgresql://...` while `firstfault blueprint` writes into the same database."""
    samples = sample_dirs()
    with scratch_database("live") as name:
        def blueprint(sample: str) -> None:
            assert main(["blueprint", "--no-progress", "--quiet", "--configs", str(samples[sample]),
                         "--connector", "output", "db", "postgres", "dsn", writer_dsn(name)]) == 0

        blueprint("nvlink-walkthrough")
        dashboard = Dashboard.start(reader_dsn(name), tmp_path)   # type: ignore[arg-type]
        try:
            with httpx.Client(base_url=dashboard.url, timeout=30) as client:
                assert ">1</span><span class=\"l\">workload attempts" in client.get("/").text
                blueprint("xid79-fallen-off-bus")
                assert ">2</span><span class=\"l\">workload attempts" in client.get("/").text
                assert ">xid79-fallen-off-bus<" in client.get("/workloads").text
                assert client.get("/nodes/gpu-a03").status_code == 200
        finally:
            assert dashboard.stop() == 0, dashboard.log()
        assert "Traceback" not in dashboard.log()
        assert "firstfault_reader:" not in dashboard.log()


def test_bad_postgres_targets_are_clear_cli_errors(capsys: pytest.CaptureFixture[str]) -> None:
    with scratch_database("empty") as empty:
        cases = {
            "postgresql://firstfault:wrong-secret@127.0.0.1:15432/firstfault": "password authentication failed",
            "postgresql://firstfault:wrong-secret@127.0.0.1:1/firstfault": "cannot connect",
            f"postgresql://firstfault:firstfault@127.0.0.1:15432/{empty}": "not a firstfault results database",
        }
        for dsn, message in cases.items():
            code = main(["dashboard", "--db", dsn, "--port", "0"])
            err = capsys.readouterr().err
            assert code == 2, dsn
            assert message in err and "Traceback" not in err and "secret" not in err, (dsn, err)


def test_the_dashboard_outlives_its_connections(pg_copies: dict[Path, str], sample_db: Path) -> None:
    """The server ends the dashboard's connections (a restart, a failover): the next pages open new ones."""
    dsn = pg_copies[sample_db]
    writer = dsn.replace("firstfault_reader:firstfault_reader@", "firstfault:firstfault@")
    with TestClient(create_app(dsn, allowed_hosts=["testserver"])) as client:
        assert client.get("/workloads").status_code == 200
        _end_reader_connections(writer)
        for page in ("/workloads", "/", "/nodes", "/workload?id=nvlink-walkthrough"):
            assert client.get(page).status_code == 200, page


def test_a_connection_ended_during_a_read_is_replaced(pg_copies: dict[Path, str], sample_db: Path,
                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    """The server's goodbye arrives after the connection was checked and before the page's queries (here: the check
    is made blind to it): the read fails once on the ended connection and is run again on a new one."""
    dsn = pg_copies[sample_db]
    db = ResultsDB(dsn)
    first = db.workloads(WorkloadFilters())
    old = db.connection
    _end_reader_connections(dsn.replace("firstfault_reader:firstfault_reader@", "firstfault:firstfault@"))
    monkeypatch.setattr("select.select", lambda *args: ([], [], []))  # Database.broken()'s look for the goodbye
    assert db.workloads(WorkloadFilters()) == first
    assert db.connection is not old and old.raw.closed


def _end_reader_connections(writer: str) -> None:
    """End every connection of the dashboard's reader role (as a restart or a failover would) and wait until their
    backends have exited: pg_terminate_backend only signals them."""
    assert query(writer, "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE datname = current_database() "
                         "AND usename = 'firstfault_reader'")
    deadline = time.monotonic() + 10
    while query(writer, "SELECT COUNT(*) FROM pg_stat_activity WHERE datname = current_database() AND "
                        "usename = 'firstfault_reader'") != [(0,)]:
        assert time.monotonic() < deadline, "the terminated backends did not exit"
        time.sleep(0.05)
