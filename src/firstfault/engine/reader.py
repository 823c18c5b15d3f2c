"""Reading evidence lines into an accumulator: scan, number, date, and turn each matching line into events.

Per block of a stream: one hyperscan pass over the whole block, then Python only for the lines that matched;
newlines are counted once, piecewise between the hits (line numbers) and after the last one (the block's
line count). A matching line without a stamp of its own takes the time of the nearest stamped line before it
(a lower bound, marked inferred), looked back over a bounded number of lines.
"""

from __future__ import annotations

import re
import string
import time as _time
import weakref
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any, BinaryIO

from stringzilla import count as _count_in

from firstfault.engine.captures import match_groups
from firstfault.engine.catalog import Extractor
from firstfault.engine.clock import (
    MAX_ZONE_HOURS,
    StreamClock,
    configured_zone,
    describe_offset,
    local_time_offset,
    zone_offset,
)
from firstfault.engine.compiled import CompiledCatalog
from firstfault.engine.ingest import OUTPUT_END_POINTS, OUTPUT_POINT_SPACING_S, Accumulator, OutputEnd
from firstfault.engine.inputs import WINDOW, clean_text, dated
from firstfault.engine.model import EventType, Evidence, ExecutionContext, Provenance, SourceKind
from firstfault.engine.params import Params
from firstfault.engine.scanner import read_blocks
from firstfault.engine.timestamps import TimestampParser

_RANK_PREFIX = re.compile(r"^\s*(?:\S+\s+)?\[rank(\d+)\]:|^\s*\[\d+,(\d+)\]<std(?:out|err)>:")
# Ray forwards every worker's and actor's output to the driver's with a prefix naming where it ran:
# '(WorkerDict pid=876764, ip=10.52.12.17) ...', '(pid=4242, ip=10.0.0.3)', '(raylet, ip=10.0.0.4)'.
_RAY_RELAY_PREFIX = re.compile(
    r"^\s*(?:\S+\s+){0,2}\((?:[\w.:-]+(?:, | ))?(?:pid=\d+, )?ip=(\d{1,3}(?:\.\d{1,3}){3})\)")
# A line that names the host it was printed on, ahead of its message: a syslog record's host field ('Mar  1
# 10:30:00 gpu-b kernel: ...'), NCCL's 'gpu-b:4242:4301 [3] NCCL', nccl-tests' and pdsh's 'gpu-b: ...', HPL-NVIDIA's
# CUDA error report naming its rank and host ('CUDART (25->gpu-b): cudaGetDeviceProperties(...) = 999'), after an
# optional stamp and a launcher's tag. One node's file holds such lines of another when a launcher gathers every
# rank's output (mpirun) or syslog is forwarded to one place.
_HOST_PREFIX = re.compile(
    r"^\s*(?:(?:\d{4}-\d\d-\d\d[T ]\d\d:\d\d:\d\d[.,\d]*(?:Z|[+-]\d\d:?\d\d)?|[A-Z][a-z]{2} [ \d]\d \d\d:\d\d:\d\d)\s+)?"
    r"(?:(?:\[\d+,\d+\]<std(?:out|err)>:\s*|\[rank\d+\]:\s*)?"
    r"([A-Za-z][\w.-]*)(?::\d+:\d+ \[\d+\]|: | [\w./-]+(?:\[\d+\])?: )"
    r"|CUDART \(\d+->([A-Za-z][\w.-]*)\): )")
