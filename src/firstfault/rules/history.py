"""Node fault history (docs/architecture.md, "Node fault history"): the same fault on the same node (and GPU) in
earlier workloads supports blaming it now, and picks the one node with such a past among the candidates of a
restrained answer. History is read from `ws.history` (the prior findings that count, engine/history.py); it never
adds a symptom, never blames a node this attempt's evidence does not point at, and never touches a `none` answer.

A finding is of the same fault when it names the same catalog symptom (its family: XID-79, CUDA unknown error ...)
on the same node; when both it and the symptom name a GPU in a form they share (PCI bus id, UUID, index), a GPU
in common too. Findings of other families, of another GPU of the node, or outside the window do not count.
"""

from __future__ import annotations

from collections.abc import Iterable

from firstfault.engine.model import PriorFinding, SubDomain
from firstfault.engine.rules_api import Expect, Phase, RuleCase, refiner
from firstfault.engine.workspace import Workspace, WorkSymptom
from firstfault.rules.election import HARDWARE, demote_explained
from firstfault.rules.pytorch import ONE_NODE_FAULT_RULE

_XID79 = ("Jan  1 00:10:00 {node} kernel: NVRM: Xid (PCI:0000:91:00): 79, pid='<unknown>', name=<unknown>, GPU has "
          "fallen off the bus.")
_CUDA_UNKNOWN = "2025-01-01T00:10:00Z [rank{rank}]: RuntimeError: CUDA error: unknown error"
_WATCHDOG = ("2025-01-01T00:20:00Z [rank0]:[E0101 00:20:00.000000000 ProcessGroupNCCL.cpp:1] [Rank 0] Watchdog "
             "caught collective operation timeout: WorkNCCL(SeqNum=9, OpType=ALLREDUCE, NumelIn=1, NumelOut=1, "
             "Timeout(ms)=600000) ran for 600010 milliseconds before timing out.")
# One rank's GPU fails on n2 while n1 only waits on it (the cases of HistoryCorroboratesCulprit).
_ONE_RANKS_GPU = {"n2/applog": [_CUDA_UNKNOWN.format(rank=6)], "n1/applog": [_WATCHDOG]}
_CABLE = ("Jan  1 00:10:20 {node} kernel: [5308538.6] mlx5_core 0000:9a:00.0: mlx5_port_module_event:1147:(pid 0): "
          "Port module event[error]: module 4, Cable error, High Temperature")


def _history(*findings: tuple[str, str, str, list[str]], window_days: int = 30) -> dict[str, object]:
    """A rule case's `history` context: (node, symptom, time, gpus) per finding, each from its own earlier job."""
    return {"history": {"window_days": window_days, "findings": [
        {"node": node, "symptom": symptom, "sub_domain": "gpu", "time": time, "gpus": gpus,
         "workload_id": f"slurm:{900 + i}", "rule": "NvrmXid" if symptom.startswith("XID") else "CudaError"}
        for i, (node, symptom, time, gpus) in enumerate(findings)]}}


def _gpu_key(raw: str) -> tuple[str, str]:
    """A GPU id as (kind, canonical value): `pci` (domain:bus:device, the function dropped: `0000:91:00` and DCGM's
    `00000000:91:00.0` are one GPU), `uuid`, `index` (`gpu:<N>`), or `other`."""
    text = raw.strip().lower()
    if text.startswith("gpu:"):
        return "index", text[4:]
    if text.startswith(("gpu-", "mig-")):
        return "uuid", text
    parts = text.split(":")
    if len(parts) in (2, 3):
        parts[-1] = parts[-1].split(".")[0]
        try:
            numbers = [int(p, 16) for p in parts]
        except ValueError:
            return "other", text
        domain = numbers[0] if len(numbers) == 3 else 0
        return "pci", f"{domain:04x}:{numbers[-2]:02x}:{numbers[-1]:02x}"
    return "other", text


def _gpu_keys(ids: Iterable[str]) -> dict[str, set[str]]:
    keys: dict[str, set[str]] = {}
    for raw in ids:
        kind, value = _gpu_key(raw)
        keys.setdefault(kind, set()).add(value)
    return keys


def same_gpu(finding: Iterable[str], symptom: Iterable[str]) -> bool:
    """Whether two GPU lists may name the same GPU: when they share a kind of id, they share an id of it; when they
    share none (one names no GPU, or they name them differently), nothing tells them apart."""
    a, b = _gpu_keys(finding), _gpu_keys(symptom)
    shared = a.keys() & b.keys()
    return not shared or any(a[kind] & b[kind] for kind in shared)


def _node_fault(s: WorkSymptom) -> bool:
    """A fault of the node's own hardware, blamed on the node it was seen on: a GPU or node suspect."""
    return s.definition.blame == "node" and s.sub_domain in HARDWARE and s.node is not None


