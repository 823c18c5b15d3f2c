"""The observation formats of the ingest endpoint."""

from __future__ import annotations

import json
from collections.abc import Callable

import httpx
import pytest
from pydantic import ValidationError

from firstfault.wire import LokiStream
from tests.service.live_server import EXPECTED, raw_text_batch, sample_context, sample_files, stamped, verdict

T0 = 1772438400  # 2026-03-02T08:00:00Z
CONTEXT = {"workload_id": "fmt", "nodes": ["gpu-1", "gpu-2"], "start_time": "2026-03-02T08:00:00Z",
           "end_time": "2026-03-02T09:00:00Z", "scheduler_state": "FAILED"}
XID = "NVRM: Xid (PCI:0000:91:00): 79, pid='<unknown>', name=<unknown>, GPU has fallen off the bus."


def post(client: httpx.Client, sid: str, batch: dict) -> httpx.Response:
    return client.post(f"/v2/sessions/{sid}/observations", json=batch)


def coverage(client: httpx.Client, sid: str) -> dict[tuple[str, str], dict]:
    result = client.post(f"/v2/sessions/{sid}/attribute").json()["result"]
    return {(s["node"], s["source"]): s for s in result["coverage"]["sources"]}


def loki_value(offset_s: int, line: str) -> list[str]:
    return [str((T0 + offset_s) * 1_000_000_000), line]


def test_loki_streams_with_envelopes_labels_and_backward_order(client: httpx.Client,
                                                              new_session: Callable[..., str]) -> None:
    sid = new_session(CONTEXT)
    envelope = json.dumps({"body": XID, "severity": "err", "attributes": {"hostname": "gpu-2"}, "resources": {}})
    streams = [
        {"stream": {"host": "gpu-1", "job": "kernel"},
         "values": [loki_value(20, "kernel: all good"), loki_value(10, "kernel: booted")]},  # newest first
        {"stream": {"job": "kernel"}, "values": [loki_value(30, envelope)]},  # node from the envelope
    ]
    ack = post(client, sid, {"format": "raw_loki_streams", "source": "syslog", "node_label": "host",
                             "streams": streams})
    assert ack.status_code == 202 and ack.json()["accepted"] == 3
    body = client.post(f"/v2/sessions/{sid}/attribute").json()
    assert [c["node"] for c in body["result"]["culprit_nodes"]] == ["gpu-2"]
    evidence = body["result"]["root_cause"]["evidence"][0]
    assert evidence["text"] == XID and evidence["time"].startswith("2026-03-02T08:00:30")
    assert evidence["provenance"]["labels"] == {"job": "kernel"}
    sources = {(s["node"], s["source"]): s for s in body["result"]["coverage"]["sources"]}
    assert sources[("gpu-1", "syslog")]["observations"] == 2


def test_loki_streams_as_a_json_string(client: httpx.Client, new_session: Callable[..., str]) -> None:
    sid = new_session(CONTEXT)
    streams = [{"stream": {"hostname": "gpu-1"}, "values": [loki_value(5, XID)]}]
    ack = post(client, sid, {"format": "raw_loki_streams", "source": "syslog", "streams": json.dumps(streams)})
    assert ack.status_code == 202 and ack.json()["accepted"] == 1
    result = client.post(f"/v2/sessions/{sid}/attribute").json()["result"]
    assert [c["node"] for c in result["culprit_nodes"]] == ["gpu-1"]


def test_bad_loki_timestamps_are_refused(client: httpx.Client, new_session: Callable[..., str]) -> None:
    sid = new_session(CONTEXT)
    for stamp in ("yesterday", "-5", str(10**25)):
        response = post(client, sid, {"format": "raw_loki_streams", "source": "syslog",
                                      "streams": [{"stream": {}, "values": [[stamp, "x"]]}]})
        assert response.status_code == 422 and response.json()["error_code"] == "invalid_request", stamp


def prom_series(labels: dict[str, str], values: list[tuple[float, str]]) -> dict:
    return {"metric": {"__name__": "DCGM_FI_DEV_XID_ERRORS", **labels}, "values": [[t, v] for t, v in values]}


def test_prometheus_result_and_whole_response(client: httpx.Client, new_session: Callable[..., str]) -> None:
    sid = new_session(CONTEXT)
    series = [prom_series({"Hostname": "gpu-1", "gpu": "0"}, [(T0 + 15.0, "0"), (T0 + 30.5, "79"), (T0 + 45, "NaN")]),
              prom_series({"instance": "gpu-2:9400", "gpu": "1"}, [(T0 + 15.0, "0")])]
    ack = post(client, sid, {"format": "prometheus_metrics", "result": series})
    assert ack.status_code == 202 and ack.json()["accepted"] == 3  # NaN is skipped
    assert post(client, sid, {"format": "prometheus_metrics"}).json()["accepted"] == 0
    whole = {"status": "success", "data": {"resultType": "matrix", "result": [
        prom_series({"node": "gpu-2"}, [(T0 + 60, "1"), (T0 + 75, "2")])]}}
    ack = post(client, sid, {"format": "prometheus_metrics", **whole})
    assert ack.status_code == 202 and ack.json()["accepted"] == 2
    sources = coverage(client, sid)
    assert sources[("gpu-1", "node_metrics")]["observations"] == 2
    assert sources[("gpu-2", "node_metrics")]["observations"] == 3  # instance port stripped, then node label


