"""The observation wire formats shared by the service's ingest endpoint and the Blueprint, and their
conversion into engine calls.

Four formats, told apart by `format`: normalised observations, a raw text block of one node and source, Loki
streams and a Prometheus `query_range` result; and a fifth, `bundle`, that carries several batches of the four in
one request. `prepare()` turns any of them into a `PreparedBatch` (lines
cleaned, cut and timed; samples made observations) without touching a session, so the caller can check the
session's caps first; `PreparedBatch.apply()` then feeds the engine.
"""

from __future__ import annotations

import json
import math
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from operator import itemgetter
from typing import Annotated, Any, Literal, overload

from pydantic import BaseModel, ConfigDict, Field, Json, field_validator, model_validator

from firstfault.engine.inputs import EARLIEST, LATEST, WINDOW, clean_labels, clean_text, dated
from firstfault.engine.model import (
    ExecutionContext,
    MetricSample,
    Observation,
    Provenance,
    SourceKind,
    unique_nodes,
)
from firstfault.engine.records import After, Length
from firstfault.engine.session import Session

# Structured times (an observation's, a context's, a Loki or Prometheus sample's) outside the engine's window
# (engine/inputs.py: 1970-2200) are refused with a 4xx: they are certainly wrong, and arithmetic near datetime's
# limits fails. Stamps inside log text are the engine's to read: one outside the window leaves its line undated.
_NS = 1_000_000_000
# The window's bounds as Loki nanoseconds (the same floats as computed per stamp before: a batch holds ~10^5 stamps).
_LOKI_EARLIEST, _LOKI_LATEST = EARLIEST.timestamp() * _NS, LATEST.timestamp() * _NS
# Longer log lines are cut to this many UTF-8 bytes and marked, never dropped (the service's default too).
WIRE_MAX_LINE_BYTES = 64 * 1024
_NODE_LABEL_FALLBACKS = ("Hostname", "hostname", "node", "instance")

LineSource = Literal["applog", "syslog", "scheduler"]
NodeName = Annotated[str, Field(min_length=1, max_length=255)]
Origin = Annotated[str, Field(min_length=1, max_length=4096)]


def bounded_utc(value: datetime | None) -> datetime | None:
    """An aware UTC time within the engine's window, or ValueError."""
    if value is None:
        return None
    time = dated(value)
    if time is None:
        raise ValueError(f"time must lie between {WINDOW}")
    return time


BoundedTime = Annotated[datetime | None, After(bounded_utc)]


class ContextBody(ExecutionContext, frozen=False):
    """An ExecutionContext as a request body (times bounded to 1970-2200)."""

    nodes: Annotated[list[NodeName], Length(max=100_000), After(unique_nodes)] = field(default_factory=list)
    start_time: BoundedTime = None
    end_time: BoundedTime = None


class ObservationBody(Observation, frozen=False):
    """A normalised Observation as a request body (time bounded to 1970-2200)."""

    observed_at: BoundedTime = None


class ObservationsBatch(BaseModel):
    model_config = ConfigDict(extra="forbid")

    format: Literal["observations"]
    observations: list[ObservationBody]


class RawTextBatch(BaseModel):
    """A block of log text of one node and source; lines are numbered from `first_line`."""

    model_config = ConfigDict(extra="forbid")

    format: Literal["raw_text"]
    node: NodeName | None = None
    source: LineSource
    origin: Origin | None = Field(default=None, description="Where the text came from (default raw:<node>/<source>)")
    first_line: int = Field(default=1, ge=1, le=2**40)
    first_offset: int | None = Field(
        default=None, ge=0, le=2**62,
        description="Byte offset of the text's first line in its stream: evidence then cites byte offsets, as "
                    "`firstfault analyze` does for a file (left out when a line of the batch had to be cut)")
    text: str
    utc_offset_minutes: int | None = Field(
        default=None, ge=-14 * 60, le=14 * 60,
        description="The stream is written in local time at this UTC offset: its stamps without a zone of their own "
                    "are read at that offset (a collector that found or was told the node's time zone)")


