"""Local log files: path templates per node and source, rotated and gzipped files, time-window filtering.

    --connector logs files applog '/var/log/slurm/{job_id}/{node}.out' syslog '/var/log/nodes/{node}/syslog'
    --connector logs files label stdout applog '{stdout}'

A template is expanded with the context's fields (`{node}`, `{job_id}`, `{workload_id}`, `{attempt}`,
`{name}`) and its metadata keys (the Slurm connector sets `{stdout}`, `{stderr}`, `{batch_host}`,
`{work_dir}`, `{user}`); it may contain glob characters. A template without `{node}` names a file of the whole
job, attributed to the node given by the `node` option (default: the batch host, else the first node).
"""

from __future__ import annotations

import glob
import gzip
import os
import re
import stat
import string
import zlib
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import BinaryIO
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from firstfault.blueprint.base import LineBatch, Window
from firstfault.blueprint.config import ConnectorSpec
from firstfault.blueprint.options import CollectorOptions, MarginOptions, option, parse_options
from firstfault.engine import ExecutionContext, SourceKind
from firstfault.engine.clock import StreamClock, local_time_offset, zone_offset
from firstfault.engine.engine import looks_binary
from firstfault.engine.evidence import open_evidence
from firstfault.engine.scanner import DEFAULT_MAX_LINE_BYTES
from firstfault.engine.timestamps import TimestampParser
from firstfault.errors import CollectorError, ConfigError, NothingInScope

BATCH_BYTES = 4 * 1024 * 1024
_ROTATED = re.compile(r"^(?:\.(\d+)|-(\d{8,10}))(?:\.gz)?$|^\.gz$")
_SOURCES = ("applog", "syslog", "scheduler")
_HEAD_LINES = 64  # lines looked at for a file's first stamp
_TAIL_BYTES = 64 * 1024  # bytes looked at for its last stamp
# A line is not written after its file's last modification: a stamp later than that (plus this much for clocks
# and local times read as UTC) is not trusted to end or scope the reading.
_CLOCK_SLACK = timedelta(days=1)
# What reading one file can raise besides CollectorError: that file fails, the others are still read.
_UNREADABLE = (OSError, EOFError, zlib.error)   # gzip.BadGzipFile is an OSError


@dataclass(frozen=True)
class FileScope:
    """How to read one file: the node and source it is evidence of, and the window to keep (None: all)."""

    node: str | None
    source: SourceKind
    origin: str
    window: Window | None
    roots: tuple[Path, ...]              # the file is read only if its real path lies under one of these
    utc_offset: timedelta | None = None  # the file is in local time at this offset (configured or inferred)


def open_inside(path: Path, roots: tuple[Path, ...]) -> BinaryIO:
    """Open a log file for binary streaming only if its real path (every symlink followed) lies under one of
    `roots` (real paths too); else CollectorError saying why it is refused. The resolved path is what is opened,
    through the engine's `open_evidence`: a regular file only (never a FIFO or a device), `.gz` decompressed up
    to its cap."""
    real = Path(os.path.realpath(path))
    if not any(real.is_relative_to(root) for root in roots):
        allowed = ", ".join(str(r) for r in roots) or "none: set the collector's `roots`"
        raise CollectorError(f"{path}: refused: it resolves to {real}, outside the allowed roots ({allowed})")
    if not stat.S_ISREG(os.stat(real).st_mode):
        raise CollectorError(f"{path}: refused: not a regular file")
    return open_evidence(real)


