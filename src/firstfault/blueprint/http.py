"""One HTTP client for every remote the Blueprint talks to (service, Loki, Prometheus): a total deadline per
request, a cap on the size of an answer, retries with exponential backoff and full jitter on connection errors,
429 and 5xx (honouring `Retry-After` in seconds or as an HTTP-date), auth headers.

`timeout` is the whole of one attempt, not only a silence: every socket operation (connect, TLS, each read and
write, headers included) waits at most what is left of it, so a server sending a byte every few seconds is cut
at the deadline (a ReadTimeout, retried like any other). An answer is read as a stream and abandoned once it
holds more than `max_bytes` (decoded), which is not retried: it would be as large again.
"""

from __future__ import annotations

import random
import threading
import time
from collections.abc import Callable, Iterable, Mapping
from datetime import datetime, timezone
from email.utils import parsedate_to_datetime
from typing import TYPE_CHECKING, Any

import httpcore
import httpx

from firstfault.errors import ConfigError, HttpError

if TYPE_CHECKING:
    from firstfault.blueprint.options import HttpOptions

RETRY_STATUS = frozenset({429, 500, 502, 503, 504})
# The largest answer read (decoded bytes); HttpOptions.max_answer overrides it for Loki and Prometheus.
DEFAULT_MAX_ANSWER_BYTES = 64 * 2**20

# The monotonic time by which the current thread's request must be done (None: no request in progress).
_deadline = threading.local()


def _left(timeout: float | None, error: type[Exception]) -> float | None:
    """A socket operation's timeout: at most what is left of the request's deadline (`error` once it passed)."""
    at: float | None = getattr(_deadline, "at", None)
    if at is None:
        return timeout
    left = at - time.monotonic()
    if left <= 0:
        raise error("the request's deadline passed")
    return left if timeout is None else min(timeout, left)


class _DeadlineStream(httpcore.NetworkStream):
    def __init__(self, stream: httpcore.NetworkStream) -> None:
        self.stream = stream

    def read(self, max_bytes: int, timeout: float | None = None) -> bytes:
        return self.stream.read(max_bytes, _left(timeout, httpcore.ReadTimeout))

    def write(self, buffer: bytes, timeout: float | None = None) -> None:
        self.stream.write(buffer, _left(timeout, httpcore.WriteTimeout))

    def close(self) -> None:
        self.stream.close()

    def start_tls(self, ssl_context: Any, server_hostname: str | None = None,
                  timeout: float | None = None) -> httpcore.NetworkStream:
        return _DeadlineStream(self.stream.start_tls(ssl_context, server_hostname,
                                                     _left(timeout, httpcore.ConnectTimeout)))

    def get_extra_info(self, info: str) -> Any:
        return self.stream.get_extra_info(info)


class _DeadlineBackend(httpcore.NetworkBackend):
    """httpcore's own sockets, each operation bounded by the deadline of the request it serves."""

    def __init__(self) -> None:
        self.backend = httpcore.SyncBackend()

    def connect_tcp(self, host: str, port: int, timeout: float | None = None, local_address: str | None = None,
                    socket_options: Iterable[Any] | None = None) -> httpcore.NetworkStream:
        return _DeadlineStream(self.backend.connect_tcp(host, port, _left(timeout, httpcore.ConnectTimeout),
                                                        local_address, socket_options))

    def sleep(self, seconds: float) -> None:
        self.backend.sleep(seconds)


def _with_deadlines(client: httpx.Client) -> httpx.Client:
    """The client with its direct connections on the deadline backend (httpx has no option for the network
    backend, so the pool of its default transport is replaced by the same pool on ours). Requests through a
    proxy from `HTTP(S)_PROXY` keep httpx's per-operation timeouts only."""
    transport = client._transport
    if isinstance(transport, httpx.HTTPTransport):
        transport._pool = httpcore.ConnectionPool(ssl_context=httpx.create_ssl_context(), max_connections=100,
                                                  max_keepalive_connections=20, keepalive_expiry=5.0,
                                                  network_backend=_DeadlineBackend())
    return client


