"""Three real `firstfault serve` replicas on one real Redis (tests/support/setup-redis.sh), behind a round-robin
client: any replica answers any request of any session, a replica killed mid-ingest loses no acknowledged batch,
Redis restarted keeps every acknowledged batch, and every result equals the single-process result byte for byte
(the `server` fixture: one process, sessions in memory, fed the same batches in the order the replicas applied
them)."""

from __future__ import annotations

import signal
import threading
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.service.fact_client import FactClient, loki_streams, split_prefixed
from tests.service.live_server import EXPECTED, Server, raw_text_batch, sample_context, sample_files, stamped, verdict
from tests.service.replicas import (
    RoundRobin,
    balanced_client,
    ensure_redis,
    flush,
    restart_redis,
    result_bytes,
    start_replicas,
)

DB = 5
START = datetime(2026, 3, 2, 8, 0, 5, tzinfo=UTC)
END = datetime(2026, 3, 2, 9, 12, 40, tzinfo=UTC)
NODES = ["node-01", "node-02", "node-03"]


@pytest.fixture(scope="module")
def replicas(tmp_path_factory: pytest.TempPathFactory) -> Iterator[list[Server]]:
    ensure_redis()
    flush(DB)
    servers = start_replicas(tmp_path_factory.mktemp("replicas"), 3, DB)
    yield servers
    for s in servers:
        s.stop()


@pytest.fixture
def balanced(replicas: list[Server]) -> Iterator[httpx.Client]:
    with balanced_client(replicas) as c:
        yield c


def chunked_batches(lines_per_batch: int = 6) -> list[dict[str, Any]]:
    """The sample's files as raw_text batches of a few lines, the files interleaved."""
    per_file = []
    for node, source, text in sample_files():
        lines = text.splitlines()
        per_file.append([raw_text_batch(node, source, "\n".join(lines[i:i + lines_per_batch]), first_line=i + 1)
                         for i in range(0, len(lines), lines_per_batch)])
    longest = max(len(f) for f in per_file)
    return [f[i] for i in range(longest) for f in per_file if i < len(f)]


def single_process(client: httpx.Client, batches: list[dict[str, Any]]) -> bytes:
    """The result of one process (sessions in memory) fed `batches` in order."""
    sid = client.post("/v2/sessions", json=sample_context()).json()["session_id"]
    for batch in batches:
        assert client.post(f"/v2/sessions/{sid}/observations", json=batch).status_code == 202
    return result_bytes(client.post(f"/v2/sessions/{sid}/attribute").content)


def post_until_acknowledged(client: httpx.Client, url: str, batch: dict[str, Any], key: str) -> dict[str, Any]:
    """What a careful client does: retry a batch with its Idempotency-Key until a replica acknowledges it."""
    for _ in range(200):
        try:
            response = client.post(url, json=batch, headers={"Idempotency-Key": key})
        except httpx.TransportError:
            continue
        if response.status_code == 202:
            return dict(response.json())
        assert response.status_code == 503, response.text  # Redis down for a moment: store_unavailable
        threading.Event().wait(0.1)
    raise AssertionError(f"batch {key} was never acknowledged")


def test_v2_flow_across_replicas_equals_one_process(balanced: httpx.Client, client: httpx.Client,
                                                    replicas: list[Server]) -> None:
    batches = chunked_batches()
    created = balanced.post("/v2/sessions", json=sample_context())
    assert created.status_code == 201
    sid = created.json()["session_id"]
    for n, batch in enumerate(batches, 1):
        ack = balanced.post(f"/v2/sessions/{sid}/observations", json=batch, headers={"Idempotency-Key": f"b{n}"})
        assert ack.status_code == 202 and ack.json()["batch"] == n, ack.text
    retry = balanced.post(f"/v2/sessions/{sid}/observations", json=batches[0], headers={"Idempotency-Key": "b1"})
    assert retry.json()["replayed"] and retry.json()["batch"] == 1  # a retry on another replica: not ingested again
    results = [balanced.post(f"/v2/sessions/{sid}/attribute") for _ in replicas]
    assert [r.json()["revision"] for r in results] == [1, 2, 3]
    reference = single_process(client, batches)
    assert all(result_bytes(r.content) == reference for r in results)
    states = [balanced.get(f"/v2/sessions/{sid}").json() for _ in replicas]
    assert {(s["batches"], s["revision"]) for s in states} == {(len(batches), 3)}
    assert verdict(states[0]["last_result"]) == EXPECTED
    assert balanced.delete(f"/v2/sessions/{sid}").status_code == 204
    gone = [balanced.get(f"/v2/sessions/{sid}") for _ in replicas]
    assert all(g.status_code == 404 and "deleted" in g.json()["message"] for g in gone)
    assert isinstance(balanced._transport, RoundRobin) and min(balanced._transport.sent) > len(batches) // 3


