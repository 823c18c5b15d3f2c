"""uvicorn's HTTP/1.1 protocols (httptools, the default, or h11) with a deadline and a size cap for request headers.

uvicorn has no deadline: a client that opens a connection and sends half a request line, or a header a minute, holds
the connection (and a file descriptor) for as long as it likes, before any code of the app runs. Here each request's
headers must be complete within `header_timeout_s` of the connection opening (or, on a kept-alive connection, of
the first bytes after the previous response); otherwise the server answers 408 and closes the connection. An idle
kept-alive connection is closed by uvicorn's `timeout_keep_alive`. The body has its own total deadline in the app
(`body_timeout_s`, middleware.py); when a response is out while its request's body still arrives (a body the app
did not read), neither covers the rest, so the header deadline starts again (`_HeaderDeadline`).

h11 caps a request's header block at `MAX_HEADER_BYTES` (400 "Invalid HTTP request received." over it); the httptools
parser has no cap, so its protocol counts the bytes received before the headers end and answers the same 400 over
the same cap.
"""

from __future__ import annotations

import asyncio
from typing import Any, cast

import h11
from h11._connection import DEFAULT_MAX_INCOMPLETE_EVENT_SIZE
from uvicorn.protocols.http.h11_impl import H11Protocol

# h11's default cap on an incomplete event (the request line and headers), which uvicorn keeps.
MAX_HEADER_BYTES = DEFAULT_MAX_INCOMPLETE_EVENT_SIZE

_TIMEOUT_BODY = b'{"error_code":"request_timeout","message":"the request headers did not arrive in time"}'
_TIMEOUT_RESPONSE = (b"HTTP/1.1 408 Request Timeout\r\ncontent-type: application/json\r\nconnection: close\r\n"
                     b"content-length: %d\r\n\r\n%s" % (len(_TIMEOUT_BODY), _TIMEOUT_BODY))
_INVALID = "Invalid HTTP request received."  # uvicorn's 400 for a request its parser refuses


class _HeaderDeadline:
    """The header timer: armed while a connection owes a request's headers, answering 408 when it fires. Armed
    `quiet` when a response is out while its request's body still arrives (a body the app did not read, a GET's
    say): the rest of it, and the next request's headers, must then arrive in time, or the connection is closed
    without a word (a 408 after a response would answer no request)."""

    header_timeout_s: float
    loop: asyncio.AbstractEventLoop
    transport: asyncio.Transport
    _header_timer: asyncio.TimerHandle | None = None

    def _arm(self, quiet: bool = False) -> None:
        self._disarm()
        self._header_timer = self.loop.call_later(self.header_timeout_s, self._headers_late, quiet)

    def _disarm(self) -> None:
        if self._header_timer is not None:
            self._header_timer.cancel()
            self._header_timer = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        super().connection_made(transport)  # type: ignore[misc]
        self._arm()

    def connection_lost(self, exc: Exception | None) -> None:
        self._disarm()
        super().connection_lost(exc)  # type: ignore[misc]

    def _headers_late(self, quiet: bool) -> None:
        self._header_timer = None
        if not self.transport.is_closing():
            if not quiet:
                self.transport.write(_TIMEOUT_RESPONSE)
            self.transport.close()


class _H11Deadline(_HeaderDeadline, H11Protocol):
    def data_received(self, data: bytes) -> None:
        super().data_received(data)
        if self._header_timer is None and self.conn.their_state is h11.IDLE:  # a next request begins
            self._arm()

    def handle_events(self) -> None:
        awaiting = self.conn.their_state is h11.IDLE
        super().handle_events()
        if awaiting and self.conn.their_state is not h11.IDLE:  # the request's headers are in
            self._disarm()

    def on_response_complete(self) -> None:
        super().on_response_complete()
        if self.conn.their_state is h11.SEND_BODY:
            self._arm(quiet=True)


def _httptools_deadline() -> type[asyncio.Protocol]:
    from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol

    class HttpToolsDeadline(_HeaderDeadline, HttpToolsProtocol):
        """The parser calls on_headers_complete and on_message_complete; between the two a request's body is
        being read (`_in_body`). Bytes received outside a body count towards the next request's headers."""

        def __init__(self, *args: Any, **kwargs: Any) -> None:
            super().__init__(*args, **kwargs)
            self._in_body = False
            self._header_bytes = 0

        def data_received(self, data: bytes) -> None:
            if not self._in_body:
                self._header_bytes += len(data)
            super().data_received(data)
            if self._in_body or self.transport.is_closing():
                return
            responding = self.cycle is not None and not self.cycle.response_complete
            if self._header_bytes > MAX_HEADER_BYTES:
                if responding:  # a pipelined request: read no more of it until this response is out
                    self.flow.pause_reading()
                else:
                    self.logger.warning(_INVALID)
                    self.send_400_response(_INVALID)
            elif self._header_timer is None and not responding:  # a next request begins
                self._arm()

        def on_headers_complete(self) -> None:
            self._disarm()
            self._in_body = True
            self._header_bytes = 0
            super().on_headers_complete()

        def on_message_complete(self) -> None:
            self._in_body = False
            super().on_message_complete()

        def on_response_complete(self) -> None:
            super().on_response_complete()
            if self._in_body:
                self._arm(quiet=True)

    return HttpToolsDeadline


def header_deadline_protocol(header_timeout_s: float, parser: str = "httptools") -> type[asyncio.Protocol]:
    """A uvicorn protocol class on `parser` whose connections must send each request's headers within
    `header_timeout_s`, at most MAX_HEADER_BYTES of them."""
    base = _httptools_deadline() if parser == "httptools" else _H11Deadline
    return cast(type[asyncio.Protocol], type(base.__name__, (base,), {"header_timeout_s": header_timeout_s}))
