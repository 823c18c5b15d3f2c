"""Timestamp recognition for the log-line prefixes met on GPU clusters.

Only lines that matched an extractor (and a few lines before them) are parsed, so plain `re` is fine here.
Formats without a year (syslog, glog, vLLM's logger) take the year that puts the stamp closest to the workload window.
Formats without a zone are UTC (corpus convention; collectors normalise to UTC).
Every stamp read passes the engine's time window (engine/inputs.py): one outside it (year 1, year 9999, an offset
that overflows) gives no time, and `parse_stamp` says which text it was, for the coverage note.
"""

from __future__ import annotations

import re
from datetime import datetime, timedelta, timezone
from typing import NamedTuple

from firstfault.engine.inputs import EARLIEST, LATEST, dated

_MONTHS = {m: i for i, m in enumerate(
    ["Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec"], start=1)}

# Prefixes that carry no time and are stripped before looking again (launchers and loggers add them).
_NON_TIME_PREFIX = re.compile(
    r"""^\s*(?:
        \[rank\d+\]:                      # PyTorch >= 2.2 global-rank prefix
      | \[\d+,\d+\]<std(?:out|err)>:      # Open MPI --tag-output
      | \[[A-Za-z_][\w.-]*\d(?:\|\d+)?\]:  # torchelastic [trainer0]: / [trainer0|0]: (linear: no lazy run before \d+)
      | \d{1,6}:\s                        # srun --label
      | \([\w.-]*\s?pid=\d+(?:,\s?ip=[\d.]+)?\)\s  # Ray worker output: (ActorName pid=N) / (pid=N, ip=A)
      | (?:kern|user|daemon|syslog)\s*:\s*\w+\s*:\s  # dmesg --decode
      | \d{4}-\d{2}-\d{2}[ T]\d{2}:\d{2}\s(?=\S)  # minute-resolution platform stamp (often local time)
      | \[[A-Za-z][\w.-]{0,31}\]\s      # a logger's name tag: torchtitan's [titan] (its stamp follows)
      | \[pod/[\w.-]+/[\w.-]+\]\s      # kubectl logs --prefix: [pod/<pod>/<container>]
      | [a-z][\w.-]{2,62}:\s(?=[IWEF]\d{4}\s\d{2}:)  # a component's name ahead of its glog line (cluster-autoscaler: I0314 ...)
      | [A-Za-z][\w.-]{0,62}:\s(?=\[?\d{4}-\d{2}-\d{2}[T\s]\d{2}:)  # pdsh's and clush's host ahead of a stamped line
    )""",
    re.VERBOSE,
)