def test_fact_client_flow_across_replicas_equals_one_process(replicas: list[Server], server: Server) -> None:
    """The public FACT client's path (docs/service.md, v1), each request on the next replica, against the same
    flow on one process: the same attribution, byte for byte."""
    answers = []
    for transport in (RoundRobin([s.url for s in replicas]), RoundRobin([server.url])):
        fact = FactClient("http://balancer")
        fact.http = httpx.Client(transport=transport, timeout=60.0, headers={"accept": "application/json"})
        attributor = fact.create_attributor(job_id="4100001", nodes=NODES, ranks_per_node=4, start=START, end=END)
        for source in ("syslog", "applog"):
            entries = [(node, ns, line) for node, src, text in sample_files() if src == source
                       for ns, line in stamped(text)]
            assert fact.post_streams(attributor, loki_streams(entries), source=source, start=START, end=END)
        base_ns = int((END - timedelta(seconds=1)).timestamp() * 1e9)
        for node in NODES:  # the public client's dmesg path: host-prefixed lines, one observation per node
            text = {(n, s): t for n, s, t in sample_files()}[(node, "syslog")]
            dmesg = [f"{node}: {line.split('kernel: ', 1)[1]}" for line in text.splitlines() if "kernel: " in line]
            entries = [(*split_prefixed(line, node)[:1], base_ns + i, split_prefixed(line, node)[1])
                       for i, line in enumerate(dmesg)]
            fact.post_streams(attributor, loki_streams(entries), source="syslog", start=START, end=END)
        first = fact.http.get(f"{fact.base}/attributor/{attributor}/attribution")
        again = fact.http.get(f"{fact.base}/attributor/{attributor}/attribution")  # another replica: same answer
        assert first.content == again.content
        assert fact.faulty_nodes(first.json()) == ["node-02"]
        answers.append(first.content)
        fact.close()
    assert answers[0] == answers[1]


def test_a_replica_killed_mid_ingest_loses_no_acknowledged_batch(tmp_path: Path, client: httpx.Client) -> None:
    """Four clients post batches at once through the balancer; one replica is killed (SIGKILL) while they do. Every
    batch is retried until acknowledged; the session then holds each exactly once, and its result equals one
    process fed the batches in the order the replicas applied them."""
    ensure_redis()
    flush(DB + 1)
    servers = start_replicas(tmp_path, 3, DB + 1)
    try:
        batches = chunked_batches(lines_per_batch=3)
        with balanced_client(servers) as balanced:
            sid = balanced.post("/v2/sessions", json=sample_context()).json()["session_id"]
            url = f"/v2/sessions/{sid}/observations"
            transport = balanced._transport
            assert isinstance(transport, RoundRobin)

            def send(n: int) -> tuple[int, dict[str, Any]]:
                if n == len(batches) // 3:
                    servers[1].process.send_signal(signal.SIGKILL)  # mid-ingest: other batches are in flight
                    transport.down.add(1)  # the balancer's health check notices
                return n, post_until_acknowledged(balanced, url, batches[n], f"k{n}")

            with ThreadPoolExecutor(4) as pool:
                acks = dict(pool.map(send, range(len(batches))))
            assert servers[1].process.wait(10) == -signal.SIGKILL
            assert sorted(a["batch"] for a in acks.values()) == list(range(1, len(batches) + 1))
            state = balanced.get(f"/v2/sessions/{sid}").json()
            assert state["batches"] == len(batches)
            assert state["observations"] == sum(a["accepted"] for a in acks.values())
            result = result_bytes(balanced.post(f"/v2/sessions/{sid}/attribute").content)
        applied = [batches[n] for n, _ in sorted(acks.items(), key=lambda item: item[1]["batch"])]
        assert result == single_process(client, applied)
    finally:
        for s in servers:
            s.stop()


def test_redis_restarted_mid_session_keeps_every_acknowledged_batch(replicas: list[Server], balanced: httpx.Client,
                                                                     client: httpx.Client) -> None:
    batches = chunked_batches()
    sid = balanced.post("/v2/sessions", json=sample_context()).json()["session_id"]
    url = f"/v2/sessions/{sid}/observations"
    half = len(batches) // 2
    for n, batch in enumerate(batches[:half]):
        post_until_acknowledged(balanced, url, batch, f"r{n}")
    before = result_bytes(balanced.post(f"/v2/sessions/{sid}/attribute").content)
    down = restart_redis()
    assert down < 30
    for n, batch in enumerate(batches[half:], half):
        post_until_acknowledged(balanced, url, batch, f"r{n}")
    assert post_until_acknowledged(balanced, url, batches[0], "r0")["replayed"]  # its key survived too
    after = [result_bytes(balanced.post(f"/v2/sessions/{sid}/attribute").content) for _ in replicas]
    assert before == single_process(client, batches[:half])
    assert after == [single_process(client, batches)] * len(replicas)
