"""NCCL and fabric-path rules (the Python side of catalog/nccl.toml): node addresses from NCCL's own lines, the
peer an RDMA error names, interfaces that only break multi-node jobs, and rendezvous endpoints no node owns.

Facts used (NCCL issue #902, docs/domain.md §2.1, §6.4): a retry-exceeded completion (error 12) means the NIC got
no acknowledgement from the named peer. When several nodes name the same peer, the peer (its port, cable or switch
port) is the common element; when two nodes only name each other, the fault is on the path between them and no
single node can be blamed. NCCL on a loopback or bridge interface only breaks jobs that span nodes. The node
that owns the rendezvous endpoint serves the c10d store, so it is not among the clients that fail to reach it.
"""

from __future__ import annotations

import ipaddress
import re
from collections.abc import Callable
from datetime import datetime, timedelta

from firstfault.engine.model import Event, EventType, SubDomain
from firstfault.engine.reader import line_host_prefix
from firstfault.engine.rules_api import Expect, Phase, RuleCase, collector, filter_rule, refiner
from firstfault.engine.workspace import EmitSpec, Workspace, WorkSymptom
from firstfault.rules.election import (
    LINK_DOWN_EVENTS,
    exception_message,
    named_peers,
    printed_before,
    resolve_peer,
    time_order,
    workload_completed,
)
from firstfault.rules.host import DEAD_NODE_ECHO_S

MIN_REPORTERS = 2  # distinct reporting nodes that must name a peer before it is blamed
# A named peer whose own port went down or reported a port error this long before an RDMA error (and up to the
# clock-skew tolerance after it) is corroborated by its own kernel: the NIC that stopped answering is its NIC.
OWN_LINK_WINDOW_S = 300.0


@refiner("IbPeerResolution", phase=Phase.REFINE, doc=f"""
Resolve the peers named by RDMA completion errors (IB Error-12 and other completion errors) to nodes (by the
NCCL interface addresses, or by host name). A peer named by at least {MIN_REPORTERS} distinct reporting nodes,
and by more reporters than any other peer, is blamed on those errors (`blamed_node`). Otherwise a peer is blamed
only when its own kernel corroborates it: its port went down or reported an error in the {OWN_LINK_WINDOW_S / 60:.0f}
minutes before the error (even a flap that recovered). Two nodes naming only each other, or a peer named by a single
reporter, blame no node without that: the fault may be anywhere on the path.
""", cases=[
    RuleCase(title="mutual", evidence={
        "a/applog": ["2025-01-01T00:00:01Z a:1:1 [0] NCCL INFO Bootstrap : Using ib0:10.0.0.1<0>",
                     "2025-01-01T00:10:00Z a:1:1 [0] NCCL WARN NET/IB : Got completion from peer 10.0.0.2<1> with status=12 opcode=0 len=0 vendor err 129 (Send)"],
        "b/applog": ["2025-01-01T00:00:01Z b:1:1 [0] NCCL INFO Bootstrap : Using ib0:10.0.0.2<0>",
                     "2025-01-01T00:10:00Z b:1:1 [0] NCCL WARN NET/IB : Got completion from peer 10.0.0.1<1> with status=12 opcode=0 len=0 vendor err 129 (Send)"]},
        expect=Expect(fired=True, culprits=[], sub_domain="network")),
    RuleCase(title="one reporter, the peer's own port flapped just before", evidence={
        "a/applog": ["2025-01-01T00:00:01Z a:1:1 [0] NCCL INFO Bootstrap : Using ib0:10.0.0.1<0>",
                     "2025-01-01T00:10:00Z a:1:1 [0] NCCL WARN NET/IB : Got completion from peer 10.0.0.2<1> with error 12, opcode 0, len 0, vendor err 129"],
        "b/applog": ["2025-01-01T00:00:01Z b:1:1 [0] NCCL INFO Bootstrap : Using ib0:10.0.0.2<0>"],
        "b/syslog": ["Jan  1 00:09:51 b kernel: [3813619.5] mlx5_core 0000:af:00.1 enp175s0f1np1: Link down",
                     "Jan  1 00:09:56 b kernel: [3813624.8] mlx5_core 0000:af:00.1 enp175s0f1np1: Link up"]},
        expect=Expect(fired=True, culprits=["b"], sub_domain="network")),
])
def ib_peer_resolution(ws: Workspace) -> None:
    errors = [s for s in ws.active(role="root", sub_domain=SubDomain.NETWORK) if s.definition.blame == "peer"]
    if not errors:
        return
    reporters: dict[str, set[str]] = {}
    for s in errors:
        for peer in named_peers(ws, s):
            if s.node:
                reporters.setdefault(peer, set()).add(s.node)
    if not reporters:
        ws.note("localise", "the RDMA errors name no peer that resolves to an allocated node: no node is blamed")
        return
    best = max(len(r) for r in reporters.values())
    leaders = sorted(p for p, r in reporters.items() if len(r) == best)
    if best < MIN_REPORTERS or len(leaders) > 1:
        corroborated = sorted(p for p in reporters if _own_link_event(ws, p, errors))
        if len(corroborated) == 1:
            _blame(ws, errors, corroborated[0])
            ws.note("localise", f"{corroborated[0]} is named as the peer and its own port went down just before",
                    node=corroborated[0])
            return
        ws.note("localise", "no single peer is named by several nodes (" + "; ".join(
            f"{p} by {', '.join(sorted(r))}" for p, r in sorted(reporters.items())) + "): the path is at fault, "
            "no node is blamed")
        return
    peer = leaders[0]
    _blame(ws, errors, peer)
    ws.note("localise", f"{peer} is named as the peer by {best} nodes ({', '.join(sorted(reporters[peer]))})",
            node=peer)


def _blame(ws: Workspace, errors: list[WorkSymptom], peer: str) -> None:
    for s in errors:
        if peer in named_peers(ws, s):
            s.values["blamed_node"] = [peer]


def _own_link_event(ws: Workspace, peer: str, errors: list[WorkSymptom]) -> bool:
    """The peer's own kernel reported its port down or in error shortly before an error that names it."""
    named_at = [s.first_time for s in errors if s.first_time and peer in named_peers(ws, s)]
    if not named_at:
        return False
    first = min(named_at)
    before, after = timedelta(seconds=OWN_LINK_WINDOW_S), timedelta(seconds=ws.params.clock_skew_s)
    return any(event.first_time is not None and not ws.undated(event)
               and first - before <= (event.last_time or event.first_time) and event.first_time <= first + after
               for name in LINK_DOWN_EVENTS for event in ws.select(node=peer, prefix=name))


def _routable(address: str) -> bool:
    try:
        ip = ipaddress.ip_address(address)
    except ValueError:
        return False
    return not (ip.is_loopback or ip.is_unspecified or ip.is_link_local)


@filter_rule("RelayedOutput", phase=Phase.FILTER_EARLY, doc="""
Ray forwards the output of its workers and actors to the driver's, each line prefixed with the address it was
printed at ('(WorkerDict pid=876764, ip=10.52.12.17) RuntimeError: CUDA error: ...'). Such a line in one node's
output happened on the node that owns that address (the nodes' own address lines: Ray's 'Local node IP', NCCL's
interface lines): its event is moved there, so that a GPU error is blamed on the GPU's node, not on the driver's.
The facts such a line states (an address, a host name) are the other node's and are not read for the node whose
output relayed it. The driver re-raising that error (RayTaskError) prints its message again without a prefix: that
line is the same error and goes with it.

A line that names its own host ahead of its message (a syslog record's host field, NCCL's 'host:pid:tid [dev]',
nccl-tests' and pdsh's 'host: '), when that host is another allocated node, was printed there and gathered into this
node's file (mpirun collecting every rank's output, syslog forwarded to one server): its event is moved to that node.
So is a line that names a pod there ('nccl-test-worker-2: ...', mpirun in an MPIJob's launcher pod gathering its
workers' output under their pod names), when the evidence places that pod on one allocated node: a `kubectl get pods -o
wide` row's NODE column, or the scheduler's 'Successfully assigned <namespace>/<pod> to <node>'.
""", cases=[
    # https://github.com/google/dranet (its GKE RDMA guide: the launcher pod's mpirun gathering two workers' failures)
    RuleCase(title="a worker pod's failure gathered into the launcher's output", evidence={
        "a/scheduler": ["nccl-test-4w-0   1/1     Running   0          3m11s   10.68.5.7   a   <none>           <none>",
                        "nccl-test-4w-2   1/1     Running   0          3m11s   10.68.3.7   b   <none>           <none>"],
        "a/applog": ["2025-01-01T00:10:00Z nccl-test-4w-2: Test CUDA failure common.cu:1030 'uncorrectable ECC error "
                     "encountered'"]},
        context={"scheduler": "kubernetes", "nodes": ["a", "b"]}, expect=Expect(fired=True, culprits=["b"])),
    RuleCase(title="a pod the evidence does not place", evidence={
        "a/applog": ["2025-01-01T00:10:00Z nccl-test-4w-2: Test CUDA failure common.cu:1030 'uncorrectable ECC error "
                     "encountered'"]},
        context={"scheduler": "kubernetes", "nodes": ["a", "b"]}, expect=Expect(fired=False, culprits=["a"])),
    RuleCase(title="another node's kernel record in this node's syslog (forwarded syslog)", evidence={
        "a/syslog": ["Jan  1 00:10:00 b kernel: NVRM: Xid (PCI:0000:9a:00): 79, pid=123, name=python, GPU has fallen "
                     "off the bus."],
        "b/applog": ["2025-01-01T00:10:30Z [rank3]: RuntimeError: NCCL error: unhandled system error"]},
        context={"nodes": ["a", "b"]}, expect=Expect(fired=True, sub_domain="gpu", culprits=["b"])),
    RuleCase(title="mpirun gathered both nodes' ranks: the same CUDA failure on every node", evidence={
        "a/applog": ["2025-01-01T00:10:00Z [1,0]<stdout>:a: Test CUDA failure common.cu:1035 'system not yet initialized'",
                     "2025-01-01T00:10:00Z [1,8]<stdout>:b: Test CUDA failure common.cu:1035 'system not yet initialized'"]},
        context={"nodes": ["a", "b"]}, expect=Expect(fired=True, sub_domain="configuration", culprits=[])),
    RuleCase(title="the node's own host field", evidence={
        "a/syslog": ["Jan  1 00:10:00 a kernel: NVRM: Xid (PCI:0000:9a:00): 79, pid=123, name=python, GPU has fallen "
                     "off the bus."]},
        context={"nodes": ["a", "b"]}, expect=Expect(fired=False, sub_domain="gpu", culprits=["a"])),
    RuleCase(title="an actor's CUDA error relayed to the driver's output", evidence={
        "a/applog": ["2025-01-01T00:00:01Z Local node IP: 10.0.0.1",
                     "2025-01-01T00:10:00Z (WorkerDict pid=4242, ip=10.0.0.2) RuntimeError: CUDA error: uncorrectable "
                     "NVLink error detected during the execution",
                     "2025-01-01T00:10:02Z ray.exceptions.RayTaskError(RuntimeError): ray::WorkerDict.update_actor() "
                     "(pid=4242, ip=10.0.0.2, actor_id=9a8b7c6d5e4f3a2b1c0d9e8f01000000)",
                     "2025-01-01T00:10:02Z RuntimeError: CUDA error: uncorrectable NVLink error detected during the "
                     "execution"],
        "b/applog": ["2025-01-01T00:00:01Z Local node IP: 10.0.0.2"]},
        expect=Expect(fired=True, sub_domain="nvlink", culprits=["b"])),
    # the failure of https://github.com/cloudrift-ai/emmy/pull/558 (error 802 on a node without Fabric Manager) as vLLM's
    # Ray workers and its engine core each log it, behind their own logger's prefix
    RuleCase(title="the engine re-raises a worker's CUDA error behind its own log prefix", evidence={
        "a/applog": ["2025-01-01T00:00:01Z Local node IP: 10.0.0.1",
                     "2025-01-01T00:10:00Z (RayWorkerWrapper pid=20480, ip=10.0.0.2) ERROR 12-03 09:41:32 "
                     "[worker_base.py:620] RuntimeError: Unexpected error from cudaGetDeviceCount(). Error 802: system "
                     "not yet initialized",
                     "2025-01-01T00:10:02Z ERROR 12-03 09:41:34 [core.py:700] RuntimeError: Unexpected error from "
                     "cudaGetDeviceCount(). Error 802: system not yet initialized"],
        "b/applog": ["2025-01-01T00:00:01Z Local node IP: 10.0.0.2"]},
        expect=Expect(fired=True, sub_domain="nvlink", culprits=["b"])),
    RuleCase(title="an address no node of the workload claims", evidence={
        "a/applog": ["2025-01-01T00:00:01Z Local node IP: 10.0.0.1",
                     "2025-01-01T00:10:00Z (WorkerDict pid=4242, ip=10.0.0.9) RuntimeError: CUDA error: uncorrectable "
                     "NVLink error detected during the execution"]},
        context={"nodes": ["a", "b"]}, expect=Expect(fired=False, sub_domain="nvlink", culprits=["a"])),
])
def relayed_output(ws: Workspace) -> None:
    for event in [e for e in ws.events if e.attributes.get("printed_by")]:
        host = str(event.attributes["printed_by"])
        ws.move(event, host, f"the line names {host} as the host it was printed on ({event.node}'s file holds it)")
    _move_to_the_pods_node(ws)
    relayed = [e for e in ws.events if e.attributes.get("relayed_from") and not e.type.startswith(EventType.CONTEXT)]
    if not relayed:
        return
    owners = _claims(ws.events_of(f"{EventType.CONTEXT}.ip_map"), "address", _routable)  # facts: events until materialised
    moved: dict[tuple[str, str | None], tuple[str, str]] = {}  # (origin, symptom) -> (the relayed message, its node)
    for event in relayed:
        address = str(event.attributes["relayed_from"])
        nodes = owners.get(address, set())
        if len(nodes) == 1 and event.node not in nodes:
            origin, node = event.evidence.provenance.origin, min(nodes)
            ws.move(event, node, f"printed at {address}, {node}'s address, and relayed to {event.node}'s output")
            message = exception_message(event.evidence.text.partition(f"ip={address})")[2])
            if message:
                moved[(origin, event.symptom)] = (message, node)
    # the driver re-raises a remote task's exception (RayTaskError) with the same message, unprefixed (its own logger's
    # prefix, if any, differs from the worker's)
    for event in ws.events_of(EventType.NODE_BAD):
        found = moved.get((event.evidence.provenance.origin, event.symptom))
        if found and not event.attributes.get("relayed_from") and event.evidence.text.endswith(found[0]):
            ws.move(event, found[1], f"the driver re-raised the error {found[1]} printed")

