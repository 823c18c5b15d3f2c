"""The v1 compatibility API (`/latest/attributor...`), in the wire shape of the public "FACT" client.

v1 attributors are ordinary sessions: an attributor id is a session id, visible in v2 and the other way round.
"""

from __future__ import annotations

import json
from datetime import datetime
from typing import Annotated, Any, Literal

from fastapi import APIRouter, Body, Request
from fastapi.params import Depends as DependsParam
from pydantic import BaseModel, ConfigDict, Field, TypeAdapter, ValidationError, field_validator

from firstfault.engine.model import Attribution, ExecutionContext, Scheduler
from firstfault.errors import ServiceError
from firstfault.service.core import AttributionService
from firstfault.service.errors import error_responses
from firstfault.service.http import (
    JsonRoute,
    body_fingerprint,
    decode_json,
    in_thread,
    strict_body,
    strict_validate,
)
from firstfault.service.v2 import IdempotencyKey, SessionId
from firstfault.wire import LokiBatch, PromBatch, bounded_utc

_SCHEDULERS: dict[str, Scheduler] = {"slurm": "slurm", "kubernetes": "kubernetes", "k8s": "kubernetes", "kueue": "kubernetes"}
_SOURCES = {"syslog": "syslog", "dmesg": "syslog", "kernel": "syslog", "applog": "applog", "app": "applog",
            "application": "applog", "scheduler": "scheduler", "slurm": "scheduler"}
_METADATA_FIELDS = ("srun_cmd", "nranks", "username", "framework")


class V1Workload(BaseModel):
    model_config = ConfigDict(extra="ignore")

    id: str = Field(min_length=1, max_length=512)
    type: str = Field(default="", max_length=64)
    srun_cmd: str = Field(default="", max_length=65536)
    job_start_time: datetime | None = None
    job_end_time: datetime | None = None
    status: str = Field(default="", max_length=128)
    nranks: int | None = Field(default=None, ge=0)
    ranks_per_node: int | None = Field(default=None, ge=0, le=100_000)
    nodes: list[Annotated[str, Field(min_length=1, max_length=255)]] = Field(default_factory=list,
                                                                             max_length=100_000)
    name: str = Field(default="", max_length=512)
    username: str = Field(default="", max_length=512)
    framework: str = Field(default="", max_length=512)
    exit_code_signal: int | str | None = Field(default=None, description="Exit code or signal number")

    @field_validator("job_start_time", "job_end_time")
    @classmethod
    def _bounded(cls, value: datetime | None) -> datetime | None:
        return bounded_utc(value)


class V1Metadata(BaseModel):
    model_config = ConfigDict(extra="ignore")

    cluster: str = Field(default="", max_length=512)
    agent: str = Field(default="", max_length=512)
    tenant: str = Field(default="", max_length=512)
    ruleset: Literal["default"] = Field(default="default", description="The one catalog this service ships")


class V1CreateAttributor(BaseModel):
    workload: V1Workload
    metadata: V1Metadata = Field(default_factory=V1Metadata)


class V1TimeInterval(BaseModel):
    start: datetime | None = None
    end: datetime | None = None


class V1ObservationContext(BaseModel):
    model_config = ConfigDict(extra="ignore")

    time_interval: V1TimeInterval | None = None
    resources: str = "AllJobResources"
    source: str = Field(max_length=64, description="syslog (also dmesg, kernel), applog, scheduler, metrics")
    format: Literal["raw_loki_streams", "prometheus_metrics"]
    node_label: str | None = Field(default=None, max_length=255, description="Label naming the node")


class V1Observation(BaseModel):
    context: V1ObservationContext
    body: str | list[Any] | dict[str, Any] = Field(description="The payload, usually as a JSON string")


class V1Created(BaseModel):
    attributor_id: str


class V1ObservationAck(BaseModel):
    observation_id: str
    accepted: int


class V1Finding(BaseModel):
    symptom: str
    sub_domain: str
    outcome: str
    evidence: list[dict[str, Any]]
    next_action: str | None = None


class V1NodeAttribution(BaseModel):
    type: Literal["NodeAttribution"] = "NodeAttribution"
    node: str
    attributions: list[V1Finding] = Field(description="Non-empty exactly for the culprit nodes")


class V1Attribution(BaseModel):
    attributions: list[V1NodeAttribution]
    revision: int
    outcome: str
    sub_domain: str


CREATE: TypeAdapter[V1CreateAttributor] = TypeAdapter(V1CreateAttributor)
OBSERVATION: TypeAdapter[V1Observation] = TypeAdapter(V1Observation)
LOKI: TypeAdapter[LokiBatch] = TypeAdapter(LokiBatch)
PROM: TypeAdapter[PromBatch] = TypeAdapter(PromBatch)


