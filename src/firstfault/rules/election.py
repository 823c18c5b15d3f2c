"""Which candidates may be the root (REFINE_EARLY: after the workload ended, survived by training), the root-cause
election (FINAL), the systemic guard, and demotion of everything the root explains.

The first fault in time wins among root candidates. Candidates whose first times lie within the clock-skew
tolerance of the earliest one started together, and so do candidates without a time of their own (they may
have happened at any point); among those, kernel and hardware facts outrank what an application reports
about them (strength), and if candidates of different sub_domains are still tied the answer is `ambiguous`
with every candidate listed. Downstream symptoms (timeouts, remote errors, exits) are the root only when no
root candidate exists, and then the answer names no node.
"""

from __future__ import annotations

import itertools
import re
from datetime import datetime, timedelta

from firstfault.engine.model import Event, SourceKind, SubDomain, TerminalState, recorded_state
from firstfault.engine.rules_api import Expect, Phase, RuleCase, refiner
from firstfault.engine.workspace import Workspace, WorkSymptom

# Two candidates whose strengths differ by less than this are peers: neither outranks the other.
STRENGTH_MARGIN = 10
# Faults of a node's own devices: the same one on every node of a small job can still be a coincidence.
HARDWARE = frozenset({SubDomain.GPU, SubDomain.NVLINK, SubDomain.NETWORK, SubDomain.HOST})
# A node's own reports of its fabric port going down (InfiniBand/RoCE, Slingshot): the NIC's state, whatever stream
# printed it.
LINK_DOWN_EVENTS = ("IB port error", "IB link down", "Slingshot link down")


def blamed_nodes(ws: Workspace, s: WorkSymptom) -> list[str]:
    """Allocated nodes a symptom blames: its own node (blame=node) or the nodes named or resolved (peer)."""
    if s.definition.blame == "node":
        names = {s.node} if s.node else set()
    elif s.definition.blame == "peer":
        names = s.value_set("blamed_node")
    else:
        return []
    return sorted({n for n in (ws.canonical_node(name) for name in names) if n})


def resolve_peer(ws: Workspace, peer: str) -> str | None:
    """The allocated node an address or host name a line names is, by the evidence's own address lines."""
    return ws.facts.get("host_to_node", {}).get(peer) or ws.canonical_node(peer)


def named_peers(ws: Workspace, s: WorkSymptom) -> set[str]:
    """The allocated nodes a symptom names as its peer (by address, through the NCCL interface and GID lines, or
    name): the socket peer, and the RDMA peer of a RoCE queue pair (its remote GID's IPv4 address)."""
    peers = {resolve_peer(ws, p) for p in s.value_set("peer") | s.value_set("peer_rdma")}
    return {p for p in peers if p and p != s.node}


def _start(ws: Workspace, s: WorkSymptom) -> datetime | None:
    return None if ws.undated(s) else s.first_time


def _concurrent(ws: Workspace, candidates: list[WorkSymptom]) -> list[WorkSymptom]:
    starts = [t for t in (_start(ws, s) for s in candidates) if t is not None]
    if not starts:
        return candidates
    t0 = min(starts)
    window = t0 + timedelta(seconds=ws.params.clock_skew_s)
    return [s for s in candidates if (_start(ws, s) or t0) <= window]


def _group_order(s: WorkSymptom) -> tuple[object, ...]:
    # Within one cause: earliest first; at the same time, the most specific (strongest) report first.
    t = s.first_time
    return (t is None, t.timestamp() if t else 0.0, -s.definition.strength, s.node or "", s.name)


def _groups(symptoms: list[WorkSymptom]) -> list[list[WorkSymptom]]:
    by_domain: dict[SubDomain, list[WorkSymptom]] = {}
    for s in symptoms:
        by_domain.setdefault(s.sub_domain, []).append(s)
    groups = [sorted(g, key=_group_order) for g in by_domain.values()]
    return sorted(groups, key=lambda g: _group_order(g[0]))


def _decide(ws: Workspace, root: list[WorkSymptom], sub_domain: SubDomain, why: str, *, blame: bool = True) -> None:
    d = ws.decision
    d.root, d.sub_domain, d.decided_by = root, sub_domain, ws.rule
    d.culprits = {}
    if blame:
        for s in root:
            for node in blamed_nodes(ws, s):
                d.culprits.setdefault(node, []).append(s)
    ws.note("decide", f"{sub_domain.value}: {why}", node=root[0].node if root else None,
            symptom=root[0].name if root else None)


def _concerns(ws: Workspace, s: WorkSymptom) -> set[str]:
    """The nodes a candidate is about: where it was seen and whom it blames (empty: job-wide). A scheduler's record
    is about the job, wherever it was printed (a batch host's 'DUE TO NODE FAILURE'): only a node it names counts."""
    if s.sub_domain == SubDomain.SCHEDULER:
        return set(blamed_nodes(ws, s))
    return ({s.node} if s.node else set()) | set(blamed_nodes(ws, s))


def _not_outranked(ws: Workspace, concurrent: list[WorkSymptom]) -> list[WorkSymptom]:
    """The candidates no stronger report of the same incident started together with: one about the same nodes,
    or a job-wide one. Strength ranks reports of one incident (the kernel's Xid over the application's CUDA error);
    it cannot tell which of two faults on different nodes began the failure.

    Linear in the candidates: the strongest rival of a candidate is the strongest job-wide candidate, or the
    strongest candidate about one of its nodes (a candidate never outranks itself: STRENGTH_MARGIN > 0)."""
    concerns = [_concerns(ws, s) for s in concurrent]
    strongest = max((s.definition.strength for s in concurrent), default=0)
    job_wide = max((s.definition.strength for s, nodes in zip(concurrent, concerns, strict=True) if not nodes),
                   default=None)
    by_node: dict[str, int] = {}
    for s, nodes in zip(concurrent, concerns, strict=True):
        for node in nodes:
            by_node[node] = max(by_node.get(node, s.definition.strength), s.definition.strength)
    leading = []
    for s, nodes in zip(concurrent, concerns, strict=True):
        rival = strongest if not nodes else max([by_node[n] for n in nodes] + ([] if job_wide is None else [job_wide]))
        if rival < s.definition.strength + STRENGTH_MARGIN:
            leading.append(s)
    return leading


