"""The Attribution Service under attack and load: slow and oversized bodies, thousands of sessions, the memory
budget, 200 concurrent clients, crafted lines over HTTP, and the token on every write endpoint.

Already covered elsewhere (docs/operations.md lists them): tests/service/test_openapi_fuzz.py (schemathesis,
every check, no 5xx), tests/service/test_limits.py (request and session caps, TTL, the session cap's
eviction), tests/service/test_idempotency_auth.py (retries, the token on the listed write endpoints).
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import functools
import json
import shutil
import socket
import subprocess
import sys
import threading
import time
import warnings
from collections import defaultdict
from collections.abc import Iterator
from datetime import datetime
from pathlib import Path
from typing import Any

import httpx
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from firstfault.service.app import create_app
from firstfault.service.settings import Settings
from tests.reliability import support
from tests.reliability.support import Record, examples, percentile
from tests.service.live_server import Server, raw_text_batch

with warnings.catch_warnings():  # starlette's notice about httpx, not about this code
    warnings.simplefilter("ignore")
    from fastapi.testclient import TestClient

CONTEXT = {"workload_id": "load", "scheduler": "slurm", "nodes": ["n1", "n2", "n3", "n4"],
           "start_time": "2026-03-02T08:00:00Z", "end_time": "2026-03-02T09:00:00Z", "scheduler_state": "FAILED"}
XID = "Mar  2 08:10:{sec:02d} n1 kernel: NVRM: Xid (PCI:0000:{bus:02x}:00): 79, pid=1, name=python, GPU has fallen off the bus."
QUIET = {"FIRSTFAULT_LOG_LEVEL": "warning"}
# Every guarantee of the HTTP layer (header deadline and cap, body deadline and caps) is tested on both parsers.
PARSERS = pytest.mark.parametrize("parser", ["httptools", "h11"])


def rss_mib(server: Server) -> float:
    with open(f"/proc/{server.process.pid}/status") as status:
        for line in status:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    raise AssertionError("no VmRSS")


def metric(client: httpx.Client, name: str) -> float:
    for line in client.get("/metrics").text.splitlines():
        if line.startswith(name + " "):
            return float(line.rsplit(" ", 1)[1])
    return 0.0


@pytest.fixture
def start_server(tmp_path: Path) -> Iterator[Any]:
    servers: list[Server] = []

    def start(**env: str) -> Server:
        server = Server.start(tmp_path, env={**QUIET, **env})
        servers.append(server)
        return server

    yield start
    for server in servers:
        server.stop()


def _batch(bus: int, sec: int = 1) -> dict[str, Any]:
    """One batch: a Xid 79 line on n1 (a new GPU per batch) and some chatter."""
    text = "\n".join(["Mar  2 08:09:59 n1 systemd[1]: Started Session 1.", XID.format(sec=sec % 60, bus=bus % 256),
                      "Mar  2 08:10:30 n1 CRON[2]: (root) CMD (true)"]) + "\n"
    return raw_text_batch("n1", "syslog", text)


# -- slow and oversized bodies ---------------------------------------------------------------------------------------
def _open(server: Server) -> socket.socket:
    host, port = server.url.removeprefix("http://").rsplit(":", 1)
    return socket.create_connection((host, int(port)), timeout=30)


def _read_all(sock: socket.socket) -> bytes:
    data = b""
    while True:
        try:
            chunk = sock.recv(65536)
        except OSError:
            break
        if not chunk:
            break
        data += chunk
    return data


@PARSERS
def test_slow_bodies_time_out_and_do_not_hold_up_other_clients(start_server, record: Record, parser: str) -> None:
    server = start_server(FIRSTFAULT_BODY_TIMEOUT_S="3", FIRSTFAULT_HTTP_PARSER=parser)
    stalled, trickling = [], []
    head = (b"POST /v2/sessions HTTP/1.1\r\nHost: localhost\r\nContent-Type: application/json\r\n"
            b"Content-Length: 1000\r\n\r\n{\"workload_id\": ")
    for _ in range(40):                       # half a body, then nothing
        sock = _open(server)
        sock.sendall(head)
        stalled.append(sock)
    for _ in range(10):                       # a byte every 0.2 s: would take minutes to finish
        sock = _open(server)
        sock.sendall(head)
        trickling.append(sock)
    started = time.monotonic()
    latencies = []
    with server.client() as client:
        while time.monotonic() - started < 2.5:
            for sock in trickling:
                sock.sendall(b" ")
            t = time.monotonic()
            sid = client.post("/v2/sessions", json=CONTEXT).json()["session_id"]
            assert client.post(f"/v2/sessions/{sid}/observations", json=_batch(1)).status_code == 202
            assert client.post(f"/v2/sessions/{sid}/attribute").status_code == 200
            latencies.append(time.monotonic() - t)
            time.sleep(0.2)
        answers = [_read_all(sock) for sock in stalled + trickling]
        waited = time.monotonic() - started
        assert all(a.startswith(b"HTTP/1.1 408 ") and b'"request_timeout"' in a for a in answers), answers[0][:300]
        assert waited < 15
        assert client.get("/v2/healthz").status_code == 200
        assert metric(client, "firstfault_sessions_created_total") == len(latencies)  # no stalled body made one
    for sock in stalled + trickling:
        sock.close()
    assert max(latencies) < 2.0, latencies
    record(slow_connections=len(answers), answered_408_after_s=round(waited, 1),
           other_client_max_ms=round(max(latencies) * 1000, 1))


@PARSERS
def test_an_oversized_chunked_body_is_refused_without_reading_it_all(start_server, parser: str) -> None:
    server = start_server(FIRSTFAULT_MAX_REQUEST_BYTES=str(1024 * 1024), FIRSTFAULT_HTTP_PARSER=parser)
    sock = _open(server)
    sock.sendall(b"POST /v2/sessions HTTP/1.1\r\nHost: localhost\r\nContent-Type: application/json\r\n"
                 b"Transfer-Encoding: chunked\r\n\r\n")
    chunk = b"x" * 65536
    sent = 0
    try:
        for _ in range(200):                  # 12.5 MiB offered, no Content-Length to refuse it up front
            sock.sendall(b"%x\r\n%s\r\n" % (len(chunk), chunk))
            sent += len(chunk)
    except OSError:                           # the server closed the connection after its 413
        pass
    answer = _read_all(sock)
    sock.close()
    assert answer.startswith(b"HTTP/1.1 413 ") and b'"request_too_large"' in answer
    assert sent < 200 * len(chunk) or b"connection: close" in answer.lower()
    with server.client() as client:
        assert client.get("/v2/healthz").status_code == 200
        assert metric(client, "firstfault_sessions_live") == 0


def _half_sent(server: Server, count: int) -> list[socket.socket]:
    """`count` connections that each sent part of a request's headers and then nothing."""
    socks = []
    for i in range(count):
        sock = _open(server)
        sock.sendall(b"GET /v2/healthz HTTP/1.1\r\nHost: localhost\r\nX-Slow-%d: " % i)
        socks.append(sock)
    return socks


