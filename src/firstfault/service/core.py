"""The typed core of the service: sessions, ingest, attribution. No HTTP here; v2 and v1 routes call it.

Every method is blocking (the engine is CPU work); the HTTP layer runs them in a worker thread.

A batch is applied all or nothing: it is read into a trial session of its own first (forked from the session,
`Session.fork`), and only a batch read whole is added to the session, as its ingest state, together with its
Idempotency-Key record (service/store.py; merging the states in batch order is exact, engine/ingest.py). A batch
the engine fails on leaves the session as it was, so a retry with the same Idempotency-Key is never counted twice.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable

import anyio
import pydantic_core

from firstfault.engine.engine import Engine
from firstfault.engine.ingest import IngestState
from firstfault.engine.model import ExecutionContext
from firstfault.engine.session import Session
from firstfault.errors import ServiceError
from firstfault.service.memory import deep_size
from firstfault.service.metrics import ServiceMetrics
from firstfault.service.schemas import (
    AttributeResponse,
    ComputedFrom,
    ExtractorView,
    IngestAck,
    PythonRuleView,
    RulesView,
    SessionState,
    SymptomDefView,
)
from firstfault.service.sessions import MemorySessionStore
from firstfault.service.settings import Settings
from firstfault.service.store import BatchCounts, SessionHandle, SessionStore, StaleBase, StoreLimits
from firstfault.wire import ObservationBatch, PreparedBatch, prepare

log = logging.getLogger("firstfault.service")
# A batch whose state cannot be merged exactly into a session that changed while it was read is read again, at
# most this many times (it only happens to batches with more coverage issues than a session keeps).
_STALE_READS = 8


class AttributionService:
    def __init__(self, engine: Engine, settings: Settings) -> None:
        self.engine = engine
        self.settings = settings
        self.store = _open_store(engine, settings, self._removed)
        # Attributions run in at most this many worker threads: more would contend with the event loop for the
        # GIL and slow every other request (healthz included), for no more throughput.
        self.attribution_slots = anyio.CapacityLimiter(settings.attribution_threads)
        self.metrics = ServiceMetrics(engine.catalog.content_hash, lambda: len(self.store), self.store.event_keys,
                                      self.store.retained_bytes)

    @property
    def catalog_hash(self) -> str:
        return self.engine.catalog.content_hash

    def _removed(self, reason: str) -> None:
        self.metrics.sessions_removed.labels(reason=reason).inc()

    # -- sessions ----------------------------------------------------------------------------------------------
    def create_session(self, context: ExecutionContext) -> str:
        size = deep_size(context)
        if size > self.settings.max_context_bytes:
            raise ServiceError(413, "context_too_large",
                               f"this context would hold about {size} bytes, over the cap of "
                               f"{self.settings.max_context_bytes} (FIRSTFAULT_MAX_CONTEXT_BYTES): fewer nodes or "
                               "shorter metadata")
        self._make_room()
        session_id = self.store.create(context, size)
        self.metrics.sessions_created.inc()
        return session_id

    def describe(self, session_id: str) -> SessionState:
        with self.store.use(session_id) as handle:
            return handle.describe()

    def delete(self, session_id: str) -> None:
        self.store.delete(session_id)

    # -- ingest ------------------------------------------------------------------------------------------------
    def ingest(self, session_id: str, batch: ObservationBatch, idempotency_key: str | None = None,
               fingerprint: str = "") -> IngestAck:
        """Add one batch. With an idempotency key, a retry of an ingested batch returns the first answer (a retry
        that arrives while the first attempt runs reads the batch too; only one of them is applied)."""
        with self.store.use(session_id) as handle:
            if idempotency_key is not None and (earlier := handle.replay(idempotency_key, fingerprint)) is not None:
                return earlier
            prepared = prepare(batch, self.settings.max_line_bytes)
            self._make_room()
            for _ in range(_STALE_READS):
                with handle.base() as (base, position):
                    trial, count = self._trial(handle, base, prepared)
                counts = BatchCounts(count, prepared.nbytes, prepared.truncated_lines)
                state = trial.export_state()
                _check_writable(state)
                if state.dropped_keys:
                    raise ServiceError(413, "batch_event_limit",
                                       f"this batch alone holds more than {self.engine.params.max_event_keys} "
                                       "distinct events, more than one session keeps; nothing of it was taken: send "
                                       "it in smaller batches")
                try:
                    ack = handle.append(state, counts, idempotency_key, fingerprint, position)
                    break
                except StaleBase:
                    continue  # another batch of the session was applied meanwhile: read this one against it
            else:
                raise ServiceError(503, "session_contended",
                                   f"other batches of this session were applied while this one was read, "
                                   f"{_STALE_READS} times; nothing of it was taken: retry it",
                                   headers={"Retry-After": "1"})
        if not ack.replayed:
            self.metrics.ingested(prepared.format, counts.observations, prepared.nbytes, prepared.truncated_lines)
        return ack

    def _trial(self, handle: SessionHandle, base: Session, prepared: PreparedBatch) -> tuple[Session, int]:
        """The batch read into a session of its own (the real one untouched), and the observations it held; 422
        when the engine fails on it."""
        trial = self.engine.session(handle.context)
        trial.fork(base)
        try:
            count = prepared.apply(trial)
        except Exception as exc:
            log.error("a batch the engine could not read was refused", exc_info=exc,
                      extra={"session_id": handle.id})
            raise ServiceError(422, "unreadable_batch",
                               f"the engine could not read this batch ({exc.__class__.__name__}: {exc}); nothing "
                               "of it was taken") from None
        return trial, count

    def _make_room(self) -> None:
        """Evict idle sessions until the live ones hold less than the memory budget, else refuse (503)."""
        budget = self.settings.memory_budget_bytes
        if not self.store.make_room(budget):
            raise ServiceError(503, "memory_budget",
                               f"the live sessions hold about {self.store.retained_bytes()} bytes, at or over the "
                               f"memory budget of {budget} (FIRSTFAULT_MEMORY_BUDGET_BYTES), and none is idle "
                               "enough to evict; delete finished sessions, or retry later",
                               headers={"Retry-After": str(max(1, int(self.settings.session_min_idle_s)))})

    # -- attribution -------------------------------------------------------------------------------------------
    def attribute(self, session_id: str) -> AttributeResponse:
        """A new result from everything ingested so far (revision 1, 2, ... per call)."""
        return self.attribute_json(session_id)[0]

    def attribute_json(self, session_id: str) -> tuple[AttributeResponse, bytes]:
        """`attribute()`, with the result's JSON (written once: the v2 route sends these bytes)."""
        with self.store.use(session_id) as handle, handle.merged() as (session, computed_from):
            return self._attribute(handle, session, computed_from)

    def current_result(self, session_id: str) -> AttributeResponse:
        """The last result if no evidence arrived since it was computed, else a new one (v1 semantics)."""
        with self.store.use(session_id) as handle, handle.merged() as (session, computed_from):
            last = handle.last_result()
            if last is not None and last.computed_from == computed_from:
                return last
            return self._attribute(handle, session, computed_from)[0]

    def _attribute(self, handle: SessionHandle, session: Session,
                   computed_from: ComputedFrom) -> tuple[AttributeResponse, bytes]:
        """A new result and its JSON, the result kept as the session's last one. A result the engine cannot
        compute or that cannot be written as JSON is refused (422) and not kept: the session stays readable."""
        started = time.perf_counter()
        try:
            result = session.attribute()
            result_json = result.model_dump_json().encode()
        except Exception as exc:
            log.error("attribution failed", exc_info=exc, extra={"session_id": handle.id})
            raise ServiceError(422, "unattributable_evidence",
                               f"the engine could not attribute this session's evidence ({exc.__class__.__name__}: "
                               f"{exc}); its earlier results are kept") from None
        # model_construct: the result is the engine's validated model; validating it again is one long call
        # holding the interpreter lock (tens of ms at 10,000 nodes) while the event loop waits.
        response = AttributeResponse.model_construct(session_id=handle.id, revision=handle.new_revision(),
                                                     computed_from=computed_from, result=result)
        body = response_json(response, result_json)
        self.metrics.attributed(result, time.perf_counter() - started)
        handle.keep_result(response, body)
        return response, body

    # -- catalog -----------------------------------------------------------------------------------------------
    def rules(self) -> RulesView:
        catalog = self.engine.catalog
        return RulesView(
            content_hash=catalog.content_hash,
            files=list(catalog.files),
            symptoms=[SymptomDefView(name=s.name, sub_domain=s.sub_domain.value, outcome=s.outcome.value,
                                     role=s.role, blame=s.blame, doc=s.doc) for s in catalog.symptoms.values()],
            extractors=[ExtractorView(name=e.name, sources=[s.value for s in e.sources], emits=e.emit_type,
                                      symptom=e.symptom or e.fact, match_re=e.match_re, doc=e.doc, file=e.origin)
                        for e in catalog.extractors],
            python_rules=[PythonRuleView(name=r.name, kind=r.kind, phase=r.phase.name, module=r.module, doc=r.doc)
                          for r in catalog.python_rules],
            metric_extractors=[m.name for m in catalog.metric_extractors],
        )


