"""uvicorn's HTTP/1.1 protocol with a deadline for request headers.

uvicorn has none: a client that opens a connection and sends half a request line, or a header a minute, holds the
connection (and a file descriptor) for as long as it likes, before any code of the app runs. Here each request's
headers must be complete within `header_timeout_s` of the connection opening (or, on a kept-alive connection, of
the request's first bytes; an idle kept-alive connection is closed by uvicorn's `timeout_keep_alive`); otherwise
the server answers 408 and closes the connection. The body has its own total
deadline in the app (`body_timeout_s`, middleware.py).
"""

from __future__ import annotations

import asyncio
from typing import Any

import h11
from uvicorn.protocols.http.h11_impl import H11Protocol

_TIMEOUT_BODY = b'{"error_code":"request_timeout","message":"the request headers did not arrive in time"}'
_TIMEOUT_RESPONSE = (b"HTTP/1.1 408 Request Timeout\r\ncontent-type: application/json\r\nconnection: close\r\n"
                     b"content-length: %d\r\n\r\n%s" % (len(_TIMEOUT_BODY), _TIMEOUT_BODY))


def header_deadline_protocol(header_timeout_s: float) -> type[asyncio.Protocol]:
    """An H11Protocol class whose connections must send each request's headers within `header_timeout_s`."""

    class HeaderDeadlineProtocol(H11Protocol):
        def __init__(self, *args: Any, **kwargs: Any) -> None:
            super().__init__(*args, **kwargs)
            self._header_timer: asyncio.TimerHandle | None = None

        def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
            super().connection_made(transport)
            self._arm()

        def connection_lost(self, exc: Exception | None) -> None:
            self._disarm()
            super().connection_lost(exc)

        def data_received(self, data: bytes) -> None:
            super().data_received(data)
            if self._header_timer is None and self.conn.their_state is h11.IDLE:  # a next request begins
                self._arm()

        def handle_events(self) -> None:
            super().handle_events()
            if self.conn.their_state is not h11.IDLE:  # the request's headers are in
                self._disarm()

        def _arm(self) -> None:
            self._disarm()
            self._header_timer = self.loop.call_later(header_timeout_s, self._headers_late)

        def _disarm(self) -> None:
            if self._header_timer is not None:
                self._header_timer.cancel()
                self._header_timer = None

        def _headers_late(self) -> None:
            self._header_timer = None
            if self.conn.their_state is h11.IDLE and not self.transport.is_closing():
                self.transport.write(_TIMEOUT_RESPONSE)
                self.transport.close()

    return HeaderDeadlineProtocol