def _slowloris(start_server, record: Record, connections: int, parser: str = "httptools") -> None:
    server = start_server(FIRSTFAULT_HEADER_TIMEOUT_S="3", FIRSTFAULT_HTTP_PARSER=parser)
    started = time.monotonic()
    socks = _half_sent(server, connections)
    latencies = []
    with server.client() as client:
        for _ in range(10):
            t = time.monotonic()
            assert client.get("/v2/healthz").status_code == 200
            latencies.append(time.monotonic() - t)
    answers = []
    deadline = started + 20
    for sock in socks:                              # each closed by the server at the header deadline
        sock.settimeout(max(0.01, deadline - time.monotonic()))
        answers.append(_read_all(sock))
    closed_after = time.monotonic() - started
    for sock in socks:
        sock.close()
    assert all(a.startswith(b"HTTP/1.1 408 ") and b'"request_timeout"' in a for a in answers), answers[0][:200]
    assert closed_after < 25
    with server.client() as client:
        assert client.get("/v2/healthz").status_code == 200
    record(half_sent_connections=connections, healthz_max_ms=round(max(latencies) * 1000, 1),
           all_closed_after_s=round(closed_after, 1))


@PARSERS
def test_half_sent_request_headers_time_out_and_healthz_answers(start_server, record: Record, parser: str) -> None:
    _slowloris(start_server, record, 200, parser)


@pytest.mark.long
def test_half_sent_request_headers_time_out_and_healthz_answers_long(start_server, record: Record) -> None:
    _slowloris(start_server, record, 1100)


def _answer(sock: socket.socket) -> bytes:
    """One response with a Content-Length, read off a kept-alive connection."""
    data = b""
    while b"\r\n\r\n" not in data:
        data += sock.recv(65536)
    head, _, body = data.partition(b"\r\n\r\n")
    length = int(next(line.split(b":", 1)[1] for line in head.split(b"\r\n") if line.lower().startswith(b"content-length:")))
    while len(body) < length:
        body += sock.recv(65536)
    return head + b"\r\n\r\n" + body


def _trickled(sock: socket.socket, first: bytes, then: bytes) -> tuple[bytes, float]:
    """Send `first`, then `then` every 0.3 s until the server answers; the answer and the seconds it took."""
    started = time.monotonic()
    answer = None
    try:
        sock.sendall(first)
        while answer is None and time.monotonic() - started < 6:
            sock.settimeout(0.3)
            try:
                answer = sock.recv(65536)           # b"": closed without an answer
            except TimeoutError:
                sock.sendall(then)
    except OSError:                                 # closed after its answer, before this read
        pass
    return (answer or b"") + _read_all(sock), time.monotonic() - started


@PARSERS
def test_a_kept_alive_connection_owes_its_next_headers_in_time(start_server, parser: str) -> None:
    """Idle between requests, a connection gets no 408 (uvicorn's keep-alive timeout, 5 s, closes it); bytes of a
    next request start the header deadline again, and blank lines between requests do not hold the connection."""
    server = start_server(FIRSTFAULT_HEADER_TIMEOUT_S="1.5", FIRSTFAULT_HTTP_PARSER=parser)
    request = b"GET /v2/healthz HTTP/1.1\r\nHost: localhost\r\n\r\n"
    sock = _open(server)
    sock.sendall(request)
    assert _answer(sock).startswith(b"HTTP/1.1 200 ")
    time.sleep(2.5)                                 # past the header deadline, within the keep-alive timeout
    sock.sendall(request)
    assert _answer(sock).startswith(b"HTTP/1.1 200 ")
    answer, took = _trickled(sock, b"GET /v2/healthz HTTP/1.1\r\nHost: localhost\r\nX-Slow: ", b"a")
    sock.close()
    assert answer.startswith(b"HTTP/1.1 408 ") and b'"request_timeout"' in answer, answer[:200]
    assert took < 4
    sock = _open(server)
    sock.sendall(request)
    assert _answer(sock).startswith(b"HTTP/1.1 200 ")
    answer, took = _trickled(sock, b"\r\n", b"\r\n")
    sock.close()
    # h11 refuses repeated blank lines (400); httptools skips them, and the header deadline closes the connection
    assert answer.startswith(b"HTTP/1.1 408 " if parser == "httptools" else b"HTTP/1.1 400 "), answer[:200]
    assert took < 4


