"""One attribution session: incremental ingest, and attribution from the accumulated state.

`ingest_stream()` / `ingest_block()` / `ingest_lines()` / `ingest()` may be called any number of times, in any
order, before or after `attribute()`; `attribute()` recomputes from everything ingested so far and never consumes
state. What is kept is the `Accumulator`'s coalesced events (engine/ingest.py), so memory does not grow with the
number of matching lines; reading and dating lines is the `LineReader`'s work (engine/reader.py).

The session's methods are the engine's ingest boundary: the context, node names, origins, labels and lines they
are given pass engine/inputs.py there (times within the window, text without lone surrogates).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from datetime import datetime, timedelta
from typing import BinaryIO

from firstfault.engine.compiled import CompiledCatalog
from firstfault.engine.ingest import Accumulator, IngestState, OutputEnd
from firstfault.engine.inputs import WINDOW, clean_labels, clean_provenance, clean_text, dated, sane_context
from firstfault.engine.model import Attribution, Event, Evidence, ExecutionContext, Observation, SourceKind
from firstfault.engine.params import Params
from firstfault.engine.pipeline import run_pipeline
from firstfault.engine.reader import LineReader
from firstfault.engine.scanner import DEFAULT_BLOCK_SIZE, DEFAULT_MAX_LINE_BYTES
from firstfault.engine.timing import Timings


def _clean_node(node: str | None) -> str | None:
    return None if node is None else clean_text(node)


class Session:
    """Accumulated evidence of one workload attempt (thread-safe for concurrent ingest)."""

    def __init__(self, context: ExecutionContext, compiled: CompiledCatalog, params: Params | None = None,
                 *, block_size: int = DEFAULT_BLOCK_SIZE, max_line_bytes: int = DEFAULT_MAX_LINE_BYTES) -> None:
        self.context, problems = sane_context(context)
        self.compiled = compiled
        self.params = params or Params()
        self.block_size = block_size
        self.max_line_bytes = max_line_bytes
        self.state = Accumulator(self.params)
        for problem in problems:
            self.state.issue(problem)
        self.reader = LineReader(self.context, compiled, self.params, self.state, block_size=block_size,
                                 max_line_bytes=max_line_bytes)
        # Where ingest time went (read, scan, hits) and how much was read; never part of the result.
        self.timings = Timings()

    # -- ingest ----------------------------------------------------------------------------------------
    def ingest_stream(self, node: str | None, source: SourceKind, stream: BinaryIO, origin: str) -> int:
        """Scan one log stream (a file, a pod log) of one node. Returns the number of lines read."""
        cost = self.reader.read_stream(_clean_node(node), source, stream, clean_text(origin))
        with self.state.lock:
            t = self.timings
            t.add("ingest.scan", *cost.scan)
            t.add("ingest.lines", *cost.lines)
            t.add("ingest.hits", *cost.hits)
            t.add("ingest.read", *cost.read)
            t.count("lines", cost.line_count)
            t.count("bytes", cost.bytes)
            t.count("hit_lines", cost.hit_lines)
            t.count("files", 1)
        return cost.line_count

    def ingest_lines(self, node: str | None, source: SourceKind, lines: list[str], origin: str, *,
                     times: Sequence[datetime | None] | None = None, first_line: int = 1,
                     labels: dict[str, str] | None = None, utc_offset: timedelta | None = None) -> int:
        """Scan a batch of lines of one stream (see `LineReader.read_lines`)."""
        return self.reader.read_lines(_clean_node(node), source, lines, clean_text(origin), times=times,
                                      first_line=first_line, labels=None if labels is None else clean_labels(labels),
                                      utc_offset=utc_offset)

    def ingest_block(self, node: str | None, source: SourceKind, data: bytes, origin: str, *, first_line: int = 1,
                     offset: int | None = None, utc_offset: timedelta | None = None) -> int:
        """Scan a block of lines of one stream, UTF-8 joined by `\\n` (see `LineReader.read_block`): what a
        file's block goes through, without a list of lines."""
        return self.reader.read_block(_clean_node(node), source, data, clean_text(origin), first_line=first_line,
                                      offset=offset, utc_offset=utc_offset)

    def ingest(self, observations: Iterable[Observation]) -> int:
        """Ingest normalised observations one by one (metric samples and single lines)."""
        count = 0
        for obs in observations:
            count += 1
            if obs.metric is not None:
                self._ingest_metric(obs)
            elif obs.line is None:
                self.state.issue(f"{obs.provenance.origin}: observation without line or metric ignored")
            else:
                self.ingest_lines(obs.node, obs.source, [obs.line], obs.provenance.origin,
                                  times=[obs.observed_at], first_line=obs.provenance.line or 1,
                                  labels=obs.provenance.labels or None)
        return count

    def _ingest_metric(self, obs: Observation) -> None:
        assert obs.metric is not None
        node, provenance = _clean_node(obs.node), clean_provenance(obs.provenance)
        metric = obs.metric
        name, labels = clean_text(metric.name), clean_labels(metric.labels)
        if name is not metric.name or labels is not metric.labels:
            metric = metric.model_copy(update={"name": name, "labels": labels})
        self.state.count(node, obs.source.value, provenance.origin, 1, 0)
        time = None if obs.observed_at is None else dated(obs.observed_at)
        if time is None and obs.observed_at is not None:
            self.state.issue(f"{provenance.origin}: sample time {obs.observed_at.isoformat()} outside {WINDOW}; "
                             "the sample is kept without a time")
        for extractor in self.compiled.catalog.metric_extractors:
            if not metric.name.startswith(extractor.metric_prefixes):
                continue
            for spec in extractor.func(metric):
                evidence = Evidence(source=obs.source, node=node, time=time, text=spec.evidence.text,
                                    provenance=provenance)
                self.state.add(spec.type, node, spec.symptom, extractor.name, time, evidence, spec.attributes)

    def record_issue(self, message: str) -> None:
        """Record an evidence problem (unreadable file, bad encoding ...) that makes the result partial."""
        self.state.issue(message)

    # -- parallel ingest: export the state of a worker's session, merge it into the real one ----------------
    def export_state(self) -> IngestState:
        """The accumulated ingest state (picklable), for `merge_state()` on another session."""
        return self.state.export(self.timings)

    def fork(self, base: Session) -> None:
        """Read evidence as `base` would (a new session of the same context that will be merged into `base`):
        streams `base` already reported out of time order are not reported again (`Accumulator.fork`)."""
        self.state.fork(base.state)

    def merge_state(self, state: IngestState) -> None:
        """Merge another session's state as if this session had ingested its evidence (`Accumulator.merge`;
        raises `InexactMerge`, changing nothing, when that cannot be done exactly)."""
        self.state.merge(state)
        with self.state.lock:
            self.timings.merge(state.timings)

    # -- attribute ------------------------------------------------------------------------------------
    def events(self) -> list[Event]:
        """The accumulated events, in a deterministic order."""
        return self.state.events()

    def event_keys(self) -> int:
        """Distinct coalesced events held: what the session's memory grows with (a few kB each at most, the
        evidence line being cut at `max_evidence_chars`)."""
        return self.state.event_keys()

    def stream_stats(self) -> dict[tuple[str, str], tuple[int, int, list[str]]]:
        return self.state.stream_stats()

    def issues(self) -> list[str]:
        return self.state.issues()

    def notes(self) -> list[str]:
        return self.state.notes()

    def output_ends(self) -> list[OutputEnd]:
        return self.state.output_ends()

    def attribute(self) -> Attribution:
        return run_pipeline(self)
