"""GPU driver rules (the Python side of catalog/gpu_driver.toml and xid_codes.toml): Xid burst decoding
(HandleXidBurstEvents), the NVLink5 and Xid 74 decode tables, per-node Xid ordering, and Fabric Manager after an
NVSwitch SXid.

Facts used (docs/domain.md §1): NVIDIA Xid catalog resolution buckets; the "XID 144-150 Decode" sheet (IntrInfo
unit field by driver generation, reason sub-code in bits 25:20, errorStatus rows); NVIDIA Fleet Intelligence's
burst definition (Xids of a node until 3 minutes of silence); the catalog's ordering guidance: within a burst the
earliest hardware-class Xid is the root, and 45/43/154 and later application-class Xids are its symptoms; Fabric
Manager not ready makes CUDA fail with 'system not yet initialized' (CUDA error 802).
"""

from __future__ import annotations

import importlib.resources
import re
import tomllib
from collections import Counter
from dataclasses import dataclass
from datetime import datetime, timedelta
from functools import lru_cache

from firstfault.engine.model import Event, EventType, SourceKind, SubDomain
from firstfault.engine.rules_api import Expect, Phase, RuleCase, filter_rule, refiner
from firstfault.engine.workspace import EmitSpec, Workspace, WorkSymptom
from firstfault.rules.election import every_node_at_once, time_order, workload_completed

NVLINK5_CODES = range(144, 151)
# Bits 25:20 of IntrInfo carry the NETIR link-down reason (decode sheet; gpud calculateSubCode).
SUBCODE_SHIFT, SUBCODE_MASK = 20, 0x3F
R575 = 575  # drivers >= R575 print the V2 IntrInfo layout
HARDWARE_STRENGTH = 80  # Xids at or above this strength are hardware-class (catalog reading, xid_codes.toml)
_DRIVER_RE = re.compile(r"^(\d{3})\.")
_CAUSED_BY_RE = re.compile(r"caused by previous Xid (\d+)")
INVESTIGATION_MEANING = {
    "INVESTIGATE_LINK_SI": "NVLink signal integrity issue on this link",
    "INVESTIGATE_LINK_SI_AND_CABLES": "NVLink link fault: cable, temperature, transceiver or seating",
    "INVESTIGATE_PEER_DEVICE": "the device at the other end of the link (switch tray or peer GPU) took the link down",
    "INVESTIGATE_SW_USER": "link taken down by software or an operator action",
    "INVESTIGATE_SW_USER_LINK_SI": "link taken down by software or an operator, possibly signal integrity",
    "INVESTIGATE_SW/USER": "peer-side intentional link down",
    "INVESTIGATE_HOST": "secondary indicator of an action elsewhere on the host",
    "SYMPATHETIC_REPORT_SOLO": "generic link down: sympathetic unless it is the only error",
    "REPORT_ISSUE": "link down to report if seen more than once a day",
    "CONTACT_SUPPORT": "hardware error reported by the NVLink unit; escalate",
    "IGNORE": "non-fatal, informational",
}


@dataclass(frozen=True)
class DecodeRow:
    xid: int
    unit: str
    v1: str
    v2: str
    error_status: int | None  # None: any
    immediate: str
    investigatory: str
    severity: str
    hw_sw: str
    impact: str


@dataclass(frozen=True)
class Nvlink5Decode:
    xid: int
    unit: str
    subcode: int
    layout: str  # v1 | v2
    immediate: str
    investigatory: str
    severity: str
    hw_sw: str
    impact: str

    @property
    def symptom(self) -> str:
        if self.unit.startswith("NETIR_LINK"):
            return f"XID-{self.xid}.{self.subcode}"
        return f"XID-{self.xid}.{self.unit.split('/')[0]}"

    @property
    def fatal(self) -> bool:
        return self.immediate not in ("IGNORE", "XID_154_EVAL")

    @property
    def meaning(self) -> str:
        """A one-line reading of the decode for people (investigatory bucket of the sheet)."""
        return INVESTIGATION_MEANING.get(self.investigatory.split(" ")[0], self.investigatory)


@lru_cache(maxsize=1)
def decode_rows() -> tuple[DecodeRow, ...]:
    blob = (importlib.resources.files("firstfault.rules") / "data" / "nvlink5_decode.toml").read_bytes()
    rows = []
    for r in tomllib.loads(blob.decode())["row"]:
        status = None if r["error_status"] == "any" else int(r["error_status"], 16)
        rows.append(DecodeRow(xid=r["xid"], unit=r["unit"], v1=r["v1"], v2=r["v2"], error_status=status,
                              immediate=r["immediate"], investigatory=r["investigatory"], severity=r["severity"],
                              hw_sw=r["hw_sw"], impact=r["impact"]))
    return tuple(rows)


@dataclass(frozen=True)
class Xid74Decode:
    classes: frozenset[str]
    notes: tuple[str, ...]

    @property
    def fatal(self) -> bool:
        """Bits that only say 'ignore' or 'threshold exceeded, continue' do not end a job."""
        return not self.classes <= {"ignore", "threshold"}


@lru_cache(maxsize=1)
def _xid74_bits() -> dict[tuple[int, int], tuple[str, str]]:
    blob = (importlib.resources.files("firstfault.rules") / "data" / "xid74_decode.toml").read_bytes()
    table = {}
    for row in tomllib.loads(blob.decode())["bits"]:
        for bit in row["bits"]:
            table[(row["register"], bit)] = (row["class"], row["meaning"])
    return table


def decode_xid74(registers: str) -> Xid74Decode | None:
    """Decode the seven registers of an Xid 74 line ("0x0, 0x0, 0x10000, ..."); None if no bit is set."""
    values = [int(v.strip(), 16) for v in registers.split(",")]
    table = _xid74_bits()
    classes: set[str] = set()
    notes: list[str] = []
    for register, value in enumerate(values, start=1):
        for bit in range(32):
            if not value >> bit & 1:
                continue
            cls, meaning = table.get((register, bit), ("unknown", "unknown bit: report a bug"))
            classes.add(cls)
            notes.append(f"register {register} bit {bit}: {meaning}")
    return Xid74Decode(frozenset(classes), tuple(notes)) if notes else None


def _mask_matches(mask: str, value: int) -> bool:
    bits = f"{value & 0xFFFFFFFF:032b}"
    return all(m == "-" or m == b for m, b in zip(mask, bits, strict=True))


def decode_nvlink5(xid: int, intrinfo: int, error_status: int, unit_text: str = "",
                   driver_major: int | None = None) -> Nvlink5Decode | None:
    """Decode one NVLink5 Xid (144-150) line. Returns None when no row of the sheet matches.

    The unit field sits in IntrInfo[9:5] (V1, drivers < R575) or IntrInfo[6:0] (V2, >= R575). With a known
    driver version only that layout is tried; otherwise both, preferring the row whose unit name matches the
    unit printed in the line.
    """
    layouts = ["v1", "v2"]
    if driver_major is not None:
        layouts = ["v2"] if driver_major >= R575 else ["v1"]
    printed = unit_text.split("/")[0]
    best: tuple[int, DecodeRow, str] | None = None
    for row in decode_rows():
        if row.xid != xid:
            continue
        if row.error_status is not None:
            if row.error_status == 0 and error_status != 0:
                continue
            if row.error_status != 0 and not error_status & row.error_status:
                continue
        for layout in layouts:
            if not _mask_matches(row.v1 if layout == "v1" else row.v2, intrinfo):
                continue
            score = (2 if printed and row.unit.split("/")[0] == printed else 0) + (1 if _fatal(row) else 0)
            if best is None or score > best[0]:
                best = (score, row, layout)
    if best is None:
        return None
    _, row, layout = best
    return Nvlink5Decode(xid=xid, unit=row.unit, subcode=(intrinfo >> SUBCODE_SHIFT) & SUBCODE_MASK, layout=layout,
                         immediate=row.immediate, investigatory=row.investigatory, severity=row.severity,
                         hw_sw=row.hw_sw, impact=row.impact)


def _fatal(row: DecodeRow) -> bool:
    return row.immediate not in ("IGNORE", "XID_154_EVAL")


def _driver_majors(ws: Workspace) -> dict[str | None, int]:
    """The driver's major version per node: the first driver-version report of the node that names one."""
    majors: dict[str | None, int] = {}
    for event in ws.events_of(f"{EventType.CONTEXT}.driver_version"):
        if event.node not in majors:
            m = _DRIVER_RE.match(str(event.attributes.get("version") or event.attributes.get("version_old") or ""))
            if m:
                majors[event.node] = int(m.group(1))
    return majors


def _driver_versions(ws: Workspace) -> dict[str, str]:
    """The driver release per allocated node: its first driver-version report (the module's load line, nvidia-smi)."""
    versions: dict[str, str] = {}
    for event in ws.events_of(f"{EventType.CONTEXT}.driver_version"):
        node = ws.canonical_node(event.node)
        version = str(event.attributes.get("version") or event.attributes.get("version_old") or "")
        if node and version and node not in versions:
            versions[node] = version
    return versions


_DRIVER_UNLIKE = "GPU driver unlike the other nodes'"
# What a job's CUDA says when the node's driver cannot run what the others run (catalog/pytorch.toml).
_DRIVER_REFUSALS = ("CUDA environment mismatch",)


@filter_rule("DriverUnlikeItsPeers", phase=Phase.FILTER, doc=f"""
Where the driver release of each node is known (the module's load line, nvidia-smi's header) and every node but one or
a few runs the same release, a CUDA environment mismatch (an insufficient driver, a kernel image the driver cannot
load) raised only on those odd nodes is their driver, not the job's environment: it is read as `{_DRIVER_UNLIKE}` on
them (gpu, node blamed). Raised on nodes of the common release too, or without a release the others agree on, it
stays the job's environment.
""", cases=[
    # https://github.com/NVIDIA/gpu-operator/issues/176 (one node left on 460 while the image needs a newer driver)
    RuleCase(title="the one node on an older driver refuses the image", evidence={
        "n1/applog": ["| NVIDIA-SMI 510.47.03    Driver Version: 510.47.03    CUDA Version: 11.6     |"],
        "n2/applog": ["| NVIDIA-SMI 510.47.03    Driver Version: 510.47.03    CUDA Version: 11.6     |"],
        "n3/applog": ["| NVIDIA-SMI 460.32.03    Driver Version: 460.32.03    CUDA Version: 11.2     |",
                      "2025-01-01T00:10:00Z Failed to allocate device vector A (error code CUDA driver version is "
                      "insufficient for CUDA runtime version)!"]},
        context={"nodes": ["n1", "n2", "n3"]},
        expect=Expect(fired=True, sub_domain="gpu", culprits=["n3"], root_symptom=_DRIVER_UNLIKE)),
    RuleCase(title="every node runs the same driver: the image wants a newer one", evidence={
        f"n{i}/applog": ["| NVIDIA-SMI 460.32.03    Driver Version: 460.32.03    CUDA Version: 11.2     |"] + (
            ["2025-01-01T00:10:00Z RuntimeError: CUDA error: CUDA driver version is insufficient for CUDA runtime "
             "version"] if i == 3 else []) for i in (1, 2, 3)},
        context={"nodes": ["n1", "n2", "n3"]},
        expect=Expect(fired=False, sub_domain="configuration", culprits=[])),
])
def driver_unlike_its_peers(ws: Workspace) -> None:
    versions = _driver_versions(ws)
    counts = Counter(versions.values())
    if len(counts) < 2:
        return
    (common, held), *others = counts.most_common()
    if held <= sum(n for _, n in others) or (others and others[0][1] == held):
        return  # no release that most nodes agree on
    refusals = [e for e in ws.events_of(EventType.NODE_BAD) if e.symptom in _DRIVER_REFUSALS]
    if any(versions.get(ws.canonical_node(e.node) or "") == common for e in refusals):
        return  # refused on nodes of the common release too: the job's environment
    for event in refusals:
        node = ws.canonical_node(event.node)
        if node in versions:
            ws.reread(event, _DRIVER_UNLIKE, f"{node} runs driver {versions[node]}, the other nodes {common}")