_ISO = re.compile(
    r"^\s*\[?(\d{4})-(\d{2})-(\d{2})[T _](\d{2}):(\d{2}):(\d{2})(?:[.,](\d{1,9}))?\s?(Z|[+-]\d{2}:?\d{2}|UTC)?\]?"
)
# The same stamp as _ISO reads when it starts the line with a `Z` zone: datetime.fromisoformat reads it alike
# (fraction cut at microseconds); a value it refuses (hour 24) goes the long way, where _ISO refuses it too.
_ISO_UTC = re.compile(r"\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}(?:[.,]\d{1,9})?Z")
_fromisoformat = datetime.fromisoformat
_SYSLOG = re.compile(r"^\s*([A-Z][a-z]{2})\s+(\d{1,2}) (\d{2}):(\d{2}):(\d{2})(?:\.(\d{1,9}))?\s")
# A weekday ahead of a year-less month, day and time, then a comma: SeisSol's logger ('Sun Jan 15 22:37:43, Warn: ...'),
# placed like syslog's. The same stamp with a year (`date`, nvidia-smi's banner, horovodrun --timestamp-output) is the
# printing host's local time and is not read.
_WEEKDAY_COMMA = re.compile(r"^\s*(?:Mon|Tue|Wed|Thu|Fri|Sat|Sun) ([A-Z][a-z]{2})\s+(\d{1,2}) (\d{2}):(\d{2}):(\d{2}),\s")
_DMESG_T = re.compile(r"^\s*\[[A-Z][a-z]{2} ([A-Z][a-z]{2})\s+(\d{1,2}) (\d{2}):(\d{2}):(\d{2}) (\d{4})\]")
_BRACKET_MDY = re.compile(r"^\s*\[([A-Z][a-z]{2}) (\d{1,2}) (\d{4}) (\d{2}):(\d{2}):(\d{2})\]")
# log4j's default pattern as Spark and Hadoop log (yy/MM/dd HH:mm:ss): a two-digit year, read only near the window.
_YY_MM_DD = re.compile(r"^\s*(\d{2})/(\d{2})/(\d{2}) (\d{2}):(\d{2}):(\d{2})(?:[.,](\d{1,9}))?\s")
# ipmitool's `sel list` / `sel elist` records: '<id> | MM/DD/YYYY | HH:MM:SS | <sensor> | <event> | ...' (the BMC's
# own clock, read as UTC like every zone-less stamp).
_IPMI_SEL = re.compile(r"^\s*[0-9a-fA-F]{1,6} \| (\d{2})/(\d{2})/(\d{4}) \| (\d{2}):(\d{2}):(\d{2}) \|")
# PBS and Torque logs (server, MOM, accounting) and tracejob's output: 'MM/DD/YYYY HH:MM:SS;<event>;...' and
# 'MM/DD/YYYY HH:MM:SS  <S|M|A|L>    <message>' (the source letter of tracejob's column). Month first, the daemon's clock.
_PBS_LOG = re.compile(r"^\s*(\d{2})/(\d{2})/(\d{4}) (\d{2}):(\d{2}):(\d{2})(?:;|\s+[SMAL]\s)")
# A time of day alone, in brackets, ahead of the message: MXNet's logging ('[09:41:12] src/...'), spdlog's default
# pattern as Habana's SynapseAI and HCCL log ('[14:28:26.076200][HCCL ][info ]'), scripts' own '[hh:mm:ss] step N'.
# Placed only inside a known workload window shorter than a day, on the one date that puts it there.
_TIME_OF_DAY = re.compile(r"^\s*\[(\d{2}):(\d{2}):(\d{2})(?:\.(\d{1,9}))?\](?=[\s\[])")
# kubectl describe node's condition rows: '<Type>  <Status>  <LastHeartbeatTime>  <LastTransitionTime>  <Reason>
# <Message>', both times in RFC 1123 form with an offset ('Fri, 10 Jul 2026 20:31:27 +0000'). The row is dated at its
# transition: when the condition took the status it shows.
_KUBE_CONDITION = re.compile(
    r"^\s*[A-Z]\w+\s+(?:True|False|Unknown)\s+[A-Z][a-z]{2}, \d{2} [A-Z][a-z]{2} \d{4} \d{2}:\d{2}:\d{2} [+-]\d{4}\s+"
    r"[A-Z][a-z]{2}, (\d{2}) ([A-Z][a-z]{2}) (\d{4}) (\d{2}):(\d{2}):(\d{2}) ([+-]\d{4})\s")
# Python logging with a level name ahead of a year-less 'MM-DD HH:MM:SS' (datefmt '%m-%d %H:%M:%S'): vLLM's logger
# ('INFO 08-07 10:40:53 model_runner.py:1024] ...', later '[model_runner.py:1024]') and SkyPilot's, which shortens
# the level to its letter in brackets ('[I 03-15 16:42:58 controller.py:146] ...').
_LEVEL_MM_DD = re.compile(r"^\s*\[?(?:INFO|WARNING|ERROR|DEBUG|CRITICAL|[IWEDC]) (\d{2})-(\d{2}) (\d{2}):(\d{2}):(\d{2})"
                          r"(?:[.,](\d{1,6}))?\s")
