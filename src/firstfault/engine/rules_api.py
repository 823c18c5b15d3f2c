"""The small API Python rules are written against.

A Python rule is a function registered with one of the decorators below. It receives a `Workspace` (the
state of one attribution run) and acts on it through its methods, so every change is traced:

    @refiner("DemoteTeardownXid45", phase=Phase.CLEAN, doc="Xid 45 is a teardown symptom ...",
             cases=[RuleCase(evidence={...}, expect={...})])
    def demote_teardown_xid45(ws: Workspace) -> None:
        for s in ws.active(symptom_prefix="XID-45"):
            ws.demote(s, "Xid 45 follows another Xid on the same node")

Rule kinds (docs/architecture.md, "Pipeline"): extractors turn lines into events, filters rewrite the event stream, collectors
gather job-wide facts, refiners demote symptoms and decide. Each rule states its phase. Within a phase a rule runs
after the rules it names in `after=` and otherwise in name order: where a rule sits in which module never changes
the result, and a dependency between two rules is written where it is relied on.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from enum import IntEnum
from typing import TYPE_CHECKING, Any, Literal

from firstfault.engine.model import SubDomain, TerminalState

if TYPE_CHECKING:
    from firstfault.engine.model import MetricSample
    from firstfault.engine.workspace import EmitSpec


class Phase(IntEnum):
    """Ordered phases of one attribution run (docs/architecture.md, "Pipeline")."""

    EXTRACTION = 10
    FILTER_EARLY = 20
    FILTER = 30
    MATERIALIZE = 40
    CLEAN = 50
    AGGREGATE = 60
    REFINE_EARLY = 70
    REFINE = 80
    REFINE_LATE = 90
    FINAL = 100
    OUTCOME = 110
    POST_OUTCOME = 120
    RESULT = 130


RuleKind = Literal["extractor", "filter", "collector", "refiner"]

# Which phases each Python rule kind may run in.
KIND_PHASES: dict[str, tuple[Phase, ...]] = {
    "filter": (Phase.FILTER_EARLY, Phase.FILTER),
    "collector": (Phase.AGGREGATE,),
    "refiner": (Phase.CLEAN, Phase.REFINE_EARLY, Phase.REFINE, Phase.REFINE_LATE, Phase.FINAL,
                Phase.POST_OUTCOME),
}


@dataclass(frozen=True)
class Expect:
    """What must come out of a rule case; only the fields given are checked (a misspelt field is a TypeError).

    `root_symptom` is a prefix of the root cause's symptom; `fired`: True when the rule must leave a trace
    entry, False when it must not; `demoted`: symptom prefixes that must end up interesting; `active`: prefixes
    that must stay bad; `absent`: prefixes no symptom may have (a near-miss that must not produce one).
    """

    sub_domain: str | None = None
    culprits: Sequence[str] | None = None
    root_symptom: str | None = None
    terminal_state: str | None = None
    fired: bool | None = None
    demoted: Sequence[str] = ()
    active: Sequence[str] = ()
    absent: Sequence[str] = ()
    confidence: str | None = None

    def __post_init__(self) -> None:
        if self.sub_domain is not None and self.sub_domain not in {d.value for d in SubDomain}:
            raise ValueError(f"Expect: unknown sub_domain {self.sub_domain!r}")
        if self.terminal_state is not None and self.terminal_state not in {t.value for t in TerminalState}:
            raise ValueError(f"Expect: unknown terminal_state {self.terminal_state!r}")
        if self.confidence not in (None, "high", "medium", "low"):
            raise ValueError(f"Expect: unknown confidence {self.confidence!r}")

    def as_dict(self) -> dict[str, Any]:
        """The fields given (for display)."""
        return {k: (list(v) if isinstance(v, tuple | list) else v) for k, v in self.__dict__.items()
                if v is not None and v != ()}


@dataclass(frozen=True)
class RuleCase:
    """An inline case for a Python rule: a tiny workload and what must come out of it.

    `evidence` maps "node/source" (e.g. "node-02/syslog") to log lines; `context` overrides fields of the
    case's ExecutionContext; `metrics` adds metric samples per node.
    """

    evidence: dict[str, list[str]]
    expect: Expect
    context: dict[str, Any] = field(default_factory=dict)
    title: str = ""
    # node -> [(metric name, labels, value, ISO time)], ingested as node_metrics observations
    metrics: dict[str, list[tuple[str, dict[str, str], float, str]]] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if not isinstance(self.expect, Expect):
            raise TypeError(f"RuleCase {self.title!r}: expect must be an Expect(...), not {type(self.expect).__name__}")


@dataclass(frozen=True)
class PythonRule:
    name: str
    kind: RuleKind
    phase: Phase
    doc: str
    func: Callable[..., Any]
    cases: tuple[RuleCase, ...] = ()
    module: str = ""
    after: tuple[str, ...] = ()  # rules of the same phase that must run before this one


@dataclass(frozen=True)
class MetricExtractor:
    """A Python extractor for metric samples (node_metrics observations)."""

    name: str
    doc: str
    metric_prefixes: tuple[str, ...]
    func: Callable[[MetricSample], list[EmitSpec]]
    module: str = ""


_REGISTRY: list[PythonRule] = []
_METRIC_EXTRACTORS: list[MetricExtractor] = []


Cases = list[RuleCase] | tuple[RuleCase, ...]


def _register(kind: RuleKind, name: str, phase: Phase, doc: str, cases: Cases,
              after: tuple[str, ...]) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    if phase not in KIND_PHASES[kind]:
        raise ValueError(f"rule {name}: a {kind} cannot run in phase {phase.name}")

    def wrap(func: Callable[..., Any]) -> Callable[..., Any]:
        _REGISTRY.append(PythonRule(name=name, kind=kind, phase=phase, doc=doc.strip(), func=func,
                                    cases=tuple(cases), module=func.__module__, after=tuple(after)))
        return func

    return wrap


def filter_rule(name: str, *, phase: Phase = Phase.FILTER, doc: str, cases: Cases = (),
                after: tuple[str, ...] = ()) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    """Register a filter: reads the event stream (`ws.events`, `ws.events_of`) and rewrites it (`ws.emit`,
    `ws.drop`) before symptoms are materialised."""
    return _register("filter", name, phase, doc, cases, after)


def collector(name: str, *, doc: str, cases: Cases = (),
              after: tuple[str, ...] = ()) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    """Register a collector: gathers job-wide facts into `ws.facts` after per-node cleaning."""
    return _register("collector", name, Phase.AGGREGATE, doc, cases, after)


def refiner(name: str, *, phase: Phase, doc: str, cases: Cases = (),
            after: tuple[str, ...] = ()) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    """Register a refiner: demotes symptoms, elects the root cause, adjusts the decision. `after` names rules of
    the same phase whose changes this one reads."""
    return _register("refiner", name, phase, doc, cases, after)


def metric_extractor(name: str, *, metrics: tuple[str, ...], doc: str) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    """Register an extractor for metric samples whose name starts with one of `metrics`."""

    def wrap(func: Callable[..., Any]) -> Callable[..., Any]:
        _METRIC_EXTRACTORS.append(MetricExtractor(name=name, doc=doc.strip(), metric_prefixes=metrics,
                                                  func=func, module=func.__module__))
        return func

    return wrap


def registered_rules() -> list[PythonRule]:
    return list(_REGISTRY)


def registered_metric_extractors() -> list[MetricExtractor]:
    return list(_METRIC_EXTRACTORS)
