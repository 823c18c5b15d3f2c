"""A Loki HTTP API test server: the documented subset the Blueprint's Loki collector uses, nothing more.

No Grafana Loki is installable on the test machines, so the collector is tested against this server over real
HTTP. It implements (https://grafana.com/docs/loki/latest/reference/loki-http-api/):

- `POST /loki/api/v1/push` with the JSON body `{"streams": [{"stream": {labels}, "values": [["<ns>", "<line>"]]}]}`
- `GET /loki/api/v1/query_range` with `query`, `start` and `end` as nanosecond epochs (start inclusive, end
  exclusive), `limit` (default 100, at most `max_entries`) and `direction` (`forward` | `backward`, default
  backward), answering `{"status": "success", "data": {"resultType": "streams", "result": [...], "stats": {}}}`
- `GET /ready`
- multi-tenancy: with `tenants=True` every request needs `X-Scope-OrgID`, and tenants see only their own data.

LogQL subset: one stream selector (`=`, `!=`, `=~`, `!~`, double-quoted or backtick strings) followed by line
filters (`|=`, `!=`, `|~`, `!~`). Anything else (parsers, metric queries, other time formats, other endpoints)
is rejected with HTTP 400 or 404, so the collector can never come to rely on something this server fakes.

Fault injection for tests: `fail_next` (HTTP statuses to answer the next requests with), `delay_next` (seconds
to sleep before answering the next requests); `requests` records every request.
"""

from __future__ import annotations

import json
import re
import threading
import time
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qs, urlparse

_MATCHER = re.compile(r'\s*([A-Za-z_][A-Za-z0-9_]*)\s*(=~|!~|!=|=)\s*("(?:[^"\\]|\\.)*"|`[^`]*`)\s*')
_FILTER = re.compile(r'\s*(\|=|!=|\|~|!~)\s*("(?:[^"\\]|\\.)*"|`[^`]*`)\s*')


class LogQLError(ValueError):
    pass


def _string(token: str) -> str:
    return token[1:-1] if token.startswith("`") else json.loads(token)


def parse_logql(query: str) -> tuple[list[tuple[str, str, str]], list[tuple[str, str]]]:
    """(label matchers, line filters) of a query in the supported subset."""
    query = query.strip()
    if not query.startswith("{") or "}" not in query:
        raise LogQLError(f"parse error: only a stream selector with line filters is supported: {query!r}")
    selector, rest = query[1:query.index("}")], query[query.index("}") + 1:]
    matchers = []
    for part in _split_matchers(selector):
        m = _MATCHER.fullmatch(part)
        if not m:
            raise LogQLError(f"parse error: unsupported matcher {part!r}")
        matchers.append((m.group(1), m.group(2), _string(m.group(3))))
    if not matchers:
        raise LogQLError("parse error: queries require at least one matcher")
    filters = []
    pos = 0
    while pos < len(rest):
        m = _FILTER.match(rest, pos)
        if not m:
            raise LogQLError(f"parse error: unsupported expression {rest[pos:]!r}")
        filters.append((m.group(1), _string(m.group(2))))
        pos = m.end()
    return matchers, filters


def _split_matchers(selector: str) -> list[str]:
    parts, current, quote = [], "", ""
    for ch in selector:
        if quote:
            current += ch
            if ch == quote and not current.endswith("\\" + quote):
                quote = ""
        elif ch in "\"`":
            quote, current = ch, current + ch
        elif ch == ",":
            parts.append(current)
            current = ""
        else:
            current += ch
    return [p for p in parts + [current] if p.strip()]


def _label_ok(labels: dict[str, str], name: str, op: str, value: str) -> bool:
    actual = labels.get(name, "")
    if op == "=":
        return actual == value
    if op == "!=":
        return actual != value
    matched = re.fullmatch(value, actual) is not None
    return matched if op == "=~" else not matched


def _line_ok(line: str, op: str, value: str) -> bool:
    if op == "|=":
        return value in line
    if op == "!=":
        return value not in line
    found = re.search(value, line) is not None
    return found if op == "|~" else not found


