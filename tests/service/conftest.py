from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path

import httpx
import pytest

from tests.service.live_server import TEST_LIMITS, Server, sample_context


@pytest.fixture(scope="session")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    srv = Server.start(tmp_path_factory.mktemp("server"), env=TEST_LIMITS)
    yield srv
    srv.stop()


@pytest.fixture
def client(server: Server) -> Iterator[httpx.Client]:
    with server.client() as c:
        yield c


@pytest.fixture
def new_session(client: httpx.Client) -> Callable[..., str]:
    """Create a session for the sample workload (or the given context) and return its id."""

    def make(context: dict | None = None) -> str:
        response = client.post("/v2/sessions", json=context or sample_context())
        assert response.status_code == 201, response.text
        assert response.json()["revision"] == 0
        return str(response.json()["session_id"])

    return make


@pytest.fixture
def tmp(tmp_path: Path) -> Path:
    return tmp_path