def _pods_placed(ws: Workspace) -> dict[str, str]:
    """Pod name -> the allocated node the evidence binds it to (kubectl's wide listing, the Scheduled event); a pod
    placed on two nodes (deleted and recreated elsewhere) is left out."""
    placed: dict[str, set[str]] = {}
    for fact in ws.events_of(f"{EventType.CONTEXT}.pod_listed"):  # facts: events until materialised
        node = ws.canonical_node(str(fact.attributes.get("listed_node") or ""))
        if node:
            placed.setdefault(str(fact.attributes["listed_pod"]), set()).add(node)
    for fact in ws.events_of(f"{EventType.CONTEXT}.pod_scheduled"):
        node = ws.canonical_node(str(fact.attributes.get("assigned_to") or ""))
        if node:
            placed.setdefault(str(fact.attributes.get("pod") or "").rpartition("/")[2], set()).add(node)
    return {pod: min(nodes) for pod, nodes in placed.items() if len(nodes) == 1}


def _move_to_the_pods_node(ws: Workspace) -> None:
    """Move each event whose line names, ahead of its message, a pod the evidence places on another node."""
    placed = _pods_placed(ws)
    if not placed:
        return
    for event in [e for e in ws.events if not e.type.startswith(EventType.CONTEXT)]:
        pod = line_host_prefix(event.evidence.text)
        node = placed.get(pod) if pod else None
        if node and node != event.node:
            ws.move(event, node, f"the line names pod {pod}, which ran on {node} ({event.node}'s file holds it)")


_INVALID_ARGUMENT = "NCCL call with an invalid argument"


@filter_rule("ArgumentCheckAfterAbort", phase=Phase.FILTER, doc=f"""
NCCL's argument check fails a collective on a communicator it has already aborted on that node ('... - Abort COMPLETE'
before it, then 'AllGather : invalid root 0 (root should be in the 0..-1 range)': the aborted communicator has no
ranks left): the check met what the abort left, not the program's arguments. `{_INVALID_ARGUMENT}` on a node whose
abort came first (or in the same second) is dropped; whatever made NCCL abort is read on its own.
""", cases=[
    # https://github.com/NVIDIA/nccl/issues/1039 (a TensorFlow job's communicator aborted, then its AllGather refused)
    RuleCase(title="the check after the node's abort", evidence={"n1/applog": [
        "2025-01-01T00:12:05Z n1:292:698 [0] NCCL INFO comm 0x7f0e1b123750 rank 2 nranks 4 cudaDev 0 busId 3b000 - "
        "Abort COMPLETE",
        "2025-01-01T00:12:05Z n1:292:696 [0] misc/argcheck.cc:39 NCCL WARN AllGather : invalid root 0 (root should be "
        "in the 0..-1 range)"]},
        context={"nodes": ["n1", "n2"]}, expect=Expect(fired=True, absent=[_INVALID_ARGUMENT])),
    RuleCase(title="the check with no abort before it", evidence={"n1/applog": [
        "2025-01-01T00:12:05Z n1:48113:48113 [0] NCCL WARN AllReduce : invalid root 0 (root should be in the 0..0 range)"]},
        context={"nodes": ["n1", "n2"]}, expect=Expect(fired=False, sub_domain="application")),
])
def argument_check_after_abort(ws: Workspace) -> None:
    aborted: dict[str | None, datetime] = {}
    for fact in ws.events_of(f"{EventType.CONTEXT}.nccl_abort"):  # facts: events until materialised
        if fact.time is not None:
            aborted[fact.node] = min(fact.time, aborted.get(fact.node, fact.time))
    for event in [e for e in ws.events_of(EventType.NODE_BAD) if e.symptom == _INVALID_ARGUMENT]:
        at = aborted.get(event.node)
        if at is not None and event.time is not None and at <= event.time:
            ws.drop(event, f"NCCL had aborted the communicator on {event.node} before: the check met what the abort left")


_TOPOLOGY_INVALID = "NCCL topology file invalid"
_TOPOLOGY_FILE_MISSING = re.compile(r"Could not open XML topology file")


@filter_rule("MissingTopologyFileIsSkipped", phase=Phase.FILTER, doc=f"""
NCCL reads NCCL_TOPO_FILE (and its default topology files) with a warning when it cannot open one ('Could not open XML
topology file <path> : No such file or directory', graph/xml.cc) and returns success: it goes on with the topology it
detects itself, and later releases log it at INFO. That warning is not `{_TOPOLOGY_INVALID}` and is dropped; a file it
opened and could not parse still is.
""", cases=[
    # https://github.com/NVIDIA/nccl/blob/master/src/graph/xml.cc (ncclTopoGetXmlFromFile)
    RuleCase(title="an empty NCCL_TOPO_FILE in a benchmark that completed", evidence={"n1/applog": [
        "2025-01-01T00:01:00Z n1:105:130 [0] graph/xml.cc:375 NCCL WARN Could not open XML topology file  : No such "
        "file or directory"]},
        context={"nodes": ["n1", "n2"]},
        expect=Expect(fired=True, absent=[_TOPOLOGY_INVALID])),
    RuleCase(title="a topology file NCCL could not parse", evidence={"n1/applog": [
        "2025-01-01T00:01:00Z n1:75:95 [2] graph/xml.h:101 NCCL WARN Attribute arch of node cpu not found"]},
        context={"nodes": ["n1", "n2"]},
        expect=Expect(fired=False, sub_domain="configuration")),
])
def missing_topology_file_is_skipped(ws: Workspace) -> None:
    for event in ws.events_of(EventType.NODE_BAD):
        if event.symptom == _TOPOLOGY_INVALID and _TOPOLOGY_FILE_MISSING.search(event.evidence.text):
            ws.drop(event, "NCCL could not open a topology file and went on with the topology it detects")


_PLUGIN_EMPTY = "RDMA device plugin found no devices"
_PLUGIN_SELECTS_NOTHING = "RDMA device plugin's selectors match no device"


@filter_rule("RdmaPluginEmptyOnEveryNode", phase=Phase.FILTER, doc=f"""
An RDMA device plugin that found no device for its resource on one node points at that node's HCA or driver; on every
node of the workload (two or more) it points at what they share: the plugin's configuration, whose selectors (vendor,
device id, interface names such as 'ens3') match no device on any of them. Each node's report is then read as
`{_PLUGIN_SELECTS_NOTHING}` (configuration, no node blamed).
""", cases=[
    # https://github.com/Mellanox/network-operator/issues/438 (rdma_shared_device_a 0 on every worker; the maintainer
    # asked whether the selector's interface exists)
    RuleCase(title="no devices for the resource on every node", evidence={
        f"{n}/scheduler": ["2025/01/01 00:01:00 Warning: no Rdma Devices were found for resource rdma_shared_device_a"]
        for n in ("w1", "w2")},
        context={"nodes": ["w1", "w2"], "scheduler": "kubernetes"},
        expect=Expect(fired=True, sub_domain="configuration", culprits=[], root_symptom=_PLUGIN_SELECTS_NOTHING)),
    RuleCase(title="on one node of two", evidence={
        "w2/scheduler": ["2025/01/01 00:01:00 Warning: no Rdma Devices were found for resource rdma_shared_device_a"]},
        context={"nodes": ["w1", "w2"], "scheduler": "kubernetes"},
        expect=Expect(fired=False, sub_domain="network", culprits=["w2"])),
])
def rdma_plugin_empty_on_every_node(ws: Workspace) -> None:
    reports = [e for e in ws.events_of(EventType.NODE_BAD) if e.symptom == _PLUGIN_EMPTY]
    nodes = set(ws.context.nodes)
    if len(nodes) < 2 or {ws.canonical_node(e.node) for e in reports} != nodes:
        return
    for event in reports:
        ws.reread(event, _PLUGIN_SELECTS_NOTHING, f"the plugin found no device on any of the {len(nodes)} nodes: its "
                                                  "selectors, not the nodes' HCAs")


_PORT_NOT_ACTIVATED = "IB port not activated by the subnet manager"


@filter_rule("PortStatesOfSeveralTasks", phase=Phase.FILTER_EARLY, doc=f"""
A port-status dump run as a step with srun --label prints each task's lines behind its task number ('1: State:
Initializing'), all into the file of the node srun ran on. Port states behind two or more task numbers in one file
are several nodes' ports, and the file's node is not known to be one of them: `{_PORT_NOT_ACTIVATED}` is kept, on no
node (the subnet manager that left them all inactive is the fabric's).
""", cases=[
    # https://gist.github.com/necr0n/fbf808f33b3c5547b818bd8f360d542f (ibstat's port block; the task labels are srun's)
    RuleCase(title="three nodes' ports, gathered in the launch node's file", evidence={"a/applog": [
        f"2025-01-01T00:00:0{i}Z {i}: State: Initializing" for i in range(3)]},
        context={"nodes": ["a", "b", "c"]}, expect=Expect(fired=True, sub_domain="network", culprits=[])),
    RuleCase(title="the node's own port", evidence={"b/applog": ["2025-01-01T00:00:01Z \t\tState: Initializing"]},
        context={"nodes": ["a", "b"]}, expect=Expect(fired=False, sub_domain="network", culprits=["b"])),
])
def port_states_of_several_tasks(ws: Workspace) -> None:
    by_file: dict[str, list[Event]] = {}
    for event in ws.events_of(EventType.NODE_BAD):
        if event.symptom == _PORT_NOT_ACTIVATED and event.value_set("task_label"):
            by_file.setdefault(event.evidence.provenance.origin, []).append(event)
    for events in by_file.values():
        if len(set().union(*(e.value_set("task_label") for e in events))) < 2:
            continue
        for event in events:
            ws.emit(EmitSpec(type=EventType.NODE_BAD, node=None, symptom=_PORT_NOT_ACTIVATED, evidence=event.evidence,
                             time=event.time, count=event.count, last_time=event.last_time))
            ws.drop(event, "port states of several srun tasks in one file: not this node's own")


_NO_ACTIVE_PORT = "No active RDMA port on a node"
_MPI_UNREACHABLE = "MPI processes cannot reach each other"
_HELP_TEXT_LINES = 12  # an Open MPI help message's 'Local host:' line follows its first line within this many lines


@filter_rule("OpenMpiNamesTheHost", phase=Phase.FILTER_EARLY, doc=f"""
Open MPI prints its help messages where mpirun runs, whichever host they are about; the message names that host on
a 'Local host: <host>' line a few lines below its first. When Open MPI then found processes with no transport to reach
each other (`{_MPI_UNREACHABLE}`), `{_NO_ACTIVE_PORT}` ('no active ports detected') becomes a finding on the host its
message names, when that host is a node of the workload. Otherwise it stays aside: the run went on without the openib
BTL (over UCX or TCP), or the launch node's file holds a message about no host it names.
""", cases=[
    # https://pastebin.com/5AwqNUAB (Open MPI's openib warning on the launch node, about another host)
    RuleCase(title="the launch node's output names the host without an active port", evidence={"a/applog": [
        "2025-01-01T00:00:05Z WARNING: There is at least non-excluded one OpenFabrics device found,",
        "2025-01-01T00:00:05Z but there are no active ports detected (or Open MPI was unable to use",
        "2025-01-01T00:00:05Z them).  This is most certainly not what you wanted.  Check your",
        "2025-01-01T00:00:05Z   Local host: c",
        "2025-01-01T00:00:06Z At least one pair of MPI processes are unable to reach each other for",
        "2025-01-01T00:00:06Z [a:04511] 1 more process has sent help message help-mpi-btl-openib.txt / no active ports "
        "found"]},
        context={"nodes": ["a", "b", "c"]}, expect=Expect(fired=True, sub_domain="network", culprits=["c"])),
    # https://github.com/sanjtrip/rocm-hpc-apps (a ROCm container's openib warning; the run used UCX and completed)
    RuleCase(title="the openib warning in a run that went on over UCX", evidence={"a/applog": [
        "2025-01-01T00:00:05Z but there are no active ports detected (or Open MPI was unable to use",
        "2025-01-01T00:00:05Z   Local host: a"]},
        context={"nodes": ["a", "b"]}, expect=Expect(fired=False, culprits=[])),
    RuleCase(title="no host named", evidence={"a/applog": [
        "2025-01-01T00:00:05Z but there are no active ports detected (or Open MPI was unable to use"]},
        context={"nodes": ["a", "b"]}, expect=Expect(fired=False, culprits=[])),
])
def open_mpi_names_the_host(ws: Workspace) -> None:
    if not any(e.symptom == _MPI_UNREACHABLE for e in ws.events_of(EventType.NODE_BAD)):
        return  # Open MPI went on without the openib BTL (UCX, TCP): the ports were not what the run needed
    hosts = ws.events_of(f"{EventType.CONTEXT}.mpi_local_host")
    for event in [e for e in ws.events_of(EventType.NODE_INTERESTING) if e.symptom == _NO_ACTIVE_PORT]:
        for node in _hosts_named(ws, event, hosts):
            found = ws.emit(EmitSpec(type=EventType.NODE_BAD, node=event.node, symptom=_NO_ACTIVE_PORT,
                                     evidence=event.evidence, time=event.time))
            if node != found.node:
                ws.move(found, node, f"Open MPI's message names {node} as the host without an active port")
        ws.drop(event, "read for the hosts its messages name")


def _hosts_named(ws: Workspace, event: Event, hosts: list[Event]) -> list[str]:
    """The nodes named on the 'Local host:' lines that follow the event's line within _HELP_TEXT_LINES in its file (a
    run of identical messages about several hosts is coalesced into one event, and so are their 'Local host:' lines:
    the fact keeps every host it saw)."""
    where = event.evidence.provenance
    follows = [h for h in hosts if h.evidence.provenance.origin == where.origin and where.line is not None
               and h.evidence.provenance.line is not None
               and 0 < h.evidence.provenance.line - where.line <= _HELP_TEXT_LINES]
    named = {ws.canonical_node(host) for h in follows for host in h.value_set("host")}
    return sorted(node for node in named if node is not None)


