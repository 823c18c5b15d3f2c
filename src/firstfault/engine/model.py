"""Typed data model shared by the engine, the service and the Blueprint.

Everything that crosses a boundary (an HTTP body, a SQLite row, a CLI `--json` output) is one of these records,
so the wire shape is defined once. Records validate and serialise as pydantic models with the same fields do, and
are pydantic types for the service and the Blueprint, but the engine's own path never imports pydantic
(engine/records.py).
"""

from __future__ import annotations

import re
from dataclasses import field
from datetime import datetime, timezone
from enum import StrEnum
from typing import Annotated, Any, Literal

from firstfault.engine.records import After, Bounds, Length, OmitNone, Record

SCHEMA_VERSION = "1.0"


class SourceKind(StrEnum):
    """Where an observation came from. Extractors are bound to one or more source kinds."""

    APPLOG = "applog"
    SYSLOG = "syslog"
    SCHEDULER = "scheduler"
    NODE_METRICS = "node_metrics"


class SubDomain(StrEnum):
    """The closed set of attribution domains (docs/domain.md §7)."""

    GPU = "gpu"
    NVLINK = "nvlink"
    NETWORK = "network"
    STORAGE = "storage"
    HOST = "host"
    HOST_OOM = "host_oom"
    GPU_OOM = "gpu_oom"
    APPLICATION = "application"
    CONFIGURATION = "configuration"
    SCHEDULER = "scheduler"
    AMBIGUOUS = "ambiguous"
    UNKNOWN = "unknown"
    NONE = "none"


class Outcome(StrEnum):
    FAIL_INFRA_HW = "Fail InfraHW"
    FAIL_INFRA_SW = "Fail InfraSW"
    FAIL_USER = "Fail User"
    FAIL_SCHEDULER = "Fail Scheduler"
    FAIL_UNKNOWN = "Fail Unknown"
    PASS = "Pass"


class TerminalState(StrEnum):
    COMPLETED = "COMPLETED"
    FAILED = "FAILED"
    TIMEOUT = "TIMEOUT"
    CANCELLED = "CANCELLED"
    NODE_FAIL = "NODE_FAIL"
    OUT_OF_MEMORY = "OUT_OF_MEMORY"
    PREEMPTED = "PREEMPTED"
    UNKNOWN = "UNKNOWN"


# Slurm's states, and the other schedulers' words for the same ends: a Kubernetes Job's condition `Complete`, the
# Kubeflow and Argo phase `Succeeded`, Ray's job status `STOPPED` (stopped by its user), Azure ML's `Canceled`, the
# `Error` of Argo's phase, a pod's container and Determined's trials (ended by an error). `Terminated` is left unread:
# dstack's user stop, Volcano's reclaim or preemption.
_SCHEDULER_STATES = {
    "COMPLETED": TerminalState.COMPLETED, "SUCCEEDED": TerminalState.COMPLETED, "COMPLETE": TerminalState.COMPLETED,
    "STOPPED": TerminalState.CANCELLED,
    "FAILED": TerminalState.FAILED, "ERROR": TerminalState.FAILED, "TIMEOUT": TerminalState.TIMEOUT, "DEADLINE": TerminalState.TIMEOUT,
    "CANCELLED": TerminalState.CANCELLED, "CANCELED": TerminalState.CANCELLED, "NODE_FAIL": TerminalState.NODE_FAIL,
    "BOOT_FAIL": TerminalState.NODE_FAIL, "OUT_OF_MEMORY": TerminalState.OUT_OF_MEMORY,
    "OOMKILLED": TerminalState.OUT_OF_MEMORY, "PREEMPTED": TerminalState.PREEMPTED,
}


def normalise_state(raw: str) -> TerminalState:
    """Map a scheduler's state text (`CANCELLED by 1234`, `Failed`, `OOMKilled` ...) to the Slurm vocabulary."""
    word = raw.strip().split(" ")[0].upper() if raw.strip() else ""
    return _SCHEDULER_STATES.get(word, TerminalState.UNKNOWN)