# glog / c10 logging: `E0321 02:07:08.408` and newer PyTorch `[E313 10:09:51.640000120` (month not zero-padded), and
# PyTorch's TORCH_LOGS records in the same form, where DEBUG is written `V` (`V0731 00:56:29.062000 132351 ...]`).
_GLOG = re.compile(r"^\s*\[?[IWEFV](\d{1,2}?)(\d{2}) (\d{2}):(\d{2}):(\d{2})(?:\.(\d{1,9}))?\s")

# Seconds since the epoch (UTC) ahead of a line: NVIDIA dllogger's v0.2 records (':::NVLOGv0.2.2 <model>
# 1568948094.923844576 (<file>:<line>) <key>: <value>'), MLPerf's first compliance log (':::MLL 1558643436.455
# run_start: ...'), and a program's own print of time.time() ('1530079544.343966 rank: 0, batch:0'). A bare number is
# read only with a fraction and near the window, so that a count or an id is not taken for a time.
_EPOCH = re.compile(r"^\s*(?P<tag>:::NVLOGv[\d.]+ \S+ |:::MLL )?(?P<s>1\d{9})(?:\.(?P<frac>\d{1,9}))?\s")
# UCX's own log prefix (ucs/debug/log.c): '[<seconds>.<microseconds>] [<host>:<pid>:<thread>] <file>:<line> UCX ERROR',
# seconds since the epoch (UTC); the host bracket that follows makes the form unambiguous.
_UCX_EPOCH = re.compile(r"^\s*\[(?P<s>1\d{9})\.(?P<frac>\d{6})\] (?=\[[\w.-]+:\s*\d+)")
# MLPerf's compliance log since mlperf_logging 1.0: ':::MLLOG {"namespace": "", "time_ms": 1634705315213, ...}', the
# record's time in milliseconds since the epoch (UTC).
_MLLOG = re.compile(r'^\s*:::MLLOG \{"namespace": "[^"\n]{0,64}", "time_ms": (?P<ms>1\d{12})\b')

# A stamp is a prefix: only this much of a line is looked at (a long line costs no more than a short one).
_MAX_PREFIX_CHARS = 256
_HALF_YEAR = timedelta(days=182)  # less than half of the shortest year: no other year can be as close
_DAY = timedelta(days=1)
_WINDOW_SLACK = timedelta(hours=1)  # a time of day alone is placed up to this far outside the workload window


def _micro(fraction: str | None) -> int:
    if not fraction:
        return 0
    return int((fraction + "000000")[:6])


def _zone(text: str | None) -> timezone:
    if not text or text in ("Z", "UTC"):
        return timezone.utc
    sign = 1 if text[0] == "+" else -1
    digits = text[1:].replace(":", "")
    return timezone(sign * timedelta(hours=int(digits[:2]), minutes=int(digits[2:4])))


class Stamp(NamedTuple):
    """What a line's prefix said about its time."""

    time: datetime | None  # UTC, inside the engine's window
    zoned: bool  # the stamp carried a zone of its own (ISO 8601 `Z` or `+hh:mm`)
    outside: str | None = None  # a stamp that was read but lies outside the window (`time` is then None)


_NO_STAMP = Stamp(None, False)
_new_stamp = tuple.__new__


