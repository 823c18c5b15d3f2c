"""Limits and bad input: every refusal is a JSON {error_code, message} with a 4xx status, never a 500."""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from pathlib import Path

import httpx
import pytest

from tests.service.live_server import TEST_LIMITS, Server

CONTEXT = {"workload_id": "limits", "nodes": ["gpu-1"], "end_time": "2026-03-02T09:00:00Z"}
XID = "Mar  2 08:10:01 gpu-1 kernel: NVRM: Xid (PCI:0000:91:00): 79, pid=1, name=python, GPU has fallen off the bus."
MAX_REQUEST = int(TEST_LIMITS["FIRSTFAULT_MAX_REQUEST_BYTES"])
MAX_LINE = int(TEST_LIMITS["FIRSTFAULT_MAX_LINE_BYTES"])


def text_batch(text: str) -> dict:
    return {"format": "raw_text", "node": "gpu-1", "source": "syslog", "text": text}


def assert_error(response: httpx.Response, status: int, code: str | None = None) -> dict:
    assert response.status_code == status, response.text
    assert response.headers["content-type"].startswith("application/json")
    body = response.json()
    assert set(body) == {"error_code", "message"} and body["message"]
    if code:
        assert body["error_code"] == code
    return dict(body)


def root_evidence_text(client: httpx.Client, sid: str) -> str:
    result = client.post(f"/v2/sessions/{sid}/attribute").json()["result"]
    return str(result["root_cause"]["evidence"][0]["text"])


def test_request_size_cap(client: httpx.Client, new_session: Callable[..., str]) -> None:
    sid = new_session(CONTEXT)
    over = text_batch("x" * MAX_REQUEST)
    assert_error(client.post(f"/v2/sessions/{sid}/observations", json=over), 413, "request_too_large")
    way_over = b"{" + b" " * (MAX_REQUEST * 5) + b"}"
    response = client.post(f"/v2/sessions/{sid}/observations", content=way_over,
                           headers={"content-type": "application/json"})
    assert_error(response, 413, "request_too_large")
    assert client.get(f"/v2/sessions/{sid}").json()["observations"] == 0


def test_session_observation_cap_refuses_the_whole_batch(client: httpx.Client,
                                                         new_session: Callable[..., str]) -> None:
    cap = int(TEST_LIMITS["FIRSTFAULT_MAX_SESSION_OBSERVATIONS"])
    sid = new_session(CONTEXT)
    assert client.post(f"/v2/sessions/{sid}/observations", json=text_batch("a\n" * (cap - 10))).status_code == 202
    assert_error(client.post(f"/v2/sessions/{sid}/observations", json=text_batch("b\n" * 11)), 413,
                 "session_observation_limit")
    assert client.post(f"/v2/sessions/{sid}/observations", json=text_batch("c\n" * 10)).status_code == 202
    assert client.get(f"/v2/sessions/{sid}").json()["observations"] == cap