# Default outcome of each sub_domain; a symptom definition may override it.
SUBDOMAIN_OUTCOME: dict[SubDomain, Outcome] = {
    SubDomain.GPU: Outcome.FAIL_INFRA_HW,
    SubDomain.NVLINK: Outcome.FAIL_INFRA_HW,
    SubDomain.NETWORK: Outcome.FAIL_INFRA_HW,
    SubDomain.HOST: Outcome.FAIL_INFRA_HW,
    SubDomain.STORAGE: Outcome.FAIL_INFRA_SW,
    SubDomain.HOST_OOM: Outcome.FAIL_USER,
    SubDomain.GPU_OOM: Outcome.FAIL_USER,
    SubDomain.APPLICATION: Outcome.FAIL_USER,
    SubDomain.CONFIGURATION: Outcome.FAIL_USER,
    SubDomain.SCHEDULER: Outcome.FAIL_SCHEDULER,
    SubDomain.AMBIGUOUS: Outcome.FAIL_UNKNOWN,
    SubDomain.UNKNOWN: Outcome.FAIL_UNKNOWN,
    SubDomain.NONE: Outcome.PASS,
}


def utc(dt: datetime) -> datetime:
    """Normalise a datetime to an aware UTC datetime (naive values are taken as UTC). ValueError (what a pydantic
    validator reports) when its offset moves it past datetime's limits (`0001-01-01T00:00:00+01:00`)."""
    if dt.tzinfo is None:
        return dt.replace(tzinfo=timezone.utc)
    try:
        return dt.astimezone(timezone.utc)
    except OverflowError:
        raise ValueError(f"{dt.isoformat()} lies past the limits of the calendar in UTC") from None


Scheduler = Literal["slurm", "kubernetes", "none"]
SCHEDULERS: tuple[Scheduler, ...] = ("slurm", "kubernetes", "none")


def _aware(value: datetime | None) -> datetime | None:
    return None if value is None else utc(value)


AwareTime = Annotated[datetime | None, After(_aware)]


def unique_nodes(value: list[str]) -> list[str]:
    """The node names in first-seen order, each once; ValueError for an empty or over-long name."""
    seen: dict[str, None] = {}
    for node in value:
        if not node or len(node) > 255:
            raise ValueError(f"invalid node name {node!r}")
        seen.setdefault(node, None)
    return list(seen)


class Provenance(Record):
    """Where a piece of evidence came from: a file path or a stream description, and a position in it."""

    origin: Annotated[str, Length(max=4096)]
    line: Annotated[int | None, Bounds(ge=1)] = None
    offset: Annotated[int | None, Bounds(ge=0)] = None
    labels: dict[str, str] = field(default_factory=dict)


class Evidence(Record):
    """A cited line (or metric sample) with everything needed to find it again."""

    source: SourceKind
    node: str | None
    time: datetime | None
    time_inferred: bool = False  # True: the line has no stamp of its own (time inherited or the job end)
    text: str
    provenance: Provenance


class PriorFinding(Record):
    """An earlier diagnosis that blamed a node: one culprit of another workload attempt (node fault history)."""

    node: Annotated[str, Length(1, 255)]
    # the GPUs the finding named, as a result's culprit names them: PCI bus ids, UUIDs, `gpu:<index>`
    gpus: Annotated[list[Annotated[str, Length(1, 128)]], Length(max=64)] = field(default_factory=list)
    # the fault family: the root cause's catalog symptom (XID-79, CUDA unknown error ...) and the rule that found it
    symptom: Annotated[str, Length(1, 512)]
    rule: Annotated[str, Length(max=512)] = ""
    sub_domain: SubDomain
    time: Annotated[datetime, After(utc)]  # when the fault began (the root cause's time)
    workload_id: Annotated[str, Length(1, 512)]
    attempt: Annotated[int, Bounds(ge=0)] = 0
    evidence: Evidence | None = None  # the line it was cited on, when known