_WALKTHROUGH_CASE = RuleCase(
    title="seed walkthrough",
    evidence={
        "node-01/applog": ["2025-01-01T00:30:00Z node-01:1:1 [0] transport/net_ib.cc:1 NCCL WARN NET/IB : Got "
                           "completion from peer 10.0.0.2<1234> with status=5 opcode=0 len=0 vendor err 249 (Recv)"],
        "node-02/syslog": ["Jan  1 00:29:58 node-02 kernel: [100.1] NVRM: Xid (PCI:0008:01:00): 149, NETIR_LINK_EVT "
                           "Fatal XC0 i0 Link 08 (0x004505c6 0x00000000 0x00000000 0x00000000 0x00000000 0x00000000)"],
        "node-03/applog": ["2025-01-01T00:40:00Z [rank8]:[E0101 00:40:00.000000000 ProcessGroupNCCL.cpp:1] [PG ID 0 "
                           "PG GUID 0(default_pg) Rank 8] Watchdog caught collective operation timeout: "
                           "WorkNCCL(SeqNum=9, OpType=ALLREDUCE, NumelIn=1, NumelOut=1, Timeout(ms)=600000) ran "
                           "for 600010 milliseconds before timing out."],
    },
    expect=Expect(fired=True, root_symptom="XID-149.4", sub_domain="nvlink", culprits=["node-02"]),
)


_NO_FABRIC = "NVLink fabric not initialised on the node"
_ZERO_UUID = "00000000-0000-0000-0000-000000000000"
# the all-zero UUID as nvidia-smi prints it and as NCCL's MNNVL line does (two 64-bit halves in hex)
_ZERO_UUIDS = {_ZERO_UUID, "0.0"}


@filter_rule("FabricMissingOnSomeNodes", phase=Phase.FILTER, doc=f"""
On multi-node NVLink systems nvidia-smi -q shows each GPU's fabric ClusterUUID, and NCCL's set-up prints it ('MNNVL busId
... fabric UUID <hi>.<lo>'). When some nodes of the workload show
a rack's ClusterUUID and others only the all-zero one, the fabric was not initialised on the latter: `{_NO_FABRIC}`
(nvlink) names each of them at its first such line. All-zero everywhere (a system without a multi-node fabric, or one
whose fabric is down everywhere) names no node, and neither does a run that completed (it did not need the fabric).
""", cases=[
    RuleCase(title="one tray's GPUs outside the rack's fabric", evidence={
        f"{n}/applog": [f"2025-01-01T00:35:01Z ClusterUUID: {u}"]
        for n, u in (("a", "5d2b8f04-91ce-4c77-a3e1-0b6f2c9d7e18"), ("b", _ZERO_UUID),
                     ("c", "5d2b8f04-91ce-4c77-a3e1-0b6f2c9d7e18"))},
        context={"nodes": ["a", "b", "c"]},
        expect=Expect(fired=True, sub_domain="nvlink", culprits=["b"], root_symptom=_NO_FABRIC)),
    # https://github.com/kubernetes-sigs/dra-driver-nvidia-gpu/issues/837 (a tray left out of its NVLink domain)
    RuleCase(title="NCCL's set-up shows one tray outside the rack's fabric", evidence={
        f"{n}/applog": [f"2025-01-01T00:35:01Z {n}:317:717 [0] NCCL INFO MNNVL busId 0x8000 fabric UUID {u} cliqueId "
                        f"0x{c} state 3 healthMask 0x0"]
        for n, u, c in (("a", "7a4af5e106e46349.c4fe63d71b7d9aa1", "7ffe"), ("b", "0.0", "0"),
                        ("c", "7a4af5e106e46349.c4fe63d71b7d9aa1", "7ffe"))},
        context={"nodes": ["a", "b", "c"]},
        expect=Expect(fired=True, sub_domain="nvlink", culprits=["b"], root_symptom=_NO_FABRIC)),
    RuleCase(title="no node in a fabric", evidence={
        f"{n}/applog": [f"2025-01-01T00:35:01Z ClusterUUID: {_ZERO_UUID}"] for n in "ab"},
        context={"nodes": ["a", "b"]}, expect=Expect(fired=False)),
    RuleCase(title="one tray outside the fabric in a run that completed", evidence={
        f"{n}/applog": [f"2025-01-01T00:35:01Z ClusterUUID: {u}"]
        for n, u in (("a", "5d2b8f04-91ce-4c77-a3e1-0b6f2c9d7e18"), ("b", _ZERO_UUID))},
        context={"nodes": ["a", "b"], "scheduler_state": "COMPLETED", "exit_code": "0:0"},
        expect=Expect(fired=False)),
])
def fabric_missing_on_some_nodes(ws: Workspace) -> None:
    reports = [e for e in ws.events_of(f"{EventType.CONTEXT}.cluster_uuid") if e.node]
    in_fabric = {e.node for e in reports if e.value_set("uuid") - _ZERO_UUIDS}
    if not in_fabric or workload_completed(ws):
        return
    outside: dict[str, Event] = {}
    for event in sorted(reports, key=time_order):
        if event.node not in in_fabric and event.value_set("uuid") & _ZERO_UUIDS:
            outside.setdefault(str(event.node), event)
    for node, event in sorted(outside.items()):
        ws.emit(EmitSpec(type=EventType.NODE_BAD, node=node, symptom=_NO_FABRIC, evidence=event.evidence,
                         time=event.time))


_FEWER_GPUS = "Node advertises fewer GPUs than it carries"


def _node_facts(ws: Workspace, fact: str, attribute: str) -> dict[str, set[str]]:
    """The values of a fact's attribute each node's own evidence gave: a line inside the output of `kubectl describe
    node <name>` (or a record opened by 'Name: <name>') is that node's, whichever node's file it was gathered in."""
    openers = _describe_openers(ws)
    found: dict[str, set[str]] = {}
    for event in ws.events_of(f"{EventType.CONTEXT}.{fact}"):
        node = _owner(ws, openers, event)
        if node:
            found.setdefault(node, set()).update(event.value_set(attribute))
    return found


# The node a kubectl command describes or gets ('kubectl describe node gpu-03 | grep ...', 'kubectl get node gpu-03 -o yaml')
_NODE_COMMAND = re.compile(r"\bkubectl\b[^|]*?\b(?:describe|get)\s+(?:nodes?|no)(?:/|\s+)(?P<node>[A-Za-z0-9][\w.-]*)")


def _describe_openers(ws: Workspace) -> dict[str, list[tuple[int, str | None]]]:
    """Per file, the lines that open a block of kubectl output, and the allocated node each one names (None: another
    object, or a command about no one node)."""
    openers: dict[str, list[tuple[int, str | None]]] = {}
    for fact in ws.events_of(f"{EventType.CONTEXT}.describe_block"):
        if fact.attributes.get("pod_node") or fact.evidence.provenance.line is None:
            continue  # a pod's node, inside its block
        command = str(fact.attributes.get("command") or "")
        named = m.group("node") if (m := _NODE_COMMAND.search(command)) else fact.attributes.get("object")
        node = ws.canonical_node(str(named)) if named else None
        openers.setdefault(fact.evidence.provenance.origin, []).append((fact.evidence.provenance.line, node))
    return {origin: sorted(lines, key=lambda o: o[0]) for origin, lines in openers.items()}


def _owner(ws: Workspace, openers: dict[str, list[tuple[int, str | None]]], event: Event) -> str | None:
    """The node a fact's values belong to. One fact gathers the values of every line of its file, so a file that holds
    kubectl output about another node ('kubectl describe node <name>', a record opened by 'Name: <name>') gives its
    values to that node when it is about that one node only and the fact's first line is inside its output, and to no
    node when it mixes several nodes' output or the file's own lines with another's; a file about no other node gives
    them to its own node."""
    own = ws.canonical_node(event.node)
    line, blocks = event.evidence.provenance.line, openers.get(event.evidence.provenance.origin, [])
    named = {node for _, node in blocks if node}
    if named <= {own}:
        return own
    first = min((opened for opened, node in blocks if node), default=None)
    if len(named) == 1 and line is not None and first is not None and first < line:
        return next(iter(named))
    return None