def _elect_among_roots(ws: Workspace, roots: list[WorkSymptom]) -> None:
    concurrent = _concurrent(ws, roots)
    leading = _not_outranked(ws, concurrent)
    kept = {id(s) for s in leading}
    outranked = sorted({s.name for s in concurrent if id(s) not in kept})
    if outranked:
        ws.note("rank", "outranked by a stronger candidate that started together: " + ", ".join(outranked))
    groups = _groups(leading)
    if len(groups) == 1:
        group = groups[0]
        _decide(ws, group, group[0].sub_domain, f"{group[0].name} on {group[0].node or '-'} is the first fault")
        return
    one_node = set().union(*(_concerns(ws, s) for s in leading))
    if len(one_node) == 1 and all(g[0].sub_domain in HARDWARE for g in groups):
        # two hardware reports of one node at once are one incident seen twice (a device and the bus under it): the
        # node is at fault either way, and the report with a time of its own dates it
        group = min(groups, key=lambda g: (_start(ws, g[0]) is None, _group_order(g[0])))
        _decide(ws, group, group[0].sub_domain, f"{group[0].name} on {group[0].node or '-'} is the first fault; "
                f"{', '.join(g[0].name for g in groups if g is not group)} on the same node started with it")
        return
    ws.decision.candidates = groups
    _decide(ws, [g[0] for g in groups], SubDomain.AMBIGUOUS,
            "unrelated root candidates started together: " + ", ".join(g[0].name for g in groups), blame=False)


@refiner("ElectRootCause", phase=Phase.FINAL, after=("RendezvousNeverCompleted", "StallReportedByTheProgram"), doc="""
Elect the root cause among the active (bad) symptoms. Root candidates that started within clock_skew_s of the
earliest one (or have no time of their own) are considered together. Among reports of one incident (about the
same nodes, or job-wide) the strongest win (hardware and kernel facts first); faults on different nodes are
independent and none outranks another. If several sub_domains remain, the result is ambiguous with all of them
as candidates and no node is blamed. Without any root candidate, the earliest remaining downstream
symptom is cited with its own sub_domain and no node is blamed; with no failure evidence at all the result is
none for a completed job - recorded COMPLETED by the scheduler or, when no scheduler state was recorded (a bare
mpirun, torchrun or DeepSpeed launch), reported complete by the workload itself or exited 0 - and unknown otherwise.
""", cases=[
    RuleCase(title="two unrelated roots at once", evidence={
        "a/applog": ["2025-01-01T00:10:00Z [rank0]: torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB. GPU 0 has a total capacity of 79.10 GiB of which 1.00 MiB is free."],
        "b/applog": ["2025-01-01T00:10:30Z [rank8]: OSError: [Errno 28] No space left on device"]},
        expect=Expect(sub_domain="ambiguous", culprits=[])),
    RuleCase(title="first in time wins", evidence={
        "a/applog": ["2025-01-01T00:10:00Z [rank0]: torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB. GPU 0 has a total capacity of 79.10 GiB of which 1.00 MiB is free."],
        "b/applog": ["2025-01-01T00:30:00Z [rank8]: OSError: [Errno 28] No space left on device"]},
        expect=Expect(sub_domain="gpu_oom", culprits=[], root_symptom="CUDA out of memory")),
    RuleCase(title="hardware outranks the application report", evidence={
        "a/syslog": ["Jan  1 00:10:00 a kernel: NVRM: Xid (PCI:0000:91:00): 79, pid='<unknown>', name=<unknown>, GPU has fallen off the bus."],
        "a/applog": ["2025-01-01T00:10:01Z [rank0]: RuntimeError: CUDA error: an illegal memory access was encountered"]},
        expect=Expect(sub_domain="gpu", culprits=["a"], root_symptom="XID-79")),
    RuleCase(title="only timeouts", evidence={"a/applog": [
        "2025-01-01T00:40:00Z [rank8]:[E0101 00:40:00.000000000 ProcessGroupNCCL.cpp:1] [Rank 8] Watchdog caught collective operation timeout: WorkNCCL(SeqNum=9, OpType=ALLREDUCE, NumelIn=1, NumelOut=1, Timeout(ms)=600000) ran for 600010 milliseconds before timing out."]},
        expect=Expect(sub_domain="unknown", culprits=[], root_symptom="NCCL watchdog timeout")),
    RuleCase(title="hardware faults on two nodes together", evidence={
        "a/syslog": ["Jan  1 00:10:00 a kernel: NVRM: Xid (PCI:0000:91:00): 79, pid='<unknown>', name=<unknown>, GPU has fallen off the bus."],
        "b/syslog": ["Jan  1 00:10:20 b kernel: [5308538.6] mlx5_core 0000:9a:00.0: mlx5_port_module_event:1147:(pid 0): Port module event[error]: module 4, Cable error, High Temperature"]},
        expect=Expect(sub_domain="ambiguous", culprits=[])),
    RuleCase(title="no scheduler, the launcher reports success", evidence={"a/applog": [
        "2025-01-01T01:00:00Z INFO:torch.distributed.elastic.agent.server.api:[default] worker group successfully finished. Waiting 300 seconds for other agents to finish."]},
        context={"scheduler": "none", "scheduler_state": "", "exit_code": ""},
        expect=Expect(sub_domain="none", culprits=[], terminal_state="COMPLETED")),
    # https://github.com/sgl-project/sglang/issues/17402 (the server started on the host and answered its smoke test)
    RuleCase(title="no scheduler, the launcher exited 0, nothing failed", evidence={"a/applog": [
        "[2026-01-20 10:50:10] INFO:     Application startup complete.",
        "[2026-01-20 10:52:04] INFO:     Finished server process [4096937]"]},
        context={"scheduler": "none", "scheduler_state": "", "exit_code": "0"},
        expect=Expect(sub_domain="none", culprits=[], terminal_state="COMPLETED")),
    RuleCase(title="no scheduler; a step reports success, then the program raises", evidence={"a/applog": [
        "2025-01-01T01:00:00Z   Exit Code: 0",
        "2025-01-01T01:00:14Z RuntimeError: [enforce fail at inline_container.cc:664] . unexpected pos 704 vs 598"]},
        context={"scheduler": "none", "scheduler_state": "", "exit_code": ""},
        expect=Expect(sub_domain="storage", culprits=[], terminal_state="FAILED")),
    # https://github.com/saforem2/ezpz/blob/main/docs/cli/test.md (the test's closing line); the first launch's import
    # error, printed without a stamp, before the rerun that trained
    RuleCase(title="no scheduler, exit 0; an unstamped exception printed before the completion", evidence={"a/applog": [
        "ImportError: libtorch-xpu-ops-sycl-ZetaKernel.so: undefined symbol: _ZN4sycl3_V17handler",
        "[2025-01-01 00:57:37,049349][I][examples.test_dist/ezpz:218:test_dist.__main__] iter=900 loss=10944.000000",
        "[2025-01-01 00:58:20,767159][I][examples.test_dist/ezpz:311:test_dist.__main__] Took: 26.77 seconds to finish "
        "training"]},
        context={"scheduler": "none", "scheduler_state": "", "exit_code": "0"},
        expect=Expect(sub_domain="none", culprits=[], terminal_state="COMPLETED")),
    RuleCase(title="no scheduler and no success report", evidence={"a/applog": [
        "2025-01-01T01:00:00Z [rank0]: step 100 loss 2.31"]},
        context={"scheduler": "none", "scheduler_state": "", "exit_code": ""},
        expect=Expect(sub_domain="unknown", culprits=[])),
])
def elect_root_cause(ws: Workspace) -> None:
    roots = ws.active(role="root")
    if roots:
        _elect_among_roots(ws, roots)
        return
    downstream = sorted(ws.active(role="symptom"), key=WorkSymptom.sort_key)
    if downstream:
        first = downstream[0]
        _decide(ws, [first], first.sub_domain,
                f"no root candidate; {first.name} is the earliest failure signal and names no node", blame=False)
        return
    recorded = ws.decision.terminal_state or recorded_state(ws.context)
    reported = recorded == TerminalState.UNKNOWN and bool(ws.select(prefix="Workload completed"))
    if reported and raised_after_completion(ws):
        _decide(ws, [], SubDomain.UNKNOWN, "a completion was reported, but a process ended in an uncaught exception "
                "after it: the workload did not complete, and nothing says why")
    elif recorded == TerminalState.COMPLETED or reported:
        _decide(ws, [], SubDomain.NONE, "the workload completed and no failure evidence remains")
    elif recorded == TerminalState.UNKNOWN and exited_zero_unrecorded(ws):
        _decide(ws, [], SubDomain.NONE, "no scheduler recorded a state, the workload's launcher exited 0 and no failure "
                "evidence remains")
    else:
        _decide(ws, [], SubDomain.UNKNOWN, "no failure evidence in the available logs")


