"""The in-memory session store (the default): TTL, a cap on live sessions with eviction of the oldest idle one,
per-session caps, and idempotent batch acknowledgement.

All state of a session lives in the process that created it (docs/service.md, "What state lives where"); each
batch's state is merged into the session as it is applied. `serve --store redis://...` shares sessions between
replicas instead (service/redis_store.py).
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

from firstfault.engine.engine import Engine
from firstfault.engine.ingest import InexactMerge, IngestState
from firstfault.engine.model import ExecutionContext
from firstfault.engine.session import Session
from firstfault.errors import SessionNotFound
from firstfault.service.memory import RESULT_JSON_FACTOR, batch_bytes
from firstfault.service.schemas import AttributeResponse, ComputedFrom, IngestAck, SessionState
from firstfault.service.store import (
    BatchCounts,
    SessionHandle,
    SessionStore,
    StaleBase,
    StoreLimits,
    check_room,
    idempotency_conflict,
    too_many_sessions,
)

_TOMBSTONES = 10_000


class IdempotencyCache:
    """Remembers the acknowledgement of each Idempotency-Key so a retry is answered without re-ingesting (the
    oldest key forgotten first past `capacity`). Not thread-safe: its session's `work` lock guards it."""

    def __init__(self, capacity: int) -> None:
        self._capacity = capacity
        self._entries: OrderedDict[str, tuple[str, IngestAck]] = OrderedDict()

    def get(self, key: str, fingerprint: str) -> IngestAck | None:
        """The earlier answer for `key` (409 when it was used for another body), else None."""
        entry = self._entries.get(key)
        if entry is None:
            return None
        if entry[0] != fingerprint:
            raise idempotency_conflict(key)
        return entry[1].model_copy(update={"replayed": True})

    def put(self, key: str, fingerprint: str, ack: IngestAck) -> None:
        self._entries[key] = (fingerprint, ack)
        while len(self._entries) > self._capacity:
            self._entries.popitem(last=False)


@dataclass
class SessionRecord(SessionHandle):
    """One live session: the engine session plus counters, the last result and idempotency memory."""

    id: str
    context: ExecutionContext
    engine: Session
    idempotency: IdempotencyCache
    created_at: datetime
    last_activity: datetime
    last_seen: float  # monotonic clock
    limits: StoreLimits
    observations: int = 0
    byte_count: int = 0
    batches: int = 0
    truncated_lines: int = 0
    revision: int = 0
    last: AttributeResponse | None = None
    in_flight: int = 0
    # Estimated bytes this session holds (service/memory.py): context, events, stream counters, last result.
    retained: int = 0
    result_bytes: int = 0
    # The (node, source) streams it holds counters for (the engine's own key objects, so little more memory).
    streams: set[tuple[str, str]] = field(default_factory=set)
    # Held while evidence is added or a result computed, so `computed_from` is exact.
    work: threading.Lock = field(default_factory=threading.Lock)

    def computed_from(self) -> ComputedFrom:
        return ComputedFrom(observations=self.observations, bytes=self.byte_count, batches=self.batches)

    def replay(self, key: str, fingerprint: str) -> IngestAck | None:
        with self.work:
            return self.idempotency.get(key, fingerprint)

    @contextmanager
    def base(self) -> Iterator[tuple[Session, int]]:
        yield self.engine, self.batches

    def append(self, state: IngestState, counts: BatchCounts, key: str | None, fingerprint: str,
               position: int) -> IngestAck:
        with self.work:
            if key is not None and (earlier := self.idempotency.get(key, fingerprint)) is not None:
                return earlier
            check_room(self.computed_from(), counts, self.limits)
            before = self.engine.event_keys()
            try:
                self.engine.merge_state(state)
            except InexactMerge:
                raise StaleBase("the session reported streams of this batch meanwhile") from None
            self.retained += batch_bytes(state, self.engine.event_keys() - before, self.streams)
            ack = self.add_batch(counts)
            if key is not None:
                self.idempotency.put(key, fingerprint, ack)
            return ack

    @contextmanager
    def merged(self) -> Iterator[tuple[Session, ComputedFrom]]:
        with self.work:
            yield self.engine, self.computed_from()

    def new_revision(self) -> int:
        self.revision += 1
        return self.revision

    def keep_result(self, response: AttributeResponse, body: bytes) -> None:
        nbytes = len(body) * RESULT_JSON_FACTOR
        self.retained += nbytes - self.result_bytes
        self.last, self.result_bytes = response, nbytes

    def last_result(self) -> AttributeResponse | None:
        return self.last

    def describe(self) -> SessionState:
        last = self.last.result if self.last else None
        return SessionState(session_id=self.id, context=self.context, created_at=self.created_at,
                            last_activity=self.last_activity, observations=self.observations, bytes=self.byte_count,
                            batches=self.batches, revision=self.revision, last_result=last,
                            truncated_lines=self.truncated_lines)

    def add_batch(self, counts: BatchCounts) -> IngestAck:
        self.observations += counts.observations
        self.byte_count += counts.nbytes
        self.batches += 1
        self.truncated_lines += counts.truncated_lines
        return IngestAck(accepted=counts.observations, observations_total=self.observations, bytes_total=self.byte_count,
                         truncated_lines=counts.truncated_lines, replayed=False, batch=self.batches)


class MemorySessionStore(SessionStore):
    """Live sessions of this process by id, with expiry and capacity eviction. Thread-safe."""

    def __init__(self, engine: Engine, limits: StoreLimits, on_remove: Callable[[str], None] | None = None,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.engine = engine
        self.limits = limits
        self._on_remove = on_remove or (lambda reason: None)
        self._clock = clock
        self._sessions: dict[str, SessionRecord] = {}
        self._gone: OrderedDict[str, str] = OrderedDict()
        self._lock = threading.Lock()

    def __len__(self) -> int:
        return len(self._sessions)

    def create(self, context: ExecutionContext, context_bytes: int) -> str:
        now = datetime.now(UTC)
        record = SessionRecord(id=uuid.uuid4().hex, context=context, engine=self.engine.session(context),
                               idempotency=IdempotencyCache(self.limits.idempotency_keys), created_at=now,
                               last_activity=now, last_seen=self._clock(), limits=self.limits,
                               retained=context_bytes)
        with self._lock:
            self._expire_locked()
            if len(self._sessions) >= self.limits.max_sessions:
                victim = self._eviction_candidate()
                if victim is None:
                    raise too_many_sessions(len(self._sessions), self.limits)
                self._remove_locked(victim, "evicted")
            self._sessions[record.id] = record
        return record.id

    def event_keys(self) -> int:
        with self._lock:
            records = list(self._sessions.values())
        return sum(r.engine.event_keys() for r in records)

    def retained_bytes(self) -> int:
        with self._lock:
            return sum(r.retained for r in self._sessions.values())

    def make_room(self, budget: int) -> bool:
        while self.retained_bytes() >= budget:
            with self._lock:
                victim = self._eviction_candidate()
                if victim is None:
                    return False
                self._remove_locked(victim, "evicted")
        return True

    def has_budget(self, budget: int) -> bool:
        if self.retained_bytes() < budget:
            return True
        with self._lock:
            return self._eviction_candidate() is not None

    def has_room(self) -> bool:
        with self._lock:
            return len(self._sessions) < self.limits.max_sessions or self._eviction_candidate() is not None

    def close(self) -> None:
        """Nothing to release: the sessions go with the process."""

    @contextmanager
    def use(self, session_id: str) -> Iterator[SessionRecord]:
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
