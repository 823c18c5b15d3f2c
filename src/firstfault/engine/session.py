"""One attribution session: incremental ingest, and attribution from the accumulated state.

`ingest_stream()` / `ingest()` may be called any number of times, in any order, before or after
`attribute()`; `attribute()` recomputes from everything ingested so far and never consumes state. Ingest
keeps only coalesced events (one accumulator per node, symptom and rule), so memory does not grow with
the number of matching lines.
"""

from __future__ import annotations

import re
import threading
import time as _time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from datetime import datetime
from functools import cache
from pathlib import Path
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
    read_blocks,
)
from firstfault.engine.timestamps import TimestampParser
from firstfault.engine.timing import Timings

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
    evidence_key: tuple[Any, ...]  # _evidence_key(evidence), kept to compare without recomputing
    attributes: dict[str, Any]
    # Distinct values per attribute in first-seen order (a dict used as an ordered set), so that merging
    # per-file states in file order keeps exactly the values a sequential ingest keeps under the cap.
    values: dict[str, dict[str, None]] = field(default_factory=dict)


@dataclass(slots=True)
class _StreamStats:
    observations: int = 0
    bytes: int = 0
    origins: dict[str, None] = field(default_factory=dict)  # first 16 origins, in ingest order


_AccKey = tuple[str, str | None, str | None, str, tuple[str, ...]]


@dataclass
class IngestState:
    """Everything a session accumulated from ingest, in insertion order: what a worker process returns for
    the files it scanned, to be merged into the real session with `Session.merge_state()`."""

    accs: list[tuple[_AccKey, _Acc]]
    stats: list[tuple[tuple[str, str], int, int, list[str]]]
    issues: list[str]
    dropped_keys: int
    timings: Timings


def _line_numbers(data: bytes | bytearray, hits: list[tuple[int, int, list[int]]],
                  first_line: int) -> tuple[list[int], int]:
    """The line number of every hit (data starts at `first_line`), and the offset of the last hit's line."""
    numbers = []
    line = first_line
    pos = 0
    count = data.count
    for start, _end, _ids in hits:
        line += count(b"\n", pos, start)
        pos = start
        numbers.append(line)
    return numbers, pos


def _evidence_key(ev: Evidence) -> tuple[Any, ...]:
    t = ev.time
    return (t is None, t.timestamp() if t else 0.0, ev.provenance.origin, ev.provenance.line or 0,
            ev.provenance.offset or 0, ev.text)


