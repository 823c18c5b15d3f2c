"""A batch is applied all or nothing, and a session stays readable whatever was sent to it (issue 14, items 1-2).

The HTTP tests send what broke the service before: lines stamped at the edge of the calendar in the second half
of a batch (an offset then overflows date arithmetic), and a Loki envelope whose `attributes.hostname` is a lone
surrogate. Whatever the engine makes of them (refuses them, or clamps the times), the answer is never a 5xx, a
retry with the same Idempotency-Key never counts twice, and every read of the session answers.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import httpx
import pytest

from firstfault.engine import ExecutionContext, SourceKind
from firstfault.engine.session import Session
from firstfault.errors import ServiceError
from firstfault.service.core import AttributionService
from firstfault.service.settings import Settings
from firstfault.tools.verify import default_engine
from firstfault.wire import RawTextBatch

CONTEXT = {"workload_id": "edges", "nodes": ["n1", "n2"], "start_time": "2026-03-02T08:00:00Z",
           "end_time": "2026-03-02T09:00:00Z"}
XID = "{stamp} n1 kernel: NVRM: Xid (PCI:0000:91:00): 79, pid=1, name=python, GPU has fallen off the bus."


def xid_count(result: dict[str, Any]) -> int:
    return sum(s["count"] for s in result["symptoms"] if s["symptom"] == "XID-79")


def assert_readable(client: httpx.Client, sid: str) -> dict[str, Any]:
    """Every read of the session answers 2xx; returns the attribute answer."""
    assert client.get(f"/v2/sessions/{sid}").status_code == 200
    attributed = client.post(f"/v2/sessions/{sid}/attribute")
    assert attributed.status_code == 200, attributed.text
    assert client.get(f"/v2/sessions/{sid}").status_code == 200
    assert client.get(f"/latest/attributor/{sid}/attribution").status_code == 200
    return dict(attributed.json())


@pytest.mark.parametrize(("stamp", "offset_minutes"), [("9999-12-31T23:59:30", -600), ("0001-01-01T00:00:00", 600),
                                                       ("9999-12-31T23:59:30Z", 0)])
def test_a_batch_with_edge_of_calendar_stamps_in_its_second_half_is_applied_once_or_not_at_all(
        client: httpx.Client, new_session: Callable[..., str], stamp: str, offset_minutes: int) -> None:
    sid = new_session(CONTEXT)
    lines = [XID.format(stamp="2026-03-02T08:10:00")] * 3 + [XID.format(stamp=stamp)] * 3
    batch = {"format": "raw_text", "node": "n1", "source": "syslog", "text": "\n".join(lines) + "\n",
             "utc_offset_minutes": offset_minutes}
    url = f"/v2/sessions/{sid}/observations"
    answers = [client.post(url, json=batch, headers={"Idempotency-Key": "edge"}) for _ in range(2)]
    assert all(a.status_code < 500 for a in answers), [a.text for a in answers]
    assert answers[0].status_code == answers[1].status_code
    accepted = answers[0].status_code == 202
    if not accepted:
        assert answers[0].json()["error_code"] and answers[0].json()["message"]
    assert client.get(f"/v2/sessions/{sid}").json()["observations"] == (6 if accepted else 0)
    assert xid_count(assert_readable(client, sid)["result"]) == (6 if accepted else 0)
    # the session still takes evidence, once per batch
    good = {"format": "raw_text", "node": "n1", "source": "syslog", "text": XID.format(stamp="2026-03-02T08:11:00")}
    assert client.post(url, json=good, headers={"Idempotency-Key": "good"}).status_code == 202
    assert xid_count(assert_readable(client, sid)["result"]) == (7 if accepted else 1)


def test_a_loki_envelope_naming_a_lone_surrogate_host_does_not_poison_the_session(
        client: httpx.Client, new_session: Callable[..., str]) -> None:
    sid = new_session(CONTEXT)
    envelope = ('{\\"body\\": \\"NVRM: Xid (PCI:0000:91:00): 79, pid=1, name=python, GPU has fallen off the bus.\\", '
                '\\"attributes\\": {\\"hostname\\": \\"\\\\ud800\\"}}')
    raw = ('{"format": "raw_loki_streams", "source": "syslog", "streams": [{"stream": {}, "values": '
           '[["1772438400000000000", "' + envelope + '"]]}]}').encode()
    assert b'\\\\ud800' in raw  # the escape itself travels, as a log shipper would write it
    url = f"/v2/sessions/{sid}/observations"
    for _ in range(2):
        answer = client.post(url, content=raw, headers={"content-type": "application/json", "Idempotency-Key": "s"})
        assert answer.status_code < 500, answer.text
    assert_readable(client, sid)
    good = {"format": "raw_text", "node": "n1", "source": "syslog", "text": XID.format(stamp="2026-03-02T08:11:00")}
    assert client.post(url, json=good).status_code == 202
    assert xid_count(assert_readable(client, sid)["result"]) >= 1


def test_a_batch_the_engine_fails_on_midway_changes_nothing(monkeypatch: pytest.MonkeyPatch) -> None:
    """In-process, with the engine made to fail on the batch's second stream: nothing of the first is kept, the
    idempotency key is released, and the retry (the engine working again) is counted once."""
    service = AttributionService(default_engine(), Settings())
    context = ExecutionContext(workload_id="w", nodes=["n1", "n2"], end_time="2026-03-02T09:00:00Z")
    sid = service.create_session(context)
    batch = RawTextBatch(format="raw_text", node="n1", source="syslog",
                         text="\n".join([XID.format(stamp="Mar  2 08:10:01")] * 4))
    real = Session.ingest_block
    calls = []

    def fail_after_first_lines(self: Session, *args: Any, **kwargs: Any) -> int:
        calls.append(1)
        real(self, *args, **kwargs)  # the lines are in, then the engine fails
        raise OverflowError("date value out of range")

    monkeypatch.setattr(Session, "ingest_block", fail_after_first_lines)
    with pytest.raises(ServiceError) as refused:
        service.ingest(sid, batch, "key", "fingerprint")
    assert refused.value.status == 422 and "OverflowError" in refused.value.message and calls
    monkeypatch.setattr(Session, "ingest_block", real)
    state = service.describe(sid)
    assert (state.observations, state.batches) == (0, 0)
    assert service.attribute(sid).result.symptoms == []
    ack = service.ingest(sid, batch, "key", "fingerprint")
    assert not ack.replayed and ack.accepted == 4
    assert service.ingest(sid, batch, "key", "fingerprint").replayed
    assert [s.count for s in service.attribute(sid).result.symptoms if s.symptom == "XID-79"] == [4]


@pytest.mark.parametrize("store", ["memory", "redis"])
def test_the_event_key_cap_across_batches_merges_exactly_and_one_batch_over_it_is_refused_whole(store: str) -> None:
    """With a cap of 6 distinct events per session: batches that reach it together give the result of one session
    that read them itself; a batch that alone holds more is refused (413) and changes nothing."""
    from dataclasses import replace

    from firstfault.engine import Engine
    from firstfault.engine.params import Params
    from tests.service.replicas import ensure_redis, flush, redis_url

    engine = Engine(default_engine().catalog, replace(Params(), max_event_keys=6))
    if store == "redis":
        ensure_redis()
        flush(8)
    service = AttributionService(engine, Settings(store=redis_url(8) if store == "redis" else ""))
    context = ExecutionContext(workload_id="w", nodes=["n1", "n2"], end_time="2026-03-02T09:00:00Z")
    batches = [RawTextBatch(format="raw_text", node="n1", source="syslog", origin=f"n1/s{b}",
                            text="\n".join(XID.format(stamp=f"Mar  2 08:1{b}:0{i}").replace("91:00", f"a{b * 3 + i:x}:00")
                                           for i in range(3))) for b in range(4)]
    sid = service.create_session(context)
    for b in batches:
        service.ingest(sid, b)
    reference = engine.session(context)
    for b in batches:
        reference.ingest_lines("n1", SourceKind.SYSLOG, b.text.split("\n"), b.origin)
    result = service.attribute(sid).result
    assert "more than 6 distinct event keys" in " ".join(result.coverage.issues)
    assert result.to_json() == reference.attribute().to_json()
    other = service.create_session(context)
    big = RawTextBatch(format="raw_text", node="n1", source="syslog",
                       text="\n".join(XID.format(stamp="Mar  2 08:10:01").replace("91:00", f"{i:02x}:00")
                                      for i in range(9)))
    with pytest.raises(ServiceError) as refused:
        service.ingest(other, big, "key", "f")
    assert refused.value.status == 413 and refused.value.error_code == "batch_event_limit"
    assert "smaller batches" in refused.value.message and service.describe(other).batches == 0
    service.store.close()
