"""In-memory session store: TTL, a cap on live sessions with eviction of the oldest idle one, per-session caps,
and idempotent batch acknowledgement.

All state of a session lives in the process that created it (docs/service.md, "What state lives where").
"""

from __future__ import annotations

import threading
import time
import uuid
from collections import OrderedDict
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import UTC, datetime

from firstfault.engine.model import ExecutionContext
from firstfault.engine.session import Session
from firstfault.errors import ServiceError, SessionNotFound
from firstfault.service.schemas import AttributeResponse, ComputedFrom, IngestAck

_TOMBSTONES = 10_000
_IDEMPOTENCY_WAIT_S = 120.0


@dataclass(frozen=True)
class StoreLimits:
    max_sessions: int
    ttl_s: float
    min_idle_s: float
    max_observations: int
    max_bytes: int
    idempotency_keys: int


@dataclass
class _KeyEntry:
    fingerprint: str
    done: threading.Event = field(default_factory=threading.Event)
    ack: IngestAck | None = None


class IdempotencyCache:
    """Remembers the acknowledgement of each Idempotency-Key so a retry is answered without re-ingesting.

    A retry that arrives while the first attempt is still running waits for it; if that attempt fails, the
    key is released and the retry runs the batch itself.
    """

    def __init__(self, capacity: int) -> None:
        self._capacity = capacity
        self._entries: OrderedDict[str, _KeyEntry] = OrderedDict()
        self._lock = threading.Lock()

    def begin(self, key: str, fingerprint: str) -> IngestAck | None:
        """None: the caller owns the key and must `finish()` or `abandon()` it. Otherwise the earlier answer."""
        deadline = time.monotonic() + _IDEMPOTENCY_WAIT_S
        while True:
            with self._lock:
                entry = self._entries.get(key)
                if entry is None:
                    self._entries[key] = _KeyEntry(fingerprint)
                    self._trim()
                    return None
                if entry.fingerprint != fingerprint:
                    raise ServiceError(409, "idempotency_key_reused",
                                       f"Idempotency-Key {key!r} was already used for a different batch")
                if entry.ack is not None:
                    return entry.ack.model_copy(update={"replayed": True})
            if not entry.done.wait(max(0.0, deadline - time.monotonic())):
                raise ServiceError(409, "idempotency_key_in_progress",
                                   f"a batch with Idempotency-Key {key!r} is still being ingested; retry later")

    def finish(self, key: str, ack: IngestAck) -> None:
        with self._lock:
            entry = self._entries[key]
            entry.ack = ack
        entry.done.set()

    def abandon(self, key: str) -> None:
        with self._lock:
            entry = self._entries.pop(key)
        entry.done.set()

    def _trim(self) -> None:
        while len(self._entries) > self._capacity:
            oldest = next(iter(self._entries))
            if self._entries[oldest].ack is None:  # never forget a key whose batch is still running
                break
            del self._entries[oldest]


@dataclass
class SessionRecord:
    """One live session: the engine session plus counters, the last result and idempotency memory."""

    id: str
    context: ExecutionContext
    engine: Session
    idempotency: IdempotencyCache
    created_at: datetime
    last_activity: datetime
    last_seen: float  # monotonic clock
    observations: int = 0
    bytes: int = 0
    batches: int = 0
    truncated_lines: int = 0
    revision: int = 0
    last_result: AttributeResponse | None = None
    in_flight: int = 0
    # Estimated bytes this session holds (service/memory.py): context, events, stream counters, last result.
    retained: int = 0
    result_bytes: int = 0
    # The (node, source) streams it holds counters for (the engine's own key objects, so little more memory).
    streams: set[tuple[str, str]] = field(default_factory=set)
    # Held while evidence is added or a result computed, so `computed_from` is exact.
    work: threading.Lock = field(default_factory=threading.Lock)

    def computed_from(self) -> ComputedFrom:
        return ComputedFrom(observations=self.observations, bytes=self.bytes, batches=self.batches)

    def check_room(self, count: int, nbytes: int, limits: StoreLimits) -> None:
        if self.observations + count > limits.max_observations:
            raise ServiceError(413, "session_observation_limit",
                               f"this batch of {count} observations would take the session past its cap of "
                               f"{limits.max_observations} (it holds {self.observations})")
        if self.bytes + nbytes > limits.max_bytes:
            raise ServiceError(413, "session_byte_limit",
                               f"this batch of {nbytes} bytes would take the session past its cap of "
                               f"{limits.max_bytes} bytes (it holds {self.bytes})")

    def keep_result(self, response: AttributeResponse, nbytes: int) -> None:
        self.retained += nbytes - self.result_bytes
        self.last_result, self.result_bytes = response, nbytes

    def add_batch(self, count: int, nbytes: int, truncated: int) -> IngestAck:
        self.observations += count
        self.bytes += nbytes
        self.batches += 1
        self.truncated_lines += truncated
        return IngestAck(accepted=count, observations_total=self.observations, bytes_total=self.bytes,
                         truncated_lines=truncated, replayed=False, batch=self.batches)