@PARSERS
def test_a_body_the_app_does_not_read_does_not_hold_the_connection(start_server, parser: str) -> None:
    """A GET's body is not read by the app, so the body deadline does not cover it: once the response is out, the
    rest must arrive within the header deadline, or the connection is closed (without a 408: no request is owed
    an answer)."""
    server = start_server(FIRSTFAULT_HEADER_TIMEOUT_S="1.5", FIRSTFAULT_HTTP_PARSER=parser)
    sock = _open(server)
    sock.sendall(b"GET /v2/healthz HTTP/1.1\r\nHost: localhost\r\nContent-Length: 1000000\r\n\r\n")
    assert _answer(sock).startswith(b"HTTP/1.1 200 ")
    answer, took = _trickled(sock, b"a", b"a")
    sock.close()
    assert answer == b"" and 1.4 < took < 3.5


@PARSERS
def test_oversized_request_headers_are_refused(start_server, parser: str) -> None:
    """h11 caps a request's headers at 16 KiB; the httptools parser has no cap of its own and gets the same one."""
    server = start_server(FIRSTFAULT_HTTP_PARSER=parser)
    sock = _open(server)
    sent = 0
    try:
        sock.sendall(b"GET /v2/healthz HTTP/1.1\r\nHost: localhost\r\nX-Big: ")
        for _ in range(256):                        # 16 MiB offered within the header deadline, never ended
            sock.sendall(b"a" * 65536)
            sent += 65536
    except OSError:                                 # the server closed the connection after its 400
        pass
    answer = _read_all(sock)
    sock.close()
    assert answer.startswith(b"HTTP/1.1 400 ") and answer.endswith(b"Invalid HTTP request received."), answer[:300]
    assert sent < 256 * 65536
    with server.client() as client:
        assert client.get("/v2/healthz", headers={"X-Big": "a" * 8000}).status_code == 200


# -- attribution off the event loop ------------------------------------------------------------------------------------
def _healthz_during_attributions(start_server, record: Record, attributions: int, nodes: int) -> list[float]:
    """healthz latencies measured while `attributions` attribute calls (a session of `nodes` failing nodes) run."""
    server = start_server()
    with server.client() as client:
        sid = client.post("/v2/sessions", json={**CONTEXT, "nodes": [f"h-{i}" for i in range(nodes)]}).json()["session_id"]
        assert client.post(f"/v2/sessions/{sid}/observations", json=_hosts_batch("h", nodes)).status_code == 202
    # The attribute calls run in processes of their own: reading 40 large answers in this process's threads would
    # hold its interpreter lock and slow the healthz client, not the server.
    calls: list[tuple[float, float]] = []
    with concurrent.futures.ProcessPoolExecutor(attributions) as pool:
        futures = [pool.submit(_timed_attribute, server.url, sid) for _ in range(attributions)]
        with server.client() as client:
            while not all(f.done() for f in futures):
                t = time.monotonic()
                assert client.get("/v2/healthz").status_code == 200
                calls.append((t, time.monotonic()))
                time.sleep(0.02)
        runs = [f.result() for f in futures]
    assert [status for status, _, _ in runs] == [200] * attributions
    latencies = [end - start for start, end in calls if any(a < end and start < b for _, a, b in runs)]
    assert latencies, "no healthz call was made while attributions ran"
    record(attributions=attributions, nodes=nodes, healthz_calls=len(latencies),
           healthz_p50_ms=round(percentile(latencies, 50) * 1000, 1),
           healthz_p99_ms=round(percentile(latencies, 99) * 1000, 1), healthz_max_ms=round(max(latencies) * 1000, 1))
    return latencies


def _timed_attribute(url: str, sid: str) -> tuple[int, float, float]:
    """One attribute call: its status, and when it started and ended (the monotonic clock is the machine's)."""
    with httpx.Client(base_url=url, timeout=600) as client:
        started = time.monotonic()
        status = client.post(f"/v2/sessions/{sid}/attribute").status_code
        return status, started, time.monotonic()


def test_healthz_answers_while_attributions_run(start_server, record: Record) -> None:
    _healthz_during_attributions(start_server, record, attributions=8, nodes=2000)


@pytest.mark.long
def test_healthz_while_40_attributions_of_10k_nodes_run(start_server, record: Record) -> None:
    latencies = _healthz_during_attributions(start_server, record, attributions=40, nodes=10_000)
    # The median holds the 100 ms target; the 99th percentile does not yet (docs/reliability.md says why)
    assert percentile(latencies, 50) < 0.1, latencies


# -- thousands of sessions, the memory budget ------------------------------------------------------------------------
def _fill(server: Server, count: int, start: int = 0, workers: int = 4) -> list[str]:
    """Create `count` sessions, each with one batch of evidence; returns their ids."""
    local = threading.local()

    def one(i: int) -> str:
        if not hasattr(local, "client"):
            local.client = server.client()
            clients.append(local.client)
        c = local.client
        sid = c.post("/v2/sessions", json={**CONTEXT, "workload_id": f"w{i}"}).json()["session_id"]
        response = c.post(f"/v2/sessions/{sid}/observations", json=_batch(i))
        assert response.status_code == 202, response.text
        return str(sid)

    clients: list[httpx.Client] = []
    try:
        with concurrent.futures.ThreadPoolExecutor(workers) as pool:
            return list(pool.map(one, range(start, start + count)))
    finally:
        for client in clients:
            client.close()


