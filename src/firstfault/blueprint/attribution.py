"""Attribution backends: the engine in-process (the default) or the HTTP service's v2 API.

Both take the same observation batches, so the same evidence gives the same diagnosis either way.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass
from datetime import timedelta
from typing import Any, Protocol

from pydantic import TypeAdapter, ValidationError

from firstfault.blueprint.base import Batch, LineBatch, LokiBatch
from firstfault.blueprint.config import ConnectorSpec
from firstfault.blueprint.http import RetryingClient, auth_headers
from firstfault.blueprint.options import Options, option, parse_options
from firstfault.blueprint.result import Mode
from firstfault.engine import Attribution, ExecutionContext, Session
from firstfault.errors import AttributionError, CollectorError, ConfigError, HttpError
from firstfault.tools.verify import default_engine
from firstfault.wire import WIRE_MAX_LINE_BYTES, ObservationBatch, prepare

_WIRE: TypeAdapter[Any] = TypeAdapter(ObservationBatch)


class AttributionSession(Protocol):
    def add(self, batch: Batch) -> None: ...
    def attribute(self) -> Attribution: ...
    def close(self) -> None: ...


class Attributor(Protocol):
    mode: Mode

    def open(self, ctx: ExecutionContext) -> AttributionSession: ...
    def close(self) -> None: ...


def ingest_batch(session: Session, batch: Batch) -> None:
    """Feed one batch into an engine session (the embedded path) exactly as the service would: the wire
    payload goes through the service's own validation and preparation, so both paths ingest the same."""
    try:
        payload = _WIRE.validate_python(wire_payload(batch))
    except ValidationError as exc:
        raise CollectorError(f"the engine rejected a batch: {exc.errors()[0]['msg']}") from None
    prepare(payload, WIRE_MAX_LINE_BYTES).apply(session)


def wire_payload(batch: Batch) -> dict[str, Any]:
    """The body of `POST /v2/sessions/{id}/observations` for one batch (the service path)."""
    if isinstance(batch, LineBatch):
        payload = {"format": "raw_text", "node": batch.node, "source": batch.source.value, "origin": batch.origin,
                   "first_line": batch.first_line, "text": "\n".join(batch.lines)}
        if batch.utc_offset_minutes is not None:
            payload["utc_offset_minutes"] = batch.utc_offset_minutes
        return payload
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


def catalog_hash(attributor: Attributor) -> str:
    """The rule catalog an attributor runs in this process (embedded), or "" (the service runs its own)."""
    return attributor.engine.catalog.content_hash if isinstance(attributor, EmbeddedAttributor) else ""


class _ServiceSession:
    def __init__(self, client: RetryingClient, session_id: str) -> None:
        self.client = client
        self.session_id = session_id
        self.truncated_lines = 0

    def add(self, batch: Batch) -> None:
        # one key per batch, reused by every retry of it: the service applies the batch once
        key = f"{self.session_id}-{uuid.uuid4()}"
        try:
            response = self.client.request("POST", f"/v2/sessions/{self.session_id}/observations",
                                           json=wire_payload(batch), headers={"Idempotency-Key": key})
        except HttpError as exc:
            if exc.status in _REJECTED:   # this batch is bad, not the service: the collector's report says so
                raise CollectorError(f"the service rejected a batch: {_message(exc)}") from None
            raise AttributionError(f"service: {_message(exc)}") from None
        answer = response.json()
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


_REJECTED = frozenset({400, 413, 422})


def _message(exc: HttpError) -> str:
    body = exc.body if isinstance(exc.body, dict) else {}
    return f"{body['error_code']}: {body.get('message')}" if body.get("error_code") else str(exc)


def _call(client: RetryingClient, method: str, path: str, **kwargs: Any) -> dict[str, Any]:
    try:
        answer = client.request(method, path, **kwargs).json()
    except HttpError as exc:
        raise AttributionError(f"service: {_message(exc)}") from None
    except ValueError:
        raise AttributionError(f"service: {method} {path}: the answer is not JSON") from None
    if not isinstance(answer, dict):
        raise AttributionError(f"service: {method} {path}: unexpected answer {answer!r:.200}")
    return answer


@dataclass(frozen=True)
class AttributionOptions(Options):
    """The `attribution` connector (no `FIRSTFAULT_<NAME>_<KEY>` fallback: it has `FIRSTFAULT_SERVICE_URL` and
    `FIRSTFAULT_API_TOKEN`, applied by `config.apply_environment`)."""

    service_url: str | None = option(
        None, "the service's base URL; the Blueprint opens one session per attempt (`POST /v2/sessions`), sends "
              "every batch (`POST /v2/sessions/{id}/observations` with an `Idempotency-Key`), attributes "
              "(`POST .../attribute`) and deletes the session", shown="(none: in-process)")
    token: str | None = option(None, "bearer token", shown="`FIRSTFAULT_API_TOKEN`")
    timeout: timedelta = option(timedelta(seconds=120), "per request")
    retries: int = option(4, "retries on connection errors, timeouts, 429 and 5xx, with exponential backoff "
                             "(honouring `Retry-After`); a retried batch keeps its idempotency key, so the service "
                             "applies it once")


def make_attributor(spec: ConnectorSpec | None) -> Attributor:
    """The service client when a `service_url` is configured, else the embedded engine."""
    if spec is None:
        return EmbeddedAttributor()
    options = parse_options(AttributionOptions, spec, env=False)
    if spec.name == "embedded":
        return EmbeddedAttributor()
    if spec.name not in ("", "service"):
        raise ConfigError(f"attribution: unknown backend {spec.name!r} (embedded, or service_url URL)")
    if not options.service_url:
        raise ConfigError("attribution: option `service_url` is required (or FIRSTFAULT_SERVICE_URL)")
    return ServiceAttributor(options.service_url, token=options.token, timeout=options.timeout.total_seconds(),
                             retries=options.retries)
