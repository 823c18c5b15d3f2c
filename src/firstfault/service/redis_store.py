"""Sessions in Redis, shared by every replica of the service (`serve --store redis://...`, the `redis` extra).

What Redis holds per session (keys under `firstfault:s:<id>`): a hash of its context, catalog hash and counters;
the list of its batches, each the batch's acknowledgement and its ingest state as versioned JSON
(engine/state_format.py, never pickle); its Idempotency-Key records; its last result. Every change is one Lua
script, so a batch's state, its counters and its Idempotency-Key record are appended together or not at all, and
the per-session caps are checked against the counters as they are at that moment, whichever replica writes.

Each replica caches the sessions it served, merged up to the batches it has read; before any use it merges the
batches appended since (merging in batch order is exact, so every replica computes the same result). Live
sessions are a sorted set by last use (`firstfault:live`), which carries the session cap, the TTL and eviction
of the longest idle session across replicas; `firstfault:bytes` is the bytes the live sessions hold in Redis (the
memory budget's measure), per session in `firstfault:sizes`. A request in flight marks its session busy (with a
lease, so a replica killed mid-request does not pin a session for ever), and a busy session is never expired or
evicted. Times are Redis's own clock, so replicas' clocks need not agree.

The scripts name keys they compute (other sessions' keys, for eviction): one Redis primary, not Redis Cluster.
"""

from __future__ import annotations

import logging
import threading
import uuid
from collections import OrderedDict
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any
from urllib.parse import urlsplit

from firstfault.engine.engine import Engine
from firstfault.engine.ingest import IngestState
from firstfault.engine.model import ExecutionContext
from firstfault.engine.session import Session
from firstfault.engine.state_format import StateFormatError, StateMismatch, decode_state, encode_state
from firstfault.errors import ConfigError, ServiceError, SessionNotFound
from firstfault.service.memory import batch_bytes
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

log = logging.getLogger("firstfault.service")

PREFIX = "firstfault:"
# A request in flight keeps its session from expiry and eviction for at most this long after it began (a replica
# killed mid-request leaves its mark behind; the lease lets the session go in the end).
LEASE_MS = 300_000
_TIMEOUT_S = 5.0

_PRELUDE = """
local P = ARGV[1]
local function now_ms()
  local t = redis.call('TIME')
  return tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
end
local function skey(id) return P .. 's:' .. id end
local function idle(id, now)
  local f = redis.call('HMGET', skey(id), 'busy', 'lease')
  return (tonumber(f[1]) or 0) <= 0 or (tonumber(f[2]) or 0) < now
end
local function grow(id, delta)
  redis.call('HINCRBY', P .. 'sizes', id, delta)
  redis.call('INCRBY', P .. 'bytes', delta)
end
local function remove(id, why)
  local s = skey(id)
  redis.call('DEL', s, s .. ':b', s .. ':k', s .. ':ko', s .. ':r')
  redis.call('ZREM', P .. 'live', id)
  local size = tonumber(redis.call('HGET', P .. 'sizes', id)) or 0
  redis.call('HDEL', P .. 'sizes', id)
  redis.call('DECRBY', P .. 'bytes', size)
  redis.call('SET', P .. 'gone:' .. id, why, 'EX', 86400)
end
-- the longest idle session, idle for at least min_idle_ms and not busy (among the 64 longest idle)
local function candidate(now, min_idle_ms)
  local ids = redis.call('ZRANGEBYSCORE', P .. 'live', '-inf', now - min_idle_ms, 'LIMIT', 0, 64)
  for _, id in ipairs(ids) do
    if idle(id, now) then return id end
  end
  return nil
end
local function expire(now, ttl_ms)
  local ids = redis.call('ZRANGEBYSCORE', P .. 'live', '-inf', '(' .. (now - ttl_ms), 'LIMIT', 0, 1000)
  local n = 0
  for _, id in ipairs(ids) do
    if idle(id, now) then remove(id, 'expired'); n = n + 1 end
  end
  return n
end
"""

