"""The v1 compatibility API driven by a client written against the public FACT contract."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from datetime import UTC, datetime, timedelta

import httpx
import pytest

from tests.service.fact_client import FactClient, loki_streams, split_prefixed
from tests.service.live_server import (
    EXPECTED,
    Server,
    raw_text_batch,
    sample_context,
    sample_files,
    stamped,
    verdict,
)

START = datetime(2026, 3, 2, 8, 0, 5, tzinfo=UTC)
END = datetime(2026, 3, 2, 9, 12, 40, tzinfo=UTC)
NODES = ["node-01", "node-02", "node-03"]


@pytest.fixture
def fact(server: Server) -> Iterator[FactClient]:
    c = FactClient(server.url)
    yield c
    c.close()


def test_sample_through_v1_gives_the_v2_diagnosis(client: httpx.Client, fact: FactClient,
                                                  new_session: Callable[..., str]) -> None:
    v2_sid = new_session()
    for node, source, text in sample_files():
        assert client.post(f"/v2/sessions/{v2_sid}/observations",
                           json=raw_text_batch(node, source, text)).status_code == 202
    v2_result = client.post(f"/v2/sessions/{v2_sid}/attribute").json()["result"]

    attributor = fact.create_attributor(job_id="4100001", nodes=NODES, ranks_per_node=4, start=START, end=END)
    for source in ("syslog", "applog"):
        entries = [(node, ns, line) for node, src, text in sample_files() if src == source
                   for ns, line in stamped(text)]
        observation_id = fact.post_streams(attributor, loki_streams(entries), source=source, start=START, end=END)
        assert observation_id
    attribution = fact.attribution(attributor)
    assert fact.faulty_nodes(attribution) == ["node-02"]

    v1_result = client.get(f"/v2/sessions/{attributor}").json()["last_result"]  # v1 sessions are v2 sessions
    assert verdict(v1_result) == verdict(v2_result) == EXPECTED
    assert v1_result["root_cause"]["symptom"] == v2_result["root_cause"]["symptom"]

    items = {item["node"]: item for item in attribution["attributions"]}
    assert sorted(items) == NODES and all(item["type"] == "NodeAttribution" for item in items.values())
    assert items["node-01"]["attributions"] == [] and items["node-03"]["attributions"] == []
    finding = items["node-02"]["attributions"][0]
    assert finding["sub_domain"] == "nvlink" and finding["outcome"] == "Fail InfraHW"
    assert finding["symptom"] == v2_result["root_cause"]["symptom"]
    assert finding["evidence"] and finding["evidence"][0]["node"] == "node-02"
    assert "Xid" in finding["evidence"][0]["text"]  # the envelope's body, not the JSON envelope


def test_public_client_dmesg_flow(fact: FactClient) -> None:
    """Exactly the public client's path: host-prefixed dmesg text, synthetic Loki times near the end of the
    collection window, naive ISO times, one syslog observation per node."""
    start, end = START.replace(tzinfo=None), END.replace(tzinfo=None)
    attributor = fact.create_attributor(job_id="4100001:cycle0:1", nodes=NODES, ranks_per_node=4, start=start,
                                        end=end)
    base_ns = int((END - timedelta(seconds=1)).timestamp() * 1e9)
    for node in NODES:
        text = {(n, s): t for n, s, t in sample_files()}[(node, "syslog")]
        dmesg = [f"{node}: {line.split('kernel: ', 1)[1]}" for line in text.splitlines() if "kernel: " in line]
        entries = []
        for i, line in enumerate(dmesg):
            host, message = split_prefixed(line, node)
            entries.append((host, base_ns + i, message))
        fact.post_streams(attributor, loki_streams(entries), source="syslog", start=start, end=end)
    attribution = fact.attribution(attributor)
    assert fact.faulty_nodes(attribution) == ["node-02"]
    assert [i["node"] for i in attribution["attributions"]] == NODES


def test_v2_session_is_readable_through_v1_and_results_are_reused(client: httpx.Client, fact: FactClient,
                                                                   new_session: Callable[..., str]) -> None:
    sid = new_session(sample_context())
    for node, source, text in sample_files():
        client.post(f"/v2/sessions/{sid}/observations", json=raw_text_batch(node, source, text))
    first = fact.attribution(sid)
    assert fact.faulty_nodes(first) == ["node-02"]
    assert fact.attribution(sid)["revision"] == first["revision"]  # no new evidence: the same result
    assert client.post(f"/v2/sessions/{sid}/attribute").json()["revision"] == first["revision"] + 1


def test_v1_errors(client: httpx.Client) -> None:
    missing = client.get("/latest/attributor/nope/attribution")
    assert missing.status_code == 404 and missing.json()["error_code"] == "session_not_found"
    bad_ruleset = client.post("/latest/attributor", json={"workload": {"id": "j"}, "metadata": {"ruleset": "x"}})
    assert bad_ruleset.status_code == 422 and "ruleset" in bad_ruleset.json()["message"]
    attributor = client.post("/latest/attributor", json={"workload": {"id": "j", "nodes": ["a"]}}).json()
    url = f"/latest/attributor/{attributor['attributor_id']}/observation"
    context = {"source": "syslog", "format": "raw_loki_streams"}
    not_json = client.post(url, json={"context": context, "body": "[{not json"})
    assert not_json.status_code == 422 and "JSON" in not_json.json()["message"]
    bad_source = client.post(url, json={"context": {**context, "source": "tape"}, "body": "[]"})
    assert bad_source.status_code == 422 and bad_source.json()["error_code"] == "unknown_source"
    bad_shape = client.post(url, json={"context": context, "body": '[{"values": [["x", "line"]]}]'})
    assert bad_shape.status_code == 422 and bad_shape.json()["error_code"] == "invalid_request"