def _many_sessions(start_server, record: Record, cap: int, total: int) -> None:
    server = start_server(FIRSTFAULT_MAX_SESSIONS=str(cap), FIRSTFAULT_SESSION_MIN_IDLE_S="0")
    first = _fill(server, cap)
    at_cap = rss_mib(server)
    later = _fill(server, total - cap, start=cap)
    after = rss_mib(server)
    with server.client() as client:
        assert metric(client, "firstfault_sessions_live") == cap
        assert metric(client, 'firstfault_sessions_removed_total{reason="evicted"}') == total - cap
        ids = first + later
        gone = client.get(f"/v2/sessions/{ids[total - cap - 100]}")       # among the last 10,000 removals
        assert gone.status_code == 404 and "evicted" in gone.json()["message"]
        assert client.get(f"/v2/sessions/{first[0]}").status_code == 404
        assert client.get(f"/v2/sessions/{later[-1]}").json()["observations"] == 3
    assert after < at_cap + 48, (at_cap, after)     # the cap bounds memory: more sessions, no more memory
    record(sessions=total, cap=cap, rss_at_cap_mib=round(at_cap, 1), rss_after_mib=round(after, 1))


def test_thousands_of_sessions_stay_within_the_session_cap(start_server, record: Record) -> None:
    _many_sessions(start_server, record, cap=200, total=1000)


@pytest.mark.long
def test_thousands_of_sessions_stay_within_the_session_cap_long(start_server, record: Record) -> None:
    _many_sessions(start_server, record, cap=1000, total=20_000)


def test_idle_sessions_expire_and_their_memory_is_reused(start_server, record: Record) -> None:
    # 3 s, not 1: a session must outlive the moment between its creation and its first batch on a loaded machine
    # (the full suite on 2 cores once saw a session expire there)
    server = start_server(FIRSTFAULT_SESSION_TTL_S="3")
    rounds = []
    for round_ in range(2):
        ids = _fill(server, 250, start=round_ * 250)
        rounds.append(rss_mib(server))
        deadline = time.monotonic() + 15
        with server.client() as client:
            while metric(client, "firstfault_sessions_live") and time.monotonic() < deadline:
                time.sleep(0.3)
            assert metric(client, "firstfault_sessions_live") == 0
            assert "expired" in client.get(f"/v2/sessions/{ids[0]}").json()["message"]
    with server.client() as client:
        assert metric(client, 'firstfault_sessions_removed_total{reason="expired"}') == 500
    assert rounds[1] < rounds[0] + 32, rounds
    record(sessions_per_round=250, rss_after_each_round_mib=[round(r, 1) for r in rounds])


def _hosts_batch(prefix: str, count: int) -> dict[str, Any]:
    """A Loki batch naming `count` different hosts: `count` new coalesced events in one request."""
    line = "NVRM: Xid (PCI:0000:91:00): 79, pid=1, name=python, GPU has fallen off the bus."
    return {"format": "raw_loki_streams", "source": "syslog", "streams": [
        {"stream": {"hostname": f"{prefix}-{i}"}, "values": [["1772438400000000000", line]]} for i in range(count)]}


def _session_bytes(start_server, hosts: int) -> tuple[float, float]:
    """What a session holding one batch of `hosts` hosts weighs by service/memory.py's estimate, before and after
    its result is computed, on an unbudgeted server: the budgets below are set from these, so the tests hold
    whatever the engine's records weigh."""
    probe = start_server()
    with probe.client() as client:
        session = client.post("/v2/sessions", json=CONTEXT).json()["session_id"]
        assert client.post(f"/v2/sessions/{session}/observations", json=_hosts_batch("a", hosts)).status_code == 202
        held = metric(client, "firstfault_session_bytes")
        assert client.post(f"/v2/sessions/{session}/attribute").status_code == 200
        with_result = metric(client, "firstfault_session_bytes")
    probe.stop()
    assert 100 * hosts < held < with_result < 2 * held, (held, with_result)
    return held, with_result


def test_the_memory_budget_refuses_whole_batches_and_recovers(start_server) -> None:
    # a budget between one session with its result and two sessions' batches: a second batch is taken (the budget
    # is checked before a batch), anything after it is refused, and one session with its result fits again
    held, with_result = _session_bytes(start_server, 1200)
    budget = round((with_result + 2 * held) / 2)
    server = start_server(FIRSTFAULT_MEMORY_BUDGET_BYTES=str(budget), FIRSTFAULT_SESSION_MIN_IDLE_S="30")
    with server.client() as client:
        a = client.post("/v2/sessions", json=CONTEXT).json()["session_id"]
        b = client.post("/v2/sessions", json=CONTEXT).json()["session_id"]
        assert client.post(f"/v2/sessions/{a}/observations", json=_hosts_batch("a", 1200)).status_code == 202
        assert client.post(f"/v2/sessions/{b}/observations", json=_hosts_batch("b", 1200)).status_code == 202
        refused = client.post(f"/v2/sessions/{b}/observations", json=_batch(1), headers={"Idempotency-Key": "k1"})
        assert refused.status_code == 503 and refused.json()["error_code"] == "memory_budget"
        assert refused.headers["retry-after"] == "30"
        assert client.get(f"/v2/sessions/{b}").json()["observations"] == 1200   # nothing of it was taken
        assert client.get("/v2/readyz").status_code == 503
        assert client.post("/v2/sessions", json=CONTEXT).json()["error_code"] == "memory_budget"
        assert client.post(f"/v2/sessions/{b}/attribute").status_code == 200   # results can still be had
        assert metric(client, "firstfault_session_bytes") >= budget
        assert client.delete(f"/v2/sessions/{a}").status_code == 204
        retried = client.post(f"/v2/sessions/{b}/observations", json=_batch(1), headers={"Idempotency-Key": "k1"})
        assert retried.status_code == 202 and retried.json()["replayed"] is False
        assert client.get("/v2/readyz").status_code == 200