class CompiledCatalog:
    """A catalog with its per-source scanners compiled once (shared by all sessions; thread-safe).

    Sources with the same pattern list share one hyperscan database (most extractors apply to every line
    source, so applog, syslog and scheduler usually compile to one database, not three). `for_catalog()`
    returns the compilation cached on the catalog, so loading with verification and then opening an engine
    compiles once.
    """

    def __init__(self, catalog: Catalog, *, cache_dir: Path | None = None) -> None:
        self.catalog = catalog
        self.by_source: dict[SourceKind, list[Extractor]] = {}
        self.scanners: dict[SourceKind, SourceScanner] = {}
        compiled: dict[tuple[tuple[str, ...], frozenset[int]], SourceScanner] = {}
        for source in SourceKind:
            extractors = catalog.extractors_for(source)
            self.by_source[source] = extractors
            patterns = tuple(e.match_re for e in extractors)
            sampled = frozenset(i for i, e in enumerate(extractors) if e.sampled)
            if (patterns, sampled) not in compiled:
                compiled[patterns, sampled] = SourceScanner(list(patterns), sampled, cache_dir=cache_dir)
            self.scanners[source] = compiled[patterns, sampled]
        # Pattern id of each extractor in its source's scanner, by identity (comparing the frozen dataclasses
        # field by field would make a lookup linear in the catalog size).
        self._ids = {source: {id(e): i for i, e in enumerate(extractors)}
                     for source, extractors in self.by_source.items()}

    def pattern_id(self, source: SourceKind, extractor: Extractor) -> int:
        """The id under which `source`'s scanner reports `extractor`'s matches."""
        return self._ids[source][id(extractor)]

    @classmethod
    def for_catalog(cls, catalog: Catalog, *, cache_dir: Path | None = None) -> CompiledCatalog:
        """The compilation of `catalog`, built once and kept on it (`cache_dir`: see `SourceScanner`)."""
        cached = catalog.compiled
        if isinstance(cached, cls) and cached.catalog is catalog:
            return cached
        compiled = cls(catalog, cache_dir=cache_dir)
        catalog.compiled = compiled
        return compiled


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
        self._accs: dict[_AccKey, _Acc] = {}
        self._stats: dict[tuple[str, str], _StreamStats] = {}
        self._issues: dict[str, None] = {}
        self._dropped_keys = 0
        self._out_of_order: set[str] = set()
        self._lock = threading.Lock()
        # Where ingest time went (read, scan, hits) and how much was read; never part of the result.
        self.timings = Timings()

    # -- ingest ----------------------------------------------------------------------------------------
    def ingest_stream(self, node: str | None, source: SourceKind, stream: BinaryIO, origin: str) -> int:
        """Scan one log stream (a file, a pod log) of one node. Returns the number of lines read.

        Per block: one hyperscan pass over the whole block, then Python only for the lines that matched;
        newlines are counted once, piecewise between the hits (line numbers) and after the last one (the
        block's line count).
        """
        scanner = self.compiled.scanners[source]
        extractors = self.compiled.by_source[source]
        clock = _time.perf_counter
        cpu_clock = _time.thread_time
        last_time: datetime | None = None
        line_no = 1
        nbytes = 0
        hit_lines = 0
        scan_s = lines_s = hits_s = 0.0
        scan_cpu = lines_cpu = hits_cpu = 0.0
        started, started_cpu = clock(), cpu_clock()
        for data, length, start_offset, truncated in read_blocks(stream, block_size=self.block_size,
                                                                 max_line_bytes=self.max_line_bytes):
            nbytes += length + 1
            if truncated:
                self._issue(f"{origin}:{line_no}: line longer than {self.max_line_bytes} bytes; "
                            "scanned up to that length, the rest skipped")
            t0, c0 = clock(), cpu_clock()
            hits = scanner.scan(data, length)
            t1, c1 = clock(), cpu_clock()
            if hits:
                numbers, pos = _line_numbers(data, hits, line_no)
                line_no = numbers[-1] + data.count(b"\n", pos, length) + 1
                t2, c2 = clock(), cpu_clock()
                hit_lines += len(hits)
                last_time = self._handle_hits(data, numbers, start_offset, hits, node, source, origin, extractors,
                                              last_time)
                t3, c3 = clock(), cpu_clock()
            else:
                line_no += data.count(b"\n", 0, length) + 1
                t2, c2 = clock(), cpu_clock()
                t3, c3 = t2, c2
            scan_s += t1 - t0
            lines_s += t2 - t1
            hits_s += t3 - t2
            scan_cpu += c1 - c0
            lines_cpu += c2 - c1
            hits_cpu += c3 - c2
            last_time = self._last_time_of(data, length) or last_time
        lines = line_no - 1
        self._count(node, source, origin, lines, nbytes)
        elapsed, elapsed_cpu = clock() - started, cpu_clock() - started_cpu
        with self._lock:
            t = self.timings
            t.add("ingest.scan", scan_s, scan_cpu)
            t.add("ingest.lines", lines_s, lines_cpu)
            t.add("ingest.hits", hits_s, hits_cpu)
            t.add("ingest.read", elapsed - scan_s - lines_s - hits_s, elapsed_cpu - scan_cpu - lines_cpu - hits_cpu)
            t.count("lines", lines)
            t.count("bytes", nbytes)
            t.count("hit_lines", hit_lines)
            t.count("files", 1)
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
            numbers, _ = _line_numbers(data, hits, first_line)
            self._handle_hits(data, numbers, None, hits, node, source, origin, self.compiled.by_source[source], None,
                              times=times, first_line=first_line, labels=labels)
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

    def _handle_hits(self, data: bytes | bytearray, numbers: list[int], start_offset: int | None,
                     hits: list[tuple[int, int, list[int]]], node: str | None, source: SourceKind, origin: str,
                     extractors: list[Extractor], last_time: datetime | None, *,
                     times: list[datetime | None] | None = None, first_line: int = 1,
                     labels: dict[str, str] | None = None) -> datetime | None:
        """Emit the events of the matching lines (`numbers`: their line numbers). Returns the time to carry on
        with."""
        prev_end, prev_time = -1, None  # the previous matching line of `data`: where it ends, its time
        for line_no, (start, end, ids) in zip(numbers, hits, strict=True):
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
            self._emit_line(text, ids, node, source, origin, line_no, offset, labels, time, extractors,
                            inherited)
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

    def _last_time_of(self, data: bytes | bytearray, before: int, stop: int = -1) -> datetime | None | object:
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

    def _emit_line(self, text: str, ids: list[int], node: str | None, source: SourceKind, origin: str,
                   line_no: int, offset: int | None, labels: dict[str, str] | None, time: datetime | None,
                   extractors: list[Extractor], inherited: bool = False) -> None:
        max_chars = self.params.max_evidence_chars
        shown = text if len(text) <= max_chars else text[:max_chars] + f" …[truncated {len(text) - max_chars} chars]"
        # A line without its own stamp is only known to come after the previous stamped line (inherited time,
        # a lower bound) or, failing that, before the end of the job: either way its time is inferred.
        time_inferred = inherited
        if time is None and self.context.end_time is not None:
            time, time_inferred = self.context.end_time, True
        # Most matching lines only count towards an accumulator that already holds earlier evidence, so the
        # Evidence model is built only when an accumulator keeps it; its sort key is computed from the fields.
        evidence_key = (time is None, time.timestamp() if time else 0.0, origin, line_no or 0, offset or 0, shown)
        built: list[Evidence] = []

        def evidence() -> Evidence:
            if not built:
                provenance = Provenance(origin=origin, line=line_no, offset=offset, labels=labels or {})
                built.append(Evidence(source=source, node=node, time=time, time_inferred=time_inferred, text=shown,
                                      provenance=provenance))
            return built[0]

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
            self._accumulate(event_type, node, symptom, extractor.name, time, evidence, attributes, discriminator,
                             evidence_key)

    def _accumulate(self, event_type: str, node: str | None, symptom: str | None, rule: str,
                    time: datetime | None, evidence: Evidence | Callable[[], Evidence], attributes: dict[str, Any],
                    discriminator: tuple[str, ...] = (), evidence_key: tuple[Any, ...] | None = None) -> None:
        """Count one event into its accumulator. `evidence` may be a function building the Evidence (called
        only when it is kept); `evidence_key` is then its `_evidence_key`."""
        key = (event_type, node, symptom, rule, discriminator)
        limit = self.params.max_values_per_attribute
        if evidence_key is None:
            assert isinstance(evidence, Evidence)
            evidence_key = _evidence_key(evidence)
        with self._lock:
            acc = self._accs.get(key)
            if acc is None:
                if len(self._accs) >= self.params.max_event_keys:
                    self._dropped_keys += 1
                    return
                self._accs[key] = _Acc(type=event_type, node=node, symptom=symptom, rule=rule, count=1,
                                       first=time, last=time,
                                       evidence=evidence if isinstance(evidence, Evidence) else evidence(),
                                       evidence_key=evidence_key, attributes=attributes,
                                       values={k: {str(v): None} for k, v in attributes.items() if v not in (None, "")})
                return
            acc.count += 1
            if time is not None:
                if acc.first is None or time < acc.first:
                    acc.first = time
                if acc.last is None or time > acc.last:
                    acc.last = time
            if evidence_key < acc.evidence_key:
                acc.evidence = evidence if isinstance(evidence, Evidence) else evidence()
                acc.evidence_key = evidence_key
                acc.attributes = attributes
            for k, v in attributes.items():
                if v in (None, ""):
                    continue
                bucket = acc.values.setdefault(k, {})
                if len(bucket) < limit:
                    bucket[str(v)] = None

    def _count(self, node: str | None, source: SourceKind, origin: str, observations: int, nbytes: int) -> None:
        with self._lock:
            stats = self._stats.setdefault((node or "", source.value), _StreamStats())
            stats.observations += observations
            stats.bytes += nbytes
            if len(stats.origins) < 16:
                stats.origins[origin] = None

    def _issue(self, message: str) -> None:
        with self._lock:
            if len(self._issues) < 200:
                self._issues[message] = None

    def record_issue(self, message: str) -> None:
        """Record an evidence problem (unreadable file, bad encoding ...) that makes the result partial."""
        self._issue(message)

    # -- parallel ingest: export the state of a worker's session, merge it into the real one ----------------
    def export_state(self) -> IngestState:
        """The accumulated ingest state (picklable), for `merge_state()` on another session."""
        with self._lock:
            return IngestState(
                accs=list(self._accs.items()),
                stats=[(k, v.observations, v.bytes, list(v.origins)) for k, v in self._stats.items()],
                issues=list(self._issues), dropped_keys=self._dropped_keys, timings=self.timings)

    def merge_state(self, state: IngestState) -> None:
        """Merge the state another session accumulated from later evidence, as if this session had ingested
        that evidence itself, in order: merging the per-file states of files in file order gives exactly the
        state (and so the result JSON) of ingesting the files one after the other.

        One case cannot be reproduced from a state: a state that dropped events at its own event-key cap
        (this session may already hold those keys). The caller must ingest that evidence here instead
        (`Engine.analyze_path` does).
        """
        if state.dropped_keys:
            raise ValueError("a state that dropped events at the event-key cap cannot be merged exactly")
        limit = self.params.max_values_per_attribute
        max_keys = self.params.max_event_keys
        with self._lock:
            for key, other in state.accs:
                acc = self._accs.get(key)
                if acc is None:
                    if len(self._accs) >= max_keys:
                        self._dropped_keys += other.count
                    else:
                        self._accs[key] = other
                    continue
                acc.count += other.count
                if other.first is not None and (acc.first is None or other.first < acc.first):
                    acc.first = other.first
                if other.last is not None and (acc.last is None or other.last > acc.last):
                    acc.last = other.last
                if other.evidence_key < acc.evidence_key:
                    acc.evidence = other.evidence
                    acc.evidence_key = other.evidence_key
                    acc.attributes = other.attributes
                for k, values in other.values.items():
                    bucket = acc.values.setdefault(k, {})
                    for v in values:
                        if len(bucket) >= limit:
                            break
                        bucket[v] = None
            for k, observations, nbytes, origins in state.stats:
                stats = self._stats.setdefault(k, _StreamStats())
                stats.observations += observations
                stats.bytes += nbytes
                for origin in origins:
                    if len(stats.origins) < 16:
                        stats.origins[origin] = None
            for message in state.issues:
                if len(self._issues) < 200:
                    self._issues[message] = None
            self.timings.merge(state.timings)

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