def _loki_ns(value: str | int) -> int:
    ns = int(value) if isinstance(value, int) or value.isdigit() else -1
    if not _LOKI_EARLIEST <= ns < _LOKI_LATEST:
        raise ValueError(f"Loki timestamps are Unix epoch nanoseconds between {WINDOW}")
    return ns


LokiTimestamp = Annotated[str | int, Field(description="Unix epoch nanoseconds, as a decimal string")]
LokiValue = tuple[LokiTimestamp, str] | tuple[LokiTimestamp, str, dict[str, Any]]


class LokiStream(BaseModel):
    stream: dict[str, str] = Field(default_factory=dict)
    values: list[LokiValue]

    @field_validator("values")
    @classmethod
    def _timestamps(cls, values: list[Any]) -> list[Any]:
        """Every stamp in the window. Checked at once (a batch holds ~10^5); when one is not, they are checked again
        one by one, so that the error is the first bad stamp's, as it always was."""
        try:
            stamps = [int(v) if isinstance(v, int) or v.isdigit() else -1 for v, *_ in values]
        except ValueError:  # a number too long to convert
            stamps = [-1]
        if stamps and not (min(stamps) >= _LOKI_EARLIEST and max(stamps) < _LOKI_LATEST):
            for entry in values:
                _loki_ns(entry[0])
        return values


class LokiBatch(BaseModel):
    """Loki streams (push/query shape). Lines that are JSON envelopes with a string `body` are unwrapped."""

    model_config = ConfigDict(extra="forbid")

    format: Literal["raw_loki_streams"]
    source: LineSource
    node_label: str = Field(default="hostname", max_length=255, description="Stream label naming the node")
    origin: Origin | None = None
    streams: list[LokiStream] | Json[list[LokiStream]] = Field(
        description="The streams, or the same list encoded as a JSON string")


PromValue = Annotated[str | float, Field(description='The sample value ("NaN" and "+Inf" are skipped)')]
PromSample = tuple[float, PromValue]


class PromSeries(BaseModel):
    metric: dict[str, str] = Field(default_factory=dict)
    values: list[PromSample] = Field(default_factory=list)
    value: PromSample | None = Field(default=None, description="An instant-vector sample")

    @model_validator(mode="after")
    def _samples(self) -> PromSeries:
        for stamp, raw in self.samples():
            _prom_time(stamp)
            try:
                float(raw)
            except ValueError:
                raise ValueError(f"sample value {raw!r} is not a number") from None
        return self

    def samples(self) -> list[PromSample]:
        return self.values + ([self.value] if self.value is not None else [])


class PromData(BaseModel):
    resultType: Literal["matrix", "vector"] = "matrix"
    result: list[PromSeries]


class PromBatch(BaseModel):
    """A Prometheus query result: `result`, or a whole API response (`status` + `data`), or both."""

    model_config = ConfigDict(extra="forbid")

    format: Literal["prometheus_metrics"]
    node_label: str = Field(default="Hostname", max_length=255,
                            description="Label naming the node; hostname, node and instance are tried next")
    origin: Origin | None = None
    result: list[PromSeries] = Field(default_factory=list)
    status: Literal["success"] | None = None
    data: PromData | None = None
    warnings: list[str] | None = None
    infos: list[str] | None = None

    def series(self) -> list[PromSeries]:
        return self.result + (self.data.result if self.data is not None else [])


SingleBatch = Annotated[ObservationsBatch | RawTextBatch | LokiBatch | PromBatch, Field(discriminator="format")]


class BundleBatch(BaseModel):
    """Several batches in one request, applied in order and all or nothing, as one batch of the session: a
    collector that has a whole workload's files at hand saves a request per file."""

    model_config = ConfigDict(extra="forbid")

    format: Literal["bundle"]
    batches: list[SingleBatch] = Field(min_length=1, max_length=4096)


ObservationBatch = Annotated[ObservationsBatch | RawTextBatch | LokiBatch | PromBatch | BundleBatch,
                             Field(discriminator="format")]