@filter_rule("NodeAdvertisesFewerGpus", phase=Phase.FILTER, doc=f"""
Where kubectl describe node shows, in each node's own evidence, how many GPUs the node advertises (nvidia.com/gpu) and
its instance type, nodes of one type should advertise the same count.
A node of the workload that advertises fewer (its lowest count, capacity or allocatable) than all the other nodes of its
type, at least one other, do, or fewer than its instance type carries (Karpenter's instance-gpu-count label; a node
whose Capacity block lists no GPU line then advertises none), or fewer allocatable than its capacity holds (the device
plugin's count of healthy GPUs against all of them), is
`{_FEWER_GPUS}` (gpu, the node blamed). Nodes without an instance type are compared only with each other when no node
names one, and then only where at least two others agree. Not in a run that completed.
""", cases=[
    # https://github.com/aws/eks-node-monitoring-agent/pull/121 (a g6e.12xlarge running with 3 of its 4 GPUs, no Xid)
    RuleCase(title="one node of the type offers 3 GPUs, its peers 4; a pod of the job could not be placed", evidence={
        **{f"{n}/scheduler": ["                    node.kubernetes.io/instance-type=g6e.12xlarge",
                              f"  nvidia.com/gpu:     {count}"] for n, count in (("a", 4), ("b", 4), ("c", 3))},
        "a/applog": ["2025-01-01T00:10:00Z   Warning   FailedScheduling   pod/job-worker-2   0/3 nodes are available: "
                     "1 Insufficient nvidia.com/gpu, 2 node(s) didn't match pod anti-affinity rules."]},
        context={"scheduler": "kubernetes", "scheduler_state": "Failed", "nodes": ["a", "b", "c"]},
        expect=Expect(fired=True, sub_domain="gpu", culprits=["c"], root_symptom=_FEWER_GPUS)),
    # https://github.com/bottlerocket-os/bottlerocket/issues/4087 (the device plugin never ran on a g4dn node)
    RuleCase(title="a node whose instance type carries a GPU lists none in its capacity", evidence={
        "c/scheduler": ["                    karpenter.k8s.aws/instance-gpu-count=1", "Capacity:", "  cpu:  8",
                        "  pods:  29"]},
        context={"scheduler": "kubernetes", "scheduler_state": "Failed", "nodes": ["a", "c"]},
        expect=Expect(fired=True, sub_domain="gpu", culprits=["c"], root_symptom=_FEWER_GPUS)),
    # https://github.com/NVIDIA/k8s-device-plugin/issues/58 (16 GPUs in the capacity, none allocatable: all unhealthy)
    RuleCase(title="a node lists its 16 GPUs in its capacity and none allocatable", evidence={
        "c/scheduler": ["status:", "  allocatable:", "    cpu: \"48\"", "    nvidia.com/gpu: \"0\"", "  capacity:",
                        "    cpu: \"48\"", "    nvidia.com/gpu: \"16\""]},
        context={"scheduler": "kubernetes", "scheduler_state": "Failed", "nodes": ["a", "c"]},
        expect=Expect(fired=True, sub_domain="gpu", culprits=["c"], root_symptom=_FEWER_GPUS)),
    RuleCase(title="every GPU allocatable", evidence={
        "c/scheduler": ["Capacity:", "  nvidia.com/gpu:     8", "Allocatable:", "  nvidia.com/gpu:     8"]},
        context={"scheduler": "kubernetes", "scheduler_state": "Failed", "nodes": ["a", "c"]},
        expect=Expect(fired=False)),
    RuleCase(title="a CPU node lists no GPU: nothing says it should have one", evidence={
        "c/scheduler": ["Capacity:", "  cpu:  8", "  pods:  29"]},
        context={"scheduler": "kubernetes", "scheduler_state": "Failed", "nodes": ["a", "c"]},
        expect=Expect(fired=False)),
    RuleCase(title="a CPU node's capacity beside GPU nodes with no instance types shown: not a GPU node short of GPUs",
             evidence={"a/scheduler": ["Capacity:", "  nvidia.com/gpu:     8"], "b/scheduler": ["Capacity:", "  cpu:  8"],
                       "c/scheduler": ["Capacity:", "  nvidia.com/gpu:     8"]},
             context={"scheduler": "kubernetes", "scheduler_state": "Failed", "nodes": ["a", "b", "c"]},
             expect=Expect(fired=False)),
    RuleCase(title="nodes of two types with their own GPU counts", evidence={
        f"{n}/scheduler": [f"                    node.kubernetes.io/instance-type={kind}",
                           f"  nvidia.com/gpu:     {count}"]
        for n, kind, count in (("a", "p4d.24xlarge", 8), ("b", "g6e.12xlarge", 4))},
        context={"scheduler": "kubernetes", "scheduler_state": "Failed", "nodes": ["a", "b"]},
        expect=Expect(fired=False)),
    # https://github.com/52K-0812/28gpu-cluster-rebuild (a node of an 8-GPU pool showing 7 GPUs; kubectl describe node
    # run from another node and its output gathered there)
    RuleCase(title="one node's describe output gathered in another node's file is that node's", evidence={
        "a/scheduler": ["                    node.kubernetes.io/instance-type=g6e.12xlarge", "  nvidia.com/gpu:     4"],
        "b/scheduler": ["                    node.kubernetes.io/instance-type=g6e.12xlarge", "  nvidia.com/gpu:     4"],
        "d/scheduler": ["$ kubectl describe node c | grep -E 'instance-type|nvidia.com/gpu'",
                        "                    node.kubernetes.io/instance-type=g6e.12xlarge", "  nvidia.com/gpu:     3"]},
        context={"scheduler": "kubernetes", "scheduler_state": "Failed", "nodes": ["a", "b", "c", "d"]},
        expect=Expect(fired=True, sub_domain="gpu", culprits=["c"], root_symptom=_FEWER_GPUS)),
    RuleCase(title="three nodes' describe output in one file: their counts cannot be told apart", evidence={
        "a/scheduler": ["$ kubectl describe node c | grep -E 'nvidia.com/gpu|Capacity|Allocatable'", "Capacity:",
                        "  nvidia.com/gpu:     7", "Allocatable:", "  nvidia.com/gpu:     7",
                        "$ kubectl describe node a | grep -E '^  nvidia.com/gpu'", "  nvidia.com/gpu:     8",
                        "  nvidia.com/gpu:     8"]},
        context={"scheduler": "kubernetes", "scheduler_state": "Failed", "nodes": ["a", "b", "c"]},
        expect=Expect(fired=False, culprits=[])),
    RuleCase(title="every node's describe output in one file: one node's evidence, nothing to compare", evidence={
        "a/scheduler": ["                    node.kubernetes.io/instance-type=g6e.12xlarge", "  nvidia.com/gpu:     4",
                        "                    node.kubernetes.io/instance-type=g6e.12xlarge", "  nvidia.com/gpu:     3"]},
        context={"scheduler": "kubernetes", "scheduler_state": "Failed", "nodes": ["a", "b"]},
        expect=Expect(fired=False)),
])
def node_advertises_fewer_gpus(ws: Workspace) -> None:
    if workload_completed(ws):
        return
    counts = {node: min(int(v) for v in values) for node, values in _node_facts(ws, "node_gpu_count", "gpus").items()}
    carried = {node: max(int(v) for v in values)
               for node, values in _node_facts(ws, "instance_gpu_count", "expected_gpus").items()}
    listed = {ws.canonical_node(e.node) for e in ws.events_of(f"{EventType.CONTEXT}.node_capacity_listed")}
    workload = set(ws.context.nodes)
    named: set[str] = set()
    for node, expected in sorted(carried.items()):
        # a node whose capacity is listed without a GPU line advertises none; only its instance type says it should
        count = counts.get(node, 0 if node in listed else expected)
        if count < expected and (not workload or node in workload):
            _fewer_gpus(ws, node, count, f"its instance type carries {expected}")
            named.add(node)
    for node, (allocatable, capacity) in sorted(_allocatable_and_capacity(ws).items()):
        if allocatable < capacity and (not workload or node in workload) and node not in named:
            _fewer_gpus(ws, node, allocatable, f"of the {capacity} in its capacity: the device plugin reports the rest "
                                               "unhealthy")
            named.add(node)
    kinds = _node_facts(ws, "instance_type", "instance_type")
    groups: dict[str, list[str]] = {}
    for node in sorted(counts):
        types = kinds.get(node, set())
        if len(types) > 1 or (not types and kinds):
            continue  # several types in one node's evidence, or a node of unknown type beside typed ones
        groups.setdefault(next(iter(types), ""), []).append(node)
    for kind, members in groups.items():
        # without an instance type the nodes may differ by design: two others agreeing, not one, set the count
        if len(members) < (2 if kind else 3):
            continue
        for node in members:
            peers = {counts[other] for other in members if other != node}
            if len(peers) == 1 and counts[node] < min(peers) and (not workload or node in workload) \
                    and node not in named:
                _fewer_gpus(ws, node, counts[node], f"the other nodes of its type {min(peers)}")


def _allocatable_and_capacity(ws: Workspace) -> dict[str, tuple[int, int]]:
    """Per node whose own evidence holds one node record (one Capacity and one Allocatable heading) listing two GPU
    counts: the lower (allocatable: the device plugin's healthy GPUs) and the higher (capacity: all of them).
    Allocatable never exceeds capacity, so the order of the blocks does not matter."""
    headings: dict[str, dict[str, int]] = {}
    for fact in ("node_capacity_listed", "node_allocatable_listed"):
        for event in ws.events_of(f"{EventType.CONTEXT}.{fact}"):
            node = ws.canonical_node(event.node)
            if node:
                headings.setdefault(node, {})[fact] = headings.get(node, {}).get(fact, 0) + event.count
    found = {}
    for node, values in _node_facts(ws, "node_gpu_count", "gpus").items():
        counts = sorted({int(v) for v in values})
        if len(counts) == 2 and headings.get(node) == {"node_capacity_listed": 1, "node_allocatable_listed": 1}:
            found[node] = (counts[0], counts[1])
    return found


def _fewer_gpus(ws: Workspace, node: str, count: int, than: str) -> None:
    """Emit the reading on `node` at its GPU count's line (its Capacity heading when it lists none)."""
    facts = ("node_gpu_count", "node_capacity_listed")
    openers = _describe_openers(ws)
    event = next(e for fact in facts for e in sorted(ws.events_of(f"{EventType.CONTEXT}.{fact}"), key=time_order)
                 if _owner(ws, openers, e) == node and (fact != "node_gpu_count" or str(count) in e.value_set("gpus")))
    ws.emit(EmitSpec(type=EventType.NODE_BAD, node=node, symptom=_FEWER_GPUS, evidence=event.evidence,
                     time=event.time, attributes={"meaning": f"{node} advertises {count} GPUs, {than}"}))


_BARS_UNASSIGNED = "PCI memory windows not assigned at boot"
_GPU_INIT_FAILED = "GPU initialisation failure"


@refiner("UnassignedBarsFailedTheGpu", phase=Phase.REFINE, doc=f"""
A GPU that failed to initialise (`{_GPU_INIT_FAILED}`: its driver's probe failed, RmInitAdapter failed) on a node whose
kernel could not assign PCI memory windows at the same boot, before it (`{_BARS_UNASSIGNED}`), had no window to map: the
node's firmware PCI settings, not the GPU. The window failure becomes the root (host, the node blamed) and the GPU's
failure its consequence. Unassigned windows with every GPU initialised are the usual boot noise of unused windows.
""", cases=[
    # https://github.com/markwdalton/lambdalabs/blob/main/documentation/servers/supermicro/BAR-Memory-usage.md
    RuleCase(title="the bridge above a GPU got no window, then the GPU's probe failed", evidence={"n1/syslog": [
        "Jan  1 00:05:42 n1 kernel: [   23.869386] pci 0000:51:00.0: BAR 15: failed to assign [mem size 0x04000000 "
        "64bit pref]",
        "Jan  1 00:05:49 n1 kernel: [   31.559340] nvidia: probe of 0000:56:00.0 failed with error -1"]},
        context={"nodes": ["n1", "n2"]},
        expect=Expect(fired=True, sub_domain="host", culprits=["n1"], root_symptom=_BARS_UNASSIGNED)),
    RuleCase(title="a probe failure on a node whose windows were all assigned", evidence={"n1/syslog": [
        "Jan  1 00:05:49 n1 kernel: [   31.559340] nvidia: probe of 0000:56:00.0 failed with error -1"]},
        context={"nodes": ["n1", "n2"]}, expect=Expect(fired=False, sub_domain="gpu", culprits=["n1"])),
])
def unassigned_bars_failed_the_gpu(ws: Workspace) -> None:
    for bars in ws.select(prefix=_BARS_UNASSIGNED):
        failed = [s for s in ws.active(node=bars.node or "", prefix=_GPU_INIT_FAILED)
                  if bars.first_time is None or s.first_time is None or bars.first_time <= s.first_time]
        if bars.node is None or not failed:
            continue
        ws.promote(bars, f"a GPU on {bars.node} failed to initialise after the kernel could not assign its windows")
        for s in failed:
            ws.demote(s, f"{bars.node}'s kernel could not assign PCI memory windows at boot: the GPU had none to map")


_PLUGIN_DOWN = "GPU device plugin cannot serve the node's GPUs"


@refiner("PluginDownExplainsTheGpuCount", phase=Phase.REFINE_EARLY, doc=f"""
The device plugin is what advertises a node's GPUs to the kubelet: while it cannot serve them on a node (its container
cannot start, or it started without NVML: `{_PLUGIN_DOWN}`), that node offers fewer GPUs than it carries, or
none, whatever their health. There `{_FEWER_GPUS}` is the plugin's absence, not a lost GPU: it is demoted, and the
plugin's failure is the answer.
""", cases=[
    # https://github.com/open-edge-platform/geti_v2/issues/436 (k3s's device plugin in a crash loop; the node offered no
    # GPU and the training pod stayed Pending)
    RuleCase(title="the plugin's container cannot start; the node's capacity lists no GPU", evidence={"c/scheduler": [
        "                    karpenter.k8s.aws/instance-gpu-count=1", "Capacity:", "  cpu:  8", "  pods:  29",
        "2025-01-01T00:10:00Z   Warning   BackOff   pod/nvidia-device-plugin-daemonset-tw2td   Back-off restarting failed "
        "container nvidia-device-plugin-ctr in pod nvidia-device-plugin-daemonset-tw2td_kube-system(7c0e5d3a)"]},
        context={"scheduler": "kubernetes", "scheduler_state": "Failed", "nodes": ["a", "c"]},
        expect=Expect(fired=True, sub_domain="configuration", culprits=["c"], demoted=[_FEWER_GPUS])),
])
def plugin_down_explains_the_gpu_count(ws: Workspace) -> None:
    down = {s.node for s in ws.active(prefix=_PLUGIN_DOWN)}
    for fewer in ws.active(prefix=_FEWER_GPUS):
        if fewer.node in down:
            ws.demote(fewer, f"the device plugin could not serve the GPUs on {fewer.node}: it is what advertises them")


_GPU_HANGS = ("AMD GPU hang", "Intel GPU hang")
_HANG_EVERYWHERE = "The same GPU hang on every node"
_GPU_HARDWARE = ("AMD GPU uncorrectable hardware error", "AMD GPU reset failed", "Intel GPU reset failed")


_CANNOT_CHECK = "Device plugin cannot health-check the GPUs"
_MARKED_UNHEALTHY = "GPU marked unhealthy (device plugin)"
# How long after its 'too old to support healthchecking' warning the plugin's own marks follow (it marks the GPUs as it
# registers them, at start-up).
PLUGIN_MARKS_S = 60.0


_LOST_ON_RESUME = "GPU lost across a suspend and resume"
# CUDA failures a GPU whose state was lost in a system sleep produces (the program's own reports of them)
_AFTER_RESUME = ("CUDA kernel failure (unspecified)", "CUDA unknown error", "GPU could not be initialised",
                 "Program found no GPU")


