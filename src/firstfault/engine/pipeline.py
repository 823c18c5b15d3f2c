"""The ordered phases of one attribution run, from accumulated events to the result."""

from __future__ import annotations

import gc
import threading
from typing import TYPE_CHECKING

from firstfault.engine.history import count_history
from firstfault.engine.model import (
    SUBDOMAIN_OUTCOME,
    Attribution,
    Candidate,
    Confidence,
    Coverage,
    CulpritNode,
    EventType,
    Evidence,
    HistoryCoverage,
    NextAction,
    Outcome,
    RootCause,
    SourceCoverage,
    SourceKind,
    Status,
    SubDomain,
    SymptomView,
    TerminalState,
    WorkloadRef,
    recorded_state,
)
from firstfault.engine.rules_api import Phase
from firstfault.engine.workspace import Workspace, WorkSymptom

if TYPE_CHECKING:
    from firstfault.engine.session import Session

_LOG_SOURCES = (SourceKind.APPLOG, SourceKind.SYSLOG)


def _canonical_node(node: str | None, allocation: dict[str, str]) -> str | None:
    if node is None or not allocation:
        return node
    if node in allocation:
        return node
    return allocation.get(node.split(".")[0])


def _trace_extraction(ws: Workspace) -> None:
    """One trace entry per extractor and symptom: what the scan found (lines, nodes), before any filter ran."""
    found: dict[tuple[str, str, str], tuple[int, set[str]]] = {}
    for event in ws.events:
        key = (event.rule, event.type, event.symptom or "")
        count, nodes = found.get(key, (0, set()))
        if event.node:
            nodes.add(event.node)
        found[key] = (count + event.count, nodes)
    ws.phase = Phase.EXTRACTION.name
    for (rule, event_type, symptom), (count, nodes) in sorted(found.items()):
        ws.rule = rule
        where = ", ".join(sorted(nodes)[:8]) + (f" (+{len(nodes) - 8} nodes)" if len(nodes) > 8 else "")
        ws.note("extract", f"{count} line(s) -> {event_type} {symptom}".rstrip() + (f" on {where}" if where else ""),
                symptom=symptom or None)


def _materialise(ws: Workspace) -> list[str]:
    """Events -> per-node symptoms. Returns the nodes that reported but are outside the allocation."""
    allocation = {n: n for n in ws.context.nodes}
    allocation.update({n.split(".")[0]: n for n in ws.context.nodes})
    outside: set[str] = set()
    by_key: dict[tuple[str | None, str], WorkSymptom] = {}
    for event in ws.events:
        node = _canonical_node(event.node, allocation)
        if event.node is not None and node is None:
            outside.add(event.node)
            continue
        if event.type.startswith(EventType.CONTEXT):
            ws.context_events.append(event if node == event.node else event.model_copy(update={"node": node}))
            continue
        if event.type not in (EventType.NODE_BAD, EventType.NODE_INTERESTING) or not event.symptom:
            continue
        status: Status = "bad" if event.type == EventType.NODE_BAD else "interesting"
        key = (node, event.symptom)
        existing = by_key.get(key)
        if existing is None:
            by_key[key] = WorkSymptom(
                node=node, name=event.symptom, definition=ws.catalog.symptom(event.symptom), status=status,
                first_time=event.time, last_time=event.last_time, count=event.count, evidence=[event.evidence],
                attributes=dict(event.attributes), values={k: list(v) for k, v in event.values.items()},
                rule=event.rule)
            continue
        existing.count += event.count
        if status == "bad":
            existing.status = "bad"
        if event.time is not None and (existing.first_time is None or event.time < existing.first_time):
            existing.first_time = event.time
            existing.attributes = {**event.attributes, **existing.attributes}
        if event.last_time is not None and (existing.last_time is None or event.last_time > existing.last_time):
            existing.last_time = event.last_time
        if len(existing.evidence) < 3 and all(e.text != event.evidence.text for e in existing.evidence):
            existing.evidence.append(event.evidence)
        for k, vals in event.values.items():
            merged = set(existing.values.get(k, [])) | set(vals)
            existing.values[k] = sorted(merged)[: ws.params.max_values_per_attribute]
    ws.symptoms = sorted(by_key.values(), key=WorkSymptom.sort_key)
    for s in ws.symptoms:
        s.evidence.sort(key=lambda e: (e.time is None, e.time.timestamp() if e.time else 0.0,
                                       e.provenance.origin, e.provenance.line or 0))
    ws.phase, ws.rule = Phase.MATERIALIZE.name, "Materialise"
    ws.note("materialise", f"{len(ws.symptoms)} node symptoms from {len(ws.events)} events "
            f"({sum(1 for s in ws.symptoms if s.active)} bad)")
    if outside:
        ws.note("drop", f"evidence from nodes outside the allocation ignored: {', '.join(sorted(outside))}")
    return sorted(outside)