def _prom_time(stamp: float) -> datetime:
    if not (math.isfinite(stamp) and EARLIEST.timestamp() <= stamp < LATEST.timestamp()):
        raise ValueError(f"Prometheus sample times are Unix seconds between {WINDOW}")
    return datetime.fromtimestamp(stamp, tz=UTC)


# -- preparation ----------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class LineChunk:
    """One `Session.ingest_lines` call: lines of one stream."""

    node: str | None
    source: SourceKind
    origin: str
    lines: list[str]
    times: Sequence[datetime | None] | None = None
    first_line: int = 1
    labels: dict[str, str] | None = None
    utc_offset: timedelta | None = None


@dataclass(frozen=True)
class TextBlock:
    """One `Session.ingest_block` call: the lines of a raw text batch as UTF-8, joined by `\\n`."""

    node: str | None
    source: SourceKind
    origin: str
    data: bytes
    first_line: int
    offset: int | None
    utc_offset: timedelta | None


@dataclass
class PreparedBatch:
    """A batch ready for the engine, with what it adds to the session's counters."""

    format: str
    chunks: list[LineChunk] = field(default_factory=list)
    blocks: list[TextBlock] = field(default_factory=list)
    observations: list[Observation] = field(default_factory=list)
    nbytes: int = 0
    truncated_lines: int = 0
    parts: list[PreparedBatch] = field(default_factory=list)  # a bundle's members, applied first, in order

    def apply(self, session: Session) -> int:
        """Feed the batch to `session`; returns the observations (lines and samples) it held."""
        count = sum(part.apply(session) for part in self.parts)
        for block in self.blocks:
            count += session.ingest_block(block.node, block.source, block.data, block.origin,
                                          first_line=block.first_line, offset=block.offset,
                                          utc_offset=block.utc_offset)
        for chunk in self.chunks:
            count += session.ingest_lines(chunk.node, chunk.source, chunk.lines, chunk.origin, times=chunk.times,
                                          first_line=chunk.first_line, labels=chunk.labels,
                                          utc_offset=chunk.utc_offset)
        if self.observations:
            count += session.ingest(self.observations)
        return count


class LineCleaner:
    """Replaces lone surrogates (engine/inputs.py `clean_text`, the engine's own text rule) and cuts long lines
    with a marker; counts bytes and cuts. Node names, origins and labels are cleaned by the engine session."""

    def __init__(self, max_line_bytes: int) -> None:
        self.max_line_bytes = max_line_bytes
        self.nbytes = 0
        self.truncated = 0

    def clean_all(self, lines: list[str]) -> list[str]:
        """`clean()` of each line; lines that all encode (no lone surrogate) and are certainly short enough are
        counted at once and left as they are."""
        joined = "\n".join(lines)
        try:
            size = len(joined) if joined.isascii() else len(joined.encode("utf-8"))
        except UnicodeEncodeError:
            return [self.clean(line) for line in lines]
        longest = max(map(len, lines), default=0)  # characters: at most 4 UTF-8 bytes each
        if longest * (1 if size == len(joined) else 4) > self.max_line_bytes:
            return [self.clean(line) for line in lines]
        self.nbytes += size + 1 if lines else 0
        return lines

    def clean(self, line: str) -> str:
        if line.isascii():
            size = len(line)
            if size > self.max_line_bytes:
                return self._cut(line.encode("ascii"))
            self.nbytes += size + 1
            return line
        line = clean_text(line)
        raw = line.encode("utf-8")
        if len(raw) > self.max_line_bytes:
            return self._cut(raw)
        self.nbytes += len(raw) + 1
        return line

    def _cut(self, raw: bytes) -> str:
        self.truncated += 1
        kept = cut_line(raw, self.max_line_bytes)
        self.nbytes += len(kept.encode("utf-8")) + 1
        return kept


def cut_line(raw: bytes, max_line_bytes: int) -> str:
    """A line of over `max_line_bytes` UTF-8 bytes cut there (at a character boundary), with a marker."""
    marker = f" …[line truncated: {len(raw) - max_line_bytes} more bytes]"
    return raw[:max_line_bytes].decode("utf-8", "ignore") + marker