def raised_after_completion(ws: Workspace) -> bool:
    """A process ended in an uncaught exception (fact program_raised) after the last completion report: what completed
    was a step of the workload, not the workload. An exception line without a stamp of its own, in a stream that also
    holds a report, is placed by its order there, not by the time it inherited."""
    reports = ws.select(prefix="Workload completed")
    last = max((t for s in reports for t in (s.last_time or s.first_time,) if t), default=None)
    if last is None:
        return False
    for fact in ws.facts_of("program_raised"):
        line = fact.evidence
        beside = [e for s in reports for e in s.evidence if e.provenance.origin == line.provenance.origin]
        if line.time_inferred and beside:
            if line.provenance.line is not None and all(
                    e.provenance.line is not None and e.provenance.line < line.provenance.line for e in beside):
                return True
        elif fact.time is not None and fact.time > last:
            return True
    return False


@refiner("SystemicGuard", phase=Phase.FINAL, after=("ElectRootCause",), doc="""
When the elected root is blamed on more than systemic_share of the job's nodes (and at least
systemic_min_nodes), the cause is shared (fabric, filesystem, image, configuration) and no single node is
blamed: draining most of a job's nodes on one signature would do more harm than good. A fault that is not the
hardware's (a full scratch disk, a setting) blamed on every node of a multi-node job is shared too, however few the
nodes: two nodes failing the same way at once is their common setting, not two broken nodes. So is a failure to set a
device or fabric up (a symptom marked `setup`: NVLink SHARP's multicast set-up, GPUs busy or unavailable to CUDA) on
every node, and its sub_domain becomes configuration: the devices are fine, the way every node sets them up is not.
Nodes the scheduler declared failed together with no fault of their own on record (the root is the scheduler's
node-failure report, naming two or more of its nodes, or systemic_min_nodes nodes counting those of other jobs the same
report names) lost something they share - a power feed, a switch, the controller's reach to them - more likely than
each its own hardware: none is blamed. So did nodes whose network links all failed in the same moment (within the
clock-skew tolerance), every node of the job: their switch went down or was reconfigured. The client of one shared
filesystem failing on two or more of the job's nodes (expelled, its daemon down) is that filesystem's trouble - its
managers, its recovery, its network - reaching several clients, not each node's own: none is blamed.
""", cases=[
    # https://www.ibm.com/support/pages/node/1274428 (Storage Scale's log recovery asserting on whichever node runs it)
    RuleCase(title="the Storage Scale daemon goes down on two of four nodes, one after the other", evidence={
        f"{n}/syslog": [f"Jan  1 00:1{i}:47 {n} mmfs[5123]: [X] The mmfs daemon is shutting down abnormally."]
        for i, n in enumerate(("n0", "n1"))},
        context={"nodes": ["n0", "n1", "n2", "n3"]}, expect=Expect(fired=True, culprits=[], sub_domain="storage")),
    RuleCase(title="the Storage Scale daemon goes down on one node", evidence={
        "n0/syslog": ["Jan  1 00:10:47 n0 mmfs[5123]: [X] The mmfs daemon is shutting down abnormally."]},
        context={"nodes": ["n0", "n1", "n2", "n3"]}, expect=Expect(fired=False, culprits=["n0"], sub_domain="storage")),
    RuleCase(title="the RoCE links of both nodes go down in the same second", evidence={
        f"n{i}/syslog": [f"Jan  1 00:10:07 n{i} kernel: [625205.000000] mlx5_core 0000:0c:00.0 enp12s0f0np0: Link down"]
        for i in range(2)},
        context={"nodes": ["n0", "n1"]}, expect=Expect(fired=True, culprits=[], sub_domain="network")),
    RuleCase(title="one node's link down, the other's minutes later", evidence={
        "n0/syslog": ["Jan  1 00:10:07 n0 kernel: [625205.000000] mlx5_core 0000:0c:00.0 enp12s0f0np0: Link down"],
        "n1/syslog": ["Jan  1 00:19:41 n1 kernel: [614405.300000] mlx5_core 0000:0c:00.0 enp12s0f0np0: Link down"]},
        context={"nodes": ["n0", "n1"]}, expect=Expect(fired=False, culprits=["n0"], sub_domain="network")),
    RuleCase(title="same xid everywhere", evidence={
        f"n{i}/syslog": [f"Jan  1 00:10:0{i} n{i} kernel: NVRM: Xid (PCI:0000:91:00): 79, pid='<unknown>', name=<unknown>, GPU has fallen off the bus."]
        for i in range(4)},
        expect=Expect(fired=True, culprits=[], sub_domain="gpu")),
    RuleCase(title="the container store full on both nodes", evidence={
        f"n{i}/applog": ["2025-01-01T00:10:00Z slurmstepd: error: pyxis:     Write failed because No space left on "
                         "device"] for i in range(2)},
        context={"nodes": ["n0", "n1"]}, expect=Expect(fired=True, culprits=[], sub_domain="storage")),
    RuleCase(title="an Xid on both nodes of a two-node job", evidence={
        f"n{i}/syslog": [f"Jan  1 00:10:0{i} n{i} kernel: NVRM: Xid (PCI:0000:91:00): 79, pid='<unknown>', "
                         "name=<unknown>, GPU has fallen off the bus."] for i in range(2)},
        context={"nodes": ["n0", "n1"]}, expect=Expect(fired=False, culprits=["n0", "n1"], sub_domain="gpu")),
    # https://github.com/ovro-lwa/lwa-issues/issues/137 (two servers on one power strip went down together)
    RuleCase(title="Slurm declares two nodes down in the same second, with nothing in their logs", evidence={
        "n0/scheduler": ["[2025-01-01T00:20:00.000] error: Nodes n2 not responding, setting DOWN",
                         "[2025-01-01T00:20:00.000] error: Nodes n3 not responding, setting DOWN"]},
        context={"nodes": ["n0", "n1", "n2", "n3"], "scheduler_state": "NODE_FAIL", "exit_code": "0:0"},
        expect=Expect(fired=True, culprits=[], sub_domain="scheduler")),
    # https://github.com/Azure/cyclecloud-slurm/pull/30 (pings fanned out through slurmd timed out: fifty nodes declared
    # at once, one of them the workload's, back a minute later)
    RuleCase(title="Slurm declares one of our nodes down with forty-nine others", evidence={
        "n0/scheduler": ["[2025-01-01T00:20:00.000] error: Nodes n2,x[51-99] not responding, setting DOWN"]},
        context={"nodes": ["n0", "n1", "n2", "n3"], "scheduler_state": "NODE_FAIL", "exit_code": "0:0"},
        expect=Expect(fired=True, culprits=[], sub_domain="scheduler")),
    RuleCase(title="Slurm declares one node down", evidence={
        "n0/scheduler": ["[2025-01-01T00:20:00.000] error: Nodes n2 not responding, setting DOWN"]},
        context={"nodes": ["n0", "n1", "n2", "n3"], "scheduler_state": "NODE_FAIL", "exit_code": "0:0"},
        expect=Expect(fired=False, culprits=["n2"], sub_domain="scheduler")),
    RuleCase(title="NVLink SHARP set-up failing on both nodes", evidence={
        f"n{i}/applog": [f"2025-01-01T00:10:0{i}Z n{i}:5100:5411 [0] transport/nvls.cc:150 NCCL WARN Cuda failure 1 "
                         "'invalid argument'"] for i in range(2)},
        context={"nodes": ["n0", "n1"]}, expect=Expect(fired=True, culprits=[], sub_domain="configuration")),
])
def systemic_guard(ws: Workspace) -> None:
    culprits = ws.decision.culprits
    total = len(ws.context.nodes)
    if not culprits or total == 0:
        return
    setup_everywhere = (total >= 2 and len(culprits) == total and ws.decision.sub_domain in HARDWARE
                        and all(s.definition.setup for s in ws.decision.root))
    everywhere = total >= 2 and len(culprits) == total and ws.decision.sub_domain not in HARDWARE
    # the scheduler's node-failure reports also name nodes outside the workload: its other jobs' nodes lost with it
    declared = {n for r in ws.decision.root for n in r.value_set("blamed_node")}
    lost_together = ws.decision.sub_domain == SubDomain.SCHEDULER and (
        len(culprits) >= 2 or len(declared) >= ws.params.systemic_min_nodes)
    links_together = (total >= 2 and len(culprits) == total and ws.decision.sub_domain == SubDomain.NETWORK
                      and _all_at_once(ws, ws.decision.root))
    clients_together = len(culprits) >= 2 and all(
        s.name == _CLIENT_FAILED for found in culprits.values() for s in found)
    if clients_together:
        ws.note("systemic", f"{_CLIENT_FAILED} on {len(culprits)} nodes: the shared filesystem's trouble reached several "
                "of its clients; no node is blamed")
        ws.decision.culprits = {}
    elif links_together:
        ws.note("systemic", f"{ws.decision.root[0].name} on all {total} nodes in the same moment: the switch or fabric "
                "they share changed, not each node's NIC; no node is blamed")
        ws.decision.culprits = {}
    elif lost_together:
        ws.note("systemic", f"the scheduler declared {max(len(culprits), len(declared))} nodes failed together, none "
                "with a fault of its own on record: a cause they share (power, a switch, the controller's reach), no "
                "single node is blamed")
        ws.decision.culprits = {}
    elif setup_everywhere:
        ws.note("systemic", f"{ws.decision.root[0].name} on all {total} nodes: a device set-up every node failed "
                "alike is their common setup (configuration), no node is blamed")
        ws.decision.culprits = {}
        ws.decision.sub_domain = SubDomain.CONFIGURATION
    elif everywhere or (len(culprits) >= ws.params.systemic_min_nodes
                        and len(culprits) > ws.params.systemic_share * total):
        ws.note("systemic", f"{ws.decision.root[0].name} blames {len(culprits)} of {total} nodes: "
                "a shared cause, no single node is blamed")
        ws.decision.culprits = {}