_TIME_LOOKBACK_LINES = 64
# slurmstepd writes its cancel notice into the job's output without a stamp of its own but states when it happened:
# '*** JOB 42 ON n1 CANCELLED AT 2025-01-01T00:56:00 ***'. That stated time is the line's own (in the node's clock).
_STATED_TIME = re.compile(r"\bCANCELLED AT (\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d)\b")
# An extractor's captures of the time a record carries inside its line (an IPMI SEL entry's date and time, a cloud
# operation's timestamp, printed by a tool that ran later): the event is placed at the record's time.
# docs/rule-authoring.md describes them.
RECORDED_AT, RECORDED_DATE, RECORDED_TIME = "recorded_at", "recorded_date", "recorded_time"
_RECORDED_FORMATS = ("%m/%d/%Y %H:%M:%S", "%m/%d/%y %H:%M:%S", "%Y-%m-%d %H:%M:%S")  # ipmitool; ipmiutil
# How long before the line that printed it a record may have been made: longer is a BMC clock that is wrong.
MAX_RECORD_LAG = timedelta(days=1)
_PREVIOUS = object()  # _last_time_of: the look-back reached the previous matching line
_EMIT_EVENT_TYPE = {"bad": EventType.NODE_BAD, "interesting": EventType.NODE_INTERESTING,
                    "xid": EventType.XID_BURST}


@dataclass
class StreamCost:
    """Where the time of reading one stream went (wall and CPU seconds), and what was read."""

    scan: tuple[float, float] = (0.0, 0.0)
    lines: tuple[float, float] = (0.0, 0.0)
    hits: tuple[float, float] = (0.0, 0.0)
    read: tuple[float, float] = (0.0, 0.0)
    line_count: int = 0
    bytes: int = 0
    hit_lines: int = 0


def _newlines(data: bytes | bytearray, start: int, end: int) -> int:
    """The newlines in `data[start:end]`. StringZilla counts with SIMD, ~5x `bytes.count` (a single-byte count is a
    plain loop in CPython): counting a block's lines was an eighth of reading 1 GiB (docs/benchmarks.md)."""
    return int(_count_in(data, b"\n", start, end))


def _line_numbers(data: bytes | bytearray, hits: list[tuple[int, int, list[int]]],
                  first_line: int) -> tuple[list[int], int]:
    """The line number of every hit (data starts at `first_line`), and the offset of the last hit's line."""
    numbers = []
    line = first_line
    pos = 0
    for start, _end, _ids in hits:
        line += _newlines(data, pos, start)
        pos = start
        numbers.append(line)
    return numbers, pos