def prepare(batch: ObservationsBatch | RawTextBatch | LokiBatch | PromBatch | BundleBatch,
            max_line_bytes: int) -> PreparedBatch:
    if isinstance(batch, BundleBatch):
        parts = [prepare(member, max_line_bytes) for member in batch.batches]
        return PreparedBatch(format=batch.format, parts=parts, nbytes=sum(part.nbytes for part in parts),
                             truncated_lines=sum(part.truncated_lines for part in parts))
    if isinstance(batch, RawTextBatch):
        return _prepare_raw_text(batch, max_line_bytes)
    if isinstance(batch, PromBatch):
        return _prepare_prometheus(batch)
    cleaner = LineCleaner(max_line_bytes)
    prepared = _prepare_loki(batch, cleaner) if isinstance(batch, LokiBatch) else _prepare_observations(batch, cleaner)
    prepared.nbytes = cleaner.nbytes
    prepared.truncated_lines = cleaner.truncated
    return prepared


def _prepare_raw_text(batch: RawTextBatch, max_line_bytes: int) -> PreparedBatch:
    """The text as one block for the engine's scanner, as a file's block: no per-line work unless a line is over
    `max_line_bytes` (those are cut with a marker). A final newline ends the last line rather than adding one."""
    prepared = PreparedBatch(format=batch.format)
    if not batch.text:
        return prepared
    text = batch.text.removesuffix("\n")
    try:
        data = text.encode("utf-8")
    except UnicodeEncodeError:  # lone surrogates: the engine's text rule replaces them
        data = clean_text(text).encode("utf-8")
    data, cut = _cut_long_lines(data, max_line_bytes)
    source = SourceKind(batch.source)
    utc_offset = None if batch.utc_offset_minutes is None else timedelta(minutes=batch.utc_offset_minutes)
    prepared.blocks.append(TextBlock(
        node=batch.node, source=source, origin=batch.origin or f"raw:{batch.node or '-'}/{source.value}", data=data,
        first_line=batch.first_line, offset=None if cut else batch.first_offset, utc_offset=utc_offset))
    prepared.nbytes = len(data) + 1
    prepared.truncated_lines = cut
    return prepared


def _cut_long_lines(data: bytes, max_line_bytes: int) -> tuple[bytes, int]:
    """`data` with every line of over `max_line_bytes` cut (`cut_line`), and how many were."""
    parts: list[bytes] = []
    pos = 0
    for start, end in _long_lines(data, max_line_bytes):
        parts += [data[pos:start], cut_line(data[start:end], max_line_bytes).encode("utf-8")]
        pos = end
    if not parts:
        return data, 0
    return b"".join([*parts, data[pos:]]), len(parts) // 2


