"""Root-cause election (FINAL) and the systemic guard.

The first fault in time wins among root candidates. Candidates whose first times lie within the clock-skew
tolerance of the earliest one started together; among those, kernel and hardware facts outrank what an
application reports (strength), and if candidates of different sub_domains are still tied the answer is
`ambiguous` with every candidate listed. Downstream symptoms (timeouts, remote errors, exits) are the root
only when no root candidate exists, and then the answer names no node.
"""

from __future__ import annotations

from datetime import datetime, timedelta

from firstfault.engine.model import SubDomain, TerminalState
from firstfault.engine.rules_api import Phase, RuleCase, refiner
from firstfault.engine.workspace import WorkSymptom, Workspace

# Two candidates whose strengths differ by less than this are peers: neither outranks the other.
STRENGTH_MARGIN = 10


def _time(ws: Workspace, s: WorkSymptom) -> datetime | None:
    return s.first_time or ws.end_time


def blamed_nodes(s: WorkSymptom) -> list[str]:
    """Nodes a symptom blames: its own node (blame=node) or the nodes a refiner resolved (blame=peer)."""
    if s.definition.blame == "node" and s.node:
        return [s.node]
    if s.definition.blame == "peer":
        return sorted(s.value_set("blamed_node"))
    return []


def _concurrent(ws: Workspace, candidates: list[WorkSymptom]) -> list[WorkSymptom]:
    timed = [s for s in candidates if _time(ws, s) is not None]
    if not timed:
        return candidates
    t0 = min(_time(ws, s) for s in timed)  # type: ignore[type-var]
    window = t0 + timedelta(seconds=ws.params.clock_skew_s)
    return [s for s in timed if _time(ws, s) <= window]  # type: ignore[operator]


def _groups(symptoms: list[WorkSymptom]) -> list[list[WorkSymptom]]:
    by_domain: dict[SubDomain, list[WorkSymptom]] = {}
    for s in symptoms:
        by_domain.setdefault(s.sub_domain, []).append(s)
    return [sorted(g, key=WorkSymptom.sort_key) for _, g in sorted(by_domain.items(), key=lambda kv: kv[1][0].sort_key())]


def _decide(ws: Workspace, root: list[WorkSymptom], sub_domain: SubDomain, why: str) -> None:
    d = ws.decision
    d.root, d.sub_domain, d.decided_by = root, sub_domain, ws.rule
    d.culprits = {}
    for s in root:
        for node in blamed_nodes(s):
            d.culprits.setdefault(node, []).append(s)
    ws.note("decide", f"{sub_domain.value}: {why}", node=root[0].node if root else None,
            symptom=root[0].name if root else None)


@refiner("ElectRootCause", phase=Phase.FINAL, doc="""
Elect the root cause among the active (bad) symptoms. Root candidates that started within clock_skew_s of
the earliest one are considered together; the strongest of them (hardware and kernel facts first) wins; if
several sub_domains remain within STRENGTH_MARGIN the result is ambiguous with all of them as candidates.
Without any root candidate, the earliest remaining downstream symptom is cited with its own sub_domain and
no node is blamed; with no failure evidence at all the result is unknown (or none for a completed job).
""", cases=[
    RuleCase(title="two unrelated roots at once", evidence={
        "a/applog": ["2025-01-01T00:10:00Z [rank0]: torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB. GPU 0 has a total capacity of 79.10 GiB of which 1.00 MiB is free."],
        "b/applog": ["2025-01-01T00:10:30Z [rank8]: OSError: [Errno 28] No space left on device"]},
        expect={"sub_domain": "ambiguous", "culprits": []}),
    RuleCase(title="first in time wins", evidence={
        "a/applog": ["2025-01-01T00:10:00Z [rank0]: torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB. GPU 0 has a total capacity of 79.10 GiB of which 1.00 MiB is free."],
        "b/applog": ["2025-01-01T00:30:00Z [rank8]: OSError: [Errno 28] No space left on device"]},
        expect={"sub_domain": "gpu_oom", "culprits": [], "root_symptom": "CUDA out of memory"}),
])
def elect_root_cause(ws: Workspace) -> None:
    roots = ws.active(role="root")
    if roots:
        concurrent = _concurrent(ws, roots)
        top = max(s.definition.strength for s in concurrent)
        leading = [s for s in concurrent if s.definition.strength > top - STRENGTH_MARGIN]
        outranked = [s for s in concurrent if s not in leading]
        if outranked:
            ws.note("rank", "outranked by a stronger candidate that started together: "
                    + ", ".join(sorted({s.name for s in outranked})))
        groups = _groups(leading)
        if len(groups) == 1:
            group = groups[0]
            _decide(ws, group, group[0].sub_domain, f"{group[0].name} is the first fault")
            return
        ws.decision.candidates = groups
        _decide(ws, [g[0] for g in groups], SubDomain.AMBIGUOUS,
                "unrelated root candidates started together: " + ", ".join(g[0].name for g in groups))
        ws.decision.culprits = {}
        return
    downstream = sorted(ws.active(role="symptom"), key=WorkSymptom.sort_key)
    if downstream:
        first = downstream[0]
        _decide(ws, [first], first.sub_domain,
                f"no root candidate; {first.name} is the earliest failure signal and names no node")
        ws.decision.culprits = {}
        return
    state = ws.decision.terminal_state or None
    if state is None and ws.context.scheduler_state.upper().startswith("COMPLETED"):
        state = TerminalState.COMPLETED
    if state == TerminalState.COMPLETED:
        _decide(ws, [], SubDomain.NONE, "the workload completed and no failure evidence remains")
    else:
        _decide(ws, [], SubDomain.UNKNOWN, "no failure evidence in the available logs")


@refiner("SystemicGuard", phase=Phase.FINAL, doc="""
When the elected root signature is blamed on more than systemic_share of the job's nodes (and at least
systemic_min_nodes), the cause is shared (fabric, filesystem, image, configuration) and no single node is
blamed: draining most of a job's nodes on one signature would do more harm than good.
""", cases=[
    RuleCase(title="same xid everywhere", evidence={
        f"n{i}/syslog": [f"Jan  1 00:10:0{i} n{i} kernel: NVRM: Xid (PCI:0000:91:00): 79, pid='<unknown>', name=<unknown>, GPU has fallen off the bus."]
        for i in range(4)},
        expect={"fired": True, "culprits": [], "sub_domain": "gpu"}),
])
def systemic_guard(ws: Workspace) -> None:
    culprits = ws.decision.culprits
    total = len(ws.context.nodes)
    if not culprits or total == 0:
        return
    if len(culprits) >= ws.params.systemic_min_nodes and len(culprits) > ws.params.systemic_share * total:
        ws.note("systemic", f"{ws.decision.root[0].name} blames {len(culprits)} of {total} nodes: "
                "a shared cause, no single node is blamed")
        ws.decision.culprits = {}