_CLIENT_FAILED = "Node's filesystem client failed"


def _all_at_once(ws: Workspace, reports: list[WorkSymptom]) -> bool:
    """Every report carries a time of its own and they all began within the clock-skew tolerance of each other."""
    times = [s.first_time for s in reports if not ws.undated(s) and s.first_time is not None]
    return bool(times) and len(times) == len(reports) and max(times) - min(times) <= timedelta(
        seconds=ws.params.clock_skew_s)


@refiner("DemoteExplained", phase=Phase.FINAL, after=("SystemicGuard",), doc="""
After the election, every other bad symptom is demoted to interesting evidence with the reason: downstream of
the root, later than the root, or outranked by it. Provenance is kept, so the cascade stays inspectable. Later
reports of the same sub_domain on the root's node corroborate the root and are cited with it.
""", cases=[
    RuleCase(title="walkthrough cascade", evidence={
        "n2/syslog": ["Jan  1 00:10:00 n2 kernel: NVRM: Xid (PCI:0000:91:00): 79, pid='<unknown>', name=<unknown>, GPU has fallen off the bus."],
        "n1/applog": ["2025-01-01T00:20:01Z [rank0]:[E0101 00:20:01.000000000 ProcessGroupNCCL.cpp:1] [Rank 0] Watchdog caught collective operation timeout: WorkNCCL(SeqNum=9, OpType=ALLREDUCE, NumelIn=1, NumelOut=1, Timeout(ms)=600000) ran for 600010 milliseconds before timing out."]},
        expect=Expect(fired=True, demoted=["NCCL watchdog timeout"], active=["XID-79"])),
])
def demote_explained(ws: Workspace) -> None:
    decision = ws.decision
    if decision.sub_domain in (SubDomain.AMBIGUOUS, SubDomain.NONE):
        return
    lead = decision.root[0] if decision.root else None
    if lead is None or lead.role != "root":  # no root cause found: nothing explains the rest
        return
    keep = {id(s) for s in decision.root}
    root_nodes = {r.node for r in decision.root}
    for s in ws.active():
        if id(s) in keep:
            continue
        if s.role == "symptom" and _began_before(ws, s, lead):
            reason = f"began before the root cause {lead.name} on {lead.node or '-'}, but names no cause of its own"
        elif s.role == "symptom":
            reason = f"downstream of the root cause {lead.name} on {lead.node or '-'}"
        elif s.first_time and lead.first_time and s.first_time > lead.first_time:
            reason = f"started after the root cause {lead.name}"
            if s.sub_domain == lead.sub_domain and s.node in root_nodes:
                decision.corroborating.append(s)  # the same fault reported again later on that node
        else:
            reason = f"outranked by {lead.name} ({lead.sub_domain.value}), which started at the same time"
        ws.demote(s, reason)


