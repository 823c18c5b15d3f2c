"""One HTTP client for every remote the Blueprint talks to (service, Loki, Prometheus): per-request timeout,
retries with exponential backoff on connection errors, 429 and 5xx (honouring `Retry-After`), auth headers."""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any

import httpx

from firstfault.errors import ConfigError, HttpError

if TYPE_CHECKING:
    from firstfault.blueprint.options import HttpOptions

RETRY_STATUS = frozenset({429, 500, 502, 503, 504})


class RetryingClient:
    def __init__(self, base_url: str, *, headers: Mapping[str, str] | None = None, timeout: float = 30.0,
                 retries: int = 4, backoff: float = 0.5, max_backoff: float = 30.0,
                 sleep: Callable[[float], None] = time.sleep) -> None:
        self.base_url = base_url.rstrip("/")
        self.retries = retries
        self.backoff = backoff
        self.max_backoff = max_backoff
        self.sleep = sleep
        try:
            url = httpx.URL(self.base_url)
        except (httpx.InvalidURL, ValueError) as exc:
            raise ConfigError(f"{base_url!r} is not a URL: {exc}") from None
        if url.scheme not in ("http", "https") or not url.host:
            raise ConfigError(f"{base_url!r} is not an http:// or https:// URL")
        self.client = httpx.Client(base_url=url, headers=dict(headers or {}), timeout=timeout)
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
                response = self.client.request(method, path, params=params, json=json, data=data, headers=headers)
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

    def _wait(self, attempt: int, retry_after: str | None) -> None:
        if attempt >= self.retries:
            return
        delay = min(self.max_backoff, self.backoff * (2 ** attempt))
        if retry_after:
            try:
                delay = min(self.max_backoff, max(delay, float(retry_after)))
            except ValueError:  # an HTTP date: keep the computed backoff
                pass
        self.sleep(delay)

    def get_json(self, path: str, params: Mapping[str, Any] | None = None) -> Any:
        return self.request("GET", path, params=params).json()


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
    return RetryingClient(options.url, timeout=options.timeout.total_seconds(), retries=options.retries,
                          headers=auth_headers(options.token, options.tenant))
