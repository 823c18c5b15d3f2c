"""ASGI middleware around the whole app: trusted Host names, request-size cap, a cap on the bodies of all requests
in progress, trace context, access log, request metrics."""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from contextlib import AbstractContextManager, nullcontext
from typing import Any

import anyio
from starlette.datastructures import Headers, MutableHeaders
from starlette.responses import JSONResponse
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from firstfault.service.logs import TraceContext, current_trace, trace_from_header
from firstfault.service.metrics import ServiceMetrics

log = logging.getLogger("firstfault.service.access")

_BODY_METHODS = {"POST", "PUT", "PATCH"}
# The scope key under which a body read whole here is handed to the route (http.JsonRequest): the route takes it as
# is, where Starlette would read the replayed message and join it into a second copy of megabytes.
BODY_SCOPE_KEY = "firstfault.body"
# A body over the cap is read and discarded up to this multiple of the cap (so the client sees the 413 instead
# of a reset connection), then the connection is closed.
_DRAIN_FACTOR = 4

# Starts a tracing span for a request and yields the request's trace context as the tracer sees it, or None
# when spans are not exported.
SpanStarter = Callable[[TraceContext, str], AbstractContextManager[TraceContext | None]]


def no_spans(trace: TraceContext, name: str) -> AbstractContextManager[TraceContext | None]:
    return nullcontext(None)


class _TooLarge(Exception):
    pass


class _Busy(Exception):
    pass


def host_name(header: str) -> str:
    """The name of a Host header without its port (`[::1]:80` -> `[::1]`, `Example.org:80` -> `example.org`)."""
    header = header.strip().lower()
    if header.startswith("["):
        return header.split("]", 1)[0] + "]"
    return header.split(":", 1)[0]


def host_allowed(header: str, allowed: list[str]) -> bool:
    """`header` names one of `allowed` (where "*" is any host and "*.example.org" any subdomain of example.org)."""
    name = host_name(header)
    return bool(name) and any(a == "*" or name == a or (a.startswith("*.") and name.endswith(a[1:]))
                              for a in allowed)


class ServiceMiddleware:
    def __init__(self, app: ASGIApp, *, metrics: ServiceMetrics, max_body_bytes: int, allowed_hosts: list[str],
                 max_inflight_bytes: int, body_timeout_s: float = 60.0, spans: SpanStarter = no_spans) -> None:
        self.app = app
        self.metrics = metrics
        self.max_body_bytes = max_body_bytes
        self.allowed_hosts = allowed_hosts
        self.max_inflight_bytes = max_inflight_bytes
        self.inflight_bytes = 0  # bodies held by requests in progress (the event loop's thread only)
        self.body_timeout_s = body_timeout_s
        self.spans = spans

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        started = time.perf_counter()
        headers = Headers(scope=scope)
        trace = trace_from_header(headers.get("traceparent"))
        with self.spans(trace, f"{scope['method']} {scope['path']}") as traced:
            trace = traced or trace
            token = current_trace.set(trace)
            status = [500]

            async def send_traced(message: Message) -> None:
                if message["type"] == "http.response.start":
                    status[0] = message["status"]
                    MutableHeaders(scope=message)["traceparent"] = trace.traceparent()
                await send(message)

            try:
                await self._handle(scope, receive, send_traced, headers)
            finally:
                self._record(scope, status[0], time.perf_counter() - started)
                current_trace.reset(token)

    async def _handle(self, scope: Scope, receive: Receive, send: Send, headers: Headers) -> None:
        if not host_allowed(headers.get("host", ""), self.allowed_hosts):
            await _refuse(scope, receive, send, 400, "untrusted_host",
                          "this server does not answer to that Host name (FIRSTFAULT_ALLOWED_HOSTS)")
            return
        if scope["method"] not in _BODY_METHODS:
            await self.app(scope, receive, send)
            return
        held = [0]
        try:
            await self._handle_body(scope, receive, send, headers, held)
        finally:
            self.inflight_bytes -= held[0]

    async def _handle_body(self, scope: Scope, receive: Receive, send: Send, headers: Headers,
                           held: list[int]) -> None:
        try:
            with anyio.fail_after(self.body_timeout_s):
                body = await self._read_body(receive, headers, held)
        except _TooLarge:
            await _refuse(scope, receive, send, 413, "request_too_large",
                          f"request body over the {self.max_body_bytes}-byte limit")
            return
        except _Busy:
            await _refuse(scope, receive, send, 503, "server_busy",
                          f"the requests in progress hold {self.max_inflight_bytes} bytes of bodies "
                          "(FIRSTFAULT_MAX_INFLIGHT_BYTES); retry shortly", {"Retry-After": "1"})
            return
        except TimeoutError:
            await _refuse(scope, receive, send, 408, "request_timeout",
                          f"the request body did not arrive within {self.body_timeout_s:g} s")
            return
        if body is None:  # the client went away
            return
        scope[BODY_SCOPE_KEY] = body
        await self.app(scope, _replay(body, receive), send)

    def _hold(self, held: list[int], total: int) -> None:
        """Count `total` bytes of this request's body as held (up to the body cap), or raise _Busy."""
        total = min(total, self.max_body_bytes)
        if total > held[0]:
            if self.inflight_bytes + total - held[0] > self.max_inflight_bytes:
                raise _Busy
            self.inflight_bytes += total - held[0]
            held[0] = total

    async def _read_body(self, receive: Receive, headers: Headers, held: list[int]) -> bytes | None:
        declared = headers.get("content-length", "")
        limit = self.max_body_bytes
        if declared.isdigit():
            if int(declared) > limit * _DRAIN_FACTOR:
                raise _TooLarge
            self._hold(held, int(declared))
        chunks: list[bytes] = []
        total = 0
        while True:
            message = await receive()
            if message["type"] == "http.disconnect":
                return None
            chunk = message.get("body", b"")
            total += len(chunk)
            if total > limit * _DRAIN_FACTOR:
                raise _TooLarge
            if total <= limit:
                chunks.append(chunk)
                self._hold(held, total)
            if not message.get("more_body", False):
                break
        if total > limit:
            raise _TooLarge
        return b"".join(chunks)

    def _record(self, scope: Scope, status: int, seconds: float) -> None:
        route = getattr(scope.get("route"), "path", None) or "unmatched"
        self.metrics.request(scope["method"], route, status, seconds)
        extra: dict[str, Any] = {"method": scope["method"], "path": scope["path"], "route": route,
                                 "status": status, "duration_ms": round(seconds * 1000, 2)}
        session_id = scope.get("path_params", {}).get("session_id")
        if session_id:
            extra["session_id"] = session_id
        client = scope.get("client")
        if client:
            extra["client"] = client[0]
        log.info("request", extra=extra)


async def _refuse(scope: Scope, receive: Receive, send: Send, status: int, code: str, message: str,
                  headers: dict[str, str] | None = None) -> None:
    """Answer with the service's error body and close the connection (the rest of the body is not read)."""
    response = JSONResponse({"error_code": code, "message": message}, status_code=status,
                            headers={"Connection": "close", **(headers or {})})
    await response(scope, receive, send)


def _replay(body: bytes, receive: Receive) -> Receive:
    sent = False

    async def replay() -> Message:
        nonlocal sent
        if not sent:
            sent = True
            return {"type": "http.request", "body": body, "more_body": False}
        return await receive()

    return replay