def _run_rules(ws: Workspace, phase: Phase) -> None:
    for rule in ws.catalog.rules_in(phase):
        ws.phase, ws.rule = phase.name, rule.name
        rule.func(ws)


def _outcome(ws: Workspace) -> tuple[SubDomain, Outcome, TerminalState]:
    decision = ws.decision
    sub_domain = decision.sub_domain or SubDomain.UNKNOWN
    if decision.root and sub_domain not in (SubDomain.AMBIGUOUS, SubDomain.UNKNOWN):
        outcome = decision.root[0].definition.outcome
    else:
        outcome = SUBDOMAIN_OUTCOME[sub_domain]
    terminal = decision.terminal_state or recorded_state(ws.context)
    return sub_domain, outcome, terminal


def _symptom_view(s: WorkSymptom) -> SymptomView:
    return SymptomView(node=s.node, symptom=s.name, status=s.status, role=s.role, sub_domain=s.sub_domain,
                       first_time=s.first_time, last_time=s.last_time, count=s.count, evidence=s.evidence,
                       attributes={k: s.attributes[k] for k in sorted(s.attributes)}, rule=s.rule,
                       demoted_by=s.demoted_by, reason=s.reason)


def _first_value(symptoms: list[WorkSymptom], key: str) -> str | None:
    for s in symptoms:
        value = s.attributes.get(key)
        if value not in (None, ""):
            return str(value)
    return None


def _root_evidence(root: list[WorkSymptom], corroborating: list[WorkSymptom], limit: int = 6) -> list[Evidence]:
    """The root group's evidence lines first, then later reports of the same fault on the same node."""
    cited = [e for s in root for e in s.evidence]
    extra = [s.evidence[0] for s in corroborating]
    return (cited[: limit - min(len(extra), 2)] + extra)[:limit]


def _first_sentence(text: str) -> str:
    flat = " ".join(text.split())
    end = flat.find(". ")
    return flat if end < 0 else flat[: end + 1]


def _next_action(symptoms: list[WorkSymptom]) -> NextAction:
    lead = symptoms[0]
    immediate = str(lead.attributes.get("immediate") or lead.definition.next_action.immediate)
    investigatory = lead.attributes.get("investigatory") or lead.definition.next_action.investigatory
    summary = str(lead.attributes.get("action") or lead.definition.next_action.summary)
    recovery = lead.attributes.get("recovery_action")
    if recovery:
        summary += f" The driver requires: {recovery} (Xid 154)."
    return NextAction(immediate=immediate, investigatory=investigatory, summary=summary)