def _began_before(ws: Workspace, s: WorkSymptom, lead: WorkSymptom) -> bool:
    """A downstream symptom dated earlier than the root cause by more than the clock-skew tolerance (a hang that the
    scheduler's action only ended)."""
    first, root = _start(ws, s), _start(ws, lead)
    return first is not None and root is not None and first < root - timedelta(seconds=ws.params.clock_skew_s)


@refiner("AfterTheEnd", phase=Phase.REFINE_EARLY, doc="""
A fault that began after the workload ended (later than its end time by more than clock_skew_s, on the line's own
time) cannot have ended it: on a shared or reused node it belongs to whatever ran next. It stays as evidence, never
as the root cause.
""", cases=[
    RuleCase(title="an Xid of the next job", evidence={
        "a/syslog": ["Jan  1 02:07:00 a kernel: NVRM: Xid (PCI:0000:91:00): 13, pid=1, name=python3, Graphics SM Warp Exception on (GPC 4, TPC 1, SM 0): Out Of Range Address"],
        "b/applog": ["2025-01-01T01:59:58Z slurmstepd: error: *** JOB 1 ON b CANCELLED AT 2025-01-01T01:59:58 DUE TO TIME LIMIT ***"]},
        context={"scheduler_state": "TIMEOUT", "exit_code": "0:0"},
        expect=Expect(fired=True, sub_domain="scheduler", terminal_state="TIMEOUT", demoted=["XID-13"])),
    RuleCase(title="a fault at the end, within the tolerance", evidence={
        "a/syslog": ["Jan  1 02:01:00 a kernel: NVRM: Xid (PCI:0000:91:00): 79, pid=1, name=x, GPU has fallen off the bus."]},
        expect=Expect(fired=False, sub_domain="gpu", culprits=["a"])),
])
def after_the_end(ws: Workspace) -> None:
    end = ws.context.end_time
    if end is None:
        return
    limit = end + timedelta(seconds=ws.params.clock_skew_s)
    for s in ws.active():
        if s.first_time is not None and not ws.undated(s) and s.first_time > limit:
            minutes = (s.first_time - end).total_seconds() / 60
            ws.demote(s, f"began {minutes:.0f} min after the workload ended: it cannot have ended it")


NEVER_PLACED = "Pod could not be placed on any node"
# What kept a workload from starting at all: no node for a pod, a node whose device plugin failed to admit the pod, or
# a queue that can never admit it.
NOT_STARTED = (NEVER_PLACED, "Device plugin failed to allocate", "Workload larger than its queue's capacity")


