"""The Blueprint's HTTP client (Loki, Prometheus, the service) against a real HTTP server on loopback: retries wait
with full jitter under a doubling ceiling, and never less than the server's `Retry-After`, in either of its forms
(delta-seconds, HTTP-date). The waits are recorded, not slept, so the test takes no time."""

from __future__ import annotations

import random
import threading
from collections.abc import Iterator
from datetime import datetime, timedelta, timezone
from email.utils import format_datetime
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from firstfault.blueprint.http import RetryingClient


class _Busy(BaseHTTPRequestHandler):
    """Answers 503 with the queued Retry-After values (None: no header), then 200."""

    answers: list[str | None] = []

    def do_GET(self) -> None:
        if self.answers:
            retry_after = self.answers.pop(0)
            self.send_response(503)
            if retry_after is not None:
                self.send_header("Retry-After", retry_after)
            self.send_header("Content-Length", "0")
            self.end_headers()
            return
        body = b'{"ok": true}'
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args: object) -> None:
        pass


@pytest.fixture
def busy_server() -> Iterator[str]:
    server = ThreadingHTTPServer(("127.0.0.1", 0), _Busy)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}"
    server.shutdown()
    server.server_close()


def _client(url: str, waits: list[float], seed: int = 7) -> RetryingClient:
    return RetryingClient(url, retries=4, backoff=1.0, max_backoff=60.0, sleep=waits.append, rng=random.Random(seed))


def test_retry_after_in_both_forms_is_honoured(busy_server: str) -> None:
    in_20_s = format_datetime(datetime.now(timezone.utc) + timedelta(seconds=20), usegmt=True)
    _Busy.answers = ["7", in_20_s]
    waits: list[float] = []
    assert _client(busy_server, waits).get_json("/api") == {"ok": True}
    assert len(waits) == 2
    assert waits[0] >= 7.0                 # delta-seconds: at least what was asked
    assert 15.0 <= waits[1] <= 20.0        # an HTTP-date 20 s ahead (less the time the request took)


def test_waits_are_jittered_under_a_doubling_ceiling(busy_server: str) -> None:
    """Two clients that failed together do not retry together: their waits differ, each within [0, 2**n]."""
    runs = []
    for seed in (1, 2):
        _Busy.answers = [None, None, None]
        waits: list[float] = []
        _client(busy_server, waits, seed).get_json("/api")
        assert [w <= 2.0 ** n for n, w in enumerate(waits)] == [True, True, True]
        runs.append(waits)
    assert runs[0] != runs[1]