@collector("IpToNodeMap", doc="""
Map the addresses NCCL uses (Bootstrap / OOB interface lines, a RoCE queue pair's local GID), the address a Ray
node announces when it starts, and the host names NCCL's processes print (a pod's, under Kubernetes), to the node
that printed them, and the addresses records pair with a node's name (Slurm's node record, kubectl's wide node list, a
script's host-and-address line) to that node, so that peers named by IP or host name in network errors (and nodes a controller names by
address) can be resolved to nodes. An address printed by more than one node (127.0.0.1,
a container bridge's 172.17.0.1) identifies no node and is left out; so are loopback and link-local ones.
""", cases=[
    RuleCase(title="peer named by two nodes", evidence={
        "a/applog": ["2025-01-01T00:00:01Z a:1:1 [0] NCCL INFO Bootstrap : Using ib0:10.0.0.1<0>",
                     "2025-01-01T00:10:00Z a:1:1 [0] NCCL WARN NET/IB : Got completion from peer 10.0.0.3<1> with status=12 opcode=0 len=0 vendor err 129 (Send)"],
        "b/applog": ["2025-01-01T00:00:01Z b:1:1 [0] NCCL INFO Bootstrap : Using ib0:10.0.0.2<0>",
                     "2025-01-01T00:10:00Z b:1:1 [0] NCCL WARN NET/IB : Got completion from peer 10.0.0.3<1> with status=12 opcode=0 len=0 vendor err 129 (Send)"],
        "c/applog": ["2025-01-01T00:00:01Z c:1:1 [0] NCCL INFO Bootstrap : Using ib0:10.0.0.3<0>"]},
        expect=Expect(fired=True, culprits=["c"], sub_domain="network")),
    RuleCase(title="RoCE peer named by its GID, which its own error line maps", evidence={
        "a/applog": ["2025-01-01T00:10:00Z a:1:1 [0] NCCL WARN NET/IB : Got completion from peer 10.2.0.3<1> with status=12 opcode=1 len=0 vendor err 129 (Send) localGid ::ffff:10.8.0.1 remoteGids::ffff:10.8.0.3"],
        "b/applog": ["2025-01-01T00:10:01Z b:1:1 [0] NCCL WARN NET/IB : Got completion from peer 10.2.0.3<1> with status=12 opcode=1 len=0 vendor err 129 (Send) localGid ::ffff:10.8.0.2 remoteGids::ffff:10.8.0.3"],
        "c/applog": ["2025-01-01T00:10:02Z c:1:1 [0] NCCL WARN NET/IB : Got completion from peer 10.2.0.1<1> with status=5 opcode=0 len=0 vendor err 249 (Recv) localGid ::ffff:10.8.0.3 remoteGids::ffff:10.8.0.1"]},
        expect=Expect(fired=True, culprits=["c"], sub_domain="network")),
    RuleCase(title="the only node that printed no address", evidence={
        "a/applog": ["2025-01-01T00:00:01Z a:1:1 [0] NCCL INFO Bootstrap : Using ib0:10.0.0.1<0>",
                     "2025-01-01T00:10:00Z a:1:1 [0] NCCL WARN NET/IB : Got completion from peer 10.0.0.3<1> with status=12 opcode=0 len=0 vendor err 129 (Send)"],
        "b/applog": ["2025-01-01T00:00:01Z b:1:1 [0] NCCL INFO Bootstrap : Using ib0:10.0.0.2<0>",
                     "2025-01-01T00:10:00Z b:1:1 [0] NCCL WARN NET/IB : Got completion from peer 10.0.0.3<1> with status=12 opcode=0 len=0 vendor err 129 (Send)"]},
        context={"nodes": ["a", "b", "c"]}, expect=Expect(fired=True, culprits=["c"], sub_domain="network")),
    RuleCase(title="an address on another subnet (another rail) is not assumed to be the silent node's", evidence={
        "a/applog": ["2025-01-01T00:00:01Z a:1:1 [0] NCCL INFO Bootstrap : Using ib0:10.0.0.1<0>",
                     "2025-01-01T00:10:00Z a:1:1 [0] NCCL WARN NET/IB : Got completion from peer 10.0.1.2<1> with status=12 opcode=0 len=0 vendor err 129 (Send)"],
        "b/applog": ["2025-01-01T00:00:01Z b:1:1 [0] NCCL INFO Bootstrap : Using ib0:10.0.0.2<0>",
                     "2025-01-01T00:10:00Z b:1:1 [0] NCCL WARN NET/IB : Got completion from peer 10.0.1.3<1> with status=12 opcode=0 len=0 vendor err 129 (Send)"]},
        context={"nodes": ["a", "b", "c"]}, expect=Expect(fired=True, culprits=[], sub_domain="network")),
    RuleCase(title="peer named by its pod's host name", evidence={
        "a/applog": ["2025-01-01T00:00:01Z job-worker-0:1:1 [0] NCCL INFO Bootstrap : Using eth0:10.244.1.5<0>",
                     "2025-01-01T00:10:00Z job-worker-0:1:1 [0] NCCL WARN NET/IB : Got completion from peer job-worker-2<1> with error 12, opcode 2, len 1, vendor err 129"],
        "b/applog": ["2025-01-01T00:00:01Z job-worker-1:1:1 [0] NCCL INFO Bootstrap : Using eth0:10.244.2.5<0>",
                     "2025-01-01T00:10:00Z job-worker-1:1:1 [0] NCCL WARN NET/IB : Got completion from peer job-worker-2<1> with error 12, opcode 2, len 1, vendor err 129"],
        "c/applog": ["2025-01-01T00:00:01Z job-worker-2:1:1 [0] NCCL INFO Bootstrap : Using eth0:10.244.3.5<0>"]},
        expect=Expect(fired=True, culprits=["c"], sub_domain="network")),
    # https://github.com/togethercomputer/together-dgxc-benchmarking (worklog/2026-04-09_nccl_benchmark.md: a faulty
    # HCA named only by its address in its peers' errors; the job script echoed each node's name and address)
    RuleCase(title="peer named by address, the node's address in a script's echo", evidence={
        "a/applog": ["2025-01-01T00:00:01Z a 10.210.1.141", "2025-01-01T00:00:01Z b 10.210.1.144",
                     "2025-01-01T00:00:01Z c 10.210.1.153",
                     "2025-01-01T00:10:00Z a:1:1 [1] transport/net_ib.cc:2243 NCCL WARN NET/IB : Got completion from "
                     "peer 10.210.1.153 with error 4, opcode 0, len 0, vendor err 81 (Send)"],
        "b/applog": ["2025-01-01T00:10:00Z b:1:1 [3] transport/net_ib.cc:2243 NCCL WARN NET/IB : Got completion from "
                     "peer 10.210.1.153 with error 4, opcode 0, len 0, vendor err 81 (Send)"]},
        context={"nodes": ["a", "b", "c"]}, expect=Expect(fired=True, culprits=["c"], sub_domain="network")),
    RuleCase(title="an address paired with a host outside the workload", evidence={
        "a/applog": ["2025-01-01T00:00:01Z storage-01 10.210.1.153",
                     "2025-01-01T00:10:00Z a:1:1 [1] transport/net_ib.cc:2243 NCCL WARN NET/IB : Got completion from "
                     "peer 10.210.1.153 with error 4, opcode 0, len 0, vendor err 81 (Send)"]},
        context={"nodes": ["a", "b"]}, expect=Expect(culprits=[])),
])
def ip_to_node_map(ws: Workspace) -> None:
    addresses = _claims(ws.facts_of("ip_map"), "address", _routable)
    for address, node in _address_records(ws):
        addresses.setdefault(address, set()).add(node)
    hosts = _claims(ws.facts_of("host_alias"), "host", lambda host: ws.canonical_node(host) is None)
    ws.facts["ip_to_node"] = {ip: next(iter(nodes)) for ip, nodes in addresses.items() if len(nodes) == 1}
    ws.facts["host_to_node"] = {host: next(iter(nodes)) for host, nodes in hosts.items() if len(nodes) == 1}
    _the_one_unaddressed_node(ws)
    shared = sorted(ip for ip, nodes in addresses.items() if len(nodes) > 1)
    if ws.facts["ip_to_node"] or shared:
        ws.note("collect", f"{len(ws.facts['ip_to_node'])} node addresses from the nodes' own address lines"
                + (f"; ignored (claimed by several nodes): {', '.join(shared)}" if shared else ""))
    if ws.facts["host_to_node"]:
        ws.note("collect", f"{len(ws.facts['host_to_node'])} process host names (pods) mapped to their nodes")


# NodeAddressRecord's (host name, address) capture pairs, one per record form
_RECORD_FIELDS = (("host", "address"), ("listed", "internal_ip"), ("named", "its_address"),
                  ("hosts_name", "hosts_address"))


def _address_records(ws: Workspace) -> set[tuple[str, str]]:
    """(address, node) pairs from records that name a host with its address, for hosts that are nodes of the workload
    (a record prints one pair, so its event's kept line is the pair)."""
    pairs = set()
    for event in ws.facts_of("node_address"):
        for host_key, address_key in _RECORD_FIELDS:
            host, address = event.attributes.get(host_key), event.attributes.get(address_key)
            node = ws.canonical_node(str(host)) if host else None
            if node and address and _routable(str(address)):
                pairs.add((str(address), node))
    return pairs


def _the_one_unaddressed_node(ws: Workspace) -> None:
    """NCCL's RDMA peers are ranks of the same job. When every allocated node but one printed its address, and the
    network errors name exactly one other address on the same /24 as those, it is the remaining node's (typically
    a node that died and left no log of its own)."""
    known = ws.facts["ip_to_node"]
    unaddressed = set(ws.context.nodes) - set(known.values())
    if len(unaddressed) != 1 or len(ws.context.nodes) < 2:
        return
    subnets = {ipaddress.ip_network(f"{ip}/24", strict=False) for ip in known if ipaddress.ip_address(ip).version == 4}
    named = {peer for s in ws.active(role="root", sub_domain=SubDomain.NETWORK)
             for peer in s.value_set("peer") | s.value_set("peer_rdma")
             if _routable(peer) and peer not in known and ipaddress.ip_address(peer).version == 4
             and any(ipaddress.ip_address(peer) in net for net in subnets)}
    if len(named) == 1:
        address, node = named.pop(), unaddressed.pop()
        known[address] = node
        ws.note("collect", f"{address} is {node}'s: every other node printed its own address on that subnet",
                node=node)


def _claims(facts: list[Event], key: str, usable: Callable[[str], bool]) -> dict[str, set[str]]:
    """Which nodes printed each value of a fact (an address, a host name): one node identifies it, several none."""
    claims: dict[str, set[str]] = {}
    for event in facts:
        if not event.node:
            continue
        for value in set(event.values.get(key, [])) | {str(event.attributes.get(key, ""))}:
            if value and usable(value):
                claims.setdefault(value, set()).add(event.node)
    return claims


_NON_ROUTABLE_SYMPTOM = "NCCL on a non-routable interface"
# Networks every host creates alike for its own containers or VMs: Docker's default bridge, Podman's default network,
# libvirt's default NAT network.
_PER_HOST_NETWORKS = tuple(ipaddress.ip_network(n) for n in ("172.17.0.0/16", "10.88.0.0/16", "192.168.122.0/24"))


@filter_rule("OneAddressOnSeveralNodes", phase=Phase.FILTER, doc=f"""
NCCL's bootstrap and out-of-band traffic go to the address each rank advertises ('Bootstrap : Using eth0:172.17.0.2').
When two nodes of the workload advertise the same address on a network every host creates alike for its own containers
or VMs (Docker's default bridge 172.17.0.0/16, whose first container is 172.17.0.2 on every host; Podman's
10.88.0.0/16; libvirt's 192.168.122.0/24), it belongs to neither: a peer that dials it reaches its own host, so no
step that needs the other nodes can complete. Before any training progress, the first such line becomes `{_NON_ROUTABLE_SYMPTOM}` (configuration, no
node); once steps completed, the addresses evidently worked (port mapping, an overlay) and the rule stays silent.
""", cases=[
    # https://docs.docker.com/engine/network/drivers/bridge/ (containers on the default bridge without --network host)
    RuleCase(title="two hosts' containers advertise the default bridge's first address", evidence={
        "a/applog": ["2025-01-01T00:00:01Z 3a9f0c1d2e4b:110:110 [0] NCCL INFO Bootstrap : Using eth0:172.17.0.2<0>",
                     "2025-01-01T00:30:00Z [rank0]: RuntimeError: NCCL communicator was aborted on rank 0. Original "
                     "reason for aborting was: Timeout at NCCL sequence 42"],
        "b/applog": ["2025-01-01T00:00:01Z b71c55e09a13:110:110 [0] NCCL INFO Bootstrap : Using eth0:172.17.0.2<0>"]},
        expect=Expect(fired=True, sub_domain="configuration", culprits=[], root_symptom=_NON_ROUTABLE_SYMPTOM)),
    RuleCase(title="the same address on two nodes, and steps that completed", evidence={
        "a/applog": ["2025-01-01T00:00:01Z c1:731:731 [0] NCCL INFO Bootstrap : Using eth0:172.17.0.2<0>",
                     "2025-01-01T00:10:00Z step 100 | loss 2.1"],
        "b/applog": ["2025-01-01T00:00:01Z c2:731:731 [0] NCCL INFO Bootstrap : Using eth0:172.17.0.2<0>"]},
        expect=Expect(fired=False, absent=[_NON_ROUTABLE_SYMPTOM])),
    RuleCase(title="each node its own address", evidence={
        "a/applog": ["2025-01-01T00:00:01Z a:1:1 [0] NCCL INFO Bootstrap : Using eth0:10.0.0.1<0>"],
        "b/applog": ["2025-01-01T00:00:01Z b:1:1 [0] NCCL INFO Bootstrap : Using eth0:10.0.0.2<0>"]},
        expect=Expect(fired=False, absent=[_NON_ROUTABLE_SYMPTOM])),
])
def one_address_on_several_nodes(ws: Workspace) -> None:
    if len(ws.context.nodes) < 2 or any(e.symptom == "Training progress" for e in ws.events):
        return  # steps that completed exchanged data across nodes: the addresses worked (port mapping, an overlay)
    facts = [e for e in ws.events_of(f"{EventType.CONTEXT}.ip_map") if e.rule == "NcclInterfaceAddress"]
    shared = {ip for ip, nodes in _claims(facts, "address", _host_private).items() if len(nodes) > 1}
    first = min((f for f in facts if f.node and shared & ({str(f.attributes.get("address", ""))} |
                                                          set(f.values.get("address", [])))),
                key=lambda f: (f.time is None, f.time or datetime.min, f.node or ""), default=None)
    if first is None:
        return
    ws.emit(EmitSpec(type=EventType.NODE_BAD, node=first.node, symptom=_NON_ROUTABLE_SYMPTOM, evidence=first.evidence,
                     time=first.time, attributes={"address": ", ".join(sorted(shared))}))
    ws.note("emit", f"{', '.join(sorted(shared))} advertised by several nodes: an address that reaches none of them",
            node=first.node, symptom=_NON_ROUTABLE_SYMPTOM)


