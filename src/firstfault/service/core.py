"""The typed core of the service: sessions, ingest, attribution. No HTTP here; v2 and v1 routes call it.

Every method is blocking (the engine is CPU work); the HTTP layer runs them in a worker thread.

A batch is applied all or nothing: it is read into a trial session of its own first, and only a batch read
whole is merged into the real session (`Session.merge_state`, exact). A batch the engine fails on leaves the
session as it was, so a retry with the same Idempotency-Key is never counted twice.
"""

from __future__ import annotations

import logging
import time

import anyio
import pydantic_core

from firstfault.engine.engine import Engine
from firstfault.engine.ingest import IngestState
from firstfault.engine.model import ExecutionContext
from firstfault.engine.session import Session
from firstfault.errors import ServiceError
from firstfault.service.memory import RESULT_JSON_FACTOR, deep_size, event_bytes, stream_bytes
from firstfault.service.metrics import ServiceMetrics
from firstfault.service.schemas import (
    AttributeResponse,
    ExtractorView,
    IngestAck,
    PythonRuleView,
    RulesView,
    SessionState,
    SymptomDefView,
)
from firstfault.service.sessions import SessionRecord, SessionStore, StoreLimits
from firstfault.service.settings import Settings
from firstfault.wire import ObservationBatch, PreparedBatch, prepare

log = logging.getLogger("firstfault.service")


class AttributionService:
    def __init__(self, engine: Engine, settings: Settings) -> None:
        self.engine = engine
        self.settings = settings
        self.store = SessionStore(StoreLimits(
            max_sessions=settings.max_sessions, ttl_s=settings.session_ttl_s,
            min_idle_s=settings.session_min_idle_s, max_observations=settings.max_session_observations,
            max_bytes=settings.max_session_bytes, idempotency_keys=settings.idempotency_keys),
            on_remove=self._removed)
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
    def create_session(self, context: ExecutionContext) -> SessionRecord:
        size = deep_size(context)
        if size > self.settings.max_context_bytes:
            raise ServiceError(413, "context_too_large",
                               f"this context would hold about {size} bytes, over the cap of "
                               f"{self.settings.max_context_bytes} (FIRSTFAULT_MAX_CONTEXT_BYTES): fewer nodes or "
                               "shorter metadata")
        self._make_room()
        record = self.store.create(context, self.engine.session(context))
        record.retained += size
        self.metrics.sessions_created.inc()
        return record

    def describe(self, session_id: str) -> SessionState:
        with self.store.use(session_id) as rec:
            last = rec.last_result.result if rec.last_result else None
            return SessionState(session_id=rec.id, context=rec.context, created_at=rec.created_at,
                                last_activity=rec.last_activity, observations=rec.observations, bytes=rec.bytes,
                                batches=rec.batches, revision=rec.revision, last_result=last,
                                truncated_lines=rec.truncated_lines)

    def delete(self, session_id: str) -> None:
        self.store.delete(session_id)

    # -- ingest ------------------------------------------------------------------------------------------------
    def ingest(self, session_id: str, batch: ObservationBatch, idempotency_key: str | None = None,
               fingerprint: str = "") -> IngestAck:
        """Add one batch. With an idempotency key, a retry of an ingested batch returns the first answer."""
        with self.store.use(session_id) as rec:
            if idempotency_key is None:
                return self._ingest(rec, batch)
            earlier = rec.idempotency.begin(idempotency_key, fingerprint)
            if earlier is not None:
                return earlier
            try:
                ack = self._ingest(rec, batch)
            except BaseException:
                rec.idempotency.abandon(idempotency_key)
                raise
            rec.idempotency.finish(idempotency_key, ack)
            return ack

    def _ingest(self, rec: SessionRecord, batch: ObservationBatch) -> IngestAck:
        prepared = prepare(batch, self.settings.max_line_bytes)
        self._make_room()
        trial = self._trial(rec, prepared)
        state = trial.export_state()
        _check_writable(state)
        if state.dropped_keys:
            raise ServiceError(413, "batch_event_limit",
                               f"this batch alone holds more than {self.engine.params.max_event_keys} distinct "
                               "events; send it in smaller batches")
        per_event = event_bytes(state)
        with rec.work:
            rec.check_room(prepared.count, prepared.nbytes, self.store.limits)
            before = rec.engine.event_keys()
            rec.engine.merge_state(state)
            _commit_reader_state(trial, rec.engine)
            rec.retained += round(per_event * (rec.engine.event_keys() - before)) + _new_stream_bytes(rec, state)
            ack = rec.add_batch(prepared.count, prepared.nbytes, prepared.truncated_lines)
        self.metrics.ingested(prepared.format, prepared.count, prepared.nbytes, prepared.truncated_lines)
        return ack

    def _trial(self, rec: SessionRecord, prepared: PreparedBatch) -> Session:
        """The batch read into a session of its own (the real one untouched); 422 when the engine fails on it."""
        trial = self.engine.session(rec.context)
        _fork_reader_state(rec.engine, trial)
        try:
            prepared.apply(trial)
        except Exception as exc:
            log.error("a batch the engine could not read was refused", exc_info=exc, extra={"session_id": rec.id})
            raise ServiceError(422, "unreadable_batch",
                               f"the engine could not read this batch ({exc.__class__.__name__}: {exc}); nothing "
                               "of it was taken") from None
        return trial

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
        with self.store.use(session_id) as rec, rec.work:
            return self._attribute(rec)

    def current_result(self, session_id: str) -> AttributeResponse:
        """The last result if no evidence arrived since it was computed, else a new one (v1 semantics)."""
        with self.store.use(session_id) as rec, rec.work:
            last = rec.last_result
            if last is not None and last.computed_from == rec.computed_from():
                return last
            return self._attribute(rec)[0]

    def _attribute(self, rec: SessionRecord) -> tuple[AttributeResponse, bytes]:
        """A new result and its JSON, the result kept as the session's last one. A result the engine cannot
        compute or that cannot be written as JSON is refused (422) and not kept: the session stays readable."""
        started = time.perf_counter()
        try:
            result = rec.engine.attribute()
            # model_construct: the result is the engine's validated model; validating it again is one long call
            # holding the interpreter lock (tens of ms at 10,000 nodes) while the event loop waits.
            response = AttributeResponse.model_construct(session_id=rec.id, revision=rec.revision + 1,
                                                         computed_from=rec.computed_from(), result=result)
            body = response.model_dump_json().encode()
        except Exception as exc:
            log.error("attribution failed", exc_info=exc, extra={"session_id": rec.id})
            raise ServiceError(422, "unattributable_evidence",
                               f"the engine could not attribute this session's evidence ({exc.__class__.__name__}: "
                               f"{exc}); its earlier results are kept") from None
        self.metrics.attributed(result, time.perf_counter() - started)
        rec.revision += 1
        rec.keep_result(response, len(body) * RESULT_JSON_FACTOR)
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


def _new_stream_bytes(rec: SessionRecord, state: IngestState) -> int:
    """Bytes of the stream counters `state` adds to the session (streams it did not hold yet), now noted as held."""
    added = 0
    for key, _observations, _nbytes, origins in state.stats:
        if key not in rec.streams:
            rec.streams.add(key)
            added += stream_bytes(key, origins)
    return added


def _fork_reader_state(session: Session, trial: Session) -> None:
    """Give the trial session the real one's memory of streams already reported out of time order (each is
    reported once per session), as a copy: a batch that fails must not change it."""
    trial.reader._out_of_order = set(session.reader._out_of_order)


def _commit_reader_state(trial: Session, session: Session) -> None:
    session.reader._out_of_order |= trial.reader._out_of_order
