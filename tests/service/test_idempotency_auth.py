"""Idempotent retries over HTTP, and bearer-token auth on and off."""

from __future__ import annotations

import concurrent.futures
from collections.abc import Callable, Iterator

import httpx
import pytest

from tests.service.live_server import Server, raw_text_batch, sample_context

TOKEN = "s3cret-token"


def test_retry_with_the_same_key_is_ingested_once(client: httpx.Client, new_session: Callable[..., str]) -> None:
    sid = new_session()
    batch = raw_text_batch("node-02", "syslog", "line one\nline two\n")
    url = f"/v2/sessions/{sid}/observations"
    first = client.post(url, json=batch, headers={"Idempotency-Key": "batch-1"})
    retry = client.post(url, json=batch, headers={"Idempotency-Key": "batch-1"})
    assert first.status_code == retry.status_code == 202
    assert first.json()["replayed"] is False and retry.json()["replayed"] is True
    assert {**first.json(), "replayed": True} == retry.json()
    state = client.get(f"/v2/sessions/{sid}").json()
    assert (state["observations"], state["batches"]) == (2, 1)

    other = client.post(url, json={**batch, "text": "different\n"}, headers={"Idempotency-Key": "batch-1"})
    assert other.status_code == 409 and other.json()["error_code"] == "idempotency_key_reused"
    assert client.post(url, json=batch).json()["replayed"] is False  # no key: ingested again
    assert client.get(f"/v2/sessions/{sid}").json()["observations"] == 4


def test_concurrent_retries_ingest_once(server: Server, new_session: Callable[..., str]) -> None:
    sid = new_session()
    batch = raw_text_batch("node-01", "applog", "x\n" * 5000)

    def send(_: int) -> dict:
        with server.client() as c:
            r = c.post(f"/v2/sessions/{sid}/observations", json=batch, headers={"Idempotency-Key": "same"})
            assert r.status_code == 202
            return dict(r.json())

    with concurrent.futures.ThreadPoolExecutor(4) as pool:
        answers = list(pool.map(send, range(8)))
    assert sum(not a["replayed"] for a in answers) == 1
    with server.client() as c:
        assert c.get(f"/v2/sessions/{sid}").json()["observations"] == 5000


def test_failed_batch_releases_its_key(client: httpx.Client, new_session: Callable[..., str]) -> None:
    sid = new_session()
    url = f"/v2/sessions/{sid}/observations"
    too_many = raw_text_batch("node-01", "applog", "x\n" * 20_001)
    assert client.post(url, json=too_many, headers={"Idempotency-Key": "k"}).status_code == 413
    small = raw_text_batch("node-01", "applog", "x\n" * 10)
    fixed = client.post(url, json=small, headers={"Idempotency-Key": "k"})
    assert fixed.status_code == 202 and fixed.json()["replayed"] is False


@pytest.fixture(scope="module")
def secured(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    srv = Server.start(tmp_path_factory.mktemp("auth"), env={"FIRSTFAULT_API_TOKEN": TOKEN})
    yield srv
    srv.stop()


def test_token_required_on_every_write_endpoint(secured: Server) -> None:
    good = {"Authorization": f"Bearer {TOKEN}"}
    with secured.client() as c:
        sid = c.post("/v2/sessions", json=sample_context(), headers=good).json()["session_id"]
        attributor = c.post("/latest/attributor", json={"workload": {"id": "j"}}, headers=good).json()["attributor_id"]
        writes = [("POST", "/v2/sessions", sample_context()),
                  ("POST", f"/v2/sessions/{sid}/observations", raw_text_batch("node-01", "syslog", "x")),
                  ("POST", f"/v2/sessions/{sid}/attribute", None), ("DELETE", f"/v2/sessions/{sid}", None),
                  ("POST", "/latest/attributor", {"workload": {"id": "j"}}),
                  ("POST", f"/latest/attributor/{attributor}/observation",
                   {"context": {"source": "syslog", "format": "raw_loki_streams"}, "body": "[]"})]
        for method, path, body in writes:
            for headers in ({}, {"Authorization": "Bearer wrong"}, {"Authorization": f"Basic {TOKEN}"}):
                response = c.request(method, path, json=body, headers=headers)
                assert response.status_code == 401, (method, path, headers)
                assert response.json()["error_code"] == "unauthorized"
                assert response.headers["www-authenticate"] == "Bearer"
        for method, path, body in writes:
            assert c.request(method, path, json=body, headers=good).status_code in (200, 201, 202, 204)
        assert c.get("/v2/healthz").status_code == 200  # reads stay open
        assert c.get("/v2/rules").status_code == 200
        assert c.get(f"/latest/attributor/{attributor}/attribution").status_code == 200
        schemes = c.get("/openapi.json").json()["components"]["securitySchemes"]
        assert [s["scheme"] for s in schemes.values()] == ["bearer"]


def test_no_token_configured_means_no_auth(client: httpx.Client) -> None:
    assert client.post("/v2/sessions", json=sample_context()).status_code == 201
    assert "securitySchemes" not in client.get("/openapi.json").json().get("components", {})