# ARGV: prefix, id, context, catalog, created_at, max_sessions, min_idle_ms, ttl_ms, context bytes
_CREATE = """
local id = ARGV[2]
local now = now_ms()
local expired = expire(now, tonumber(ARGV[8]))
local evicted = 0
local live = redis.call('ZCARD', P .. 'live')
if live >= tonumber(ARGV[6]) then
  local victim = candidate(now, tonumber(ARGV[7]))
  if not victim then return {'full', live, expired} end
  remove(victim, 'evicted')
  evicted = 1
end
redis.call('HSET', skey(id), 'context', ARGV[3], 'catalog', ARGV[4], 'created', ARGV[5], 'observations', 0,
           'bytes', 0, 'batches', 0, 'truncated', 0, 'revision', 0, 'busy', 0, 'lease', 0)
redis.call('ZADD', P .. 'live', now, id)
grow(id, tonumber(ARGV[9]) + #ARGV[3])
return {'ok', expired, evicted}
"""

# ARGV: prefix, id, ttl_ms. A session past its TTL is expired here even if no sweep ran yet.
_USE = """
local id = ARGV[2]
local s = skey(id)
local now = now_ms()
if redis.call('EXISTS', s) == 0 then return {0, redis.call('GET', P .. 'gone:' .. id) or ''} end
local seen = tonumber(redis.call('ZSCORE', P .. 'live', id)) or 0
if seen < now - tonumber(ARGV[3]) and idle(id, now) then
  remove(id, 'expired')
  return {0, 'expired', 1}
end
redis.call('HINCRBY', s, 'busy', 1)
redis.call('HSET', s, 'lease', now + """ + str(LEASE_MS) + """)
redis.call('ZADD', P .. 'live', now, id)
return {1, redis.call('HGET', s, 'catalog')}
"""

# ARGV: prefix, id
_RELEASE = """
local s = skey(ARGV[2])
if redis.call('EXISTS', s) == 1 then
  redis.call('HINCRBY', s, 'busy', -1)
  redis.call('ZADD', P .. 'live', 'XX', now_ms(), ARGV[2])
end
return 1
"""

# ARGV: prefix, id, key ('' for none), fingerprint, state, observations, bytes, truncated lines, position,
# position required ('1'/'0'), max observations, max bytes, idempotency keys kept
_APPEND = """
local id = ARGV[2]
local s = skey(id)
if redis.call('EXISTS', s) == 0 then return {'gone', redis.call('GET', P .. 'gone:' .. id) or ''} end
local key = ARGV[3]
if key ~= '' then
  local record = redis.call('HGET', s .. ':k', key)
  if record then return {'replay', record} end
end
local f = redis.call('HMGET', s, 'observations', 'bytes', 'batches', 'truncated')
local count, nbytes, truncated = tonumber(ARGV[6]), tonumber(ARGV[7]), tonumber(ARGV[8])
local obs, byt = tonumber(f[1]), tonumber(f[2])
if obs + count > tonumber(ARGV[11]) or byt + nbytes > tonumber(ARGV[12]) then return {'cap', obs, byt} end
if ARGV[10] == '1' and redis.call('LLEN', s .. ':b') ~= tonumber(ARGV[9]) then return {'stale'} end
obs, byt = obs + count, byt + nbytes
local batches, total_truncated = tonumber(f[3]) + 1, tonumber(f[4]) + truncated
redis.call('HSET', s, 'observations', obs, 'bytes', byt, 'batches', batches, 'truncated', total_truncated)
local ack = string.format(
  '{"accepted":%d,"observations_total":%d,"bytes_total":%d,"truncated_lines":%d,"replayed":false,"batch":%d}',
  count, obs, byt, truncated, batches)
local entry = ack .. '\\n' .. ARGV[5]
redis.call('RPUSH', s .. ':b', entry)
local size = #entry
if key ~= '' then
  local record = ARGV[4] .. '\\n' .. ack
  redis.call('HSET', s .. ':k', key, record)
  redis.call('RPUSH', s .. ':ko', key)
  size = size + #key + #record
  while redis.call('LLEN', s .. ':ko') > tonumber(ARGV[13]) do
    local old = redis.call('LPOP', s .. ':ko')
    size = size - #old - #(redis.call('HGET', s .. ':k', old) or '')
    redis.call('HDEL', s .. ':k', old)
  end
end
grow(id, size)
redis.call('ZADD', P .. 'live', now_ms(), id)
return {'ok', ack}
"""