def _host_private(address: str) -> bool:
    return _routable(address) and any(ipaddress.ip_address(address) in net for net in _PER_HOST_NETWORKS)


_ODD_INTERFACE_SYMPTOM = "NCCL interface differs between nodes"
_SOCKET_FAILURE_SYMPTOM = "NCCL socket connect failure"


@filter_rule("OddInterfaceUnreachable", phase=Phase.FILTER, doc="""
NCCL chooses its socket interface on each node by itself (NCCL_SOCKET_IFNAME unset, or a list of prefixes). When every
node but one uses an interface of the same name, the odd node advertised an address on another interface, and its
peers' socket connections to that very address fail, the nodes are set up differently (a spare machine with another
network layout, a setting missing on one node): configuration of the interface, not a network fault or a node's. The
failed connections are what that looks like: the first of them is cited for it, and they are taken into it.
""", cases=[
    RuleCase(title="a spare node advertises another interface and nobody reaches it", evidence={
        "a/applog": ["2025-01-01T00:00:01Z a:1:1 [0] NCCL INFO Bootstrap : Using bond0:10.37.8.72<0>",
                     "2025-01-01T00:00:09Z a:1:1 [0] misc/socket.cc:484 NCCL WARN socketStartConnect: Connect to "
                     "10.37.12.78<46417> failed : Software caused connection abort"],
        "b/applog": ["2025-01-01T00:00:01Z b:1:1 [0] NCCL INFO Bootstrap : Using eth1:10.37.12.78<0>"],
        "c/applog": ["2025-01-01T00:00:01Z c:1:1 [0] NCCL INFO Bootstrap : Using bond0:10.37.8.74<0>"]},
        context={"nodes": ["a", "b", "c"]},
        expect=Expect(fired=True, sub_domain="configuration", culprits=[], root_symptom=_ODD_INTERFACE_SYMPTOM)),
    RuleCase(title="the unreachable node uses the same interface as the others", evidence={
        "a/applog": ["2025-01-01T00:00:01Z a:1:1 [0] NCCL INFO Bootstrap : Using bond0:10.37.8.72<0>",
                     "2025-01-01T00:00:09Z a:1:1 [0] misc/socket.cc:484 NCCL WARN socketStartConnect: Connect to "
                     "10.37.8.73<46417> failed : No route to host"],
        "b/applog": ["2025-01-01T00:00:01Z b:1:1 [0] NCCL INFO Bootstrap : Using bond0:10.37.8.73<0>"],
        "c/applog": ["2025-01-01T00:00:01Z c:1:1 [0] NCCL INFO Bootstrap : Using eth1:10.37.12.74<0>"]},
        context={"nodes": ["a", "b", "c"]}, expect=Expect(fired=False, root_symptom="NCCL socket connect failure")),
])
def odd_interface_unreachable(ws: Workspace) -> None:
    interfaces: dict[str, dict[str, Event]] = {}  # node -> interface name -> the first line that shows it
    owners: dict[str, set[str]] = {}  # address -> the nodes that advertised it
    for event in ws.events_of(f"{EventType.CONTEXT}.ip_map"):  # facts are still events before materialising
        name, address = str(event.attributes.get("interface", "")), str(event.attributes.get("address", ""))
        if event.node and name and _routable(address):
            interfaces.setdefault(event.node, {}).setdefault(name, event)
            owners.setdefault(address, set()).add(event.node)
    odd = _odd_one_out({node: set(names) for node, names in interfaces.items()})
    if odd is None:
        return
    own = {address for address, nodes in owners.items() if nodes == {odd}}
    failures = [e for e in ws.events_of(EventType.NODE_BAD) if e.symptom == _SOCKET_FAILURE_SYMPTOM
                and e.node != odd and str(e.attributes.get("peer", "")) in own]
    if failures:
        first = min(failures, key=lambda e: (*time_order(e), e.node or ""))
        ws.emit(EmitSpec(type=EventType.NODE_BAD, node=odd, symptom=_ODD_INTERFACE_SYMPTOM, evidence=first.evidence,
                         time=first.time, attributes={"interface": min(interfaces[odd]),
                                                      "peer": str(first.attributes.get("peer", ""))}))
        for failure in failures:
            ws.drop(failure, f"{odd} advertised an address on {min(interfaces[odd])}, an interface no other node uses")


def _odd_one_out(names: dict[str, set[str]]) -> str | None:
    """The one node whose interfaces share no name with the single name every other node (at least two) uses."""
    for node, own in sorted(names.items()):
        others = [n for other, n in names.items() if other != node]
        common = set.intersection(*others) if len(others) >= 2 else set()
        if len(common) == 1 and not own & common:
            return node
    return None


def _other_root_found(ws: Workspace) -> bool:
    """A root candidate other than the scheduler's ending of the run is on the event stream."""
    return any(definition.role == "root" and definition.sub_domain != SubDomain.SCHEDULER
               for definition in (ws.catalog.symptom(e.symptom or "") for e in ws.events_of(EventType.NODE_BAD)))


_RAN_ALONE = "Processes ran as separate single-rank jobs"


def _nccl_tests_rank_line(pid: int, node: str = "n1", rank: int = 0) -> str:
    """nccl-tests' per-rank line, as the process of rank 0 prints it at start."""
    return (f"#  Rank {rank:2d} Group  0 Pid {pid} on {node:>10} device  0 [0000:03:00] NVIDIA RTX PRO 6000 Blackwell "
            "Server Edition")


@filter_rule("EveryProcessRanAlone", phase=Phase.FILTER, doc=f"""
nccl-tests' process of rank 0 lists every rank of its run ('#  Rank  N ... Pid P on <host>'). When two or more
processes on one node each list themselves as rank 0 and no line shows a rank above 0, each was a run of one sharing
that node's device 0: the launch started independent copies (nccl-tests built without MPI, or a launcher it could not
join). One copy per node is a per-node sweep, a way to test nodes one by one: not this. `{_RAN_ALONE}`
(configuration) is placed at the first such line, and the copies' closing results ('Avg bus bandwidth') are dropped as
success reports: each is one copy's, not the workload's.
""", cases=[
    # https://github.com/mghpcc/aicr-benchmarks (Dell/GPU1/badruns: srun started eight copies; six ran out of memory on
    # device 0 and srun reported them, two finished alone; the batch script's echo made the job COMPLETED)
    RuleCase(title="eight copies on one node, six out of memory on device 0", evidence={"n1/applog": [
        *(f"2025-01-01T00:00:0{i}Z {_nccl_tests_rank_line(184460 + i)}" for i in range(8)),
        "2025-01-01T00:00:09Z [2025-01-01 00:00:09] n1:184461:184461 [0] allocator.cc:62 NCCL WARN Cuda failure 2 "
        "'out of memory'",
        "2025-01-01T00:00:10Z srun: error: n1: tasks 0-5: Exited with exit code 3",
        "2025-01-01T00:00:30Z # Avg bus bandwidth    : 0 "]},
        context={"nodes": ["n1"], "scheduler_state": "COMPLETED", "exit_code": "0:0"},
        expect=Expect(fired=True, sub_domain="configuration", culprits=[], terminal_state="FAILED",
                      root_symptom=_RAN_ALONE)),
    # https://github.com/sparticlesteve/podman-nccl-testing/blob/main/logs/podman-nccl-tests-30606107.out (podman-hpc
    # single-rank runs, one per node, each completed)
    RuleCase(title="one copy on each node: a per-node sweep", evidence={
        "n1/applog": [f"2025-01-01T00:00:01Z {_nccl_tests_rank_line(184460)}",
                      "2025-01-01T00:00:30Z # Avg bus bandwidth    : 0 "],
        "n2/applog": [f"2025-01-01T00:00:01Z {_nccl_tests_rank_line(99120, 'n2')}",
                      "2025-01-01T00:00:30Z # Avg bus bandwidth    : 0 "]},
        context={"nodes": ["n1", "n2"], "scheduler_state": "COMPLETED", "exit_code": "0:0"},
        expect=Expect(fired=False, sub_domain="none")),
    RuleCase(title="one run of two ranks on two nodes", evidence={"n1/applog": [
        f"2025-01-01T00:00:01Z {_nccl_tests_rank_line(184460)}",
        f"2025-01-01T00:00:01Z {_nccl_tests_rank_line(99120, 'n2', 1)}",
        "2025-01-01T00:00:30Z # Avg bus bandwidth    : 180.5 "]},
        context={"nodes": ["n1", "n2"], "scheduler_state": "COMPLETED", "exit_code": "0:0"},
        expect=Expect(fired=False, sub_domain="none")),
])
def every_process_ran_alone(ws: Workspace) -> None:
    lines = ws.events_of(f"{EventType.CONTEXT}.nccl_tests_rank")  # one per node and stream: its values collected
    if not lines or any(e.value_set("rank") - {"0"} for e in lines):
        return
    pids: dict[str, set[str]] = {}  # host -> the processes that announced themselves rank 0 there
    for event in lines:
        for host in event.value_set("host"):
            pids.setdefault(host, set()).update(event.value_set("pid"))
    if len(pids) != len(lines) or all(len(p) < 2 for p in pids.values()):
        return  # a stream naming several hosts cannot be split by host; one copy per node is a per-node sweep
    copies = set().union(*pids.values())
    first = min(lines, key=time_order)
    # job-wide: the launch's, on every node it started copies
    ws.emit(EmitSpec(type=EventType.NODE_BAD, node=None, symptom=_RAN_ALONE, evidence=first.evidence,
                     time=first.time, attributes={"copies": str(len(copies))}))
    for event in ws.events_of(EventType.NODE_INTERESTING):
        if event.symptom == "Workload completed" and "Avg bus bandwidth" in event.evidence.text:
            ws.drop(event, f"one of {len(copies)} single-rank copies finished, not the workload")


_ODD_NETWORK_SYMPTOM = "NCCL network differs between nodes"


@filter_rule("NetworkDiffersBetweenNodes", phase=Phase.FILTER, doc="""
NCCL picks its network module on each node ('Using network IBext_v7', 'IB', 'AWS Libfabric'); every rank of a
communicator must use the same one. When every node but one chose the same module and the odd node another, and the
run has no other root candidate than the scheduler's ending of it (a hang to a time limit, NCCL's own downstream
errors), the odd node's software differs from the others' (a plugin missing from its image): a root candidate that
names it. A node that fell back to sockets lost its RDMA devices instead (RdmaDeviceMissingOnSomeNodes).
""", cases=[
    RuleCase(title="one node without the plugin the others load; the job hangs to its time limit", evidence={
        "a/applog": ["2025-01-01T00:00:01Z a:1:1 [0] NCCL INFO Using network IBext_v7"],
        "b/applog": ["2025-01-01T00:00:01Z b:1:1 [0] NCCL INFO Using network IBext_v7"],
        "c/applog": ["2025-01-01T00:00:01Z c:1:1 [0] NCCL INFO NET/Plugin: Could not find: libnccl-net.so. Using "
                     "internal network plugin.",
                     "2025-01-01T00:00:01Z c:1:1 [0] NCCL INFO Using network IB",
                     "2025-01-01T01:59:00Z slurmstepd: error: *** JOB 1 ON c CANCELLED AT 2025-01-01T01:59:00 DUE TO "
                     "TIME LIMIT ***"]},
        context={"nodes": ["a", "b", "c"], "scheduler_state": "TIMEOUT"},
        expect=Expect(fired=True, sub_domain="configuration", culprits=["c"], root_symptom=_ODD_NETWORK_SYMPTOM)),
    RuleCase(title="the odd module beside another fault: the fault is the answer", evidence={
        "a/applog": ["2025-01-01T00:00:01Z a:1:1 [0] NCCL INFO Using network IBext_v7"],
        "b/applog": ["2025-01-01T00:00:01Z b:1:1 [0] NCCL INFO Using network IBext_v7"],
        "c/applog": ["2025-01-01T00:00:01Z c:1:1 [0] NCCL INFO Using network IB"],
        "b/syslog": ["Jan  1 00:30:00 b kernel: NVRM: Xid (PCI:0000:91:00): 79, pid=1, name=x, GPU has fallen off "
                     "the bus."]},
        context={"nodes": ["a", "b", "c"], "scheduler_state": "FAILED"},
        expect=Expect(fired=False, sub_domain="gpu", culprits=["b"])),
    RuleCase(title="the same module everywhere", evidence={
        node + "/applog": [f"2025-01-01T00:00:01Z {node}:1:1 [0] NCCL INFO Using network IB"] for node in "abc"},
        context={"nodes": ["a", "b", "c"], "scheduler_state": "TIMEOUT"},
        expect=Expect(fired=False, sub_domain="scheduler")),
])
def network_differs_between_nodes(ws: Workspace) -> None:
    networks: dict[str, dict[str, Event]] = {}  # node -> network module -> the first line that shows it
    for event in ws.events_of(f"{EventType.CONTEXT}.nccl_network"):
        name = str(event.attributes.get("network", ""))
        if event.node and name:
            networks.setdefault(event.node, {}).setdefault(name, event)
    odd = _odd_one_out({node: set(names) for node, names in networks.items()})
    if odd is None or "Socket" in networks[odd]:
        return
    if _other_root_found(ws):
        return
    first = min(networks[odd].values(), key=time_order)
    ws.emit(EmitSpec(type=EventType.NODE_BAD, node=odd, symptom=_ODD_NETWORK_SYMPTOM, evidence=first.evidence,
                     time=first.time, attributes={"network": min(networks[odd])}))


_ODD_DRIVER = "CUDA driver differs on one node"


