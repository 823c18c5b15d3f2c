"""A fault-injecting HTTP proxy for the tests: it forwards every request to a real upstream (Prometheus, the Loki
test server) and, for the next requests, injects the faults queued in `faults`:

- an int: answer with that status and a short text body (429, 500, 503 ...) instead of forwarding;
- `"truncate"`: forward, then send the upstream's status and headers but only half of its body, and close the
  connection (what a proxy that dies mid-answer leaves: the client sees the body end early);
- `"garbage"`: answer 200 with a complete, well-framed body that is JSON cut in the middle;
- `"hang"`: read the request and never answer (until the proxy stops);
- a float: wait that many seconds, then forward;
- `"trickle"`: forward, send the upstream's status and headers, then its body one byte every `trickle_every`
  seconds (until the client gives up or the proxy stops);
- `"trickle_headers"`: send the status line and then header bytes one at a time, every `trickle_every` seconds,
  never ending the headers;
- `"huge"`: answer 200 with a well-formed start of a Loki/Prometheus answer that never ends (a stream of 1 MiB
  chunks, declared as 4 GiB), until the client hangs up.

`requests` counts the requests received; `released` ends every hang.
"""

from __future__ import annotations

import http.client
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import urlparse

_HOP = {"connection", "keep-alive", "transfer-encoding", "content-length", "host"}


class FaultProxy:
    def __init__(self, upstream: str) -> None:
        target = urlparse(upstream)
        self.upstream = (target.hostname or "127.0.0.1", target.port or 80)
        self.faults: list[Any] = []
        self.requests = 0
        self.lock = threading.Lock()
        self.released = threading.Event()
        self.trickle_every = 0.5
        self.huge_bytes_sent = 0
        handler = type("Handler", (_Handler,), {"proxy": self})
        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), handler)
        self.httpd.daemon_threads = True
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}"
        threading.Thread(target=self.httpd.serve_forever, daemon=True).start()

    def next_fault(self) -> Any:
        with self.lock:
            self.requests += 1
            return self.faults.pop(0) if self.faults else None

    def stop(self) -> None:
        self.released.set()
        self.httpd.shutdown()
        self.httpd.server_close()


class _Handler(BaseHTTPRequestHandler):
    proxy: FaultProxy
    protocol_version = "HTTP/1.1"

    def log_message(self, *args: Any) -> None:
        return None

    def _forward(self, body: bytes) -> tuple[int, list[tuple[str, str]], bytes]:
        upstream = http.client.HTTPConnection(*self.proxy.upstream, timeout=60)
        headers = {k: v for k, v in self.headers.items() if k.lower() not in _HOP}
        upstream.request(self.command, self.path, body=body or None, headers=headers)
        answer = upstream.getresponse()
        data = answer.read()
        upstream.close()
        return answer.status, [(k, v) for k, v in answer.getheaders() if k.lower() not in _HOP], data

    def _send(self, status: int, headers: list[tuple[str, str]], body: bytes, declared: int | None = None) -> None:
        self.send_response(status)
        for key, value in headers:
            self.send_header(key, value)
        self.send_header("Content-Length", str(len(body) if declared is None else declared))
        self.end_headers()
        self.wfile.write(body)
        self.wfile.flush()

    def _handle(self) -> None:
        body = self.rfile.read(int(self.headers.get("Content-Length", "0") or 0))
        fault = self.proxy.next_fault()
        if isinstance(fault, float):
            self.proxy.released.wait(fault)
            fault = None
        if fault == "hang":
            self.proxy.released.wait()
            self.close_connection = True
            return
        if isinstance(fault, int):
            self._send(fault, [("Content-Type", "text/plain")], f"injected HTTP {fault}".encode())
            return
        if fault == "trickle_headers":
            self._trickle(b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nX-Padding: " + b"a" * 10**6)
            return
        if fault == "huge":
            self._huge()
            return
        if fault == "garbage":
            self._send(200, [("Content-Type", "application/json")], b'{"status": "success", "data": {"resultT')
            return
        status, headers, data = self._forward(body)
        if fault == "trickle":
            self.send_response(status)
            for key, value in headers:
                self.send_header(key, value)
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.flush()
            self._trickle(data)
            return
        if fault == "truncate":
            self._send(status, headers, data[: len(data) // 2], declared=len(data))
            self.close_connection = True
            return
        self._send(status, headers, data)

    def _trickle(self, data: bytes) -> None:
        """`data` one byte at a time, `trickle_every` seconds apart, until the client hangs up or the proxy stops."""
        self.close_connection = True
        try:
            for byte in data:
                if self.proxy.released.wait(self.proxy.trickle_every):
                    return
                self.wfile.write(bytes([byte]))
                self.wfile.flush()
        except OSError:
            return

    def _huge(self) -> None:
        self.close_connection = True
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(4 * 2**30))
        self.end_headers()
        chunk = b'{"stream": {"hostname": "gpu-l01"}, "values": [["1780310100000000000", "' + b"x" * 2**20 + b'"]]}, '
        try:
            self.wfile.write(b'{"status": "success", "data": {"resultType": "streams", "result": [')
            while not self.proxy.released.is_set() and self.proxy.huge_bytes_sent < 4 * 2**30:
                self.wfile.write(chunk)
                self.proxy.huge_bytes_sent += len(chunk)
        except OSError:
            return

    def do_GET(self) -> None:
        self._handle()

    def do_POST(self) -> None:
        self._handle()
