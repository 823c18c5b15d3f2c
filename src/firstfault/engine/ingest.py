"""What a session accumulates from ingest: coalesced events, per-stream counts and evidence problems.

Matching lines are coalesced into one accumulator per (event type, node, symptom, rule, key captures) with a
count, first/last time and the earliest evidence line, so memory grows with the number of distinct events, not
with the number of matching lines. The state can be exported from one session (a worker process's) and merged
into another exactly as if that session had ingested the same evidence itself.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

from firstfault.engine.model import Event, Evidence
from firstfault.engine.params import Params
from firstfault.engine.timing import Timings
from firstfault.errors import FirstfaultError

MAX_ISSUES = 200
MAX_ORIGINS_PER_STREAM = 16
MAX_OUT_OF_ORDER_STREAMS = 64
# Where a stream's output ended is kept as its last few stamped lines, each this much earlier than the one after it:
# a burst of lines (a shutdown's traceback) stands as one point, and the lines before it are still seen.
OUTPUT_END_POINTS = 8
OUTPUT_POINT_SPACING_S = 10.0


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
    evidence_key: tuple[Any, ...]  # evidence_key(evidence), kept to compare without recomputing
    attributes: dict[str, Any]
    # Distinct values per attribute in first-seen order (a dict used as an ordered set), so that merging
    # per-file states in file order keeps exactly the values a sequential ingest keeps under the cap.
    values: dict[str, dict[str, None]] = field(default_factory=dict)
    # The last attributes counted into `values`: each of its values is there, or its bucket is full (buckets
    # only grow), so a line with the same attributes - most repeats of a line - changes nothing there.
    seen: dict[str, Any] | None = None


@dataclass(slots=True)
class _StreamStats:
    observations: int = 0
    bytes: int = 0
    origins: dict[str, None] = field(default_factory=dict)  # first origins, in ingest order


_AccKey = tuple[str, str | None, str | None, str, tuple[str, ...]]


@dataclass(frozen=True, slots=True)
class OutputEnd:
    """Where an application stream's own output ended, read from its last lines (engine/reader.py). `points`, latest
    first: its last stamped lines that no extractor matched (at most OUTPUT_END_POINTS, OUTPUT_POINT_SPACING_S
    apart), each with the line number of the first unstamped unmatched line after it (output whose time is unknown;
    None when there is none); `undated`: the unstamped unmatched lines walked over in all. A hung program prints
    nothing, and one stopped from outside prints its shutdown after the signal: rules/scheduler.py reads this to tell
    a workload that had gone quiet long before a limit or a cancel ended it."""

    node: str | None
    origin: str
    points: tuple[tuple[Evidence, int | None], ...]
    undated: int

    def order(self) -> tuple[float, int]:
        """Which of two reports of one stream is the later (service batches): its last line's time and number."""
        if not self.points or self.points[0][0].time is None:
            return (0.0, 0)
        last = self.points[0][0]
        return (last.time.timestamp(), last.provenance.line or 0)  # type: ignore[union-attr]

    def shifted(self, delta: timedelta) -> OutputEnd:
        return OutputEnd(self.node, self.origin, tuple(
            (ev.model_copy(update={"time": ev.time + delta}) if ev.time is not None else ev, after)
            for ev, after in self.points), self.undated)


@dataclass
class IngestState:
    """Everything a session accumulated from ingest, in insertion order: what a worker process returns for
    the files it scanned, to be merged into the real session with `Accumulator.merge()`.

    `out_of_order`: the streams this state found out of time order, with the issue it wrote for each (those
    it was seeded with by `Accumulator.fork()` left out). `issues_dropped`: new issues it left out at its own
    cap (`MAX_ISSUES`)."""

    accs: list[tuple[_AccKey, _Acc]]
    stats: list[tuple[tuple[str, str], int, int, list[str]]]
    issues: list[str]
    dropped_keys: int
    timings: Timings
    notes: list[str] = field(default_factory=list)
    out_of_order: list[tuple[str, str]] = field(default_factory=list)
    issues_dropped: int = 0
    output_ends: list[OutputEnd] = field(default_factory=list)


class InexactMerge(FirstfaultError, ValueError):
    """A state cannot be merged into this accumulator exactly as if its evidence had been ingested here: the
    caller must ingest that evidence here instead (or read it again against this accumulator)."""


def evidence_key(ev: Evidence) -> tuple[Any, ...]:
    """The order of evidence lines: earliest first (untimed last), then where the line was read."""
    t = ev.time
    return (t is None, t.timestamp() if t else 0.0, ev.provenance.origin, ev.provenance.line or 0,
            ev.provenance.offset or 0, ev.text)