def prior_findings(ws: Workspace, s: WorkSymptom) -> list[PriorFinding]:
    """The counted findings of the same fault as `s` on its node (and GPU)."""
    if not _node_fault(s):
        return []
    node, gpus = ws.canonical_node(s.node), s.gpu_ids()
    return [f for f in ws.history if f.node == node and f.symptom == s.name and same_gpu(f.gpus, gpus)]


def _cited(findings: list[PriorFinding]) -> str:
    shown = ", ".join(f"{f.workload_id} attempt {f.attempt} at {f.time:%Y-%m-%dT%H:%M:%SZ}" for f in findings[:3])
    return shown + (f" (+{len(findings) - 3} more)" if len(findings) > 3 else "")


@refiner("HistoryCorroboratesCulprit", phase=Phase.FINAL, after=("HistoryChoosesCandidate",), doc="""
A culprit blamed for a fault of its own hardware (a GPU or node suspect: blame on the node, a gpu, nvlink, network or
host sub_domain) whose node had the same fault before - the same catalog symptom, on the same GPU where both name
one, in another attempt before this one and within the history's window - gets those earlier findings as supporting
evidence (`culprit_nodes[].history`: which workload, when) and one step more confidence. Findings of another fault,
of another GPU of the node, of another node, after this attempt began or outside the window do not count.
""", cases=[
    RuleCase(title="one rank's GPU failed the same way three days before", evidence=_ONE_RANKS_GPU,
        context=_history(("n2", "CUDA unknown error", "2024-12-29T08:00:00Z", [])),
        expect=Expect(fired=True, sub_domain="gpu", culprits=["n2"], confidence="high")),
    RuleCase(title="the same GPU, named in two forms", evidence={"n1/syslog": [_XID79.format(node="n1")]},
        context=_history(("n1", "XID-79", "2024-12-20T08:00:00Z", ["00000000:91:00.0"])),
        expect=Expect(fired=True, sub_domain="gpu", culprits=["n1"])),
    RuleCase(title="near miss: another fault on that node", evidence=_ONE_RANKS_GPU,
        context=_history(("n2", "XID-48", "2024-12-29T08:00:00Z", [])),
        expect=Expect(fired=False, sub_domain="gpu", culprits=["n2"], confidence="medium")),
    RuleCase(title="near miss: another GPU of the node", evidence={"n1/syslog": [_XID79.format(node="n1")]},
        context=_history(("n1", "XID-79", "2024-12-20T08:00:00Z", ["0000:3b:00"])),
        expect=Expect(fired=False, sub_domain="gpu", culprits=["n1"])),
    RuleCase(title="near miss: outside the window", evidence=_ONE_RANKS_GPU,
        context=_history(("n2", "CUDA unknown error", "2024-11-20T08:00:00Z", [])),
        expect=Expect(fired=False, culprits=["n2"], confidence="medium")),
    RuleCase(title="near miss: a finding from after this attempt began", evidence=_ONE_RANKS_GPU,
        context=_history(("n2", "CUDA unknown error", "2025-01-01T00:05:00Z", [])),
        expect=Expect(fired=False, culprits=["n2"], confidence="medium")),
    RuleCase(title="near miss: another node's past", evidence=_ONE_RANKS_GPU,
        context=_history(("n1", "CUDA unknown error", "2024-12-29T08:00:00Z", [])),
        expect=Expect(fired=False, culprits=["n2"], confidence="medium")),
])
def history_corroborates_culprit(ws: Workspace) -> None:
    decision = ws.decision
    if not ws.history or decision.history_role:
        return
    for node in sorted(decision.culprits):
        found = {id(f): f for s in decision.culprits[node] for f in prior_findings(ws, s)}
        if not found:
            continue
        findings = [f for f in ws.history if id(f) in found]   # in the history's order
        decision.history[node] = findings
        decision.history_role = "supports"
        ws.note("history", f"{node} had the same fault before: {_cited(findings)}", node=node,
                symptom=findings[0].symptom)


def _restrained_candidates(ws: Workspace) -> list[WorkSymptom]:
    """The node faults a restrained answer is undecided between: the candidates of an `ambiguous` answer when every
    one is a node fault; the node faults of an `unknown` answer set aside only for appearing on several nodes."""
    decision = ws.decision
    if decision.sub_domain == SubDomain.AMBIGUOUS:
        candidates = [s for group in decision.candidates for s in group]
        return candidates if candidates and all(_node_fault(s) for s in candidates) else []
    if decision.sub_domain == SubDomain.UNKNOWN and not ws.active(role="root"):
        return [s for s in ws.select(status="interesting", role="root")
                if s.demoted_by == ONE_NODE_FAULT_RULE and _node_fault(s)]
    return []