@filter_rule("DriverDiffersOnOneNode", phase=Phase.FILTER, doc=f"""
NCCL prints the CUDA driver version on every rank it initialises ('cudaDriverVersion 12040'). The nodes of one
workload are installed alike: when every node but one (at least two others) read the same version and the odd node
another, and the run did not complete and has no other root candidate than the scheduler's ending of it (a hang to a
time limit, NCCL's own downstream errors), `{_ODD_DRIVER}` names the odd node (gpu). Two versions spread over several
nodes, or a completed run, leave nothing.
""", cases=[
    RuleCase(title="one node on a newer driver; the collective hangs to the time limit", evidence={
        f"{n}/applog": [f"2025-01-01T00:00:01Z {n}:1:1 [0] NCCL INFO cudaDriverVersion {v}"]
        for n, v in (("a", 12040), ("b", 12040), ("c", 12080))}
        | {"a/scheduler": ["[2025-01-01T01:59:58.114] Time limit exhausted for JobId=1"]},
        context={"nodes": ["a", "b", "c"], "scheduler_state": "TIMEOUT"},
        expect=Expect(fired=True, sub_domain="gpu", culprits=["c"], root_symptom=_ODD_DRIVER)),
    RuleCase(title="the same in a run that completed", evidence={
        f"{n}/applog": [f"2025-01-01T00:00:01Z {n}:1:1 [0] NCCL INFO cudaDriverVersion {v}"]
        for n, v in (("a", 12040), ("b", 12040), ("c", 12080))},
        context={"nodes": ["a", "b", "c"], "scheduler_state": "COMPLETED", "exit_code": "0:0"},
        expect=Expect(fired=False, sub_domain="none")),
    RuleCase(title="two nodes only: which one is odd is not known", evidence={
        f"{n}/applog": [f"2025-01-01T00:00:01Z {n}:1:1 [0] NCCL INFO cudaDriverVersion {v}"]
        for n, v in (("a", 12040), ("b", 12080))},
        context={"nodes": ["a", "b"], "scheduler_state": "TIMEOUT"},
        expect=Expect(fired=False, sub_domain="scheduler")),
])
def driver_differs_on_one_node(ws: Workspace) -> None:
    reports = [e for e in ws.events_of(f"{EventType.CONTEXT}.cuda_driver") if e.node]
    versions: dict[str, set[str]] = {}
    for event in reports:
        versions.setdefault(str(event.node), set()).update(event.value_set("version"))
    odd = _odd_one_out(versions)
    if odd is None or workload_completed(ws) or _other_root_found(ws):
        return
    first = min((e for e in reports if e.node == odd), key=time_order)
    ws.emit(EmitSpec(type=EventType.NODE_BAD, node=odd, symptom=_ODD_DRIVER, evidence=first.evidence, time=first.time))


_IOMMU_NOT_PT = "IOMMU not in passthrough where RCCL runs"


@refiner("IommuNotPassthroughOnSomeNodes", phase=Phase.REFINE, doc=f"""
RCCL warns at initialisation on a node whose kernel command line lacks iommu=pt; peer-to-peer traffic through a
translating IOMMU can hang. When some nodes that printed NCCL/RCCL start-up lines warned and others did not, and the
run did not complete and has no other root candidate than the scheduler's ending of it (a hang, NCCL's own downstream
errors), `{_IOMMU_NOT_PT}` is promoted on the nodes that warned. Every node warning alike, or a completed run, leaves
it context.
""", cases=[
    # https://github.com/ROCm/rccl/issues/1129 (an all-reduce that hung until iommu=pt was set)
    RuleCase(title="one node warned; the first all-reduce hung to the watchdog", evidence={
        "a/applog": ["2025-01-01T00:00:01Z a:1:1 [0] NCCL INFO Bootstrap : Using eth0:10.0.0.1<0>",
                     '2025-01-01T00:00:01Z a:1:1 [0] init.cc:132 NCCL WARN Missing "iommu=pt" from kernel command line '
                     "which can lead to system instablity or hang!",
                     "2025-01-01T00:30:01Z [rank2]:[E101 00:30:01.611872 1 ProcessGroupNCCL.cpp:563] [Rank 2] Watchdog "
                     "caught collective operation timeout: WorkNCCL(SeqNum=1, OpType=ALLREDUCE, NumelIn=1, NumelOut=1, "
                     "Timeout(ms)=1800000) ran for 1800083 milliseconds before timing out."],
        "b/applog": ["2025-01-01T00:00:01Z b:1:1 [0] NCCL INFO Bootstrap : Using eth0:10.0.0.2<0>"]},
        expect=Expect(fired=True, sub_domain="host", culprits=["a"], root_symptom=_IOMMU_NOT_PT)),
    RuleCase(title="every node warned alike", evidence={
        f"{n}/applog": [f"2025-01-01T00:00:01Z {n}:1:1 [0] NCCL INFO Bootstrap : Using eth0:10.0.0.1<0>",
                        f'2025-01-01T00:00:01Z {n}:1:1 [0] init.cc:132 NCCL WARN Missing "iommu=pt" from kernel '
                        "command line which can lead to system instablity or hang!"] for n in "ab"},
        context={"scheduler_state": "TIMEOUT"},
        expect=Expect(fired=False)),
])
def iommu_not_passthrough_on_some_nodes(ws: Workspace) -> None:
    warned = ws.select(prefix=_IOMMU_NOT_PT, status="interesting")
    started = {e.node for e in ws.events_of(f"{EventType.CONTEXT}.host_alias") if e.node}
    if not warned or not started - {s.node for s in warned} or workload_completed(ws):
        return
    if any(s.sub_domain != SubDomain.SCHEDULER for s in ws.select(status="bad", role="root")):
        return
    for s in warned:
        ws.promote(s, "RCCL warned of the IOMMU here and not on the other nodes, and the run hung")


_FAMILIES_DIFFER = "NCCL bootstrap address families differ between nodes"


@filter_rule("BootstrapFamiliesDiffer", phase=Phase.FILTER, doc=f"""
NCCL's bootstrap prints the interface and address each node's ranks advertise ('Bootstrap : Using bond0:10.44.0.12<0>',
or an IPv6 address such as an IPoIB link-local 'ib0:fe80::...%ib0'). When some nodes of the workload advertise only
IPv4 addresses and others only IPv6 ones, the two groups cannot connect, and when the run has no other root candidate
than the scheduler's ending of it (a hang in the bootstrap to a time limit, NCCL's own downstream errors), `{_FAMILIES_DIFFER}`
is placed (configuration, no node blamed) at the first IPv6 line. One family everywhere leaves nothing.
""", cases=[
    RuleCase(title="one node on ib0's link-local address, the other on bond0; the job hangs to its time limit", evidence={
        "a/applog": ["2025-01-01T00:00:01Z a:1:1 [0] NCCL INFO Bootstrap : Using ib0:fe80::a288:c203:d2:aaf2%ib0<0>",
                     "2025-01-01T01:59:00Z slurmstepd: error: *** STEP 1.0 ON a CANCELLED AT 2025-01-01T01:59:00 DUE "
                     "TO TIME LIMIT ***"],
        "b/applog": ["2025-01-01T00:00:01Z b:1:1 [0] NCCL INFO Bootstrap : Using bond0:10.44.0.12<0>"]},
        context={"nodes": ["a", "b"], "scheduler_state": "TIMEOUT"},
        expect=Expect(fired=True, sub_domain="configuration", culprits=[], root_symptom=_FAMILIES_DIFFER)),
    RuleCase(title="IPv6 on every node", evidence={
        n + "/applog": [f"2025-01-01T00:00:01Z {n}:1:1 [0] NCCL INFO Bootstrap : Using ib0:fe80::a288:c203:d2:aaf{i}"
                        "%ib0<0>"] for i, n in enumerate("ab")},
        context={"nodes": ["a", "b"], "scheduler_state": "TIMEOUT"}, expect=Expect(fired=False, sub_domain="scheduler")),
])
def bootstrap_families_differ(ws: Workspace) -> None:
    ipv6 = {e.node: e for e in reversed(ws.events_of(f"{EventType.CONTEXT}.bootstrap_ipv6")) if e.node}
    ipv4 = {e.node for e in ws.events_of(f"{EventType.CONTEXT}.ip_map") if e.node and "Bootstrap" in e.evidence.text}
    if not set(ipv6) - ipv4 or not ipv4 - set(ipv6):
        return
    if _other_root_found(ws):
        return
    first = min(ipv6.values(), key=time_order)
    ws.emit(EmitSpec(type=EventType.NODE_BAD, node=first.node, symptom=_FAMILIES_DIFFER, evidence=first.evidence,
                     time=first.time))


_NO_INTERFACE_SYMPTOM = "NCCL: no usable network interface"
_UNOPENED_DEVICE = ("Unable to open device", "ibv_open_device failed")


@refiner("UnopenedDeviceSkipped", phase=Phase.CLEAN, doc="""
NCCL's IB transport skips an RDMA device it cannot open ('NET/IB : Unable to open device mlx5_1', after 'Call to
ibv_open_device failed') and goes on with the others: when the same node then lists the devices it uses ('NET/IB :
Using [0]mlx5_0:1/IB'), the unopened one cost nothing and the warning is demoted. Without such a list it stays.
""", cases=[
    RuleCase(title="one device skipped, another used", evidence={
        "a/applog": ["2025-01-01T00:00:01Z a:1:1 [0] transport/net_ib.cc:147 NCCL WARN NET/IB : Unable to open device "
                     "mlx5_1",
                     "2025-01-01T00:00:01Z a:1:1 [0] NCCL INFO NET/IB : Using [0]mlx5_0:1/IB ; OOB ib0:10.71.0.11<0>"]},
        context={"nodes": ["a"], "scheduler_state": "COMPLETED", "exit_code": "0:0"},
        expect=Expect(fired=True, sub_domain="none", demoted=[_NO_INTERFACE_SYMPTOM])),
    RuleCase(title="no device could be opened", evidence={
        "a/applog": ["2025-01-01T00:00:01Z a:1:1 [0] transport/net_ib.cc:147 NCCL WARN NET/IB : Unable to open device "
                     "mlx5_0"]},
        context={"nodes": ["a"]}, expect=Expect(fired=False, sub_domain="configuration")),
])
def unopened_device_skipped(ws: Workspace) -> None:
    using = ws.values_by_node("rdma_in_use", "device")
    for s in ws.active(prefix=_NO_INTERFACE_SYMPTOM):
        if s.node in using and all(any(m in e.text for m in _UNOPENED_DEVICE) for e in s.evidence):
            ws.demote(s, f"NCCL skipped the device it could not open and used {', '.join(sorted(using[s.node]))}")


_PROTECTION_ERROR = "RDMA memory protection error"
_PROVIDER_CQE_DUMP = re.compile(r"mlx5: \S+: got completion with error:")


@refiner("ProtectionErrorNamesTheCompletion", phase=Phase.REFINE, after=("IbPeerResolution",), doc=f"""
libmlx5 prints 'mlx5: <host>: got completion with error:' and the CQE's words for every failed completion, before the
library that polled it reports the completion's status. When the same node's library reports a protection status
within clock_skew_s of the dump (`{_PROTECTION_ERROR}`), the dump is that completion: its `IB completion error` reading
is demoted. A dump with no status reported beside it stays a completion error.
""", cases=[
    # https://github.com/open-mpi/ompi/issues/5047 (openib's report of the completion whose CQE libmlx5 dumped)
    RuleCase(title="the provider's dump and openib's LOCAL PROTECTION ERROR of one completion", evidence={"a/applog": [
        "2025-01-01T00:10:00Z mlx5: a: got completion with error:",
        "2025-01-01T00:10:00Z [a][[42113,1],5][btl_openib_component.c:3645:handle_wc] from a to: b error polling LP CQ "
        "with status LOCAL PROTECTION ERROR status number 4 for wr_id 2d1b7c8 opcode 128  vendor error 81 qp_idx 3"]},
        context={"nodes": ["a", "b"]},
        expect=Expect(fired=True, sub_domain="configuration", culprits=[], demoted=["IB completion error"])),
    RuleCase(title="the dump alone", evidence={"a/applog": ["2025-01-01T00:10:00Z mlx5: a: got completion with error:"]},
             context={"nodes": ["a", "b"]}, expect=Expect(fired=False)),
])
def protection_error_names_the_completion(ws: Workspace) -> None:
    skew = timedelta(seconds=ws.params.clock_skew_s)
    for dump in ws.active(prefix="IB completion error"):
        if dump.first_time is None or not all(_PROVIDER_CQE_DUMP.search(e.text) for e in dump.evidence):
            continue
        if any(p.first_time is not None and abs(p.first_time - dump.first_time) <= skew
               for p in ws.active(prefix=_PROTECTION_ERROR, node=dump.node)):
            ws.demote(dump, f"libmlx5's dump of the completion whose protection status the library reported "
                            f"({_PROTECTION_ERROR})")


@refiner("JobInterfaceTakenDown", phase=Phase.REFINE, doc="""
NetworkManager failing or deactivating a connection removes the device's addresses. When the device is the interface
the workload's NCCL used on that same node ('Bootstrap : Using <if>:<address>', 'NET/Socket : Using'), and it happened
while the workload ran, that node dropped off the job's network: `Interface taken down by NetworkManager` becomes the
root candidate (network, that node). Another device of the node (a spare port, Wi-Fi) stays context.
""", cases=[
    RuleCase(title="NetworkManager fails the connection on the job's interface", evidence={
        "b/syslog": ["Jan  1 00:10:25 b NetworkManager[1288]: <info>  [1770808825.2160] device (enp1s0f0np0): state "
                     "change: ip-config -> failed (reason 'ip-config-unavailable', sys-iface-state: 'managed')"],
        "b/applog": ["2025-01-01T00:05:00Z b:31877:31877 [0] NCCL INFO Bootstrap: Using enp1s0f0np0:10.10.0.1<0>",
                     "2025-01-01T00:10:28Z [rank0]:[E101 00:10:28.342671090 ProcessGroupNCCL.cpp:2057] Process group "
                     "watchdog thread terminated with exception: NCCL error: remote process exited or there was a "
                     "network error"]},
        context={"nodes": ["a", "b"], "start_time": "2025-01-01T00:04:00Z", "end_time": "2025-01-01T00:20:00Z"},
        expect=Expect(fired=True, sub_domain="network", culprits=["b"],
                      root_symptom="Interface taken down by NetworkManager")),
    RuleCase(title="NetworkManager cycles a port the job does not use", evidence={
        "b/syslog": ["Jan  1 00:10:25 b NetworkManager[1288]: <info>  [1770808825.2160] device (enp2s0): state "
                     "change: ip-config -> failed (reason 'ip-config-unavailable', sys-iface-state: 'managed')"],
        "b/applog": ["2025-01-01T00:05:00Z b:31877:31877 [0] NCCL INFO Bootstrap: Using enp1s0f0np0:10.10.0.1<0>"]},
        context={"nodes": ["a", "b"], "start_time": "2025-01-01T00:04:00Z", "end_time": "2025-01-01T00:20:00Z"},
        expect=Expect(fired=False)),
])
def job_interface_taken_down(ws: Workspace) -> None:
    used = ws.values_by_node("ip_map", "interface")
    for down in ws.select(prefix="Interface taken down by NetworkManager", status="interesting"):
        interfaces = down.value_set("interface") & used.get(down.node or "", set())
        if ws.dated_during_run(down) and interfaces:
            ws.promote(down, f"{sorted(interfaces)[0]} is the interface this node's NCCL used")