@dataclass
class LokiState:
    tenants: bool = False
    max_entries: int = 5000
    streams: dict[str, dict[tuple[tuple[str, str], ...], list[tuple[int, str]]]] = field(default_factory=dict)
    fail_next: list[int] = field(default_factory=list)
    delay_next: list[float] = field(default_factory=list)
    requests: list[dict[str, Any]] = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def push(self, tenant: str, body: dict[str, Any]) -> None:
        with self.lock:
            store = self.streams.setdefault(tenant, {})
            for stream in body["streams"]:
                key = tuple(sorted(stream["stream"].items()))
                store.setdefault(key, []).extend((int(ts), line) for ts, line in stream["values"])

    def query_range(self, tenant: str, params: dict[str, str]) -> dict[str, Any]:
        matchers, filters = parse_logql(params["query"])
        try:
            start, end = int(params["start"]), int(params["end"])
            limit = int(params.get("limit", "100"))
        except (KeyError, ValueError):
            raise LogQLError("start and end must be nanosecond epochs, limit an integer") from None
        if limit > self.max_entries:
            raise LogQLError(f"max entries limit per query exceeded, limit > max_entries_limit "
                             f"({limit} > {self.max_entries})")
        direction = params.get("direction", "backward")
        if direction not in ("forward", "backward"):
            raise LogQLError(f"invalid direction {direction!r}")
        entries = []
        with self.lock:
            for key, values in self.streams.get(tenant, {}).items():
                labels = dict(key)
                if all(_label_ok(labels, *m) for m in matchers):
                    entries += [(ts, key, line) for ts, line in values
                                if start <= ts < end and all(_line_ok(line, *f) for f in filters)]
        entries.sort(key=lambda e: (e[0], e[1]), reverse=direction == "backward")
        result: dict[tuple[tuple[str, str], ...], list[list[str]]] = {}
        for ts, key, line in entries[:limit]:
            result.setdefault(key, []).append([str(ts), line])
        return {"status": "success", "data": {"resultType": "streams", "result": [
            {"stream": dict(key), "values": values} for key, values in result.items()], "stats": {}}}


class _Handler(BaseHTTPRequestHandler):
    state: LokiState

    def log_message(self, *args: Any) -> None:
        return None

    def _answer(self, status: int, body: Any) -> None:
        data = (json.dumps(body) if not isinstance(body, str) else body).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json" if not isinstance(body, str) else "text/plain")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        try:
            self.wfile.write(data)
        except BrokenPipeError:   # the client timed out and went away: that is what the test wanted
            pass

    def _prelude(self) -> str | None:
        """Record the request, apply injected faults; the tenant, or None when the request was answered."""
        url = urlparse(self.path)
        state = self.state
        with state.lock:
            state.requests.append({"method": self.command, "path": url.path,
                                   "params": {k: v[0] for k, v in parse_qs(url.query).items()},
                                   "tenant": self.headers.get("X-Scope-OrgID")})
            delay = state.delay_next.pop(0) if state.delay_next else 0.0
            fail = state.fail_next.pop(0) if state.fail_next else None
        if delay:
            time.sleep(delay)
        if fail is not None:
            self._answer(fail, "too many outstanding requests" if fail == 429 else "injected failure")
            return None
        tenant = self.headers.get("X-Scope-OrgID")
        if state.tenants and not tenant:
            self._answer(401, "no org id")
            return None
        return tenant or "fake"

    def do_GET(self) -> None:
        tenant = self._prelude()
        if tenant is None:
            return
        url = urlparse(self.path)
        if url.path == "/ready":
            self._answer(200, "ready")
        elif url.path == "/loki/api/v1/query_range":
            try:
                params = {k: v[0] for k, v in parse_qs(url.query).items()}
                self._answer(200, self.state.query_range(tenant, params))
            except (LogQLError, KeyError) as exc:
                self._answer(400, str(exc))
        else:
            self._answer(404, f"{url.path}: not part of this test server's Loki subset")

    def do_POST(self) -> None:
        tenant = self._prelude()
        if tenant is None:
            return
        if urlparse(self.path).path != "/loki/api/v1/push":
            self._answer(404, "not part of this test server's Loki subset")
            return
        body = json.loads(self.rfile.read(int(self.headers.get("Content-Length", "0"))))
        self.state.push(tenant, body)
        self.send_response(204)
        self.end_headers()


class LokiTestServer:
    """A running server on a free loopback port (`url`), with its state for assertions and fault injection."""

    def __init__(self, tenants: bool = False, max_entries: int = 5000) -> None:
        self.state = LokiState(tenants=tenants, max_entries=max_entries)
        handler = type("Handler", (_Handler,), {"state": self.state})
        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), handler)
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}"
        self.thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)
        self.thread.start()

    def stop(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()