def read_batches(path: Path, scope: FileScope, max_bytes: int = BATCH_BYTES) -> Iterator[LineBatch]:
    """Consecutive-line batches of one log file (gzip read transparently); lines outside the window dropped.

    A line without a timestamp keeps the fate of the last stamped line (continuations of multi-line
    messages). Files are chronological, so reading stops at the first stamped line past the window. A stamp
    later than the file's last write cannot be trusted: it neither drops nor ends anything, its line is read as
    unstamped, and once the whole file is read the collector reports it (CollectorError naming the file and the
    line), so the result says it is partial.
    """
    untrusted: list[str] = []
    with open_inside(path, scope.roots) as stream:
        if looks_binary(stream.peek(65536)[:65536] if hasattr(stream, "peek") else b""):
            raise CollectorError(f"{path}: binary content, not a log file")
        parser = TimestampParser(scope.window.start if scope.window else None)
        offset = scope.utc_offset
        minutes = None if offset is None else int(offset.total_seconds() // 60)
        latest = _modified(path) + _CLOCK_SLACK
        lines: list[str] = []
        first = size = 0
        keep = True
        for number, raw in enumerate(bounded_lines(stream, DEFAULT_MAX_LINE_BYTES), start=1):
            text = raw.decode("utf-8", errors="replace").rstrip("\r\n")
            if scope.window is not None:
                stamp, problem = _window_stamp(parser, text, offset, latest)
                if problem is not None:
                    untrusted.append(f"line {number}: {problem}")
                if stamp is not None:
                    if stamp > scope.window.end:
                        break
                    keep = stamp >= scope.window.start
            if not keep or size >= max_bytes:
                if lines:
                    yield LineBatch(scope.node, scope.source, scope.origin, lines, first, minutes)
                lines, size = [], 0
                if not keep:
                    continue
            if not lines:
                first = number
            lines.append(text)
            size += len(text) + 1
        if lines:
            yield LineBatch(scope.node, scope.source, scope.origin, lines, first, minutes)
    if untrusted:
        raise CollectorError(f"{path}: {len(untrusted)} line(s) with an untrusted timestamp, read as unstamped "
                             f"({untrusted[0]})")


def _window_stamp(parser: TimestampParser, text: str, offset: timedelta | None,
                  latest: datetime) -> tuple[datetime | None, str | None]:
    """The line's UTC time for the window (None: no stamp, or one not to trust), and why it is not trusted. (A
    stamp outside the engine's window of sane times is no stamp already: the engine says so when it reads it.)"""
    stamp, zoned = parser.parse_zoned(text)
    if stamp is not None and offset and not zoned:
        stamp -= offset
    if stamp is not None and stamp > latest:
        return None, f"stamped {stamp.isoformat()}, after the file was last written"
    return stamp, None


def stamp_range(path: Path, reference: datetime | None, roots: tuple[Path, ...]) -> StreamClock:
    """What the file's own stamps say: its first and last stamped lines (head and tail only, so a large file
    costs two short reads) and whether any carries a zone."""
    parser = TimestampParser(reference)
    clock = StreamClock()
    with open_inside(path, roots) as stream:
        for count, raw in enumerate(bounded_lines(stream, DEFAULT_MAX_LINE_BYTES)):
            stamp, zoned = parser.parse_zoned(raw.decode("utf-8", errors="replace"))
            if stamp is not None:
                clock.saw(stamp, zoned)
                break
            if count >= _HEAD_LINES:
                break
        tail = _tail(stream)
    for raw in reversed(tail.splitlines()):
        stamp, zoned = parser.parse_zoned(raw.decode("utf-8", errors="replace"))
        if stamp is not None:
            clock.saw(stamp, zoned)
            break
    return clock


def _tail(stream: BinaryIO) -> bytes:
    """The last bytes of a stream already read from (seekable files: a seek; gzip: what is left, bounded)."""
    if stream.seekable() and not isinstance(stream, gzip.GzipFile):
        stream.seek(0, os.SEEK_END)
        size = stream.tell()
        stream.seek(max(0, size - _TAIL_BYTES))
        return stream.read(_TAIL_BYTES)
    last = b""
    while chunk := stream.read(_TAIL_BYTES):
        last = (last + chunk)[-_TAIL_BYTES:]
    return last


def read_files(files: Iterable[tuple[Path, FileScope]]) -> Iterator[LineBatch]:
    """The batches of every file; a file that cannot be read whole (binary, unreadable, a broken gzip, a line
    stamped beyond the calendar) does not stop the others: they are all read, then the collector reports what
    failed (CollectorError)."""
    failures: list[str] = []
    count = 0
    for path, scope in files:
        count += 1
        try:
            yield from read_batches(path, scope)
        except CollectorError as exc:
            failures.append(str(exc))
        except _UNREADABLE as exc:
            failures.append(f"{path}: cannot be read: {exc.__class__.__name__}: {exc}")
    if failures:
        raise CollectorError(f"{len(failures)} of {count} file(s) could not be read whole: "
                             f"{'; '.join(failures[:3])}")


def bounded_lines(stream: BinaryIO, limit: int) -> Iterator[bytes]:
    """The lines of a binary stream, each cut to `limit` bytes; the rest of a longer line is read in bounded
    pieces and dropped, so memory does not grow with the length of a line (a 100 MB line without a newline)."""
    while True:
        line = stream.readline(limit)
        if not line:
            return
        if len(line) == limit and not line.endswith(b"\n"):
            while True:
                rest = stream.readline(limit)
                if not rest or rest.endswith(b"\n"):
                    break
        yield line


def rotated_family(path: Path) -> list[Path]:
    """`path` and its rotations (`.1`, `.2.gz`, `-20240301.gz` ...), oldest first."""
    if not path.parent.is_dir():
        return [path] if path.exists() else []
    family: list[tuple[tuple[int, int], Path]] = []
    for sibling in path.parent.iterdir():
        if sibling.name == path.name:
            family.append(((1, 0), sibling))
            continue
        if not sibling.name.startswith(path.name):
            continue
        m = _ROTATED.match(sibling.name[len(path.name):])
        if m is None:
            continue
        if m.group(1):       # logrotate numbering: the higher the older
            family.append(((0, -int(m.group(1))), sibling))
        elif m.group(2):     # dateext: the lower the older
            family.append(((0, int(m.group(2)) - 10 ** 10), sibling))
        else:                # path.gz: the file itself, compressed
            family.append(((1, 1), sibling))
    return [p for _, p in sorted(family, key=lambda item: item[0]) if p.is_file()]


def expand(template: str, fields: dict[str, str]) -> str | None:
    """The template with `{field}`s filled in (values glob-escaped); None when a field is missing."""
    try:
        names = {name for _, name, _, _ in string.Formatter().parse(template) if name}
    except ValueError as exc:
        raise ConfigError(f"logs files: bad path template {template!r}: {exc}") from None
    if not names <= fields.keys():
        return None
    return template.format(**{k: glob.escape(v) for k, v in fields.items() if k in names})


def fixed_root(template: str) -> tuple[Path, ...]:
    """The directory a template's fixed beginning names (`/var/log/nodes` for `/var/log/nodes/{node}/syslog`),
    as a real path; none when the template begins with a field or a glob (`{stdout}`: job accounting says where)."""
    fixed = re.split(r"[{*?\[]", template, maxsplit=1)[0]
    directory = fixed if fixed.endswith("/") else os.path.dirname(fixed)
    real = os.path.realpath(directory) if directory else ""
    return (Path(real),) if directory and real != "/" else ()


def context_fields(ctx: ExecutionContext) -> dict[str, str]:
    fields = {"job_id": ctx.job_id, "workload_id": ctx.workload_id, "attempt": str(ctx.attempt), "name": ctx.name}
    fields.update({k: v for k, v in ctx.metadata.items() if k.isidentifier() and v})
    return fields


@dataclass(frozen=True)
class FilesOptions(CollectorOptions, MarginOptions):
    applog: tuple[str, ...] = option((), "path templates of application logs (the job's own: read whole unless "
                                         "`window on`)")
    syslog: tuple[str, ...] = option((), "path templates of syslogs")
    scheduler: tuple[str, ...] = option((), "path templates of scheduler logs")
    node: str | None = option(None, "the node of job-wide files (may be a template)", shown="batch host")
    window: bool | None = option(None, "drop lines outside the window",
                                 shown="`on` for syslog and scheduler, `off` for applog")
    timezone: str | None = option(None, "the IANA zone the files' stamps without a zone are written in (e.g. "
                                        "`Asia/Singapore`)", shown="inferred: a file that fits the window only at "
                                                                   "one whole-hour offset is read at it")
    rotated: bool = option(True, "read the rotated siblings")
    roots: tuple[str, ...] = option((), "the directories files may be read from: a file whose real path (symlinks "
                                        "followed) is elsewhere, or that is not a regular file, is refused and "
                                        "named in the report", split=True,
                                    shown="each template's fixed leading directories (none for a template that "
                                          "begins with a field, such as `{stdout}`)")


class FilesCollector:
    kind = "logs"
    Options = FilesOptions

    def __init__(self, spec: ConnectorSpec, margin: timedelta) -> None:
        options = parse_options(FilesOptions, spec)
        self.label = options.label or spec.name
        self.templates = [(SourceKind.APPLOG, t) for t in options.applog] + \
            [(SourceKind.SYSLOG, t) for t in options.syslog] + [(SourceKind.SCHEDULER, t) for t in options.scheduler]
        if not self.templates:
            raise ConfigError(f"logs files: give at least one path template ({', '.join(_SOURCES)} TEMPLATE)")
        self.roots = {t: tuple(Path(os.path.realpath(r)) for r in options.roots) if options.roots
                      else fixed_root(t) for _, t in self.templates}
        self.node_template = options.node
        self.filter_window = {s: options.window if options.window is not None else s != SourceKind.APPLOG
                              for s in SourceKind}
        self.rotated = options.rotated
        self.margin = options.margin if options.margin is not None else margin
        self.zone = options.timezone
        if self.zone is not None:
            try:
                ZoneInfo(self.zone)
            except (ZoneInfoNotFoundError, ValueError):
                raise ConfigError(f"logs files: unknown time zone {self.zone!r} (an IANA name such as "
                                  "Europe/Paris)") from None

    def applies(self, ctx: ExecutionContext) -> bool:
        return True

    def collect(self, ctx: ExecutionContext) -> Iterator[LineBatch]:
        seen: set[Path] = set()
        missing: list[str] = []
        yield from read_files(self._files(ctx, seen, missing))
        if not seen:
            raise NothingInScope(f"no file matched: {'; '.join(sorted(set(missing))[:5])}")

    def _files(self, ctx: ExecutionContext, seen: set[Path], missing: list[str]) -> Iterator[tuple[Path, FileScope]]:
        """Every file in the workload's scope, each once (two templates naming one file read it once)."""
        scoped = Window.of(ctx, self.margin) if ctx.start_time or ctx.end_time else None
        for source, template in self.templates:
            window = scoped if self.filter_window[source] else None
            for node, pattern in self._patterns(ctx, template, missing):
                paths = self._paths(pattern, window)
                if not paths:
                    missing.append(pattern)
                for path in paths:
                    if path in seen:
                        continue
                    seen.add(path)
                    roots = self.roots[template]
                    yield path, FileScope(node, source, str(path), window, roots, self._utc_offset(ctx, path, roots))

    def _patterns(self, ctx: ExecutionContext, template: str,
                  missing: list[str]) -> Iterator[tuple[str | None, str]]:
        fields = context_fields(ctx)
        if "{node}" in template:
            for node in ctx.nodes:
                pattern = expand(template, {**fields, "node": node})
                if pattern is not None:
                    yield node, pattern
            return
        pattern = expand(template, fields)
        if pattern is None:
            missing.append(f"{template} (a field it needs is not known for this workload)")
            return
        yield self._job_node(ctx, fields), pattern

    def _utc_offset(self, ctx: ExecutionContext, path: Path, roots: tuple[Path, ...]) -> timedelta | None:
        """The local time a file is written in: the configured zone, else inferred from its own stamps against
        the workload's window (engine/clock.py); None when it reads as UTC or cannot be decided."""
        reference = ctx.start_time or ctx.end_time
        if self.zone is not None:
            return zone_offset(self.zone, reference) if reference is not None else None
        try:
            clock = stamp_range(path, reference, roots)
        except (CollectorError, *_UNREADABLE):
            return None   # read_batches reports the file
        hours = local_time_offset(clock, ctx.start_time, ctx.end_time)
        return None if hours is None else timedelta(hours=hours)

    def _job_node(self, ctx: ExecutionContext, fields: dict[str, str]) -> str | None:
        if self.node_template:
            return expand(self.node_template, fields)
        return fields.get("batch_host") or (ctx.nodes[0] if ctx.nodes else None)

    def _paths(self, pattern: str, window: Window | None) -> list[Path]:
        matches = sorted(Path(p) for p in glob.glob(pattern)) if glob.has_magic(pattern) else [Path(pattern)]
        paths: list[Path] = []
        for match in matches:
            family = rotated_family(match) if self.rotated else ([match] if match.is_file() else [])
            paths += [p for p in family if window is None or _modified(p) >= window.start]
        return paths


def _modified(path: Path) -> datetime:
    return datetime.fromtimestamp(os.stat(path).st_mtime, timezone.utc)
