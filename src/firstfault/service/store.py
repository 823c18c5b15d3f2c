"""Where sessions live: the `SessionStore` interface the service core works against.

A session is its context plus the ingest states of its batches, in batch order (engine/ingest.py): merging
them in that order gives exactly the session that read every batch itself. Two stores implement it:

- `MemorySessionStore` (service/sessions.py, the default): one process holds every session, merged as it goes.
- `RedisSessionStore` (service/redis_store.py, `serve --store redis://...`): the states live in Redis, written
  as versioned JSON (engine/state_format.py), so any replica answers any request of any session.

Both keep the same limits (StoreLimits: the session cap with eviction of the longest idle session, the TTL, the
per-session caps, the idempotency memory) and the same memory budget, and apply a batch together with its
Idempotency-Key record, all or nothing.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from contextlib import AbstractContextManager
from dataclasses import dataclass

from firstfault.engine.ingest import IngestState
from firstfault.engine.model import ExecutionContext
from firstfault.engine.session import Session
from firstfault.errors import FirstfaultError, ServiceError
from firstfault.service.schemas import AttributeResponse, ComputedFrom, IngestAck, SessionState


@dataclass(frozen=True)
class StoreLimits:
    max_sessions: int
    ttl_s: float
    min_idle_s: float
    max_observations: int
    max_bytes: int
    idempotency_keys: int


@dataclass(frozen=True)
class BatchCounts:
    """What one batch adds to its session's counters."""

    observations: int
    nbytes: int
    truncated_lines: int


class StaleBase(FirstfaultError):
    """The session changed since the batch was read against it, in a way the batch's state cannot be merged
    into exactly: read it again against the session as it is now."""


def check_room(held: ComputedFrom, counts: BatchCounts, limits: StoreLimits) -> None:
    """Refuse (413) a batch that would take its session past the per-session caps."""
    if held.observations + counts.observations > limits.max_observations:
        raise ServiceError(413, "session_observation_limit",
                           f"this batch of {counts.observations} observations would take the session past its cap "
                           f"of {limits.max_observations} (it holds {held.observations})")
    if held.bytes + counts.nbytes > limits.max_bytes:
        raise ServiceError(413, "session_byte_limit",
                           f"this batch of {counts.nbytes} bytes would take the session past its cap of "
                           f"{limits.max_bytes} bytes (it holds {held.bytes})")


def idempotency_conflict(key: str) -> ServiceError:
    return ServiceError(409, "idempotency_key_reused", f"Idempotency-Key {key!r} was already used for a different "
                                                       "batch")


def too_many_sessions(live: int, limits: StoreLimits) -> ServiceError:
    return ServiceError(429, "too_many_sessions",
                        f"{live} sessions are live and all were used in the last {limits.min_idle_s:g} s; retry later "
                        "or delete finished sessions", headers={"Retry-After": str(max(1, int(limits.min_idle_s)))})


class SessionHandle(ABC):
    """One session, in use for the duration of a request (never expired nor evicted meanwhile)."""

    id: str
    context: ExecutionContext

    @abstractmethod
    def replay(self, key: str, fingerprint: str) -> IngestAck | None:
        """The acknowledgement of an earlier batch with this Idempotency-Key (409 for another body), else None."""

    @abstractmethod
    def base(self) -> AbstractContextManager[tuple[Session, int]]:
        """The session as it is (to fork a trial session from, `Session.fork`) and its batch count."""

    @abstractmethod
    def append(self, state: IngestState, counts: BatchCounts, key: str | None, fingerprint: str,
               position: int) -> IngestAck:
        """Add one batch's state, read against the session at batch count `position`, with its Idempotency-Key
        record, all or nothing. A replay when the key was used meanwhile; 413 past a per-session cap;
        `StaleBase` when the state must be read again against the session as it is now."""

    @abstractmethod
    def merged(self) -> AbstractContextManager[tuple[Session, ComputedFrom]]:
        """The session with every batch merged (held exclusively in the block) and the evidence it holds."""

    @abstractmethod
    def new_revision(self) -> int:
        """The revision of a new result of this session (1, 2, ...)."""

    @abstractmethod
    def keep_result(self, response: AttributeResponse, body: bytes) -> None:
        """Keep `response` (written as `body`) as the session's last result."""

    @abstractmethod
    def last_result(self) -> AttributeResponse | None:
        ...

    @abstractmethod
    def describe(self) -> SessionState:
        ...


class SessionStore(ABC):
    """Live sessions by id, with expiry, the session cap and the memory budget. Thread-safe."""

    limits: StoreLimits

    @abstractmethod
    def __len__(self) -> int:
        """Live sessions."""

    @abstractmethod
    def create(self, context: ExecutionContext, context_bytes: int) -> str:
        """A new session's id (429 at the session cap with no session idle enough to evict)."""

    @abstractmethod
    def use(self, session_id: str) -> AbstractContextManager[SessionHandle]:
        """The live session, in use for the block (SessionNotFound, naming why, when it is not live)."""

    @abstractmethod
    def delete(self, session_id: str) -> None:
        ...

    @abstractmethod
    def expire(self) -> int:
        """Remove sessions idle for longer than the TTL; returns how many."""

    @abstractmethod
    def make_room(self, budget: int) -> bool:
        """Evict idle sessions, the longest idle first (never one in use or used within `min_idle_s`), until the
        live sessions hold less than `budget` bytes. False when that cannot be done."""

    @abstractmethod
    def has_budget(self, budget: int) -> bool:
        """The live sessions hold less than `budget` bytes, or one of them is idle enough to evict."""

    @abstractmethod
    def has_room(self) -> bool:
        """Below the session cap, or a session is idle enough to evict."""

    @abstractmethod
    def retained_bytes(self) -> int:
        """Estimated bytes held by the live sessions (the memory budget's measure)."""

    @abstractmethod
    def event_keys(self) -> int:
        """Coalesced events this process holds."""

    @abstractmethod
    def close(self) -> None:
        """Release connections (at shutdown)."""