@refiner("NicWithoutFirmware", phase=Phase.REFINE, doc=f"""
A node whose kernel could not load its Ethernet driver's firmware (`NIC firmware not loaded`) has no interface from
that NIC: when the same node's NCCL then found no socket interface or device to use (`{_NO_INTERFACE_SYMPTOM}`, on
that node and not on every node), the missing firmware is why. It becomes the root candidate (network, that node) and
the node's interface error is demoted. Without such an error on that node the firmware message stays context.
""", cases=[
    # https://lists.debian.org/debian-kernel/ (a kernel update without the matching firmware-bnx2x)
    RuleCase(title="one node's NIC without firmware; its NCCL finds no interface", evidence={
        "b/syslog": ["Jan  1 00:04:42 b kernel: [   11.203000] bnx2x 0000:02:00.1: Direct firmware load for "
                     "bnx2x/bnx2x-e2-7.13.21.0.fw failed with error -2"],
        "b/applog": ["2025-01-01T00:10:53Z b:812215:812215 [0] NCCL WARN Bootstrap : no socket interface found"]},
        context={"nodes": ["a", "b"]},
        expect=Expect(fired=True, sub_domain="network", culprits=["b"], root_symptom="NIC firmware not loaded",
                      demoted=[_NO_INTERFACE_SYMPTOM])),
    RuleCase(title="a NIC's firmware missing on one node; the job's interface setting is wrong everywhere", evidence={
        "b/syslog": ["Jan  1 00:04:42 b kernel: [   11.203000] bnx2x 0000:02:00.1: Direct firmware load for "
                     "bnx2x/bnx2x-e2-7.13.21.0.fw failed with error -2"],
        "a/applog": ["2025-01-01T00:10:53Z a:812215:812215 [0] NCCL WARN Bootstrap : no socket interface found"],
        "b/applog": ["2025-01-01T00:10:53Z b:812215:812215 [0] NCCL WARN Bootstrap : no socket interface found"]},
        context={"nodes": ["a", "b"]}, expect=Expect(fired=False, sub_domain="configuration", culprits=[])),
])
def nic_without_firmware(ws: Workspace) -> None:
    missing = {s.node for s in ws.active(prefix=_NO_INTERFACE_SYMPTOM) if s.node}
    if not missing or missing >= set(ws.context.nodes):
        return
    for firmware in ws.select(prefix="NIC firmware not loaded", status="interesting"):
        if firmware.node in missing:
            ws.promote(firmware, f"{firmware.node}'s NIC came up without its firmware; its programs then found no "
                                 "interface")
            for s in ws.active(prefix=_NO_INTERFACE_SYMPTOM, node=firmware.node):
                ws.demote(s, f"{firmware.node}'s NIC has no firmware")


@refiner("NcclInterfaceNeedsPeers", phase=Phase.CLEAN, doc="""
NCCL on a loopback or bridge interface, Gloo bound to the loopback address, a rendezvous address on loopback, or a
launcher that started on its own node only, fails only jobs that span several nodes; on a single-node job it is
harmless and is demoted.
""", cases=[
    RuleCase(title="single node", evidence={"n1/applog": [
        "2025-01-01T00:00:01Z n1:1:1 [0] NCCL INFO Bootstrap : Using [0]lo:127.0.0.1<0>"]},
        context={"nodes": ["n1"]}, expect=Expect(fired=True, demoted=[_NON_ROUTABLE_SYMPTOM])),
    RuleCase(title="two nodes", evidence={
        "n1/applog": ["2025-01-01T00:00:01Z n1:1:1 [0] NCCL INFO Bootstrap : Using [0]lo:127.0.0.1<0>"],
        "n2/applog": ["2025-01-01T00:00:01Z n2:1:1 [0] NCCL INFO Bootstrap : Using [0]lo:127.0.0.1<0>"]},
        expect=Expect(fired=False, sub_domain="configuration")),
    RuleCase(title="a single node meets on localhost", evidence={"n1/applog": [
        "2025-01-01T00:00:01Z MASTER_ADDR=localhost MASTER_PORT=29500 WORLD_SIZE=8"]},
        context={"nodes": ["n1"]}, expect=Expect(fired=True, demoted=["Rendezvous address is loopback"])),
    RuleCase(title="Gloo on loopback on one node", evidence={"n1/applog": [
        "2025-01-01T00:00:01Z [rank0]:[W427 03:10:15.652192062 ProcessGroupGloo.cpp:715] Warning: Unable to resolve "
        "hostname to a (local) address. Using the loopback address as fallback. Manually set the network interface to "
        "bind to with GLOO_SOCKET_IFNAME. (function operator())"]},
        context={"nodes": ["n1"]}, expect=Expect(fired=True, demoted=["Gloo bound to the loopback address"])),
    RuleCase(title="DeepSpeed without a hostfile on one node", evidence={"n1/applog": [
        "2025-01-01T00:00:01Z [WARNING] [runner.py:178:fetch_hostfile] Unable to find hostfile, will proceed with "
        "training with local resources only."]},
        context={"nodes": ["n1"]}, expect=Expect(fired=True, demoted=["Launcher started on one node only"])),
])
def nccl_interface_needs_peers(ws: Workspace) -> None:
    if len(ws.context.nodes) > 1:
        return
    for name in (_NON_ROUTABLE_SYMPTOM, "Rendezvous address is loopback", "Launcher started on one node only",
                 "Gloo bound to the loopback address"):
        for s in ws.active(prefix=name):
            ws.demote(s, "single-node job: its processes meet on the host")



@refiner("ConnectToABridgeAddress", phase=Phase.REFINE_EARLY, doc="""
A socket connect failure to an address that a node of the job advertised on a loopback or bridge interface
(NCCL 'Bootstrap : Using docker0:172.17.0.1'), or dialled at a loopback or link-local address, is what that
misconfiguration does to its peers: the failure is demoted as downstream of it, and the interface is the cause.
""", cases=[
    RuleCase(title="peer dials a docker bridge address", evidence={
        "a/applog": ["2025-01-01T00:00:05Z a:1:1 [0] misc/socket.cc:484 NCCL WARN socketStartConnect: Connect to 172.21.0.1<57093> failed : Software caused connection abort"],
        "b/applog": ["2025-01-01T00:00:01Z b:1:1 [0] NCCL INFO Bootstrap : Using docker0:172.21.0.1<0>"]},
        expect=Expect(fired=True, sub_domain="configuration", demoted=["NCCL socket connect failure"])),
])
def connect_to_a_bridge_address(ws: Workspace) -> None:
    advertised = {address for s in ws.active(prefix=_NON_ROUTABLE_SYMPTOM)
                  for address in s.value_set("address") | s.value_set("default_bridge") | s.value_set("loopback")
                  | s.value_set("link_local")}
    if not advertised:
        return
    for failure in ws.active(prefix="NCCL socket connect failure"):
        dialled = sorted(failure.value_set("peer") & advertised)
        if dialled:
            ws.demote(failure, f"dialled {dialled[0]}, an address a node advertised on a loopback or bridge interface")


_FIREWALL_SYMPTOM = "Host firewall blocked the job's traffic"


@refiner("FirewallBetweenNodes", phase=Phase.REFINE, doc="""
A host firewall's denied-packet log is the job's failure only when the refused packets went from one node of the
workload to another (their SRC and DST addresses resolve, through the NCCL interface lines or host names, to two
different allocated nodes): then it is promoted. Packets from or to anything else are the firewall's background.
""", cases=[
    RuleCase(title="NCCL's port refused between the job's nodes", evidence={
        "a/applog": ["2025-01-01T00:00:01Z a:1:1 [0] NCCL INFO Bootstrap : Using bond0:10.40.3.11<0>"],
        "b/applog": ["2025-01-01T00:00:01Z b:1:1 [0] NCCL INFO Bootstrap : Using bond0:10.40.3.12<0>"],
        "a/syslog": ["Jan  1 00:01:00 a kernel: [273707.0] filter_IN_public_REJECT: IN=bond0 OUT= MAC=00 "
                     "SRC=10.40.3.12 DST=10.40.3.11 LEN=60 PROTO=TCP SPT=45876 DPT=51423"]},
        expect=Expect(fired=True, sub_domain="configuration", culprits=[])),
    RuleCase(title="a scan from outside the workload", evidence={
        "a/applog": ["2025-01-01T00:00:01Z a:1:1 [0] NCCL INFO Bootstrap : Using bond0:10.40.3.11<0>"],
        "b/applog": ["2025-01-01T00:00:01Z b:1:1 [0] NCCL INFO Bootstrap : Using bond0:10.40.3.12<0>"],
        "a/syslog": ["Jan  1 00:01:00 a kernel: [273707.0] filter_IN_public_REJECT: IN=bond0 OUT= MAC=00 "
                     "SRC=192.0.2.7 DST=10.40.3.11 LEN=60 PROTO=TCP SPT=45876 DPT=22"]},
        expect=Expect(fired=False, sub_domain="unknown")),
])
def firewall_between_nodes(ws: Workspace) -> None:
    for s in ws.select(prefix=_FIREWALL_SYMPTOM, status="interesting"):
        pairs = {(resolve_peer(ws, src), resolve_peer(ws, dst)) for src in s.value_set("src") for dst in s.value_set("dst")}
        inside = sorted(f"{a} -> {b}" for a, b in pairs if a and b and a != b)
        if inside:
            ws.promote(s, f"the firewall refused the job's own traffic ({', '.join(inside)})")


_ENDPOINT_SYMPTOM = "Rendezvous endpoint outside the workload"


_STORE_SERVER_SYMPTOM = "Store server unreachable from its clients"


@refiner("StoreServerUnreachable", phase=Phase.REFINE, doc="""
The c10d store server's 'Timed out after N seconds waiting for clients' (JAX's coordinator timing out at its connect
barrier) is promoted when a client on another node failed to connect to the store (a JAX worker's registration went
unanswered) within the server's wait (from its start to its timeout): both processes ran, so the path between the nodes
was closed. A client line without a stamp counts by the stamped line before it in its own output. Without such a
client the server's timeout stays context (its clients may never have started).
""", cases=[
    RuleCase(title="the server waited, the client could not reach it", evidence={
        "a/applog": ["2025-01-01T00:27:41Z torch.distributed.DistStoreError: Timed out after 121 seconds waiting for "
                     "clients. 1/2 clients joined."],
        "b/applog": ["2025-01-01T00:27:42Z [c10d] The client socket has timed out after 120000ms while trying to connect "
                     "to (nccl-master, 29500)."]},
        context={"scheduler": "kubernetes", "scheduler_state": "Failed", "exit_code": ""},
        expect=Expect(fired=True, sub_domain="configuration", culprits=[],
                      root_symptom="Store server unreachable from its clients")),
    RuleCase(title="the clients never started", evidence={
        "a/applog": ["2025-01-01T00:27:41Z torch.distributed.DistStoreError: Timed out after 121 seconds waiting for "
                     "clients. 1/2 clients joined."]},
        expect=Expect(fired=False)),
    # https://github.com/jax-ml/jax/issues/35905 (jax 0.8.1 moved the coordinator port out of the TPU pod's firewall)
    RuleCase(title="JAX: the coordinator waited at the connect barrier, a worker's registration went unanswered",
             evidence={
        "w0/applog": ["I0316 02:14:09.201774 4412 distributed.py:150] Starting JAX distributed service on [::]:8482",
                      "E0316 02:19:10.270002    4412 client.cc:64] Failed to connect to distributed JAX controller: "
                      "DEADLINE_EXCEEDED: Barrier timed out. Id: PjRT_Client_Connect::. This usually happens because a "
                      "task triggered the barrier too early or too slowly."],
        "w1/applog": ["I0316 02:14:10.254250 5973 distributed.py:172] Connecting to JAX distributed service on "
                      "10.164.0.41:8482",
                      "jaxlib._jax.XlaRuntimeError: Failed to connect to distributed JAX controller:",
                      "DEADLINE_EXCEEDED: Deadline Exceeded",
                      "RPC: /tensorflow.CoordinationService/RegisterTask"]},
        context={"start_time": "2026-03-16T02:14:00Z", "end_time": "2026-03-16T02:19:20Z"},
        expect=Expect(fired=True, sub_domain="configuration", culprits=[],
                      root_symptom="Store server unreachable from its clients")),
])
def store_server_unreachable(ws: Workspace) -> None:
    for server in ws.select(prefix=_STORE_SERVER_SYMPTOM, status="interesting"):
        if server.first_time is None or ws.undated(server):
            continue
        waited = timedelta(seconds=max(_waited_s(e.text) for e in server.evidence))
        skew = timedelta(seconds=ws.params.clock_skew_s)
        began = server.first_time - waited
        clients = [c for c in ws.select(prefix=_ENDPOINT_SYMPTOM, status="interesting")
                   if c.node != server.node and c.first_time is not None and _alive_at(ws, c)
                   and began - skew <= c.first_time <= server.first_time + skew]
        if clients:
            ws.promote(server, f"{clients[0].node}'s store client could not connect while this server waited for it")


def _alive_at(ws: Workspace, client: WorkSymptom) -> bool:
    """Whether the client's time says its process ran then: a stamp of its own, or one inherited from the stamped
    line its process printed before it (a traceback under a log line); not the job-end fallback."""
    return not ws.undated(client) or client.first_time != ws.context.end_time