# ARGV: prefix, id
_REVISION = """
local s = skey(ARGV[2])
if redis.call('EXISTS', s) == 0 then return -1 end
return redis.call('HINCRBY', s, 'revision', 1)
"""

# ARGV: prefix, id, revision, body. An older result never replaces a newer one.
_KEEP_RESULT = """
local id = ARGV[2]
local s = skey(id)
if redis.call('EXISTS', s) == 0 then return 0 end
local revision = tonumber(ARGV[3])
if revision <= (tonumber(redis.call('HGET', s, 'result_revision')) or 0) then return 0 end
local before = redis.call('STRLEN', s .. ':r')
redis.call('SET', s .. ':r', ARGV[4])
redis.call('HSET', s, 'result_revision', revision)
grow(id, #ARGV[4] - before)
return 1
"""

# ARGV: prefix, id
_DELETE = """
local id = ARGV[2]
if redis.call('EXISTS', skey(id)) == 0 then return {0, redis.call('GET', P .. 'gone:' .. id) or ''} end
remove(id, 'deleted')
return {1, ''}
"""

# ARGV: prefix, ttl_ms
_EXPIRE = "return expire(now_ms(), tonumber(ARGV[2]))"

# ARGV: prefix, budget, min_idle_ms, evict ('1': evict until under budget; '0': only say whether that can be done)
_MAKE_ROOM = """
local now = now_ms()
local evicted = 0
while (tonumber(redis.call('GET', P .. 'bytes')) or 0) >= tonumber(ARGV[2]) do
  local victim = candidate(now, tonumber(ARGV[3]))
  if not victim then return {0, evicted} end
  if ARGV[4] ~= '1' then return {1, 0} end
  remove(victim, 'evicted')
  evicted = evicted + 1
end
return {1, evicted}
"""

# ARGV: prefix, max_sessions, min_idle_ms
_HAS_ROOM = """
if redis.call('ZCARD', P .. 'live') < tonumber(ARGV[2]) then return 1 end
return candidate(now_ms(), tonumber(ARGV[3])) and 1 or 0
"""


@dataclass
class _Cached:
    """A session as this replica last merged it: every batch up to `position`."""

    session: Session
    position: int = 0
    computed_from: ComputedFrom = field(default_factory=lambda: ComputedFrom(observations=0, bytes=0, batches=0))
    retained: int = 0
    streams: set[tuple[str, str]] = field(default_factory=set)
    lock: threading.Lock = field(default_factory=threading.Lock)