class TimestampParser:
    """Parses the time of a log line. `reference` (the workload window's start) resolves year-less formats; with `until`
    (the window's end) as well, a time of day alone is placed on the one date that puts it inside the window."""

    def __init__(self, reference: datetime | None = None, until: datetime | None = None) -> None:
        self.reference = reference
        self.until = until

    def parse(self, line: str) -> datetime | None:
        return self.parse_stamp(line).time

    def parse_zoned(self, line: str) -> tuple[datetime | None, bool]:
        """The line's time, and whether its stamp carried a zone of its own (ISO 8601 `Z` or `+hh:mm`): a stamp
        without one is read as UTC, which a stream written in local time contradicts (engine/clock.py)."""
        stamp = self.parse_stamp(line)
        return stamp.time, stamp.zoned

    def parse_stamp(self, line: str) -> Stamp:
        """The line's stamp (never raises): its time when it lies in the window, else the text read."""
        if (m := _ISO_UTC.match(line)) is not None:  # the commonest stamp, read in C; anything unusual below
            try:
                stamped = _fromisoformat(m.group())
            except ValueError:
                pass
            else:
                if EARLIEST <= stamped < LATEST:
                    return _new_stamp(Stamp, (stamped, True, None))
        return self._parse_stamp(line)

    def _parse_stamp(self, line: str) -> Stamp:
        """`parse_stamp` without its shortcut for the commonest stamp."""
        text = line[:_MAX_PREFIX_CHARS]
        for _ in range(3):
            found = self._parse_here(text)
            if found is not None:
                when, zoned, matched = found
                if when is not None and when.tzinfo is timezone.utc:  # what dated() gives, without its calls
                    time = when if EARLIEST <= when < LATEST else None
                else:
                    time = None if when is None else dated(when)
                # the tuple itself: a NamedTuple's own constructor costs a Python call per matching line
                return _new_stamp(Stamp, (time, zoned, None if time is not None else matched.strip()))
            stripped = _NON_TIME_PREFIX.sub("", text, count=1)
            if stripped == text:
                break
            text = stripped
        return _NO_STAMP

    def _parse_here(self, text: str) -> tuple[datetime | None, bool, str] | None:
        """The stamp at the start of `text`: (its time, zoned, the matched text), the time None when it cannot be
        placed at all (past datetime's limits); None when there is no stamp."""
        m: re.Match[str] | None = None
        try:
            if m := _ISO.match(text):
                y, mo, d, h, mi, s, frac, zone = m.groups()
                dt = datetime(int(y), int(mo), int(d), int(h), int(mi), int(s), _micro(frac), _zone(zone))
                return dt.astimezone(timezone.utc), zone is not None, m.group()
            if m := _SYSLOG.match(text):
                mon, d, h, mi, s, frac = m.groups()
                if mon in _MONTHS:
                    return self._placed(self._with_year(_MONTHS[mon], int(d), int(h), int(mi), int(s), _micro(frac)), m)
            if m := _WEEKDAY_COMMA.match(text):
                mon, d, h, mi, s = m.groups()
                if mon in _MONTHS:
                    return self._placed(self._with_year(_MONTHS[mon], int(d), int(h), int(mi), int(s), 0), m)
            if m := _DMESG_T.match(text):
                mon, d, h, mi, s, y = m.groups()
                if mon in _MONTHS:
                    return (datetime(int(y), _MONTHS[mon], int(d), int(h), int(mi), int(s), tzinfo=timezone.utc),
                            False, m.group())
            if m := _BRACKET_MDY.match(text):
                mon, d, y, h, mi, s = m.groups()
                if mon in _MONTHS:
                    return (datetime(int(y), _MONTHS[mon], int(d), int(h), int(mi), int(s), tzinfo=timezone.utc),
                            False, m.group())
            if m := _YY_MM_DD.match(text):
                y, mo, d, h, mi, s, frac = m.groups()
                when = datetime(2000 + int(y), int(mo), int(d), int(h), int(mi), int(s), _micro(frac), tzinfo=timezone.utc)
                near = self.reference is not None and abs(when - self.reference) < _HALF_YEAR
                return (when, False, m.group()) if near else None
            if m := _PBS_LOG.match(text):
                mo, d, y, h, mi, s = m.groups()
                return (datetime(int(y), int(mo), int(d), int(h), int(mi), int(s), tzinfo=timezone.utc), False,
                        m.group())
            if m := _IPMI_SEL.match(text):
                mo, d, y, h, mi, s = m.groups()
                return (datetime(int(y), int(mo), int(d), int(h), int(mi), int(s), tzinfo=timezone.utc), False,
                        m.group())
            if m := _KUBE_CONDITION.match(text):
                d, mon, y, h, mi, s, zone = m.groups()
                if mon in _MONTHS:
                    dt = datetime(int(y), _MONTHS[mon], int(d), int(h), int(mi), int(s), tzinfo=_zone(zone))
                    return dt.astimezone(timezone.utc), True, m.group()
            if m := _TIME_OF_DAY.match(text):
                h, mi, s, frac = m.groups()
                return self._placed(self._in_window(int(h), int(mi), int(s), _micro(frac)), m)
            if (m := _GLOG.match(text)) or (m := _LEVEL_MM_DD.match(text)):
                mo, d, h, mi, s, frac = m.groups()
                return self._placed(self._with_year(int(mo), int(d), int(h), int(mi), int(s), _micro(frac)), m)
            if m := _MLLOG.match(text):
                ms = int(m.group("ms"))
                return datetime.fromtimestamp(ms // 1000, timezone.utc).replace(microsecond=ms % 1000 * 1000), True, m.group()
            if m := _UCX_EPOCH.match(text):
                when = datetime.fromtimestamp(int(m.group("s")), timezone.utc)
                return when.replace(microsecond=_micro(m.group("frac"))), True, m.group()
            if (m := _EPOCH.match(text)) and (m.group("tag") or m.group("frac")):
                when = datetime.fromtimestamp(int(m.group("s")), timezone.utc).replace(microsecond=_micro(m.group("frac")))
                tagged = m.group("tag") is not None
                near = self.reference is not None and abs(when - self.reference) < _HALF_YEAR
                return (when, True, m.group()) if tagged or near else None
        except ValueError:  # out-of-range field values: not a timestamp after all
            return None
        except OverflowError:  # a valid stamp whose zone moves it past datetime's limits
            return None, True, m.group() if m else ""
        return None

    @staticmethod
    def _placed(when: datetime | None, m: re.Match[str]) -> tuple[datetime | None, bool, str] | None:
        """A year-less stamp that found its year (zone-less), or no stamp (no reference to find it from)."""
        return None if when is None else (when, False, m.group())

    def _in_window(self, hour: int, minute: int, second: int, micro: int) -> datetime | None:
        """The one time on the window's dates with this time of day that lies in the window (with an hour's slack
        either side), or None: no window, a window of a day or more, or no such time."""
        start, end = self.reference, self.until
        if start is None or end is None or not timedelta(0) <= end - start < _DAY - 2 * _WINDOW_SLACK:
            return None
        found = []
        for day in (start.date() - _DAY, start.date(), end.date(), end.date() + _DAY):
            candidate = datetime(day.year, day.month, day.day, hour, minute, second, micro, tzinfo=timezone.utc)
            if start - _WINDOW_SLACK <= candidate <= end + _WINDOW_SLACK and candidate not in found:
                found.append(candidate)
        return found[0] if len(found) == 1 else None

    def _with_year(self, month: int, day: int, hour: int, minute: int, second: int, micro: int) -> datetime | None:
        ref = self.reference
        if ref is None:  # a year-less stamp cannot be placed without a window; never guess from the clock
            return None
        try:  # within half a year of the reference, the reference's year is the closest (the others are further)
            same_year = datetime(ref.year, month, day, hour, minute, second, micro, tzinfo=timezone.utc)
            if abs(same_year - ref) < _HALF_YEAR:
                return same_year
        except ValueError:
            pass
        best: datetime | None = None
        for year in (ref.year - 1, ref.year, ref.year + 1):
            try:
                candidate = datetime(year, month, day, hour, minute, second, micro, tzinfo=timezone.utc)
            except ValueError:  # 29 Feb in a non-leap year
                continue
            if best is None or abs(candidate - ref) < abs(best - ref):
                best = candidate
        return best