@filter_rule("GpuLostAcrossSuspend", phase=Phase.FILTER, doc=f"""
A node that resumed from a system sleep (fact resumed_from_sleep: the kernel's 'Waking up from system sleep state',
'PM: suspend exit') and whose GPU then failed CUDA work ('unspecified launch failure', 'unknown error'), could not be
initialised, or was not found by the program, lost its GPU's state in the suspend (the NVIDIA driver keeps it only
with its suspend services and NVreg_PreserveVideoMemoryAllocations): those reports become `{_LOST_ON_RESUME}` on that
node (gpu, the node blamed). The same failures on a node that did not sleep are read as before.
""", cases=[
    # https://github.com/ollama/ollama/issues/8426 (CUDA lost after the machine resumed from sleep), under Slurm's power
    # saving here
    RuleCase(title="the node resumed from S3, then its CUDA work fails", evidence={
        "b/syslog": ["Jan  1 00:00:19 b kernel: ACPI: PM: Waking up from system sleep state S3",
                     "Jan  1 00:01:40 b ollama[2231]: CUDA error: unspecified launch failure"]},
        context={"nodes": ["a", "b"], "start_time": "2025-01-01T00:00:30Z", "end_time": "2025-01-01T00:10:00Z"},
        expect=Expect(fired=True, sub_domain="gpu", culprits=["b"], root_symptom=_LOST_ON_RESUME)),
    RuleCase(title="the same CUDA failure on a node that did not sleep", evidence={
        "b/syslog": ["Jan  1 00:01:40 b ollama[2231]: CUDA error: unspecified launch failure"]},
        context={"nodes": ["a", "b"], "start_time": "2025-01-01T00:00:30Z", "end_time": "2025-01-01T00:10:00Z"},
        expect=Expect(fired=False, absent=[_LOST_ON_RESUME])),
])
def gpu_lost_across_suspend(ws: Workspace) -> None:
    resumed: dict[str, datetime] = {}
    for fact in ws.events_of(f"{EventType.CONTEXT}.resumed_from_sleep"):
        if fact.node and fact.time is not None:
            resumed[fact.node] = min(fact.time, resumed.get(fact.node, fact.time))
    if not resumed:
        return
    for event in [*ws.events_of(EventType.NODE_BAD), *ws.events_of(EventType.NODE_INTERESTING)]:
        since = resumed.get(event.node or "")
        if event.symptom in _AFTER_RESUME and since is not None and event.time is not None and event.time >= since:
            ws.reread(event, _LOST_ON_RESUME, f"{event.node} resumed from a system sleep at {since:%H:%M:%S}; its GPU "
                                             "failed after it")


_LOST_ITS_GPUS = "Container lost its GPUs (NVML)"
# A container's failures to reach its GPUs after the host's systemd rewrote its device rules
_AFTER_RELOAD = ("GPU could not be initialised", "CUDA unknown error")
RELOAD_REACH_S = 3600.0  # a reload before the failure, within the hour, while the container ran


def _reload_case(title: str, reloaded: str, expect: Expect) -> RuleCase:
    """A rule case: n2's systemd reloads at `reloaded` (HH:MM:SS); its pod's CUDA then fails to start at 00:14:52."""
    return RuleCase(title=title, evidence={
        "n2/syslog": [f"Jan  1 {reloaded} n2 systemd[1]: Reloading."],
        "n2/applog": ["2025-01-01T00:14:52Z RuntimeError: CUDA unknown error - this may be due to an incorrectly set up "
                      "environment, e.g. changing env variable CUDA_VISIBLE_DEVICES after program start. Setting the "
                      "available devices to be zero."]},
        context={"scheduler": "kubernetes", "nodes": ["n1", "n2"], "start_time": "2025-01-01T00:05:00Z",
                 "end_time": "2025-01-01T00:30:00Z"}, expect=expect)


@filter_rule("ContainerGpusLostOnReload", phase=Phase.FILTER, after=("GpuLostAcrossSuspend", "PythonExceptionFamily"),
             doc=f"""
On Kubernetes, a container whose CUDA cannot start ({", ".join(_AFTER_RELOAD)}) on a node whose systemd re-read its
units (fact systemd_reloaded: 'systemd[1]: Reloading.') within {RELOAD_REACH_S / 3600:.0f} h before the failure lost
its GPU device nodes to the reload (systemd rewrites the device rules of running containers under the systemd cgroup
driver): the failure is read as `{_LOST_ITS_GPUS}` (configuration, no node blamed). The reload may come before the
workload's recorded start: a pod's containers are often created before the first line that dates the workload. The
same failure with no reload in the hour before it stays the node's GPU.
""", cases=[
    # https://github.com/NVIDIA/nvidia-container-toolkit/issues/48 (GPU access lost in pods after a daemon-reload)
    _reload_case("the node's systemd reloaded four minutes before", "00:10:39",
                 Expect(fired=True, sub_domain="configuration", culprits=[], root_symptom=_LOST_ITS_GPUS)),
    RuleCase(title="the reload came hours before the failure", evidence={
        "n2/syslog": ["Jan  1 00:10:39 n2 systemd[1]: Reloading."],
        "n2/applog": ["2025-01-01T02:14:52Z RuntimeError: CUDA unknown error - this may be due to an incorrectly set up "
                      "environment, e.g. changing env variable CUDA_VISIBLE_DEVICES after program start. Setting the "
                      "available devices to be zero."]},
        context={"scheduler": "kubernetes", "nodes": ["n1", "n2"], "start_time": "2025-01-01T00:05:00Z",
                 "end_time": "2025-01-01T02:30:00Z"}, expect=Expect(fired=False, sub_domain="gpu", culprits=["n2"])),
])
def container_gpus_lost_on_reload(ws: Workspace) -> None:
    if ws.context.scheduler != "kubernetes":
        return
    reloads: dict[str, list[datetime]] = {}
    for fact in ws.events_of(f"{EventType.CONTEXT}.systemd_reloaded"):
        if fact.node and fact.time is not None:
            reloads.setdefault(ws.canonical_node(fact.node) or fact.node, []).append(fact.time)
    reach = timedelta(seconds=RELOAD_REACH_S)
    for event in [e for e in ws.events_of(EventType.NODE_BAD) if e.symptom in _AFTER_RELOAD]:
        failed = event.time
        if failed is None:
            continue
        before = [t for t in reloads.get(ws.canonical_node(event.node) or "", []) if failed - reach <= t <= failed]
        if before:
            ws.reread(event, _LOST_ITS_GPUS, f"{event.node}'s systemd reloaded at {max(before):%H:%M:%S}: the container "
                                             "lost its GPU device rules")


def _plugin_case(title: str, then: str, expect: Expect) -> RuleCase:
    """A rule case: n1's device plugin finds it cannot health-check a GPU at 09:58:41, then logs `then`."""
    return RuleCase(title=title, evidence={"n1/scheduler": [
        "2026-08-04T09:58:41Z W0804 09:58:41.469218       1 health.go:99] Device GPU-9ab4fc9a is too old to support "
        "healthchecking.", then]},
        context={"nodes": ["n1", "n2"], "scheduler": "kubernetes", "start_time": "2026-08-04T09:50:00Z",
                 "end_time": "2026-08-04T10:10:00Z"}, expect=expect)


@filter_rule("PluginMarksWhatItCannotCheck", phase=Phase.FILTER, doc=f"""
A device plugin that found it cannot health-check a node's GPUs (`{_CANNOT_CHECK}`) and marked them unhealthy for it
reports the marks in its usual form ('device marked unhealthy: <uuid>') within {PLUGIN_MARKS_S:.0f} s: those marks are
the same event, not a GPU fault, and are read as `{_CANNOT_CHECK}`. A mark that names an Xid, or comes later, is a
fault the plugin saw and stays `{_MARKED_UNHEALTHY}`.
""", cases=[
    # https://github.com/NVIDIA/k8s-device-plugin/pull/1562 (the warning, then the mark, for GPUs without health events)
    _plugin_case("the warning, then the plugin's mark of the same GPU",
                 "2026-08-04T09:58:41Z I0804 09:58:41.476318       1 server.go:291] 'nvidia.com/gpu' device marked "
                 "unhealthy: GPU-9ab4fc9a",
                 Expect(fired=True, sub_domain="configuration", culprits=["n1"], root_symptom=_CANNOT_CHECK)),
    _plugin_case("an Xid the plugin saw later on the same node",
                 "2026-08-04T10:05:41Z 2026/08/04 10:05:41 XidCriticalError: Xid=79 on Device=GPU-7540a9b3, the device "
                 "will go unhealthy.",
                 Expect(fired=False, demoted=[_MARKED_UNHEALTHY])),
])
def plugin_marks_what_it_cannot_check(ws: Workspace) -> None:
    warned: dict[str, datetime] = {}
    for event in ws.events_of(EventType.NODE_BAD):
        if event.symptom == _CANNOT_CHECK and event.node and event.time is not None:
            warned[event.node] = min(event.time, warned.get(event.node, event.time))
    window = timedelta(seconds=PLUGIN_MARKS_S)
    for event in [e for e in ws.events_of(EventType.NODE_BAD) if e.symptom == _MARKED_UNHEALTHY]:
        since = warned.get(event.node or "")
        if since is not None and event.time is not None and not event.attributes.get("xid") and \
                since <= event.time <= since + window:
            ws.reread(event, _CANNOT_CHECK, "the plugin marked the GPU it had just found it cannot health-check")


_REFUSED_IN_RESTART = "Pod refused while the device plugin restarted"
# How long the kubelet keeps a stopped plugin's devices unhealthy while it waits for it to register again
# (endpointStopGracePeriod in the kubelet's device manager).
PLUGIN_GRACE_S = 300.0


def _refusal_case(title: str, before: list[str], expect: Expect) -> RuleCase:
    """A rule case: lines on n1 `before` the kubelet refuses a pod there at 10:14:02 for 'no healthy devices'."""
    return RuleCase(title=title, evidence={"n1/scheduler": [*before,
        '2025-01-01T00:14:02Z I0101 00:14:02.121208    1994 predicate.go:172] "Failed to admit pod" pod="ml/w-1" '
        'err="Allocate failed due to no healthy devices present; cannot allocate unhealthy devices nvidia.com/gpu, '
        'which is unexpected"']},
        context={"nodes": ["n1", "n2"], "scheduler": "kubernetes", "start_time": "2025-01-01T00:10:00Z",
                 "end_time": "2025-01-01T00:20:00Z"}, expect=expect)


@filter_rule("RefusedWhileThePluginRestarted", phase=Phase.FILTER, doc=f"""
The kubelet's refusal of a pod for 'no healthy devices' (`{_MARKED_UNHEALTHY}` in the kubelet's form, naming no Xid
and no GPU) on a node whose device plugin stopped serving (fact device_plugin_stopped) at most {PLUGIN_GRACE_S:.0f} s
before is the kubelet's grace period after a plugin restart, not a GPU fault: it becomes `{_REFUSED_IN_RESTART}`
(scheduler, no node blamed). A GPU the plugin itself marked unhealthy on that node (an Xid, a named device) keeps the
refusal as that GPU's.
""", cases=[
    # https://github.com/kubernetes/kubernetes/issues/120146; the plugin's line is k8s-device-plugin's Stop()
    _refusal_case("the plugin stopped to restart a second before the refusal", [
        "2025-01-01T00:14:01Z I0101 00:14:01.922113       1 server.go:142] Stopping to serve 'nvidia.com/gpu' on "
        "/var/lib/kubelet/device-plugins/nvidia-gpu.sock"],
        Expect(fired=True, sub_domain="scheduler", culprits=[], root_symptom=_REFUSED_IN_RESTART)),
    _refusal_case("the plugin marked a GPU unhealthy for an Xid before it restarted", [
        "2025-01-01T00:13:40Z 2025/01/01 00:13:40 XidCriticalError: Xid=79 on Device=GPU-7540a9b3, the device will go "
        "unhealthy.",
        "2025-01-01T00:14:01Z I0101 00:14:01.922113       1 server.go:142] Stopping to serve 'nvidia.com/gpu' on "
        "/var/lib/kubelet/device-plugins/nvidia-gpu.sock"],
        Expect(fired=False, sub_domain="gpu", culprits=["n1"])),
    _refusal_case("a refusal with no plugin restart before it", [
        "2025-01-01T00:12:00Z I0101 00:12:00.000000       1 server.go:117] Starting to serve 'nvidia.com/gpu' on "
        "/var/lib/kubelet/device-plugins/nvidia-gpu.sock"],
        Expect(fired=False, sub_domain="gpu", culprits=["n1"])),
])
def refused_while_the_plugin_restarted(ws: Workspace) -> None:
    stopped: dict[str, list[datetime]] = {}
    for fact in ws.events_of(f"{EventType.CONTEXT}.device_plugin_stopped"):
        if fact.node and fact.time is not None:
            stopped.setdefault(fact.node, []).append(fact.time)
    marks = [e for e in ws.events_of(EventType.NODE_BAD) if e.symptom == _MARKED_UNHEALTHY]
    faulty = {e.node for e in marks if e.attributes.get("xid") or e.attributes.get("marked")}
    grace = timedelta(seconds=PLUGIN_GRACE_S)
    for event in marks:
        if event.node in faulty or event.time is None:
            continue
        if any(t <= event.time <= t + grace for t in stopped.get(event.node or "", [])):
            ws.reread(event, _REFUSED_IN_RESTART, f"{event.node}'s device plugin had stopped serving minutes before: "
                                                  "the kubelet's grace period of a plugin restart")