class RedisSessionStore(SessionStore):
    """Live sessions in Redis at `url`; see the module's doc. Thread-safe."""

    def __init__(self, url: str, engine: Engine, limits: StoreLimits, budget: int,
                 on_remove: Callable[[str], None] | None = None, prefix: str = PREFIX) -> None:
        try:
            import redis
            from redis.backoff import NoBackoff
            from redis.retry import Retry
        except ImportError:
            raise ConfigError("--store redis://... needs the redis client: pip install 'firstfault[redis]'") from None
        self.engine = engine
        self.limits = limits
        self.prefix = prefix
        self.where = _redacted(url)
        self._errors = redis.RedisError
        self._on_remove = on_remove or (lambda reason: None)
        self._budget = budget
        # No silent retry: a script whose answer was lost may have run, and running an append again would apply
        # its batch twice. The failure goes to the client as 503, which retries with its Idempotency-Key.
        self._redis = redis.Redis.from_url(url, socket_timeout=_TIMEOUT_S, socket_connect_timeout=_TIMEOUT_S,
                                           health_check_interval=1, retry=Retry(NoBackoff(), 0))
        self._scripts = {name: self._redis.register_script(_PRELUDE + source) for name, source in (
            ("create", _CREATE), ("use", _USE), ("release", _RELEASE), ("append", _APPEND),
            ("revision", _REVISION), ("keep_result", _KEEP_RESULT), ("delete", _DELETE), ("expire", _EXPIRE),
            ("make_room", _MAKE_ROOM), ("has_room", _HAS_ROOM))}
        self._cache: OrderedDict[str, _Cached] = OrderedDict()
        self._cache_lock = threading.Lock()
        with self.talking():
            self._redis.ping()

    # -- talking to Redis ----------------------------------------------------------------------------------------
    @contextmanager
    def talking(self) -> Iterator[None]:
        """Redis failures as the service's 503 (`store_unavailable`; `store_full` when Redis is at maxmemory)."""
        try:
            yield
        except self._errors as exc:
            text = str(exc)
            if text.startswith("OOM"):
                raise ServiceError(503, "store_full",
                                   f"the session store ({self.where}) is at its maxmemory and refused the write "
                                   f"({text}); delete finished sessions, or give Redis more memory",
                                   headers={"Retry-After": "5"}) from None
            raise ServiceError(503, "store_unavailable",
                               f"the session store ({self.where}) cannot be reached or failed "
                               f"({exc.__class__.__name__}: {text}); retry (a batch with its Idempotency-Key: it is "
                               "applied once even if this attempt reached Redis)",
                               headers={"Retry-After": "1"}) from None

    def run(self, name: str, *args: Any) -> Any:
        with self.talking():
            return self._scripts[name](args=[self.prefix, *args])

    def key(self, session_id: str, part: str = "") -> str:
        return f"{self.prefix}s:{session_id}{part}"

    def _removed(self, reason: str, count: int) -> None:
        for _ in range(int(count)):
            self._on_remove(reason)

    # -- the store -----------------------------------------------------------------------------------------------
    def __len__(self) -> int:
        """Live sessions of every replica (-1 when Redis cannot be reached: the process itself is fine)."""
        try:
            return int(self._redis.zcard(self.prefix + "live"))
        except self._errors:
            return -1

    def create(self, context: ExecutionContext, context_bytes: int) -> str:
        session_id = uuid.uuid4().hex
        answer = self.run("create", session_id, context.model_dump_json(), self.engine.catalog.content_hash,
                          datetime.now(UTC).isoformat(), self.limits.max_sessions, _ms(self.limits.min_idle_s),
                          _ms(self.limits.ttl_s), context_bytes)
        if answer[0] == b"full":
            self._removed("expired", answer[2])
            raise too_many_sessions(int(answer[1]), self.limits)
        self._removed("expired", answer[1])
        self._removed("evicted", answer[2])
        return session_id

    @contextmanager
    def use(self, session_id: str) -> Iterator[SessionHandle]:
        answer = self.run("use", session_id, _ms(self.limits.ttl_s))
        if not answer[0]:
            if len(answer) > 2:
                self._removed("expired", 1)
            self._forget(session_id)
            raise SessionNotFound(session_id, answer[1].decode() or None)
        try:
            catalog = answer[1].decode()
            if catalog != self.engine.catalog.content_hash:
                raise ServiceError(409, "catalog_mismatch",
                                   f"session {session_id!r} was created by a replica running rule catalog {catalog}; "
                                   f"this replica runs {self.engine.catalog.content_hash}: run every replica with the "
                                   "same firstfault version and rules")
            yield RedisSession(self, session_id, self._context(session_id))
        finally:
            try:
                self.run("release", session_id)
            except ServiceError as exc:  # the lease lets the session go in the end
                log.warning("a session's in-use mark was not cleared", extra={"session_id": session_id,
                                                                                "error": exc.message})

    def delete(self, session_id: str) -> None:
        answer = self.run("delete", session_id)
        self._forget(session_id)
        if not answer[0]:
            raise SessionNotFound(session_id, answer[1].decode() or None)
        self._on_remove("deleted")

    def expire(self) -> int:
        expired = int(self.run("expire", _ms(self.limits.ttl_s)))
        self._removed("expired", expired)
        return expired

    def make_room(self, budget: int) -> bool:
        done, evicted = self.run("make_room", budget, _ms(self.limits.min_idle_s), "1")
        self._removed("evicted", evicted)
        return bool(done)

    def has_budget(self, budget: int) -> bool:
        return bool(self.run("make_room", budget, _ms(self.limits.min_idle_s), "0")[0])

    def has_room(self) -> bool:
        return bool(self.run("has_room", self.limits.max_sessions, _ms(self.limits.min_idle_s)))

    def retained_bytes(self) -> int:
        """Bytes the live sessions hold in Redis (-1 when it cannot be reached)."""
        try:
            return int(self._redis.get(self.prefix + "bytes") or 0)
        except self._errors:
            return -1

    def event_keys(self) -> int:
        with self._cache_lock:
            cached = list(self._cache.values())
        return sum(c.session.event_keys() for c in cached)

    def close(self) -> None:
        self._redis.close()

    # -- this replica's cache of merged sessions -----------------------------------------------------------------
    def _context(self, session_id: str) -> ExecutionContext:
        with self._cache_lock:
            cached = self._cache.get(session_id)
        if cached is not None:
            return cached.session.context
        with self.talking():
            raw = self._redis.hget(self.key(session_id), "context")
        if raw is None:
            raise SessionNotFound(session_id)
        return ExecutionContext.model_validate_json(raw)

    def _forget(self, session_id: str) -> None:
        with self._cache_lock:
            self._cache.pop(session_id, None)

    def cached(self, session_id: str, context: ExecutionContext) -> _Cached:
        with self._cache_lock:
            entry = self._cache.get(session_id)
            if entry is None:
                entry = self._cache[session_id] = _Cached(self.engine.session(context))
            self._cache.move_to_end(session_id)
            return entry

    def sync(self, session_id: str, entry: _Cached) -> None:
        """Merge the batches appended since `entry` was last brought up to date (its lock held)."""
        with self.talking():
            pipe = self._redis.pipeline(transaction=True)
            pipe.llen(self.key(session_id, ":b"))
            pipe.lrange(self.key(session_id, ":b"), entry.position, -1)
            length, entries = pipe.execute()
            if length < entry.position:  # Redis holds fewer batches than were merged here (it lost some): start over
                log.warning("the session store holds fewer batches than this replica read; merging them again",
                            extra={"session_id": session_id})
                entry.session, entry.position, entry.retained = self.engine.session(entry.session.context), 0, 0
                entry.streams.clear()
                entries = self._redis.lrange(self.key(session_id, ":b"), 0, -1)
        for raw in entries:
            head, _, body = raw.partition(b"\n")
            try:
                state = decode_state(body, self.engine.catalog.content_hash, self.engine.params)
            except StateMismatch as exc:
                raise ServiceError(409, "catalog_mismatch", f"session {session_id!r}: {exc}") from None
            except StateFormatError as exc:
                raise ServiceError(500, "unreadable_session_state", f"session {session_id!r}: {exc}") from None
            self._merge(entry, state, IngestAck.model_validate_json(head))
        self._trim_cache(session_id)

    def absorb(self, session_id: str, state: IngestState, ack: IngestAck) -> None:
        """Merge the state of a batch this replica just appended into its copy, when that copy holds every batch
        before it and is free (else the next `sync` reads it from Redis): no round trip for one's own batches."""
        with self._cache_lock:
            entry = self._cache.get(session_id)
        if entry is None or not entry.lock.acquire(blocking=False):
            return
        try:
            if ack.batch == entry.position + 1:
                self._merge(entry, state, ack)
        finally:
            entry.lock.release()

    def _merge(self, entry: _Cached, state: IngestState, ack: IngestAck) -> None:
        before = entry.session.event_keys()
        entry.session.merge_state(state)
        entry.retained += batch_bytes(state, entry.session.event_keys() - before, entry.streams)
        entry.position += 1
        entry.computed_from = ComputedFrom(observations=ack.observations_total, bytes=ack.bytes_total,
                                           batches=entry.position)

    def _trim_cache(self, keep: str) -> None:
        """Drop the least recently used merged sessions while this replica's copies exceed the memory budget."""
        with self._cache_lock:
            total = sum(c.retained for c in self._cache.values())
            for session_id in list(self._cache):
                if total < self._budget:
                    break
                if session_id != keep:
                    total -= self._cache.pop(session_id).retained