def _coverage(ws: Workspace, session: Session, outside: list[str], history: HistoryCoverage | None) -> Coverage:
    stats = session.stream_stats()
    sources = [SourceCoverage(node=node, source=SourceKind(src), observations=n, bytes=b, origins=origins)
               for (node, src), (n, b, origins) in sorted(stats.items())]
    with_evidence = sorted({s.node for s in sources if s.observations > 0 and s.node})
    allocation = ws.context.nodes
    with_evidence_set = set(with_evidence)
    without = [n for n in allocation if n not in with_evidence_set]
    have: dict[str | None, set[SourceKind]] = {}
    for s in sources:
        if s.observations > 0:
            have.setdefault(s.node, set()).add(s.source)
    missing: list[str] = []
    for node in allocation:
        node_has = have.get(node, set())
        missing.extend(f"{node}/{src.value}" for src in _LOG_SOURCES if src not in node_has)
    issues = session.issues()
    if without:
        issues.append(f"no evidence at all from {len(without)} of {len(allocation)} allocated nodes")
    if outside:
        issues.append(f"evidence from nodes outside the allocation ignored: {', '.join(outside)}")
    partial = bool(session.issues()) or bool(without) or not sources
    allocated = set(allocation)
    return Coverage(nodes_with_evidence=[n for n in with_evidence if not allocation or n in allocated],
                    nodes_without_evidence=without, nodes_outside_allocation=outside, sources=sources,
                    missing_sources=missing, partial=partial, issues=issues, adjustments=session.notes(),
                    history=history)


