"""Node fault history through the service: an optional `history` in the session context (v2), kept with the session
(in memory and on Redis, whichever replica attributes) and used as `analyze --history` uses it; a malformed one is a
422 naming the field. The v1 compatibility API takes none and answers as before."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import httpx

from firstfault.engine import ExecutionContext
from firstfault.wire import RawTextBatch
from tests.service.replicas import ensure_redis, flush, redis_url
from tests.service.test_v2_sample import attribute, ingest

CUDA_UNKNOWN = "2026-03-02T08:30:00Z [rank6]: RuntimeError: CUDA error: unknown error"
PROGRESS = "2026-03-02T08:20:00Z [rank0]: step 100 | loss 2.1"
HISTORY = {"window_days": 14, "findings": [
    {"node": "n2", "symptom": "CUDA unknown error", "rule": "CudaError", "sub_domain": "gpu",
     "time": "2026-02-25T04:00:00Z", "workload_id": "slurm:4411", "attempt": 1},
    {"node": "n2", "symptom": "CUDA unknown error", "sub_domain": "gpu", "time": "2026-01-05T04:00:00Z",
     "workload_id": "slurm:3000"}]}


def _context(**extra: Any) -> dict[str, Any]:
    return {"workload_id": "slurm:5000", "scheduler": "slurm", "nodes": ["n1", "n2"],
            "start_time": "2026-03-02T08:00:00Z", "end_time": "2026-03-02T09:00:00Z", "scheduler_state": "FAILED",
            **extra}


def _batches() -> list[dict[str, Any]]:
    return [{"format": "raw_text", "node": node, "source": "applog", "origin": f"{node}/applog.log", "text": text}
            for node, text in (("n1", PROGRESS), ("n2", CUDA_UNKNOWN))]


def test_a_session_with_history_gets_the_supported_answer(client: httpx.Client,
                                                           new_session: Callable[..., str]) -> None:
    plain, given = new_session(_context()), new_session(_context(history=HISTORY))
    results = {}
    for sid in (plain, given):
        for batch in _batches():
            ingest(client, sid, batch)
        results[sid] = attribute(client, sid)["result"]
    assert results[plain]["confidence"] == "medium" and "history" not in results[plain]["coverage"]
    [culprit] = results[given]["culprit_nodes"]
    assert culprit["node"] == "n2" and results[given]["confidence"] == "high"
    assert [(f["workload_id"], f["attempt"]) for f in culprit["history"]] == [("slurm:4411", 1)]
    assert results[given]["coverage"]["history"] == {"findings": 2, "counted": 1, "window_days": 14,
                                                     "since": "2026-02-16T08:00:00Z",
                                                     "earliest": "2026-02-25T04:00:00Z"}
    assert client.get(f"/v2/sessions/{given}").json()["context"]["history"]["window_days"] == 14
    assert "history" not in client.get(f"/v2/sessions/{plain}").json()["context"]


def test_malformed_history_is_refused_naming_the_field(client: httpx.Client) -> None:
    bad = {"findings": [{**HISTORY["findings"][0], "time": "last tuesday"}]}
    response = client.post("/v2/sessions", json=_context(history=bad))
    assert response.status_code == 422, response.text
    assert "history" in response.text and "time" in response.text


def test_history_survives_a_replica_hop_on_redis() -> None:
    from firstfault.service.core import AttributionService
    from firstfault.service.settings import Settings
    from firstfault.tools.verify import default_engine

    ensure_redis()
    flush(7)
    a, b = (AttributionService(default_engine(), Settings(store=redis_url(7))) for _ in range(2))
    try:
        sid = a.create_session(ExecutionContext.model_validate(_context(history=HISTORY)))
        for batch in _batches():
            a.ingest(sid, RawTextBatch.model_validate(batch))
        result = b.attribute(sid).result
        assert result.confidence == "high" and result.culprit_nodes[0].history is not None
        assert [f.workload_id for f in result.culprit_nodes[0].history] == ["slurm:4411"]
    finally:
        for service in (a, b):
            service.store.close()
