"""Delivering a POST body to a receiver that may be down or busy (the Alertmanager and webhook outputs).

A delivery makes at most `retries + 1` tries. It retries on connection errors, timeouts, 408, 425, 429, 500, 502,
503 and 504; any other answer ends it (2xx: delivered; the rest: refused). Between tries it waits with
exponential backoff and full jitter: before retry n (from 0) a random time in [0, min(max_backoff,
backoff * 2**n)], so that many senders failing together do not retry together. A `Retry-After` answer (either
form of RFC 9110 section 10.2.3: delta-seconds, or an HTTP-date) is honoured: the wait is at least what it asks.
When it asks for more than `max_backoff`, the delivery stops there and says so rather than block the run.
"""

from __future__ import annotations

import random
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from datetime import datetime, timedelta, timezone

import httpx

from firstfault.blueprint.http import full_jitter, parse_http_url, retry_after_seconds
from firstfault.blueprint.options import Options, option
from firstfault.errors import ConfigError

RETRY_STATUS = frozenset({408, 425, 429, 500, 502, 503, 504})
MAX_RETRIES = 20


@dataclass(frozen=True)
class DeliveryOptions(Options):
    """How an output that POSTs to a receiver retries."""

    timeout: timedelta = option(timedelta(seconds=10), "per request")
    retries: int = option(4, "retries of one delivery (0-20) on connection errors, timeouts, 408, 425, 429 and 5xx")
    backoff: timedelta = option(timedelta(seconds=1), "the longest wait before the first retry; each next retry "
                                                      "may wait twice as long (full jitter: a random wait up to it)")
    max_backoff: timedelta = option(timedelta(seconds=60), "no wait is longer; a `Retry-After` asking for more "
                                                           "ends the delivery, which is reported")


def check_delivery(options: DeliveryOptions, where: str) -> None:
    """A ConfigError for bounds the types cannot express."""
    if not 0 <= options.retries <= MAX_RETRIES:
        raise ConfigError(f"{where}: option `retries` must be between 0 and {MAX_RETRIES}, not {options.retries}")
    if options.backoff.total_seconds() <= 0 or options.max_backoff < options.backoff:
        raise ConfigError(f"{where}: options `backoff` must be positive and `max_backoff` at least `backoff`")
    if options.timeout.total_seconds() <= 0:
        raise ConfigError(f"{where}: option `timeout` must be positive")


def check_url(url: str, where: str) -> str:
    """The URL without a trailing slash; a ConfigError naming `where` unless it is an http(s) URL with a host."""
    try:
        parse_http_url(url)
    except ConfigError as exc:
        raise ConfigError(f"{where}: {exc}") from None
    return url.rstrip("/")


@dataclass(frozen=True)
class Delivery:
    """How a delivery ended: `ok` (a 2xx answer), the tries made, the last HTTP status and what happened."""

    ok: bool
    tries: int
    status: int | None
    detail: str


Headers = Callable[[], Mapping[str, str]]


@dataclass
class Sender:
    """POSTs bodies with the retry policy above. `headers()` is called before every try (a signature can carry
    the time of the try). `sleep`, `rng` and `now` are the clock and dice (tests replace them)."""

    client: httpx.Client
    retries: int
    backoff: float
    max_backoff: float
    sleep: Callable[[float], None] = time.sleep
    rng: random.Random | None = None
    now: Callable[[], datetime] = lambda: datetime.now(timezone.utc)

    @classmethod
    def of(cls, options: DeliveryOptions, headers: Mapping[str, str] | None = None) -> Sender:
        client = httpx.Client(timeout=options.timeout.total_seconds(), headers=dict(headers or {}))
        return cls(client, options.retries, options.backoff.total_seconds(), options.max_backoff.total_seconds())

    def post(self, url: str, body: bytes, headers: Headers) -> Delivery:
        rng = self.rng or random.Random()
        detail = ""
        status: int | None = None
        for attempt in range(self.retries + 1):
            try:
                response = self.client.post(url, content=body, headers=dict(headers()))
            except httpx.TransportError as exc:
                detail, status, asked = _describe(exc), None, None
            else:
                status = response.status_code
                if 200 <= status < 300:
                    return Delivery(True, attempt + 1, status, f"HTTP {status}")
                detail = f"HTTP {status}: {response.text[:200].strip()}".rstrip(": ")
                if status not in RETRY_STATUS:
                    return Delivery(False, attempt + 1, status, f"refused: {detail}")
                asked = retry_after_seconds(response.headers.get("Retry-After"), self.now())
            if attempt == self.retries:
                break
            if asked is not None and asked > self.max_backoff:
                return Delivery(False, attempt + 1, status, f"{detail}; Retry-After asks {asked:g} s, more than "
                                                             f"max_backoff {self.max_backoff:g} s")
            wait = full_jitter(attempt, self.backoff, self.max_backoff, rng)
            self.sleep(max(wait, asked or 0.0))
        return Delivery(False, self.retries + 1, status, f"gave up after {self.retries + 1} tries ({detail})")

    def close(self) -> None:
        self.client.close()


def _describe(exc: BaseException) -> str:
    return f"{exc.__class__.__name__}: {exc}" if str(exc) else exc.__class__.__name__