def test_the_memory_budget_evicts_idle_sessions_first(start_server) -> None:
    budget = round(2.5 * _session_bytes(start_server, 900)[0])
    server = start_server(FIRSTFAULT_MEMORY_BUDGET_BYTES=str(budget), FIRSTFAULT_SESSION_MIN_IDLE_S="0")
    with server.client() as client:
        ids = [client.post("/v2/sessions", json=CONTEXT).json()["session_id"] for _ in range(4)]
        for i, sid in enumerate(ids):
            assert client.post(f"/v2/sessions/{sid}/observations", json=_hosts_batch(str(i), 900)).status_code == 202
        # 1, 2, 3 batches held (the budget is checked before a batch), then the oldest goes to make room for the 4th
        assert [client.get(f"/v2/sessions/{sid}").status_code for sid in ids] == [404, 200, 200, 200]
        assert metric(client, 'firstfault_sessions_removed_total{reason="evicted"}') == 1
        assert metric(client, "firstfault_event_keys") == 2700


def test_unique_node_names_count_against_the_budget_in_bytes(start_server) -> None:
    """Events and stream counters of distinct nodes are what a session's memory grows with: a budget in bytes
    stops them, where a count of events let 900k observations take 1.4 GB with readiness green."""
    server = start_server(FIRSTFAULT_MEMORY_BUDGET_BYTES=str(16 * 1024 * 1024), FIRSTFAULT_SESSION_MIN_IDLE_S="30")
    with server.client() as client:
        sid = client.post("/v2/sessions", json=CONTEXT).json()["session_id"]
        taken = refused = 0
        for i in range(12):
            response = client.post(f"/v2/sessions/{sid}/observations", json=_hosts_batch(f"h{i}", 1000))
            if response.status_code == 503:
                assert response.json()["error_code"] == "memory_budget"
                refused += 1
            else:
                assert response.status_code == 202, response.text
                taken += 1
        assert taken and refused
        assert client.get("/v2/readyz").status_code == 503
        assert client.get(f"/v2/sessions/{sid}").json()["observations"] == taken * 1000
        held = metric(client, "firstfault_session_bytes")
        assert 16 * 1024 * 1024 <= held < 16 * 1024 * 1024 + 8_000_000     # over by at most one batch


def test_a_session_context_over_its_cap_is_refused(start_server) -> None:
    server = start_server(FIRSTFAULT_MAX_CONTEXT_BYTES="1000000")
    with server.client() as client:
        nodes = [f"gpu-node-{i:06d}-" + "x" * 24 for i in range(20_000)]
        response = client.post("/v2/sessions", json={**CONTEXT, "nodes": nodes})
        assert response.status_code == 413 and response.json()["error_code"] == "context_too_large"
        response = client.post("/latest/attributor", json={"workload": {"id": "w", "nodes": nodes}})
        assert response.status_code == 413 and response.json()["error_code"] == "context_too_large"
        assert client.post("/v2/sessions", json={**CONTEXT, "nodes": nodes[:100]}).status_code == 201
        assert metric(client, "firstfault_sessions_live") == 1


def test_request_bodies_in_progress_are_capped_together(start_server) -> None:
    """Bodies held at once by all requests are capped (FIRSTFAULT_MAX_INFLIGHT_BYTES): past it, 503 at once,
    before the body is read; when they are done, requests go through again."""
    mib = 1024 * 1024
    server = start_server(FIRSTFAULT_MAX_REQUEST_BYTES=str(mib), FIRSTFAULT_MAX_INFLIGHT_BYTES=str(2 * mib))
    head = (b"POST /v2/sessions HTTP/1.1\r\nHost: localhost\r\nContent-Type: application/json\r\n"
            b"Content-Length: %d\r\n\r\n{\"workload_id\": " % mib)
    holding = []
    for _ in range(2):                         # two bodies of 1 MiB on their way: the cap is held
        sock = _open(server)
        sock.sendall(head)
        holding.append(sock)
    time.sleep(0.5)
    third = _open(server)
    third.sendall(head)
    answer = _read_all(third)
    third.close()
    assert answer.startswith(b"HTTP/1.1 503 ") and b'"server_busy"' in answer and b"retry-after: 1" in answer.lower()
    for sock in holding:
        sock.close()
    with server.client() as client:
        deadline = time.monotonic() + 10
        while client.post("/v2/sessions", json=CONTEXT).status_code != 201:   # the held bytes are released
            assert time.monotonic() < deadline
            time.sleep(0.2)


def peak_rss_mib(server: Server) -> float:
    with open(f"/proc/{server.process.pid}/status") as status:
        for line in status:
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) / 1024
    raise AssertionError("no VmHWM")


