"""The in-memory SessionStore and IdempotencyCache, with a fake clock (eviction and expiry rules). The Redis store
keeps the same rules across replicas: test_redis_store.py."""

from __future__ import annotations

import pytest

from firstfault.engine import ExecutionContext
from firstfault.errors import ServiceError, SessionNotFound
from firstfault.service.schemas import IngestAck
from firstfault.service.sessions import IdempotencyCache, MemorySessionStore
from firstfault.service.store import BatchCounts, StoreLimits
from firstfault.tools.verify import default_engine

CONTEXT = ExecutionContext(workload_id="w", nodes=["n1"])


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def store(clock: Clock, max_sessions: int = 2, removed: list[str] | None = None) -> MemorySessionStore:
    """A store with a TTL of 100 s and an idle minimum of 10 s on `clock`; `removed` collects removal reasons."""
    limits = StoreLimits(max_sessions=max_sessions, ttl_s=100, min_idle_s=10, max_observations=10, max_bytes=100,
                         idempotency_keys=2)
    return MemorySessionStore(default_engine(), limits, on_remove=None if removed is None else removed.append,
                              clock=clock)


def create(s: MemorySessionStore) -> str:
    return s.create(CONTEXT, 0)


def test_eviction_takes_the_longest_idle_session() -> None:
    clock = Clock()
    s = store(clock)
    a, b = create(s), create(s)
    clock.now += 20
    with s.use(a):
        pass  # a was used last
    clock.now += 11
    create(s)
    with pytest.raises(SessionNotFound, match="evicted"), s.use(b):
        pass
    with s.use(a):
        pass


def test_a_session_with_a_request_in_flight_is_never_evicted_nor_expired() -> None:
    clock = Clock()
    s = store(clock, max_sessions=1)
    a = create(s)
    with s.use(a):
        clock.now += 1000  # past the TTL and the idle minimum, but in use
        with pytest.raises(ServiceError) as refused:
            create(s)
        assert refused.value.status == 429
        assert s.expire() == 0
    clock.now += 101
    assert s.expire() == 1
    create(s)


def test_activity_keeps_a_session_alive_past_the_ttl() -> None:
    """The TTL counts from a session's last use (over HTTP, with real sleeps: test_limits.py::test_session_ttl)."""
    clock = Clock()
    removed: list[str] = []
    s = store(clock, removed=removed)
    idle, kept = create(s), create(s)
    for _ in range(6):  # 240 s in steps of 40: the unused session outlives the 100 s TTL, the used one never idles
        clock.now += 40
        with s.use(kept):
            pass
    with pytest.raises(SessionNotFound, match="expired"), s.use(idle):
        pass
    with s.use(kept):
        pass
    assert removed == ["expired"]


def test_at_the_cap_creation_is_refused_until_a_session_has_idled_then_the_longest_idle_goes() -> None:
    """The session cap with its idle minimum (over HTTP, with real sleeps:
    test_limits.py::test_live_session_cap_evicts_the_oldest_idle_never_an_active_one)."""
    clock = Clock()
    removed: list[str] = []
    s = store(clock, removed=removed)
    first, second = create(s), create(s)
    with pytest.raises(ServiceError) as refused:
        create(s)
    assert refused.value.error_code == "too_many_sessions" and refused.value.headers == {"Retry-After": "10"}
    assert not s.has_room()  # readiness says so too
    clock.now += 15
    with s.use(second):
        pass  # second is active again
    assert s.has_room()
    create(s)
    with pytest.raises(SessionNotFound, match="evicted"), s.use(first):
        pass
    with s.use(second):
        pass
    assert removed == ["evicted"]


def test_session_caps() -> None:
    clock = Clock()
    s = store(clock)
    with s.use(create(s)) as record:
        with record.base() as (base, position):
            trial = default_engine().session(CONTEXT)
            trial.fork(base)
        state = trial.export_state()
        assert record.append(state, BatchCounts(10, 50, 0), None, "", position).observations_total == 10
        with pytest.raises(ServiceError, match="cap of 10"):
            record.append(state, BatchCounts(1, 0, 0), None, "", position + 1)
        assert record.describe().batches == 1


def ack(n: int) -> IngestAck:
    return IngestAck(accepted=n, observations_total=n, bytes_total=n, truncated_lines=0, replayed=False, batch=1)


def test_idempotency_replay_and_conflict() -> None:
    cache = IdempotencyCache(capacity=2)
    assert cache.get("k", "f1") is None
    cache.put("k", "f1", ack(3))
    replay = cache.get("k", "f1")
    assert replay is not None and replay.replayed and replay.accepted == 3
    with pytest.raises(ServiceError) as conflict:
        cache.get("k", "other body")
    assert conflict.value.status == 409


def test_idempotency_memory_is_bounded() -> None:
    cache = IdempotencyCache(capacity=2)
    for key in ("a", "b", "c"):
        assert cache.get(key, "f") is None
        cache.put(key, "f", ack(1))
    assert cache.get("a", "f") is None  # forgotten: the oldest key went first
    assert cache.get("c", "f") is not None