@filter_rule("GpuHangOnEveryNode", phase=Phase.FILTER, doc=f"""
A GPU hang (ROCm's 'HW Exception by GPU node-N ... reason :GPU Hang', an Intel driver's 'Timedout job' or 'GPU HANG')
that every node of a multi-node job reports within clock_skew_s of the first, while no GPU logged an uncorrectable
hardware error or a failed reset, is what the workload's kernels did to every GPU they ran on (an index past an
embedding table hangs some AMD GPUs instead of raising an error; a runtime regression hangs every card): each report
becomes `{_HANG_EVERYWHERE}` (application, no node blamed). A hang on some nodes only stays that GPU's.
""", cases=[
    # https://github.com/ROCm/legacy-rocm-build/issues/1724 (an out-of-range embedding index; both nodes read the data)
    RuleCase(title="both nodes' GPUs hang within a minute", evidence={
        "a/applog": ["2025-01-01T00:10:00Z HW Exception by GPU node-1 (Agent handle: 0x55d1c3a4b9e0) reason :GPU Hang"],
        "b/applog": ["2025-01-01T00:10:21Z HW Exception by GPU node-1 (Agent handle: 0x5611e07c2d50) reason :GPU Hang"]},
        context={"nodes": ["a", "b"]},
        expect=Expect(fired=True, sub_domain="application", culprits=[], root_symptom=_HANG_EVERYWHERE)),
    RuleCase(title="one node's GPU hangs", evidence={
        "a/applog": ["2025-01-01T00:10:00Z HW Exception by GPU node-9 (Agent handle: 0x64ff272d8ab0) reason :GPU Hang"],
        "b/applog": ["2025-01-01T00:09:00Z step 10 loss 2.1"]},
        context={"nodes": ["a", "b"]}, expect=Expect(fired=False, sub_domain="gpu", culprits=["a"])),
    RuleCase(title="both nodes' Intel GPUs time out a job in the same minute", evidence={
        f"{n}/syslog": [f"Jan  1 00:10:{i}0 {n} kernel: xe 0000:3d:00.0: [drm] Tile0: GT0: Timedout job: seqno=15, "
                        "lrc_seqno=15, guc_id=9, flags=0x20 in python [2693]"] for i, n in enumerate("ab")},
        context={"nodes": ["a", "b"]},
        expect=Expect(fired=True, sub_domain="application", culprits=[], root_symptom=_HANG_EVERYWHERE)),
])
def gpu_hang_on_every_node(ws: Workspace) -> None:
    hangs = [e for e in ws.events_of(EventType.NODE_BAD) if e.symptom in _GPU_HANGS and e.time is not None]
    first = every_node_at_once(ws, hangs)
    if first is None or any(e.symptom in _GPU_HARDWARE for e in ws.events_of(EventType.NODE_BAD)):
        return
    for event in hangs:
        ws.reread(event, _HANG_EVERYWHERE, f"every node reported a GPU hang from {first:%H:%M:%S} on, and no GPU a "
                                           "hardware error: the workload's kernels")


_TOOL_RESET = "GPU reset by a tool on the workload's node"
TOOL_RESET_REACH_S = 60  # a reset's hang exceptions reach the node's ROCm processes within seconds


@refiner("ToolResetExplainsGpuHang", phase=Phase.REFINE, doc=f"""
A GPU hang the ROCm runtime reported (`AMD GPU hang`) on a node where a reset command ran ({_TOOL_RESET}) up to
{TOOL_RESET_REACH_S} s before it - or, the hang's line carrying no time of its own, while the workload ran - is the
reset reaching every ROCm process of the node: the hang is demoted and the reset becomes the root candidate
(configuration, no node blamed). A hang with no reset command beside it stays the GPU's.
""", cases=[
    # https://github.com/ROCm/rocm-systems/issues/3191 (another job's epilog resets GPU 6; this job uses GPUs 0-3)
    RuleCase(title="another job's epilog resets a GPU; this job's processes report a hang", evidence={
        "a/syslog": ["Jan  1 00:10:00 a slurm-epilog[201455]: 50-gpu-reset: amd-smi reset --gpureset -g 6",
                     "Jan  1 00:10:01 a kernel: [752480.167484] amdgpu 0000:d1:00.0: amdgpu: GPU reset begin!"],
        "a/applog": ["2025-01-01T00:10:02Z HW Exception by GPU node-8 (Agent handle: 0x55d2a4e1c000) reason :GPU Hang"]},
        context={"nodes": ["a", "b"], "start_time": "2025-01-01T00:00:00Z", "end_time": "2025-01-01T00:12:00Z"},
        expect=Expect(fired=True, sub_domain="configuration", culprits=[], root_symptom=_TOOL_RESET)),
    RuleCase(title="a hang with no reset command on the node", evidence={
        "a/applog": ["2025-01-01T00:10:02Z HW Exception by GPU node-8 (Agent handle: 0x55d2a4e1c000) reason :GPU Hang"]},
        context={"nodes": ["a", "b"]}, expect=Expect(fired=False, sub_domain="gpu", culprits=["a"])),
])
def tool_reset_explains_gpu_hang(ws: Workspace) -> None:
    reach = timedelta(seconds=TOOL_RESET_REACH_S)
    for hang in ws.active(prefix="AMD GPU hang"):
        resets = [r for r in ws.select(prefix=_TOOL_RESET, status="interesting", node=hang.node)
                  if r.first_time is not None and not ws.undated(r) and (
                      ws.dated_during_run(r) if ws.undated(hang) or hang.first_time is None
                      else timedelta(0) <= hang.first_time - r.first_time <= reach)]
        if resets:
            reset = min(resets, key=WorkSymptom.sort_key)
            ws.promote(reset, f"a GPU reset ran on {hang.node} at {reset.first_time:%H:%M:%S}: it reaches every ROCm "
                              "process of the node as a GPU hang")
            ws.demote(hang, f"the reset on {hang.node} ({_TOOL_RESET}) reached this process")


@filter_rule("HandleXidBurstEvents", phase=Phase.FILTER_EARLY, after=("DcgmXidGaugeChanges",), doc="""
Decode raw Xid burst events into node symptoms. Xid 144-150 (NVLink5) are decoded from IntrInfo and
errorStatus (decode sheet): a fatal row becomes a bad symptom named XID-<code>.<reason sub-code> (link-down
rows) or XID-<code>.<unit>, a non-fatal row an interesting one; the decoded immediate and investigatory
actions become the symptom's next action. Other Xids become XID-<code>, bad unless the catalog calls the
code informational. Each decode is also published as an XID_parser.info event for inspection.
""", cases=[
    _WALKTHROUGH_CASE,
    RuleCase(title="no xid", evidence={"node-01/applog": ["2025-01-01T00:00:00Z training step 10 loss 1.0"]},
             expect=Expect(fired=False)),
])
def handle_xid_burst_events(ws: Workspace) -> None:
    bursts = ws.events_of(EventType.XID_BURST)
    codes_by_node = {(e.node, _code(e)) for e in bursts}
    majors = _driver_majors(ws)
    for event in bursts:
        ws.drop(event, "decoded")
        code = _code(event)
        symptom, bad, attributes = _decode_event(ws, event, code, majors.get(event.node))
        _emit_decoded(ws, event, symptom, bad, attributes)
        caused_by = _CAUSED_BY_RE.search(event.evidence.text)
        if caused_by:
            _emit_referenced_xid(ws, event, int(caused_by.group(1)), codes_by_node)


def _code(event: Event) -> int:
    return int((event.symptom or "XID-0").removeprefix("XID-"))


def _decode_event(ws: Workspace, event: Event, code: int, driver_major: int | None) -> tuple[str, bool, dict[str, object]]:
    attributes: dict[str, object] = dict(event.attributes)
    symptom = f"XID-{code}"
    bad = ws.catalog.symptom(symptom).role != "context"
    if code == 74 and attributes.get("registers"):
        decoded74 = decode_xid74(str(attributes["registers"]))
        if decoded74 is not None:
            attributes["decode"] = "; ".join(decoded74.notes)
            return symptom, decoded74.fatal, attributes
    if code not in NVLINK5_CODES:
        return symptom, bad, attributes
    if not attributes.get("intrinfo"):
        attributes["decode"] = "IntrInfo/errorStatus not printed: cannot be decoded, kept as a fatal candidate"
        return symptom, True, attributes
    decoded = decode_nvlink5(code, int(str(attributes["intrinfo"]), 16), int(str(attributes.get("error_status", "0x0")), 16),
                             str(attributes.get("unit", "")), driver_major)
    if decoded is None:
        attributes["decode"] = "no row of the NVLink5 decode sheet matches; kept as a fatal candidate"
        return symptom, True, attributes
    attributes.update(unit=decoded.unit, subcode=decoded.subcode, decode_layout=decoded.layout,
                      immediate=decoded.immediate, investigatory=decoded.investigatory, severity=decoded.severity,
                      hw_sw=decoded.hw_sw, impact=decoded.impact, meaning=decoded.meaning,
                      action=f"Drain the node and follow the decode: {decoded.meaning}.")
    return decoded.symptom, decoded.fatal, attributes


def _emit_decoded(ws: Workspace, event: Event, symptom: str, bad: bool, attributes: dict[str, object]) -> None:
    ws.emit(EmitSpec(type=EventType.NODE_BAD if bad else EventType.NODE_INTERESTING, node=event.node,
                     symptom=symptom, evidence=event.evidence, time=event.time, last_time=event.last_time,
                     attributes=attributes, count=event.count))
    ws.emit(EmitSpec(type=EventType.XID_INFO, node=event.node, symptom=symptom, evidence=event.evidence,
                     time=event.time, attributes=attributes, count=event.count))


def _emit_referenced_xid(ws: Workspace, event: Event, code: int, seen: set[tuple[str | None, int]]) -> None:
    """Newer drivers print `Xid 45 ... caused by previous Xid N`: when Xid N itself is missing from the
    collected logs (rotated, rate-limited, a coverage gap) the Xid 45 line is the evidence that it happened."""
    if (event.node, code) in seen or ws.catalog.symptom(f"XID-{code}").role != "root":
        return
    seen.add((event.node, code))
    attributes = {"xid": str(code), "pci": event.attributes.get("pci", ""), "inferred_from": "XID-45",
                  "decode": f"reported by an Xid 45 line; the Xid {code} line itself was not collected"}
    ws.emit(EmitSpec(type=EventType.NODE_BAD, node=event.node, symptom=f"XID-{code}", evidence=event.evidence,
                     time=event.time, last_time=event.last_time, attributes=attributes, count=event.count))


_NVLINK_XIDS = {74} | set(NVLINK5_CODES)


def _xid_code(name: str) -> int | None:
    head = name.removeprefix("XID-").split(".")[0]
    return int(head) if head.isdigit() else None


def _explained_by(root: WorkSymptom, other: WorkSymptom) -> str | None:
    """Why `other` (later in the same burst on the same node) is a symptom of `root`, or None."""
    if other.definition.strength < HARDWARE_STRENGTH:
        kind = "sympathetic" if other.role == "symptom" else "application-class"
        return f"{kind} Xid in a burst that a hardware Xid began"
    if other.value_set("pci") & root.value_set("pci"):
        return "later Xid on the same GPU"
    if _xid_code(root.name) == 79 and _xid_code(other.name) in _NVLINK_XIDS:
        return "NVLink peers of a GPU that fell off the bus lose their links"
    return None


