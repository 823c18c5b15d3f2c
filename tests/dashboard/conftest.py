"""Fixtures: databases written by the real Blueprint, the dashboard app, a live dashboard, Chromium."""

from __future__ import annotations

import warnings
from collections.abc import Iterator
from pathlib import Path

import pytest

from firstfault.dashboard.app import create_app
from tests.dashboard.fleet import build_fleet
from tests.dashboard.helpers import CHROMIUM, CHROMIUM_ARGS, Dashboard, samples_db

with warnings.catch_warnings():
    warnings.simplefilter("ignore")
    from fastapi.testclient import TestClient


@pytest.fixture(scope="session")
def sample_db(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The bundled samples, attributed by the real Blueprint into SQLite."""
    return samples_db(tmp_path_factory.mktemp("samples") / "results.db")


@pytest.fixture(scope="session")
def fleet_db(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A small fleet's results (tests/dashboard/fleet.py), attributed by the real Blueprint into SQLite."""
    return build_fleet(tmp_path_factory.mktemp("fleet"))


@pytest.fixture(scope="session")
def client(sample_db: Path) -> Iterator[TestClient]:
    with TestClient(create_app(sample_db, allowed_hosts=["testserver"])) as c:
        yield c


@pytest.fixture(scope="session")
def live(sample_db: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Dashboard]:
    dashboard = Dashboard.start(sample_db, tmp_path_factory.mktemp("live"))
    yield dashboard
    dashboard.stop()


@pytest.fixture(scope="module")
def browser() -> Iterator[object]:
    """Debian's Chromium driven by Playwright; fails (never skips) when it is missing."""
    if not CHROMIUM.exists():
        pytest.fail(f"{CHROMIUM} is missing: run tests/support/setup-chromium.sh as root")
    from playwright.sync_api import sync_playwright

    with sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=str(CHROMIUM), args=CHROMIUM_ARGS)
        yield browser
        browser.close()