@refiner("BeforeTheStart", phase=Phase.REFINE_EARLY, after=("AfterTheEnd",), doc="""
A fault that a node's system log recorded before the workload started (earlier than its start by more than
clock_skew_s) happened under whatever ran then. It can explain this workload's failure through what it left broken
on its node, so it stays a candidate while the run's own failures are on that node only, or are of its own kind (a
fabric manager that failed at boot, then CUDA refusing to start on the fabric: what it left broken). When a root
candidate of the run of another kind (not a scheduler action, which only ends a run, nor a pod that never started: left
without a node, or refused by its node's device plugin) began on another node too (a
shared cause, or another node's fault; not a peer's network error naming this node, which is this node's loss as its
peers saw it), the earlier fault is demoted and stays as evidence. The workload's own output
is of the run even where its lines carry no time. A host OOM kill before the start killed a process of whatever ran
then and freed its memory: when the run's own failure on that node is of another kind, that failure is the run's, and
the kill is demoted too. A node the scheduler declared failed or rebooted before the start, and Ready again before
it (`Kubernetes node ready again`), was back when the workload came: that failure is not the run's, and is demoted.
So was a node slurmctld set DOWN or found rebooted before a Slurm job's start: Slurm allocates only nodes in service,
and it allocated that node to the job. A network port that failed before the start is not demoted for a failure that
every node met at once (connections set up nowhere, as one dead port leaves them). Where no scheduler recorded a
state and the run then reported its own completion with no failure of its own (a port without a cable at boot, then
nccl-tests' closing summary), the earlier fault did not end it, and is demoted.
""", cases=[
    # https://github.com/Open-CAS/open-cas-linux/issues/570 (a cache disk missing after reboot; the peers lost that node)
    RuleCase(title="a node's cache disk missing since boot; its peers' RDMA errors name it", evidence={
        "b/syslog": ["Dec 31 23:31:39 b kernel: cache2: Core core1 inactive (device not available), cache is incomplete"],
        "b/applog": ["2025-01-01T00:00:01Z b:1:1 [0] NCCL INFO Bootstrap : Using ib0:10.50.1.12<0>"],
        "a/applog": ["2025-01-01T00:00:01Z a:1:1 [0] NCCL INFO Bootstrap : Using ib0:10.50.1.11<0>",
                     "2025-01-01T00:00:20Z a:1:1 [0] transport/net_ib.cc:1000 NCCL WARN NET/IB : Got completion from "
                     "peer 10.50.1.12<52017> with error 12, opcode 0, len 0, vendor err 129"]},
        context={"nodes": ["a", "b"], "start_time": "2025-01-01T00:00:00Z", "end_time": "2025-01-01T00:05:00Z"},
        expect=Expect(fired=False, sub_domain="storage", culprits=["b"])),
    # https://github.com/volcano-sh/volcano/issues/2473 (a dead GPU left on a node broke the GPU-share plugin's
    # admission of pods bound there: 'failed to find gpu id'; the event printed where kubectl ran)
    RuleCase(title="a GPU lost before the start; pods then refused by the device plugin", evidence={
        "b/syslog": ["Dec 31 23:52:18 b kernel: [38190.552062] NVRM: Xid (PCI:0000:1a:00): 79, pid=28411, GPU has fallen "
                     "off the bus."],
        "a/scheduler": ["2025-01-01T00:00:05Z   Warning   UnexpectedAdmissionError   pod/job-worker-2   Allocate failed "
                        "due to rpc error: code = Unknown desc = failed to find gpu id, which is unexpected"]},
        context={"nodes": ["a", "b"], "start_time": "2025-01-01T00:00:00Z", "end_time": "2025-01-01T00:05:00Z"},
        expect=Expect(fired=False, sub_domain="gpu", culprits=["b"])),
    # https://github.com/docker/for-linux/issues/1062's setting (a node rebooted by kured, Ready again, then given a pod)
    RuleCase(title="a node rebooted and Ready again before the start; its runtime then fails the pod", evidence={
        "b/scheduler": ["2024-12-31T23:58:53Z   Warning  Rebooted   node/b   Node b has been rebooted, boot id: 6c1b4e0a",
                        "2024-12-31T23:59:24Z   Normal   NodeReady  node/b   Node b status is now: NodeReady"],
        "b/syslog": ["Jan  1 00:02:27 b kernel: [  247.436380] Out of memory: Killed process 1187 (containerd) "
                     "total-vm:1642548kB, anon-rss:81234kB, file-rss:0kB, shmem-rss:0kB, UID:0 pgtables:512kB "
                     "oom_score_adj:-999"]},
        context={"nodes": ["a", "b"], "scheduler": "kubernetes", "scheduler_state": "Failed", "exit_code": "",
                 "start_time": "2025-01-01T00:01:05Z", "end_time": "2025-01-01T01:01:07Z"},
        expect=Expect(fired=True, demoted=["Kubernetes node failure"])),
    # https://github.com/togethercomputer/together-dgxc-benchmarking (tests/b200/worklog/2026-04-15_rebenchmark_report.md:
    # bad nodes that had been down and were back in service, then failed jobs on their own local state)
    RuleCase(title="slurmctld set a node DOWN before the job it was then allocated to", evidence={
        "a/scheduler": ["[2024-12-31T23:11:12.118] error: Nodes b not responding, setting DOWN",
                        "[2024-12-31T23:32:37.906] validate_node_specs: Node b unexpectedly rebooted "
                        "boot_time=1735687957 last response=1735686672",
                        "[2025-01-01T00:00:00.000] sched: Allocate JobId=7 NodeList=a,b #CPUs=64 Partition=batch",
                        "[2025-01-01T00:03:00.000] _job_complete: JobId=7 WEXITSTATUS 1"],
        "b/applog": ["2025-01-01T00:02:10Z [rank8]: FileNotFoundError: [Errno 2] No such file or directory: "
                     "'/tmp/pymp-3o1xk2_z'"]},
        context={"nodes": ["a", "b"], "scheduler": "slurm", "scheduler_state": "FAILED", "exit_code": "1:0",
                 "start_time": "2025-01-01T00:00:00Z", "end_time": "2025-01-01T00:03:00Z"},
        expect=Expect(fired=True, demoted=["Slurm node failure"])),
    RuleCase(title="a node rebooted before the start and not Ready again", evidence={
        "b/scheduler": ["2024-12-31T23:58:53Z   Warning  Rebooted   node/b   Node b has been rebooted, boot id: 6c1b4e0a"]},
        context={"nodes": ["a", "b"], "scheduler": "kubernetes", "scheduler_state": "Failed", "exit_code": "",
                 "start_time": "2025-01-01T00:01:05Z", "end_time": "2025-01-01T01:01:07Z"},
        expect=Expect(fired=False, active=["Kubernetes node failure"])),
    RuleCase(title="the fabric manager failed at boot; the run's CUDA then fails on the fabric, on every node", evidence={
        "b/syslog": ["Dec 31 23:51:02 b nv-fabricmanager[3228]: fabric manager NVIDIA GPU driver interface version "
                     "530.30.02 don't match with driver version 530.41.03. Please update with matching NVIDIA driver "
                     "package."],
        "a/applog": ["2025-01-01T00:00:50Z a: Test CUDA failure common.cu:1030 'system not yet initialized'"],
        "b/applog": ["2025-01-01T00:00:50Z b: Test CUDA failure common.cu:1030 'system not yet initialized'"]},
        expect=Expect(fired=False, sub_domain="nvlink", culprits=["b"])),
    RuleCase(title="the last job's Xid, then this job's own configuration error", evidence={
        "a/syslog": ["Dec 31 23:53:11 a kernel: NVRM: Xid (PCI:0000:1b:00): 32, Channel ID 00000000 intr 00004000"],
        "a/applog": ["2025-01-01T00:00:50Z a:1:1 [0] NCCL WARN Bootstrap : no socket interface found"],
        "b/applog": ["2025-01-01T00:00:50Z b:1:1 [0] NCCL WARN Bootstrap : no socket interface found"]},
        expect=Expect(fired=True, sub_domain="configuration", culprits=[], demoted=["XID-32"])),
    # https://github.com/andikleen/mcelog/issues/70 (a machine check the kernel logged as it booted)
    RuleCase(title="a machine check logged at boot; the run's unstamped NCCL lines fail on every node", evidence={
        "b/syslog": ["Dec 31 23:51:15 b kernel: [    0.064265] mce: [Hardware Error]: CPU 0: Machine Check: 0 Bank 4: "
                     "a600000000020408"],
        "a/applog": ["a:2410:2410 [0] misc/utils.cu:61 NCCL WARN Bootstrap : no socket interface found"],
        "b/applog": ["b:2427:2427 [0] misc/utils.cu:61 NCCL WARN Bootstrap : no socket interface found"]},
        expect=Expect(fired=True, sub_domain="configuration", culprits=[], demoted=["Machine check (uncorrected)"])),
    RuleCase(title="a GPU's uncorrectable error before the start, then CUDA fails on that node", evidence={
        "a/syslog": ["Dec 31 23:53:11 a kernel: NVRM: Xid (PCI:0000:1b:00): 48, pid=1, name=x, An uncorrectable double "
                     "bit error (DBE) has been detected on GPU in the framebuffer at partition 6, subpartition 0."],
        "a/applog": ["2025-01-01T00:00:50Z [rank0]: RuntimeError: CUDA error: unknown error"]},
        expect=Expect(fired=False, sub_domain="gpu", culprits=["a"])),
    RuleCase(title="an earlier job's OOM kill on the node, then this run's own error there", evidence={
        "a/syslog": ["Dec 31 23:50:40 a kernel: [822483.000402] Memory cgroup out of memory: Killed process 3318802 "
                     "(pt_main_thread) total-vm:96532412kB, anon-rss:61230084kB, file-rss:412388kB, shmem-rss:8388608kB, "
                     "UID:41877 pgtables:13 oom_score_adj:0"],
        "a/applog": ["2025-01-01T00:00:50Z [rank16]: ValueError: Reused local directory: ['/local_disk0/mds/c4'] vs "
                     "['/local_disk0/mds/c4']. Provide a different one."]},
        expect=Expect(fired=True, demoted=["Host OOM kill"])),
    # https://github.com/JetBrains-Hardware/spark-setup/blob/main/docs/spark-05-pcie-defect-bundle/dmesg-spark-07.txt
    # (the healthy unit's boot: its unused ports report no cable; nccl-tests then ran to its summary)
    RuleCase(title="a port without a cable at boot; the run then completed", evidence={
        "a/syslog": ["Dec 31 23:51:39 a kernel: [    2.632559] mlx5_core 0000:01:00.0: Port module event: module 0, "
                     "Cable unplugged"],
        "a/applog": ["2025-01-01T00:02:00Z # Avg bus bandwidth    : 0.104512"]},
        context={"scheduler": "none", "scheduler_state": "", "exit_code": ""},
        expect=Expect(fired=True, sub_domain="none", culprits=[], terminal_state="COMPLETED",
                      demoted=["IB cable or module error"])),
    # https://github.com/deepseek-ai/DeepEP/issues/289's NVSHMEM lines with a port down before the start, as
    # https://github.com/sgl-project/sglang/pull/22309 describes (NVSHMEM's QPs to that PE never reach RTR)
    RuleCase(title="a node's port failed before the start; NVSHMEM's connections then fail on every node", evidence={
        "b/syslog": ["Dec 31 23:56:52 b kernel: [1088757.046264] mlx5_core 0000:9a:00.0: Port module event[error]: "
                     "module 3, Cable error, High Temperature"],
        "a/applog": ["2025-01-01T00:01:25Z /workspace/nvshmem/src/host/init/init.cu:1007: non-zero status: 7 nvshmem "
                     "setup connections failed "],
        "b/applog": ["2025-01-01T00:01:26Z /workspace/nvshmem/src/host/init/init.cu:1007: non-zero status: 7 nvshmem "
                     "setup connections failed "]},
        expect=Expect(fired=False, sub_domain="network", culprits=["b"])),
    RuleCase(title="a GPU lost before the start, nothing else", evidence={
        "a/syslog": ["Dec 31 23:53:11 a kernel: NVRM: Xid (PCI:0000:1b:00): 79, pid=1, name=x, GPU has fallen off the "
                     "bus."]},
        expect=Expect(fired=False, sub_domain="gpu", culprits=["a"])),
])
def before_the_start(ws: Workspace) -> None:
    start = ws.context.start_time
    if start is None:
        return
    limit = start - timedelta(seconds=ws.params.clock_skew_s)
    dated = [(s, s.first_time) for s in ws.active(role="root") if s.first_time is not None and not ws.undated(s)]
    # a scheduler action only ends a run that had already failed or hung, and a pod left without a node never ran: they
    # are not the run's own failure; the workload's own output is of the run even where its lines carry no time
    own = [s for s in ws.active(role="root") if ws.undated(s) and s.evidence
           and all(e.source == SourceKind.APPLOG for e in s.evidence)]
    during = sorted((s for s in [*(s for s, t in dated if t >= limit), *own]
                     if s.sub_domain != SubDomain.SCHEDULER and s.name not in NOT_STARTED), key=WorkSymptom.sort_key)
    for s, t in dated:
        if t < limit and s.sub_domain == SubDomain.SCHEDULER and (back := _ready_again(ws, s.node, t, start)):
            ws.demote(s, f"{s.node} was Ready again at {back:%H:%M:%S}, before the workload started")
        elif t < limit and s.name == "Slurm node failure" and ws.context.scheduler == "slurm" \
                and s.last_time is not None and s.last_time < limit and blamed_nodes(ws, s):
            ws.demote(s, f"{', '.join(blamed_nodes(ws, s))} failed {(start - t).total_seconds() / 60:.0f} min before "
                         "the job started, and Slurm allocated it to the job: it was back in service")
    for s, t in dated:
        if t >= limit or not s.evidence or any(e.source != SourceKind.SYSLOG for e in s.evidence):
            continue
        minutes = (start - t).total_seconds() / 60
        # a peer's error naming this node is this node's loss as its peers saw it, not a failure elsewhere; so is a
        # failure every node met at once after this node's network port had failed (connections to it set up nowhere)
        elsewhere = next((d for d in during if d.node != s.node and s.node not in named_peers(ws, d)
                          and not (s.sub_domain == SubDomain.NETWORK and _on_every_node_at_once(ws, d.name))), None)
        here = next((d for d in during if d.node == s.node and d.sub_domain != s.sub_domain), None)
        if elsewhere is not None and elsewhere.sub_domain != s.sub_domain:
            ws.demote(s, f"logged {minutes:.0f} min before the workload started, under whatever ran then; the run's "
                      f"own failure ({elsewhere.name}) began on {elsewhere.node or 'no one node'}")
        elif s.sub_domain == SubDomain.HOST_OOM and here is not None:
            ws.demote(s, f"logged {minutes:.0f} min before the workload started: it killed a process of whatever ran "
                         f"then and freed its memory; the run's own failure here is {here.name}")
        elif not during and recorded_state(ws.context) == TerminalState.UNKNOWN and workload_completed(ws):
            # with no state recorded, the run's own report of its completion is its end (CompletedWorkload weighs a
            # recorded one)
            ws.demote(s, f"logged {minutes:.0f} min before the workload started, and the workload then reported its "
                         "completion with no failure of its own")


