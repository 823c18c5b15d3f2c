"""Streams written in local time: telling them apart and putting them back on the workload's clock.

A stamp without a zone (traditional syslog `Mar  1 10:43:35`, `2024-03-01 10:43:35`, glog) is read as UTC, which
is wrong on a node whose syslog is written in local time: its faults then seem to happen hours before the job or
after it ended. A stream is corrected only when that is unambiguous: none of its stamps carries a zone, read as UTC
it does not fit the workload's window, and exactly one whole-hour offset (time zones are whole hours for the
clusters this reads; half-hour zones are left alone) puts every stamp of it inside the window.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from firstfault.errors import ConfigError

# How far a stream's stamps may reach outside the workload's [start, end] and still fit it: collectors take
# a margin around the job (the corpus format keeps 10 minutes before and 5 after; the Blueprint's default margin
# is 10 minutes), and node clocks drift.
WINDOW_SLACK = timedelta(minutes=30)
MAX_ZONE_HOURS = 14  # UTC-12 .. UTC+14


@dataclass
class StreamClock:
    """What a stream's own stamps said: the earliest and latest, and whether any carried a zone."""

    first: datetime | None = None
    last: datetime | None = None
    zoned: bool = False

    def saw(self, when: datetime, zoned: bool) -> None:
        if self.first is None or when < self.first:
            self.first = when
        if self.last is None or when > self.last:
            self.last = when
        self.zoned = self.zoned or zoned


def local_time_offset(clock: StreamClock, start: datetime | None, end: datetime | None) -> int | None:
    """The whole number of hours to subtract from the stream's stamps (its local time's UTC offset), when the
    stream is unambiguously in local time; None when it fits as UTC or cannot be decided."""
    if clock.zoned or clock.first is None or clock.last is None or start is None or end is None:
        return None
    low, high = start - WINDOW_SLACK, end + WINDOW_SLACK

    def fits(hours: int) -> bool:
        shift = timedelta(hours=hours)
        return low <= clock.first - shift and clock.last - shift <= high  # type: ignore[operator]

    if fits(0):
        return None
    candidates = [h for h in range(-MAX_ZONE_HOURS, MAX_ZONE_HOURS + 1) if h != 0 and fits(h)]
    return candidates[0] if len(candidates) == 1 else None


def describe_offset(hours: int) -> str:
    return f"UTC{'+' if hours >= 0 else '-'}{abs(hours):02d}:00"


def parse_timezone_option(text: str) -> tuple[str, str, str]:
    """`NODE:SOURCE=ZONE` (NODE or SOURCE may be `*`), e.g. `*:syslog=Asia/Singapore`, checked against the zone
    database."""
    target, sep, zone = text.partition("=")
    node, colon, source = target.partition(":")
    if not sep or not colon or not node or not source or not zone:
        raise ConfigError(f"not a time zone setting: {text!r} (use NODE:SOURCE=ZONE, e.g. '*:syslog=Asia/Singapore')")
    if source not in ("*", "applog", "syslog", "scheduler"):
        raise ConfigError(f"{text!r}: the source is applog, syslog, scheduler or *")
    try:
        ZoneInfo(zone)
    except (ZoneInfoNotFoundError, ValueError):
        raise ConfigError(f"{text!r}: unknown time zone {zone!r} (an IANA name such as Europe/Paris)") from None
    return node, source, zone


def configured_zone(settings: tuple[tuple[str, str, str], ...], node: str | None, source: str) -> str | None:
    """The zone configured for a node's source (the first setting that matches), if any."""
    for node_pattern, source_pattern, zone in settings:
        if node_pattern in ("*", node) and source_pattern in ("*", source):
            return zone
    return None


def zone_offset(zone: str, local: datetime) -> timedelta:
    """The UTC offset of `zone` at the wall-clock time `local` (a stamp read as UTC), daylight saving included."""
    offset = local.replace(tzinfo=ZoneInfo(zone)).utcoffset()
    return offset if offset is not None else timedelta(0)