class LineReader:
    """Turns the lines of one session's evidence streams into events of its accumulator."""

    def __init__(self, context: ExecutionContext, compiled: CompiledCatalog, params: Params,
                 accumulator: Accumulator, *, block_size: int, max_line_bytes: int) -> None:
        self.context = context
        self.compiled = compiled
        self.params = params
        self.accumulator = accumulator
        self.block_size = block_size
        self.max_line_bytes = max_line_bytes
        self.timestamps = TimestampParser(context.start_time or context.end_time,
                                          context.end_time if context.start_time else None)
        self._hosts: dict[str, str] = {}  # host names (full and short) of the allocated nodes -> node
        for allocated in context.nodes:
            self._hosts.setdefault(allocated.split(".")[0], allocated)
        self._hosts.update({allocated: allocated for allocated in context.nodes})

    def emits(self, source: SourceKind) -> list[_Emit]:
        """How each extractor of `source` emits (by its pattern id in the source's scanner)."""
        by_source = _EMITS.get(self.compiled)
        if by_source is None:
            by_source = _EMITS.setdefault(self.compiled, {})
        found = by_source.get(source)
        if found is None:
            found = by_source[source] = _emits(self.compiled.by_source[source])
        return found

    def read_stream(self, node: str | None, source: SourceKind, stream: BinaryIO, origin: str) -> StreamCost:
        """Scan one log stream (a file, a pod log) of one node.

        Its events gather in an accumulator of their own, merged into the session's at the end (as if ingested
        there): a stream found to be written in local time (engine/clock.py) is put on UTC first."""
        stream_state = Accumulator(self.params)
        clock = StreamClock()
        cost = self._scan_stream(node, source, stream, origin, stream_state, clock)
        self._to_utc(node, source, origin, stream_state, clock)
        self.accumulator.absorb(stream_state)
        return cost

    def _to_utc(self, node: str | None, source: SourceKind, origin: str, stream_state: Accumulator,
                clock: StreamClock) -> None:
        """Put a stream written in local time on UTC: the zone configured for it, else an unambiguous inference."""
        zone = configured_zone(self.params.source_timezones, node, source.value)
        if zone is not None:
            if clock.zoned or clock.first is None:
                return
            offset = zone_offset(zone, clock.first)
            if offset:
                stream_state.shift(-offset)
                self.accumulator.note(f"{origin}: stamps read as {zone} local time (configured; shifted by "
                                      f"{-offset.total_seconds() / 3600:+g} h)")
            return
        hours = local_time_offset(clock, self.context.start_time, self.context.end_time)
        if hours is not None:
            stream_state.shift(-timedelta(hours=hours))
            self.accumulator.note(f"{origin}: stamps carry no zone and fit the workload's window only as "
                                  f"{describe_offset(hours)} local time; read as such (shifted {-hours:+d} h)")

    def _scan_stream(self, node: str | None, source: SourceKind, stream: BinaryIO, origin: str,
                     acc: Accumulator, stream_clock: StreamClock) -> StreamCost:
        scanner = self.compiled.scanners[source]
        emits = self.emits(source)
        clock = _time.perf_counter
        cpu_clock = _time.thread_time
        last_time: datetime | None = None
        line_no = 1
        nbytes = 0
        hit_lines = 0
        scan_s = lines_s = hits_s = 0.0
        scan_cpu = lines_cpu = hits_cpu = 0.0
        started, started_cpu = clock(), cpu_clock()
        first_block = True
        output_end: OutputEnd | None = None
        false_hits: set[int] = set()
        for data, length, start_offset, truncated in read_blocks(stream, block_size=self.block_size,
                                                                 max_line_bytes=self.max_line_bytes):
            nbytes += length + 1
            if truncated:
                self.accumulator.issue(f"{origin}:{line_no}: line longer than {self.max_line_bytes} bytes; "
                                       "scanned up to that length, the rest skipped")
            t0, c0 = clock(), cpu_clock()
            hits = scanner.scan(data, length)
            t1, c1 = clock(), cpu_clock()
            if hits:
                numbers, pos = _line_numbers(data, hits, line_no)
                line_no = numbers[-1] + _newlines(data, pos, length) + 1
                t2, c2 = clock(), cpu_clock()
                hit_lines += len(hits)
                last_time, false_hits = self._handle_hits(data, numbers, start_offset, hits, node, source, origin,
                                                          emits, last_time, acc=acc, stream_clock=stream_clock)
                t3, c3 = clock(), cpu_clock()
            else:
                line_no += _newlines(data, 0, length) + 1
                false_hits = set()
                t2, c2 = clock(), cpu_clock()
                t3, c3 = t2, c2
            scan_s += t1 - t0
            lines_s += t2 - t1
            hits_s += t3 - t2
            scan_cpu += c1 - c0
            lines_cpu += c2 - c1
            hits_cpu += c3 - c2
            if first_block:
                self._first_time_of(data, length, stream_clock)
                first_block = False
            block_end = self._last_time_of(data, length, stream_clock=stream_clock)
            if isinstance(block_end, datetime):
                last_time = block_end
            if source == SourceKind.APPLOG:
                output_end = self._output_end(data, length, hits, false_hits, line_no, node, origin, start_offset,
                                              output_end)
        lines = line_no - 1
        acc.count(node, source.value, origin, lines, nbytes)
        if output_end is not None:
            acc.output_end(output_end)
        elapsed, elapsed_cpu = clock() - started, cpu_clock() - started_cpu
        return StreamCost(scan=(scan_s, scan_cpu), lines=(lines_s, lines_cpu), hits=(hits_s, hits_cpu),
                          read=(elapsed - scan_s - lines_s - hits_s, elapsed_cpu - scan_cpu - lines_cpu - hits_cpu),
                          line_count=lines, bytes=nbytes, hit_lines=hit_lines)

    def read_lines(self, node: str | None, source: SourceKind, lines: list[str], origin: str, *,
                   times: Sequence[datetime | None] | None = None, first_line: int = 1,
                   labels: dict[str, str] | None = None, utc_offset: timedelta | None = None) -> int:
        """Scan a batch of lines of one stream (service path: Loki streams, single observations).

        `times` gives each line's time when the transport carries one (Loki's nanosecond stamps); lines
        without one are timed from their own prefix like file lines. Line numbers continue from `first_line`.
        `utc_offset`: the stream is in local time at that offset (its sender said so), which zone-less stamps take.
        """
        if times is not None and len(times) != len(lines):
            raise ValueError("times must give one entry per line")
        joined = "\n".join(lines)
        if "\r" in joined or joined.count("\n") != len(lines) - 1:  # a line holds a \r or \n: those go
            joined = "\n".join(line.replace("\r", "").replace("\n", " ") for line in lines)
        try:
            data = joined.encode("utf-8")
        except UnicodeEncodeError:  # lone surrogates: the engine's text rule replaces them
            data = clean_text(joined).encode("utf-8")
        return self._read_data(node, source, data, origin, len(lines), times=times, first_line=first_line,
                               labels=labels, utc_offset=utc_offset)

    def read_block(self, node: str | None, source: SourceKind, data: bytes, origin: str, *, first_line: int = 1,
                   offset: int | None = None, utc_offset: timedelta | None = None) -> int:
        """Scan a block of lines of one stream (service path: a raw text batch), as a block of a file is scanned:
        `data` is UTF-8 text, its lines joined by `\\n`, without a final newline (a trailing `\\r` is not part of a
        line's evidence). Lines are numbered from `first_line`; `offset`, when given, is the stream offset of
        `data`'s first byte, and evidence cites byte offsets from there. `utc_offset`: as for `read_lines`."""
        return self._read_data(node, source, data, origin, None, first_line=first_line, start_offset=offset,
                               utc_offset=utc_offset)

    def _read_data(self, node: str | None, source: SourceKind, data: bytes, origin: str, line_count: int | None, *,
                   times: Sequence[datetime | None] | None = None, first_line: int, start_offset: int | None = None,
                   labels: dict[str, str] | None = None, utc_offset: timedelta | None = None) -> int:
        """Scan `data`, lines joined by `\\n`; `line_count` None: count them (in the pass that numbers the hits)."""
        if utc_offset is not None and abs(utc_offset) > timedelta(hours=MAX_ZONE_HOURS):
            raise ValueError(f"utc_offset must lie within {MAX_ZONE_HOURS} hours of UTC")
        hits = self.compiled.scanners[source].scan(data)
        numbers, pos = _line_numbers(data, hits, first_line) if hits else ([], 0)
        if line_count is None:
            line_count = (numbers[-1] - first_line if numbers else 0) + _newlines(data, pos, len(data)) + 1
        self.accumulator.count(node, source.value, origin, line_count, len(data) + 1)
        false_hits: set[int] = set()
        if hits:
            _, false_hits = self._handle_hits(data, numbers, start_offset, hits, node, source, origin,
                                              self.emits(source), None, acc=self.accumulator, times=times,
                                              first_line=first_line, labels=labels, utc_offset=utc_offset)
        if source == SourceKind.APPLOG:
            end = self._output_end(data, len(data), hits, false_hits, first_line + line_count, node, origin,
                                   start_offset, None, times=times, first_line=first_line, labels=labels,
                                   utc_offset=utc_offset)
            if end is not None:
                self.accumulator.output_end(end)
        if utc_offset:
            hours = utc_offset.total_seconds() / 3600
            self.accumulator.note(f"{origin}: stamps read as local time at UTC{hours:+g} h (as its collector said)")
        return line_count

    def _handle_hits(self, data: bytes | bytearray, numbers: list[int], start_offset: int | None,
                     hits: list[tuple[int, int, list[int]]], node: str | None, source: SourceKind, origin: str,
                     emits: list[_Emit], last_time: datetime | None, *, acc: Accumulator,
                     stream_clock: StreamClock | None = None, times: Sequence[datetime | None] | None = None,
                     first_line: int = 1, labels: dict[str, str] | None = None,
                     utc_offset: timedelta | None = None) -> tuple[datetime | None, set[int]]:
        """Emit the events of the matching lines (`numbers`: their line numbers). Returns the time to carry on
        with and where the false hits (lines `re` rejected for every extractor hyperscan named) start."""
        prev_end, prev_time = -1, None  # the previous matching line of `data`: where it ends, its time
        false_hits: set[int] = set()
        for line_no, (start, end, ids) in zip(numbers, hits, strict=True):
            raw = data[start:end]
            if raw.endswith(b"\r"):
                raw = raw[:-1]
            text = raw.decode("utf-8", errors="replace")
            time = self._transport_time(times[line_no - first_line], origin, line_no) if times is not None else None
            undated = False  # stamped outside the engine's window: kept, without a time
            if time is None:
                stamp = self.timestamps.parse_stamp(text)
                time = stamp.time
                if stamp.outside is not None:
                    undated = True
                    self.accumulator.issue(f"{origin}:{line_no}: stamped {stamp.outside!r}, outside {WINDOW}; "
                                           "the line is kept without a time")
                elif time is not None:
                    if stream_clock is not None:
                        stream_clock.saw(time, stamp.zoned)
                    if utc_offset and not stamp.zoned:
                        time -= utc_offset
            if time is None and not undated and (stated := self._stated_time(text)) is not None:
                time = stated - utc_offset if utc_offset else stated
            inherited = time is None and not undated
            if inherited:
                found = self._last_time_of(data, start, stop=prev_end, utc_offset=utc_offset)
                time = prev_time if found is _PREVIOUS else (found if isinstance(found, datetime) else last_time)
            elif time is not None:
                if last_time is not None and (last_time - time).total_seconds() > self.params.clock_skew_s:
                    self._time_went_back(origin, line_no, last_time, time)
                last_time = time
            offset = None if start_offset is None else start_offset + start
            if not self._emit_line(text, ids, node, source, origin, line_no, offset, labels, time, emits, inherited,
                                   acc, utc_offset):
                false_hits.add(start)
            prev_end, prev_time = end, time
        return last_time, false_hits

    def _stated_time(self, text: str) -> datetime | None:
        """The time an unstamped line states as its own (slurmstepd's 'CANCELLED AT <time>'), if it states one."""
        if "CANCELLED AT " not in text:
            return None
        found = _STATED_TIME.search(text)
        return None if found is None else self.timestamps.parse(found.group(1))

    def _transport_time(self, given: datetime | None, origin: str, line_no: int) -> datetime | None:
        """The time a transport gave a line, when it lies in the engine's window; outside it, None (the line's own
        stamp is read instead) and a coverage issue."""
        if given is None:
            return None
        time = dated(given)
        if time is None:
            self.accumulator.issue(f"{origin}:{line_no}: time {given.isoformat()} outside {WINDOW}; the line's own "
                                   "stamp is read instead")
        return time

    def _time_went_back(self, origin: str, line_no: int, before: datetime, now: datetime) -> None:
        """A stream is read as chronological (progress markers keep their first and last match only): a line
        stamped well before an earlier one makes the result partial, said once per stream."""
        self.accumulator.out_of_order(origin, f"{origin}:{line_no}: lines out of time order (stamped {before - now} "
                                              "before a line above it); the stream is read as chronological, so the "
                                              "result may be affected")

    def _first_time_of(self, data: bytes | bytearray, length: int, stream_clock: StreamClock) -> None:
        """Let `stream_clock` see the first stamped line among the block's first lines (bounded look-ahead)."""
        start = 0
        for _ in range(_TIME_LOOKBACK_LINES):
            if start >= length:
                return
            end = data.find(b"\n", start, length)
            end = length if end < 0 else end
            found, zoned = self.timestamps.parse_zoned(data[start:min(end, start + 96)].decode("utf-8", errors="replace"))
            if found is not None:
                stream_clock.saw(found, zoned)
                return
            start = end + 1

    def _last_time_of(self, data: bytes | bytearray, before: int, stop: int = -1, *,
                      stream_clock: StreamClock | None = None,
                      utc_offset: timedelta | None = None) -> datetime | None | object:
        """Time of the nearest stamped line that ends before `before` (bounded look-back). Reaching the line
        that ends at `stop` (the previous matching line, already timed) gives `_PREVIOUS` instead: a run of
        unstamped matching lines is not looked back over again for each of its lines. `stream_clock`, when
        given, sees the stamp found."""
        end = before - 1 if before > 0 else -1
        for _ in range(_TIME_LOOKBACK_LINES):
            if end < 0:
                return None
            if end <= stop:
                return _PREVIOUS
            start = data.rfind(b"\n", 0, end) + 1
            head = data[start:min(end, start + 96)].decode("utf-8", errors="replace")
            found, zoned = self.timestamps.parse_zoned(head)
            if found is not None:
                if stream_clock is not None:
                    stream_clock.saw(found, zoned)
                return found - utc_offset if utc_offset and not zoned else found
            end = start - 1
        return None

    def _output_end(self, data: bytes | bytearray, length: int, hits: list[tuple[int, int, list[int]]],
                    false_hits: set[int], next_line: int, node: str | None, origin: str, start_offset: int | None,
                    previous: OutputEnd | None, *, times: Sequence[datetime | None] | None = None,
                    first_line: int = 1, labels: dict[str, str] | None = None,
                    utc_offset: timedelta | None = None) -> OutputEnd | None:
        """Where the application's own output in `data[:length]` (a block or batch of one stream; `next_line` is the
        number of the line after its last) ended, walking back over its last lines (bounded): see `OutputEnd`.
        `previous` is the stream's earlier blocks' answer, which a walk that reached the block's start goes on
        from. None when the walk met no unmatched line. A false hit (`false_hits`, by start) is an unmatched line."""
        matched = {start for start, _end, _ids in hits[-_TIME_LOOKBACK_LINES:]} - false_hits
        points: list[tuple[Evidence, int | None]] = []
        undated = 0
        first_undated: int | None = None  # the earliest unstamped line walked over so far (the walk goes back)
        end, line_no = length, next_line - 1
        for _ in range(_TIME_LOOKBACK_LINES):
            if end < 0 or len(points) == OUTPUT_END_POINTS:
                break
            start = data.rfind(b"\n", 0, end) + 1
            if start not in matched and data[start:end].strip():
                time = self._tail_time(data, start, end, line_no, times, first_line, utc_offset)
                if time is None:
                    undated, first_undated = undated + 1, line_no
                elif not points or _spaced(points[-1][0], time):
                    text = data[start:end].decode("utf-8", errors="replace")
                    points.append((self._plain_evidence(text, node, origin, line_no, start_offset, start, labels, time),
                                   first_undated))
            end, line_no = start - 1, line_no - 1
        if end < 0 and previous is not None and len(points) < OUTPUT_END_POINTS:  # the block's start: go on before it
            points += [(ev, first_undated if after is None else after) for ev, after in previous.points
                       if not points or _spaced(points[-1][0], ev.time)][:OUTPUT_END_POINTS - len(points)]
            undated += previous.undated
        if not points and not undated:
            return previous if end < 0 else None
        return OutputEnd(node, origin, tuple(points), undated)

    def _tail_time(self, data: bytes | bytearray, start: int, end: int, line_no: int,
                   times: Sequence[datetime | None] | None, first_line: int,
                   utc_offset: timedelta | None) -> datetime | None:
        """The time a line carries itself (its transport's, else its stamp's), None for an unstamped line."""
        if times is not None and (given := times[line_no - first_line]) is not None:
            return dated(given)
        stamp = self.timestamps.parse_stamp(data[start:min(end, start + 160)].decode("utf-8", errors="replace"))
        if stamp.time is not None and utc_offset and not stamp.zoned:
            return stamp.time - utc_offset
        return stamp.time

    def _shown(self, text: str) -> str:
        """A line's text as evidence shows it: cut at max_evidence_chars, saying how much was cut."""
        max_chars = self.params.max_evidence_chars
        return text if len(text) <= max_chars else text[:max_chars] + f" …[truncated {len(text) - max_chars} chars]"

    def _plain_evidence(self, text: str, node: str | None, origin: str, line_no: int, start_offset: int | None,
                        start: int, labels: dict[str, str] | None, time: datetime) -> Evidence:
        shown = self._shown(text)
        provenance = Provenance(origin=origin, line=line_no, offset=None if start_offset is None else start_offset + start,
                                labels=labels or {})
        return Evidence(source=SourceKind.APPLOG, node=node, time=time, text=shown.rstrip("\r"), provenance=provenance)

    def _emit_line(self, text: str, ids: list[int], node: str | None, source: SourceKind, origin: str,
                   line_no: int, offset: int | None, labels: dict[str, str] | None, time: datetime | None,
                   emits: list[_Emit], inherited: bool, acc: Accumulator, utc_offset: timedelta | None) -> bool:
        """Emit the line's events; False when `re` rejected every hyperscan hit on it (a false hit: hyperscan
        approximates some patterns), so the line is the program's own output after all."""
        shown = self._shown(text)
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

        rank = _rank_prefix(text)
        relayed_from = _relay_prefix(text)
        printed_by = self._printed_by(text, node)
        rejected = 0
        for index in ids:
            emit = emits[index]
            if relayed_from and emit.event_type.startswith(EventType.CONTEXT):
                continue  # a fact about the node that printed the line first (its address, host name), not this one
            groups = match_groups(emit.extractor, text)
            if groups is None:  # hyperscan approximates some patterns; re decides
                rejected += 1
                continue
            symptom = emit.extractor.render_symptom(groups) if emit.templated else emit.symptom
            # groupdict() is a new dict: it is the captures unless a group did not take part in the match
            captures = {k: v for k, v in groups.items() if v is not None} if None in groups.values() else groups
            discriminator = tuple(str(captures.get(k, "")) for k in emit.extractor.key)
            attributes: dict[str, Any] = {**emit.attributes, **captures} if emit.attributes else captures
            if rank and "rank" not in attributes:
                attributes["rank"] = rank
            if relayed_from:
                # kept apart from this node's own lines: rules/nccl.py (RelayedOutput) moves it to its node
                attributes = {**attributes, "relayed_from": relayed_from}
                discriminator = (*discriminator, relayed_from)
            elif printed_by and not emit.event_type.startswith(EventType.CONTEXT):
                attributes = {**attributes, "printed_by": printed_by}  # moved by RelayedOutput, like relayed_from
                discriminator = (*discriminator, printed_by)
            # a fact a line states about the host it was printed on (its address, its driver) is that host's, in
            # whichever node's file it was gathered (pdsh's 'host: ', a forwarded syslog's host field)
            owner = printed_by if printed_by and emit.event_type.startswith(EventType.CONTEXT) else node
            recorded = self._recorded_time(captures, time, utc_offset) if emit.records_time else None
            if recorded is not None:
                provenance = Provenance(origin=origin, line=line_no, offset=offset, labels=labels or {})
                acc.add(emit.event_type, owner, symptom, emit.extractor.name, recorded,
                        Evidence(source=source, node=node, time=recorded, text=shown, provenance=provenance),
                        attributes, discriminator)
                continue
            acc.add(emit.event_type, owner, symptom, emit.extractor.name, time, evidence, attributes, discriminator,
                    evidence_key)
        return rejected < len(ids)

    def _recorded_time(self, captures: dict[str, Any], written: datetime | None,
                       utc_offset: timedelta | None) -> datetime | None:
        """The time a record states inside its line (capture RECORDED_AT, a stamp; or RECORDED_DATE and RECORDED_TIME),
        a zone-less one read in the line's zone, when it is not after the line was written (beyond the clock-skew
        tolerance) nor more than MAX_RECORD_LAG before it; None otherwise, and the line's own time stands."""
        found, zoned = None, False
        if stamp := captures.get(RECORDED_AT):
            found, zoned = self.timestamps.parse_zoned(stamp)
        elif (date := captures.get(RECORDED_DATE)) and (clock := captures.get(RECORDED_TIME)):
            for fmt in _RECORDED_FORMATS:
                try:
                    found = dated(datetime.strptime(f"{date} {clock}", fmt))
                    break
                except ValueError:
                    continue
        if found is None:
            return None
        found = found - utc_offset if utc_offset and not zoned else found
        if written is not None and not timedelta(seconds=-self.params.clock_skew_s) <= written - found <= MAX_RECORD_LAG:
            return None
        return found

    def _printed_by(self, text: str, node: str | None) -> str | None:
        """The allocated node other than `node` whose host name the line's prefix gives (`_HOST_PREFIX`), if any."""
        name = line_host_prefix(text) if len(self.context.nodes) > 1 else None
        if name is None:
            return None
        host = self._hosts.get(name) or self._hosts.get(name.split(".")[0])
        return host if host != node else None


