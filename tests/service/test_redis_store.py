"""The Redis store's rules across replicas, with two service cores in this process on the real Redis of
tests/support/setup-redis.sh (each core is what one `serve` replica runs): the TTL, the session cap with eviction
of the longest idle session, the memory budget, the per-session caps and Idempotency-Keys hold whichever replica
serves a request; a session of another catalog is refused; a Redis that cannot be reached is a clear 503."""

from __future__ import annotations

import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import pytest
import redis

from firstfault.engine import ExecutionContext
from firstfault.errors import ServiceError, SessionNotFound
from firstfault.service.core import AttributionService
from firstfault.service.settings import Settings
from firstfault.tools.verify import default_engine
from firstfault.wire import RawTextBatch
from tests.service.replicas import ensure_redis, flush, redis_url

DB = 7
CONTEXT = ExecutionContext(workload_id="w", nodes=["n1", "n2"], start_time="2026-03-02T08:00:00Z",
                           end_time="2026-03-02T09:00:00Z")
XID = "{t} n1 kernel: NVRM: Xid (PCI:0000:{bus:02x}:00): 79, pid=1, name=python, GPU has fallen off the bus."

Replicas = Callable[..., list[AttributionService]]


@pytest.fixture
def replicas() -> Iterator[Replicas]:
    """Two service cores sharing one flushed Redis database, with the given settings."""
    ensure_redis()
    flush(DB)
    made: list[AttributionService] = []

    def make(**settings: Any) -> list[AttributionService]:
        made.extend(AttributionService(default_engine(), Settings(store=redis_url(DB), **settings)) for _ in range(2))
        return made[-2:]

    yield make
    for service in made:
        service.store.close()


def batch(lines: list[str], origin: str = "n1/syslog") -> RawTextBatch:
    return RawTextBatch(format="raw_text", node="n1", source="syslog", origin=origin, text="\n".join(lines))


def xids(n: int, minute: int = 10) -> list[str]:
    return [XID.format(t=f"2026-03-02T08:{minute:02d}:{i % 60:02d}Z", bus=i % 4) for i in range(n)]


def test_ttl_counts_from_the_last_use_on_any_replica(replicas: Replicas) -> None:
    a, b = replicas(session_ttl_s=1.0)
    idle, kept = a.create_session(CONTEXT), a.create_session(CONTEXT)
    for i in range(5):  # 1.5 s in steps of 0.3, on alternate replicas: the used session never idles 1 s
        time.sleep(0.3)
        (a, b)[i % 2].describe(kept)
    with pytest.raises(SessionNotFound, match="expired"):
        b.describe(idle)
    assert b.describe(kept).session_id == kept
    time.sleep(1.1)
    assert a.store.expire() == 1  # the sweep of any replica removes it
    with pytest.raises(SessionNotFound, match="expired"):
        b.describe(kept)


def test_session_cap_evicts_the_longest_idle_session_of_any_replica_never_a_busy_one(replicas: Replicas) -> None:
    a, b = replicas(max_sessions=2, session_min_idle_s=0.3)
    first, second = a.create_session(CONTEXT), b.create_session(CONTEXT)
    with pytest.raises(ServiceError) as refused:
        b.create_session(CONTEXT)
    assert refused.value.error_code == "too_many_sessions" and not a.store.has_room()
    time.sleep(0.4)
    b.describe(second)  # second used again; first is the longest idle
    with a.store.use(first):  # first busy on replica a: not evicted, whatever its age
        time.sleep(0.4)
        b.describe(second)
        with pytest.raises(ServiceError, match="sessions are live"):
            b.create_session(CONTEXT)
    b.describe(second)  # after first's request ended (which counts as a use): first is the longest idle again
    time.sleep(0.4)
    third = b.create_session(CONTEXT)
    with pytest.raises(SessionNotFound, match="evicted"):
        a.describe(first)
    assert {b.describe(s).session_id for s in (second, third)} == {second, third}
    assert len(a.store) == len(b.store) == 2


def test_memory_budget_counts_what_every_replica_stored(replicas: Replicas) -> None:
    a, b = replicas(memory_budget_bytes=60_000, session_min_idle_s=30)
    sid = a.create_session(CONTEXT)
    n = 0
    with pytest.raises(ServiceError) as refused:
        while n < 200:
            (a, b)[n % 2].ingest(sid, batch([XID.format(t="2026-03-02T08:10:00Z", bus=n % 200) + f" #{n}"] * 20,
                                            origin=f"n1/s{n}"))
            n += 1
    assert refused.value.status == 503 and refused.value.error_code == "memory_budget" and n > 2
    assert a.store.retained_bytes() == b.store.retained_bytes() >= 60_000
    assert not b.store.has_budget(60_000)  # readiness says not ready, on every replica
    a.delete(sid)
    assert b.store.retained_bytes() == 0 and b.store.has_budget(60_000)


