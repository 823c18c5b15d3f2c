"""What connectors produce and consume: execution contexts in, observation batches out.

A context connector's `discover()` returns `ExecutionContext`s. A collector's `collect(ctx)` yields batches of
observations scoped to the workload's nodes and window; a batch maps onto one engine ingest call (embedded) or
one `POST /v2/sessions/{id}/observations` request (service), so the two paths see identical input:

- `LineBatch`: consecutive lines of one stream (a file, a pod log) -> `ingest_lines` / `raw_text`
- `LokiBatch`: Loki streams with nanosecond stamps -> `ingest_lines` per stream / `raw_loki_streams`
- `MetricBatch`: a Prometheus range-query matrix -> metric observations / `prometheus_metrics`
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import datetime, timedelta, timezone
from typing import Any, Protocol

from firstfault.engine import ExecutionContext, SourceKind
from firstfault.errors import CollectorError


@dataclass(frozen=True)
class Window:
    start: datetime
    end: datetime

    @classmethod
    def of(cls, ctx: ExecutionContext, margin: timedelta) -> Window:
        """The workload's window widened by `margin` on both sides; an error when the context has no times."""
        if ctx.start_time is None and ctx.end_time is None:
            raise CollectorError("the workload has no start or end time to scope the query to")
        start = ctx.start_time or ctx.end_time
        end = ctx.end_time or datetime.now(timezone.utc)
        assert start is not None
        try:
            return cls(start - margin, end + margin)
        except OverflowError:
            raise CollectorError(f"the workload's window ({start.isoformat()} to {end.isoformat()}) widened by "
                                 f"{margin} falls off the calendar") from None


@dataclass(frozen=True)
class LineBatch:
    node: str | None
    source: SourceKind
    origin: str
    lines: list[str]
    first_line: int = 1
    # the stream is in local time at this UTC offset: its zone-less stamps are read at it (wire: raw_text)
    utc_offset_minutes: int | None = None

    def nodes(self) -> set[str]:
        return {self.node} if self.node else set()

    def count(self) -> int:
        return len(self.lines)


@dataclass(frozen=True)
class LokiBatch:
    """Streams as Loki returns them: `{"stream": {labels}, "values": [["<ns>", "<line>"], ...]}`."""

    source: SourceKind
    node_label: str
    origin: str
    streams: list[dict[str, Any]]

    def nodes(self) -> set[str]:
        return {s["stream"][self.node_label] for s in self.streams if self.node_label in s["stream"]}

    def count(self) -> int:
        return sum(len(s["values"]) for s in self.streams)


@dataclass(frozen=True)
class MetricBatch:
    """A Prometheus matrix: `{"metric": {labels incl. __name__}, "values": [[unix_s, "v"], ...]}` per series."""

    node_label: str
    origin: str
    result: list[dict[str, Any]] = field(default_factory=list)

    def nodes(self) -> set[str]:
        return {s["metric"][self.node_label] for s in self.result if self.node_label in s["metric"]}

    def count(self) -> int:
        return sum(len(s["values"]) for s in self.result)


Batch = LineBatch | LokiBatch | MetricBatch


class Collector(Protocol):
    """A log or metric connector."""

    kind: str    # "logs" | "metrics"
    label: str   # the name in connector reports

    def applies(self, ctx: ExecutionContext) -> bool: ...
    def collect(self, ctx: ExecutionContext) -> Iterator[Batch]: ...


@dataclass
class Discovery:
    """What one discovery pass found: the workload attempts, what could not be read (one line each), and per
    attempt (workload id, attempt) the evidence the connector could not locate for it (e.g. a Slurm job's output
    path): that attempt's context report is an `error` saying so."""

    contexts: list[ExecutionContext] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)
    unresolved: dict[tuple[str, int], str] = field(default_factory=dict)


class ContextConnector(Protocol):
    """An execution-context connector: finds finished workload attempts."""

    kind: str
    label: str

    def discover(self) -> Discovery: ...


def node_of(value: str, nodes: list[str]) -> str | None:
    """The allocation node a host label names: exact, without `:port`, or the short name of an FQDN."""
    if value in nodes:
        return value
    host = value.rsplit(":", 1)[0] if value.count(":") == 1 else value
    if host in nodes:
        return host
    short = host.split(".", 1)[0]
    return short if short in nodes else None