UNLISTED_XID_REPEATS = 5  # an unlisted Xid this many times on one GPU is that GPU faulting, not a stray event
_REPEATED_UNLISTED = "Repeated Xid of an unlisted code on one GPU"
_PLAIN_XID = re.compile(r"XID-\d+")  # a code alone: decoded ones (NVLink5's 'XID-149.33') have their own entries


@filter_rule("UnlistedXidRepeatedOnOneNode", phase=Phase.FILTER, doc=f"""
An Xid whose code NVIDIA's current catalog does not list (`XID-*`: older GPUs' codes such as 9 or 53) blames no node
by itself. Repeated {UNLISTED_XID_REPEATS} times or more on one node of a multi-node workload, while no other node
logged an unlisted Xid, it is that node's GPU faulting again and again under the workload: the reports become
`{_REPEATED_UNLISTED}` (gpu, that node). Once, or on several nodes, they stay as they are.
""", cases=[
    # https://pastebin.com/xkjT7KVW (an Xid 9 flood from a VM's passthrough GPU)
    RuleCase(title="Xid 9 again and again on one node", evidence={"b/syslog": [
        f"Jan  1 00:10:0{i} b kernel: NVRM: Xid (0000:00:05): 9, Channel 00000020 Instance 00000000 Intr 00100000"
        for i in range(6)]}, context={"nodes": ["a", "b"]},
        expect=Expect(fired=True, sub_domain="gpu", culprits=["b"], root_symptom=_REPEATED_UNLISTED)),
    RuleCase(title="one Xid 9", evidence={"b/syslog": [
        "Jan  1 00:10:00 b kernel: NVRM: Xid (0000:00:05): 9, Channel 00000020 Instance 00000000 Intr 00100000"]},
        context={"nodes": ["a", "b"]}, expect=Expect(fired=False, sub_domain="gpu", culprits=[])),
])
def unlisted_xid_repeated_on_one_node(ws: Workspace) -> None:
    unlisted = [e for e in ws.events_of(EventType.NODE_BAD) if e.symptom and _PLAIN_XID.fullmatch(e.symptom)
                and e.symptom not in ws.catalog.symptoms]
    nodes = {e.node for e in unlisted}
    if len(ws.context.nodes) < 2 or len(nodes) != 1 or sum(e.count for e in unlisted) < UNLISTED_XID_REPEATS:
        return
    for event in unlisted:
        ws.reread(event, _REPEATED_UNLISTED, f"{event.symptom} repeated on this node's GPU only")


# Xid 154 recovery actions after which the GPU cannot take the next job as it is (Xid catalog, Xid 154).
_RESET_ACTIONS = ("Drain and Reset", "GPU Reset Required", "Node Reboot Required")
_UNRECOVERED = "Application-class Xid left the GPU needing a reset"


@filter_rule("ApplicationXidLeftGpuNeedingReset", phase=Phase.FILTER, doc=f"""
An application-class Xid (13, 31, 43 ...: an illegal address or instruction) needs only the program restarted. When
the driver then announces, by Xid 154 on the same GPU within the burst gap, that the GPU needs a reset or the node
a reboot ({", ".join(_RESET_ACTIONS)}), the GPU did not recover from the fault: whatever set it off, the node cannot
take the next job until it is reset. With no hardware-class Xid on the node, the application-class Xids become
`{_UNRECOVERED}` (gpu, that node); a hardware Xid beside them stays the root (XidBurstRoot).
""", cases=[
    # https://github.com/NVIDIA/open-gpu-kernel-modules/issues/1134 (an MMU fault escalated to Node Reboot Required)
    RuleCase(title="Xid 31 escalated to a reboot", evidence={
        "n2/syslog": [
            "Jan  1 00:10:00 n2 kernel: NVRM: Xid (PCI:0000:41:00): 31, pid=2987, name=python3, channel 0x00000018, "
            "intr 00000000. MMU Fault: ENGINE GRAPHICS GPC3 GPCCLIENT_T1_12 faulted @ 0x7f3a_9c200000. Fault is of "
            "type FAULT_PDE ACCESS_TYPE_VIRT_READ",
            "Jan  1 00:10:01 n2 kernel: NVRM: Xid (PCI:0000:41:00): 154, GPU recovery action changed from 0x0 (None) "
            "to 0x2 (Node Reboot Required)"],
        "n2/applog": ["2025-01-01T00:10:01Z [rank5]: RuntimeError: CUDA error: an illegal memory access was "
                      "encountered"]},
        expect=Expect(fired=True, sub_domain="gpu", culprits=["n2"], root_symptom=_UNRECOVERED)),
    RuleCase(title="Xid 31 with no recovery action: the program's", evidence={
        "n2/syslog": [
            "Jan  1 00:10:00 n2 kernel: NVRM: Xid (PCI:0000:41:00): 31, pid=2987, name=python3, channel 0x00000018, "
            "intr 00000000. MMU Fault: ENGINE GRAPHICS GPC3 GPCCLIENT_T1_12 faulted @ 0x7f3a_9c200000. Fault is of "
            "type FAULT_PDE ACCESS_TYPE_VIRT_READ"],
        "n2/applog": ["2025-01-01T00:10:01Z [rank5]: RuntimeError: CUDA error: an illegal memory access was "
                      "encountered"]},
        expect=Expect(fired=False, sub_domain="application", culprits=[])),
    RuleCase(title="a reset announced for another GPU", evidence={
        "n2/syslog": [
            "Jan  1 00:10:00 n2 kernel: NVRM: Xid (PCI:0000:41:00): 31, pid=2987, name=python3, channel 0x00000018, "
            "intr 00000000. MMU Fault: ENGINE GRAPHICS GPC3 GPCCLIENT_T1_12 faulted @ 0x7f3a_9c200000. Fault is of "
            "type FAULT_PDE ACCESS_TYPE_VIRT_READ",
            "Jan  1 00:10:01 n2 kernel: NVRM: Xid (PCI:0000:61:00): 154, GPU recovery action changed from 0x0 (None) "
            "to 0x1 (GPU Reset Required)"]},
        expect=Expect(fired=False, root_symptom="XID-31")),
])
def application_xid_left_gpu_needing_reset(ws: Workspace) -> None:
    gap = timedelta(seconds=ws.params.burst_gap_s)
    announced = [e for e in ws.events if e.symptom == "XID-154" and e.time is not None
                 and e.attributes.get("recovery_action") in _RESET_ACTIONS]
    for node in sorted({e.node or "" for e in announced}):
        xids = [e for e in ws.events_of(EventType.NODE_BAD) if e.node == (node or None) and e.symptom
                and (d := ws.catalog.symptoms.get(e.symptom)) is not None and d.family == "xid"]
        if any(ws.catalog.symptoms[e.symptom].sub_domain != SubDomain.APPLICATION for e in xids if e.symptom):
            continue
        for fault in xids:
            action = next((str(a.attributes["recovery_action"]) for a in announced if a.node == fault.node
                           and a.attributes.get("pci") == fault.attributes.get("pci") and fault.time is not None
                           and a.time is not None and timedelta(0) <= a.time - fault.time <= gap), None)
            if action:
                ws.reread(fault, _UNRECOVERED, f"the driver asked for '{action}' after it (Xid 154)",
                          {k: v for k, v in fault.attributes.items() if k in ("pci", "gpu")})


@refiner("XidBurstRoot", phase=Phase.CLEAN, after=("Xid154Linkage",), doc=f"""
Within one node's Xid burst (events less than burst_gap_s apart, 3 minutes by default) the earliest
hardware-class Xid (strength >= {HARDWARE_STRENGTH}: 48, 62, 64, 74, 79, 94, 95, 119/120, 140, 143, fatal NVLink5 ...)
is the root. Its symptoms are: application-class Xids of the burst (13, 31, 43 ...), later Xids on the same GPU,
and NVLink Xids (74, 144-150) on the other GPUs after a GPU fell off the bus (Xid 79). Hardware Xids on other
GPUs are kept: several GPUs can fail together.
""", cases=[
    RuleCase(title="79 then 74", evidence={"n1/syslog": [
        "Jan  1 00:10:00 n1 kernel: NVRM: Xid (PCI:0000:91:00): 79, pid='<unknown>', name=<unknown>, GPU has fallen off the bus.",
        "Jan  1 00:10:05 n1 kernel: NVRM: Xid (PCI:0000:92:00): 74, pid='<unknown>', name=<unknown>, NVLink: fatal error detected on link 3(0x0, 0x0, 0x10000, 0x0, 0x0, 0x0, 0x0)"]},
        expect=Expect(root_symptom="XID-79", demoted=["XID-74"], culprits=["n1"])),
    RuleCase(title="single xid", evidence={"n1/syslog": [
        "Jan  1 00:10:00 n1 kernel: NVRM: Xid (PCI:0000:91:00): 79, pid='<unknown>', name=<unknown>, GPU has fallen off the bus."]},
        expect=Expect(fired=False, root_symptom="XID-79")),
])
def xid_burst_root(ws: Workspace) -> None:
    gap = timedelta(seconds=ws.params.burst_gap_s)
    nodes = sorted({s.node or "" for s in ws.active(role="root") if s.definition.family == "xid"})
    for node in nodes:
        xids = sorted(ws.select(status="bad", node=node or None, family="xid"), key=lambda s: s.sort_key())
        hardware = [s for s in xids if s.role == "root" and s.definition.strength >= HARDWARE_STRENGTH]
        if not hardware or hardware[0].first_time is None:
            continue
        root = hardware[0]
        root_first: datetime = hardware[0].first_time
        for other in xids:
            if other is root or other.first_time is None:
                continue
            in_burst = other.first_time <= (root.last_time or root_first) + gap
            if not in_burst or other.first_time < root_first:
                continue
            reason = _explained_by(root, other)
            if reason:
                ws.demote(other, f"{reason} ({root.name} on {root.node}, same burst)")


# Xid 154 recovery actions, least to most disruptive (Xid catalog trigger text).
RECOVERY_ORDER = ("None", "Drain P2P", "Drain and Reset", "GPU Reset Required", "Node Reboot Required")


@refiner("Xid154Linkage", phase=Phase.CLEAN, doc="""
Xid 154 announces the recovery action the driver requires after another Xid (Drain and Reset, GPU Reset
Required, Node Reboot Required). It is never the cause; the most disruptive action announced on a node is
attached to that node's hardware Xids, so their next action says what the driver asks for.
""", cases=[
    RuleCase(title="149 with 154", evidence={"n2/syslog": [
        "Jan  1 00:10:00 n2 kernel: NVRM: Xid (PCI:0008:01:00): 149, NETIR_LINK_EVT Fatal XC0 i0 Link 08 (0x004505c6 0x00000000 0x00000000 0x00000000 0x00000000 0x00000000)",
        "Jan  1 00:10:00 n2 kernel: NVRM: Xid (PCI:0008:01:00): 154, GPU recovery action changed from 0x0 (None) to 0x4 (Drain and Reset)",
        "Jan  1 00:10:01 n2 kernel: NVRM: Xid (PCI:0008:01:00): 154, GPU recovery action changed from 0x4 (Drain and Reset) to 0x1 (GPU Reset Required)"]},
        expect=Expect(fired=True, root_symptom="XID-149.4", culprits=["n2"])),
])
def xid154_linkage(ws: Workspace) -> None:
    for node in sorted({s.node or "" for s in ws.select(prefix="XID-154")}):
        actions = {a for s in ws.select(prefix="XID-154", node=node or None) for a in s.value_set("recovery_action")}
        known = [a for a in RECOVERY_ORDER if a in actions]
        if not known:
            continue
        action = known[-1]
        for s in ws.active(node=node or None, role="root"):
            if s.definition.family == "xid":
                s.attributes["recovery_action"] = action
                ws.note("link", f"driver recovery action for {s.name}: {action} (Xid 154)", node=s.node, symptom=s.name)


