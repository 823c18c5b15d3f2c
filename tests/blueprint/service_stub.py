"""A stand-in for the service's v2 API with the fault injection the real service has no switch for.

It follows the v2 contract (sessions, observations in the four formats with `Idempotency-Key`, attribute,
delete, `{"error_code", "message"}` errors, optional bearer token) over engine sessions, with the service's own
payload preparation. `fail_after_ingest` answers the next N observation requests with 503 *after* applying
them, so a client that retries without reusing its idempotency key would double-count.
"""

from __future__ import annotations

import json
import re
import threading
import uuid
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from pydantic import TypeAdapter

from firstfault.engine import ExecutionContext, Session
from firstfault.tools.verify import default_engine
from firstfault.wire import ObservationBatch, prepare

_OBS = re.compile(r"^/v2/sessions/([\w-]+)/observations$")
_ATTR = re.compile(r"^/v2/sessions/([\w-]+)/attribute$")
_SESSION = re.compile(r"^/v2/sessions/([\w-]+)$")


def apply(session: Session, body: dict[str, Any]) -> int:
    prepared = prepare(TypeAdapter(ObservationBatch).validate_python(body), 64 * 1024)
    return prepared.apply(session)


class ServiceStub:
    def __init__(self, token: str | None = None) -> None:
        self.token = token
        self.sessions: dict[str, Session] = {}
        self.replies: dict[str, dict[str, Any]] = {}
        self.applied = 0
        self.fail_after_ingest = 0
        self.lock = threading.Lock()
        handler = type("Handler", (_Handler,), {"stub": self})
        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), handler)
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}"
        threading.Thread(target=self.httpd.serve_forever, daemon=True).start()

    def stop(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()


class _Handler(BaseHTTPRequestHandler):
    stub: ServiceStub

    def log_message(self, *args: Any) -> None:
        return None

    def _send(self, status: int, body: dict[str, Any]) -> None:
        data = json.dumps(body).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def _error(self, status: int, code: str, message: str) -> None:
        self._send(status, {"error_code": code, "message": message})

    def _authorised(self) -> bool:
        if self.stub.token and self.headers.get("Authorization") != f"Bearer {self.stub.token}":
            self._error(401, "unauthorized", "a valid bearer token is required")
            return False
        return True

    def _body(self) -> Any:
        length = int(self.headers.get("Content-Length", "0"))
        return json.loads(self.rfile.read(length)) if length else None

    def do_POST(self) -> None:
        if not self._authorised():
            return
        stub, path = self.stub, self.path
        if path == "/v2/sessions":
            ctx = ExecutionContext.model_validate(self._body())
            session_id = uuid.uuid4().hex
            stub.sessions[session_id] = default_engine().session(ctx)
            self._send(201, {"session_id": session_id, "revision": 0})
        elif m := _OBS.match(path):
            self._observations(m.group(1))
        elif m := _ATTR.match(path):
            session = stub.sessions.get(m.group(1))
            if session is None:
                self._error(404, "session_not_found", m.group(1))
                return
            result = session.attribute()
            self._send(200, {"session_id": m.group(1), "revision": 1, "computed_from": {},
                             "result": json.loads(result.to_json())})
        else:
            self._error(404, "not_found", path)

    def _observations(self, session_id: str) -> None:
        stub = self.stub
        key = self.headers.get("Idempotency-Key")
        body = self._body()
        if key is None:
            self._error(400, "idempotency_key_required", "observations need an Idempotency-Key")
            return
        with stub.lock:
            session = stub.sessions.get(session_id)
            if session is None:
                self._error(404, "session_not_found", session_id)
                return
            if key in stub.replies:
                reply = {**stub.replies[key], "replayed": True}
            else:
                accepted = apply(session, body)
                stub.applied += 1
                reply = {"accepted": accepted, "observations_total": 0, "bytes_total": 0, "truncated_lines": 0,
                         "replayed": False}
                stub.replies[key] = reply
            fail = stub.fail_after_ingest > 0
            stub.fail_after_ingest -= 1 if fail else 0
        if fail:
            self._error(503, "unavailable", "injected failure after ingest")
        else:
            self._send(202, reply)

    def do_DELETE(self) -> None:
        if not self._authorised():
            return
        m = _SESSION.match(self.path)
        if m and self.stub.sessions.pop(m.group(1), None) is not None:
            self._send(200, {"deleted": True})
        else:
            self._error(404, "session_not_found", self.path)