def to_context(request: V1CreateAttributor) -> ExecutionContext:
    w = request.workload
    metadata = {k: v for k, v in request.metadata.model_dump().items() if v}
    metadata.update({k: str(getattr(w, k)) for k in _METADATA_FIELDS if getattr(w, k) not in (None, "")})
    try:
        return ExecutionContext(
            workload_id=w.id, job_id=w.id, name=w.name, scheduler=_SCHEDULERS.get(w.type.lower(), "none"),
            nodes=w.nodes, ranks_per_node=w.ranks_per_node or None, start_time=w.job_start_time,
            end_time=w.job_end_time, scheduler_state=w.status,
            exit_code="" if w.exit_code_signal is None else str(w.exit_code_signal)[:64], metadata=metadata)
    except ValidationError as exc:
        raise ServiceError(422, "invalid_request", f"workload: {exc.errors()[0]['msg']}") from None


def _parsed(body: str | list[Any] | dict[str, Any]) -> Any:
    if not isinstance(body, str):
        return body
    try:
        return decode_json(body.encode("utf-8", "surrogatepass"))
    except json.JSONDecodeError as exc:
        raise ServiceError(422, "invalid_request", f"body is not a JSON document: {exc.msg}") from None


def _prom_shape(payload: Any) -> dict[str, Any]:
    """A list of series, a whole Prometheus response, its `data`, or a `{"result": [...]}` object."""
    if isinstance(payload, list):
        return {"result": payload}
    if isinstance(payload, dict) and ("data" in payload or "result" in payload):
        return payload
    return {"data": payload}


def to_batch(observation: V1Observation) -> LokiBatch | PromBatch:
    ctx = observation.context
    payload = _parsed(observation.body)
    extra = {"node_label": ctx.node_label} if ctx.node_label else {}
    if ctx.format == "prometheus_metrics":
        batch = {**_prom_shape(payload), "format": "prometheus_metrics", **extra}
        return strict_validate(PROM, json.dumps(batch).encode())
    source = _SOURCES.get(ctx.source.lower())
    if source is None:
        raise ServiceError(422, "unknown_source", f"source {ctx.source!r} is not one of {sorted(_SOURCES)}")
    batch = {"format": "raw_loki_streams", "source": source, "streams": payload, **extra}
    return strict_validate(LOKI, json.dumps(batch).encode())


def to_v1(result: Attribution, nodes: list[str], revision: int) -> V1Attribution:
    """One NodeAttribution per allocated node; findings only for culprit nodes."""
    views = {(s.node, s.symptom): s for s in result.symptoms}
    findings: dict[str, list[V1Finding]] = {}
    for culprit in result.culprit_nodes:
        items = findings.setdefault(culprit.node, [])
        for name in culprit.symptoms:
            view = views.get((culprit.node, name))
            items.append(V1Finding(
                symptom=name, sub_domain=(view.sub_domain if view else result.sub_domain).value,
                outcome=result.outcome.value,
                evidence=[e.model_dump(mode="json") for e in (view.evidence if view else [])],
                next_action=culprit.next_action.summary))
    ordered = list(dict.fromkeys([*nodes, *findings]))
    return V1Attribution(attributions=[V1NodeAttribution(node=n, attributions=findings.get(n, [])) for n in ordered],
                         revision=revision, outcome=result.outcome.value, sub_domain=result.sub_domain.value)


def router(service: AttributionService, auth: list[DependsParam]) -> APIRouter:
    api = APIRouter(prefix="/latest", route_class=JsonRoute, tags=["v1 compatibility"])

    @api.post("/attributor", response_model=V1Created, responses=error_responses(400, 401, 413, 415, 422, 429),
              dependencies=auth)
    async def create_attributor(body: Annotated[V1CreateAttributor, Body()], request: Request) -> V1Created:
        """Open an attributor (a session) for one workload."""
        context = to_context(await strict_body(request, CREATE))
        return V1Created(attributor_id=service.create_session(context))

    @api.post("/attributor/{session_id}/observation", response_model=V1ObservationAck,
              responses=error_responses(400, 401, 404, 409, 413, 415, 422, 503), dependencies=auth)
    async def add_observation(session_id: SessionId, observation: Annotated[V1Observation, Body()],
                              request: Request, idempotency_key: IdempotencyKey = None) -> V1ObservationAck:
        """Add one observation (Loki streams or a Prometheus result, usually as a JSON string in `body`)."""
        batch = await in_thread(to_batch, await strict_body(request, OBSERVATION))
        fingerprint = await body_fingerprint(request) if idempotency_key else ""
        ack = await in_thread(service.ingest, session_id, batch, idempotency_key, fingerprint)
        return V1ObservationAck(observation_id=f"{session_id}-{ack.batch}", accepted=ack.accepted)

    @api.get("/attributor/{session_id}/attribution", response_model=V1Attribution,
             responses=error_responses(404, 422))
    async def get_attribution(session_id: SessionId) -> V1Attribution:
        """The attribution by node: the inner list is non-empty exactly for culprit nodes."""
        response = await in_thread(service.current_result, session_id, limiter=service.attribution_slots)
        return to_v1(response.result, list(response.result.workload.nodes), response.revision)

    return api
