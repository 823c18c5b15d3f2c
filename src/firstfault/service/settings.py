"""Service configuration: defaults, `FIRSTFAULT_*` environment variables, and command-line overrides."""

from __future__ import annotations

import ipaddress
import os
from collections.abc import Mapping
from dataclasses import dataclass, fields, replace
from typing import Any

from firstfault.wire import WIRE_MAX_LINE_BYTES

ENV_PREFIX = "FIRSTFAULT_"
MIB = 1024 * 1024
# Host names answered by default (with any port): the loopback names (an IPv6 literal in brackets, as in a Host
# header).
LOOPBACK_HOSTS = ("localhost", "127.0.0.1", "[::1]")
HTTP_PARSERS = ("httptools", "h11")


@dataclass(frozen=True)
class Settings:
    """Every tunable of `firstfault serve`. The environment name of a field is FIRSTFAULT_<FIELD>."""

    host: str = "127.0.0.1"
    port: int = 8000
    # Bearer token required on every write endpoint when set (FIRSTFAULT_API_TOKEN). Set but empty is an error.
    api_token: str | None = None
    # Serve without a token on a non-loopback address (refused otherwise): `serve --insecure-no-auth`.
    insecure_no_auth: bool = False
    # Host headers answered, comma-separated (a leading "*." matches subdomains; "*" any host). Default: the
    # loopback names and the bind address. Any other Host gets 400, so DNS rebinding cannot reach the API.
    allowed_hosts: str = ""
    # Largest accepted request body; larger ones get 413 before they are parsed.
    max_request_bytes: int = 32 * MIB
    # A request body must arrive within this many seconds of the request's start (408 otherwise): a client that
    # trickles its body, or stops half-way, does not hold a connection for ever.
    body_timeout_s: float = 60.0
    # A connection must send its request headers within this many seconds (it is closed otherwise), so
    # half-sent requests cannot pile up (slowloris).
    header_timeout_s: float = 10.0
    # uvicorn's HTTP/1.1 parser: "httptools" (C, the default) or "h11" (pure Python, ~0.2-0.3 ms more CPU per
    # request: docs/benchmarks.md).
    # Both enforce the header deadline and the header size cap (service/protocol.py).
    http_parser: str = "httptools"
    # Request bodies held at once by all requests in progress (read and being parsed); a request that would
    # cross it gets 503 `server_busy` with Retry-After. At least max_request_bytes.
    max_inflight_bytes: int = 96 * MIB
    # Longer log lines are cut to this many UTF-8 bytes and marked, never dropped.
    max_line_bytes: int = WIRE_MAX_LINE_BYTES
    # Where sessions live: "" or "memory" (this process, the default), or a Redis URL (redis://host:port/db,
    # rediss://..., unix:///path.sock; the `redis` extra) shared by every replica behind one load balancer.
    store: str = ""
    # Per-session caps: a batch that would cross one is refused whole (413).
    max_session_observations: int = 20_000_000
    max_session_bytes: int = 4096 * MIB
    # Live sessions kept in memory. At the cap, the session idle the longest is evicted, but only one idle for
    # at least `session_min_idle_s` and with no request in flight; otherwise creation gets 429.
    max_sessions: int = 1000
    session_ttl_s: float = 3600.0
    session_min_idle_s: float = 30.0
    # The memory budget: estimated bytes held by all live sessions (contexts, coalesced events with their
    # evidence, stream counters, last results; service/memory.py). A new session or batch that finds it spent
    # first evicts idle sessions (as at the session cap); if that is not enough it is refused with 503
    # `memory_budget`, and readiness says not ready.
    memory_budget_bytes: int = 2048 * MIB
    # Estimated bytes one session's context (nodes, metadata) may hold; larger ones get 413.
    max_context_bytes: int = 16 * MIB
    # Attributions computed at once (worker threads); more wait. Keeps the event loop answering (healthz): the
    # interpreter lock is shared, so more threads add no throughput, only waits for the event loop.
    attribution_threads: int = 2
    # Idempotency keys remembered per session (oldest forgotten first).
    idempotency_keys: int = 1000
    # Seconds uvicorn waits for in-flight requests on SIGTERM/SIGINT before closing them.
    shutdown_timeout_s: float = 30.0
    log_level: str = "info"
    # OpenTelemetry span export: "" (off), "console" or "otlp" (needs the `otel` extra).
    otel_exporter: str = ""

    @classmethod
    def from_env(cls, environ: Mapping[str, str] | None = None, **overrides: Any) -> Settings:
        """Defaults, then FIRSTFAULT_* variables, then explicit overrides (None means "not given")."""
        env = os.environ if environ is None else environ
        values: dict[str, Any] = {}
        if env.get(ENV_PREFIX + "API_TOKEN") is not None and not env[ENV_PREFIX + "API_TOKEN"].strip():
            raise ValueError(f"{ENV_PREFIX}API_TOKEN is set but empty: give a token, or unset the variable to "
                             "serve without one (loopback only, or with --insecure-no-auth)")
        for f in fields(cls):
            raw = env.get(ENV_PREFIX + f.name.upper())
            if raw is not None and raw != "":
                values[f.name] = _parse(f.name, raw, cls.__dataclass_fields__[f.name].default)
        values.update({k: v for k, v in overrides.items() if v is not None})
        settings = replace(cls(), **values)
        settings.validate()
        return settings

    def validate(self) -> None:
        positive = ("max_request_bytes", "max_line_bytes", "max_session_observations", "max_session_bytes",
                    "max_sessions", "session_ttl_s", "idempotency_keys", "body_timeout_s", "memory_budget_bytes",
                    "max_context_bytes", "header_timeout_s", "max_inflight_bytes", "attribution_threads")
        for name in positive:
            if getattr(self, name) <= 0:
                raise ValueError(f"{ENV_PREFIX}{name.upper()} must be positive")
        if not 0 <= self.port <= 65535:
            raise ValueError(f"{ENV_PREFIX}PORT must be a TCP port number")
        if self.session_min_idle_s < 0 or self.shutdown_timeout_s < 0:
            raise ValueError("durations cannot be negative")
        if self.max_line_bytes < 64:
            raise ValueError(f"{ENV_PREFIX}MAX_LINE_BYTES must be at least 64")
        if self.store not in ("", "memory") and not self.store.startswith(("redis://", "rediss://", "unix://")):
            raise ValueError(f"{ENV_PREFIX}STORE must be memory or a Redis URL (redis://host:port/db, rediss://..., "
                             f"unix:///path.sock), not {self.store!r}")
        if self.http_parser not in HTTP_PARSERS:
            raise ValueError(f"{ENV_PREFIX}HTTP_PARSER must be one of {', '.join(HTTP_PARSERS)}, not {self.http_parser!r}")
        if self.otel_exporter not in ("", "console", "otlp"):
            raise ValueError(f"{ENV_PREFIX}OTEL_EXPORTER must be console or otlp")
        if self.max_inflight_bytes < self.max_request_bytes:
            raise ValueError(f"{ENV_PREFIX}MAX_INFLIGHT_BYTES must be at least {ENV_PREFIX}MAX_REQUEST_BYTES")
        if self.api_token is not None and not self.api_token.strip():
            raise ValueError(f"{ENV_PREFIX}API_TOKEN is empty")
        if not self.api_token and not self.insecure_no_auth and not is_loopback(self.host):
            raise ValueError(f"refusing to serve on {self.host} without a token: anyone who can reach it could "
                             f"write. Set {ENV_PREFIX}API_TOKEN, or pass --insecure-no-auth to accept that")

    def trusted_hosts(self) -> list[str]:
        """The Host header names answered (see `allowed_hosts`)."""
        return trusted_hosts(self.host, self.allowed_hosts)


def trusted_hosts(bind: str, configured: str) -> list[str]:
    """The Host names a server bound to `bind` answers: those `configured` (comma-separated), else the loopback
    names and `bind` itself (a wildcard address names no host)."""
    if configured.strip():
        return [h.strip().lower() for h in configured.split(",") if h.strip()]
    bound = [] if bind in ("0.0.0.0", "::", "") else [f"[{bind}]" if ":" in bind else bind.lower()]
    return list(dict.fromkeys([*LOOPBACK_HOSTS, *bound]))


def is_loopback(host: str) -> bool:
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return host == "localhost"


def _parse(name: str, raw: str, default: Any) -> Any:
    try:
        if isinstance(default, bool):
            return raw.strip().lower() in ("1", "true", "yes", "on")
        if isinstance(default, int):
            return int(raw)
        if isinstance(default, float):
            return float(raw)
    except ValueError:
        raise ValueError(f"{ENV_PREFIX}{name.upper()}={raw!r} is not a number") from None
    return raw