_JAX_CONNECT_TIMEOUT_S = 300.0   # jax.distributed.initialize's initialization_timeout by default; its message names none


def _waited_s(text: str) -> float:
    found = re.search(r"Timed out after (\d+) seconds waiting for clients", text)
    if found:
        return float(found.group(1))
    return _JAX_CONNECT_TIMEOUT_S if "PjRT_Client_Connect" in text else 0.0


@refiner("RendezvousEndpointOutsideWorkload", phase=Phase.REFINE, doc="""
Store clients that could not reach the rendezvous endpoint (the address their error names, else the one endpoint
the launch command or MASTER_ADDR set) blame the endpoint, as launch configuration, when it is outside the
workload: a reserved or multicast address no host can own; or an address no node of the workload is known by
while every allocated node failed to reach it (the node owning the endpoint serves the store and would not fail).
Under Kubernetes a host name is a pod or service name, not a node, so only addresses count there. An endpoint
that is a node of the workload, or that some node did not fail to reach, keeps the failures as context.
""", cases=[
    RuleCase(title="every node dials a login node", evidence={
        "a/applog": ["2025-01-01T00:00:01Z + export MASTER_ADDR=login01.cluster.local",
                     "2025-01-01T00:01:01Z RuntimeError: connect() timed out. Original timeout was 60000 ms."],
        "b/applog": ["2025-01-01T00:01:01Z RuntimeError: connect() timed out. Original timeout was 60000 ms."]},
        expect=Expect(fired=True, sub_domain="configuration", culprits=[])),
    RuleCase(title="a reserved address", context={"scheduler": "kubernetes"}, evidence={
        "a/applog": ["2025-01-01T00:01:01Z [c10d] The client socket has timed out after 60000ms while trying to "
                     "connect to (248.2.20.163, 29400)."]},
        expect=Expect(fired=True, sub_domain="configuration", culprits=[])),
    RuleCase(title="the endpoint's own node never reached it (it crashed first)", evidence={
        "a/applog": ["2025-01-01T00:00:01Z + export MASTER_ADDR=a"],
        "b/applog": ["2025-01-01T00:01:01Z RuntimeError: connect() timed out. Original timeout was 60000 ms."]},
        expect=Expect(fired=False, sub_domain="unknown")),
    RuleCase(title="one node of two failed to reach an unknown address", evidence={
        "a/applog": ["2025-01-01T00:01:01Z [c10d] The client socket has timed out after 60s while trying to "
                     "connect to 10.1.0.7:29500"],
        "b/applog": ["2025-01-01T00:00:30Z step 10 loss 2.1"]},
        expect=Expect(fired=False, sub_domain="unknown")),
])
def rendezvous_endpoint_outside_workload(ws: Workspace) -> None:
    failures = ws.select(prefix=_ENDPOINT_SYMPTOM, status="interesting")
    endpoints = {e for s in failures for e in s.value_set("endpoint")} or {
        str(value) for event in ws.facts_of("rdzv_endpoint")
        for value in [*event.values.get("endpoint", []), event.attributes.get("endpoint", "")] if value}
    if not failures or len(endpoints) != 1:
        return
    endpoint = endpoints.pop()
    why = _outside_the_workload(ws, endpoint, {s.node for s in failures if s.node})
    if why:
        for s in failures:
            ws.promote(s, f"rendezvous endpoint {endpoint}: {why}")


def _outside_the_workload(ws: Workspace, endpoint: str, reporters: set[str]) -> str | None:
    try:
        ip = ipaddress.ip_address(endpoint)
    except ValueError:
        ip = None
    if ip is not None and (ip.is_reserved or ip.is_multicast or ip.is_unspecified):
        return "a reserved address that no host can own"
    if ip is not None and ip.is_loopback:
        return None  # LoopbackRendezvousAddress
    if resolve_peer(ws, endpoint) or (ip is None and ws.context.scheduler == "kubernetes"):
        return None
    if not set(ws.context.nodes) <= reporters:
        return None
    return "no node of the workload is known by it, and every node failed to reach it"


@refiner("RdmaDeviceMissingOnSomeNodes", phase=Phase.REFINE, doc="""
NCCL needs every rank of a communicator on the same network transport. A node whose NCCL found no RDMA device
('NET/IB : No device found') while another node of the workload uses NET/IB has lost its HCA or its RDMA driver
stack: its `No RDMA device where the peers have one` becomes a root candidate that blames it. When no node uses
RDMA, the message is just an Ethernet-only job's; nor when that node's NCCL read NCCL_IB_DISABLE=1 from its environment:
the transport is off there by setting, not a lost device.
""", cases=[
    RuleCase(title="one node fell back to sockets", evidence={
        "a/applog": ["2025-01-01T00:00:01Z a:1:1 [0] NCCL INFO NET/IB : No device found.",
                     "2025-01-01T00:00:09Z a:1:1 [0] misc/socket.cc:441 NCCL WARN socketFinalizeAccept: wrong type 4 != 3"],
        "b/applog": ["2025-01-01T00:00:01Z b:1:1 [0] NCCL INFO NET/IB : Using [0]mlx5_0:1/IB [RO]; OOB ib0:10.0.0.2<0>"]},
        expect=Expect(fired=True, sub_domain="network", culprits=["a"])),
    # https://github.com/NVIDIA-NeMo/Speech/issues/4035 (one node's environment disabled IB; NCCL 2.12.9)
    RuleCase(title="one node disabled IB by its environment", evidence={
        "a/applog": ["2025-01-01T00:00:01Z a:1:1 [0] NCCL INFO NET/IB : No device found.",
                     "2025-01-01T00:00:01Z a:1:1 [0] NCCL INFO NCCL_IB_DISABLE set by environment to 1."],
        "b/applog": ["2025-01-01T00:00:01Z b:1:1 [0] NCCL INFO NET/IB : Using [0]mlx5_0:1/IB [RO]; OOB ib0:10.0.0.2<0>"]},
        expect=Expect(fired=False, culprits=[])),
    RuleCase(title="an Ethernet-only job", evidence={
        "a/applog": ["2025-01-01T00:00:01Z a:1:1 [0] NCCL INFO NET/IB : No device found."],
        "b/applog": ["2025-01-01T00:00:01Z b:1:1 [0] NCCL INFO NET/IB : No device found."]},
        expect=Expect(fired=False, culprits=[])),
])
def rdma_device_missing_on_some_nodes(ws: Workspace) -> None:
    using = {event.node for event in ws.facts_of("rdma_in_use") if event.node}
    disabled = {event.node for event in ws.facts_of("nccl_ib_disabled") if event.node}
    missing = ws.select(prefix="No RDMA device where the peers have one", status="interesting")
    if not using:
        return
    for s in missing:
        if s.node not in using and s.node not in disabled:
            ws.promote(s, f"NCCL found no RDMA device here while {', '.join(sorted(using))} use NET/IB")


_HARDWARE = frozenset({SubDomain.GPU, SubDomain.NVLINK, SubDomain.HOST, SubDomain.STORAGE})
_CRASHED = "Process crashed"  # a rank's process the kernel or a signal handler saw crash: its peers lose it