class RedisSession(SessionHandle):
    """One session of a `RedisSessionStore`, in use for the duration of a request."""

    def __init__(self, store: RedisSessionStore, session_id: str, context: ExecutionContext) -> None:
        self.store = store
        self.id = session_id
        self.context = context

    def replay(self, key: str, fingerprint: str) -> IngestAck | None:
        with self.store.talking():
            record = self.store._redis.hget(self.store.key(self.id, ":k"), key)
        return None if record is None else _replayed(key, fingerprint, record)

    @contextmanager
    def base(self) -> Iterator[tuple[Session, int]]:
        entry = self.store.cached(self.id, self.context)
        with entry.lock:
            self.store.sync(self.id, entry)
            position = entry.position
        yield entry.session, position

    def append(self, state: IngestState, counts: BatchCounts, key: str | None, fingerprint: str,
               position: int) -> IngestAck:
        store = self.store
        data = encode_state(state, store.engine.catalog.content_hash, store.engine.params)
        # A state that left issues out at its cap merges exactly only into the session it was read against.
        answer = store.run("append", self.id, key or "", fingerprint, data, counts.observations, counts.nbytes,
                           counts.truncated_lines, position, "1" if state.issues_dropped else "0",
                           store.limits.max_observations, store.limits.max_bytes, store.limits.idempotency_keys)
        status = answer[0].decode()
        if status == "ok":
            ack = IngestAck.model_validate_json(answer[1])
            store.absorb(self.id, state, ack)
            return ack
        if status == "replay":
            return _replayed(key or "", fingerprint, answer[1])
        if status == "stale":
            raise StaleBase("another batch of the session was applied since this one was read")
        if status == "gone":
            raise SessionNotFound(self.id, answer[1].decode() or None)
        check_room(ComputedFrom(observations=int(answer[1]), bytes=int(answer[2]), batches=0), counts, store.limits)
        raise AssertionError(f"unexpected answer {answer!r} from the append script")

    @contextmanager
    def merged(self) -> Iterator[tuple[Session, ComputedFrom]]:
        entry = self.store.cached(self.id, self.context)
        with entry.lock:
            self.store.sync(self.id, entry)
            yield entry.session, entry.computed_from

    def new_revision(self) -> int:
        revision = int(self.store.run("revision", self.id))
        if revision < 0:
            raise SessionNotFound(self.id, "deleted while its result was computed")
        return revision

    def keep_result(self, response: AttributeResponse, body: bytes) -> None:
        self.store.run("keep_result", self.id, response.revision, body)

    def last_result(self) -> AttributeResponse | None:
        with self.store.talking():
            body = self.store._redis.get(self.store.key(self.id, ":r"))
        return None if body is None else AttributeResponse.model_validate_json(body)

    def describe(self) -> SessionState:
        store = self.store
        with store.talking():
            pipe = store._redis.pipeline(transaction=True)
            pipe.hgetall(store.key(self.id))
            pipe.zscore(store.prefix + "live", self.id)
            meta, seen = pipe.execute()
        if not meta:
            raise SessionNotFound(self.id)
        last = self.last_result()
        return SessionState(session_id=self.id, context=self.context,
                            created_at=datetime.fromisoformat(meta[b"created"].decode()),
                            last_activity=datetime.fromtimestamp((seen or 0) / 1000, UTC),
                            observations=int(meta[b"observations"]), bytes=int(meta[b"bytes"]),
                            batches=int(meta[b"batches"]), revision=int(meta[b"revision"]),
                            last_result=last.result if last else None, truncated_lines=int(meta[b"truncated"]))


def _replayed(key: str, fingerprint: str, record: bytes | str) -> IngestAck:
    stored, _, ack = (record.encode() if isinstance(record, str) else record).partition(b"\n")
    if stored.decode() != fingerprint:
        raise idempotency_conflict(key)
    return IngestAck.model_validate_json(ack).model_copy(update={"replayed": True})


def _ms(seconds: float) -> int:
    return int(seconds * 1000)


def _redacted(url: str) -> str:
    """The URL without its password (it names the store in errors and logs)."""
    parts = urlsplit(url)
    if parts.password is None:
        return url
    return url.replace(f":{parts.password}@", ":***@", 1)
