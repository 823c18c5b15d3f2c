"""Response bodies of the v2 API (request bodies are in formats.py)."""

from __future__ import annotations

from datetime import datetime

from pydantic import BaseModel, Field

from firstfault.engine.model import Attribution, ExecutionContext


class SessionCreated(BaseModel):
    session_id: str
    revision: int = 0


class IngestAck(BaseModel):
    accepted: int = Field(description="Observations (lines or samples) taken from this batch")
    observations_total: int
    bytes_total: int
    truncated_lines: int = Field(description="Lines of this batch cut to the maximum line length")
    replayed: bool = Field(description="True when this answers a retry of an already ingested Idempotency-Key")
    batch: int | None = Field(default=None, description="Sequence number of this batch in its session (from 1)")


class ComputedFrom(BaseModel):
    observations: int
    bytes: int
    batches: int


class AttributeResponse(BaseModel):
    session_id: str
    revision: int = Field(description="1 for the first attribution of the session, then 2, 3, ...")
    computed_from: ComputedFrom = Field(description="The evidence this result was computed from")
    result: Attribution


class SessionState(BaseModel):
    session_id: str
    context: ExecutionContext
    created_at: datetime
    last_activity: datetime
    observations: int
    bytes: int
    batches: int
    revision: int
    last_result: Attribution | None
    truncated_lines: int = 0


class Health(BaseModel):
    status: str
    catalog_hash: str
    sessions: int
    version: str


class ExtractorView(BaseModel):
    name: str
    sources: list[str]
    emits: str
    symptom: str | None
    match_re: str
    doc: str
    file: str


class SymptomDefView(BaseModel):
    name: str
    sub_domain: str
    outcome: str
    role: str
    blame: str
    doc: str


class PythonRuleView(BaseModel):
    name: str
    kind: str
    phase: str
    module: str
    doc: str


class RulesView(BaseModel):
    """The loaded rule catalog (read-only: rules ship with the service and are never uploaded)."""

    content_hash: str
    files: list[str]
    symptoms: list[SymptomDefView]
    extractors: list[ExtractorView]
    python_rules: list[PythonRuleView]
    metric_extractors: list[str]