def test_session_byte_cap(client: httpx.Client, new_session: Callable[..., str]) -> None:
    cap = int(TEST_LIMITS["FIRSTFAULT_MAX_SESSION_BYTES"])
    sid = new_session(CONTEXT)
    line = "y" * 999 + "\n"  # 1000 bytes with its newline
    first = client.post(f"/v2/sessions/{sid}/observations", json=text_batch(line * (cap // 1000)))
    assert first.status_code == 202 and first.json()["bytes_total"] == cap // 1000 * 1000
    assert_error(client.post(f"/v2/sessions/{sid}/observations", json=text_batch(line)), 413, "session_byte_limit")


def test_long_lines_are_truncated_with_a_marker_not_dropped(client: httpx.Client,
                                                            new_session: Callable[..., str]) -> None:
    sid = new_session(CONTEXT)
    long_line = XID + " " + "é" * (MAX_LINE * 3)
    ack = client.post(f"/v2/sessions/{sid}/observations", json=text_batch(f"short\n{long_line}\n")).json()
    assert ack["accepted"] == 2 and ack["truncated_lines"] == 1
    text = root_evidence_text(client, sid)
    assert text.startswith(XID) and "line truncated" in text
    assert len(text.split(" …[line truncated")[0].encode()) <= MAX_LINE
    assert client.get(f"/v2/sessions/{sid}").json()["truncated_lines"] == 1


def test_invalid_utf8_is_replaced(client: httpx.Client, new_session: Callable[..., str]) -> None:
    sid = new_session(CONTEXT)
    raw = json.dumps(text_batch(XID + " BAD")).encode().replace(b"BAD", b"\xff\xfe\xc3")
    response = client.post(f"/v2/sessions/{sid}/observations", content=raw,
                           headers={"content-type": "application/json"})
    assert response.status_code == 202, response.text
    assert root_evidence_text(client, sid).endswith("\ufffd" * 3)


def test_lone_surrogate_escapes_are_replaced(client: httpx.Client, new_session: Callable[..., str]) -> None:
    sid = new_session(CONTEXT)
    raw = json.dumps(text_batch(XID + " BAD")).replace("BAD", "\\ud800 \\udfff").encode()
    response = client.post(f"/v2/sessions/{sid}/observations", content=raw,
                           headers={"content-type": "application/json"})
    assert response.status_code == 202, response.text
    assert "\ufffd" in root_evidence_text(client, sid)
    assert client.get(f"/v2/sessions/{sid}").status_code == 200


@pytest.mark.parametrize("body", [b"{", b"not json", b'{"format": NaN}', b"[" * 100_000 + b"]" * 100_000,
                                  b'{"first_line": ' + b"9" * 10_000 + b"}", b""])
def test_malformed_json(client: httpx.Client, new_session: Callable[..., str], body: bytes) -> None:
    sid = new_session(CONTEXT)
    response = client.post(f"/v2/sessions/{sid}/observations", content=body,
                           headers={"content-type": "application/json"})
    assert response.status_code in (400, 422), response.text
    assert_error(response, response.status_code)


@pytest.mark.parametrize("batch", [
    {"format": "raw_text", "source": "syslog", "text": 5},
    {"format": "raw_text", "source": "tape", "text": "x"},
    {"format": "raw_text", "source": "syslog", "text": "x", "first_line": 0},
    {"format": "raw_text", "source": "syslog", "text": "x", "node": ""},
    {"format": "telepathy"},
    {"source": "syslog", "text": "x"},
    {"format": "observations", "observations": [{"source": "syslog", "line": "x"}]},
    {"format": "observations", "observations": [{"source": "syslog", "line": "x", "provenance": {"origin": "o"},
                                                 "observed_at": "0001-01-01T00:00:00+05:00"}]},
    [1, 2, 3],
])
def test_wrong_shapes_and_types(client: httpx.Client, new_session: Callable[..., str], batch: object) -> None:
    sid = new_session(CONTEXT)
    assert_error(client.post(f"/v2/sessions/{sid}/observations", json=batch), 422, "invalid_request")


@pytest.mark.parametrize("context", [
    {}, {"workload_id": ""}, {"workload_id": "w", "nodes": [""]}, {"workload_id": "w", "attempt": -1},
    {"workload_id": "w", "start_time": "0001-01-01T00:00:00+05:00"},
    {"workload_id": "w", "end_time": "9999-12-31T23:59:59-05:00"},
    {"workload_id": "w", "scheduler": "pbs"}, {"workload_id": "w", "surprise": 1},
    {"workload_id": "w", "end_time": 0}, {"workload_id": "w", "attempt": True}, {"workload_id": "w", "attempt": "1"},
    {"workload_id": 5},
])
def test_invalid_contexts(client: httpx.Client, context: dict) -> None:
    assert_error(client.post("/v2/sessions", json=context), 422, "invalid_request")


def test_content_type_must_be_json(client: httpx.Client) -> None:
    body = json.dumps(CONTEXT)
    assert_error(client.post("/v2/sessions", content=body, headers={"content-type": "text/plain"}), 415,
                 "unsupported_media_type")
    assert_error(client.post("/v2/sessions", content=body), 415, "unsupported_media_type")


def test_unknown_sessions_routes_and_methods(client: httpx.Client) -> None:
    for method, path, body in [("GET", "/v2/sessions/nope", None), ("DELETE", "/v2/sessions/nope", None),
                               ("POST", "/v2/sessions/nope/attribute", None),
                               ("POST", "/v2/sessions/nope/observations", text_batch("x"))]:
        assert_error(client.request(method, path, json=body), 404, "session_not_found")
    assert_error(client.get("/v3/anything"), 404, "not_found")
    assert_error(client.put("/v2/rules"), 405, "method_not_allowed")
    assert_error(client.post("/v2/rules", json={"extractor": []}), 405, "method_not_allowed")


def test_a_405_names_the_methods_the_path_allows(client: httpx.Client, new_session: Callable[..., str]) -> None:
    sid = new_session(CONTEXT)
    for method, path, allowed in (("PUT", "/v2/sessions", "POST"), ("GET", "/v2/sessions", "POST"),
                                  ("POST", "/v2/healthz", "GET"), ("PUT", f"/v2/sessions/{sid}", "DELETE, GET"),
                                  ("PATCH", f"/latest/attributor/{sid}/observation", "POST"),
                                  ("DELETE", "/metrics", "GET")):
        response = client.request(method, path)
        assert_error(response, 405, "method_not_allowed")
        assert response.headers["allow"] == allowed, (method, path)


@pytest.mark.parametrize("depth", [500, 900, 990, 1000, 1100, 5000])
def test_deeply_nested_bodies_get_a_4xx(client: httpx.Client, new_session: Callable[..., str], depth: int) -> None:
    sid = new_session(CONTEXT)
    attributor = client.post("/latest/attributor", json={"workload": {"id": "deep"}}).json()["attributor_id"]
    for deep in ("[" * depth + "]" * depth, '{"a":' * depth + "1" + "}" * depth):
        for path, body in ((f"/latest/attributor/{attributor}/observation",
                            '{"context": {"source": "syslog", "format": "raw_loki_streams"}, "body": %s}'),
                           (f"/latest/attributor/{attributor}/observation",
                            '{"context": {"source": "syslog", "format": "prometheus_metrics"}, "body": %s}'),
                           ("/latest/attributor", '{"workload": %s}'),
                           (f"/v2/sessions/{sid}/observations", '{"format": "observations", "observations": %s}'),
                           ("/v2/sessions", '{"workload_id": "w", "metadata": %s}')):
            response = client.post(path, content=body % deep, headers={"content-type": "application/json"})
            assert 400 <= response.status_code < 500, (path, response.text)
        as_string = {"context": {"source": "syslog", "format": "raw_loki_streams"}, "body": deep}
        response = client.post(f"/latest/attributor/{attributor}/observation", json=as_string)
        assert 400 <= response.status_code < 500


def test_session_ttl(tmp_path: Path) -> None:
    srv = Server.start(tmp_path, env={"FIRSTFAULT_SESSION_TTL_S": "1"})
    try:
        with srv.client() as c:
            sid = c.post("/v2/sessions", json=CONTEXT).json()["session_id"]
            kept = c.post("/v2/sessions", json=CONTEXT).json()["session_id"]
            for _ in range(6):  # activity keeps a session alive
                time.sleep(0.4)
                assert c.get(f"/v2/sessions/{kept}").status_code == 200
            body = assert_error(c.get(f"/v2/sessions/{sid}"), 404, "session_not_found")
            assert "expired" in body["message"]
    finally:
        srv.stop()


def test_live_session_cap_evicts_the_oldest_idle_never_an_active_one(tmp_path: Path) -> None:
    srv = Server.start(tmp_path, env={"FIRSTFAULT_MAX_SESSIONS": "2", "FIRSTFAULT_SESSION_MIN_IDLE_S": "1"})
    try:
        with srv.client() as c:
            first = c.post("/v2/sessions", json=CONTEXT).json()["session_id"]
            second = c.post("/v2/sessions", json=CONTEXT).json()["session_id"]
            refused = c.post("/v2/sessions", json=CONTEXT)
            assert_error(refused, 429, "too_many_sessions")
            assert refused.headers["retry-after"] == "1"
            assert c.get("/v2/readyz").status_code == 503
            time.sleep(1.5)
            assert c.get(f"/v2/sessions/{second}").status_code == 200  # second is active again
            assert c.get("/v2/readyz").status_code == 200
            third = c.post("/v2/sessions", json=CONTEXT)
            assert third.status_code == 201
            assert "evicted" in assert_error(c.get(f"/v2/sessions/{first}"), 404)["message"]
            assert c.get(f"/v2/sessions/{second}").status_code == 200
            metrics = c.get("/metrics").text
            assert 'firstfault_sessions_removed_total{reason="evicted"} 1.0' in metrics
    finally:
        srv.stop()
