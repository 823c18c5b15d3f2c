"""The typed core of the service: sessions, ingest, attribution. No HTTP here; v2 and v1 routes call it.

Every method is blocking (the engine is CPU work); the HTTP layer runs them in a worker thread.
"""

from __future__ import annotations

import time

from firstfault.engine.engine import Engine
from firstfault.engine.model import ExecutionContext
from firstfault.errors import ServiceError
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
from firstfault.wire import ObservationBatch, prepare


class AttributionService:
    def __init__(self, engine: Engine, settings: Settings) -> None:
        self.engine = engine
        self.settings = settings
        self.store = SessionStore(StoreLimits(
            max_sessions=settings.max_sessions, ttl_s=settings.session_ttl_s,
            min_idle_s=settings.session_min_idle_s, max_observations=settings.max_session_observations,
            max_bytes=settings.max_session_bytes, idempotency_keys=settings.idempotency_keys),
            on_remove=self._removed)
        self.metrics = ServiceMetrics(engine.catalog.content_hash, lambda: len(self.store), self.store.event_keys)

    @property
    def catalog_hash(self) -> str:
        return self.engine.catalog.content_hash

    def _removed(self, reason: str) -> None:
        self.metrics.sessions_removed.labels(reason=reason).inc()

    # -- sessions ----------------------------------------------------------------------------------------------
    def create_session(self, context: ExecutionContext) -> SessionRecord:
        record = self.store.create(context, self.engine.session(context))
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
        if not self.store.make_room(self.settings.max_event_keys):
            raise ServiceError(503, "memory_budget",
                               f"the live sessions hold {self.settings.max_event_keys} or more coalesced events "
                               "(FIRSTFAULT_MAX_EVENT_KEYS) and none is idle enough to evict; delete finished "
                               "sessions, or retry later", headers={"Retry-After": str(max(1, int(
                                   self.settings.session_min_idle_s)))})
        with rec.work:
            rec.check_room(prepared.count, prepared.nbytes, self.store.limits)
            prepared.apply(rec.engine)
            ack = rec.add_batch(prepared.count, prepared.nbytes, prepared.truncated_lines)
        self.metrics.ingested(prepared.format, prepared.count, prepared.nbytes, prepared.truncated_lines)
        return ack

    # -- attribution -------------------------------------------------------------------------------------------
    def attribute(self, session_id: str) -> AttributeResponse:
        """A new result from everything ingested so far (revision 1, 2, ... per call)."""
        with self.store.use(session_id) as rec, rec.work:
            return self._attribute(rec)

    def current_result(self, session_id: str) -> AttributeResponse:
        """The last result if no evidence arrived since it was computed, else a new one (v1 semantics)."""
        with self.store.use(session_id) as rec, rec.work:
            last = rec.last_result
            if last is not None and last.computed_from == rec.computed_from():
                return last
            return self._attribute(rec)

    def _attribute(self, rec: SessionRecord) -> AttributeResponse:
        started = time.perf_counter()
        result = rec.engine.attribute()
        self.metrics.attributed(result, time.perf_counter() - started)
        rec.revision += 1
        response = AttributeResponse(session_id=rec.id, revision=rec.revision, computed_from=rec.computed_from(),
                                     result=result)
        rec.last_result = response
        return response

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