def line_host_prefix(text: str) -> str | None:
    """The name a line gives ahead of its message as where it was printed (`_HOST_PREFIX`: a host, or the pod a
    launcher gathered it from), if any."""
    found = _HOST_PREFIX.match(text, 0, 256)
    return (found.group(1) or found.group(2)) if found else None


def _spaced(later: Evidence, time: datetime | None) -> bool:
    """`time` is far enough before the `later` point to be a point of its own (OutputEnd)."""
    return later.time is not None and time is not None and \
        (later.time - time).total_seconds() >= OUTPUT_POINT_SPACING_S


def _rank_prefix(text: str) -> str | None:
    """The rank a launcher's prefix (`[rank3]:`, Open MPI's `[1,3]<stdout>:`) gives the line, if any. Both end in
    `]:` or `>:`, which most lines do not hold: those are not matched at all."""
    if text.find("]:", 0, 256) < 0 and text.find(">:", 0, 256) < 0:
        return None
    found = _RANK_PREFIX.match(text, 0, 256)  # a prefix: a long line costs no more than a short one
    return found and (found.group(1) or found.group(2))


def _relay_prefix(text: str) -> str | None:
    """The address a relay prefix (Ray's '(Actor pid=N, ip=A)') says the line was printed at, if any."""
    if text.find("ip=", 0, 256) < 0:
        return None
    found = _RAY_RELAY_PREFIX.match(text, 0, 256)
    return found.group(1) if found else None


