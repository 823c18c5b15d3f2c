"""The state of one attribution run, and the methods rules use to change it (each change is traced)."""

from __future__ import annotations

import heapq
import re
from dataclasses import dataclass, field
from datetime import datetime
from operator import itemgetter
from typing import Any, Literal

from firstfault.engine.catalog import Catalog, SymptomDef
from firstfault.engine.ingest import OutputEnd
from firstfault.engine.model import (
    Event,
    EventType,
    Evidence,
    ExecutionContext,
    PriorFinding,
    Role,
    Status,
    SubDomain,
    TerminalState,
    TraceEntry,
    attribute_values,
)
from firstfault.engine.params import Params

# EC2's resource names spell the instance's private IPv4 address ('ip-10-24-34-0.ec2.internal' is 10.24.34.0).
_EC2_IP_NAME = re.compile(r"ip-(\d{1,3})-(\d{1,3})-(\d{1,3})-(\d{1,3})")


@dataclass
class EmitSpec:
    """What a filter or Python extractor wants to put on the event stream."""

    type: str
    node: str | None
    symptom: str | None
    evidence: Evidence
    time: datetime | None = None
    attributes: dict[str, Any] = field(default_factory=dict)
    count: int = 1
    last_time: datetime | None = None
    values: dict[str, list[str]] = field(default_factory=dict)  # several values of one attribute (blamed nodes)


@dataclass
class WorkSymptom:
    """A materialised per-node symptom (all events of one node and symptom name, coalesced)."""

    node: str | None
    name: str
    definition: SymptomDef
    status: Status
    first_time: datetime | None
    last_time: datetime | None
    count: int
    evidence: list[Evidence]
    attributes: dict[str, Any]
    values: dict[str, list[str]]
    rule: str
    demoted_by: str | None = None
    reason: str | None = None

    @property
    def role(self) -> Role:
        return self.definition.role

    @property
    def sub_domain(self) -> SubDomain:
        return self.definition.sub_domain

    @property
    def active(self) -> bool:
        return self.status == "bad"

    def sort_key(self) -> tuple[Any, ...]:
        """Earliest first; symptoms without a time last; ties broken by node and name (deterministic)."""
        t = self.first_time
        return (t is None, t.timestamp() if t else 0.0, self.node or "", self.name)

    def value_set(self, key: str) -> set[str]:
        return attribute_values(self.values, self.attributes, key)

    def gpu_ids(self) -> set[str]:
        """The GPUs the symptom names: PCI bus ids (kernel lines, DCGM's pci_bus_id), else DCGM UUIDs, else NVML
        indices written `gpu:<N>` (a metric with only a `gpu` label)."""
        return self.value_set("pci") or self.value_set("uuid") or {f"gpu:{i}" for i in self.value_set("gpu")}


@dataclass
class Decision:
    """What FINAL decided; OUTCOME and POST_OUTCOME read and complete it."""

    root: list[WorkSymptom] = field(default_factory=list)
    sub_domain: SubDomain | None = None
    culprits: dict[str, list[WorkSymptom]] = field(default_factory=dict)
    candidates: list[list[WorkSymptom]] = field(default_factory=list)
    corroborating: list[WorkSymptom] = field(default_factory=list)  # later reports of the same fault, same node
    terminal_state: TerminalState | None = None
    decided_by: str = ""
    notes: list[str] = field(default_factory=list)
    # Node fault history (engine/history.py): the earlier findings of the same fault per culprit node, and what
    # they did: "supports" (they corroborate a culprit this attempt's evidence blamed: one step more confidence) or
    # "chooses" (they picked one of the candidates of a restrained answer: at most medium confidence).
    history: dict[str, list[PriorFinding]] = field(default_factory=dict)
    history_role: Literal["", "supports", "chooses"] = ""