@pytest.mark.long
def test_900k_unique_node_observations_stay_within_the_memory_budget(start_server, record: Record) -> None:
    """Issue 14's scenario: 900,000 observations, each naming a new node, against a budget of 256 MiB. The memory
    held after ingest is bounded by the budget; attribution's own working memory comes on top (recorded)."""
    budget_mib = 256
    server = start_server(FIRSTFAULT_MEMORY_BUDGET_BYTES=str(budget_mib * 1024 * 1024))
    taken = refused = 0
    with httpx.Client(base_url=server.url, timeout=1200) as client:
        sid = client.post("/v2/sessions", json=CONTEXT).json()["session_id"]
        for i in range(90):
            response = client.post(f"/v2/sessions/{sid}/observations", json=_hosts_batch(f"b{i}", 10_000))
            assert response.status_code in (202, 503), response.text
            taken, refused = taken + (response.status_code == 202), refused + (response.status_code == 503)
        ready = client.get("/v2/readyz").status_code
        held_after_ingest = metric(client, "firstfault_session_bytes")
        rss_after_ingest = rss_mib(server)
        started = time.monotonic()
        attributed = client.post(f"/v2/sessions/{sid}/attribute")
        attribute_s = time.monotonic() - started
        held = metric(client, "firstfault_session_bytes")
    peak = peak_rss_mib(server)
    record(observations_sent=900_000, observations_taken=taken * 10_000, batches_refused=refused,
           readyz_after=ready, budget_mib=budget_mib, estimated_after_ingest_mib=round(held_after_ingest / 2**20),
           rss_after_ingest_mib=round(rss_after_ingest), estimated_with_result_mib=round(held / 2**20),
           peak_rss_mib=round(peak), attribute_s=round(attribute_s, 1),
           attribute_mib=round(len(attributed.content) / 2**20, 1))
    assert refused and ready == 503 and attributed.status_code == 200
    assert rss_after_ingest < 2 * budget_mib + 150, rss_after_ingest


