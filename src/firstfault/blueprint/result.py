"""`AttributionBlueprintResult`: what the Blueprint writes for one workload attempt."""

from __future__ import annotations

from datetime import datetime
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

from firstfault.engine import Attribution, ExecutionContext

RESULT_SCHEMA_VERSION = "1.0"
ReportStatus = Literal["ok", "empty", "error"]
Mode = Literal["embedded", "service"]


class ConnectorReport(BaseModel):
    """How one connector did for one workload: `ok` (delivered), `empty` (nothing in scope) or `error`."""

    model_config = ConfigDict(extra="forbid")

    connector: str
    kind: str
    status: ReportStatus
    reason: str = ""
    observation_count: int = 0
    nodes: list[str] = Field(default_factory=list)
    seconds: float = 0.0


class Timings(BaseModel):
    model_config = ConfigDict(extra="forbid")

    collect_s: float
    attribute_s: float
    total_s: float


class AttributionBlueprintResult(BaseModel):
    """The execution context, the engine's diagnosis, collector coverage, timings and the catalog hash.

    `diagnosis` is None (and `error` says why) when the workload could not be attributed at all.
    """

    model_config = ConfigDict(extra="forbid")

    schema_version: str = RESULT_SCHEMA_VERSION
    context: ExecutionContext
    diagnosis: Attribution | None
    error: str | None = None
    connector_reports: list[ConnectorReport]
    timings: Timings
    catalog_hash: str
    mode: Mode
    attributed_at: datetime

    def failed_connectors(self) -> list[ConnectorReport]:
        return [r for r in self.connector_reports if r.status == "error"]