def _on_every_node_at_once(ws: Workspace, name: str) -> bool:
    """Every node of a multi-node workload has the active symptom `name`, first reported within the clock-skew
    tolerance of one another."""
    same = [x for x in ws.active(prefix=name) if x.name == name and x.first_time is not None]
    times = [x.first_time for x in same if x.first_time is not None]
    return len(ws.context.nodes) > 1 and {ws.canonical_node(x.node) for x in same} == set(ws.context.nodes) and \
        max(times) - min(times) <= timedelta(seconds=ws.params.clock_skew_s)


def _ready_again(ws: Workspace, node: str | None, failed: datetime, start: datetime) -> datetime | None:
    """When `node` was reported Ready again after `failed` and no later than `start`, if it was."""
    return min((t for r in ws.select(prefix="Kubernetes node ready again", node=node)
                if (t := r.first_time) is not None and failed < t <= start), default=None) if node else None


SURVIVED_AFTER_S = 600.0  # training progress this long after an event shows the workload survived it


def exited_zero_unrecorded(ws: Workspace) -> bool:
    """No scheduler recorded a state and the workload exited 0 (a bare mpirun or torchrun: the launcher's code)."""
    return not ws.context.scheduler_state.strip() and ws.context.exit_code.strip() in ("0", "0:0")


def workload_completed(ws: Workspace) -> bool:
    """The scheduler recorded the workload COMPLETED, or, where no scheduler state was recorded, a line reported its
    completion (a step that completed inside a job the scheduler failed is not the workload's end)."""
    recorded = recorded_state(ws.context)
    return recorded == TerminalState.COMPLETED or (
        recorded == TerminalState.UNKNOWN and any(e.symptom == "Workload completed" for e in ws.events))


# A program stopped from outside prints its shutdown after the signal (a traceback, a launcher's report); stamped
# by a clock that may run a little ahead of the one that stated the limit's time, those lines can seem to come
# just before it. Output this close to a limit or a cancel is not taken as the program still working.
SHUTDOWN_MARGIN_S = 60.0


def quiet_between_lines(ws: Workspace, origins: set[str], when: datetime, since: datetime | None = None) -> float:
    """The longest silence, in seconds, between the last lines the streams `origins` printed before `when` (lines
    within SHUTDOWN_MARGIN_S of it left out; with `since`, lines before it too): how long the program went without a
    word and then went on."""
    longest = 0.0
    for end in (e for e in ws.output_ends if e.origin in origins):
        times = [ev.time for ev, _undated in end.points if ev.time is not None
                 and (when - ev.time).total_seconds() > SHUTDOWN_MARGIN_S and (since is None or ev.time >= since)]
        longest = max([longest, *((later - earlier).total_seconds() for later, earlier in itertools.pairwise(times))])
    return longest


