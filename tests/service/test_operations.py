"""Operations: metrics, JSON logs with W3C trace context, graceful shutdown, start-up catalog check, the
read-only rules endpoint, OpenAPI, loopback default, and no reading of client-named files."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import httpx

from tests.service.live_server import Server, free_port, raw_text_batch, sample_files

ROOT = Path(__file__).resolve().parents[2]  # the scripts run as tests.service.scripts.NAME from here
TRACE_ID = "4bf92f3577b34da6a3ce929d0e0e4736"
PARENT_ID = "00f067aa0ba902b7"


def log_records(server: Server) -> list[dict]:
    return [json.loads(line) for line in server.log().splitlines() if line.startswith("{")]


def test_metrics(client: httpx.Client, new_session: Callable[..., str]) -> None:
    sid = new_session()
    for node, source, text in sample_files():
        client.post(f"/v2/sessions/{sid}/observations", json=raw_text_batch(node, source, text))
    client.post(f"/v2/sessions/{sid}/attribute")
    response = client.get("/metrics")
    assert response.status_code == 200 and response.headers["content-type"].startswith("text/plain")
    text = response.text
    for needle in [('firstfault_http_requests_total{method="POST",route="/v2/sessions/{session_id}/observations",'
                    'status="202"}'), "firstfault_http_request_duration_seconds_bucket", "firstfault_sessions_live ",
                   "firstfault_sessions_created_total ", 'firstfault_observations_total{format="raw_text"}',
                   "firstfault_ingest_bytes_total ", 'firstfault_attributions_total{outcome="Fail InfraHW"}',
                   "firstfault_attribute_duration_seconds_count ", "firstfault_rule_firings_total{rule=",
                   "firstfault_catalog_info{content_hash=\"sha256:"]:
        assert needle in text, needle
    live = re.search(r"^firstfault_sessions_live (\S+)$", text, re.MULTILINE)
    assert live and float(live.group(1)) >= 1


def test_json_logs_carry_the_callers_trace(server: Server, client: httpx.Client) -> None:
    response = client.get("/v2/healthz", headers={"traceparent": f"00-{TRACE_ID}-{PARENT_ID}-01"})
    assert response.status_code == 200
    version, trace_id, span_id, flags = response.headers["traceparent"].split("-")
    assert (version, trace_id, flags) == ("00", TRACE_ID, "01") and span_id != PARENT_ID
    deadline = time.monotonic() + 5
    while time.monotonic() < deadline:
        mine = [r for r in log_records(server) if r.get("trace_id") == TRACE_ID]
        if mine:
            break
        time.sleep(0.05)
    assert mine[0]["span_id"] == span_id and mine[0]["path"] == "/v2/healthz" and mine[0]["status"] == 200
    assert {"time", "level", "logger", "message", "duration_ms"} <= set(mine[0])
    fresh = client.get("/v2/healthz", headers={"traceparent": "garbage"}).headers["traceparent"]
    assert re.fullmatch(r"00-[0-9a-f]{32}-[0-9a-f]{16}-01", fresh) and TRACE_ID not in fresh


def test_graceful_shutdown_finishes_in_flight_requests(tmp_path: Path) -> None:
    srv = Server.start(tmp_path)
    with srv.client() as c:
        sid = c.post("/v2/sessions", json={"workload_id": "drain", "nodes": ["n"]}).json()["session_id"]
    head = b'{"format": "raw_text", "node": "n", "source": "applog", "text": "'
    sent_first_part = threading.Event()

    def slow_body() -> Iterator[bytes]:
        yield head
        sent_first_part.set()
        time.sleep(1.0)  # the server gets SIGTERM while this request is in flight
        yield b"line\\n" * 1000 + b'"}'

    outcome: dict[str, object] = {}

    def send() -> None:
        with httpx.Client(base_url=srv.url, timeout=30) as c:
            outcome["response"] = c.post(f"/v2/sessions/{sid}/observations", content=slow_body(),
                                         headers={"content-type": "application/json"})

    sender = threading.Thread(target=send)
    sender.start()
    assert sent_first_part.wait(10)
    time.sleep(0.3)
    code = srv.stop()
    sender.join(30)
    response = outcome["response"]
    assert isinstance(response, httpx.Response)
    assert response.status_code == 202 and response.json()["accepted"] == 1000
    assert code == 0
    assert any(r.get("message") == "stopped" for r in log_records(srv))


def test_broken_catalog_stops_start_up(tmp_path: Path) -> None:
    """A rule whose inline case fails: the process exits non-zero naming the rule and never serves."""
    port = free_port()
    broken = (b'[[extractor]]\nname = "BrokenServiceProbe"\ndoc = "test"\nmatch_re = "probe (?P<n>\\\\d+)"\n'
              b'emit = { type = "bad_node", symptom = "probe" }\n'
              b'[[extractor.cases]]\nexpect = "bad"\nline = "no match here"\nsymptom = "probe"\n'
              b'[[extractor.cases]]\nexpect = "none"\nline = "nothing"\n')
    rules = tmp_path / "broken.toml"
    rules.write_bytes(broken)
    result = subprocess.run([sys.executable, "-m", "tests.service.scripts.serve_broken", str(rules), "--port", str(port)],
                            capture_output=True, text=True, timeout=60, cwd=ROOT, check=False)
    assert result.returncode != 0
    assert "BrokenServiceProbe" in result.stderr
    try:
        httpx.get(f"http://127.0.0.1:{port}/v2/healthz", timeout=1)
        raise AssertionError("something answers on the port")
    except httpx.TransportError:
        pass


def test_an_unknown_http_parser_stops_start_up() -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith("FIRSTFAULT_")}
    result = subprocess.run([sys.executable, "-m", "firstfault", "serve", "--port", str(free_port())], cwd=ROOT,
                            env={**env, "FIRSTFAULT_HTTP_PARSER": "zttp"}, capture_output=True, text=True, timeout=60,
                            check=False)
    assert result.returncode != 0
    assert "FIRSTFAULT_HTTP_PARSER must be one of httptools, h11, not 'zttp'" in result.stderr


def test_rules_endpoint_is_the_loaded_catalog(client: httpx.Client, new_session: Callable[..., str]) -> None:
    rules = client.get("/v2/rules").json()
    assert rules["content_hash"] == client.get("/v2/healthz").json()["catalog_hash"]
    assert rules["extractors"] and rules["symptoms"] and rules["python_rules"] and rules["files"]
    assert {"name", "sources", "emits", "match_re", "doc", "file"} <= set(rules["extractors"][0])
    sid = new_session()
    result = client.post(f"/v2/sessions/{sid}/attribute").json()["result"]
    assert result["catalog_hash"] == rules["content_hash"]


def test_openapi_lists_every_endpoint(client: httpx.Client) -> None:
    paths = client.get("/openapi.json").json()["paths"]
    assert set(paths) == {
        "/v2/sessions", "/v2/sessions/{session_id}", "/v2/sessions/{session_id}/observations",
        "/v2/sessions/{session_id}/attribute", "/v2/healthz", "/v2/readyz", "/v2/rules", "/latest/attributor",
        "/latest/attributor/{session_id}/observation", "/latest/attributor/{session_id}/attribution"}
    assert set(paths["/v2/sessions/{session_id}"]) == {"get", "delete"}
    assert "422" in paths["/v2/sessions"]["post"]["responses"]


def test_binds_loopback_by_default(server: Server) -> None:
    ready = [r for r in log_records(server) if r.get("message") == "ready"]
    assert ready and ready[0]["host"] == "127.0.0.1"


def test_client_named_paths_are_never_read(client: httpx.Client, new_session: Callable[..., str]) -> None:
    sid = new_session()
    batch = {**raw_text_batch("node-01", "syslog", "hello\n"), "origin": "/etc/passwd"}
    assert client.post(f"/v2/sessions/{sid}/observations", json=batch).json()["accepted"] == 1
    result = client.post(f"/v2/sessions/{sid}/attribute").text
    assert "root:" not in result
    service_src = Path(__file__).resolve().parents[2] / "src" / "firstfault" / "service"
    for module in service_src.glob("*.py"):
        code = module.read_text()
        for reader in ("open(", "read_text", "read_bytes", "ingest_file", "analyze_path", "ingest_stream"):
            assert reader not in code, f"{module.name} uses {reader}"


def test_otel_spans_continue_the_callers_trace(tmp_path: Path) -> None:
    srv = Server.start(tmp_path, env={"FIRSTFAULT_OTEL_EXPORTER": "console"})
    with srv.client() as c:
        response = c.get("/v2/healthz", headers={"traceparent": f"00-{TRACE_ID}-{PARENT_ID}-01"})
    span_id = response.headers["traceparent"].split("-")[2]
    assert srv.stop() == 0
    log = srv.log()
    assert f'"trace_id": "0x{TRACE_ID}"' in log and f'"span_id": "0x{span_id}"' in log
    assert f'"parent_id": "0x{PARENT_ID}"' in log