def _check_writable(state: IngestState) -> None:
    """Refuse (422) evidence that no result could carry: a string that is not valid Unicode (a lone surrogate),
    which would make every later result of the session fail to be written as JSON."""
    try:
        pydantic_core.to_json([state.accs, state.stats, state.issues, state.notes])
    except pydantic_core.PydanticSerializationError as exc:
        raise ServiceError(422, "unreadable_batch", f"this batch holds text that cannot be written as JSON ({exc}); "
                                                    "nothing of it was taken") from None


def response_json(response: AttributeResponse, result_json: bytes) -> bytes:
    """`response.model_dump_json()`, its result already written as `result_json` (written once, checked before
    the response took a revision)."""
    head = pydantic_core.to_json({"session_id": response.session_id, "revision": response.revision,
                                  "computed_from": response.computed_from})
    return head[:-1] + b',"result":' + result_json + b"}"


def _open_store(engine: Engine, settings: Settings, on_remove: Callable[[str], None]) -> SessionStore:
    """The store `settings.store` names: in memory (the default) or Redis (the `redis` extra)."""
    limits = StoreLimits(max_sessions=settings.max_sessions, ttl_s=settings.session_ttl_s,
                         min_idle_s=settings.session_min_idle_s, max_observations=settings.max_session_observations,
                         max_bytes=settings.max_session_bytes, idempotency_keys=settings.idempotency_keys)
    if not settings.store or settings.store == "memory":
        return MemorySessionStore(engine, limits, on_remove)
    from firstfault.service.redis_store import RedisSessionStore

    return RedisSessionStore(settings.store, engine, limits, settings.memory_budget_bytes, on_remove)
