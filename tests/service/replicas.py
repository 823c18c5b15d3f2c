"""Real `firstfault serve` replicas sharing sessions through the real Redis of tests/support/setup-redis.sh, and a
round-robin client in front of them (as a load balancer without stickiness)."""

from __future__ import annotations

import itertools
import os
import signal
import subprocess
import threading
import time
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.service.live_server import TEST_LIMITS, Server

ROOT = Path(__file__).resolve().parents[2]
SETUP = ROOT / "tests" / "support" / "setup-redis.sh"
REDIS_PORT = int(os.environ.get("REDIS_CI_PORT", "16379"))


def ensure_redis() -> None:
    """Start the test Redis if it is not up (the script is idempotent); fail, saying why, when it cannot."""
    done = subprocess.run(["bash", str(SETUP)], capture_output=True, text=True, timeout=600)
    if done.returncode != 0:
        pytest.fail(f"tests/support/setup-redis.sh failed: {done.stdout}{done.stderr}")


def redis_url(db: int) -> str:
    return f"redis://127.0.0.1:{REDIS_PORT}/{db}"


def flush(db: int) -> None:
    import redis

    redis.Redis.from_url(redis_url(db)).flushdb()


def restart_redis() -> float:
    """Stop the test Redis (SIGTERM: it closes its append-only file) and start it again; the seconds it was down.
    The server's own pid comes from INFO, not the setup script's pid file: two setups racing (two test runs on one
    machine) can leave the file naming a server that lost the race for the port."""
    import redis

    pid = int(redis.Redis.from_url(redis_url(0)).info("server")["process_id"])
    started = time.monotonic()
    os.kill(pid, signal.SIGTERM)
    for _ in range(100):
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            break
        time.sleep(0.05)
    ensure_redis()
    return time.monotonic() - started


def start_replicas(tmp: Path, count: int, db: int, env: dict[str, str] | None = None) -> list[Server]:
    environ = {**TEST_LIMITS, "FIRSTFAULT_STORE": redis_url(db), **(env or {})}
    return [Server.start(tmp, env=environ) for _ in range(count)]


class RoundRobin(httpx.BaseTransport):
    """Sends each request to the next of `urls` in turn (a load balancer without stickiness). A replica that
    does not answer (connection refused or reset) is skipped for that request, as a balancer's health check
    would; `sent` counts requests per replica."""

    def __init__(self, urls: list[str]) -> None:
        self.urls = [httpx.URL(u) for u in urls]
        self._next = itertools.cycle(range(len(urls)))
        self._lock = threading.Lock()
        self._inner = httpx.HTTPTransport()
        self.sent = [0] * len(urls)
        self.down: set[int] = set()

    def handle_request(self, request: httpx.Request) -> httpx.Response:
        for _ in range(len(self.urls)):
            with self._lock:
                i = next(self._next)
                if i in self.down:
                    continue
                self.sent[i] += 1
            target = self.urls[i]
            request.url = request.url.copy_with(scheme=target.scheme, host=target.host, port=target.port)
            request.headers["Host"] = f"{target.host}:{target.port}"
            return self._inner.handle_request(request)
        raise httpx.ConnectError("no replica is up")

    def close(self) -> None:
        self._inner.close()


def balanced_client(servers: list[Server], **kwargs: Any) -> httpx.Client:
    """A client whose requests go round-robin over `servers` (its transport is a RoundRobin)."""
    return httpx.Client(base_url="http://balancer", transport=RoundRobin([s.url for s in servers]), timeout=60.0,
                        **kwargs)


def result_bytes(body: bytes) -> bytes:
    """The `result` of a v2 attribute answer, as the bytes the service wrote (session id and revision left out)."""
    head, sep, rest = body.partition(b',"result":')
    assert sep and rest.endswith(b"}"), body[:200]
    return rest[:-1]