# An exception's type and message as Python prints them ending a traceback ('RuntimeError: ...'), and the count Ray's log
# deduplication appends to a line other processes printed too.
_EXCEPTION_MESSAGE = re.compile(r"\b[A-Za-z_][\w.]*(?:Error|Exception): .*$")
_RAY_REPEATED = re.compile(r"\s*\[repeated \d+x across cluster\]\s*$")


def exception_message(text: str) -> str:
    """An exception line's type and message, without the logger's or a relay's prefix and without Ray's repeat count;
    the stripped text when it holds no exception."""
    text = _RAY_REPEATED.sub("", text).strip()
    found = _EXCEPTION_MESSAGE.search(text)
    return found.group(0) if found else text


def time_order(event: Event) -> tuple[bool, datetime | None]:
    """Sort key: dated events by their time, then undated ones by the time of their evidence."""
    return event.time is None, event.time or event.evidence.time


def printed_before(report: WorkSymptom, roots: list[WorkSymptom]) -> bool:
    """Some of `roots` has evidence that comes after every line of `report` in a stream the report was printed in
    (a stream's lines are in time order)."""
    last_line: dict[str, int] = {}
    for e in report.evidence:
        if e.provenance.line is not None:
            last_line[e.provenance.origin] = max(e.provenance.line, last_line.get(e.provenance.origin, 0))
    return any(e.provenance.origin in last_line and e.provenance.line is not None
               and e.provenance.line > last_line[e.provenance.origin] for r in roots for e in r.evidence)


def every_node_at_once(ws: Workspace, events: list[Event]) -> datetime | None:
    """When the first of `events` (dated ones) came, if every node of a multi-node workload has one and they all came
    within the clock-skew tolerance of it: the same thing happening to all of the nodes at once. None otherwise."""
    nodes = set(ws.context.nodes)
    times = [e.time for e in events if e.time is not None]
    if len(nodes) < 2 or not times or {ws.canonical_node(e.node) for e in events} != nodes:
        return None
    first = min(times)
    return None if max(times) > first + timedelta(seconds=ws.params.clock_skew_s) else first


def last_progress(ws: Workspace) -> datetime | None:
    """When the workload last reported training progress, from the lines that carry their own time. The workload's
    end (with the clock-skew tolerance) bounds it: a line dated later cannot be the ended workload's progress."""
    latest = max((t for s in ws.select(prefix="Training progress") if (t := s.last_time) and not ws.undated(s)),
                 default=None)
    if latest is None or ws.end_time is None:
        return latest
    return min(latest, ws.end_time + timedelta(seconds=ws.params.clock_skew_s))


# Records of a node taken away on purpose (its pods terminated for a graceful shutdown, its instance reclaimed): the
# node left the workload, whatever the other nodes did next.
_TAKEN_AWAY = ("Graceful node shutdown", "Spot instance reclaimed")


def _progressed_on(ws: Workspace, node: str | None, after: datetime) -> bool:
    """Whether `node`'s own files report training progress later than `after`."""
    return any(t > after for s in ws.select(prefix="Training progress", node=node)
               if (t := s.last_time) and not ws.undated(s))


@refiner("SurvivedByProgress", phase=Phase.REFINE_EARLY, after=("AfterTheEnd", "BeforeTheStart"), doc=f"""
A root candidate after which the workload kept training (progress lines more than {SURVIVED_AFTER_S / 60:.0f}
minutes after its last occurrence, on any node: synchronous training needs every rank) did not end the
workload; it is demoted as survived. Not a node taken away on purpose (a graceful node shutdown, a reclaimed spot
instance) unless that node itself went on: other nodes that kept going without it were not one synchronous job (a
workflow's independent steps), and the part it ran ended there.
""", cases=[
    # https://github.com/kubeflow/pipelines/issues/8381 (a workflow's shard on a preempted GKE spot node; the other
    # shard finished)
    RuleCase(title="a spot node taken away while another node's step went on", evidence={
        "a/scheduler": ["2025-01-01T00:10:00Z Warning WorkflowNodeFailed workflow/w Failed node w.train(0): Pod was "
                        "terminated in response to imminent node shutdown."],
        "b/applog": [f"2025-01-01T00:{m:02d}:00Z step {m * 10} | loss 2.1" for m in range(5, 40)]},
        context={"scheduler": "kubernetes", "scheduler_state": "Failed", "exit_code": "", "nodes": ["a", "b"]},
        expect=Expect(fired=False, sub_domain="scheduler", terminal_state="PREEMPTED")),
    RuleCase(title="early flap, late failure", evidence={
        "a/syslog": ["Jan  1 00:05:00 a kernel: watchdog: BUG: soft lockup - CPU#3 stuck for 23s! [python:1]"],
        "b/applog": [f"2025-01-01T00:{m:02d}:00Z iteration {m * 10:6d}/ 50000 | lm loss: 2.1 | grad norm: 0.5 |"
                     for m in range(6, 50)] + ["2025-01-01T00:55:00Z [rank8]: KeyError: 'x'"]},
        expect=Expect(fired=True, sub_domain="application", culprits=[], demoted=["CPU soft lockup"])),
    RuleCase(title="failure stops progress", evidence={
        "a/syslog": ["Jan  1 00:30:00 a kernel: NVRM: Xid (PCI:0000:91:00): 79, pid=1, name=x, GPU has fallen off the bus."],
        "b/applog": [f"2025-01-01T00:{m:02d}:00Z iteration {m * 10:6d}/ 50000 | lm loss: 2.1 | grad norm: 0.5 |"
                     for m in range(6, 30)]},
        expect=Expect(fired=False, sub_domain="gpu", culprits=["a"])),
    RuleCase(title="a progress line dated after the workload's end", evidence={
        "a/applog": ["2025-01-01T00:50:00Z iteration    500/ 50000 | lm loss: 2.1 | grad norm: 0.5 |",
                     "2025-01-01T01:00:00Z slurmstepd: error: *** STEP 7.0 ON a CANCELLED AT 2025-01-01T01:00:00 DUE "
                     "TO TIME LIMIT ***",
                     "2025-01-01T01:16:00Z iteration    660/ 50000 | lm loss: 2.0 | grad norm: 0.5 |"]},
        context={"scheduler_state": "TIMEOUT", "end_time": "2025-01-01T01:00:05Z"},
        expect=Expect(fired=False, sub_domain="scheduler", culprits=[], terminal_state="TIMEOUT")),
])
def survived_by_progress(ws: Workspace) -> None:
    progress_end = last_progress(ws)
    if progress_end is None:
        return
    margin = timedelta(seconds=SURVIVED_AFTER_S)
    for s in ws.active(role="root"):
        last = s.last_time or s.first_time
        if last is None or ws.undated(s) or progress_end <= last + margin:
            continue
        if s.name.startswith(_TAKEN_AWAY) and not _progressed_on(ws, s.node, last + margin):
            continue  # the node left; others went on without it: its part of the workload ended there
        minutes = (progress_end - last).total_seconds() / 60
        ws.demote(s, f"the workload kept training for {minutes:.0f} min after it: survived")
