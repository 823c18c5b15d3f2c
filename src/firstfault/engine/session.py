"""One attribution session: incremental ingest, and attribution from the accumulated state.

`ingest_stream()` / `ingest()` may be called any number of times, in any order, before or after
`attribute()`; `attribute()` recomputes from everything ingested so far and never consumes state. Ingest
keeps only coalesced events (one accumulator per node, symptom and rule), so memory does not grow with
the number of matching lines.
"""

from __future__ import annotations

import re
import threading
from collections.abc import Iterable
from dataclasses import dataclass, field
from datetime import datetime
from functools import cache
from typing import Any, BinaryIO

import re2

from firstfault.engine.catalog import Catalog, Extractor
from firstfault.engine.model import (
    Attribution,
    Event,
    EventType,
    Evidence,
    ExecutionContext,
    Observation,
    Provenance,
    SourceKind,
)
from firstfault.engine.params import Params
from firstfault.engine.scanner import (
    DEFAULT_BLOCK_SIZE,
    DEFAULT_MAX_LINE_BYTES,
    SourceScanner,
    iter_blocks,
)
from firstfault.engine.timestamps import TimestampParser

# Captures of a matching line are taken with Python's `re` when the line is short (fast per call, and its
# backtracking cannot go far on a short line), and with RE2 when it is longer: RE2's time is linear in the line
# whatever the pattern, so a crafted line (a long token before `\S+ invoked`, thousands of near-miss
# prefixes) cannot make the capture step explode. Both find the same match on the catalog's patterns (the
# hyperscan/RE2 common subset); tests/reliability/test_hostile_evidence.py holds the time ratio.
PY_RE_MAX_CHARS = 128


class LinearRegex:
    """A pattern under RE2, answering like `re`'s `search(text).groupdict()`.

    The match runs on the UTF-8 bytes of the line through google-re2's matcher, which gives every group's span
    in one call; its Python-level `Match` objects cost ten times the match itself, so they are used only when
    that matcher is not there (another google-re2 layout)."""

    def __init__(self, pattern: str) -> None:
        compiled = re2.compile(pattern.encode("utf-8"))
        self._names = sorted((index, name.decode("utf-8")) for name, index in compiled.groupindex.items())
        self._spans = getattr(getattr(compiled, "_regexp", None), "Match", None)
        self._anchor = getattr(getattr(re2, "_Anchor", None), "UNANCHORED", None)
        self._compiled = compiled

    def groups(self, text: str) -> dict[str, str | None] | None:
        data = text.encode("utf-8", "replace")
        if self._spans is None or self._anchor is None:
            m = self._compiled.search(data)
            if m is None:
                return None
            return {name: (None if m.group(i) is None else m.group(i).decode("utf-8", "replace"))
                    for i, name in self._names}
        spans = self._spans(self._anchor, data, 0, len(data))
        if spans[0][0] < 0:
            return None
        return {name: (None if spans[i][0] < 0 else data[spans[i][0]:spans[i][1]].decode("utf-8", "replace"))
                for i, name in self._names}


@cache
def _linear_regex(pattern: str) -> LinearRegex:
    return LinearRegex(pattern)


def match_groups(extractor: Extractor, text: str) -> dict[str, str | None] | None:
    """The named captures of the extractor's leftmost match in `text` (one line), or None."""
    if len(text) > PY_RE_MAX_CHARS:
        return _linear_regex(extractor.match_re).groups(text)
    m = extractor.regex.search(text)
    return None if m is None else m.groupdict()


_RANK_PREFIX = re.compile(r"^\s*(?:\S+\s+)?\[rank(\d+)\]:|^\s*\[\d+,(\d+)\]<std(?:out|err)>:")
_TIME_LOOKBACK_LINES = 64
_PREVIOUS = object()  # _last_time_of: the look-back reached the previous matching line
_EMIT_EVENT_TYPE = {"bad": EventType.NODE_BAD, "interesting": EventType.NODE_INTERESTING,
                    "xid": EventType.XID_BURST}


@dataclass(slots=True)
class _Acc:
    """Coalesced events of one (type, node, symptom, rule)."""

    type: str
    node: str | None
    symptom: str | None
    rule: str
    count: int
    first: datetime | None
    last: datetime | None
    evidence: Evidence
    attributes: dict[str, Any]
    values: dict[str, set[str]] = field(default_factory=dict)