def test_prometheus_bad_input(client: httpx.Client, new_session: Callable[..., str]) -> None:
    sid = new_session(CONTEXT)
    cases = [
        {"format": "prometheus_metrics", "result": [{"metric": {}, "values": [[True, "1"]]}]},  # bool time
        {"format": "prometheus_metrics", "result": [{"metric": {}, "values": [[T0, False]]}]},
        {"format": "prometheus_metrics", "result": [{"metric": {"gpu": 0}, "values": []}]},
        {"format": "prometheus_metrics", "result": [prom_series({}, [(T0, "high")])]},
        {"format": "prometheus_metrics", "result": [prom_series({}, [(-1.0, "1")])]},
        {"format": "prometheus_metrics", "status": "error", "data": {"result": []}},
    ]
    for batch in cases:
        response = post(client, sid, batch)
        assert response.status_code == 422 and response.json()["error_code"] == "invalid_request", batch


def test_raw_text_line_numbers_and_crlf(client: httpx.Client, new_session: Callable[..., str]) -> None:
    sid = new_session(CONTEXT)
    text = "Mar  2 08:10:00 gpu-1 kernel: hello\r\n" * 41 + f"Mar  2 08:10:01 gpu-1 kernel: {XID}\r\n"
    ack = post(client, sid, {"format": "raw_text", "node": "gpu-1", "source": "syslog", "first_line": 1001,
                             "text": text})
    assert ack.json()["accepted"] == 42
    result = client.post(f"/v2/sessions/{sid}/attribute").json()["result"]
    evidence = result["root_cause"]["evidence"][0]
    assert evidence["provenance"] == {"origin": "raw:gpu-1/syslog", "line": 1042, "offset": None, "labels": {}}
    assert evidence["text"].endswith("fallen off the bus.")  # no trailing \r


def test_formats_can_be_mixed_in_one_session(client: httpx.Client, new_session: Callable[..., str]) -> None:
    sid = new_session(sample_context())
    for node, source, text in sample_files():
        if source == "syslog":
            streams = [{"stream": {"hostname": node}, "values": [[str(ns), line] for ns, line in stamped(text)]}]
            assert post(client, sid, {"format": "raw_loki_streams", "source": "syslog", "streams": streams}
                        ).status_code == 202
        else:
            assert post(client, sid, raw_text_batch(node, source, text)).status_code == 202
    assert verdict(client.post(f"/v2/sessions/{sid}/attribute").json()["result"]) == EXPECTED


@pytest.mark.parametrize("loki", [False, True], ids=["raw text", "raw text and loki"])
def test_a_bundle_gives_the_result_of_its_batches_sent_one_by_one(client: httpx.Client,
                                                                  new_session: Callable[..., str], loki: bool) -> None:
    members = []
    for node, source, text in sample_files():
        if source == "syslog" and loki:
            streams = [{"stream": {"hostname": node}, "values": [[str(ns), line] for ns, line in stamped(text)]}]
            members.append({"format": "raw_loki_streams", "source": "syslog", "streams": streams})
        else:
            members.append(raw_text_batch(node, source, text))
    one_by_one = new_session(sample_context())
    for member in members:
        assert post(client, one_by_one, member).status_code == 202
    bundled = new_session(sample_context())
    ack = post(client, bundled, {"format": "bundle", "batches": members})
    assert ack.status_code == 202, ack.text
    expected = client.post(f"/v2/sessions/{one_by_one}/attribute").json()
    answer = client.post(f"/v2/sessions/{bundled}/attribute").json()
    assert answer["result"] == expected["result"] and verdict(answer["result"]) == EXPECTED
    assert answer["computed_from"]["observations"] == expected["computed_from"]["observations"] == ack.json()["accepted"]
    assert answer["computed_from"]["batches"] == 1 and ack.json()["batch"] == 1  # the bundle is one batch


@pytest.mark.parametrize(("batches", "where"), [
    ([{"format": "raw_text", "node": "node-01", "source": "applog", "text": "ok"},
      {"format": "raw_text", "node": "node-02", "source": "journal", "text": "x"}], "batches.1"),
    ([{"format": "raw_text", "source": "applog", "text": "ok"}, {"format": "bundle", "batches": []}], "batches.1"),
    ([], "batches"),
])
def test_a_bundle_with_a_bad_member_is_refused_whole_naming_it(client: httpx.Client, new_session: Callable[..., str],
                                                             batches: list[dict], where: str) -> None:
    sid = new_session(sample_context())
    response = post(client, sid, {"format": "bundle", "batches": batches})
    assert response.status_code == 422 and response.json()["error_code"] == "invalid_request"
    assert where in response.json()["message"], response.text
    assert client.get(f"/v2/sessions/{sid}").json()["observations"] == 0  # nothing of it was taken


@pytest.mark.parametrize(("stamps", "error"), [
    (["1700000000000000000", "1700000000000000001"], None),
    (["1700000000000000000", "x"], "Loki timestamps are Unix epoch nanoseconds"),
    (["99999999999999999999", "9" * 5000], "Loki timestamps are Unix epoch nanoseconds"),  # the first bad one's
    (["1700000000000000000", "9" * 5000], "Exceeds the limit"),
])
def test_loki_stamps_checked_at_once_refused_at_the_first_bad_one(stamps: list[str], error: str | None) -> None:
    values = [[stamp, "line"] for stamp in stamps]
    if error is None:
        assert len(LokiStream.model_validate({"values": values}).values) == len(stamps)
    else:
        with pytest.raises(ValidationError, match=error):
            LokiStream.model_validate({"values": values})
