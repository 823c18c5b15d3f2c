"""Idempotent retries over HTTP, and bearer-token auth on and off."""

from __future__ import annotations

import concurrent.futures
import re
from collections.abc import Callable, Iterator
from pathlib import Path

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


def test_a_retry_with_the_same_json_written_differently_is_a_retry(client: httpx.Client,
                                                                   new_session: Callable[..., str]) -> None:
    """The key is bound to the parsed document, not its bytes: other whitespace or key order is the same batch."""
    sid = new_session()
    url = f"/v2/sessions/{sid}/observations"
    compact = b'{"format":"raw_text","node":"node-02","source":"syslog","text":"one\\n"}'
    spaced = b'{ "source": "syslog",\n  "text": "one\\n", "node": "node-02", "format": "raw_text" }\n'
    headers = {"content-type": "application/json", "Idempotency-Key": "ws"}
    first = client.post(url, content=compact, headers=headers)
    retry = client.post(url, content=spaced, headers=headers)
    assert (first.status_code, retry.status_code) == (202, 202), retry.text
    assert retry.json()["replayed"] is True
    other = client.post(url, content=spaced.replace(b"one", b"two"), headers=headers)
    assert other.status_code == 409 and other.json()["error_code"] == "idempotency_key_reused"
    assert client.get(f"/v2/sessions/{sid}").json()["batches"] == 1


# -- exposure: the token fails closed, auth is logged, Host names are checked, no page loads from outside ----------
def test_an_empty_token_is_a_startup_error_not_auth_off(tmp_path: Path) -> None:
    for value in ("", "  "):
        with pytest.raises(RuntimeError, match="FIRSTFAULT_API_TOKEN is set but empty"):
            Server.start(tmp_path, env={"FIRSTFAULT_API_TOKEN": value}).stop()


def test_a_non_loopback_address_without_a_token_is_refused_unless_insecure_is_asked(tmp_path: Path) -> None:
    with pytest.raises(RuntimeError, match="refusing to serve on 0.0.0.0 without a token"):
        Server.start(tmp_path, args=["--host", "0.0.0.0"]).stop()
    server = Server.start(tmp_path, args=["--host", "0.0.0.0", "--insecure-no-auth"])
    try:
        with server.client() as c:
            assert c.post("/v2/sessions", json=sample_context()).status_code == 201
    finally:
        server.stop()
    assert re.search(r'"level": "warning".*auth OFF on 0\.0\.0\.0 \(--insecure-no-auth\)', server.log())


def test_the_startup_log_says_whether_auth_is_on(server: Server, secured: Server) -> None:
    assert re.search(r'"level": "warning".*auth OFF: no FIRSTFAULT_API_TOKEN', server.log())
    assert '"auth": true' in secured.log() and "auth ON" in secured.log() and TOKEN not in secured.log()


def test_a_host_header_outside_the_allowed_names_is_refused(server: Server, tmp_path: Path) -> None:
    port = server.url.rsplit(":", 1)[1]
    with server.client() as c:
        for host in ("rebind.attacker.example", f"rebind.attacker.example:{port}", "127.0.0.2", "localhost.evil"):
            for method, path in (("GET", "/v2/healthz"), ("POST", "/v2/sessions")):
                response = c.request(method, path, json=sample_context(), headers={"Host": host})
                assert response.status_code == 400, (host, path)
                assert response.json()["error_code"] == "untrusted_host"
        for host in ("localhost", f"localhost:{port}", f"127.0.0.1:{port}", f"[::1]:{port}"):
            assert c.get("/v2/healthz", headers={"Host": host}).status_code == 200, host
    named = Server.start(tmp_path, env={"FIRSTFAULT_ALLOWED_HOSTS": "firstfault.example, *.gpu.example, 127.0.0.1"})
    try:
        with named.client() as c:
            for host, status in (("firstfault.example", 200), ("a.gpu.example:8000", 200), ("localhost", 400),
                                 ("gpu.example.evil", 400)):
                assert c.get("/v2/healthz", headers={"Host": host}).status_code == status, host
    finally:
        named.stop()


def test_no_page_loads_anything_from_outside(client: httpx.Client) -> None:
    """FastAPI's /docs and /redoc load Swagger UI and ReDoc from a CDN and no Python package installed ships
    them: both are off, and the OpenAPI document is still served."""
    assert client.get("/docs").status_code == 404
    assert client.get("/redoc").status_code == 404
    assert client.get("/openapi.json").json()["info"]["title"]