class SessionStore:
    """Live sessions by id, with expiry and capacity eviction. Thread-safe."""

    def __init__(self, limits: StoreLimits, on_remove: Callable[[str], None] | None = None,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.limits = limits
        self._on_remove = on_remove or (lambda reason: None)
        self._clock = clock
        self._sessions: dict[str, SessionRecord] = {}
        self._gone: OrderedDict[str, str] = OrderedDict()
        self._lock = threading.Lock()

    def __len__(self) -> int:
        return len(self._sessions)

    def create(self, context: ExecutionContext, engine_session: Session) -> SessionRecord:
        now = datetime.now(UTC)
        record = SessionRecord(id=uuid.uuid4().hex, context=context, engine=engine_session,
                               idempotency=IdempotencyCache(self.limits.idempotency_keys), created_at=now,
                               last_activity=now, last_seen=self._clock())
        with self._lock:
            self._expire_locked()
            if len(self._sessions) >= self.limits.max_sessions:
                victim = self._eviction_candidate()
                if victim is None:
                    raise ServiceError(429, "too_many_sessions",
                                       f"{len(self._sessions)} sessions are live and all were used in the last "
                                       f"{self.limits.min_idle_s:g} s; retry later or delete finished sessions",
                                       headers={"Retry-After": str(max(1, int(self.limits.min_idle_s)))})
                self._remove_locked(victim, "evicted")
            self._sessions[record.id] = record
        return record

    def event_keys(self) -> int:
        """Coalesced events held by every live session (the memory budget's measure)."""
        with self._lock:
            records = list(self._sessions.values())
        return sum(r.engine.event_keys() for r in records)

    def retained_bytes(self) -> int:
        """Estimated bytes held by every live session (the memory budget's measure)."""
        with self._lock:
            return sum(r.retained for r in self._sessions.values())

    def make_room(self, budget: int) -> bool:
        """Evict idle sessions, the longest idle first (never one in use or used within `min_idle_s`), until the
        live sessions hold less than `budget` bytes. False when that cannot be done."""
        while self.retained_bytes() >= budget:
            with self._lock:
                victim = self._eviction_candidate()
                if victim is None:
                    return False
                self._remove_locked(victim, "evicted")
        return True

    def has_budget(self, budget: int) -> bool:
        """The live sessions hold less than `budget` bytes, or one of them is idle enough to evict."""
        if self.retained_bytes() < budget:
            return True
        with self._lock:
            return self._eviction_candidate() is not None

    def has_room(self) -> bool:
        with self._lock:
            return len(self._sessions) < self.limits.max_sessions or self._eviction_candidate() is not None

    @contextmanager
    def use(self, session_id: str) -> Iterator[SessionRecord]:
        """The live session, marked in use (never expired nor evicted) for the duration of the block."""
        with self._lock:
            self._expire_locked()
            record = self._sessions.get(session_id)
            if record is None:
                raise SessionNotFound(session_id, self._gone.get(session_id))
            record.in_flight += 1
            self._touch(record)
        try:
            yield record
        finally:
            with self._lock:
                record.in_flight -= 1
                self._touch(record)

    def delete(self, session_id: str) -> None:
        with self._lock:
            if session_id not in self._sessions:
                raise SessionNotFound(session_id, self._gone.get(session_id))
            self._remove_locked(session_id, "deleted")

    def expire(self) -> int:
        """Remove sessions idle for longer than the TTL; returns how many."""
        with self._lock:
            return self._expire_locked()

    def _touch(self, record: SessionRecord) -> None:
        record.last_seen = self._clock()
        record.last_activity = datetime.now(UTC)

    def _eviction_candidate(self) -> str | None:
        cutoff = self._clock() - self.limits.min_idle_s
        idle = [r for r in self._sessions.values() if r.in_flight == 0 and r.last_seen <= cutoff]
        return min(idle, key=lambda r: r.last_seen).id if idle else None

    def _expire_locked(self) -> int:
        cutoff = self._clock() - self.limits.ttl_s
        expired = [r.id for r in self._sessions.values() if r.in_flight == 0 and r.last_seen < cutoff]
        for session_id in expired:
            self._remove_locked(session_id, "expired")
        return len(expired)

    def _remove_locked(self, session_id: str, reason: str) -> None:
        del self._sessions[session_id]
        self._gone[session_id] = reason
        while len(self._gone) > _TOMBSTONES:
            self._gone.popitem(last=False)
        self._on_remove(reason)