def _long_lines(data: bytes, max_line_bytes: int) -> Iterator[tuple[int, int]]:
    """(start, end) of every line of `data` longer than `max_line_bytes`, without visiting every line: such a line
    covers at least one whole window of `max_line_bytes // 2` bytes of the windows tiling `data`, a window without
    a newline; a window with one costs a search of a line's length."""
    if len(data) <= max_line_bytes:
        return
    window = max(1, max_line_bytes // 2)
    find = data.find
    at = 0
    while at < len(data):
        if find(b"\n", at, at + window) >= 0:
            at += window
            continue
        start = data.rfind(b"\n", 0, at) + 1
        end = find(b"\n", at)
        end = len(data) if end < 0 else end
        if end - start > max_line_bytes:
            yield start, end
        at = end + 1


def _unwrap_envelope(line: str) -> tuple[str, str | None]:
    """The `body` of a JSON log envelope (and its attributes.hostname), or the line itself."""
    if not line.startswith("{"):
        return line, None
    try:
        doc = json.loads(line)
    except (ValueError, RecursionError):
        return line, None
    if not isinstance(doc, dict) or not isinstance(doc.get("body"), str):
        return line, None
    attributes = doc.get("attributes")
    host = attributes.get("hostname") if isinstance(attributes, dict) else None
    return doc["body"], host if isinstance(host, str) and 0 < len(host) <= 255 else None


def _loki_time(ns: int) -> datetime:
    return datetime.fromtimestamp(ns // _NS, tz=UTC).replace(microsecond=(ns % _NS) // 1000)


class LokiTimes(Sequence[datetime | None]):
    """The Loki stamps of a stream's lines as times, each made when the engine asks for it: for the lines a
    pattern matched, not for every line."""

    def __init__(self, stamps: list[int]) -> None:
        self.stamps = stamps

    def __len__(self) -> int:
        return len(self.stamps)

    @overload
    def __getitem__(self, index: int) -> datetime | None: ...
    @overload
    def __getitem__(self, index: slice) -> list[datetime | None]: ...
    def __getitem__(self, index: int | slice) -> datetime | None | list[datetime | None]:
        if isinstance(index, slice):
            return [_loki_time(ns) for ns in self.stamps[index]]
        return _loki_time(self.stamps[index])


def _prepare_loki(batch: LokiBatch, cleaner: LineCleaner) -> PreparedBatch:
    source = SourceKind(batch.source)
    prepared = PreparedBatch(format=batch.format)
    for stream in batch.streams:
        if not stream.values:
            continue
        entries = sorted(((int(entry[0]), entry[1]) for entry in stream.values), key=itemgetter(0))  # validated
        texts = [text for _, text in entries]
        node = stream.stream.get(batch.node_label) or None
        if _may_hold_envelopes(texts):
            unwrapped = [_unwrap_envelope(text) for text in texts]
            texts = [text for text, _ in unwrapped]
            node = node or next((host for _, host in unwrapped if host is not None), None)
        if node is not None and len(node) > 255:
            node = node[:255]
        labels = dict(sorted(stream.stream.items()))
        origin = batch.origin or "loki:{" + ",".join(f'{k}="{v}"' for k, v in labels.items()) + "}"
        prepared.chunks.append(LineChunk(node=node, source=source, origin=origin[:4096], lines=cleaner.clean_all(texts),
                                         times=LokiTimes([ns for ns, _ in entries]), labels=labels))
    return prepared


def _may_hold_envelopes(texts: list[str]) -> bool:
    """Whether a line may be a JSON envelope (one starts with `{`), asked of the lines joined, not of each."""
    joined = "\n".join(texts)
    return joined.startswith("{") or "\n{" in joined


def _series_node(labels: dict[str, str], node_label: str) -> str | None:
    for name in (node_label, *_NODE_LABEL_FALLBACKS):
        value = labels.get(name)
        if value:
            if name == "instance" and value.rsplit(":", 1)[-1].isdigit():
                value = value.rsplit(":", 1)[0]
            return value[:255]
    return None


def _prepare_prometheus(batch: PromBatch) -> PreparedBatch:
    prepared = PreparedBatch(format=batch.format)
    for series in batch.series():  # the engine's models are built here: their text is cleaned here
        labels = clean_labels(dict(sorted(series.metric.items())))
        name = labels.get("__name__", "")
        node = _series_node(labels, batch.node_label)
        origin = clean_text(batch.origin or f"prometheus:{name or '{}'}")
        provenance = Provenance(origin=origin[:4096], labels=labels)
        for stamp, raw in series.samples():
            value = float(raw)
            if not math.isfinite(value):
                continue
            prepared.observations.append(Observation(
                source=SourceKind.NODE_METRICS, node=node, observed_at=_prom_time(stamp),
                metric=MetricSample(name=name, labels=labels, value=value), provenance=provenance))
    return prepared


def _prepare_observations(batch: ObservationsBatch, cleaner: LineCleaner) -> PreparedBatch:
    observations: list[Observation] = []
    for obs in batch.observations:
        if obs.line is not None:
            obs = obs.model_copy(update={"line": cleaner.clean(obs.line)})
        observations.append(obs)
    return PreparedBatch(format=batch.format, observations=observations)