class RetryingClient:
    def __init__(self, base_url: str, *, headers: Mapping[str, str] | None = None, timeout: float = 30.0,
                 retries: int = 4, backoff: float = 0.5, max_backoff: float = 30.0,
                 sleep: Callable[[float], None] = time.sleep,
                 max_bytes: int = DEFAULT_MAX_ANSWER_BYTES, rng: random.Random | None = None) -> None:
        self.base_url = base_url.rstrip("/")
        self.timeout = timeout
        self.max_bytes = max_bytes
        self.retries = retries
        self.backoff = backoff
        self.max_backoff = max_backoff
        self.sleep = sleep
        self.rng = rng or random.Random()
        url = parse_http_url(self.base_url)
        self.client = _with_deadlines(httpx.Client(base_url=url, headers=dict(headers or {}), timeout=timeout))
        self.retried = 0

    def close(self) -> None:
        self.client.close()

    def request(self, method: str, path: str, *, params: Mapping[str, Any] | None = None,
                json: Any = None, data: Mapping[str, Any] | None = None,
                headers: Mapping[str, str] | None = None) -> httpx.Response:
        """The response of the first attempt that is neither a transport error nor a retryable status."""
        last = ""
        for attempt in range(self.retries + 1):
            if attempt:
                self.retried += 1
            try:
                response = self._attempt(method, path, params=params, json=json, data=data, headers=headers)
            except httpx.TransportError as exc:
                last = f"{exc.__class__.__name__}: {exc}" if str(exc) else exc.__class__.__name__
                self._wait(attempt, None)
                continue
            if response.status_code in RETRY_STATUS:
                last = f"HTTP {response.status_code}: {response.text[:200]}"
                self._wait(attempt, response.headers.get("Retry-After"))
                continue
            if response.status_code >= 400:
                raise HttpError(f"{method} {self.base_url}{path}: HTTP {response.status_code}: {response.text[:500]}",
                                response.status_code, _body(response))
            return response
        raise HttpError(f"{method} {self.base_url}{path}: gave up after {self.retries + 1} attempts ({last})")

    def _attempt(self, method: str, path: str, **kwargs: Any) -> httpx.Response:
        """One request within `timeout` in all, its answer read whole (HttpError past `max_bytes`)."""
        _deadline.at = time.monotonic() + self.timeout
        try:
            with self.client.stream(method, path, **kwargs) as streamed:
                body = bytearray()
                for chunk in streamed.iter_bytes():
                    body += chunk
                    if len(body) > self.max_bytes:
                        raise HttpError(f"{method} {self.base_url}{path}: the answer is larger than "
                                        f"{self.max_bytes / 2**20:g} MiB; abandoned", streamed.status_code)
        finally:
            _deadline.at = None
        decoded = {k: v for k, v in streamed.headers.items() if k.lower() not in ("content-encoding",
                                                                                   "content-length")}
        return httpx.Response(streamed.status_code, headers=decoded, content=bytes(body),
                              request=streamed.request)

    def _wait(self, attempt: int, retry_after: str | None) -> None:
        """Back off before the next attempt: full jitter under a doubling ceiling (replicas that failed together
        do not retry together), but never sooner than a `Retry-After` asks (seconds or an HTTP-date), within
        `max_backoff`."""
        if attempt >= self.retries:
            return
        delay = full_jitter(attempt, self.backoff, self.max_backoff, self.rng)
        asked = retry_after_seconds(retry_after, datetime.now(timezone.utc))
        if asked is not None:
            delay = min(self.max_backoff, max(delay, asked))
        self.sleep(delay)

    def get_json(self, path: str, params: Mapping[str, Any] | None = None) -> Any:
        return self.request("GET", path, params=params).json()


def retry_after_seconds(value: str | None, now: datetime) -> float | None:
    """What a `Retry-After` header asks for, in seconds from `now`: delta-seconds or an HTTP-date (a date in the
    past is 0). None when absent or unreadable."""
    if value is None or not value.strip():
        return None
    text = value.strip()
    if text.isdigit():
        return float(text)
    try:
        when = parsedate_to_datetime(text)
    except (TypeError, ValueError, IndexError):
        return None
    if when.tzinfo is None:   # RFC 9110 dates are GMT
        when = when.replace(tzinfo=timezone.utc)
    return max(0.0, (when - now).total_seconds())


def full_jitter(retry: int, backoff: float, max_backoff: float, rng: random.Random) -> float:
    """The wait before retry `retry` (from 0): uniform in [0, min(max_backoff, backoff * 2**retry)]."""
    return rng.uniform(0.0, min(max_backoff, backoff * 2.0 ** min(retry, 62)))


def parse_http_url(url: str) -> httpx.URL:
    """`url` parsed; a ConfigError unless it is an http:// or https:// URL with a host."""
    try:
        parsed = httpx.URL(url)
    except (httpx.InvalidURL, ValueError) as exc:
        raise ConfigError(f"{url!r} is not a URL: {exc}") from None
    if parsed.scheme not in ("http", "https") or not parsed.host:
        raise ConfigError(f"{url!r} is not an http:// or https:// URL")
    return parsed


def _body(response: httpx.Response) -> Any:
    try:
        return response.json()
    except ValueError:
        return response.text


def auth_headers(token: str | None = None, tenant: str | None = None) -> dict[str, str]:
    headers: dict[str, str] = {}
    if token:
        headers["Authorization"] = f"Bearer {token}"
    if tenant:
        headers["X-Scope-OrgID"] = tenant
    return headers


def client_for(options: HttpOptions) -> RetryingClient:
    """The HTTP client of a connector from its common options (url, timeout, retries, token, tenant)."""
    assert options.url, "HttpOptions.url is required"
    if options.max_answer < 1:
        raise ConfigError(f"option `max_answer`: at least 1 (MiB), not {options.max_answer}")
    return RetryingClient(options.url, timeout=options.timeout.total_seconds(), retries=options.retries,
                          headers=auth_headers(options.token, options.tenant),
                          max_bytes=options.max_answer * 2**20)