def test_per_session_caps_and_idempotency_keys_hold_across_replicas(replicas: Replicas) -> None:
    a, b = replicas(max_session_observations=10)
    sid = a.create_session(CONTEXT)
    assert a.ingest(sid, batch(xids(6)), "k1", "f1").observations_total == 6
    replay = b.ingest(sid, batch(xids(6)), "k1", "f1")
    assert replay.replayed and replay.batch == 1
    with pytest.raises(ServiceError) as conflict:
        b.ingest(sid, batch(xids(6)), "k1", "another body")
    assert conflict.value.error_code == "idempotency_key_reused"
    with pytest.raises(ServiceError) as capped:
        b.ingest(sid, batch(xids(6)), "k2", "f2")
    assert capped.value.error_code == "session_observation_limit" and "holds 6" in capped.value.message
    assert b.ingest(sid, batch(xids(4)), "k2", "f3").observations_total == 10  # the refused key was not kept


def test_a_batch_sent_to_two_replicas_at_once_is_applied_once(replicas: Replicas) -> None:
    a, b = replicas()
    sid = a.create_session(CONTEXT)
    start = threading.Barrier(2)

    def send(service: AttributionService) -> bool:
        start.wait()
        return service.ingest(sid, batch(xids(30)), "same", "f").replayed

    with ThreadPoolExecutor(2) as pool:
        replayed = sorted(pool.map(send, (a, b)))
    assert replayed == [False, True]
    assert a.describe(sid).batches == 1 and b.describe(sid).observations == 30


def test_concurrent_batches_that_overflow_the_issue_cap_merge_like_one_process(replicas: Replicas) -> None:
    """Batches each with more issues than a session keeps, and streams going back in time, posted to both replicas
    at once: a batch read against a session that changed meanwhile is read again (StaleBase), so the result
    equals one process fed the batches in the order they were applied."""
    a, b = replicas()
    sid = a.create_session(CONTEXT)
    outside = [XID.format(t=f"1960-01-01T00:00:{i % 60:02d}Z", bus=i % 4) + f" #{i}" for i in range(250)]
    batches = [batch([XID.format(t="2026-03-02T08:30:00Z", bus=1), XID.format(t="2026-03-02T08:10:00Z", bus=1),
                      *outside], origin=f"n1/stream-{n % 3}") for n in range(8)]

    def send(n: int) -> tuple[int, int]:
        ack = (a, b)[n % 2].ingest(sid, batches[n], f"k{n}", "f")
        assert ack.batch is not None
        return ack.batch, n

    with ThreadPoolExecutor(4) as pool:
        order = [n for _, n in sorted(pool.map(send, range(len(batches))))]
    reference = AttributionService(default_engine(), Settings())
    single = reference.create_session(CONTEXT)
    for n in order:
        reference.ingest(single, batches[n])
    expected = reference.attribute(single).result.to_json()
    assert "out of time order" in expected and a.attribute(sid).result.to_json() == expected
    assert b.attribute(sid).result.to_json() == expected


def test_a_session_of_another_catalog_is_refused_by_name(replicas: Replicas) -> None:
    a, b = replicas()
    sid = a.create_session(CONTEXT)
    a.ingest(sid, batch(xids(3)))
    store = redis.Redis.from_url(redis_url(DB))
    store.hset(f"firstfault:s:{sid}", "catalog", "0123other")
    with pytest.raises(ServiceError) as refused:
        b.attribute(sid)
    assert refused.value.status == 409 and refused.value.error_code == "catalog_mismatch"
    assert "0123other" in refused.value.message and "same firstfault version" in refused.value.message
    store.hset(f"firstfault:s:{sid}", "catalog", default_engine().catalog.content_hash)
    entry = store.lindex(f"firstfault:s:{sid}:b", 0)
    assert entry is not None and b'"format":"firstfault-ingest-state"' in entry  # JSON, never pickle
    store.lset(f"firstfault:s:{sid}:b", 0, entry.replace(default_engine().catalog.content_hash.encode(), b"0123other"))
    with pytest.raises(ServiceError) as stale_state:
        b.attribute(sid)  # b has not read that batch yet
    assert stale_state.value.error_code == "catalog_mismatch" and "rule catalog '0123other'" in stale_state.value.message


def test_unreachable_redis_is_a_clear_error() -> None:
    with pytest.raises(ServiceError) as refused:
        AttributionService(default_engine(), Settings(store="redis://127.0.0.1:1/0"))
    assert refused.value.status == 503 and "redis://127.0.0.1:1/0" in refused.value.message
    serve = subprocess.run([sys.executable, "-m", "firstfault", "serve", "--store", "redis://127.0.0.1:1/0",
                            "--port", "0"], capture_output=True, text=True, timeout=120)
    assert serve.returncode == 2 and "not serving" in serve.stderr and "Traceback" not in serve.stderr
    with pytest.raises(ValueError, match="Redis URL"):
        Settings(store="mysql://x").validate()