class NodeHistory(Record):
    """Prior findings on the nodes of a workload (engine/history.py says which count)."""

    # findings older than this, counted back from the attempt, do not count
    window_days: Annotated[int, Bounds(ge=1, le=3650)] = 30
    findings: Annotated[list[PriorFinding], Length(max=100_000)] = field(default_factory=list)


class ExecutionContext(Record, frozen=False):
    """One attempt of one workload: what ran where and when, and what the scheduler recorded."""

    workload_id: Annotated[str, Length(1, 512)]
    attempt: Annotated[int, Bounds(ge=0)] = 0
    scheduler: Scheduler = "none"
    job_id: Annotated[str, Length(max=512)] = ""
    name: Annotated[str, Length(max=512)] = ""
    nodes: Annotated[list[str], Length(max=100_000), After(unique_nodes)] = field(default_factory=list)
    ranks_per_node: Annotated[int | None, Bounds(ge=1, le=100_000)] = None
    start_time: AwareTime = None
    end_time: AwareTime = None
    scheduler_state: Annotated[str, Length(max=128)] = ""
    exit_code: Annotated[str, Length(max=64)] = ""
    metadata: dict[str, str] = field(default_factory=dict)
    # earlier findings on the workload's nodes (docs/architecture.md, "Node fault history"); written only when given
    history: Annotated[NodeHistory | None, OmitNone()] = None


def recorded_state(ctx: ExecutionContext) -> TerminalState:
    """The end the scheduler recorded, its exit code read with its state: Torque's COMPLETE and PBS's finished state
    are set however the job ended (its Exit_status says how), so a completed state with a non-zero exit code (N, or
    Slurm's N:M) is a failure, and so is one whose own text names a failure (Azure Batch's 'completed' task with its
    result 'failure'). Slurm's and Kubernetes' completed states only ever come with a zero one."""
    state = normalise_state(ctx.scheduler_state)
    qualifier = ctx.scheduler_state.strip().partition(" ")[2]
    if state == TerminalState.COMPLETED and (_NONZERO_EXIT.match(ctx.exit_code.strip())
                                             or _FAILED_QUALIFIER.search(qualifier)):
        return TerminalState.FAILED
    return state


_NONZERO_EXIT = re.compile(r"^(?:0*[1-9]\d*(?::\d+)?|\d+:0*[1-9]\d*)$")
# A completed state qualified by how it ended (Azure Batch's task state 'completed' with its result 'failure', a
# platform's 'completed (exit code 135)'): the words after the state say it failed.
_FAILED_QUALIFIER = re.compile(r"(?i)\b(?:fail(?:ure|ed)?|error)\b|\bexit ?code\W{0,3}0*[1-9]")


class MetricSample(Record):
    name: str
    labels: dict[str, str] = field(default_factory=dict)
    value: float


class Observation(Record, frozen=False):
    """One normalised piece of evidence: a log line or a metric sample."""

    source: SourceKind
    node: Annotated[str | None, Length(max=255)] = None
    observed_at: AwareTime = None
    line: str | None = None
    metric: MetricSample | None = None
    provenance: Provenance


class EventType:
    """Dotted event type names used on the event stream."""

    NODE_BAD = "Attribution.node.bad"
    NODE_INTERESTING = "Attribution.node.interesting"
    XID_BURST = "XID_parser.burst"
    XID_INFO = "XID_parser.info"
    CONTEXT = "Context"  # prefix: Context.<fact>


class Event(Record, frozen=False):
    """A typed event. Identical events close in time are coalesced into one with a count."""

    type: str
    node: str | None
    symptom: str | None = None
    time: datetime | None = None
    last_time: datetime | None = None
    count: int = 1
    evidence: Evidence
    attributes: dict[str, Any] = field(default_factory=dict)
    values: dict[str, list[str]] = field(default_factory=dict)
    rule: str

    def value_set(self, key: str) -> set[str]:
        """Every value `key` took on the event's lines (its kept evidence's and the others')."""
        return attribute_values(self.values, self.attributes, key)


