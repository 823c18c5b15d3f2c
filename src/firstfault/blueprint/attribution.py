"""Attribution backends: the engine in-process (the default) or the HTTP service's v2 API.

Both take the same observation batches, so the same evidence gives the same diagnosis either way.
"""

from __future__ import annotations

import math
import uuid
from datetime import datetime, timedelta, timezone
from typing import Any, Protocol

from firstfault.blueprint.base import Batch, LineBatch, LokiBatch, MetricBatch
from firstfault.blueprint.config import ConfigError, ConnectorSpec
from firstfault.blueprint.http import HttpError, RetryingClient, auth_headers
from firstfault.blueprint.result import Mode
from firstfault.engine import Attribution, ExecutionContext, Observation, Session, SourceKind, default_engine
from firstfault.engine.model import MetricSample, Provenance

_EPOCH = datetime(1970, 1, 1, tzinfo=timezone.utc)


class AttributionError(Exception):
    """The backend could not attribute the workload (service unreachable, rejected input ...)."""


class AttributionSession(Protocol):
    def add(self, batch: Batch) -> None: ...
    def attribute(self) -> Attribution: ...
    def close(self) -> None: ...


class Attributor(Protocol):
    mode: Mode

    def open(self, ctx: ExecutionContext) -> AttributionSession: ...
    def close(self) -> None: ...


def from_nanoseconds(ns: str | int) -> datetime:
    return _EPOCH + timedelta(microseconds=int(ns) // 1000)


def metric_observations(batch: MetricBatch) -> list[Observation]:
    """A Prometheus matrix as node_metrics observations: the node is the `node_label` label, the sample keeps
    every label (`__name__` included) and non-finite values (`NaN`, `+Inf`) are skipped, as the service does."""
    out: list[Observation] = []
    for series in batch.result:
        labels = dict(sorted(series["metric"].items()))
        provenance = Provenance(origin=batch.origin, labels=labels)
        for ts, raw in series["values"]:
            value = float(raw)
            if math.isfinite(value):
                out.append(Observation(source=SourceKind.NODE_METRICS, node=labels.get(batch.node_label),
                                       observed_at=_EPOCH + timedelta(seconds=float(ts)),
                                       metric=MetricSample(name=labels.get("__name__", ""), labels=labels, value=value),
                                       provenance=provenance))
    return out


def ingest_batch(session: Session, batch: Batch) -> None:
    """Feed one batch into an engine session (the embedded path)."""
    if isinstance(batch, LineBatch):
        session.ingest_lines(batch.node, batch.source, batch.lines, batch.origin, first_line=batch.first_line)
    elif isinstance(batch, LokiBatch):
        for stream in batch.streams:
            labels = {str(k): str(v) for k, v in sorted(stream["stream"].items())}
            session.ingest_lines(labels.get(batch.node_label), batch.source, [v[1] for v in stream["values"]],
                                 batch.origin, times=[from_nanoseconds(v[0]) for v in stream["values"]],
                                 labels=labels)
    else:
        session.ingest(metric_observations(batch))


def wire_payload(batch: Batch) -> dict[str, Any]:
    """The body of `POST /v2/sessions/{id}/observations` for one batch (the service path)."""
    if isinstance(batch, LineBatch):
        return {"format": "raw_text", "node": batch.node, "source": batch.source.value, "origin": batch.origin,
                "first_line": batch.first_line, "text": "\n".join(batch.lines)}
    if isinstance(batch, LokiBatch):
        return {"format": "raw_loki_streams", "source": batch.source.value, "node_label": batch.node_label,
                "origin": batch.origin, "streams": batch.streams}
    return {"format": "prometheus_metrics", "node_label": batch.node_label, "origin": batch.origin,
            "result": batch.result}


class _EmbeddedSession:
    def __init__(self, session: Session) -> None:
        self.session = session

    def add(self, batch: Batch) -> None:
        ingest_batch(self.session, batch)

    def attribute(self) -> Attribution:
        return self.session.attribute()

    def close(self) -> None:
        return None


class EmbeddedAttributor:
    mode: Mode = "embedded"

    def __init__(self) -> None:
        self.engine = default_engine()

    def open(self, ctx: ExecutionContext) -> AttributionSession:
        return _EmbeddedSession(self.engine.session(ctx))

    def close(self) -> None:
        return None


class _ServiceSession:
    def __init__(self, client: RetryingClient, session_id: str) -> None:
        self.client = client
        self.session_id = session_id
        self.truncated_lines = 0

    def add(self, batch: Batch) -> None:
        # one key per batch, reused by every retry of it: the service applies the batch once
        key = f"{self.session_id}-{uuid.uuid4()}"
        answer = _call(self.client, "POST", f"/v2/sessions/{self.session_id}/observations",
                       json=wire_payload(batch), headers={"Idempotency-Key": key})
        self.truncated_lines += int(answer.get("truncated_lines", 0) or 0)

    def attribute(self) -> Attribution:
        answer = _call(self.client, "POST", f"/v2/sessions/{self.session_id}/attribute")
        return Attribution.model_validate(answer["result"])

    def close(self) -> None:
        try:
            self.client.request("DELETE", f"/v2/sessions/{self.session_id}")
        except HttpError:  # the service expires sessions on its own; a failed cleanup loses nothing
            pass


class ServiceAttributor:
    mode: Mode = "service"

    def __init__(self, url: str, *, token: str | None, timeout: float, retries: int) -> None:
        self.client = RetryingClient(url, headers=auth_headers(token), timeout=timeout, retries=retries)

    def open(self, ctx: ExecutionContext) -> AttributionSession:
        answer = _call(self.client, "POST", "/v2/sessions", json=ctx.model_dump(mode="json"))
        return _ServiceSession(self.client, str(answer["session_id"]))

    def close(self) -> None:
        self.client.close()


def _call(client: RetryingClient, method: str, path: str, **kwargs: Any) -> dict[str, Any]:
    try:
        answer = client.request(method, path, **kwargs).json()
    except HttpError as exc:
        body = exc.body if isinstance(exc.body, dict) else {}
        code = body.get("error_code")
        raise AttributionError(f"service: {code}: {body.get('message')}" if code else f"service: {exc}") from None
    except ValueError:
        raise AttributionError(f"service: {method} {path}: the answer is not JSON") from None
    if not isinstance(answer, dict):
        raise AttributionError(f"service: {method} {path}: unexpected answer {answer!r:.200}")
    return answer


ATTRIBUTION_OPTIONS = ("service_url", "token", "timeout", "retries")


def make_attributor(spec: ConnectorSpec | None) -> Attributor:
    """The service client when a `service_url` is configured, else the embedded engine."""
    if spec is None or spec.name == "embedded":
        return EmbeddedAttributor()
    if spec.name not in ("", "service"):
        raise ConfigError(f"attribution: unknown backend {spec.name!r} (embedded, or service_url URL)")
    return ServiceAttributor(spec.require("service_url"), token=spec.get("token"),
                             timeout=spec.get_duration("timeout", "120s").total_seconds(),
                             retries=spec.get_int("retries", 4))