@refiner("FailedNodeExplainsPeerErrors", phase=Phase.REFINE_LATE, after=("DeadNodeExplainsPeerErrors",), doc=f"""
RDMA errors that name one node as the peer they lost, and begin when that node's own failure does or in the
{DEAD_NODE_ECHO_S / 60:.0f} minutes after (a disk that failed under its ranks, a GPU fault, its program's crash - a
segfault the kernel or a signal handler recorded counts, though it names no cause), are what
its peers saw of that failure: they are demoted, and the node's own failure stays the root candidate. Errors naming
another node, or beginning before, are kept; errors without a time of their own go with the failure. A crash report
counts even when its time is only inherited from the line before it (a signal handler's banner carries no stamp), and
so does a CUDA out-of-memory error (a traceback's last line carries none; and running out of GPU memory is the
program's own end, never what a lost peer does to it).

An RDMA completion error that names no peer (NCCL's older 'Got completion with error 12') says only that some peer
stopped answering: retry-exceeded is what a sender sees when the remote process, GPU or host died as much as when a
link broke. When exactly one node's own hardware failed (a GPU, NVLink, host or disk fault of its own), and the errors
are on other nodes and began with it or after (or carry no time), that node explains them and they are demoted; a
network fault would not explain the other node's hardware record. On the node that failed itself, RDMA errors that
began with its own failure or after (a process that aborted on an assertion, a crashed rank, a GPU fault) are its work
ending with it, and are demoted the same way; ones that began before it may be its cause, and stay (in the same
second, printed before it in the same log). Errors that all name one peer address that no address line of the
workload resolves, when exactly one other node failed on its own and they began with that failure or after, are taken
as what its peers saw of it the same way (the workload's address lines did not include that node's).
""", cases=[
    # https://forums.developer.nvidia.com/t/containers-losing-access-to-gpus-failed-to-initialize-nvml/242308 (one
    # worker's container lost its GPUs; the other workers' NCCL lost that worker)
    RuleCase(title="one unresolved peer address, and the one node that failed on its own", evidence={
        "b/applog": ["2025-01-01T00:10:08Z Failed to initialize NVML: Unknown Error"],
        "a/applog": ["2025-01-01T00:10:12Z a:814:911 [2] transport/net_ib.cc:1295 NCCL WARN NET/IB : Got completion "
                     "from peer 10.52.1.12<46537> with error 12, opcode 0, len 0, vendor err 129 (Recv)"],
        "c/applog": ["2025-01-01T00:10:13Z c:814:911 [2] transport/net_ib.cc:1295 NCCL WARN NET/IB : Got completion "
                     "from peer 10.52.1.12<46538> with error 12, opcode 0, len 0, vendor err 129 (Recv)"]},
        context={"scheduler": "kubernetes", "nodes": ["a", "b", "c"]},
        expect=Expect(fired=True, sub_domain="configuration", demoted=["IB Error-12"])),
    RuleCase(title="one unresolved peer address, and two nodes that failed on their own", evidence={
        "b/applog": ["2025-01-01T00:10:08Z Failed to initialize NVML: Unknown Error"],
        "c/applog": ["2025-01-01T00:10:09Z Failed to initialize NVML: Unknown Error"],
        "a/applog": ["2025-01-01T00:10:12Z a:814:911 [2] transport/net_ib.cc:1295 NCCL WARN NET/IB : Got completion "
                     "from peer 10.52.1.12<46537> with error 12, opcode 0, len 0, vendor err 129 (Recv)"]},
        context={"scheduler": "kubernetes", "nodes": ["a", "b", "c"]}, expect=Expect(fired=False)),
    # https://github.com/om-ai-lab/VLM-R1/issues/71 (UCX's handler on the rank that died in cuBLASLt; its peer's NCCL
    # lost it)
    RuleCase(title="an unstamped crash banner, then a peer's unstamped error naming that node", evidence={
        "b/applog": ["2025-01-01T00:03:28Z [rank8]: ProcessGroupNCCL created ncclComm_ 0x558498a8f4 on CUDA device: 0",
                     "[b:3694:0:3694] Caught signal 8 (Floating point exception: integer divide by zero)"],
        "a/applog": ["2025-01-01T00:16:17Z [c10d - debug] Read callback failed. code:-4095 name:EOF desc:end of file",
                     "a:3108:3421 [6] transport/net_ib.cc:1696 NCCL WARN NET/IB : Got completion from peer "
                     "10.41.7.2<58119> with status=12 opcode=0 len=0 vendor err 129 (Send) localGid ::ffff:10.41.7.1 "
                     "remoteGids::ffff:10.41.7.2",
                     "a:3108:3108 [0] NCCL INFO Bootstrap : Using ib0:10.41.7.1<0>"],
        "b/syslog": ["b:3694:3694 [0] NCCL INFO Bootstrap : Using ib0:10.41.7.2<0>"]},
        context={"nodes": ["a", "b"]},
        expect=Expect(fired=True, sub_domain="application", demoted=["IB Error-12"])),
    # PyTorch's CUDA OOM as DeepSpeed's pdsh runner relays it (the host ahead, no stamp): an evaluation pass ran one
    # rank out of GPU memory, and its peers' NCCL lost it
    RuleCase(title="an unstamped CUDA OOM, then a peer's unstamped error naming that node", evidence={
        "b/applog": ["2025-01-01T00:03:28Z b:1:1 [0] NCCL INFO Bootstrap : Using ib0:10.2.0.13<0>",
                     "b: torch.cuda.OutOfMemoryError: CUDA out of memory. Tried to allocate 3.52 GiB. GPU 5 has a total "
                     "capacty of 79.15 GiB of which 2.87 GiB is free."],
        "a/applog": ["2025-01-01T00:03:27Z a:1:1 [0] NCCL INFO Bootstrap : Using ib0:10.2.0.12<0>",
                     "a: a:44212:44852 [2] transport/net_ib.cc:1295 NCCL WARN NET/IB : Got completion from peer "
                     "10.2.0.13<36012> with status=12 opcode=0 len=0 vendor err 129 (Recv)"]},
        context={"nodes": ["a", "b"]},
        expect=Expect(fired=True, sub_domain="gpu_oom", demoted=["IB Error-12"])),
    # https://github.com/charmplusplus/charm/issues/2532 (Charm++'s verbs layer asserting on the completion error it
    # had just dumped)
    RuleCase(title="a completion error printed before the abort it provoked, in the same second", evidence={
        "a/applog": ["2019-09-25 10:15:09 mlx5: a: got completion with error:",
                     "2019-09-25 10:15:09 ------------- Processor 0 Exiting: Called CmiAbort ------------"]},
        context={"nodes": ["a", "b"]}, expect=Expect(fired=False, active=["IB completion error"])),
    # https://github.com/StanfordLegion/legion/issues/1118 (Realm aborted on an assertion; libmlx5's CQE dump follows)
    RuleCase(title="a process aborts on an assertion; its own node's RDMA completion errors follow", evidence={
        "a/applog": ["2021-07-05T21:16:41.507Z app: /src/realm/event_impl.cc:1601: void Realm::GenEventImpl::process_update"
                     "(Realm::EventImpl::gen_t, const gen_t*, int, Realm::TimeLimit): Assertion `num_poisoned_generations"
                     ".load() == 0' failed.",
                     "2021-07-05T21:16:41.541Z mlx5: a: got completion with error:"]},
        context={"nodes": ["a", "b"]},
        expect=Expect(fired=True, sub_domain="application", culprits=[], demoted=["IB completion error"])),
    RuleCase(title="RDMA errors on a node before its process aborted", evidence={
        "a/applog": ["2021-07-05T21:16:41.507Z mlx5: a: got completion with error:",
                     "2021-07-05T21:16:41.541Z app: /src/realm/event_impl.cc:1601: void Realm::f(int): Assertion `x' "
                     "failed."]},
        context={"nodes": ["a", "b"]}, expect=Expect(fired=False, sub_domain="network")),
    RuleCase(title="a node's disk fails under its ranks; its peers' RDMA operations to it fail", evidence={
        "a/applog": ["2025-01-01T00:00:01Z a:1:1 [0] NCCL INFO Bootstrap : Using ib0:10.0.0.1<0>",
                     "2025-01-01T00:10:20Z a:1:1 [0] NCCL WARN NET/IB : Got completion from peer 10.0.0.2<1> with "
                     "status=12 opcode=0 len=0 vendor err 129 (Send)"],
        "b/applog": ["2025-01-01T00:00:01Z b:1:1 [0] NCCL INFO Bootstrap : Using ib0:10.0.0.2<0>"],
        "b/syslog": ["Jan  1 00:10:00 b kernel: [2119217.2] XFS (dm-4): I/O Error Detected. Shutting down filesystem"]},
        expect=Expect(fired=True, sub_domain="storage", culprits=["b"], demoted=["IB Error-12"])),
    RuleCase(title="peer errors that began before the node's failure", evidence={
        "a/applog": ["2025-01-01T00:00:01Z a:1:1 [0] NCCL INFO Bootstrap : Using ib0:10.0.0.1<0>",
                     "2025-01-01T00:05:20Z a:1:1 [0] NCCL WARN NET/IB : Got completion from peer 10.0.0.2<1> with "
                     "status=12 opcode=0 len=0 vendor err 129 (Send)"],
        "b/applog": ["2025-01-01T00:00:01Z b:1:1 [0] NCCL INFO Bootstrap : Using ib0:10.0.0.2<0>"],
        "b/syslog": ["Jan  1 00:10:00 b kernel: [2119217.2] XFS (dm-4): I/O Error Detected. Shutting down filesystem"]},
        expect=Expect(fired=False, sub_domain="network")),
    # https://github.com/NVIDIA/Megatron-LM/issues/1861 (a rank segfaulted in an async checkpoint save)
    RuleCase(title="a rank's process segfaults; its peers' RDMA operations to it fail", evidence={
        "a/applog": ["2025-01-01T00:00:01Z a:1:1 [0] NCCL INFO Bootstrap : Using ib0:10.0.0.1<0>",
                     "2025-01-01T00:10:20Z a:1:1 [0] NCCL WARN NET/IB : Got completion from peer 10.0.0.2<1> with "
                     "status=12 opcode=0 len=0 vendor err 129 (Recv)"],
        "b/applog": ["2025-01-01T00:00:01Z b:1:1 [0] NCCL INFO Bootstrap : Using ib0:10.0.0.2<0>"],
        "b/syslog": ["Jan  1 00:10:00 b kernel: [3903845.1] pt_main_thread[54744]: segfault at 18 ip 00007f21c64a1e9b sp "
                     "00007ffe4a1b2c40 error 4 in libtorch_cuda.so[7f21c4000000+2a000000]"]},
        expect=Expect(fired=True, culprits=[], demoted=["IB Error-12"])),
    RuleCase(title="errors naming no peer on two nodes after another node's double-bit ECC error", evidence={
        "a/applog": ["a:1:1 [2] NCCL WARN NET/IB : Got completion with error 12, opcode 1, len 0, vendor err 129"],
        "c/applog": ["c:1:1 [2] NCCL WARN NET/IB : Got completion with error 12, opcode 1, len 0, vendor err 129"],
        "b/syslog": ["Jan  1 00:10:00 b kernel: NVRM: Xid (PCI:0000:88:00): 48, pid=36515, An uncorrectable double "
                     "bit error (DBE) has been detected on GPU in the framebuffer at physAddr 0x7d3a8c000."]},
        context={"nodes": ["a", "b", "c"]},
        expect=Expect(fired=True, sub_domain="gpu", culprits=["b"], demoted=["IB Error-12"])),
    RuleCase(title="errors naming no peer, and two nodes with faults of their own", evidence={
        "a/applog": ["a:1:1 [2] NCCL WARN NET/IB : Got completion with error 12, opcode 1, len 0, vendor err 129"],
        "b/syslog": ["Jan  1 00:10:00 b kernel: NVRM: Xid (PCI:0000:88:00): 48, pid=36515, An uncorrectable double "
                     "bit error (DBE) has been detected on GPU in the framebuffer at physAddr 0x7d3a8c000."],
        "c/syslog": ["Jan  1 00:10:00 c kernel: NVRM: Xid (PCI:0000:1a:00): 79, pid=1, GPU has fallen off the bus."]},
        context={"nodes": ["a", "b", "c"]}, expect=Expect(fired=False)),
])
def failed_node_explains_peer_errors(ws: Workspace) -> None:
    skew, echo = timedelta(seconds=ws.params.clock_skew_s), timedelta(seconds=DEAD_NODE_ECHO_S)
    failed: dict[str, WorkSymptom] = {}  # each node's earliest failure of its own (not the network's, not a scheduler's)
    for s in [*ws.active(role="root"), *ws.active(prefix=_CRASHED)]:
        own_failure = s.sub_domain not in (SubDomain.NETWORK, SubDomain.SCHEDULER)
        # a crash report's time may be only inherited (a signal handler prints no stamp): it is still the node's end
        timed = not ws.undated(s) or s.name.startswith(_CRASHED) or s.sub_domain == SubDomain.GPU_OOM
        if s.node and s.first_time and timed and own_failure and (
                s.node not in failed or s.first_time < (failed[s.node].first_time or s.first_time)):
            failed[s.node] = s
    broken = {node: s for node, s in failed.items() if s.sub_domain in _HARDWARE}
    for s in ws.active(role="root", sub_domain=SubDomain.NETWORK):
        named = named_peers(ws, s) | {n for n in (ws.canonical_node(p) for p in s.value_set("blamed_node")) if n}
        began = None if ws.undated(s) else s.first_time
        mine = failed.get(s.node) if s.node else None
        printed_first = mine is not None and began == mine.first_time and printed_before(s, [mine])
        if mine is not None and mine.first_time is not None and began is not None and not printed_first and \
                mine.first_time <= began <= mine.first_time + echo:
            ws.demote(s, f"{s.node}'s own failure came first ({mine.name} at {mine.first_time:%H:%M:%S}): its RDMA "
                         "work ended with it")
            continue
        if named:
            own = failed.get(min(named)) if len(named) == 1 else None
        elif s.definition.blame == "peer" and len(broken) == 1:
            own = next(iter(broken.values()))
        elif len(s.value_set("peer") | s.value_set("peer_rdma")) == 1 and \
                len(lost := [f for node, f in failed.items() if node != s.node]) == 1:
            own = lost[0]  # one peer address no address line resolves, and one other node that failed on its own
        else:
            continue
        if own is None or own.node == s.node or own.first_time is None:
            continue
        if began is None or own.first_time - skew <= began <= own.first_time + echo:
            ws.demote(s, f"{own.node} failed first ({own.name} at {own.first_time:%H:%M:%S}): its peers lost it"
                      if named else f"the errors name no peer, and {own.node}'s hardware failed ({own.name} at "
                      f"{own.first_time:%H:%M:%S}): a peer that stopped answering")


_PORT_FOUND_DOWN = "Health check found the node's network port down"
# How long after the first RDMA error a node's health check may report the port that broke: Slurm runs it every
# HealthCheckInterval (minutes; sites use 5 to 15) and from the epilog, when the job's processes are gone.
HEALTH_CHECK_AFTER_S = 900.0


@refiner("HealthCheckFindsTheDownPort", phase=Phase.REFINE_LATE, after=("FailedNodeExplainsPeerErrors",), doc=f"""
RDMA errors that name no peer (retry-exceeded 'Got completion with error 12' on every node) say that some link or
peer stopped answering, not which. When, from the first of them to {HEALTH_CHECK_AFTER_S / 60:.0f} minutes after,
exactly one node's health check found its own InfiniBand port down (`{_PORT_FOUND_DOWN}`: NHC's check_hw_ib), that
port is the link that broke: the errors are demoted, and the health check's finding - which names the node - is the
root candidate. A check on several nodes (a switch, a fabric event), or long after, leaves the errors as they are.
""", cases=[
    RuleCase(title="retry-exceeded everywhere, then one node's health check finds its port down", evidence={
        "a/applog": ["2025-01-01T00:22:07Z a:1:1 [0] transport/net_ib.cc:790 NCCL WARN NET/IB : Got completion with "
                     "error 12, opcode 0, len 0, vendor err 129"],
        "b/applog": ["2025-01-01T00:22:09Z b:1:1 [3] transport/net_ib.cc:790 NCCL WARN NET/IB : Got completion with "
                     "error 12, opcode 1, len 32768, vendor err 129"],
        "a/syslog": ["Jan  1 00:22:51 a nhc[51877]: Health check failed:  check_hw_ib:  No IB port mlx5_0:1 is ACTIVE "
                     "(LinkUp 40 Gb/sec)."]},
        context={"nodes": ["a", "b"]},
        expect=Expect(fired=True, sub_domain="network", culprits=["a"], root_symptom=_PORT_FOUND_DOWN)),
    RuleCase(title="the health check failed on every node: the fabric, not one port", evidence={
        "a/applog": ["2025-01-01T00:22:07Z a:1:1 [0] transport/net_ib.cc:790 NCCL WARN NET/IB : Got completion with "
                     "error 12, opcode 0, len 0, vendor err 129"],
        "a/syslog": ["Jan  1 00:22:51 a nhc[51877]: Health check failed:  check_hw_ib:  No IB port mlx5_0:1 is ACTIVE "
                     "(LinkUp 40 Gb/sec)."],
        "b/syslog": ["Jan  1 00:22:52 b nhc[41877]: Health check failed:  check_hw_ib:  No IB port mlx5_0:1 is ACTIVE "
                     "(LinkUp 40 Gb/sec)."]},
        context={"nodes": ["a", "b"]}, expect=Expect(fired=False)),
])
def health_check_finds_the_down_port(ws: Workspace) -> None:
    errors = [s for s in ws.active(role="root", sub_domain=SubDomain.NETWORK) if s.name != _PORT_FOUND_DOWN
              and not named_peers(ws, s) and not s.value_set("blamed_node")]
    began = min((s.first_time for s in errors if s.first_time and not ws.undated(s)), default=None)
    if began is None:
        return
    skew, window = timedelta(seconds=ws.params.clock_skew_s), timedelta(seconds=HEALTH_CHECK_AFTER_S)
    checks = [c for c in ws.active(prefix=_PORT_FOUND_DOWN)
              if c.node and c.first_time and began - skew <= c.first_time <= began + window]
    if len({c.node for c in checks}) != 1:
        return
    found = checks[0]
    for s in errors:
        ws.demote(s, f"{found.node}'s health check found its port down at {found.first_time:%H:%M:%S}: the link that "
                     "broke is that node's")


_CMA_REFUSED = "MPI shared-memory copy refused (container)"


@refiner("CmaRefusalInACompletedRun", phase=Phase.REFINE, doc=f"""
Open MPI's shared-memory transport reads a peer's buffer with one copy through cross-memory attach; refused
(`{_CMA_REFUSED}`: 'Read -1, expected N, errno = 1' in a container without ptrace), the read fails and the message
goes by the transport's other protocol instead: slower, not lost. A workload that trained on (progress lines) or
reported its own completion after the first refusal (lines without times: below the refusals in the same stream)
ran through them, and the refusals are demoted; without either they stay the candidate (a run that failed in its
collectives beside them).
""", cases=[
    # https://github.com/horovod/horovod/issues/300 (Horovod in Docker: the warnings, then the training finished)
    RuleCase(title="the refusals, then the run's own completion", evidence={"n1/applog": [
        "2019-03-11T14:02:21Z [96c7e3d99641:24984] Read -1, expected 122880, errno = 1",
        "2019-03-11T14:07:34Z INFO:tensorflow:Loss for final step: 0.0318."]},
        context={"scheduler": "none", "scheduler_state": "", "exit_code": ""},
        expect=Expect(fired=True, sub_domain="none", demoted=[_CMA_REFUSED])),
    # https://github.com/horovod/horovod/issues/1029 (lines without times: the epochs went on below the refusals)
    RuleCase(title="undated lines: the epochs go on below the refusals", evidence={"n1/applog": [
        "[1,0]<stderr>:[939debe34dff:00468] Read -1, expected 6441, errno = 1",
        "[1,0]<stdout>:Epoch 15/30 - loss: 0.6221 - acc: 0.8193"]},
        context={"scheduler": "none", "scheduler_state": "", "exit_code": ""},
        expect=Expect(fired=True, demoted=[_CMA_REFUSED])),
    RuleCase(title="the refusals and no completion", evidence={"n1/applog": [
        "2019-03-11T14:02:21Z [96c7e3d99641:24984] Read -1, expected 122880, errno = 1"]},
        context={"scheduler": "none", "scheduler_state": "", "exit_code": ""},
        expect=Expect(fired=False, sub_domain="configuration")),
])
def cma_refusal_in_a_completed_run(ws: Workspace) -> None:
    went_on = [s for name in ("Workload completed", "Training progress") for s in ws.select(prefix=name)]
    for refused in ws.active(prefix=_CMA_REFUSED):
        if any(_later(ws, s, refused) for s in went_on):
            ws.demote(refused, "the workload trained on or reported its completion after it: the transport's other "
                               "protocol carried the messages")


def _later(ws: Workspace, report: WorkSymptom, than: WorkSymptom) -> bool:
    """`report` came after `than` began by their own times; for lines without times of their own, `report` has a line
    below all of `than`'s in a stream they share."""
    t = report.last_time or report.first_time
    if t is not None and than.first_time is not None and not ws.undated(report) and not ws.undated(than):
        return t > than.first_time
    return printed_before(than, [report])