class Accumulator:
    """The ingest state of one session (thread-safe)."""

    def __init__(self, params: Params) -> None:
        self.params = params
        self._accs: dict[_AccKey, _Acc] = {}
        self._stats: dict[tuple[str, str], _StreamStats] = {}
        self._issues: dict[str, None] = {}
        self._notes: dict[str, None] = {}
        # Streams found out of time order (each reported once per session), with the issue written for each.
        self._out_of_order: dict[str, str] = {}
        self._seeded = 0  # entries of _out_of_order copied from another accumulator by fork()
        self._dropped_keys = 0
        self._issues_dropped = 0
        self._output_ends: dict[str, OutputEnd] = {}  # by origin
        self.lock = threading.Lock()

    def add(self, event_type: str, node: str | None, symptom: str | None, rule: str,
            time: datetime | None, evidence: Evidence | Callable[[], Evidence], attributes: dict[str, Any],
            discriminator: tuple[str, ...] = (), key_of_evidence: tuple[Any, ...] | None = None) -> None:
        """Count one event into its accumulator. `evidence` may be a function building the Evidence (called
        only when it is kept); `key_of_evidence` is then its `evidence_key`."""
        key = (event_type, node, symptom, rule, discriminator)
        limit = self.params.max_values_per_attribute
        if key_of_evidence is None:
            assert isinstance(evidence, Evidence)
            key_of_evidence = evidence_key(evidence)
        with self.lock:
            acc = self._accs.get(key)
            if acc is None:
                if len(self._accs) >= self.params.max_event_keys:
                    self._dropped_keys += 1
                    return
                self._accs[key] = _Acc(type=event_type, node=node, symptom=symptom, rule=rule, count=1,
                                       first=time, last=time,
                                       evidence=evidence if isinstance(evidence, Evidence) else evidence(),
                                       evidence_key=key_of_evidence, attributes=attributes,
                                       values={k: {str(v): None} for k, v in attributes.items() if v not in (None, "")},
                                       seen=attributes)
                return
            acc.count += 1
            if time is not None:
                if acc.first is None or time < acc.first:
                    acc.first = time
                if acc.last is None or time > acc.last:
                    acc.last = time
            if key_of_evidence < acc.evidence_key:
                acc.evidence = evidence if isinstance(evidence, Evidence) else evidence()
                acc.evidence_key = key_of_evidence
                acc.attributes = attributes
            if attributes == acc.seen:
                return
            acc.seen = attributes
            for k, v in attributes.items():
                if v in (None, ""):
                    continue
                bucket = acc.values.setdefault(k, {})
                if len(bucket) < limit:
                    bucket[str(v)] = None

    def count(self, node: str | None, source: str, origin: str, observations: int, nbytes: int) -> None:
        """Count what was read from one stream (lines or samples, bytes)."""
        with self.lock:
            stats = self._stats.setdefault((node or "", source), _StreamStats())
            stats.observations += observations
            stats.bytes += nbytes
            if len(stats.origins) < MAX_ORIGINS_PER_STREAM:
                stats.origins[origin] = None

    def output_end(self, end: OutputEnd) -> None:
        """Record where a stream's output ended; of two reports of one stream (its batches), the later stands."""
        with self.lock:
            self._keep_output_end(end)

    def _keep_output_end(self, end: OutputEnd) -> None:
        known = self._output_ends.get(end.origin)
        if known is None or end.order() >= known.order():
            self._output_ends[end.origin] = end

    def issue(self, message: str) -> None:
        """Record an evidence problem that makes the result partial (each message once, at most MAX_ISSUES)."""
        with self.lock:
            self._add_issue(message)

    def _add_issue(self, message: str) -> None:
        if message in self._issues:
            return
        if len(self._issues) < MAX_ISSUES:
            self._issues[message] = None
        else:
            self._issues_dropped += 1

    def out_of_order(self, origin: str, message: str) -> None:
        """Record that stream `origin` went back in time (`message`): once per stream, for at most
        MAX_OUT_OF_ORDER_STREAMS streams."""
        with self.lock:
            if origin in self._out_of_order or len(self._out_of_order) >= MAX_OUT_OF_ORDER_STREAMS:
                return
            self._out_of_order[origin] = message
            self._add_issue(message)

    def fork(self, base: Accumulator) -> None:
        """Start from `base`'s memory of streams out of time order (this accumulator being new), so evidence read
        here reports only what `base` has not: what ingesting it into `base` would report."""
        with base.lock:
            seeded = dict(base._out_of_order)
        with self.lock:
            self._out_of_order = {**seeded, **self._out_of_order}
            self._seeded = len(seeded)

    def note(self, message: str) -> None:
        """Record how the evidence was read when that is not what it says by itself (a stream's time zone)."""
        with self.lock:
            if len(self._notes) < MAX_ISSUES:
                self._notes[message] = None

    def shift(self, delta: timedelta) -> None:
        """Move every time held by `delta` (a stream found to be written in local time)."""
        with self.lock:
            for acc in self._accs.values():
                acc.first = None if acc.first is None else acc.first + delta
                acc.last = None if acc.last is None else acc.last + delta
                if acc.evidence.time is not None:
                    acc.evidence = acc.evidence.model_copy(update={"time": acc.evidence.time + delta})
                    acc.evidence_key = evidence_key(acc.evidence)
            self._output_ends = {origin: end.shifted(delta) for origin, end in self._output_ends.items()}

    def absorb(self, other: Accumulator) -> None:
        """Merge another accumulator that holds later evidence (one stream's), as `merge` does; events it
        dropped at its own key cap count as dropped here too."""
        state = other.export(Timings())
        dropped, state.dropped_keys = state.dropped_keys, 0
        self.merge(state)
        if dropped:
            with self.lock:
                self._dropped_keys += dropped

    # -- parallel ingest: export the state of a worker's session, merge it into the real one ----------------
    def export(self, timings: Timings) -> IngestState:
        """The accumulated state (picklable), for `merge()` on another session's accumulator."""
        with self.lock:
            return IngestState(
                accs=list(self._accs.items()),
                stats=[(k, v.observations, v.bytes, list(v.origins)) for k, v in self._stats.items()],
                issues=list(self._issues), dropped_keys=self._dropped_keys, timings=timings,
                notes=list(self._notes), out_of_order=list(self._out_of_order.items())[self._seeded:],
                issues_dropped=self._issues_dropped, output_ends=list(self._output_ends.values()))

    def merge(self, state: IngestState) -> None:
        """Merge the state another session accumulated from later evidence, as if this one had ingested that
        evidence itself, in order: merging the per-file states of files in file order gives exactly the state
        (and so the result JSON) of ingesting the files one after the other.

        Caps merge exactly: a state keeps the first values, origins, issues and notes of its own evidence up to
        the same caps, which is always at least what this session still has room for. A stream out of time order
        that this session already reported (or past its cap of such streams) is not reported again.

        Two cases cannot be reproduced from a state, and raise `InexactMerge` before anything is changed: a
        state that dropped events at its own event-key cap (this session may already hold those keys), and one
        that dropped issues at its own cap while some of the issues it kept are not reported here (out-of-order
        streams this session reported since the state was forked from it), so that the dropped ones might have
        been. The caller must read that evidence again here (`Engine.analyze_path`, the service do).
        """
        if state.dropped_keys:
            raise InexactMerge("a state that dropped events at the event-key cap cannot be merged exactly")
        limit = self.params.max_values_per_attribute
        max_keys = self.params.max_event_keys
        with self.lock:
            reported, suppressed = self._out_of_order_merge(state)
            if suppressed and state.issues_dropped and len(self._issues) < MAX_ISSUES:
                raise InexactMerge("a state that dropped issues at its cap cannot be merged exactly into a session "
                                   "that reported some of its out-of-order streams since it was forked")
            self._out_of_order.update(reported)
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
            for stream_key, observations, nbytes, origins in state.stats:
                stats = self._stats.setdefault(stream_key, _StreamStats())
                stats.observations += observations
                stats.bytes += nbytes
                for origin in origins:
                    if len(stats.origins) < MAX_ORIGINS_PER_STREAM:
                        stats.origins[origin] = None
            for message in state.issues:
                if message not in suppressed:
                    self._add_issue(message)
            self._issues_dropped += state.issues_dropped
            for message in state.notes:
                if len(self._notes) < MAX_ISSUES:
                    self._notes[message] = None
            for end in state.output_ends:
                self._keep_output_end(end)

    def _out_of_order_merge(self, state: IngestState) -> tuple[dict[str, str], set[str]]:
        """The out-of-order streams of `state` this accumulator takes (in order, under its cap), and the issues
        of those it does not (already reported here, or past the cap)."""
        reported: dict[str, str] = {}
        suppressed: set[str] = set()
        for origin, message in state.out_of_order:
            if origin in self._out_of_order or origin in reported or \
                    len(self._out_of_order) + len(reported) >= MAX_OUT_OF_ORDER_STREAMS:
                suppressed.add(message)
            else:
                reported[origin] = message
        return reported, suppressed

    # -- what attribution reads ------------------------------------------------------------------------------
    def events(self) -> list[Event]:
        """The accumulated events, in a deterministic order."""
        with self.lock:
            accs = list(self._accs.values())
        events = [
            Event(type=a.type, node=a.node, symptom=a.symptom, time=a.first, last_time=a.last, count=a.count,
                  evidence=a.evidence, attributes=a.attributes,
                  values={k: sorted(v) for k, v in sorted(a.values.items())}, rule=a.rule)
            for a in accs
        ]
        events.sort(key=lambda e: (*evidence_key(e.evidence), e.type, e.symptom or "", e.rule))
        return events

    def event_keys(self) -> int:
        with self.lock:
            return len(self._accs)

    def stream_stats(self) -> dict[tuple[str, str], tuple[int, int, list[str]]]:
        with self.lock:
            return {k: (v.observations, v.bytes, sorted(v.origins)) for k, v in self._stats.items()}

    def notes(self) -> list[str]:
        with self.lock:
            return list(self._notes)

    def output_ends(self) -> list[OutputEnd]:
        """Where each application stream's output ended, by origin."""
        with self.lock:
            return [self._output_ends[origin] for origin in sorted(self._output_ends)]

    def issues(self) -> list[str]:
        with self.lock:
            issues = list(self._issues)
            if self._dropped_keys:
                issues.append(f"{self._dropped_keys} events dropped: more than {self.params.max_event_keys} "
                              "distinct event keys")
        return issues
