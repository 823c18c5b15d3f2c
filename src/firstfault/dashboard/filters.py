"""Parse and validate the dashboard's query parameters: a malformed value is a 400 with a message, never a 500."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import replace
from datetime import datetime
from urllib.parse import urlencode

from firstfault.dashboard.db import NODE_ROLES, NOT_ATTRIBUTED, SORT_COLUMNS, WorkloadFilters
from firstfault.engine.model import Outcome, SubDomain, TerminalState
from firstfault.errors import ConfigError, FirstfaultError
from firstfault.timeinput import parse_time

OUTCOMES = [o.value for o in Outcome] + [NOT_ATTRIBUTED]
SUB_DOMAINS = [s.value for s in SubDomain]
TERMINAL_STATES = [t.value for t in TerminalState]
PER_PAGE = (25, 50, 100, 200)
RANGES = ("24h", "7d", "30d", "90d", "all")
MAX_TEXT = 255
MAX_PAGE = 1_000_000


class BadRequest(FirstfaultError, ValueError):
    """A query parameter is malformed; the message names it and says what is accepted."""


def _text(params: Mapping[str, str], name: str, limit: int = MAX_TEXT) -> str | None:
    value = params.get(name)
    if value is None or not value.strip():
        return None
    if len(value) > limit:
        raise BadRequest(f"`{name}` is too long ({len(value)} characters; at most {limit})")
    if any(ord(c) < 32 for c in value):
        raise BadRequest(f"`{name}` contains control characters")
    return value.strip()


def _choice(params: Mapping[str, str], name: str, choices: list[str] | tuple[str, ...]) -> str | None:
    value = _text(params, name)
    if value is None:
        return None
    if value not in choices:
        raise BadRequest(f"`{name}` must be one of {', '.join(choices)} (got {value!r})")
    return value


def integer(params: Mapping[str, str], name: str, default: int, low: int = 0, high: int = MAX_PAGE) -> int:
    value = _text(params, name)
    if value is None:
        return default
    try:
        number = int(value)
    except ValueError:
        raise BadRequest(f"`{name}` must be a whole number (got {value!r})") from None
    if not low <= number <= high:
        raise BadRequest(f"`{name}` must be between {low} and {high} (got {number})")
    return number


def optional_integer(params: Mapping[str, str], name: str, low: int = 0, high: int = 2**62) -> int | None:
    return integer(params, name, -1, low, high) if _text(params, name) is not None else None


def _time(params: Mapping[str, str], name: str) -> datetime | None:
    value = _text(params, name, 64)
    if value is None:
        return None
    try:
        return parse_time(value)
    except (ConfigError, ValueError, OverflowError):
        raise BadRequest(f"`{name}` must be a time: ISO 8601 (2026-03-02 or 2026-03-02T08:00:00Z), `now`, or a "
                         f"duration ago such as 2h or 7d (got {value!r})") from None


def workload_filters(params: Mapping[str, str]) -> WorkloadFilters:
    node = _text(params, "node")
    role = _choice(params, "role", NODE_ROLES)
    if role and not node:
        raise BadRequest("`role` needs a `node`")
    since, until = _time(params, "from"), _time(params, "to")
    if since and until and since >= until:
        raise BadRequest("`from` must be before `to`")
    per_page = integer(params, "per_page", 50, 1, max(PER_PAGE))
    if per_page not in PER_PAGE:
        raise BadRequest(f"`per_page` must be one of {', '.join(map(str, PER_PAGE))}")
    return WorkloadFilters(
        terminal_state=_choice(params, "state", TERMINAL_STATES),
        outcome=_choice(params, "outcome", OUTCOMES),
        sub_domain=_choice(params, "sub_domain", SUB_DOMAINS),
        node=node, role=role, since=since, until=until,
        q=_text(params, "q", 200), failed=_choice(params, "failed", ("0", "1")) == "1",
        sort=_choice(params, "sort", list(SORT_COLUMNS)) or "time",
        order=_choice(params, "order", ("asc", "desc")) or "desc",
        page=integer(params, "page", 1, 1), per_page=per_page)


def range_name(params: Mapping[str, str]) -> str:
    return _choice(params, "range", RANGES) or "all"


def text(params: Mapping[str, str], name: str) -> str | None:
    return _text(params, name)


def query_string(f: WorkloadFilters, raw: Mapping[str, str], **changes: object) -> str:
    """The URL query of `f` with some fields changed (sorting links, pagination links, facet links).

    Times keep the form the user typed (`7d` stays relative)."""
    g = replace(f, **changes)  # type: ignore[arg-type]
    pairs = {"state": g.terminal_state, "outcome": g.outcome, "sub_domain": g.sub_domain, "node": g.node,
             "role": g.role, "from": raw.get("from") if "since" not in changes else _iso(g.since),
             "to": raw.get("to") if "until" not in changes else _iso(g.until), "q": g.q,
             "failed": "1" if g.failed else None,
             "sort": g.sort if g.sort != "time" else None, "order": g.order if g.order != "desc" else None,
             "page": g.page if g.page != 1 else None, "per_page": g.per_page if g.per_page != 50 else None}
    return urlencode({k: v for k, v in pairs.items() if v not in (None, "")})


def _iso(value: datetime | None) -> str | None:
    return value.strftime("%Y-%m-%dT%H:%M:%SZ") if value else None