def attribute_values(values: dict[str, list[str]], attributes: dict[str, Any], key: str) -> set[str]:
    """The values an attribute took over a coalesced event's lines: those collected, and the kept evidence's own."""
    found = set(values.get(key, []))
    if attributes.get(key) not in (None, ""):
        found.add(str(attributes[key]))
    return found


Status = Literal["bad", "interesting"]
Role = Literal["root", "symptom", "context"]


class SymptomView(Record):
    """A symptom as reported in the result."""

    node: str | None
    symptom: str
    status: Status
    role: Role
    sub_domain: SubDomain
    first_time: datetime | None
    last_time: datetime | None
    count: int
    evidence: list[Evidence]
    attributes: dict[str, Any] = field(default_factory=dict)
    rule: str
    demoted_by: str | None = None
    reason: str | None = None


class NextAction(Record):
    immediate: str
    investigatory: str | None = None
    summary: str


class CulpritNode(Record):
    node: str
    symptoms: list[str]
    gpus: list[str] = field(default_factory=list)
    links: list[str] = field(default_factory=list)
    next_action: NextAction
    # earlier findings of the same fault on this node (and GPU) that support the blame; only when there are some
    history: Annotated[list[PriorFinding] | None, OmitNone()] = None


class RootCause(Record):
    symptom: str
    description: str
    sub_domain: SubDomain
    node: str | None
    gpu: str | None = None
    link: str | None = None
    time: datetime | None
    evidence: list[Evidence]
    rule: str
    decided_by: str


class Candidate(Record):
    symptom: str
    sub_domain: SubDomain
    nodes: list[str]
    first_time: datetime | None
    evidence: list[Evidence]


class TraceEntry(Record):
    phase: str
    rule: str
    action: str
    detail: str
    node: str | None = None
    symptom: str | None = None


class SourceCoverage(Record):
    node: str
    source: SourceKind
    observations: int
    bytes: int
    origins: list[str]


class HistoryCoverage(Record):
    """What node fault history the attribution was given and how far back it reaches."""

    findings: int  # prior findings given
    counted: int  # of them: on an allocated node, from another attempt, before this one and within the window
    window_days: int
    since: datetime | None  # the window's start (None: the attempt has no time to count back from)
    earliest: datetime | None  # the earliest finding counted


class Coverage(Record):
    nodes_with_evidence: list[str]
    nodes_without_evidence: list[str]
    nodes_outside_allocation: list[str]
    sources: list[SourceCoverage]
    missing_sources: list[str]
    partial: bool
    issues: list[str]
    # How evidence was read when that differs from what it says by itself (a stream whose zone-less stamps were
    # read as local time); not a gap, so it does not make the result partial.
    adjustments: list[str] = field(default_factory=list)
    history: Annotated[HistoryCoverage | None, OmitNone()] = None  # only when history was given


class WorkloadRef(Record):
    workload_id: str
    attempt: int
    scheduler: str
    job_id: str
    name: str
    nodes: list[str]
    start_time: datetime | None
    end_time: datetime | None
    scheduler_state: str
    exit_code: str


Confidence = Literal["high", "medium", "low"]


class Attribution(Record):
    """The diagnosis of one workload attempt (the result JSON)."""

    schema_version: str = SCHEMA_VERSION
    workload: WorkloadRef
    terminal_state: TerminalState
    outcome: Outcome
    sub_domain: SubDomain
    # How far an operator can act on the answer (docs/accuracy.md reports its calibration): high - a kernel,
    # hardware or scheduler fact, stamped, with the evidence complete; medium - an application's or launcher's own
    # report, or a strong fact read with gaps; low - the earliest downstream symptom, or nothing committed
    # (unknown, ambiguous).
    confidence: Confidence
    root_cause: RootCause | None
    culprit_nodes: list[CulpritNode]
    symptoms: list[SymptomView]
    trace: list[TraceEntry]
    coverage: Coverage
    candidates: list[Candidate]
    catalog_hash: str

    def to_json(self) -> str:
        """Canonical JSON: same evidence and catalog give byte-identical output."""
        return self.model_dump_json(indent=2)