@refiner("FabricNotReadyAfterSxid", phase=Phase.CLEAN, doc="""
When CUDA on a node fails with 'system not yet initialized' (the NVLink fabric is not up) and the same node's
NVSwitch reported SXids, the SXids are why the fabric is not ready: they become bad and, being earlier, the
root cause.
""", cases=[
    RuleCase(title="sxid then 802", evidence={
        "n2/syslog": ["Jan  1 00:01:23 n2 kernel: [38.1] nvidia-nvswitch3: SXid (PCI:0000:04:00.0): 22013, Non-fatal, Link 44 Minion Link DLREQ interrupt"],
        "n2/applog": ["2025-01-01T00:04:32Z [rank8]: RuntimeError: CUDA error: system not yet initialized"],
        "n1/applog": ["2025-01-01T00:04:35Z srun: error: n2: task 1: Exited with exit code 1"]},
        expect=Expect(fired=True, root_symptom="NVSwitch SXid", culprits=["n2"], sub_domain="nvlink")),
    RuleCase(title="sxid alone", evidence={
        "n2/syslog": ["Jan  1 00:01:23 n2 kernel: [38.1] nvidia-nvswitch3: SXid (PCI:0000:04:00.0): 22013, Non-fatal, Link 44 Minion Link DLREQ interrupt"]},
        expect=Expect(fired=False, sub_domain="unknown")),
])
def fabric_not_ready_after_sxid(ws: Workspace) -> None:
    for failure in ws.active(prefix="CUDA system not initialized"):
        for sxid in ws.select(node=failure.node, prefix="NVSwitch SXid", status="interesting"):
            ws.promote(sxid, f"CUDA on {failure.node} cannot start (fabric not ready) and this node's NVSwitch "
                       "reported these SXids")


@refiner("DiagnosticFailedOnTestConditions", phase=Phase.CLEAN, doc="""
A DCGM diagnostic's failure of a GPU is that GPU's fault unless the same report says the test's conditions failed it:
copy engines already busy before nvbandwidth, or thermal violations of no length. When one of those warnings names
the failed GPU on the same node (or names no GPU), the failure is demoted and the warning is what remains: a test to
run again, not a GPU to drain.
""", cases=[
    RuleCase(title="nvbandwidth on busy copy engines", evidence={"n1/applog": [
        "2025-01-01T00:10:00Z | nvbandwidth               | Fail - GPU: 2                                  |",
        "2025-01-01T00:10:00Z | Warning                   | GPU 2 The memory copy utilization for the GPU: 2 is "
        "greater than 10%. This may affect the results of the nvbandwidth test. |"]},
        expect=Expect(fired=True, sub_domain="configuration", culprits=[],
                      demoted=["GPU failed a DCGM diagnostic"])),
    RuleCase(title="a real thermal failure beside a zero-length one", evidence={"n1/applog": [
        "2025-01-01T00:10:00Z | Targeted Power            | Fail - GPU: 0                                  |",
        "2025-01-01T00:10:00Z | Warning                   | GPU 0 Thermal violations totaling 13.3 seconds started at "
        "9.7 seconds into the test |",
        "2025-01-01T00:10:00Z | Warning                   | GPU 5 Thermal violations totaling 0.0 seconds started at "
        "30.0 seconds into the test |"]},
        expect=Expect(fired=False, sub_domain="gpu", culprits=["n1"])),
])
def diagnostic_failed_on_test_conditions(ws: Workspace) -> None:
    for failure in ws.active(prefix="GPU failed a DCGM diagnostic"):
        for condition in ws.select(node=failure.node, prefix="DCGM diagnostic failed on its test conditions"):
            gpus = condition.value_set("gpu")
            if not gpus or gpus & failure.value_set("gpu"):
                ws.demote(failure, f"the report says its test conditions failed GPU {', '.join(sorted(gpus)) or '?'} "
                                   f"({condition.evidence[0].text.strip()[:120]})")
                break


@refiner("LostGpuTakesItsLinks", phase=Phase.CLEAN, doc="""
A GPU that fell off the bus (Xid 79) takes its NVLinks down with it: the NVSwitch ports wired to it then report link
faults (SXid 20034 'LTSSM Fault Up', link down). NVLink and NVSwitch errors on the same node that begin with the loss or
after it (from the clock-skew tolerance before) are those links, not a second fault: they are demoted and the lost GPU
stays the root. NVLink errors that began before the GPU was lost are kept.
""", cases=[
    RuleCase(title="the switch ports of a lost GPU", evidence={"n3/syslog": [
        "Jan  1 00:31:17 n3 kernel: [2650374.4] NVRM: Xid (PCI:0000:9a:00): 79, pid='<unknown>', name=<unknown>, GPU has "
        "fallen off the bus.",
        "Jan  1 00:31:29 n3 kernel: [2650386.4] nvidia-nvswitch0: SXid (PCI:0000:05:00.0): 20034, Fatal, Link 63 LTSSM "
        "Fault Up"]},
        context={"nodes": ["n1", "n3"]},
        expect=Expect(fired=True, sub_domain="gpu", culprits=["n3"], demoted=["NVSwitch SXid (fatal)"])),
    RuleCase(title="the fabric failed first", evidence={"n3/syslog": [
        "Jan  1 00:20:29 n3 kernel: [2649686.4] nvidia-nvswitch0: SXid (PCI:0000:05:00.0): 20034, Fatal, Link 63 LTSSM "
        "Fault Up",
        "Jan  1 00:31:17 n3 kernel: [2650374.4] NVRM: Xid (PCI:0000:9a:00): 79, pid='<unknown>', name=<unknown>, GPU has "
        "fallen off the bus."]},
        context={"nodes": ["n1", "n3"]}, expect=Expect(fired=False, sub_domain="nvlink", culprits=["n3"])),
])
def lost_gpu_takes_its_links(ws: Workspace) -> None:
    skew = timedelta(seconds=ws.params.clock_skew_s)
    for lost in ws.active(prefix="XID-79"):
        if lost.first_time is None or ws.undated(lost):
            continue
        for link in ws.active(node=lost.node, role="root"):
            if (link.sub_domain == SubDomain.NVLINK and link.first_time is not None and not ws.undated(link)
                    and link.first_time >= lost.first_time - skew):
                ws.demote(link, f"the links of the GPU that fell off the bus at {lost.first_time:%H:%M:%S} (Xid 79)")


@refiner("SxidSeverityNotLogged", phase=Phase.CLEAN, doc="""
An NVSwitch SXid is logged as a group: a line with its severity (Fatal / Non-fatal), then Severity/Engine and Data
lines. When a node's log holds the Data lines of an SXid code but no severity line for that code, the severity is
unknown: the event is promoted to a root candidate (NVSwitch errors are rare and name the node's fabric), ranked below
a known fatal SXid. With the severity line present, the severity line decides and the Data lines stay context.
""", cases=[
    RuleCase(title="only the Data lines", evidence={"n2/syslog": [
        "Jan  1 00:34:54 n2 kernel: [2713193.6] nvidia-nvswitch1: SXid (PCI:0000:84:00.0): 12028, Data {0x000001c0, "
        "0x00bd5c8a, 0x00000500, 0x00000064, 0x00000000, 0x40008000, 0x5a001100, 0x00000000, 0x00000000}",
        "Jan  1 00:34:55 n2 kernel: [2713194.9] NVRM: Xid (PCI:0000:3a:00): 45, pid=26628, name=python3, Ch 00000002"]},
        expect=Expect(fired=True, sub_domain="nvlink", culprits=["n2"], root_symptom="NVSwitch SXid")),
    RuleCase(title="a non-fatal group, logged whole", evidence={"n2/syslog": [
        "Jan  1 00:01:23 n2 kernel: [38.1] nvidia-nvswitch3: SXid (PCI:0000:04:00.0): 22013, Non-fatal, Link 44 Minion "
        "Link DLREQ interrupt",
        "Jan  1 00:01:23 n2 kernel: [38.1] nvidia-nvswitch3: SXid (PCI:0000:04:00.0): 22013, Data {0x0000002b, "
        "0x0000002b, 0x00000000}"]},
        expect=Expect(fired=False, culprits=[], demoted=[])),
])
def sxid_severity_not_logged(ws: Workspace) -> None:
    for data in ws.select(prefix="NVSwitch SXid (severity not logged)", status="interesting"):
        codes = data.value_set("sxid")
        logged = [s for s in ws.select(node=data.node, prefix="NVSwitch SXid (") if s is not data
                  and "severity not logged" not in s.name and s.value_set("sxid") & codes]
        if not logged:
            ws.promote(data, f"SXid {', '.join(sorted(codes))}: only its Data lines were logged, severity unknown")


KERNEL_RECORD_BEFORE_S = 1800.0  # a node's kernel record of a GPU fault this long before an application's report


# A link below this share of the fastest link of its node's status output trained down (half rate is the common case).
NVLINK_BELOW_RATE = 0.75
_SLOW_NVLINK = "NVLink running below its rate"


@filter_rule("NvlinkBelowItsRate", phase=Phase.FILTER, doc=f"""
The NVLinks of one node's GPUs run at one rate: when `nvidia-smi nvlink --status` on a node shows links at under
{NVLINK_BELOW_RATE:.0%} of the fastest link it lists, in a workload that did not complete, the slowest of them trained
down and `{_SLOW_NVLINK}` is placed on that node (nvlink, the node blamed), citing its line. Links that all run at one
rate, or a completed workload, leave nothing.
""", cases=[
    RuleCase(title="one link at half rate on a node whose job failed", evidence={"n2/applog": [
        "2025-01-01T00:12:40Z GPU 3: NVIDIA H100 80GB HBM3 (UUID: GPU-6c1e0d52)",
        "2025-01-01T00:12:40Z \t Link 0: 26.562 GB/s", "2025-01-01T00:12:40Z \t Link 10: 26.562 GB/s",
        "2025-01-01T00:12:40Z \t Link 11: 13.281 GB/s",
        "2025-01-01T00:12:43Z srun: error: n2: task 0: Exited with exit code 1"]},
        context={"nodes": ["n1", "n2"], "scheduler_state": "FAILED"},
        expect=Expect(fired=True, sub_domain="nvlink", culprits=["n2"], root_symptom=_SLOW_NVLINK)),
    RuleCase(title="every link at one rate", evidence={"n2/applog": [
        "2025-01-01T00:12:40Z \t Link 0: 26.562 GB/s", "2025-01-01T00:12:40Z \t Link 11: 26.562 GB/s",
        "2025-01-01T00:12:43Z srun: error: n2: task 0: Exited with exit code 1"]},
        context={"nodes": ["n1", "n2"], "scheduler_state": "FAILED"}, expect=Expect(fired=False)),
])
def nvlink_below_its_rate(ws: Workspace) -> None:
    if workload_completed(ws):
        return
    speeds: dict[str, list[tuple[float, Event]]] = {}
    for fact in ws.events_of(f"{EventType.CONTEXT}.nvlink_speed"):
        if fact.node:
            speeds.setdefault(fact.node, []).append((float(str(fact.attributes.get("speed", "0"))), fact))
    for node, seen in sorted(speeds.items()):
        fastest = max(speed for speed, _ in seen)
        slow = [(speed, fact) for speed, fact in seen if speed < NVLINK_BELOW_RATE * fastest]
        if slow:
            speed, fact = min(slow, key=lambda item: item[0])
            ws.emit(EmitSpec(type=EventType.NODE_BAD, node=node, symptom=_SLOW_NVLINK, evidence=fact.evidence,
                             time=fact.time, attributes={"link": fact.attributes.get("link", ""),
                                                         "speed_gbs": f"{speed:g}", "fastest_gbs": f"{fastest:g}"}))


_LINKS_DOWN = "NVLinks down on a GPU"


