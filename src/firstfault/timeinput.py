"""Times and durations people type: on the command line, in a config file, in a dashboard query."""

from __future__ import annotations

import re
from datetime import datetime, timedelta, timezone

from firstfault.errors import ConfigError

_DURATION = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*(ms|s|m|h|d|w)?\s*$")
_UNITS = {"ms": 0.001, "s": 1, "m": 60, "h": 3600, "d": 86400, "w": 604800, None: 1}
# The longest duration accepted: a century, well inside what date arithmetic and thread waits can take.
MAX_DURATION = timedelta(days=36500)


def parse_duration(text: str | float) -> timedelta:
    """`30s`, `10m`, `2h`, `1d`, `1w`, `250ms` or a number of seconds."""
    if isinstance(text, str):
        m = _DURATION.match(text)
        if not m:
            raise ConfigError(f"not a duration: {text!r} (use e.g. 30s, 10m, 2h, 1d)")
        seconds = float(m.group(1)) * _UNITS[m.group(2)]
    elif isinstance(text, int | float) and not isinstance(text, bool):
        seconds = float(text)
    else:
        raise ConfigError(f"not a duration: {text!r} (use e.g. 30s, 10m, 2h, 1d)")
    if not 0 <= seconds <= MAX_DURATION.total_seconds():   # NaN fails too
        raise ConfigError(f"duration out of range: {text!r} (at most {MAX_DURATION.days} days)")
    return timedelta(seconds=seconds)


def parse_time(text: str, now: datetime | None = None) -> datetime:
    """An ISO 8601 time (naive = UTC), `now`, or a duration meaning that long ago (`2h` = two hours ago)."""
    now = now or datetime.now(timezone.utc)
    if text.strip() == "now":
        return now
    if _DURATION.match(text):
        try:
            return now - parse_duration(text)
        except OverflowError:
            raise ConfigError(f"not a time: {text!r} ago is before year 1") from None
    try:
        value = datetime.fromisoformat(text.strip())
    except ValueError:
        raise ConfigError(f"not a time: {text!r} (use ISO 8601, `now`, or a duration ago such as 2h)") from None
    return value if value.tzinfo else value.replace(tzinfo=timezone.utc)