class _CyclicGcPause:
    """Pauses the cyclic garbage collector while any pipeline runs (reference-counted across threads).

    Attribution builds hundreds of thousands of objects that outlive it (the result) and no reference cycles:
    reference counting frees whatever it drops. Left running, the cyclic collector walks the whole heap (the
    session's events included) several times per run, which cost a 10,000-node session more than all the rules
    together. Collection resumes when the last pipeline ends; a collector someone else disabled stays disabled."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._running = 0
        self._resume = False

    def __enter__(self) -> None:
        with self._lock:
            if self._running == 0:
                self._resume = gc.isenabled()
                gc.disable()
            self._running += 1

    def __exit__(self, *_exc: object) -> None:
        with self._lock:
            self._running -= 1
            if self._running == 0 and self._resume:
                gc.enable()


_GC_PAUSE = _CyclicGcPause()


def run_pipeline(session: Session) -> Attribution:
    with _GC_PAUSE:
        return _run_pipeline(session)


def _run_pipeline(session: Session) -> Attribution:
    catalog = session.compiled.catalog
    timed = session.timings.phase
    with timed("pipeline.EVENTS"):
        read = {node for (node, _source), (observations, _bytes, _origins) in session.stream_stats().items()
                if observations and node}
        ws = Workspace(session.context, catalog, session.params, session.events(), session.output_ends(), read)
        _trace_extraction(ws)
    for phase in (Phase.FILTER_EARLY, Phase.FILTER):
        with timed(f"pipeline.{phase.name}"):
            _run_rules(ws, phase)
    with timed(f"pipeline.{Phase.MATERIALIZE.name}"):
        outside = _materialise(ws)
        first = next((s.first_time for s in ws.symptoms if not ws.undated(s)), None)
        ws.history, history_coverage = count_history(ws.context, first, ws.canonical_node)
    for phase in (Phase.CLEAN, Phase.AGGREGATE, Phase.REFINE_EARLY, Phase.REFINE, Phase.REFINE_LATE, Phase.FINAL):
        with timed(f"pipeline.{phase.name}"):
            _run_rules(ws, phase)
    with timed(f"pipeline.{Phase.OUTCOME.name}"):
        sub_domain, outcome, terminal = _outcome(ws)
        ws.phase, ws.rule = Phase.OUTCOME.name, "Outcome"
        ws.note("outcome", f"{terminal.value} / {outcome.value} / {sub_domain.value}")
        ws.decision.sub_domain = sub_domain
        ws.decision.terminal_state = terminal
    with timed(f"pipeline.{Phase.POST_OUTCOME.name}"):
        _run_rules(ws, Phase.POST_OUTCOME)
    with timed("pipeline.RESULT"):
        sub_domain, outcome, terminal = _outcome(ws)
        return _result(ws, session, outside, history_coverage, sub_domain, outcome, terminal)


def _result(ws: Workspace, session: Session, outside: list[str], history: HistoryCoverage | None,
            sub_domain: SubDomain, outcome: Outcome, terminal: TerminalState) -> Attribution:
    ctx = ws.context
    decision = ws.decision
    root = decision.root
    root_cause = None
    if root:
        lead = root[0]
        root_cause = RootCause(
            symptom=lead.name, description=str(lead.attributes.get("meaning") or _first_sentence(lead.definition.doc)),
            sub_domain=lead.sub_domain,
            node=lead.node, gpu=next(iter(sorted(lead.gpu_ids())), None), link=_first_value(root, "link"),
            time=lead.first_time,
            evidence=_root_evidence(root, decision.corroborating), rule=lead.rule, decided_by=decision.decided_by)
    culprits = []
    for node in sorted(decision.culprits):
        symptoms = decision.culprits[node]
        culprits.append(CulpritNode(
            node=node, symptoms=sorted({s.name for s in symptoms}),
            gpus=sorted({v for s in symptoms for v in s.gpu_ids()}),
            links=sorted({v for s in symptoms for v in s.value_set("link")}),
            next_action=_next_action(symptoms), history=decision.history.get(node) or None))
    candidates = []
    if sub_domain == SubDomain.AMBIGUOUS:
        for group in decision.candidates:
            candidates.append(Candidate(symptom=group[0].name, sub_domain=group[0].sub_domain,
                                        nodes=sorted({s.node for s in group if s.node}),
                                        first_time=min((s.first_time for s in group if s.first_time), default=None),
                                        evidence=group[0].evidence[:2]))
    coverage = _coverage(ws, session, outside, history)
    return Attribution(
        workload=WorkloadRef(workload_id=ctx.workload_id, attempt=ctx.attempt, scheduler=ctx.scheduler,
                             job_id=ctx.job_id, name=ctx.name, nodes=ctx.nodes, start_time=ctx.start_time,
                             end_time=ctx.end_time, scheduler_state=ctx.scheduler_state, exit_code=ctx.exit_code),
        terminal_state=terminal, outcome=outcome, sub_domain=sub_domain,
        confidence=_confidence(ws, sub_domain, terminal, coverage), root_cause=root_cause,
        culprit_nodes=culprits, symptoms=[_symptom_view(s) for s in ws.symptoms], trace=ws.trace,
        coverage=coverage, candidates=candidates, catalog_hash=ws.catalog.content_hash)


STRONG_FACT = 70  # root strength from which a report is a kernel, hardware or runtime fact (catalog strengths)


def _confidence(ws: Workspace, sub_domain: SubDomain, terminal: TerminalState, coverage: Coverage) -> Confidence:
    """How far the answer can be acted on, from what it rests on (Attribution.confidence)."""
    if sub_domain in (SubDomain.UNKNOWN, SubDomain.AMBIGUOUS):
        return "low"
    levels: tuple[Confidence, ...] = ("low", "medium", "high")
    if sub_domain == SubDomain.NONE:
        recorded = recorded_state(ws.context) == TerminalState.COMPLETED
        level = 2 if recorded and not coverage.partial else 1
        return levels[level]
    lead = ws.decision.root[0] if ws.decision.root else None
    if lead is None or lead.role != "root":
        return "low"
    # what a scheduler did is certain; that nothing else ended the workload is not: at most medium
    strong = lead.definition.strength >= STRONG_FACT and sub_domain != SubDomain.SCHEDULER
    level = 2 if strong else 1
    if coverage.partial or ws.undated(lead):
        level -= 1
    if ws.decision.history_role == "supports":  # the same fault on the same node (and GPU) before
        level += 1
    elif ws.decision.history_role == "chooses":  # history, not this attempt's evidence, picked the node
        level = min(level, 1)
    return levels[min(max(level, 0), 2)]