class Workspace:
    """What rules read and change. Every query a rule makes costs what it returns, not the size of the workspace
    (a 10,000-node session runs each rule once per node): events are indexed by type and dropped by identity,
    symptoms are indexed by node."""

    def __init__(self, context: ExecutionContext, catalog: Catalog, params: Params, events: list[Event],
                 output_ends: list[OutputEnd] | None = None, nodes_read: set[str] | None = None) -> None:
        self.context = context
        self.catalog = catalog
        self.params = params
        self.output_ends = output_ends or []  # where each application stream's own output ended
        self.nodes_read = nodes_read if nodes_read is not None else set(context.nodes)  # nodes that gave evidence
        # The event stream by position (dicts keep insertion order; deletion is O(1)), the same events per type,
        # and the position of each event by identity.
        self._events: dict[int, Event] = {}
        self._by_type: dict[str, dict[int, Event]] = {}
        self._position: dict[int, int] = {}
        self._next = 0
        for event in events:
            self._add(event)
        self._symptoms: list[WorkSymptom] = []
        self._by_node: dict[str | None, list[WorkSymptom]] | None = None
        self._allocation: tuple[set[str], dict[str, str]] | None = None  # canonical_node's index of the nodes
        self.context_events: list[Event] = []
        self.facts: dict[str, Any] = {}
        # the prior findings that count for this attempt (engine/history.py), set once symptoms are materialised
        self.history: list[PriorFinding] = []
        self.decision = Decision()
        self.trace: list[TraceEntry] = []
        self.phase = ""
        self.rule = ""

    # -- tracing -------------------------------------------------------------------------------------
    def note(self, action: str, detail: str, *, node: str | None = None, symptom: str | None = None) -> None:
        self.trace.append(TraceEntry(phase=self.phase, rule=self.rule, action=action, detail=detail,
                                     node=node, symptom=symptom))

    # -- event stream (filters) ------------------------------------------------------------------------
    @property
    def events(self) -> list[Event]:
        """The event stream, in order (a copy: change it with `emit` and `drop`)."""
        return list(self._events.values())

    def _add(self, event: Event) -> None:
        position, self._next = self._next, self._next + 1
        self._events[position] = event
        self._by_type.setdefault(event.type, {})[position] = event
        self._position[id(event)] = position

    def emit(self, spec: EmitSpec) -> Event:
        event = Event(type=spec.type, node=spec.node, symptom=spec.symptom, time=spec.time or spec.evidence.time,
                      last_time=spec.last_time or spec.time or spec.evidence.time, count=spec.count,
                      evidence=spec.evidence, attributes=dict(spec.attributes),
                      values={k: list(v) for k, v in spec.values.items()}, rule=self.rule)
        self._add(event)
        if spec.type in (EventType.NODE_BAD, EventType.NODE_INTERESTING):
            self.note("emit", f"{spec.type} {spec.symptom}", node=spec.node, symptom=spec.symptom)
        return event

    def drop(self, event: Event, reason: str) -> None:
        """Take `event` (an event of this stream, not a copy of one) off the stream."""
        position = self._position.pop(id(event), None)
        if position is None:
            raise ValueError(f"not an event of this workspace: {event.type} {event.symptom or ''}")
        del self._events[position]
        del self._by_type[event.type][position]
        self.note("consume", f"{event.type} {event.symptom or ''}: {reason}".strip(), node=event.node,
                  symptom=event.symptom)

    def reread(self, event: Event, symptom: str, reason: str, attributes: dict[str, Any] | None = None) -> Event:
        """Read `event` (an event of this stream) as a bad-node event of `symptom` on its node, with its evidence, times
        and count (and `attributes`, none kept otherwise); `event` is dropped for `reason`."""
        new = self.emit(EmitSpec(type=EventType.NODE_BAD, node=event.node, symptom=symptom, evidence=event.evidence,
                                 time=event.time, last_time=event.last_time, count=event.count,
                                 attributes=dict(attributes or {})))
        self.drop(event, reason)
        return new

    def move(self, event: Event, node: str, reason: str) -> None:
        """Put `event` (an event of this stream) on `node`: a line one node's output relayed from another's."""
        if id(event) not in self._position:
            raise ValueError(f"not an event of this workspace: {event.type} {event.symptom or ''}")
        event.node = node
        self.note("move", f"{event.type} {event.symptom or ''}: {reason}".strip(), node=node, symptom=event.symptom)

    def events_of(self, type_prefix: str) -> list[Event]:
        """The events whose type starts with `type_prefix`, in stream order."""
        of_types = [events.items() for t, events in self._by_type.items() if t.startswith(type_prefix)]
        return [event for _, event in heapq.merge(*of_types, key=itemgetter(0))]

    # -- symptoms (refiners) ---------------------------------------------------------------------------
    @property
    def symptoms(self) -> list[WorkSymptom]:
        """The materialised symptoms, earliest first (the list is set once, by the MATERIALIZE phase)."""
        return self._symptoms

    @symptoms.setter
    def symptoms(self, value: list[WorkSymptom]) -> None:
        self._symptoms = value
        self._by_node = None

    def active(self, *, role: str | None = None, node: str | None = None, prefix: str | None = None,
               sub_domain: SubDomain | None = None) -> list[WorkSymptom]:
        return self.select(status="bad", role=role, node=node, prefix=prefix, sub_domain=sub_domain)

    def select(self, *, status: str | None = None, role: str | None = None, node: str | None = None,
               prefix: str | None = None, sub_domain: SubDomain | None = None,
               family: str | None = None) -> list[WorkSymptom]:
        out = []
        for s in self._symptoms if node is None else self._of_node(node):
            if status is not None and s.status != status:
                continue
            if role is not None and s.role != role:
                continue
            if prefix is not None and not s.name.startswith(prefix):
                continue
            if sub_domain is not None and s.sub_domain != sub_domain:
                continue
            if family is not None and s.definition.family != family:
                continue
            out.append(s)
        return out

    def _of_node(self, node: str) -> list[WorkSymptom]:
        """The symptoms of one node, in the order of `symptoms`."""
        if self._by_node is None:
            self._by_node = {}
            for s in self._symptoms:
                self._by_node.setdefault(s.node, []).append(s)
        return self._by_node.get(node, [])

    def demote(self, symptom: WorkSymptom, reason: str) -> None:
        """Turn a bad symptom into an interesting one; its evidence and provenance are kept."""
        if symptom.status != "bad":
            return
        symptom.status = "interesting"
        symptom.demoted_by = self.rule
        symptom.reason = reason
        self.note("demote", reason, node=symptom.node, symptom=symptom.name)

    def promote(self, symptom: WorkSymptom, reason: str) -> None:
        if symptom.status == "bad":
            return
        symptom.status = "bad"
        symptom.demoted_by = None
        symptom.reason = None
        self.note("promote", reason, node=symptom.node, symptom=symptom.name)

    def facts_of(self, fact: str) -> list[Event]:
        name = f"{EventType.CONTEXT}.{fact}"
        return [e for e in self.context_events if e.type == name]

    @property
    def end_time(self) -> datetime | None:
        return self.context.end_time

    def canonical_node(self, name: str | None) -> str | None:
        """The allocated node a host name refers to (exact, by an address the node printed as its own - the
        `ip_to_node` fact - by short name, or by the address an EC2 resource name spells); None if it is not
        allocated."""
        if not name:
            return None
        if self._allocation is None:
            shorts: dict[str, str] = {}
            for node in self.context.nodes:
                short = node.split(".")[0]
                shorts.setdefault(short, node)
                spelled = _EC2_IP_NAME.fullmatch(short)
                if spelled:
                    shorts.setdefault(".".join(spelled.groups()), node)
            self._allocation = (set(self.context.nodes), shorts)
        exact, shorts = self._allocation
        if name in exact:
            return name
        return self.facts.get("ip_to_node", {}).get(name) or shorts.get(name) or shorts.get(name.split(".")[0])

    def undated(self, symptom: WorkSymptom) -> bool:
        """True when the symptom's time is only the job-end fallback (no line carried or inherited a time)."""
        return symptom.first_time is None or all(e.time_inferred for e in symptom.evidence)

    def dated_during_run(self, symptom: WorkSymptom) -> bool:
        """True when the symptom carries a time of its own inside the workload's recorded start and end (both known)."""
        start, end = self.context.start_time, self.context.end_time
        when = symptom.first_time
        return (not self.undated(symptom) and when is not None and start is not None and end is not None
                and start <= when <= end)

    def values_by_node(self, fact: str, key: str) -> dict[str, set[str]]:
        """Per node, the values of `key` its `fact` events captured (every match of a repeated capture, else the
        attribute)."""
        values: dict[str, set[str]] = {}
        for event in self.facts_of(fact):
            if event.node:
                values.setdefault(event.node, set()).update(
                    event.values.get(key, []) or [str(event.attributes.get(key, ""))])
        return values