@dataclass(frozen=True, slots=True)
class _Emit:
    """What one extractor's match puts on the event stream, worked out once per source rather than per line."""

    extractor: Extractor
    event_type: str
    symptom: str | None  # a context fact's is None; a template's is filled per line (`templated`)
    templated: bool
    attributes: dict[str, Any]  # the extractor's own attributes (a line's captures are laid over them)
    records_time: bool  # its pattern captures a record's own time (RECORDED_AT, or RECORDED_DATE and RECORDED_TIME)


# How each source's extractors emit, worked out once per compiled catalog: a session reads with a LineReader of its
# own, and the service opens a session per batch.
_EMITS: weakref.WeakKeyDictionary[CompiledCatalog, dict[SourceKind, list[_Emit]]] = weakref.WeakKeyDictionary()


def _emits(extractors: list[Extractor]) -> list[_Emit]:
    emits = []
    for e in extractors:
        if e.emit_type == "context":
            emits.append(_Emit(e, f"{EventType.CONTEXT}.{e.fact}", None, False, e.attributes, False))
            continue
        templated = e.symptom is not None and any(f for _, f, _, _ in string.Formatter().parse(e.symptom))
        records_time = any(f"(?P<{name}>" in e.match_re for name in (RECORDED_AT, RECORDED_DATE))
        emits.append(_Emit(e, _EMIT_EVENT_TYPE[e.emit_type], None if templated else e.render_symptom({}), templated,
                           e.attributes, records_time))
    return emits