@pytest.mark.long
def test_12_concurrent_31_mib_bodies_stay_within_the_body_cap(start_server, record: Record) -> None:
    """Issue 14's scenario: 12 bodies of 31 MiB at once (default limits: 32 MiB a body, 96 MiB in progress)."""
    server = start_server()
    line = "Mar  2 08:10:01 n1 kernel: some chatter that matches nothing " + "x" * 60
    text = "\n".join([line] * (31 * 1024 * 1024 // (len(line) + 1)))
    with server.client() as client:
        ids = [client.post("/v2/sessions", json=CONTEXT).json()["session_id"] for _ in range(12)]
    body = json.dumps(raw_text_batch("n1", "syslog", text)).encode()
    baseline = rss_mib(server)

    def send(sid: str) -> int:
        with httpx.Client(base_url=server.url, timeout=600) as c:
            return c.post(f"/v2/sessions/{sid}/observations", content=body,
                          headers={"content-type": "application/json"}).status_code

    with concurrent.futures.ThreadPoolExecutor(12) as pool:
        statuses = list(pool.map(send, ids))
    peak = peak_rss_mib(server)
    record(bodies=12, body_mib=round(len(body) / 2**20, 1), accepted=statuses.count(202),
           busy_503=statuses.count(503), rss_before_mib=round(baseline), peak_rss_mib=round(peak))
    assert set(statuses) <= {202, 503} and statuses.count(202) >= 1
    assert peak < 800, peak                    # 1,447 MiB before the in-flight cap


# -- 200 concurrent clients ------------------------------------------------------------------------------------------
async def _client_run(http: httpx.AsyncClient, n: int, until: float, batches: int | None,
                      latencies: dict[str, list[float]], failures: list[str]) -> tuple[int, int]:
    """One client: a session, batches with idempotency keys (retried until acknowledged), an attribute call
    every few batches, a last attribute. Returns (acknowledged batches, the final XID-79 count)."""
    async def call(kind: str, method: str, url: str, **kwargs: Any) -> httpx.Response:
        for attempt in range(20):
            started = time.monotonic()
            try:
                response = await http.request(method, url, **kwargs)
            except httpx.TransportError as exc:
                failures.append(f"{kind}: {exc.__class__.__name__}")
                await asyncio.sleep(0.2 * (attempt + 1))
                continue
            latencies[kind].append(time.monotonic() - started)
            if response.status_code < 500:
                return response
            failures.append(f"{kind}: HTTP {response.status_code}")
            await asyncio.sleep(0.2 * (attempt + 1))
        raise AssertionError(f"client {n}: {kind} never succeeded")

    created = await call("create", "POST", "/v2/sessions", json={**CONTEXT, "workload_id": f"client-{n}"})
    assert created.status_code == 201, created.text
    sid = created.json()["session_id"]
    acked = 0
    while (batches is None and time.monotonic() < until) or (batches is not None and acked < batches):
        response = await call("ingest", "POST", f"/v2/sessions/{sid}/observations", json=_batch(acked, sec=acked),
                              headers={"Idempotency-Key": f"{n}-{acked}"})
        assert response.status_code == 202, response.text
        acked += 1
        assert response.json()["batch"] == acked     # a retry replays the first answer: the count stays exact
        if acked % 3 == 0:
            answer = (await call("attribute", "POST", f"/v2/sessions/{sid}/attribute")).json()
            assert answer["computed_from"]["batches"] == acked
    answer = (await call("attribute", "POST", f"/v2/sessions/{sid}/attribute")).json()
    assert answer["computed_from"]["batches"] == acked
    assert answer["computed_from"]["observations"] == 3 * acked
    xid = [s for s in answer["result"]["symptoms"] if s["node"] == "n1" and s["symptom"] == "XID-79"]
    await call("delete", "DELETE", f"/v2/sessions/{sid}")
    return acked, (xid[0]["count"] if xid else 0)


async def _load(url: str, clients: int, seconds: float | None, batches: int | None) -> dict[str, Any]:
    latencies: dict[str, list[float]] = defaultdict(list)
    failures: list[str] = []
    limits = httpx.Limits(max_connections=clients + 10, max_keepalive_connections=clients + 10)
    async with httpx.AsyncClient(base_url=url, timeout=120.0, limits=limits) as http:
        until = time.monotonic() + (seconds or 0)
        started = time.monotonic()
        results = await asyncio.gather(*(_client_run(http, n, until, batches, latencies, failures)
                                         for n in range(clients)))
        elapsed = time.monotonic() - started
    return {"results": results, "latencies": latencies, "failures": failures, "elapsed": elapsed}


def _concurrent_clients(start_server, record: Record, clients: int, seconds: float | None, batches: int | None,
                        deadline: float) -> None:
    server = start_server()
    try:
        run = asyncio.run(asyncio.wait_for(_load(server.url, clients, seconds, batches), deadline))
    except TimeoutError:
        raise AssertionError(f"{clients} clients did not finish within {deadline:g} s: a deadlock?") from None
    acked = [a for a, _ in run["results"]]
    # no lost observation: every acknowledged batch is in the last result, once
    assert all(a == count for a, count in run["results"]), [r for r in run["results"] if r[0] != r[1]][:5]
    assert all(a >= 1 for a in acked)
    with server.client() as client:
        assert metric(client, "firstfault_sessions_live") == 0
        assert client.get("/v2/healthz").status_code == 200
    assert server.process.poll() is None and '"level": "error"' not in server.log()
    summary: dict[str, Any] = {"clients": clients, "batches": sum(acked), "seconds": round(run["elapsed"], 1),
                               "requests_per_s": round(sum(len(v) for v in run["latencies"].values()) / run["elapsed"], 1),
                               "retried": len(run["failures"])}
    for kind in ("create", "ingest", "attribute", "delete"):
        values = run["latencies"][kind]
        summary[f"{kind}_p50_ms"] = round(percentile(values, 50) * 1000, 1)
        summary[f"{kind}_p99_ms"] = round(percentile(values, 99) * 1000, 1)
    record(**summary)


def test_200_concurrent_clients_lose_nothing(start_server, record: Record) -> None:
    _concurrent_clients(start_server, record, clients=200, seconds=None, batches=3, deadline=240)


@pytest.mark.long
def test_200_concurrent_clients_for_two_minutes(start_server, record: Record) -> None:
    _concurrent_clients(start_server, record, clients=200, seconds=120, batches=None, deadline=900)


# -- crafted lines over HTTP ---------------------------------------------------------------------------------------
def test_crafted_lines_over_http_cost_what_plain_lines_cost(start_server, record: Record) -> None:
    """The service's lines (cut at 64 kB) go through the same capture step: a batch of crafted lines costs a
    small factor of a benign batch of the same size."""
    server = start_server()
    prefix = "Mar  2 08:10:01 n1 kernel: "
    benign = prefix + ("word " * 13_000)[:60_000] + " x invoked oom-killer:"
    hostile = prefix + "a" * 60_000 + " x invoked oom-killer:"
    times = {}
    with httpx.Client(base_url=server.url, timeout=300) as client:
        for name, line in (("benign", benign), ("hostile", hostile), ("benign", benign), ("hostile", hostile)):
            sid = client.post("/v2/sessions", json=CONTEXT).json()["session_id"]
            started = time.monotonic()
            response = client.post(f"/v2/sessions/{sid}/observations",
                                   json=raw_text_batch("n1", "syslog", "\n".join([line] * 64)))
            assert response.status_code == 202
            times[name] = min(times.get(name, float("inf")), time.monotonic() - started)
    assert times["hostile"] < 10 * times["benign"], times
    record(benign_ms=round(times["benign"] * 1000), hostile_ms=round(times["hostile"] * 1000),
           ratio=round(times["hostile"] / times["benign"], 2))


# -- the token ---------------------------------------------------------------------------------------------------------
TOKEN = "reliability-token"


def test_every_write_endpoint_of_the_openapi_document_needs_the_token(start_server) -> None:
    """Derived from the served OpenAPI document, so an endpoint added later is covered without editing this."""
    server = start_server(FIRSTFAULT_API_TOKEN=TOKEN)
    good = {"Authorization": f"Bearer {TOKEN}"}
    with server.client() as client:
        sid = client.post("/v2/sessions", json=CONTEXT, headers=good).json()["session_id"]
        paths = client.get("/openapi.json").json()["paths"]
        writes = [(m.upper(), p) for p, ops in paths.items() for m in ops if m in ("post", "put", "patch", "delete")]
        assert len(writes) >= 6
        for method, path in writes:
            url = path.replace("{session_id}", sid)
            for headers in ({}, {"Authorization": "Bearer wrong"}, {"Authorization": f"Basic {TOKEN}"},
                            {"Authorization": f"Bearer {TOKEN}x"}, {"Authorization": f"bearer{TOKEN}"}):
                response = client.request(method, url, json={}, headers=headers)
                assert response.status_code == 401, (method, path, headers, response.text)
            response = client.request(method, url, params={"token": TOKEN}, json={})
            assert response.status_code == 401
            assert client.request(method, url, json={}, headers=good).status_code != 401
        assert client.get(f"/v2/sessions/{sid}").status_code == 404    # the DELETE above went through
        for path in [p for p, ops in paths.items() if "get" in ops and "{" not in p] + ["/metrics"]:
            assert client.get(path).status_code == 200                  # reads stay open
    assert TOKEN not in server.log()                                     # never logged


@pytest.mark.long
def test_schemathesis_with_the_token_and_many_examples(start_server, tmp_path: Path, record: Record) -> None:
    """The long version of tests/service/test_openapi_fuzz.py: the token-protected schema, ten times the examples."""
    server = start_server(FIRSTFAULT_API_TOKEN=TOKEN, FIRSTFAULT_MAX_REQUEST_BYTES=str(1024 * 1024))
    cli = shutil.which("schemathesis", path=str(Path(sys.executable).parent)) or shutil.which("schemathesis")
    assert cli
    started = time.monotonic()
    run = subprocess.run([cli, "run", f"{server.url}/openapi.json", "--checks", "all",
                          "--exclude-checks", "positive_data_acceptance", "--max-examples", "250",
                          "--header", f"Authorization: Bearer {TOKEN}", "--seed", "8",
                          "--request-timeout", "60", "--no-color"],
                         capture_output=True, text=True, timeout=1500, cwd=tmp_path, check=False)
    assert run.returncode == 0, run.stdout[-4000:]
    assert server.process.poll() is None and '"level": "error"' not in server.log()
    record(max_examples=250, seconds=round(time.monotonic() - started))


# -- any time, any text, through the HTTP app --------------------------------------------------------------------------
_SURROGATE = st.integers(0xD800, 0xDFFF).map(chr)
_TEXT = st.text(st.characters() | _SURROGATE, max_size=12)
_WHEN = st.datetimes(min_value=datetime(1, 1, 1), max_value=datetime(9999, 12, 31, 23, 59, 59))
_STAMP = st.tuples(_WHEN, st.sampled_from(["%Y-%m-%dT%H:%M:%S", "%Y-%m-%dT%H:%M:%SZ", "%Y-%m-%dT%H:%M:%S+14:00",
                                           "%Y-%m-%dT%H:%M:%S-14:00", "%b %d %H:%M:%S", "[%a %b %d %H:%M:%S %Y]",
                                           "E%m%d %H:%M:%S.000"])).map(lambda w: w[0].strftime(w[1]))
_LINE = st.builds("{} {} kernel: NVRM: Xid (PCI:0000:91:00): 79, pid=1, name={}, GPU has fallen off the bus.".format,
                  _STAMP, _TEXT, _TEXT) | _TEXT
_ENVELOPE = st.builds(lambda line, host: json.dumps({"body": line, "attributes": {"hostname": host}}), _LINE, _TEXT)
_RAW_TEXT = st.fixed_dictionaries({"format": st.just("raw_text"), "source": st.just("syslog"),
                                   "text": st.lists(_LINE, max_size=6).map("\n".join)},
                                  optional={"node": _TEXT, "utc_offset_minutes": st.integers(-840, 840)})
_LOKI = st.fixed_dictionaries({"format": st.just("raw_loki_streams"), "source": st.just("syslog"), "streams": st.lists(
    st.fixed_dictionaries({"stream": st.dictionaries(st.sampled_from(["hostname", "job"]), _TEXT, max_size=2),
                           "values": st.lists(st.tuples(st.integers(0, 2**63).map(str), _ENVELOPE | _LINE),
                                              max_size=4)}), max_size=3)})


@settings(max_examples=examples(60, 1200), deadline=None, derandomize=not support.LONG,
          suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(_RAW_TEXT | _LOKI, min_size=1, max_size=3))
def test_any_time_and_any_text_is_taken_or_refused_never_a_5xx(batches: list[dict[str, Any]]) -> None:
    """Stamps from year 1 to 9999 in every format, at the extreme zone offsets, and any text, lone surrogates
    included (sent as the `\\udXXX` escapes a JSON writer emits), in raw text and in Loki envelopes: every batch
    is taken or refused with a 4xx, every read of the session answers 2xx, and every observation taken is counted."""
    client = _http_app()
    sid = client.post("/v2/sessions", json=CONTEXT).json()["session_id"]
    taken = 0
    for batch in batches:
        response = client.post(f"/v2/sessions/{sid}/observations", content=json.dumps(batch).encode(),
                               headers={"content-type": "application/json", "Idempotency-Key": "k"})
        assert response.status_code < 500, response.text
        if response.status_code == 202 and not response.json()["replayed"]:
            taken += response.json()["accepted"]
        client.delete(f"/v2/sessions/{sid}/nothing")  # a path that does not exist: 404, not a 5xx
    assert client.get(f"/v2/sessions/{sid}").json()["observations"] == taken
    attributed = client.post(f"/v2/sessions/{sid}/attribute")
    assert attributed.status_code == 200, attributed.text
    assert attributed.json()["computed_from"]["observations"] == taken
    assert client.get(f"/latest/attributor/{sid}/attribution").status_code == 200
    assert client.get(f"/v2/sessions/{sid}").status_code == 200


@functools.cache
def _http_app() -> TestClient:
    return TestClient(create_app(Settings()), base_url="http://localhost", raise_server_exceptions=False)
