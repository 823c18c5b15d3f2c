"""The v2 API: sessions, observations, attribution, health, the rule catalog."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Body, Header, Path, Request, Response
from fastapi.params import Depends as DependsParam
from pydantic import TypeAdapter

from firstfault import __version__
from firstfault.errors import ServiceError
from firstfault.service.core import AttributionService
from firstfault.service.errors import error_responses
from firstfault.service.http import JsonRoute, body_fingerprint, in_thread, strict_body, strict_document
from firstfault.service.schemas import (
    AttributeResponse,
    Health,
    IngestAck,
    RulesView,
    SessionCreated,
    SessionState,
)
from firstfault.wire import BundleBatch, ContextBody, ObservationBatch, RawTextBatch

CONTEXT: TypeAdapter[ContextBody] = TypeAdapter(ContextBody)
BATCH: TypeAdapter[ObservationBatch] = TypeAdapter(ObservationBatch)
RAW_TEXT: TypeAdapter[RawTextBatch] = TypeAdapter(RawTextBatch)
BUNDLE: TypeAdapter[BundleBatch] = TypeAdapter(BundleBatch)
SessionId = Annotated[str, Path(max_length=128, description="The id returned when the session was created")]
IdempotencyKey = Annotated[str | None, Header(alias="Idempotency-Key", min_length=1, max_length=256,
                                              description="Retries carrying the same key are ingested once")]


async def _strict_batch(request: Request) -> ObservationBatch:
    """The body validated strictly. A raw_text batch is made of JSON's own types only, so the document already
    parsed is validated (`strict_document`): its megabytes of text are not parsed a second time."""
    doc = await request.json()
    if isinstance(doc, dict) and doc.get("format") == "raw_text":
        return strict_document(RAW_TEXT, doc, ("body", "raw_text"))
    if isinstance(doc, dict) and doc.get("format") == "bundle" and _all_raw_text(doc.get("batches")):
        return strict_document(BUNDLE, doc, ("body", "bundle"))
    return await strict_body(request, BATCH)


def _all_raw_text(members: object) -> bool:
    return isinstance(members, list) and all(isinstance(m, dict) and m.get("format") == "raw_text" for m in members)


def router(service: AttributionService, auth: list[DependsParam]) -> APIRouter:
    api = APIRouter(prefix="/v2", route_class=JsonRoute, tags=["v2"])
    unknown = error_responses(401, 404, 422) if auth else error_responses(404, 422)

    @api.post("/sessions", status_code=201, response_model=SessionCreated,
              responses=error_responses(400, 401, 413, 415, 422, 429, 503), dependencies=auth)
    async def create_session(context: Annotated[ContextBody, Body()], request: Request) -> SessionCreated:
        """Open a session for one workload attempt (body: an ExecutionContext)."""
        body = await strict_body(request, CONTEXT)
        return SessionCreated(session_id=service.create_session(body), revision=0)

    @api.post("/sessions/{session_id}/observations", status_code=202, response_model=IngestAck,
              responses=error_responses(400, 401, 404, 409, 413, 415, 422, 503), dependencies=auth)
    async def add_observations(session_id: SessionId, batch: Annotated[ObservationBatch, Body()], request: Request,
                               idempotency_key: IdempotencyKey = None) -> IngestAck:
        """Add a batch of evidence in one of four formats (see `format`)."""
        batch = await _strict_batch(request)
        fingerprint = await body_fingerprint(request) if idempotency_key else ""
        return await in_thread(service.ingest, session_id, batch, idempotency_key, fingerprint)

    @api.post("/sessions/{session_id}/attribute", response_model=AttributeResponse, responses=unknown, dependencies=auth)
    async def attribute(session_id: SessionId) -> Response:
        """Compute the result from everything ingested so far; may be called any number of times."""
        _, body = await in_thread(service.attribute_json, session_id, limiter=service.attribution_slots)
        return Response(body, media_type="application/json")  # the JSON the core wrote: not written twice

    @api.get("/sessions/{session_id}", response_model=SessionState, responses=error_responses(404, 422))
    async def get_session(session_id: SessionId) -> SessionState:
        """State, counters and the last result of a session."""
        return await in_thread(service.describe, session_id)

    @api.delete("/sessions/{session_id}", status_code=204, response_class=Response, responses=unknown, dependencies=auth)
    async def delete_session(session_id: SessionId) -> Response:
        service.delete(session_id)
        return Response(status_code=204)

    @api.get("/healthz", response_model=Health)
    async def healthz() -> Health:
        """The process is up and its rule catalog loaded and verified."""
        return Health(status="ok", catalog_hash=service.catalog_hash, sessions=len(service.store),
                      version=__version__)

    @api.get("/readyz", response_model=Health, responses=error_responses(503))
    async def readyz() -> Health:
        """Ready to take a new session (capacity and memory left, or an idle session that can be evicted)."""
        if not service.store.has_room():
            raise ServiceError(503, "not_ready", "session capacity reached and no session is idle")
        if not service.store.has_budget(service.settings.memory_budget_bytes):
            raise ServiceError(503, "not_ready", "memory budget (FIRSTFAULT_MEMORY_BUDGET_BYTES) spent and no "
                                                 "session is idle")
        return Health(status="ready", catalog_hash=service.catalog_hash, sessions=len(service.store),
                      version=__version__)

    @api.get("/rules", response_model=RulesView)
    async def rules() -> RulesView:
        """The loaded rule catalog and its content hash (read-only)."""
        return service.rules()

    return api