@dataclass(slots=True)
class _StreamStats:
    observations: int = 0
    bytes: int = 0
    origins: set[str] = field(default_factory=set)


def _evidence_key(ev: Evidence) -> tuple[Any, ...]:
    t = ev.time
    return (t is None, t.timestamp() if t else 0.0, ev.provenance.origin, ev.provenance.line or 0,
            ev.provenance.offset or 0, ev.text)


class CompiledCatalog:
    """A catalog with its per-source scanners compiled once (shared by all sessions; thread-safe)."""

    def __init__(self, catalog: Catalog) -> None:
        self.catalog = catalog
        self.by_source: dict[SourceKind, list[Extractor]] = {}
        self.scanners: dict[SourceKind, SourceScanner] = {}
        for source in SourceKind:
            extractors = catalog.extractors_for(source)
            self.by_source[source] = extractors
            self.scanners[source] = SourceScanner([e.match_re for e in extractors],
                                                  frozenset(i for i, e in enumerate(extractors) if e.sampled))


class Session:
    """Accumulated evidence of one workload attempt."""

    def __init__(self, context: ExecutionContext, compiled: CompiledCatalog, params: Params | None = None,
                 *, block_size: int = DEFAULT_BLOCK_SIZE, max_line_bytes: int = DEFAULT_MAX_LINE_BYTES) -> None:
        self.context = context
        self.compiled = compiled
        self.params = params or Params()
        self.block_size = block_size
        self.max_line_bytes = max_line_bytes
        reference = context.start_time or context.end_time
        self.timestamps = TimestampParser(reference)
        self._accs: dict[tuple[str, str | None, str | None, str, tuple[str, ...]], _Acc] = {}
        self._stats: dict[tuple[str, str], _StreamStats] = {}
        self._issues: dict[str, None] = {}
        self._dropped_keys = 0
        self._out_of_order: set[str] = set()
        self._lock = threading.Lock()

    # -- ingest ----------------------------------------------------------------------------------------
    def ingest_stream(self, node: str | None, source: SourceKind, stream: BinaryIO, origin: str) -> int:
        """Scan one log stream (a file, a pod log) of one node. Returns the number of lines read."""
        scanner = self.compiled.scanners[source]
        extractors = self.compiled.by_source[source]
        last_time: datetime | None = None
        lines = 0
        nbytes = 0
        for block in iter_blocks(stream, block_size=self.block_size, max_line_bytes=self.max_line_bytes):
            lines += block.data.count(b"\n") + 1
            nbytes += len(block.data) + 1
            for line_no in block.truncated_lines:
                self._issue(f"{origin}:{line_no}: line longer than {self.max_line_bytes} bytes; "
                            "scanned up to that length, the rest skipped")
            hits = scanner.scan(block.data)
            if hits:
                last_time = self._handle_hits(block.data, block.first_line, block.start_offset, hits, node,
                                              source, origin, extractors, last_time)
            last_time = self._last_time_of(block.data, len(block.data)) or last_time
        self._count(node, source, origin, lines, nbytes)
        return lines

    def ingest_lines(self, node: str | None, source: SourceKind, lines: list[str], origin: str, *,
                     times: list[datetime | None] | None = None, first_line: int = 1,
                     labels: dict[str, str] | None = None) -> int:
        """Scan a batch of lines of one stream (service path: raw text blocks, Loki streams).

        `times` gives each line's time when the transport carries one (Loki's nanosecond stamps); lines
        without one are timed from their own prefix like file lines. Line numbers continue from `first_line`.
        """
        if times is not None and len(times) != len(lines):
            raise ValueError("times must give one entry per line")
        cleaned = [line.replace("\r", "").replace("\n", " ") for line in lines]
        data = "\n".join(cleaned).encode("utf-8", errors="replace")
        self._count(node, source, origin, len(lines), len(data) + 1)
        hits = self.compiled.scanners[source].scan(data)
        if hits:
            self._handle_hits(data, first_line, None, hits, node, source, origin, self.compiled.by_source[source], None,
                              times=times, labels=labels)
        return len(lines)

    def ingest(self, observations: Iterable[Observation]) -> int:
        """Ingest normalised observations one by one (metric samples and single lines)."""
        count = 0
        for obs in observations:
            count += 1
            if obs.metric is not None:
                self._ingest_metric(obs)
            elif obs.line is None:
                self._issue(f"{obs.provenance.origin}: observation without line or metric ignored")
            else:
                self.ingest_lines(obs.node, obs.source, [obs.line], obs.provenance.origin,
                                  times=[obs.observed_at], first_line=obs.provenance.line or 1,
                                  labels=obs.provenance.labels or None)
        return count

    def _ingest_metric(self, obs: Observation) -> None:
        assert obs.metric is not None
        self._count(obs.node, obs.source, obs.provenance.origin, 1, 0)
        for extractor in self.compiled.catalog.metric_extractors:
            if not obs.metric.name.startswith(extractor.metric_prefixes):
                continue
            for spec in extractor.func(obs.metric):
                time = obs.observed_at
                evidence = Evidence(source=obs.source, node=obs.node, time=time, text=spec.evidence.text,
                                    provenance=obs.provenance)
                self._accumulate(spec.type, obs.node, spec.symptom, extractor.name, time, evidence,
                                 spec.attributes)

    def _handle_hits(self, data: bytes, first_line: int, start_offset: int | None,
                     hits: list[tuple[int, int, list[int]]], node: str | None, source: SourceKind, origin: str,
                     extractors: list[Extractor], last_time: datetime | None, *,
                     times: list[datetime | None] | None = None,
                     labels: dict[str, str] | None = None) -> datetime | None:
        line_no = first_line
        pos = 0
        prev_end, prev_time = -1, None  # the previous matching line of `data`: where it ends, its time
        for start, end, ids in hits:
            line_no += data.count(b"\n", pos, start)
            pos = start
            raw = data[start:end]
            if raw.endswith(b"\r"):
                raw = raw[:-1]
            text = raw.decode("utf-8", errors="replace")
            time = times[line_no - first_line] if times is not None else None
            if time is None:
                time = self.timestamps.parse(text)
            inherited = time is None
            if inherited:
                found = self._last_time_of(data, start, stop=prev_end)
                time = prev_time if found is _PREVIOUS else (found or last_time)
            else:
                if last_time is not None and (last_time - time).total_seconds() > self.params.clock_skew_s:
                    self._time_went_back(origin, line_no, last_time, time)
                last_time = time
            offset = None if start_offset is None else start_offset + start
            provenance = Provenance(origin=origin, line=line_no, offset=offset, labels=labels or {})
            self._emit_line(text, ids, node, source, provenance, time, extractors, inherited)
            prev_end, prev_time = end, time
        return last_time

    def _time_went_back(self, origin: str, line_no: int, before: datetime, now: datetime) -> None:
        """A stream is read as chronological (progress markers keep their first and last match only): a line
        stamped well before an earlier one makes the result partial, said once per stream."""
        with self._lock:
            if origin in self._out_of_order or len(self._out_of_order) >= 64:
                return
            self._out_of_order.add(origin)
        self._issue(f"{origin}:{line_no}: lines out of time order (stamped {before - now} before a line above it); "
                    "the stream is read as chronological, so the result may be affected")

    def _last_time_of(self, data: bytes, before: int, stop: int = -1) -> datetime | None | object:
        """Time of the nearest stamped line that ends before `before` (bounded look-back). Reaching the line
        that ends at `stop` (the previous matching line, already timed) gives `_PREVIOUS` instead: a run of
        unstamped matching lines is not looked back over again for each of its lines."""
        end = before - 1 if before > 0 else -1
        for _ in range(_TIME_LOOKBACK_LINES):
            if end < 0:
                return None
            if end <= stop:
                return _PREVIOUS
            start = data.rfind(b"\n", 0, end) + 1
            head = data[start:min(end, start + 96)].decode("utf-8", errors="replace")
            found = self.timestamps.parse(head)
            if found is not None:
                return found
            end = start - 1
        return None

    def _emit_line(self, text: str, ids: list[int], node: str | None, source: SourceKind, provenance: Provenance,
                   time: datetime | None, extractors: list[Extractor], inherited: bool = False) -> None:
        max_chars = self.params.max_evidence_chars
        shown = text if len(text) <= max_chars else text[:max_chars] + f" …[truncated {len(text) - max_chars} chars]"
        # A line without its own stamp is only known to come after the previous stamped line (inherited time,
        # a lower bound) or, failing that, before the end of the job: either way its time is inferred.
        time_inferred = inherited
        if time is None and self.context.end_time is not None:
            time, time_inferred = self.context.end_time, True
        evidence = Evidence(source=source, node=node, time=time, time_inferred=time_inferred, text=shown,
                            provenance=provenance)
        rank_match = _RANK_PREFIX.match(text, 0, 256)  # a prefix: a long line costs no more than a short one
        for index in ids:
            extractor = extractors[index]
            groups = match_groups(extractor, text)
            if groups is None:  # hyperscan and re disagree only on pathological input; re decides
                continue
            captures = {k: v for k, v in groups.items() if v is not None}
            attributes: dict[str, Any] = {**extractor.attributes, **captures}
            if rank_match and "rank" not in attributes:
                attributes["rank"] = rank_match.group(1) or rank_match.group(2)
            if extractor.emit_type == "context":
                event_type = f"{EventType.CONTEXT}.{extractor.fact}"
                symptom = None
            else:
                event_type = _EMIT_EVENT_TYPE[extractor.emit_type]
                symptom = extractor.render_symptom(groups)
            discriminator = tuple(str(captures.get(k, "")) for k in extractor.key)
            self._accumulate(event_type, node, symptom, extractor.name, time, evidence, attributes, discriminator)

    def _accumulate(self, event_type: str, node: str | None, symptom: str | None, rule: str,
                    time: datetime | None, evidence: Evidence, attributes: dict[str, Any],
                    discriminator: tuple[str, ...] = ()) -> None:
        key = (event_type, node, symptom, rule, discriminator)
        limit = self.params.max_values_per_attribute
        with self._lock:
            acc = self._accs.get(key)
            if acc is None:
                if len(self._accs) >= self.params.max_event_keys:
                    self._dropped_keys += 1
                    return
                self._accs[key] = _Acc(type=event_type, node=node, symptom=symptom, rule=rule, count=1,
                                       first=time, last=time, evidence=evidence, attributes=attributes,
                                       values={k: {str(v)} for k, v in attributes.items() if v not in (None, "")})
                return
            acc.count += 1
            if time is not None:
                if acc.first is None or time < acc.first:
                    acc.first = time
                if acc.last is None or time > acc.last:
                    acc.last = time
            if _evidence_key(evidence) < _evidence_key(acc.evidence):
                acc.evidence = evidence
                acc.attributes = attributes
            for k, v in attributes.items():
                if v in (None, ""):
                    continue
                bucket = acc.values.setdefault(k, set())
                if len(bucket) < limit:
                    bucket.add(str(v))

    def _count(self, node: str | None, source: SourceKind, origin: str, observations: int, nbytes: int) -> None:
        with self._lock:
            stats = self._stats.setdefault((node or "", source.value), _StreamStats())
            stats.observations += observations
            stats.bytes += nbytes
            if len(stats.origins) < 16:
                stats.origins.add(origin)

    def _issue(self, message: str) -> None:
        with self._lock:
            if len(self._issues) < 200:
                self._issues[message] = None

    def record_issue(self, message: str) -> None:
        """Record an evidence problem (unreadable file, bad encoding ...) that makes the result partial."""
        self._issue(message)

    # -- attribute ------------------------------------------------------------------------------------
    def events(self) -> list[Event]:
        """The accumulated events, in a deterministic order."""
        with self._lock:
            accs = list(self._accs.values())
        events = [
            Event(type=a.type, node=a.node, symptom=a.symptom, time=a.first, last_time=a.last, count=a.count,
                  evidence=a.evidence, attributes=a.attributes,
                  values={k: sorted(v) for k, v in sorted(a.values.items())}, rule=a.rule)
            for a in accs
        ]
        events.sort(key=lambda e: (*_evidence_key(e.evidence), e.type, e.symptom or "", e.rule))
        return events

    def event_keys(self) -> int:
        """Distinct coalesced events held: what the session's memory grows with (a few kB each at most, the
        evidence line being cut at `max_evidence_chars`)."""
        with self._lock:
            return len(self._accs)

    def stream_stats(self) -> dict[tuple[str, str], tuple[int, int, list[str]]]:
        with self._lock:
            return {k: (v.observations, v.bytes, sorted(v.origins)) for k, v in self._stats.items()}

    def issues(self) -> list[str]:
        with self._lock:
            issues = list(self._issues)
            if self._dropped_keys:
                issues.append(f"{self._dropped_keys} events dropped: more than {self.params.max_event_keys} "
                              "distinct event keys")
        return issues

    def attribute(self) -> Attribution:
        from firstfault.engine.pipeline import run_pipeline

        return run_pipeline(self)