@filter_rule("NvlinkInactiveWhereOthersRun", phase=Phase.FILTER, doc=f"""
nvidia-smi says 'all links are inactive' for a GPU without NVLink as well as for one that lost its links. When other
GPUs of the workload list their NVLinks up (`Link N: <rate> GB/s`), the GPUs are NVLink-connected, and a GPU with none
up in a workload that did not complete lost them: `{_LINKS_DOWN}` (nvlink, that node) at its first such line. Where no
GPU lists a link up, or the workload completed, nothing is said.
""", cases=[
    RuleCase(title="one node's GPU has no link up, the others run theirs", evidence={
        "n1/applog": ["2025-01-01T00:01:00Z \t Link 0: 26.562 GB/s", "2025-01-01T00:01:00Z \t Link 1: 26.562 GB/s"],
        "n2/applog": ["2025-01-01T00:01:00Z NVML: Unable to retrieve NVLink information as all links are inactive",
                      "2025-01-01T00:01:00Z \t Link 0: 26.562 GB/s"]},
        context={"nodes": ["n1", "n2"], "scheduler_state": "FAILED"},
        expect=Expect(fired=True, sub_domain="nvlink", culprits=["n2"], root_symptom=_LINKS_DOWN)),
    RuleCase(title="PCIe GPUs: no node lists a link", evidence={
        f"{n}/applog": ["2025-01-01T00:01:00Z NVML: Unable to retrieve NVLink information as all links are inactive"]
        for n in ("n1", "n2")},
        context={"nodes": ["n1", "n2"], "scheduler_state": "FAILED"}, expect=Expect(fired=False)),
])
def nvlink_inactive_where_others_run(ws: Workspace) -> None:
    if workload_completed(ws) or not any(f.node for f in ws.events_of(f"{EventType.CONTEXT}.nvlink_speed")):
        return
    first: dict[str, Event] = {}
    for fact in sorted(ws.events_of(f"{EventType.CONTEXT}.nvlink_all_inactive"), key=time_order):
        if fact.node:
            first.setdefault(fact.node, fact)
    for node, fact in sorted(first.items()):
        ws.emit(EmitSpec(type=EventType.NODE_BAD, node=node, symptom=_LINKS_DOWN, evidence=fact.evidence,
                         time=fact.time))


@refiner("KernelRecordLocatesGpuReport", phase=Phase.REFINE_LATE, doc=f"""
An application's report of a GPU fault (CUDA's uncorrectable ECC, unknown or initialisation errors) names no GPU by
itself and is printed wherever the job's output is collected - under Slurm, every task's output lands in the batch
host's file unless the job asks for one file per node. When the node holding the report has no kernel record of a
GPU fault while another node's kernel recorded one (an Xid) in the {KERNEL_RECORD_BEFORE_S / 60:.0f} minutes before it
(or at the same time), the report is that node's incident and no longer blames the node that printed it.
""", cases=[
    RuleCase(title="the batch host prints the faulty node's CUDA error", evidence={
        "a/applog": ["2025-01-01T00:10:00Z Accelerator Fatal Error: call to cuCtxCreate returned error 214 "
                     "(CUDA_ERROR_ECC_UNCORRECTABLE): uncorrectable ECC error encountered"],
        "a/syslog": ["2025-01-01T00:00:00Z a systemd[1]: Started Session 1 of user ci."],
        "b/syslog": ["2025-01-01T00:05:00Z b kernel: NVRM: Xid (PCI:0000:ca:00): 48, pid=88127, name=python, An "
                     "uncorrectable double bit error (DBE) has been detected on GPU in the framebuffer at partition 6, "
                     "subpartition 0."]},
        expect=Expect(fired=True, sub_domain="gpu", culprits=["b"])),
    RuleCase(title="each node's own fault", evidence={
        "a/applog": ["2025-01-01T00:10:00Z Accelerator Fatal Error: call to cuCtxCreate returned error 214 "
                     "(CUDA_ERROR_ECC_UNCORRECTABLE): uncorrectable ECC error encountered"],
        "a/syslog": ["2025-01-01T00:09:59Z a kernel: NVRM: Xid (PCI:0000:3b:00): 48, pid=1, name=python, An "
                     "uncorrectable double bit error (DBE) has been detected on GPU in the framebuffer at partition 6, "
                     "subpartition 0."],
        "b/syslog": ["2025-01-01T00:09:58Z b kernel: NVRM: Xid (PCI:0000:ca:00): 48, pid=88127, name=python, An "
                     "uncorrectable double bit error (DBE) has been detected on GPU in the framebuffer at partition 6, "
                     "subpartition 0."]},
        expect=Expect(fired=False)),
])
def kernel_record_locates_gpu_report(ws: Workspace) -> None:
    kernel = [s for s in ws.active(role="root", sub_domain=SubDomain.GPU)
              if s.first_time and any(e.source == SourceKind.SYSLOG for e in s.evidence)]
    for report in ws.active(role="root", sub_domain=SubDomain.GPU):
        if report.definition.blame != "node" or report.first_time is None or \
                not all(e.source == SourceKind.APPLOG for e in report.evidence) or \
                any(k.node == report.node for k in kernel):
            continue
        before, after = timedelta(seconds=KERNEL_RECORD_BEFORE_S), timedelta(seconds=ws.params.clock_skew_s)
        owners = sorted({k.node for k in kernel if k.node and k.first_time is not None
                         and report.first_time - before <= k.first_time <= report.first_time + after})
        if len(owners) == 1:
            ws.demote(report, f"{owners[0]}'s kernel recorded the GPU fault; this node only printed the report")


_LOST_DEVICES = "Container lost its GPUs (NVML)"


@refiner("LostDevicesExplainCudaStart", phase=Phase.REFINE_EARLY, doc=f"""
NVML's 'Unknown Error' in a container (`{_LOST_DEVICES}`) says the container lost its access to /dev/nvidia* (the
runtime's device rules dropped, most often by a systemd reload). CUDA opens the same device files: in that container
it cannot initialise either, and its failure there is that loss, not the GPU's. The CUDA start failure on the node is
demoted when it came with or after the NVML report (within the clock-skew tolerance).
""", cases=[
    # https://github.com/Azure/AKS/issues/3680 (a second PyTorchJob run on an AKS A100 pool)
    RuleCase(title="NVML lost its devices, then CUDA could not start", evidence={"n1/applog": [
        "2025-01-01T00:10:00Z Failed to initialize NVML: Unknown Error",
        "2025-01-01T00:10:03Z UserWarning: CUDA initialization: CUDA unknown error - this may be due to an incorrectly "
        "set up environment, e.g. changing env variable CUDA_VISIBLE_DEVICES after program start."]},
        context={"nodes": ["n1", "n2"]},
        expect=Expect(fired=True, sub_domain="configuration", culprits=[], demoted=["GPU could not be initialised"])),
    RuleCase(title="CUDA could not start, NVML fine", evidence={"n1/applog": [
        "2025-01-01T00:10:03Z UserWarning: CUDA initialization: CUDA unknown error - this may be due to an incorrectly "
        "set up environment, e.g. changing env variable CUDA_VISIBLE_DEVICES after program start."]},
        context={"nodes": ["n1", "n2"]},
        expect=Expect(fired=False, sub_domain="gpu", culprits=["n1"])),
])
def lost_devices_explain_cuda_start(ws: Workspace) -> None:
    skew = timedelta(seconds=ws.params.clock_skew_s)
    for lost in ws.active(prefix=_LOST_DEVICES):
        if lost.first_time is None:
            continue
        for start in ws.active(prefix="GPU could not be initialised", node=lost.node):
            if start.first_time is not None and start.first_time >= lost.first_time - skew:
                ws.demote(start, f"the container on {lost.node} had lost its GPU devices (NVML could not initialise): "
                          "CUDA could not open them either")


_ON_AMD_GPUS = "NVIDIA software on a node with AMD GPUs"
# NVIDIA's user-space failing for want of its driver or libraries: nvidia-smi without a driver to talk to, CUDA finding
# no driver, and the dynamic loader missing a CUDA or NVIDIA library
_NO_NVIDIA_DRIVER = re.compile(r"NVIDIA-SMI has failed because it couldn.t communicate with the NVIDIA driver|"
                               r"Found no NVIDIA driver on your system")
_NVIDIA_LIBRARY = re.compile(r"^lib(?:cuda|cudart|cublas|cublasLt|cudnn|nvidia-ml|nccl|nvrtc|cufft|curand|cusparse|"
                             r"cusolver|nvJitLink)\.so\b")


@filter_rule("NvidiaSoftwareOnAmdGpus", phase=Phase.FILTER, doc=f"""
A node whose kernel brought AMD GPUs up (the amdgpu driver's lines: the fact amd_gpu) and shows no NVIDIA driver (no
NVRM line, no NVIDIA driver version) has no NVIDIA GPU for CUDA to use. NVIDIA's software failing there - nvidia-smi
'couldn't communicate with the NVIDIA driver', CUDA's 'Found no NVIDIA driver', the loader missing libcudart or another
CUDA library - is a program built or chosen for the wrong vendor (a CUDA build picked because NVIDIA tools are
installed), not a GPU that failed nor a node that differs from its peers: those reports are read as `{_ON_AMD_GPUS}`
(configuration, no node blamed).
""", cases=[
    # https://github.com/gpustack/gpustack/issues/1238 (CUDA installed on AMD GPU hosts: GPUStack chose the CUDA llama-box)
    RuleCase(title="a CUDA build on a node with AMD GPUs", evidence={
        "n1/syslog": ["Feb 17 21:18:40 n1 kernel: [  902.118220] [drm] Initialized amdgpu 3.57.0 20150101 for "
                      "0000:03:00.0 on minor 1"],
        "n1/applog": [
            "2025-02-17T21:29:41+00:00 - gpustack.worker.worker_manager - ERROR - Failed to get GPU devices while start "
            "rpc servers: Failed to execute ['nvidia-smi', '--format=csv,noheader', '--query-gpu=index,name,memory.total,"
            "memory.used,utilization.gpu,temperature.gpu']: Unexpected return code: 9, stdout: NVIDIA-SMI has failed "
            "because it couldn't communicate with the NVIDIA driver. Make sure that the latest NVIDIA driver is installed "
            "and running.",
            "2025-02-17T21:29:42+00:00 /gpustack/lib/python3.12/site-packages/gpustack/third_party/bin/llama-box/"
            "llama-box: error while loading shared libraries: libcudart.so.12: cannot open shared object file: No such "
            "file or directory"],
        "n2/applog": ["2025-02-17T21:29:40+00:00 - gpustack.worker.worker_manager - INFO - Started RPC server"]},
        context={"nodes": ["n1", "n2"], "start_time": "2025-02-17T21:00:00Z", "end_time": "2025-02-17T22:00:00Z"},
        expect=Expect(fired=True, sub_domain="configuration", culprits=[], root_symptom=_ON_AMD_GPUS)),
    RuleCase(title="near miss: nvidia-smi without its driver where the NVIDIA driver had loaded", evidence={
        "n1/syslog": ["Feb 17 21:18:40 n1 kernel: [  902.118220] [drm] Initialized amdgpu 3.57.0 20150101 for "
                      "0000:03:00.0 on minor 1",
                      "Feb 17 21:18:41 n1 kernel: [  903.000000] NVRM: loading NVIDIA UNIX x86_64 Kernel Module  "
                      "535.129.03  Thu Oct 19 18:56:32 UTC 2023"],
        "n1/applog": ["2025-02-17T21:29:41Z NVIDIA-SMI has failed because it couldn't communicate with the NVIDIA "
                      "driver. Make sure that the latest NVIDIA driver is installed and running."]},
        context={"nodes": ["n1", "n2"], "start_time": "2025-02-17T21:00:00Z", "end_time": "2025-02-17T22:00:00Z"},
        expect=Expect(fired=False, sub_domain="gpu", culprits=["n1"])),
])
def nvidia_software_on_amd_gpus(ws: Workspace) -> None:
    amd = {ws.canonical_node(e.node) for e in ws.events_of(f"{EventType.CONTEXT}.amd_gpu") if e.node}
    nvidia = {ws.canonical_node(e.node) for e in ws.events_of(f"{EventType.CONTEXT}.driver_version") if e.node}
    nvidia |= {ws.canonical_node(e.node) for e in ws.events if e.node and "NVRM:" in e.evidence.text}
    for event in list(ws.events_of(EventType.NODE_BAD)):
        if not event.node or ws.canonical_node(event.node) not in amd - nvidia:
            continue
        if _NO_NVIDIA_DRIVER.search(event.evidence.text) or any(
                _NVIDIA_LIBRARY.match(lib) for lib in event.value_set("loader_lib")):
            ws.reread(event, _ON_AMD_GPUS, f"{event.node}'s GPUs are AMD's (amdgpu brought them up; no NVIDIA driver)")