@refiner("HistoryChoosesCandidate", phase=Phase.FINAL, after=("DemoteExplained",), doc="""
An `ambiguous` answer between faults of nodes' own hardware, or an `unknown` one whose only root candidates were GPU
faults set aside for appearing on several nodes, names the one candidate node whose past holds the same fault (as
HistoryCorroboratesCulprit counts it): that node's candidates become the root, the others are demoted as
candidates that started together, and confidence is at most medium - the history, not this attempt's evidence,
chose. With two or more such nodes, or none, or a candidate that is not a node fault (a shared filesystem, the
application), the answer stays as it was; a node with a past but no candidate in this attempt is never named.
""", cases=[
    RuleCase(title="a CUDA unknown error on two nodes, one of which had it before", evidence={
        "n1/applog": [_CUDA_UNKNOWN.format(rank=0)],
        "n2/applog": [_CUDA_UNKNOWN.format(rank=8).replace(":00Z", ":01Z", 1)]},
        context=_history(("n1", "CUDA unknown error", "2024-12-28T08:00:00Z", [])),
        expect=Expect(fired=True, sub_domain="gpu", culprits=["n1"], confidence="medium",
                      active=["CUDA unknown error"])),
    RuleCase(title="an Xid and a cable error together; the Xid's node had it before", evidence={
        "a/syslog": [_XID79.format(node="a")], "b/syslog": [_CABLE.format(node="b")]},
        context=_history(("a", "XID-79", "2024-12-15T08:00:00Z", ["0000:91:00"])),
        expect=Expect(fired=True, sub_domain="gpu", culprits=["a"], confidence="medium")),
    RuleCase(title="near miss: both nodes had it before", evidence={
        "n1/applog": [_CUDA_UNKNOWN.format(rank=0)],
        "n2/applog": [_CUDA_UNKNOWN.format(rank=8).replace(":00Z", ":01Z", 1)]},
        context=_history(("n1", "CUDA unknown error", "2024-12-28T08:00:00Z", []),
                         ("n2", "CUDA unknown error", "2024-12-30T08:00:00Z", [])),
        expect=Expect(fired=False, sub_domain="unknown", culprits=[])),
    RuleCase(title="near miss: a healthy workload on a node with a past", evidence={
        "n1/applog": ["2025-01-01T01:00:00Z INFO:torch.distributed.elastic.agent.server.api:[default] worker group "
                      "successfully finished. Waiting 300 seconds for other agents to finish."]},
        context={"scheduler_state": "COMPLETED", "exit_code": "0:0",
                 **_history(("n1", "XID-79", "2024-12-28T08:00:00Z", []))},
        expect=Expect(fired=False, sub_domain="none", culprits=[])),
    RuleCase(title="near miss: the node with a past has no candidate here", evidence={"n1/applog": [_WATCHDOG]},
        context={"nodes": ["n1", "n2"], **_history(("n2", "CUDA unknown error", "2024-12-28T08:00:00Z", []))},
        expect=Expect(fired=False, sub_domain="unknown", culprits=[])),
    RuleCase(title="near miss: undecided between a GPU and the application", evidence={
        "a/syslog": [_XID79.format(node="a")],
        "b/applog": ["2025-01-01T00:10:30Z [rank8]: OSError: [Errno 28] No space left on device"]},
        context=_history(("a", "XID-79", "2024-12-15T08:00:00Z", [])),
        expect=Expect(fired=False, sub_domain="ambiguous", culprits=[])),
])
def history_chooses_candidate(ws: Workspace) -> None:
    if not ws.history:
        return
    candidates = _restrained_candidates(ws)
    supported = {id(s): found for s in candidates if (found := prior_findings(ws, s))}
    nodes = sorted({node for s in candidates if id(s) in supported and (node := ws.canonical_node(s.node))})
    if len(nodes) != 1:
        return
    node = nodes[0]
    chosen = sorted((s for s in candidates if id(s) in supported), key=WorkSymptom.sort_key)
    chosen_ids = {id(f) for s in chosen for f in supported[id(s)]}
    findings = [f for f in ws.history if id(f) in chosen_ids]
    decision = ws.decision
    for s in chosen:
        ws.promote(s, f"{node} had the same fault before: {_cited(findings)}")
    decision.root, decision.sub_domain, decision.decided_by = chosen, chosen[0].sub_domain, ws.rule
    decision.culprits, decision.candidates = {node: chosen}, []
    decision.history, decision.history_role = {node: findings}, "chooses"
    ws.note("decide", f"{chosen[0].sub_domain.value}: of the candidate nodes only {node} had {chosen[0].name} "
            f"before ({_cited(findings)})", node=node, symptom=chosen[0].name)
    for s in candidates:
        if id(s) not in supported:
            ws.demote(s, f"a candidate that started together with {chosen[0].name} on {node}, which had the same "
                      "fault before")
    demote_explained(ws)
