"""Host rules (the Python side of catalog/host.toml): what a node's kernel reports mean on their own.

Facts used (docs/domain.md §3.4, §3.5): MCi_STATUS bit 61 (UC) marks an uncorrected machine-check error (Intel SDM
vol. 3B, MCi_STATUS); PCIe AER corrected-error storms on a root port precede devices falling off the bus (NVIDIA
Xid 79 guidance); an IB port error or link down followed by the port coming back is a recovered flap (ibv async
events 10 and 9).
"""

from __future__ import annotations

import re
from datetime import datetime, timedelta
from typing import Any

from firstfault.engine.model import Event, EventType, SubDomain, TerminalState, recorded_state
from firstfault.engine.rules_api import Expect, Phase, RuleCase, filter_rule, refiner
from firstfault.engine.workspace import EmitSpec, Workspace, WorkSymptom
from firstfault.rules.election import (
    HARDWARE,
    LINK_DOWN_EVENTS,
    blamed_nodes,
    every_node_at_once,
    printed_before,
    workload_completed,
)
from firstfault.rules.pytorch import NEVER_MET
from firstfault.rules.scheduler import (
    NODE_FAILURE_DETECTION_S,
    NODE_FAILURE_REPORTS,
    SCHEDULER_NODE_FAILURES,
    TIME_LIMITS,
)

MCE_UC_BIT = 61
HUNG_STACK_S = 30.0  # the stack the hung-task detector prints follows its 'blocked for more than' line at once
THROTTLE_MIN_REPORTS = 3  # thermal-throttle reports on one node that make it a node that keeps throttling
# ... spread over at least this long: one burst (every core of a package reporting the same instant) is one episode
THROTTLE_MIN_SPAN_S = 600.0
# A hardware warning this long before a node was declared lost went with its loss (a hot or failing part hangs a machine).
WARNED_BEFORE_LOSS_S = 3600.0
WARNINGS_MIN = 3  # reports of a warning that repeats (throttling, corrected machine checks) that make a node that keeps warning
# A node's warnings of its own hardware or runtime: those that count once, and those that count only when they repeat.
_ONE_OFF_WARNINGS = ("BMC temperature warning", "BMC logged a power-down",
                     "Node's container runtime stopped answering (PLEG)", "Node's clock stepped",
                     "slurmd cannot resolve its controller")
_REPEATED_WARNINGS = ("CPU thermal throttling", "Machine check (corrected)")
# A node declared failed that boots again within this long came back from that failure (not from a later repair).
REBOOT_AFTER_FAILURE_S = 1800.0
AER_STORM_MIN = 10  # corrected AER events on one node within a burst that make a storm
FLAP_RECOVERY_S = 60.0  # a port back to active within this many seconds after its last error recovered
# A link that went down this many times in one workload is flapping: a fault even though it came back each time.
FLAPPING_DOWNS = 3
# A node's own reports of its fabric port coming back (InfiniBand/RoCE, Slingshot); election.LINK_DOWN_EVENTS go down.
_LINK_UP_EVENTS = ("IB port active", "IB link up", "Slingshot link up")
# Work a port posted while it was down fails only when its transport retries run out: NCCL_IB_TIMEOUT (18 or 20 by
# NCCL version: 4.096 us x 2^timeout, 1.1-4.3 s per attempt) times 1 + NCCL_IB_RETRY_CNT (7) - up to ~35 s.
IB_RETRY_BUDGET_S = 35.0


# Linux's CMCI_STORM_THRESHOLD: more corrected-error interrupts than this within a second make a storm.
CE_STORM_PER_REPORT = 15
CE_STORM_REPORTS = 3  # EDAC reports at storm rate on one node that make it one that keeps storming
_CORRECTED = "Machine check (corrected)"
_CE_STORM = "Corrected-error storm"


@filter_rule("CorrectedErrorStorm", phase=Phase.FILTER, doc=f"""
Corrected memory errors stay context, except at storm rate: the kernel's own 'CMCI storm detected' (more than
{CE_STORM_PER_REPORT} corrected-error interrupts within a second), or EDAC reporting at least {CE_STORM_PER_REPORT}
corrected errors in each of {CE_STORM_REPORTS} or more reports on a node. Such a node's reports become
`{_CE_STORM}` (host, that node): a failing DIMM that keeps the machine busy correcting it, a straggler to its peers.
""", cases=[
    # https://pastebin.com/R111JF3m (a DIMM reporting over a thousand corrected errors every second)
    RuleCase(title="a DIMM corrects a thousand errors a second; the peers' collectives time out", evidence={
        "a/syslog": [f"Sep 12 08:27:{19 + i} a kernel: EDAC MC0: {1600 + i} CE error on CPU#0Channel#0_DIMM#0 "
                     "(channel:0 slot:0 page:0x0 offset:0x0 grain:8 syndrome:0x0)" for i in range(5)],
        "b/applog": ["2024-09-12T08:59:19Z [rank11]:[E912 08:59:19.147000 41203 ProcessGroupNCCL.cpp:632] [Rank 11] "
                     "Watchdog caught collective operation timeout: WorkNCCL(SeqNum=1188412, OpType=ALLREDUCE, "
                     "NumelIn=54525952, NumelOut=54525952, Timeout(ms)=1800000) ran for 1800074 milliseconds before "
                     "timing out."]},
        context={"start_time": "2024-09-12T08:00:00Z", "end_time": "2024-09-12T09:10:00Z"},
        expect=Expect(fired=True, sub_domain="host", culprits=["a"], root_symptom=_CE_STORM)),
    RuleCase(title="a few corrected errors now and then", evidence={"a/syslog": [
        f"Sep 12 08:{10 + 10 * i}:00 a kernel: EDAC MC0: 1 CE memory read error on CPU_SrcID#0_Ha#0_Chan#1_DIMM#0"
        for i in range(4)]},
        context={"start_time": "2024-09-12T08:00:00Z", "end_time": "2024-09-12T09:10:00Z"},
        expect=Expect(fired=False)),
])
def corrected_error_storm(ws: Workspace) -> None:
    for event in [e for e in ws.events_of(EventType.NODE_INTERESTING) if e.symptom == _CORRECTED]:
        counts = [int(c) for c in event.value_set("ce_count") if c.isdigit()]
        at_storm_rate = bool(counts) and min(counts) >= CE_STORM_PER_REPORT and event.count >= CE_STORM_REPORTS
        if event.value_set("cmci_storm") or at_storm_rate:
            ws.reread(event, _CE_STORM, f"corrected errors at storm rate on {event.node or '-'}")


_STUCK_FOR = re.compile(r"soft lockup - CPU#\d+ stuck for (?P<seconds>\d+)s!")


@filter_rule("SoftLockupBegan", phase=Phase.FILTER_EARLY, doc="""
The kernel's soft-lockup watchdog reports a CPU that has been stuck for N seconds ('soft lockup - CPU#1 stuck for
2471s!'), so the lockup began N seconds before the report: the `CPU soft lockup` event is placed at that start, which
can come before what the stall caused (a node the scheduler then declares not ready, its peers' timeouts). A report
that only inherited its time is left where it is.
""", cases=[
    RuleCase(title="a 41-minute lockup reported after the node was declared not ready", evidence={
        "b/syslog": ["Jan  1 00:50:20 b kernel: [1050555.0] watchdog: BUG: soft lockup - CPU#1 stuck for 2471s! "
                     "[CPU 0/KVM:31664]"],
        "a/scheduler": ["2025-01-01T00:10:00Z   Normal   NodeNotReady   Node/b   Node b status is now: NodeNotReady"]},
        context={"scheduler": "kubernetes", "scheduler_state": "Failed", "exit_code": "", "nodes": ["a", "b"]},
        expect=Expect(fired=True, sub_domain="host", culprits=["b"], root_symptom="CPU soft lockup")),
])
def soft_lockup_began(ws: Workspace) -> None:
    for event in [e for e in ws.events_of(EventType.NODE_BAD) if e.symptom == "CPU soft lockup"]:
        stuck = _STUCK_FOR.search(event.evidence.text)
        if stuck is None or event.time is None or event.evidence.time_inferred:
            continue
        began = event.time - timedelta(seconds=int(stuck["seconds"]))
        ws.emit(EmitSpec(type=event.type, node=event.node, symptom=event.symptom, evidence=event.evidence, time=began,
                         last_time=event.last_time, count=event.count, attributes=dict(event.attributes)))
        ws.drop(event, f"stuck for {stuck['seconds']} s when reported: the lockup began at {began:%H:%M:%S}")


# The task the soft-lockup watchdog names ('stuck for 23s! [UVM GPU2 BH:1931]') and NVIDIA driver kernel threads'
# names: nvidia_uvm's per-GPU workers ('UVM GPU2 BH', 'UVM GPU1 KC'), the driver's own queues and interrupt threads.
_LOCKED_TASK = re.compile(r"stuck for \d+s! \[(?P<task>[^\]\n]{1,64}):\d+\]")
_NVIDIA_THREAD = re.compile(r"UVM |nvidia|nv_queue|nv_open_q|irq/\d+-nvidia")


@filter_rule("LockupInNvidiaDriver", phase=Phase.FILTER, doc="""
A soft lockup whose stuck task is an NVIDIA driver thread ('[UVM GPU2 BH:1931]': nvidia_uvm's fault servicing, the
driver's queues and interrupt threads) is the GPU driver spinning, not the host: the lockup is read as `Task hung in
the NVIDIA driver` on that node (gpu). A user process stuck with driver frames on its stack is left a host lockup:
it may be waiting on a lock (in a VM, for a preempted vCPU) rather than in the driver.
""", cases=[
    RuleCase(title="nvidia_uvm's fault-servicing thread stuck", evidence={"n2/syslog": [
        "Jan  1 00:26:13 n2 kernel: [1094848.317509] watchdog: BUG: soft lockup - CPU#22 stuck for 23s! [UVM GPU2 BH:1931]"]},
        expect=Expect(fired=True, sub_domain="gpu", culprits=["n2"], root_symptom="Task hung in the NVIDIA driver")),
    RuleCase(title="a training process stuck", evidence={"n2/syslog": [
        "Jan  1 00:26:13 n2 kernel: [1094848.317509] watchdog: BUG: soft lockup - CPU#22 stuck for 23s! [python3:1931]"]},
        expect=Expect(fired=False, sub_domain="host", culprits=["n2"])),
])
def lockup_in_nvidia_driver(ws: Workspace) -> None:
    for lockup in [e for e in ws.events_of(EventType.NODE_BAD) if e.symptom == "CPU soft lockup"]:
        task = _LOCKED_TASK.search(lockup.evidence.text)
        if task and _NVIDIA_THREAD.match(task["task"]):
            ws.reread(lockup, "Task hung in the NVIDIA driver",
                      f"a CPU stuck in the GPU driver: the stuck task, {task['task']}, is an NVIDIA driver thread")


_CRASH_EVERYWHERE = "The same kernel crash on every node"
# A panic whose reason is the hardware's own report (an uncorrected machine check, an NMI the platform raised).
_HARDWARE_PANIC = re.compile(r"machine check|MCE|hardware|NMI", re.IGNORECASE)


@filter_rule("KernelCrashOnEveryNode", phase=Phase.FILTER, doc=f"""
A kernel crash (panic, oops, BUG) that every node of a multi-node job reports within clock_skew_s of the first is not
each node's hardware failing at the same moment: it is a kernel or driver path the workload drove on all of them
alike (a fabric driver's fault on a device buffer, a module bug). Each report becomes `{_CRASH_EVERYWHERE}` (no node
blamed; the cause is unknown from logs). A panic the hardware itself raised (a machine check, an NMI) stays its
node's, and so does a crash on some nodes only.
""", cases=[
    # https://bitbucket.org/berkeleylab/upcxx/issues/588 (a device-memory free over the CXI provider crashed the nodes)
    RuleCase(title="both nodes oops in the same second", evidence={
        f"{n}/syslog": [f"Nov 17 07:14:43 {n} kernel: [100212.644070] BUG: unable to handle page fault for address: "
                        "ffffb8a1c2e01000"] for n in ("a", "b")},
        context={"nodes": ["a", "b"]},
        expect=Expect(fired=True, sub_domain="unknown", culprits=[], root_symptom=_CRASH_EVERYWHERE)),
    RuleCase(title="one node panics", evidence={
        "a/syslog": ["Nov 17 07:14:43 a kernel: [100212.644070] BUG: unable to handle page fault for address: "
                     "ffffb8a1c2e01000"],
        "b/syslog": ["Nov 17 07:10:00 b systemd[1]: Started Session 4 of user root."]},
        context={"nodes": ["a", "b"]}, expect=Expect(fired=False, sub_domain="host", culprits=["a"])),
    RuleCase(title="both nodes panic on machine checks", evidence={
        f"{n}/syslog": [f"Nov 17 07:14:43 {n} kernel: Kernel panic - not syncing: Fatal machine check"]
        for n in ("a", "b")},
        context={"nodes": ["a", "b"]}, expect=Expect(fired=False, sub_domain="host", culprits=["a", "b"])),
])
def kernel_crash_on_every_node(ws: Workspace) -> None:
    crashes = [e for e in ws.events_of(EventType.NODE_BAD)
               if e.symptom == "Kernel panic or oops" and e.time is not None and not e.evidence.time_inferred]
    first = every_node_at_once(ws, crashes)
    if first is None or any(_HARDWARE_PANIC.search(e.evidence.text) for e in crashes):
        return
    for event in crashes:
        ws.reread(event, _CRASH_EVERYWHERE, f"every node's kernel crashed from {first:%H:%M:%S} on, none on a "
                                            "hardware report: a path the workload drove on all of them")


_DEVICES = (SubDomain.GPU, SubDomain.NVLINK, SubDomain.NETWORK)


@refiner("PanicAfterItsDevice", phase=Phase.REFINE, doc="""
A kernel crash (panic, oops) on a node whose own device - a GPU, an NVLink, a NIC (a root candidate that blames
the node) - reported a fault printed just before it in the same log, within the clock-skew tolerance, is that fault
taking the kernel down (a driver's recovery of a dead device running into freed state): the crash is demoted, and the
device's fault is the node's root candidate. A panic the hardware raised (a machine check, an NMI) stays, and so does
one with no device fault before it.
""", cases=[
    # MLNX_OFED 5.8-3.0.7.0.101 bug fixes, #3484175: mlx5's recovery of a failed device during teardown crashed the
    # kernel (the health poller's 'Fatal error N detected' is drivers/net/ethernet/mellanox/mlx5/core/health.c's)
    RuleCase(title="a NIC's fatal error, then the kernel crashing in its recovery", evidence={"b/syslog": [
        "Aug 22 19:12:44 b kernel: [3153210.024104] mlx5_core 0000:c1:00.0: poll_health:835:(pid 0): Fatal error 1 "
        "detected",
        "Aug 22 19:12:44 b kernel: [3153210.544186] Oops: 0000 [#1] PREEMPT SMP NOPTI"]},
        context={"nodes": ["a", "b"]},
        expect=Expect(fired=True, sub_domain="network", culprits=["b"], root_symptom="HCA firmware unresponsive",
                      demoted=["Kernel panic or oops"])),
    RuleCase(title="a panic, then a NIC failing as the node goes down", evidence={"b/syslog": [
        "Aug 22 19:12:44 b kernel: [3153210.024104] Kernel panic - not syncing: Fatal exception",
        "Aug 22 19:12:44 b kernel: [3153210.544186] mlx5_core 0000:c1:00.0: poll_health:835:(pid 0): Fatal error 1 "
        "detected"]},
        context={"nodes": ["a", "b"]}, expect=Expect(fired=False, sub_domain="host", culprits=["b"])),
])
def panic_after_its_device(ws: Workspace) -> None:
    skew = timedelta(seconds=ws.params.clock_skew_s)
    for crash in ws.active(prefix="Kernel panic or oops"):
        if crash.first_time is None or ws.undated(crash) or any(_HARDWARE_PANIC.search(e.text) for e in crash.evidence):
            continue
        devices = [s for s in ws.active(node=crash.node, role="root") if s.sub_domain in _DEVICES
                   and s.definition.blame == "node" and s.first_time is not None and not ws.undated(s)
                   and crash.first_time - skew <= s.first_time <= crash.first_time and printed_before(s, [crash])]
        if devices:
            ws.demote(crash, f"{devices[0].name} on this node was printed just before it: the device's fault took "
                             "the kernel down")


@refiner("ThermalThrottleSlowedTheRun", phase=Phase.REFINE, doc=f"""
Synchronous training runs at the pace of its slowest rank. When a workload ended at its time limit and exactly one
of its nodes reported its CPUs thermally throttled at least {THROTTLE_MIN_REPORTS} times during it, over
{THROTTLE_MIN_SPAN_S / 60:.0f} minutes or more, that node slowed the run: its `CPU thermal throttling` becomes the root
candidate (host). The kernel reports each core and package that crossed its threshold, so one brief episode is a
burst of lines at one instant; it does not slow a run for hours. Throttling on several nodes (a room too hot, a shared
cause), one burst, or a run that ended otherwise stays context.
""", cases=[
    RuleCase(title="one node throttles, the job runs out of time", evidence={
        "b/syslog": [f"Jan  1 00:{m:02d}:00 b kernel: CPU7: Package temperature above threshold, cpu clock throttled "
                     f"(total events = {1000 + m})" for m in (10, 20, 30)],
        "a/applog": ["2025-01-01T00:59:58Z slurmstepd: error: *** JOB 1 ON a CANCELLED AT 2025-01-01T00:59:58 DUE TO "
                     "TIME LIMIT ***"]},
        context={"nodes": ["a", "b"], "scheduler_state": "TIMEOUT", "exit_code": "0:15"},
        expect=Expect(fired=True, sub_domain="host", culprits=["b"], root_symptom="CPU thermal throttling")),
    RuleCase(title="one throttle episode in a run that failed otherwise", evidence={
        "b/syslog": ["Jan  1 00:10:00 b kernel: CPU16: Temperature above threshold, cpu clock throttled"],
        "a/applog": ["2025-01-01T00:30:00Z [rank0]: torch.OutOfMemoryError: CUDA out of memory. Tried to allocate "
                     "2.00 GiB"]},
        context={"nodes": ["a", "b"]}, expect=Expect(fired=False, sub_domain="gpu_oom", culprits=[])),
    RuleCase(title="one burst of per-core reports before a time limit", evidence={
        "b/syslog": [f"Jan  1 00:10:00 b kernel: mce: CPU{c}: Core temperature above threshold, cpu clock throttled "
                     "(total events = 2675)" for c in range(6)],
        "a/applog": ["2025-01-01T00:59:58Z slurmstepd: error: *** JOB 1 ON a CANCELLED AT 2025-01-01T00:59:58 DUE TO "
                     "TIME LIMIT ***"]},
        context={"nodes": ["a", "b"], "scheduler_state": "TIMEOUT", "exit_code": "0:15"},
        expect=Expect(fired=False, sub_domain="scheduler", culprits=[])),
])
def thermal_throttle_slowed_the_run(ws: Workspace) -> None:
    timed_out = recorded_state(ws.context) == TerminalState.TIMEOUT or any(
        ws.active(prefix=name) for name in TIME_LIMITS)
    throttled = [s for s in ws.select(prefix="CPU thermal throttling", status="interesting")
                 if s.count >= THROTTLE_MIN_REPORTS and s.node and s.first_time and s.last_time
                 and (s.last_time - s.first_time).total_seconds() >= THROTTLE_MIN_SPAN_S]
    if timed_out and len({s.node for s in throttled}) == 1:
        for s in throttled:
            ws.promote(s, f"{s.count} thermal-throttle reports on the one node that throttled, in a run that ran out "
                          "of time: its ranks set the pace")


_RUNTIME_STALLED = "Node's container runtime stopped answering (PLEG)"
# The container runtime's own daemons, as the kernel's hung-task report names them.
_RUNTIME_DAEMON = re.compile(r"^(?:dockerd|containerd|crio|runc)\b")
RUNTIME_STALL_REPORTS = 3  # a runtime reported stalled this many times stayed stalled; once, it may have recovered


_BOUNCE_FULL = "DMA bounce buffer exhausted"
_SWIOTLB_FULL = ("kernel: [ 7374.000000] virtio-pci 0000:00:02.0: swiotlb buffer is full (sz: 262144 bytes), total 524288 "
                 "(slots), used 523564 (slots)")
_VDA_WRITE_FAILED = ("kernel: [ 7375.000000] I/O error, dev vda, sector 418822144 op 0x1:(WRITE) flags 0x4800 phys_seg "
                     "64 prio class 2")
# How long after the bounce buffer filled the DMA that did not fit is still reported failing (the writes queued then).
BOUNCE_ECHO_S = 300.0


@refiner("BounceBufferExplainsIoErrors", phase=Phase.REFINE, doc=f"""
When a node's DMA bounce buffer filled (`{_BOUNCE_FULL}`), the disk writes and device transfers that did not fit
failed: that node's storage and GPU errors from then on ({BOUNCE_ECHO_S / 60:.0f} minutes, and within the clock-skew
tolerance before) are its consequence and are demoted, leaving the bounce buffer's size - the guest's boot setting - as
the root candidate. Errors on other nodes, or long before, are kept.
""", cases=[
    # https://github.com/Dstack-TEE/dstack/pull/1192 (a checkpoint's writes failing once the bounce buffer filled)
    RuleCase(title="swiotlb full, then the virtio disk's writes fail",
             evidence={"n1/syslog": [f"Jan  1 00:06:41 n1 {_SWIOTLB_FULL}", f"Jan  1 00:06:42 n1 {_VDA_WRITE_FAILED}"]},
             context={"nodes": ["n1", "n2"]},
             expect=Expect(fired=True, sub_domain="configuration", culprits=[], demoted=["Local disk failure"])),
    RuleCase(title="a disk failing on another node",
             evidence={"n1/syslog": [f"Jan  1 00:06:41 n1 {_SWIOTLB_FULL}"],
                       "n2/syslog": [f"Jan  1 00:06:42 n2 {_VDA_WRITE_FAILED}"]},
             context={"nodes": ["n1", "n2"]}, expect=Expect(fired=False, active=["Local disk failure"])),
])
def bounce_buffer_explains_io_errors(ws: Workspace) -> None:
    skew, echo = timedelta(seconds=ws.params.clock_skew_s), timedelta(seconds=BOUNCE_ECHO_S)
    for full in ws.active(prefix=_BOUNCE_FULL):
        if full.first_time is None:
            continue
        for s in ws.active(role="root", node=full.node):
            if s.sub_domain in (SubDomain.STORAGE, SubDomain.GPU) and s.first_time is not None \
                    and full.first_time - skew <= s.first_time <= full.first_time + echo:
                ws.demote(s, f"{full.node}'s DMA bounce buffer had filled at {full.first_time:%H:%M:%S}: the transfers "
                             "that did not fit failed")


@refiner("RuntimeStalledOnOneNode", phase=Phase.REFINE, after=("LostAfterItsOwnWarnings",), doc=f"""
A container runtime that stops answering the kubelet (PLEG not healthy, its calls timing out) freezes the node's pods:
their output stops and their peers wait for them. When exactly one node of a workload that did not complete reported
it again and again ({RUNTIME_STALL_REPORTS} times or more: a single stall may have recovered; the kernel's hung-task
reports of the runtime's own daemon - dockerd, containerd, CRI-O, runc - on that node count too), and a scheduler's
action ended the waiting job (its deadline, time limit or a cancel) or its ranks gave up waiting at the rendezvous
(`{NEVER_MET}`: the node's pods never came) with no other root candidate standing, that node's `{_RUNTIME_STALLED}`
becomes the root candidate (host, that node), ahead of the rendezvous's wait. Beside another fault, in a job that failed
on its own, or on several nodes, it stays context (rule LostAfterItsOwnWarnings reads it when Kubernetes then lost the
node).
""", cases=[
    # https://github.com/kubernetes/kubernetes/issues/54381 (kubectl exec hung and containers could not be killed there)
    RuleCase(title="one node's runtime stopped answering; the job ran into its deadline", evidence={
        "b/syslog": [f"Jan  1 00:1{m}:00 b kubelet[2881]: E0101 00:1{m}:00.716122 2881 remote_runtime.go:257] "
                     "ListPodSandbox with filter nil from runtime service failed: rpc error: code = 4 desc = context "
                     "deadline exceeded" for m in range(4)],
        "a/scheduler": ["2025-01-01T01:59:00Z   Warning  DeadlineExceeded  1m  job-controller  Job was active longer "
                        "than specified deadline"]},
        context={"scheduler": "kubernetes", "nodes": ["a", "b"], "scheduler_state": "Failed"},
        expect=Expect(fired=True, sub_domain="host", culprits=["b"], root_symptom=_RUNTIME_STALLED)),
    # https://github.com/moby/moby/issues/44552 (dockerd blocked in the kernel's network-namespace teardown)
    RuleCase(title="dockerd hung and the runtime stalled on one node; the other ranks gave up at the rendezvous",
             evidence={
        "b/syslog": ["Jan  1 00:14:31 b kernel: [ 1600.038458] INFO: task dockerd:3946 blocked for more than 120 seconds.",
                     "Jan  1 00:16:31 b kernel: [ 1720.038458] INFO: task dockerd:3946 blocked for more than 241 seconds.",
                     "Jan  1 00:15:55 b kubelet[1207]: I0101 00:15:55.640000    1207 kubelet.go:2133] \"Skipping pod "
                     "synchronization\" err=\"PLEG is not healthy: pleg was last seen active 3m0.91s ago; threshold is "
                     "3m0s\""],
        "a/applog": ["2025-01-01T00:22:05Z torch.distributed.DistStoreError: Timed out after 601 seconds waiting for "
                     "clients. 1/2 clients joined."]},
        context={"scheduler": "kubernetes", "nodes": ["a", "b"], "scheduler_state": "Failed"},
        expect=Expect(fired=True, sub_domain="host", culprits=["b"], root_symptom=_RUNTIME_STALLED)),
    RuleCase(title="a runtime stall on one node, and a job that failed on its own collectives", evidence={
        "b/syslog": [f"Jan  1 00:1{m}:00 b kubelet[2881]: E0101 00:1{m}:00.845163 2881 kubelet.go:2055] \"Skipping pod "
                     "synchronization\" err=\"PLEG is not healthy: pleg was last seen active 2h33m12s ago; threshold is "
                     "3m0s\"" for m in range(4)]},
        context={"scheduler": "kubernetes", "nodes": ["a", "b"], "scheduler_state": "Failed"},
        expect=Expect(fired=False, culprits=[])),
    RuleCase(title="a runtime stall beside the program's own error", evidence={
        "b/syslog": ["Jan  1 00:10:00 b kubelet[2881]: E0101 00:10:00.716122 2881 remote_runtime.go:257] ListPodSandbox "
                     "with filter nil from runtime service failed: rpc error: code = 4 desc = context deadline exceeded"],
        "a/applog": ["2025-01-01T00:20:00Z [rank0]: KeyError: 'boxes'"]},
        context={"scheduler": "kubernetes", "nodes": ["a", "b"], "scheduler_state": "Failed"},
        expect=Expect(fired=False, sub_domain="application", culprits=[])),
])
def runtime_stalled_on_one_node(ws: Workspace) -> None:
    roots = ws.active(role="root")
    if not (roots or ws.select(prefix=NEVER_MET)) or any(s.sub_domain != SubDomain.SCHEDULER for s in roots):
        return  # the scheduler's deadline or cancel ended a waiting job, or its ranks gave up waiting; nothing failed
    stalls = ws.select(prefix=_RUNTIME_STALLED)
    stalled_nodes = {s.node for s in stalls}
    daemon_hung = [s for s in ws.select(prefix="Hung task") if s.node in stalled_nodes
                   and any(_RUNTIME_DAEMON.match(t) for t in s.value_set("task"))]
    if sum(s.count for s in [*stalls, *daemon_hung]) < RUNTIME_STALL_REPORTS:
        return  # one stall the node may have recovered from
    promote_on_one_node(ws, _RUNTIME_STALLED, "had its container runtime stop answering: its pods froze")


@refiner("DowntrainedLinkOnOneNode", phase=Phase.REFINE, doc="""
The nodes of one workload are alike: when exactly one of them reported a GPU's or NIC's PCIe link trained below its
capability, and the workload did not complete, that link (a riser, cable or slot fault) slowed every collective through
it and its `PCIe link downtrained` becomes the root candidate (host). On several nodes (a platform whose slots are
narrower by design) or in a completed workload it stays context.
""", cases=[
    RuleCase(title="one node's NIC at x8, the job runs out of time", evidence={
        "b/syslog": ["Jan  1 00:12:52 b kernel: mlx5_core 0000:b3:00.0: 63.008 Gb/s available PCIe bandwidth, limited by "
                     "8 GT/s x8 link at 0000:b2:00.0 (capable of 252.048 Gb/s with 16 GT/s x16 link)"],
        "a/applog": ["2025-01-01T01:59:58Z slurmstepd: error: *** JOB 1 ON a CANCELLED AT 2025-01-01T01:59:58 DUE TO "
                     "TIME LIMIT ***"]},
        context={"nodes": ["a", "b"], "scheduler_state": "TIMEOUT", "exit_code": "0:15"},
        expect=Expect(fired=True, sub_domain="host", culprits=["b"], root_symptom="PCIe link downtrained")),
    RuleCase(title="every node's NIC in an x8 slot", evidence={
        f"{n}/syslog": [f"Jan  1 00:12:52 {n} kernel: mlx5_core 0000:b3:00.0: 63.008 Gb/s available PCIe bandwidth, "
                        "limited by 8 GT/s x8 link at 0000:b2:00.0 (capable of 252.048 Gb/s with 16 GT/s x16 link)"]
        for n in ("a", "b")},
        context={"nodes": ["a", "b"], "scheduler_state": "TIMEOUT", "exit_code": "0:15"},
        expect=Expect(fired=False, sub_domain="scheduler")),
])
def downtrained_link_on_one_node(ws: Workspace) -> None:
    promote_on_one_node(ws, "PCIe link downtrained", "runs a PCIe link below its capability: every transfer through "
                                                     "it is slower")


def promote_on_one_node(ws: Workspace, name: str, why: str) -> None:
    """Promote `name` (a state a node may be in) when exactly one node of a multi-node workload that did not complete
    reported it: the nodes of one workload are alike, so that one differs."""
    if workload_completed(ws):
        return
    reports = [s for s in ws.select(prefix=name, status="interesting") if s.node and not s.demoted_by]  # not undone
    if len(ws.context.nodes) > 1 and len({s.node for s in reports}) == 1:
        for s in reports:
            ws.promote(s, f"{s.node} alone {why}")


_DRIVER_OOM = "GPU driver out of memory"
_PROGRAM_GPU_OOM = ("CUDA out of memory", "CUDA library allocation failure")
SAME_ALLOCATION_S = 60.0  # a program's CUDA OOM this close to the driver's NV_ERR_NO_MEMORY on its node is one allocation


@refiner("DriverOomBehindProgramOom", phase=Phase.REFINE, doc=f"""
The driver's 'Out of memory [NV_ERR_NO_MEMORY]' (`{_DRIVER_OOM}`) on a node where, within {SAME_ALLOCATION_S:.0f} s,
the program reported a CUDA out-of-memory error of its own (PyTorch's with the process's own use in it) is the
driver's record of that same failed allocation: the program's report says whose memory filled the GPU, and the
driver's line is demoted. Alone (a unified-memory machine that fails before CUDA can report), it stays the root.
""", cases=[
    # https://github.com/vroomfondel/dgxarley/blob/main/docs/DGX%20Spark%20SGLang%20SM121%20Pitfalls%20EN.md (an AWQ
    # repack on GB10 whose process held 105 GiB when its next allocation failed; the driver logged the same moment)
    RuleCase(title="the driver's NV_ERR_NO_MEMORY as PyTorch reports the process's own OOM", evidence={
        "a/syslog": ["Jan  1 00:10:00 a kernel: [40415.970888] NVRM: nvCheckOkFailedNoLog: Check failed: Out of memory "
                     "[NV_ERR_NO_MEMORY] (0x00000051) returned from _memdescAllocInternal(pMemDesc) @ mem_desc.c:1359"],
        "a/applog": ["2025-01-01T00:10:00Z torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 1.50 GiB. GPU 0 "
                     "has a total capacity of 121.63 GiB of which 1.07 GiB is free. Including non-PyTorch memory, this "
                     "process has 105.60 GiB memory in use."]},
        expect=Expect(fired=True, sub_domain="gpu_oom", demoted=[_DRIVER_OOM])),
    RuleCase(title="the driver's NV_ERR_NO_MEMORY alone", evidence={
        "a/syslog": ["Jan  1 00:10:00 a kernel: [40415.970888] NVRM: nvCheckOkFailedNoLog: Check failed: Out of memory "
                     "[NV_ERR_NO_MEMORY] (0x00000051) returned from _memdescAllocInternal(pMemDesc) @ mem_desc.c:1359"]},
        expect=Expect(fired=False, sub_domain="host_oom")),
])
def driver_oom_behind_program_oom(ws: Workspace) -> None:
    window = timedelta(seconds=SAME_ALLOCATION_S)
    for s in ws.active(prefix=_DRIVER_OOM):
        said = s.first_time
        if said is None or ws.undated(s):
            continue
        program = next((p for name in _PROGRAM_GPU_OOM for p in ws.active(prefix=name, node=s.node)
                        if p.first_time is not None and not ws.undated(p) and abs(p.first_time - said) <= window), None)
        if program is not None:
            ws.demote(s, f"the driver's side of the allocation the program reported as {program.name} on {s.node}")


_SLOW_LINK = "Ethernet link back below gigabit"


def _nccl_interfaces(ws: Workspace) -> set[str]:
    """The interfaces NCCL's bootstrap lines name, on any node: the nodes of one workload name theirs alike
    (NCCL_SOCKET_IFNAME), and one node's lines may have been collected on another."""
    return {str(e.attributes.get("interface", "")) for e in ws.facts_of("ip_map")}


def _pods_on_eth0(link_line: str) -> dict[str, Any]:
    """Rule-case evidence and context: a Kubernetes Job's pods whose NCCL used eth0, node b's kernel line `link_line`,
    then the Job's deadline."""
    return {"evidence": {
        "b/syslog": [link_line],
        "b/applog": ["2025-01-01T00:02:39Z job-3-t2hvr:57:57 [0] NCCL INFO Bootstrap : Using eth0:192.168.33.71<0>",
                     "2025-01-01T01:59:00Z   Warning  DeadlineExceeded  job-controller  Job was active longer than "
                     "specified deadline"]},
        "context": {"nodes": ["a", "b"], "scheduler": "kubernetes", "scheduler_state": "Failed", "exit_code": "",
                    "start_time": "2025-01-01T00:00:00Z", "end_time": "2025-01-01T02:00:00Z"}}


@refiner("SlowLinkCarriedTheWorkload", phase=Phase.REFINE, doc=f"""
A node's Ethernet link that came back at 10 or 100 Mbps (`{_SLOW_LINK}`) slows only what goes through it. When the
workload's NCCL ran over an interface of that name (its bootstrap lines name it; the nodes are set up alike), no node
used RDMA, the workload did not complete, and this node alone reported it, the slow link is the root candidate
(network, that node): its ranks held every collective back. So is a node's link that renegotiated below gigabit while
the workload ran in Kubernetes pods whose NCCL used the pod's eth0: the pod network leaves the node by its own uplink.
A management port at 100 Mbps, or a workload on RDMA, leaves it context.
""", cases=[
    # https://github.com/52K-0812/28gpu-cluster-rebuild (docs/journal 4_02: a GPU node's uplink at 100 Mb/s on a damaged
    # cable carried the pods' Calico traffic)
    RuleCase(title="pods' NCCL on eth0; a node's uplink renegotiated at 100 Mbps mid-run, then the Job's deadline",
             **_pods_on_eth0("Jan  1 00:47:38 b kernel: [529133.840116] ixgbe 0000:02:00.0 enp2s0f0: NIC Link is Up 100 "
                             "Mbps, Flow Control: None"),
        expect=Expect(fired=True, sub_domain="network", culprits=["b"], root_symptom=_SLOW_LINK)),
    RuleCase(title="NCCL over eno1, which came back at 100 Mbps, then the time limit", evidence={
        "b/syslog": ["Jan  1 00:10:05 b kernel: [2.0] igb 0000:06:00.0 eno1: igb: eno1 NIC Link is Up 100 Mbps Full "
                     "Duplex, Flow Control: RX"],
        "b/applog": ["b:1:1 [0] NCCL INFO Bootstrap : Using eno1:192.168.40.17<0>",
                     "2025-01-01T01:59:00Z slurmstepd: error: *** JOB 1 ON b CANCELLED AT 2025-01-01T01:59:00 DUE TO "
                     "TIME LIMIT ***"]},
        context={"nodes": ["a", "b"], "scheduler_state": "TIMEOUT", "exit_code": "0:15"},
        expect=Expect(fired=True, sub_domain="network", culprits=["b"], root_symptom=_SLOW_LINK)),
    RuleCase(title="pods' NCCL on eth0; a node's port came up at 100 Mbps at boot, before the workload",
             **_pods_on_eth0("Dec 31 20:10:05 b kernel: [2.0] igb 0000:06:00.0 eno1: igb: eno1 NIC Link is Up 100 Mbps "
                             "Full Duplex, Flow Control: RX"),
        expect=Expect(fired=False, culprits=[])),
    RuleCase(title="the management port at 100 Mbps; NCCL on ib0", evidence={
        "b/syslog": ["Jan  1 00:10:05 b kernel: [2.0] igb 0000:06:00.0 eno1: igb: eno1 NIC Link is Up 100 Mbps Full "
                     "Duplex, Flow Control: RX"],
        "b/applog": ["b:1:1 [0] NCCL INFO Bootstrap : Using ib0:10.0.0.2<0>",
                     "2025-01-01T01:59:00Z slurmstepd: error: *** JOB 1 ON b CANCELLED AT 2025-01-01T01:59:00 DUE TO "
                     "TIME LIMIT ***"]},
        context={"nodes": ["a", "b"], "scheduler_state": "TIMEOUT", "exit_code": "0:15"},
        expect=Expect(fired=False, sub_domain="scheduler")),
])
def slow_link_carried_the_workload(ws: Workspace) -> None:
    if workload_completed(ws) or ws.facts_of("rdma_in_use"):
        return
    used = _nccl_interfaces(ws)
    # a pod's eth0 is its end of a veth pair into the pod network, which leaves the node by the node's own uplink
    in_pods = ws.context.scheduler == "kubernetes" and used == {"eth0"}
    slow = [s for s in ws.select(prefix=_SLOW_LINK, status="interesting")
            if s.node and ((s.value_set("interface") | s.value_set("iface")) & used
                           or in_pods and ws.dated_during_run(s))]
    if len({s.node for s in slow}) == 1 and len(ws.context.nodes) > 1:
        for s in slow:
            ws.promote(s, f"{s.node}'s link that NCCL used came back below gigabit: every collective crawled")


@refiner("NicHangOffTheWorkloadsPath", phase=Phase.REFINE, doc="""
An Ethernet NIC that hung (`Ethernet NIC hung`) stops only what goes through it. When the workload's NCCL ran over
RDMA and none of its lines names the hung interface (the bootstrap and socket interfaces it used are others: a
management port), the hang carried none of the workload's traffic: it is demoted to context. So is the link of an
Ethernet-only NIC (igb, e1000e, tg3, bnx2, ixgbe: no RDMA) going down on an interface NCCL did not use. A hang on an
interface NCCL used, or with no RDMA in use, stays the node's. An RDMA port's link that went down (`IB link down` naming
its device) on an HCA outside those NCCL used ('NET/IB : Using [0]mlx5_0:1/IB', or the NCCL_IB_HCA list the job set)
carried none of the workload's traffic either: it is demoted the same way.
""", cases=[
    # https://github.com/ucsf-wynton/wynton-website-hpc/blob/master/docs/hpc/status/incidents-2021.md (a management port
    # bouncing on a node that stayed up while a power outage took two others)
    RuleCase(title="a management port's link down while NCCL ran over ib0", evidence={
        "b/syslog": ["Jan  1 00:10:05 b kernel: [5230170.077281] igb 0000:04:00.0 eno1: igb: eno1 NIC Link is Down"],
        "b/applog": ["b:1:1 [0] NCCL INFO Bootstrap : Using ib0:10.12.0.17<0>",
                     "b:1:1 [0] NCCL INFO NET/IB : Using [0]mlx5_0:1/IB ; OOB ib0:10.12.0.17<0>"]},
        context={"nodes": ["a", "b"]}, expect=Expect(fired=True, demoted=["IB link down"])),
    RuleCase(title="a management port's transmit hang while NCCL ran over ib0", evidence={
        "b/syslog": ["Jan  1 00:10:05 b kernel: [494945.203081] 0000:03:00.0: eth0: Detected Tx Unit Hang:"],
        "b/applog": ["b:1:1 [0] NCCL INFO Bootstrap : Using ib0:10.12.0.17<0>",
                     "b:1:1 [0] NCCL INFO NET/IB : Using [0]mlx5_0:1/IB ; OOB ib0:10.12.0.17<0>"]},
        context={"nodes": ["a", "b"]}, expect=Expect(fired=True, demoted=["Ethernet NIC hung"])),
    # https://github.com/devopsrustem/slurmv4/blob/main/3/13.sh (a bond slave flapping on an HCA left out of NCCL_IB_HCA)
    RuleCase(title="an HCA outside NCCL_IB_HCA flaps", evidence={
        "b/syslog": ["Jan  1 00:52:03 b kernel: [4443.974372] mlx5_core 0000:53:00.0 mlx5_3: Port: 1 Link DOWN"],
        "b/applog": ["+ env -> NCCL_IB_HCA=mlx5_0,mlx5_1 NCCL_SOCKET_IFNAME=enp25s0np0"]},
        context={"nodes": ["a", "b"]}, expect=Expect(fired=True, demoted=["IB link down"])),
    RuleCase(title="an HCA of NCCL's list goes down", evidence={
        "b/syslog": ["Jan  1 00:52:03 b kernel: [4443.974372] mlx5_core 0000:53:00.0 mlx5_1: Port: 1 Link DOWN"],
        "b/applog": ["b:1:1 [0] NCCL INFO NET/IB : Using [0]mlx5_0:1/IB [1]mlx5_1:1/IB ; OOB ib0:10.12.0.17<0>"]},
        context={"nodes": ["a", "b"]}, expect=Expect(fired=False, sub_domain="network", culprits=["b"])),
    RuleCase(title="an HCA NCCL used goes down", evidence={
        "b/syslog": ["Jan  1 00:52:03 b kernel: [4443.974372] mlx5_core 0000:53:00.0 mlx5_1: Port: 1 Link DOWN"],
        "b/applog": ["+ env -> NCCL_IB_HCA=mlx5_0,mlx5_1 NCCL_SOCKET_IFNAME=enp25s0np0"]},
        context={"nodes": ["a", "b"]}, expect=Expect(fired=False, sub_domain="network", culprits=["b"])),
    RuleCase(title="a hang on the interface NCCL used", evidence={
        "b/syslog": ["Jan  1 00:10:05 b kernel: [494945.203081] e1000e 0000:00:1f.6 eno1: Detected Hardware Unit Hang:"],
        "b/applog": ["b:1:1 [0] NCCL INFO Bootstrap : Using eno1:192.168.40.17<0>"]},
        context={"nodes": ["a", "b"]}, expect=Expect(fired=False, sub_domain="network", culprits=["b"])),
])
def nic_hang_off_the_workloads_path(ws: Workspace) -> None:
    hcas = _rdma_devices_used(ws)
    for s in ws.active(prefix="IB link down"):
        downed = s.value_set("device")
        if hcas and downed and not downed & hcas:
            ws.demote(s, f"{', '.join(sorted(downed))} carried none of the workload's traffic: NCCL used "
                         f"{', '.join(sorted(hcas))}")
    if not ws.facts_of("rdma_in_use"):
        return
    used = _nccl_interfaces(ws)
    for s in ws.active(prefix="Ethernet NIC hung"):
        hung = {v for key in ("hang_if", "netdev", "wd_if", "ena_netdev", "lost_if") for v in s.value_set(key)}
        if hung and not hung & used:
            ws.demote(s, f"{', '.join(sorted(hung))} carried none of the workload's traffic: NCCL ran over RDMA "
                         f"and {', '.join(sorted(used)) or 'other interfaces'}")
    for s in ws.active(prefix="IB link down"):
        downed = {m.group("nic_if") for e in s.evidence for m in [_ETHERNET_ONLY_LINK_DOWN.search(e.text)] if m}
        if downed and all(_ETHERNET_ONLY_LINK_DOWN.search(e.text) for e in s.evidence) and not downed & used:
            ws.demote(s, f"{', '.join(sorted(downed))} (an Ethernet-only NIC) carried none of the workload's traffic: "
                         f"NCCL ran over RDMA and {', '.join(sorted(used)) or 'other interfaces'}")


def _rdma_devices_used(ws: Workspace) -> set[str]:
    """The RDMA devices the workload's NCCL used ('NET/IB : Using'), or was told to use (NCCL_IB_HCA, its ports and
    exact-match marks dropped), on any node: the nodes of one workload are set up alike."""
    listed = {name.lstrip("=").split(":")[0] for e in ws.facts_of("nccl_ib_hca")
              for name in str(e.attributes.get("hca", "")).split(",") if name.lstrip("=")}
    return listed | {d for e in ws.facts_of("rdma_in_use") for d in _NET_IB_DEVICE.findall(e.evidence.text)}


# Each device of NCCL's 'NET/IB : Using [0]mlx5_0:1/IB [1]mlx5_1:1/IB ...' list
_NET_IB_DEVICE = re.compile(r"\[\d+\] ?([\w.-]+):\d+/(?:IB|RoCE)")


# The link-down message of NIC drivers with no RDMA of their own (onboard and management ports: igb, e1000e, tg3,
# bnx2, r8169, ixgbe): '<driver> <pci> <if>: ... <if> NIC Link is Down', 'e1000e: <if> NIC Link is Down'.
_ETHERNET_ONLY_LINK_DOWN = re.compile(r"\b(?:igb|e1000e?|tg3|bnx2x?|r8169|ixgbe)\b:?[^\n]{0,80}?(?P<nic_if>[\w.-]+):? NIC Link is Down")


@refiner("HardwareSlowdownOnOneNode", phase=Phase.REFINE, doc="""
The GPUs of one synchronous workload wait for the slowest: when exactly one node reported a GPU whose clocks the
hardware holds down (a power brake, a hardware or thermal slowdown active) and the workload did not complete, that
GPU slowed every step and its `GPU clocks held down by hardware` becomes the root candidate (gpu, that node); when the
reason is the power brake, which the system asserts, its `GPU power brake asserted by the system` (host, that node) comes
first. On several nodes (a room too hot, a facility power event) or in a completed workload it stays context.
""", cases=[
    RuleCase(title="one node's GPU power-braked, the job runs out of time", evidence={
        "b/syslog": ["Jan  1 00:30:07 b health[5101]:             HW Power Brake Slowdown           : Active"],
        "a/applog": ["2025-01-01T00:05:00Z step 100 | loss 2.1 | step_time 2.66s",
                     "2025-01-01T01:59:00Z step 1900 | loss 1.9 | step_time 5.15s"]},
        context={"nodes": ["a", "b"], "scheduler_state": "TIMEOUT", "exit_code": "0:15"},
        expect=Expect(fired=True, sub_domain="host", culprits=["b"], root_symptom="GPU power brake asserted by the system")),
    RuleCase(title="one node's GPU slowed by its own heat", evidence={
        "b/syslog": ["Jan  1 00:30:07 b health[5101]:             HW Thermal Slowdown           : Active"],
        "a/applog": ["2025-01-01T00:05:00Z step 100 | loss 2.1 | step_time 2.66s"]},
        context={"nodes": ["a", "b"], "scheduler_state": "TIMEOUT", "exit_code": "0:15"},
        expect=Expect(fired=True, sub_domain="gpu", culprits=["b"], root_symptom="GPU clocks held down by hardware")),
    RuleCase(title="every node's GPUs slowed by heat", evidence={
        f"{n}/syslog": [f"Jan  1 00:30:07 {n} health[5101]:             HW Thermal Slowdown           : Active"]
        for n in ("a", "b")},
        context={"nodes": ["a", "b"], "scheduler_state": "TIMEOUT", "exit_code": "0:15"},
        expect=Expect(fired=False, sub_domain="scheduler")),
])
def hardware_slowdown_on_one_node(ws: Workspace) -> None:
    promote_on_one_node(ws, "GPU clocks held down by hardware", "has a GPU the hardware slows down: every synchronous "
                                                                "step waits for it")
    promote_on_one_node(ws, "GPU power brake asserted by the system", "has a GPU its system power-brakes: every "
                                                                      "synchronous step waits for it")


@refiner("LostAfterItsOwnWarnings", phase=Phase.REFINE, doc=f"""
A node that warned of its own hardware or runtime - its BMC logged a temperature sensor going high (an IPMI
upper-threshold event) or its power unit going off, its kubelet found its container runtime stalled (PLEG not
healthy), its clock was stepped by minutes (its credentials then expire), its slurmd could not resolve the controller,
its CPUs throttled, or its machine checks logged corrected errors, at least
{WARNINGS_MIN} times for the last two - in the {WARNED_BEFORE_LOSS_S / 60:.0f} minutes before the scheduler declared
that node alone lost, with no orderly shutdown logged on it, went down from what it warned of: a part overheating or
failing (a retimer, a VRM, a CPU, a DIMM) hangs or resets a machine without a kernel message, a runtime that stopped
answering makes the kubelet report the node NotReady, and the declared failure is what that looks like from outside. The node's earliest warning becomes the
root candidate (host) and the scheduler's reports of that node are demoted. When no report of the loss carries a time
of its own (`kubectl get events` prints ages), the workload's recorded end stands for the declaration: the loss came
before it. A warning after the declaration, a declaration naming several nodes, or a kind of warning other nodes gave
in the same minutes too (a room too hot, corrected errors every node logs) is left alone.
""", cases=[
    RuleCase(title="a retimer's sensor warns, then the node stops answering", evidence={
        "b/syslog": ["2025-01-01T00:20:03+00:00 b gpu-monitor[2210]: ipmi: Temperature sensor #0x10 | Upper Non-critical "
                     "going high"],
        "a/scheduler": ["[2025-01-01T00:47:15.000] error: Nodes b not responding, setting DOWN"]},
        context={"scheduler": "slurm", "scheduler_state": "NODE_FAIL", "exit_code": "0:0", "nodes": ["a", "b"]},
        expect=Expect(fired=True, sub_domain="host", culprits=["b"], root_symptom="BMC temperature warning",
                      demoted=["Slurm node failure"])),
    # https://www.suse.com/support/kb/doc/?id=7003695 (mcelog's records of corrected bank-4 errors before a hang)
    RuleCase(title="corrected machine checks, then the node stops answering", evidence={
        "b/syslog": [f"Jan  1 00:{m}:03 b kernel: mce: [Hardware Error]: Machine check events logged" for m in (41, 42, 44)],
        "a/scheduler": ["[2025-01-01T00:59:37.000] error: Nodes b not responding, setting DOWN"]},
        context={"scheduler": "slurm", "scheduler_state": "NODE_FAIL", "exit_code": "0:0", "nodes": ["a", "b"]},
        expect=Expect(fired=True, sub_domain="host", culprits=["b"], root_symptom="Machine check (corrected)",
                      demoted=["Slurm node failure"])),
    RuleCase(title="the BMC logged the power unit off, then the node stopped answering", evidence={
        "b/scheduler": ["  29 | 01/01/2025 | 00:29:46 | Power Unit Pwr Unit Status | Power off/down | Asserted"],
        "a/scheduler": ["[2025-01-01T00:36:12.000] error: Nodes b not responding, setting DOWN"]},
        context={"scheduler": "slurm", "scheduler_state": "NODE_FAIL", "exit_code": "0:0", "nodes": ["a", "b"]},
        expect=Expect(fired=True, sub_domain="host", culprits=["b"], root_symptom="BMC logged a power-down")),
    # https://github.com/chaos/slurm/issues/54 (chronyd stepped one node back 13 hours; slurmctld refused its credentials)
    RuleCase(title="the node's clock stepped back 13 hours, then it stopped answering", evidence={
        "b/syslog": ["Jan  1 00:10:49 b chronyd[1032]: System clock was stepped by -46799.912442 seconds"],
        "a/scheduler": ["[2025-01-01T00:17:02.001] error: Nodes b not responding, setting DOWN"]},
        context={"scheduler": "slurm", "scheduler_state": "NODE_FAIL", "exit_code": "0:0", "nodes": ["a", "b"]},
        expect=Expect(fired=True, sub_domain="host", culprits=["b"], root_symptom="Node's clock stepped")),
    RuleCase(title="slurmd lost the controller's name, then the node stopped answering", evidence={
        "b/syslog": ['Jan  1 00:54:50 b slurmd[31519]: slurmd: error: slurm_set_addr: Unable to resolve "ctl-0"'],
        "a/scheduler": ["[2025-01-01T00:59:17.012] error: Nodes b not responding, setting DOWN"]},
        context={"scheduler": "slurm", "scheduler_state": "NODE_FAIL", "exit_code": "0:0", "nodes": ["a", "b"]},
        expect=Expect(fired=True, sub_domain="configuration", culprits=["b"],
                      root_symptom="slurmd cannot resolve its controller")),
    RuleCase(title="an orderly shutdown, then the power off", evidence={
        "b/syslog": ["Jan  1 00:29:30 b systemd-logind[912]: System is powering down."],
        "b/scheduler": ["  29 | 01/01/2025 | 00:29:46 | Power Unit Pwr Unit Status | Power off/down | Asserted"],
        "a/scheduler": ["[2025-01-01T00:36:12.000] error: Nodes b not responding, setting DOWN"]},
        context={"scheduler": "slurm", "scheduler_state": "NODE_FAIL", "exit_code": "0:0", "nodes": ["a", "b"]},
        expect=Expect(fired=False, culprits=[])),
    # https://github.com/gesiscss/orc/issues/21
    RuleCase(title="PLEG stalls, then the node goes NotReady", evidence={
        "b/syslog": ["Jan  1 00:10:32 b kubelet[1734]: I0101 00:10:32.000000    1734 kubelet.go:1895] skipping pod "
                     "synchronization - [PLEG is not healthy: pleg was last seen active 3m1.597123s ago; threshold is 3m0s]"],
        "a/scheduler": ["2025-01-01T00:11:40Z   Warning   NodeNotReady   node/b   Node b status is now: NodeNotReady"]},
        context={"nodes": ["a", "b"], "scheduler": "kubernetes", "scheduler_state": "Failed", "exit_code": ""},
        expect=Expect(fired=True, sub_domain="host", culprits=["b"],
                      root_symptom="Node's container runtime stopped answering (PLEG)")),
    # kubectl get events prints ages, not times: the loss is known only to have come before the workload's end
    RuleCase(title="PLEG stalls, then an undated NotReady event", evidence={
        "b/syslog": ["Jan  1 00:10:32 b kubelet[1734]: I0101 00:10:32.000000    1734 kubelet.go:1895] skipping pod "
                     "synchronization - [PLEG is not healthy: pleg was last seen active 3m1.597123s ago; threshold is 3m0s]"],
        "a/scheduler": ["Normal NodeNotReady node/b Node b status is now: NodeNotReady"]},
        context={"nodes": ["a", "b"], "scheduler": "kubernetes", "scheduler_state": "Failed", "exit_code": "",
                 "start_time": "2025-01-01T00:00:00Z", "end_time": "2025-01-01T00:40:00Z"},
        expect=Expect(fired=True, sub_domain="host", culprits=["b"],
                      root_symptom="Node's container runtime stopped answering (PLEG)")),
    RuleCase(title="a PLEG stall the node recovered from", evidence={
        "b/syslog": ["Jan  1 00:10:32 b kubelet[1734]: I0101 00:10:32.000000    1734 kubelet.go:1895] skipping pod "
                     "synchronization - [PLEG is not healthy: pleg was last seen active 3m1.597123s ago; threshold is 3m0s]"]},
        context={"nodes": ["a", "b"], "scheduler": "kubernetes", "scheduler_state": "Failed", "exit_code": ""},
        expect=Expect(fired=False, culprits=[])),
    RuleCase(title="every node logs corrected errors", evidence={
        f"{n}/syslog": [f"Jan  1 00:{m}:03 {n} kernel: mce: [Hardware Error]: Machine check events logged"
                        for m in (11, 31, 44)] for n in ("a", "b")} | {
        "a/scheduler": ["[2025-01-01T00:59:37.000] error: Nodes b not responding, setting DOWN"]},
        context={"scheduler": "slurm", "scheduler_state": "NODE_FAIL", "exit_code": "0:0", "nodes": ["a", "b"]},
        expect=Expect(fired=False, sub_domain="scheduler", culprits=["b"])),
    RuleCase(title="the warning came hours before the node was lost", evidence={
        "b/syslog": ["2025-01-01T00:20:03+00:00 b gpu-monitor[2210]: ipmi: Temperature sensor #0x10 | Upper Non-critical "
                     "going high"],
        "a/scheduler": ["[2025-01-01T01:47:15.000] error: Nodes b not responding, setting DOWN"]},
        context={"scheduler": "slurm", "scheduler_state": "NODE_FAIL", "exit_code": "0:0", "nodes": ["a", "b"]},
        expect=Expect(fired=False, sub_domain="scheduler", culprits=["b"])),
    RuleCase(title="every node ran hot: the room, not the node", evidence={
        "a/syslog": ["2025-01-01T00:20:03+00:00 a gpu-monitor[2210]: ipmi: Temperature sensor #0x10 | Upper Non-critical "
                     "going high"],
        "b/syslog": ["2025-01-01T00:21:03+00:00 b gpu-monitor[2210]: ipmi: Temperature sensor #0x10 | Upper Non-critical "
                     "going high"],
        "a/scheduler": ["[2025-01-01T00:47:15.000] error: Nodes b not responding, setting DOWN"]},
        context={"scheduler": "slurm", "scheduler_state": "NODE_FAIL", "exit_code": "0:0", "nodes": ["a", "b"]},
        expect=Expect(fired=False, sub_domain="scheduler", culprits=["b"])),
])
def lost_after_its_own_warnings(ws: Workspace) -> None:
    if (loss := _one_node_lost(ws)) is None:
        return
    node, declared, reports = loss
    since = declared - timedelta(seconds=WARNED_BEFORE_LOSS_S)
    until = declared + timedelta(seconds=ws.params.clock_skew_s)
    if node in {ws.canonical_node(e.node) for e in ws.events if e.symptom in _ON_PURPOSE}:
        return  # shut down on purpose: the warnings did not take it
    warnings: list[WorkSymptom] = []
    for name in _ONE_OFF_WARNINGS + _REPEATED_WARNINGS:
        of_kind = [s for s in ws.select(prefix=name, status="interesting") if s.node and s.first_time
                   and not ws.undated(s) and s.first_time <= until and (s.last_time or s.first_time) >= since]
        if {s.node for s in of_kind} == {node}:  # other nodes warned alike: a room too hot, errors every node logs
            warnings += [s for s in of_kind if name not in _REPEATED_WARNINGS or s.count >= WARNINGS_MIN]
    if not warnings:
        return
    _loss_explained(ws, min(warnings, key=lambda s: s.sort_key()), reports,
                    f"it warned of its own state before the scheduler lost it at {declared:%H:%M:%S}")


def _node_loss(ws: Workspace) -> tuple[set[str], datetime | None, list[WorkSymptom]]:
    """The nodes the active node-failure reports name, when they first declared one (a time of their own; None when
    no report has one), and the reports."""
    reports = [r for name in NODE_FAILURE_REPORTS for r in ws.active(prefix=name)]
    declared = min((r.first_time for r in reports if r.first_time and not ws.undated(r)), default=None)
    return {n for r in reports for n in blamed_nodes(ws, r)}, declared, reports


def _one_node_lost(ws: Workspace) -> tuple[str, datetime, list[WorkSymptom]] | None:
    """The one node the node-failure reports name, when they first declared it (when no report carries a time of its
    own, `kubectl get events`' relative ages, the workload's recorded end: the loss came before it), and the reports;
    None when they name several nodes or none, or no time is known."""
    lost, declared, reports = _node_loss(ws)
    declared = declared or ws.context.end_time
    if len(lost) != 1 or declared is None:
        return None
    return lost.pop(), declared, reports


def _loss_explained(ws: Workspace, cause: WorkSymptom, reports: list[WorkSymptom], why: str) -> None:
    """`cause` (a record of the lost node's own) becomes the root candidate; the reports of the loss are its echo."""
    ws.promote(cause, f"{cause.name} on {cause.node} from {cause.first_time:%H:%M:%S}: {why}")
    for report in reports:
        ws.demote(report, f"{cause.node}'s own record explains the loss ({cause.name})")


@refiner("LostOnACloudHostFault", phase=Phase.REFINE, doc=f"""
When the scheduler lost one node and the cloud provider reported that node's machine failing (an EC2 retirement
notice for degraded hardware, a failed EC2 status check, a GCE host error) within {REBOOT_AFTER_FAILURE_S / 60:.0f}
minutes of it, before or after (a status check fails a few minutes into an outage; a notice may come first), the
provider's report is the root candidate (host) and the scheduler's reports of that node are demoted. When the
scheduler's reports carry no time of their own (`kubectl get events`' relative ages), a provider's report of that node
stamped inside the workload's run stands for 'around it'. A report about another node, or far from the loss, stays
context. The lost node's ENA resets in that window (a missed keep-alive, lost transmit completions) are the same
failure: ENA is the instance's virtual NIC, served by the provider's hardware, so they are demoted with the loss.
""", cases=[
    RuleCase(title="a retirement notice, then the node stops answering", evidence={
        "b/scheduler": ["2025-01-01 00:20:00,544 - [aws-health-forwarder] - WARNING - AWS_EC2_INSTANCE_RETIREMENT_SCHEDULED b "
                        "i-0b7c41e9: EC2 has detected degradation of the underlying hardware hosting your Amazon EC2 "
                        "instance (instance-ID: i-0b7c41e9)"],
        "a/scheduler": ["[2025-01-01T00:38:10.402] error: Nodes b not responding, setting DOWN"]},
        context={"scheduler": "slurm", "scheduler_state": "NODE_FAIL", "exit_code": "0:0", "nodes": ["a", "b"]},
        expect=Expect(fired=True, sub_domain="host", culprits=["b"],
                      root_symptom="Cloud reported the instance's host failing", demoted=["Slurm node failure"])),
    # gcloud compute operations list, then kubectl get events (relative ages): the loss itself is undated
    RuleCase(title="a GCE host error during the run, the node's NotReady event undated", evidence={
        "b/scheduler": ["systemevent-1737624707412-62c5e1a0  compute.instances.hostError  us-east4-a/instances/b  200  "
                        "DONE  2025-01-01T00:31:47.412Z",
                        "6m          Warning   NodeNotReady       pod/train-0-1   Node is not ready"],
        "b/applog": ["2025-01-01T00:00:01Z train-0-1:1:1 [0] NCCL INFO Bootstrap : Using eth0:10.244.3.13<0>"]},
        context={"scheduler": "kubernetes", "scheduler_state": "FAILED", "nodes": ["a", "b"],
                 "start_time": "2025-01-01T00:00:00Z", "end_time": "2025-01-01T00:45:00Z"},
        expect=Expect(fired=True, sub_domain="host", culprits=["b"],
                      root_symptom="Cloud reported the instance's host failing")),
    RuleCase(title="a GCE host error the day before the run, the NotReady event undated", evidence={
        "b/scheduler": ["systemevent-1737624707412-62c5e1a0  compute.instances.hostError  us-east4-a/instances/b  200  "
                        "DONE  2024-12-31T00:31:47.412Z",
                        "6m          Warning   NodeNotReady       pod/train-0-1   Node is not ready"],
        "b/applog": ["2025-01-01T00:00:01Z train-0-1:1:1 [0] NCCL INFO Bootstrap : Using eth0:10.244.3.13<0>"]},
        context={"scheduler": "kubernetes", "scheduler_state": "FAILED", "nodes": ["a", "b"],
                 "start_time": "2025-01-01T00:00:00Z", "end_time": "2025-01-01T00:45:00Z"},
        expect=Expect(fired=False, culprits=["b"])),
    # https://github.com/aws/aws-parallelcluster-node/pull/727 (an instance failing its EC2 health check; ENA resets first)
    RuleCase(title="the lost instance's ENA reset before its status check failed", evidence={
        "b/syslog": ["Jan  1 00:36:44 b kernel: [25304.092713] ena 0000:a0:00.0 eth0: Keep alive watchdog timeout."],
        "b/scheduler": ["2025-01-01T00:39:02Z Instance reachability check failed",
                        "[2025-01-01T00:38:10.402] error: Nodes b not responding, setting DOWN"]},
        context={"scheduler": "slurm", "scheduler_state": "NODE_FAIL", "exit_code": "0:0", "nodes": ["a", "b"]},
        expect=Expect(fired=True, sub_domain="host", culprits=["b"],
                      root_symptom="Cloud reported the instance's host failing", demoted=["Ethernet NIC hung"])),
    RuleCase(title="an Intel NIC's hang on the lost instance is its own fault", evidence={
        "b/syslog": ["Jan  1 00:36:44 b kernel: [25304.092713] ixgbe 0000:a0:00.0 eth0: Detected Tx Unit Hang"],
        "b/scheduler": ["2025-01-01T00:39:02Z Instance reachability check failed",
                        "[2025-01-01T00:38:10.402] error: Nodes b not responding, setting DOWN"]},
        context={"scheduler": "slurm", "scheduler_state": "NODE_FAIL", "exit_code": "0:0", "nodes": ["a", "b"]},
        expect=Expect(fired=True, sub_domain="network", culprits=["b"], root_symptom="Ethernet NIC hung")),
    RuleCase(title="a status check failed on another node", evidence={
        "a/scheduler": ["2025-01-01T00:40:02Z Instance reachability check failed",
                        "[2025-01-01T00:38:10.402] error: Nodes b not responding, setting DOWN"]},
        context={"scheduler": "slurm", "scheduler_state": "NODE_FAIL", "exit_code": "0:0", "nodes": ["a", "b"]},
        expect=Expect(fired=False, sub_domain="scheduler", culprits=["b"])),
])
def lost_on_a_cloud_host_fault(ws: Workspace) -> None:
    lost, declared, reports = _node_loss(ws)
    if len(lost) != 1:
        return
    node = lost.pop()
    near = timedelta(seconds=REBOOT_AFTER_FAILURE_S)
    faults = [s for s in ws.select(prefix="Cloud reported the instance's host failing", status="interesting", node=node)
              if s.first_time and not ws.undated(s) and (
                  abs(s.first_time - declared) <= near if declared is not None else ws.dated_during_run(s))]
    if faults:
        when = f"at {declared:%H:%M:%S}" if declared is not None else "(its report undated) during the workload"
        _loss_explained(ws, min(faults, key=lambda s: s.sort_key()), reports,
                        f"the provider's verdict on the machine the scheduler lost {when}")
        anchor = declared or min(s.first_time for s in faults if s.first_time)
        for hang in ws.active(prefix="Ethernet NIC hung", node=node):
            if hang.value_set("ena_netdev") and hang.first_time and abs(hang.first_time - anchor) <= near:
                ws.demote(hang, "ENA is the instance's virtual NIC: its reset is part of the machine failure the "
                                "provider reported")


@refiner("MceCorrectedIsContext", phase=Phase.CLEAN, doc="""
A machine-check record whose MCi_STATUS words all have bit 61 (UC) clear was corrected by the hardware: it is
context, not a cause. Records with UC set stay as uncorrected machine checks.
""", cases=[
    RuleCase(title="corrected", evidence={"n1/syslog": [
        "Jan  1 00:10:00 n1 kernel: mce: [Hardware Error]: CPU 0: Machine Check: 0 Bank 7: 8c00004000010090"]},
        expect=Expect(fired=True, demoted=["Machine check"])),
    RuleCase(title="uncorrected", evidence={"n1/syslog": [
        "Jan  1 00:10:00 n1 kernel: mce: [Hardware Error]: CPU 0: Machine Check: 0 Bank 7: be00000000800400"]},
        expect=Expect(fired=False, active=["Machine check (uncorrected)"], culprits=["n1"])),
])
def mce_corrected_is_context(ws: Workspace) -> None:
    for s in ws.active(prefix="Machine check (uncorrected)"):
        statuses = s.value_set("status")
        if statuses and not any(int(v, 16) >> MCE_UC_BIT & 1 for v in statuses):
            ws.demote(s, "MCi_STATUS UC bit (61) is clear in every record: corrected by the hardware")


@refiner("AerCorrectedStorm", phase=Phase.CLEAN, doc=f"""
PCIe AER corrected errors are context one at a time. {AER_STORM_MIN} or more events on a node (each event counted
once, from its header or its 'severity=Corrected' detail line, whichever the log kept more of, plus the kernel's
'N Corrected errors received' summaries) are a storm on that link: a root candidate that blames the node.
""", cases=[
    RuleCase(title="storm", evidence={"n1/syslog": [
        f"Jan  1 00:10:{i:02d} n1 kernel: pcieport 0000:00:03.0: AER: Corrected error received: 0000:00:03.0"
        for i in range(12)]}, expect=Expect(fired=True, active=["PCIe AER corrected errors"], culprits=["n1"])),
    RuleCase(title="six events, each a header and a detail line, are six", evidence={"n1/syslog": [
        line for i in range(6) for line in (
            f"Jan  1 00:10:{i:02d} n1 kernel: pcieport 0000:00:03.0: AER: Corrected error message received from "
            "0000:03:00.0",
            f"Jan  1 00:10:{i:02d} n1 kernel: nvidia 0000:03:00.0: PCIe Bus Error: severity=Corrected, type=Physical "
            "Layer, (Receiver ID)")]}, expect=Expect(fired=False, sub_domain="unknown")),
    RuleCase(title="single", evidence={"n1/syslog": [
        "Jan  1 00:10:00 n1 kernel: pcieport 0000:00:03.0: AER: Corrected error received: 0000:00:03.0"]},
        expect=Expect(fired=False, sub_domain="unknown")),
])
def aer_corrected_storm(ws: Workspace) -> None:
    for s in ws.select(prefix="PCIe AER corrected errors", status="interesting"):
        details = sum(e.count for e in ws.events if e.symptom == s.name and e.attributes.get("detail")
                      and ws.canonical_node(e.node) == s.node)
        total = max(s.count - details, details) + sum(int(v) - 1 for v in s.value_set("batch"))
        if total >= AER_STORM_MIN:
            s.attributes["storm_events"] = total
            ws.promote(s, f"{total} corrected AER errors: a storm on this node's PCIe link")


@refiner("StormDoesNotRaise", phase=Phase.REFINE, doc=f"""
A storm of corrected errors (`PCIe AER corrected errors` promoted by AerCorrectedStorm, `{_CE_STORM}`) costs a node
time - link replays, a CPU busy correcting memory - and makes it a straggler: it explains a slowdown, a hang or a
peer's timeout. It does not raise a program's exception: when the program stopped on an error of its own (an
application root candidate: a KeyError, a failed assertion), the storm is demoted to context and the program's error
is what remains.
""", cases=[
    # a corrected-error flood from an NVMe's link power management while the program failed on its own data
    RuleCase(title="an AER flood while the program raises a KeyError", evidence={
        "n1/syslog": [f"Jan  1 00:10:{i:02d} n1 kernel: pcieport 0000:00:1c.0: AER: Corrected error received: "
                      "0000:01:00.0" for i in range(12)],
        "n1/applog": ["2025-01-01T00:10:30Z [rank3]: KeyError: 'input_ids'"]},
        expect=Expect(fired=True, sub_domain="application", culprits=[], demoted=["PCIe AER corrected errors"])),
    RuleCase(title="an AER flood and a watchdog timeout: the straggler", evidence={
        "n1/syslog": [f"Jan  1 00:10:{i:02d} n1 kernel: pcieport 0000:00:1c.0: AER: Corrected error received: "
                      "0000:01:00.0" for i in range(12)],
        "n2/applog": ["2025-01-01T00:40:30Z [rank8]:[E0101 00:40:30.000000000 ProcessGroupNCCL.cpp:1] [Rank 8] "
                      "Watchdog caught collective operation timeout: WorkNCCL(SeqNum=9, OpType=ALLREDUCE, NumelIn=1, "
                      "NumelOut=1, Timeout(ms)=600000) ran for 600010 milliseconds before timing out."]},
        context={"nodes": ["n1", "n2"]},
        expect=Expect(fired=False, sub_domain="host", culprits=["n1"])),
])
def storm_does_not_raise(ws: Workspace) -> None:
    raised = ws.active(role="root", sub_domain=SubDomain.APPLICATION)
    if not raised:
        return
    for storm in [*ws.active(prefix="PCIe AER corrected errors"), *ws.active(prefix=_CE_STORM)]:
        ws.demote(storm, f"corrected errors slow a node; they do not raise the program's own {raised[0].name}")


def _flap_then_rdma_error(at: str) -> dict[str, list[str]]:
    """Rule-case lines: n1's link goes down at 00:10:00 and comes back at 00:10:03; its RDMA send fails at `at`."""
    return {"n1/syslog": ["Jan  1 00:10:00 n1 kernel: mlx5_core 0000:9a:00.0 ens9np0: Link down",
                          "Jan  1 00:10:03 n1 kernel: mlx5_core 0000:9a:00.0 ens9np0: Link up"],
            "n1/applog": [f"2025-01-01T{at}Z n1:1:1 [0] NCCL WARN NET/IB : Got completion from peer 10.0.0.2<45100> "
                          "with status=12 opcode=0 len=0 vendor err 129 (Send)"]}


@refiner("RecoveredLinkFlap", phase=Phase.CLEAN, doc=f"""
An IB port error or link-down on a node that is followed, within {FLAP_RECOVERY_S:.0f} s of its last
occurrence, by the port coming back (port active / Link ACTIVE) is a recovered flap: context, not a cause.
Repeated errors with no recovery stay (a dead link), and so does a link that went down {FLAPPING_DOWNS} times or more
(a flapping link, which node health checks fail however often it comes back), and a flap during which the node's
own RDMA completions failed (the flap broke the job's traffic): before the port came back, or after it within the
transport's retry budget ({IB_RETRY_BUDGET_S:.0f} s from the first error), when work posted during the outage ran
out of retries.
""", cases=[
    RuleCase(title="flap", evidence={"n1/applog": [
        "2025-01-01T00:10:00Z n1:1:1 [0] NCCL WARN NET/IB : mlx5_5:1 Got non-fatal async event: port error(10)",
        "2025-01-01T00:10:03Z n1:1:1 [0] NCCL WARN NET/IB : mlx5_5:1 Got non-fatal async event: port active(9)"]},
        expect=Expect(fired=True, demoted=["IB port error"])),
    RuleCase(title="down", evidence={"n1/applog": [
        "2025-01-01T00:10:00Z n1:1:1 [0] NCCL WARN NET/IB : Got async event : port error"]},
        expect=Expect(fired=False, culprits=["n1"], sub_domain="network")),
    RuleCase(title="the node's own completions failed before the port came back", evidence={"n1/applog": [
        "2025-01-01T00:10:00Z n1:1:1 [0] NCCL WARN NET/IB : Got async event : port error",
        "2025-01-01T00:10:03Z n1:1:1 [0] NCCL WARN NET/IB : Got completion from peer 10.0.0.2<45100> with status=12 opcode=0 len=0 vendor err 129 (Recv)",
        "2025-01-01T00:10:40Z n1:1:1 [0] NCCL WARN NET/IB : Got async event : port active"]},
        expect=Expect(fired=False, culprits=["n1"], sub_domain="network")),
    RuleCase(title="work posted during the outage runs out of retries just after the port came back",
             evidence=_flap_then_rdma_error("00:10:07"), expect=Expect(fired=False, culprits=["n1"], sub_domain="network")),
    RuleCase(title="an RDMA error long after the port came back is not the flap's",
             evidence=_flap_then_rdma_error("00:14:07"), expect=Expect(fired=True, demoted=["IB link down"])),
    RuleCase(title="a link that keeps flapping", evidence={"n1/syslog": [
        line for sec in range(0, 50, 10) for line in (
            f"Jan  1 00:10:{sec:02d} n1 systemd-networkd[5398]: ib6: lost carrier",
            f"Jan  1 00:10:{sec + 2:02d} n1 systemd-networkd[5398]: ib6: Gained carrier")]},
        expect=Expect(fired=False, culprits=["n1"], sub_domain="network")),
])
def recovered_link_flap(ws: Workspace) -> None:
    window = timedelta(seconds=FLAP_RECOVERY_S)
    for down in [s for name in LINK_DOWN_EVENTS for s in ws.active(prefix=name)]:
        last = down.last_time or down.first_time
        if last is None or down.count >= FLAPPING_DOWNS:
            continue
        for up in [s for name in _LINK_UP_EVENTS for s in ws.select(node=down.node, prefix=name)]:
            up_last = up.last_time or up.first_time
            if up_last is not None and last <= up_last <= last + window and not _traffic_failed(ws, down, up_last):
                ws.demote(down, f"the port came back ({up.name}) {(up_last - last).total_seconds():.0f} s after "
                          "its last error: a recovered flap")
                break


def _traffic_failed(ws: Workspace, down: WorkSymptom, back: datetime) -> bool:
    """The node's own RDMA completions failed because its port was down: between the first error and its return, or
    later within the transport's retry budget, when work posted during the outage exhausts its retries."""
    began = down.first_time
    if began is None:
        return False
    until = max(back, began + timedelta(seconds=IB_RETRY_BUDGET_S))
    own = any(s.definition.blame == "peer" and s.first_time is not None and began <= s.first_time <= until
              for s in ws.active(role="root", node=down.node, sub_domain=SubDomain.NETWORK))
    # its peers' completions failing in the same window: the traffic through this port (an NCCL WARN line's time is
    # inherited, so the last dated occurrence is the one read)
    peers = any(s.definition.blame == "peer" and s.node != down.node and s.last_time is not None
                and began <= s.last_time <= until
                for s in ws.active(role="root", sub_domain=SubDomain.NETWORK))
    return own or peers




STUCK_NETDEV_WAITS = 3  # netdev_wait_allrefs prints every 10 s: three lines are half a minute without release


@refiner("NetdeviceRefcountStuck", phase=Phase.CLEAN, doc=f"""
The kernel repeats 'unregister_netdevice: waiting for <dev> to become free' every 10 seconds while a reference to the
device remains. Fewer than {STUCK_NETDEV_WAITS} such lines are a reference released late, not a leak: demoted.
""", cases=[
    RuleCase(title="a leaked reference", evidence={"b/syslog": [
        f"2025-01-01T00:10:{sec:02d}+00:00 b kernel: unregister_netdevice: waiting for eth0 to become free. Usage "
        "count = 2" for sec in (0, 10, 20, 30)]},
        context={"nodes": ["a", "b"]}, expect=Expect(fired=False, sub_domain="host", culprits=["b"])),
    RuleCase(title="released after one wait", evidence={"b/syslog": [
        "2025-01-01T00:10:00+00:00 b kernel: unregister_netdevice: waiting for eth0 to become free. Usage count = 2"]},
        context={"nodes": ["a", "b"]}, expect=Expect(fired=True, culprits=[],
                                                     demoted=["Network device stuck in unregister"])),
])
def netdevice_refcount_stuck(ws: Workspace) -> None:
    for s in ws.active(prefix="Network device stuck in unregister"):
        if s.count < STUCK_NETDEV_WAITS:
            ws.demote(s, f"{s.count} wait(s) only: the reference was released")


@refiner("HungInNvidiaDriver", phase=Phase.CLEAN, doc=f"""
A hung task (blocked for more than N seconds) whose kernel stack, printed right after it (within {HUNG_STACK_S:.0f}
s), runs through an NVIDIA module is stuck in the GPU driver (driver frames logged earlier too, such as a driver
WARNING's, do not hide it): the driver frames become a GPU root candidate on that
node. Driver frames without a hung task (a warning's stack) stay context, and so does a hung task elsewhere (I/O).
""", cases=[
    RuleCase(title="nvidia-container-cli stuck in nvidia_uvm", evidence={"n2/syslog": [
        "Jan  1 00:22:11 n2 kernel: [2685847.000000] INFO: task nvc:[driver]:5403 blocked for more than 120 seconds.",
        "Jan  1 00:22:11 n2 kernel: [2685847.000500]  [<ffffffffa09c376e>] uvm_gpu_retain_by_uuid+0x1e/0x40 [nvidia_uvm]"]},
        expect=Expect(fired=True, sub_domain="gpu", culprits=["n2"], root_symptom="Task hung in the NVIDIA driver")),
    RuleCase(title="a driver WARNING's frames, then a task hung in nvidia_open", evidence={"n2/syslog": [
        "Jan  1 00:17:18 n2 kernel: [508548.976134] RIP: 0010:nvidia_dev_put_uuid+0xa1/0xc0 [nvidia]",
        "Jan  1 00:22:05 n2 kernel: [508835.664134] INFO: task python:2231187 blocked for more than 122 seconds.",
        "Jan  1 00:22:05 n2 kernel: [508835.664134]  nvidia_open+0x3c4/0x560 [nvidia]"]},
        expect=Expect(fired=True, sub_domain="gpu", culprits=["n2"], root_symptom="Task hung in the NVIDIA driver")),
    RuleCase(title="a task hung on NFS", evidence={"n2/syslog": [
        "Jan  1 00:22:11 n2 kernel: [2685847.000000] INFO: task python3:5403 blocked for more than 120 seconds.",
        "Jan  1 00:22:11 n2 kernel: [2685847.000500]  [<ffffffffa09c376e>] nfs_wait_bit_killable+0x1e/0x40 [nfs]"]},
        expect=Expect(fired=False, sub_domain="storage", culprits=[])),
])
def hung_in_nvidia_driver(ws: Workspace) -> None:
    _promote_frames_of_hung_tasks(ws, "Task hung in the NVIDIA driver", "NVIDIA driver")


@refiner("HungInAmdgpuDriver", phase=Phase.CLEAN, doc=f"""
The AMD counterpart of HungInNvidiaDriver: a hung task that is a ROCm tool talking only to the driver (rocminfo,
rocm-smi, amd-smi), or whose kernel stack printed right after it (within {HUNG_STACK_S:.0f} s) runs through the amdgpu
module, is stuck in the GPU driver: it becomes a GPU root candidate on that node. amdgpu frames without a hung task (a
warning's stack) stay context.
""", cases=[
    # https://github.com/pytorch/pytorch/issues/156327 (rocminfo hanging on MI250 nodes)
    RuleCase(title="rocminfo hung on one node", evidence={"n2/syslog": [
        "Jan  1 00:22:11 n2 kernel: [912733.402118] INFO: task rocminfo:551203 blocked for more than 241 seconds."]},
        context={"nodes": ["n1", "n2"]},
        expect=Expect(fired=True, sub_domain="gpu", culprits=["n2"], root_symptom="Task hung in the AMD GPU driver")),
    RuleCase(title="a training process hung in the KFD", evidence={"n2/syslog": [
        "Jan  1 00:22:05 n2 kernel: [508835.664134] INFO: task python:2231187 blocked for more than 122 seconds.",
        "Jan  1 00:22:05 n2 kernel: [508835.664190]  kfd_ioctl_free_memory_of_gpu+0x7e/0x120 [amdgpu]"]},
        context={"nodes": ["n1", "n2"]},
        expect=Expect(fired=True, sub_domain="gpu", culprits=["n2"], root_symptom="Task hung in the AMD GPU driver")),
    RuleCase(title="amdgpu frames of a warning, no hung task", evidence={"n2/syslog": [
        "Jan  1 00:22:05 n2 kernel: [508835.664190]  amdgpu_device_rreg+0x2e/0x120 [amdgpu]"]},
        context={"nodes": ["n1", "n2"]}, expect=Expect(fired=False, culprits=[])),
])
def hung_in_amdgpu_driver(ws: Workspace) -> None:
    _promote_frames_of_hung_tasks(ws, "Task hung in the AMD GPU driver", "AMD GPU driver")


# PyTorch's CUDA out-of-memory message lists the other processes holding the GPU's memory ('Process 1117159 has 127.15
# GiB memory in use'); the kernel's hung-task report names the blocked task by name and pid ('task python3:1117159').
_MEMORY_HOLDER = re.compile(r"Process (\d+) has [\d.]+ [KMGT]iB memory in use")
_HUNG_PID = re.compile(r"INFO: task \S+?:(\d+) blocked for more than")


@refiner("OomHeldByAHungProcess", phase=Phase.REFINE, doc="""
A CUDA out-of-memory error that names another process holding the GPU's memory ('Process N has X GiB memory in use'),
where that process is one the same node's kernel reported hung (blocked for minutes in the kernel), was not the job's
own use: the memory belongs to a process that cannot exit (a rank of an earlier run stuck in the driver). The
out-of-memory error is demoted; the hung process - and what it is stuck in - is the cause.
""", cases=[
    # https://github.com/aistabci/abci-docs/blob/main/en/docs/known-issues.md (processes stuck in D state keep their GPU
    # memory), with PyTorch's message
    RuleCase(title="the memory is held by a process hung in the NVIDIA driver", evidence={
        "n2/syslog": ["Jan  1 00:57:40 n2 kernel: [1180480.983185] INFO: task python3:1117159 blocked for more than 122 "
                      "seconds.",
                      "Jan  1 00:57:40 n2 kernel: [1180480.983190]  os_acquire_mutex+0x30/0x50 [nvidia]"],
        "n2/applog": ["2025-01-01T01:02:00Z torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 112.00 MiB. GPU 0 "
                      "has a total capacity of 139.81 GiB of which 24.12 MiB is free. Process 1117159 has 127.15 GiB "
                      "memory in use. Including non-PyTorch memory, this process has 12.62 GiB memory in use."]},
        context={"nodes": ["n1", "n2"]},
        expect=Expect(fired=True, sub_domain="gpu", culprits=["n2"], demoted=["CUDA out of memory"])),
    RuleCase(title="the memory is held by a sibling rank that is running", evidence={
        "n2/syslog": ["Jan  1 00:57:40 n2 kernel: [1180480.983185] INFO: task python3:4242 blocked for more than 122 "
                      "seconds."],
        "n2/applog": ["2025-01-01T01:02:00Z torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 112.00 MiB. GPU 0 "
                      "has a total capacity of 79.15 GiB of which 24.12 MiB is free. Process 3131 has 40.00 GiB memory in "
                      "use. Including non-PyTorch memory, this process has 39.00 GiB memory in use."]},
        context={"nodes": ["n1", "n2"]}, expect=Expect(fired=False, sub_domain="gpu_oom")),
])
def oom_held_by_a_hung_process(ws: Workspace) -> None:
    for oom in ws.active(prefix="CUDA out of memory"):
        holders = {m.group(1) for e in oom.evidence for m in _MEMORY_HOLDER.finditer(e.text)}
        hung = {m.group(1) for s in ws.select(node=oom.node, prefix="Hung task") for e in s.evidence
                for m in [_HUNG_PID.search(e.text)] if m}
        if holders & hung:
            ws.demote(oom, f"the GPU memory is held by process {sorted(holders & hung)[0]}, which the node's kernel "
                           "reported hung")


@refiner("HungInFilesystemClient", phase=Phase.CLEAN, doc=f"""
A hung task whose kernel stack, printed right after it (within {HUNG_STACK_S:.0f} s), runs through a shared
filesystem's client (Storage Scale's mmfs26/mmfslinux, Lustre's llite/ptlrpc/obdclass, NFS and its sunrpc, BeeGFS,
CephFS, a FUSE filesystem such as an object-store mount) waited minutes for that filesystem: the frames become a
shared-storage root candidate, no node blamed (the servers serve every node; a node whose own client failed says so in
its client's lines). The same frames without a hung task stay context.
""", cases=[
    # https://github.com/huggingface/m4-logs (tr_141: rank 0's write() never returned while GPFS was failing)
    RuleCase(title="rank 0's write blocked in Storage Scale", evidence={"n2/syslog": [
        "Jan  1 00:22:11 n2 kernel: [210745.222569] INFO: task python:280058 blocked for more than 120 seconds.",
        "Jan  1 00:22:11 n2 kernel: [210745.222719]  cxiWaitEventWait+0x208/0x330 [mmfslinux]",
        "Jan  1 00:22:11 n2 kernel: [210745.222800]  _ZN13KernelMailbox21sendToDaemonWithReplyEv+0x250/0x3e0 [mmfs26]"]},
        expect=Expect(fired=True, sub_domain="storage", culprits=[],
                      root_symptom="Task hung in a shared filesystem client")),
    RuleCase(title="client frames in a warning, no task hung", evidence={"n2/syslog": [
        "Jan  1 00:22:11 n2 kernel: [2685847.000500]  nfs_wait_bit_killable+0x1e/0x40 [nfs]"]},
        expect=Expect(fired=False, sub_domain="unknown", culprits=[])),
])
def hung_in_filesystem_client(ws: Workspace) -> None:
    _promote_frames_of_hung_tasks(ws, "Task hung in a shared filesystem client", "shared filesystem client")


def _promote_frames_of_hung_tasks(ws: Workspace, frames_symptom: str, where: str) -> None:
    """Promote a node's kernel-stack frames of `frames_symptom` printed with a hung-task report of that node."""
    window = timedelta(seconds=HUNG_STACK_S)
    for frames in ws.select(prefix=frames_symptom, status="interesting"):
        first, last = frames.first_time, frames.last_time or frames.first_time
        hung = [h for h in ws.select(node=frames.node, prefix="Hung task") if first is not None and last is not None
                and h.first_time is not None and first <= (h.last_time or h.first_time) + window and last >= h.first_time]
        if hung:
            ws.promote(frames, f"{hung[0].name} on this node with {where} frames on its stack")


# How long after a node's kernel stopped it its peers may still report losing it: RDMA retries (NCCL_IB_TIMEOUT and
# retry count: tens of seconds to minutes) and TCP timeouts run out within this.
DEAD_NODE_ECHO_S = 600.0
_NODE_STOPPERS = ("Kernel panic or oops", "Machine check (uncorrected)", "CPU hard lockup", "BMC reported a hardware fault")
# Records a node writes when it ends the workload's processes on it (the kernel's OOM killer, the kubelet evicting
# for a full disk, for node memory or for a pod over its ephemeral-storage limit): the node lives on, but its ranks are
# gone, and their peers' RDMA operations to them fail.
_WORKLOAD_KILLERS = ("Host OOM kill", "Node disk pressure", "Evicted: node out of memory", "Evicted: node disk full",
                     "Evicted: pod storage limit exceeded")
# A launcher's report that the first of its workers to fail died of SIGKILL (torchelastic's 'failed (exitcode: -9)'
# and 'Signal 9 (SIGKILL) received by PID', DeepSpeed's 'exits with return code = -9'): something outside the program
# killed it, and its peers lost it. The launcher polls its workers (torchrun's --monitor-interval, 5 s by default before
# PyTorch 2.3), so the death came up to that long before the report.
_KILLED = "Worker killed by signal"
_LAUNCHER_SIGKILL = ("signal", "signal_name", "ds_signal")
LAUNCHER_POLL_S = 5.0


def _stopped_at(s: WorkSymptom) -> bool:
    """A record of what stopped its node: a kernel panic (not a survivable oops), a fatal machine check, a hard lockup,
    a failed power supply, CPU or memory its BMC logged."""
    return s.name != "Kernel panic or oops" or bool(s.value_set("reason"))


# A kernel line's uptime stamp ('kernel: [    2.188447]'): how long after boot the kernel logged it.
_KERNEL_UPTIME = re.compile(r"kernel: \[\s*(\d+)\.\d+\]")
BOOT_LOG_S = 300.0


# Records a node logs as it starts that describe what happened before: the machine-check banks, and the BMC's
# event log that the IPMI event daemon reads when it starts.
_READ_AT_BOOT = ("Machine check (uncorrected)", "BMC reported a hardware fault")


def _left_from_previous_boot(ws: Workspace, s: WorkSymptom) -> bool:
    """A machine check or BMC record logged in the first minutes after its node booted (the kernel's uptime stamp, or
    the node's boot banner shortly before it): Linux reads the banks at start-up and logs the machine checks a reset
    left in them, mcelog decodes them as it starts, and the IPMI event daemon logs the events the BMC recorded, so the
    fault happened before that boot, not when it was logged."""
    if s.name not in _READ_AT_BOOT or s.first_time is None:
        return False
    uptimes = [m for m in (_KERNEL_UPTIME.search(e.text) for e in s.evidence) if m]
    if uptimes:
        return float(uptimes[0].group(1)) < BOOT_LOG_S
    after_boot = timedelta(seconds=BOOT_LOG_S)
    return any(b.node == s.node and b.time is not None and b.time <= s.first_time <= b.time + after_boot
               for b in ws.facts_of("boot"))


@refiner("DeadNodeExplainsPeerErrors", phase=Phase.REFINE_LATE, after=("LostNodeExplainsPeerErrors",), doc=f"""
A node whose kernel panicked, took a fatal machine check or a hard lockup, or whose BMC logged a failed power supply,
CPU or memory, stops answering at once: its peers' network
errors that begin from then on (within the clock-skew tolerance before, up to {DEAD_NODE_ECHO_S / 60:.0f} minutes after,
or with no time of their own) and name that node or no node are what losing it looks like, not a fabric fault. They are demoted, and the node's
own kernel record stays the root candidate. An error naming another node, or one from before, is kept. A machine check
the kernel logged in the first {BOOT_LOG_S / 60:.0f} minutes after a boot was left in the banks by the reset it caused,
and a BMC fault the IPMI event daemon logged then was recorded while the node was down: the node stopped before that
boot, so its peers' errors of the {DEAD_NODE_ECHO_S / 60:.0f} minutes before it are the echo, and so is the scheduler's
declared failure of that node in those minutes (it stopped answering because it was reset).
A node that killed the workload's processes on it (its kernel's OOM killer, its kubelet evicting them for a full
disk) is lost to its peers the same way from that moment, and their errors that begin from then on are its echo too;
so is a node whose launcher reported the first of its workers to fail killed by SIGKILL (torchelastic's exitcode -9,
DeepSpeed's return code -9), from {LAUNCHER_POLL_S:.0f} s before that report (the launcher's polling interval): a
network fault does not end a rank with SIGKILL.
""", cases=[
    RuleCase(title="peers lose a node that panicked", evidence={
        "b/syslog": ["Jan  1 00:10:00 b kernel: Kernel panic - not syncing: Fatal machine check on current CPU"],
        "a/applog": ["2025-01-01T00:10:32Z a:1:1 [0] NCCL WARN NET/IB : Got completion from peer 10.0.0.2<1> with "
                     "status=12 opcode=0 len=0 vendor err 129 (Send)"]},
        context={"nodes": ["a", "b"]}, expect=Expect(fired=True, sub_domain="host", culprits=["b"],
                                                     demoted=["IB Error-12"])),
    RuleCase(title="the fabric failed before the panic", evidence={
        "b/syslog": ["Jan  1 00:20:00 b kernel: Kernel panic - not syncing: Fatal machine check on current CPU"],
        "a/applog": ["2025-01-01T00:10:32Z a:1:1 [0] NCCL WARN NET/IB : Got completion from peer 10.0.0.2<1> with "
                     "status=12 opcode=0 len=0 vendor err 129 (Send)"]},
        context={"nodes": ["a", "b"]}, expect=Expect(fired=False)),
    # https://github.com/hiyouga/LLaMA-Factory/issues/6608 (torchelastic's report of rank 0 killed by SIGKILL)
    RuleCase(title="peers lose a rank its launcher then reports killed by SIGKILL", evidence={
        "b/applog": ["E0101 00:10:02.602000 92977 site-packages/torch/distributed/elastic/multiprocessing/api.py:869] "
                     "failed (exitcode: -9) local_rank: 0 (pid: 93043) of binary: /usr/bin/python"],
        "a/applog": ["2025-01-01T00:10:00Z a:1:1 [0] NCCL WARN NET/IB : Got completion from peer 10.0.0.2<1> with "
                     "status=12 opcode=0 len=0 vendor err 129 (Recv)"]},
        context={"nodes": ["a", "b"], "start_time": "2025-01-01T00:00:00Z", "end_time": "2025-01-01T00:15:00Z"},
        expect=Expect(fired=True, sub_domain="unknown", culprits=[], demoted=["IB Error-12"])),
    RuleCase(title="a rank killed by SIGKILL minutes after its peers' network errors", evidence={
        "b/applog": ["E0101 00:13:02.602000 92977 site-packages/torch/distributed/elastic/multiprocessing/api.py:869] "
                     "failed (exitcode: -9) local_rank: 0 (pid: 93043) of binary: /usr/bin/python"],
        "a/applog": ["2025-01-01T00:10:00Z a:1:1 [0] NCCL WARN NET/IB : Got completion from peer 10.0.0.2<1> with "
                     "status=12 opcode=0 len=0 vendor err 129 (Recv)"]},
        context={"nodes": ["a", "b"], "start_time": "2025-01-01T00:00:00Z", "end_time": "2025-01-01T00:15:00Z"},
        expect=Expect(fired=False, sub_domain="network")),
    RuleCase(title="peers lose a node whose power supplies failed", evidence={
        "b/syslog": ["Jan  1 00:10:00 b ipmievd[2113]: Power Supply sensor PS1 Status Failure detected Asserted"],
        "a/applog": ["a:1:1 [0] NCCL WARN NET/IB : Got completion from peer 10.0.0.2<1> with status=12 opcode=0 len=0 "
                     "vendor err 129 (Send)"]},
        context={"nodes": ["a", "b"]}, expect=Expect(fired=True, sub_domain="host", culprits=["b"],
                                                     demoted=["IB Error-12"])),
    # ipmitool sel elist's columns (id | date | time | sensor | event | direction), printed by a health check after the
    # node came back: the record's own time places the failure (engine/reader.py, recorded_date/recorded_time)
    RuleCase(title="peers lose a node whose power supply failure a health check printed later", evidence={
        "b/syslog": ["Jan  1 00:22:31 b node-health[2231]: SEL:  1f2 | 01/01/2025 | 00:10:00 | Power Supply PS1 Status "
                     "| Failure detected | Asserted"],
        "a/applog": ["2025-01-01T00:10:20Z a:1:1 [0] NCCL WARN NET/IB : Got completion from peer 10.0.0.2<1> with "
                     "status=12 opcode=0 len=0 vendor err 129 (Send)"]},
        context={"nodes": ["a", "b"], "start_time": "2025-01-01T00:00:00Z", "end_time": "2025-01-01T00:30:00Z"},
        expect=Expect(fired=True, sub_domain="host", culprits=["b"], demoted=["IB Error-12"])),
    # the reset left the machine check in the banks; the rebooted kernel logged it (Linux's MCE start-up poll)
    RuleCase(title="peers lost a node whose machine check was logged after its reboot", evidence={
        "b/syslog": ["2025-01-01T00:16:39+00:00 b kernel: [    2.188447] mce: [Hardware Error]: CPU 0: Machine Check: "
                     "0 Bank 8: b200000000200400"],
        "a/applog": ["2025-01-01T00:13:34Z a:1:1 [0] NCCL WARN NET/IB : Got completion from peer 10.0.0.2<1> with "
                     "status=12 opcode=0 len=0 vendor err 129 (Send)"]},
        context={"nodes": ["a", "b"]}, expect=Expect(fired=True, sub_domain="host", culprits=["b"],
                                                     demoted=["IB Error-12"])),
    RuleCase(title="mcelog decodes the reset's machine check after the boot", evidence={
        "b/syslog": ["2025-01-01T00:16:18+00:00 b kernel: [    0.000100] Linux version 5.15.0-119-generic (buildd@x) #129",
                     "2025-01-01T00:16:42+00:00 b mcelog[1432]: Processor context corrupt"],
        "a/scheduler": ["[2025-01-01T00:13:40.001] error: Nodes b not responding, setting DOWN",
                        "[2025-01-01T00:13:40.002] Killing JobId=1 on failed node b"]},
        context={"nodes": ["a", "b"]},
        expect=Expect(fired=True, sub_domain="host", culprits=["b"], demoted=["Slurm node failure"])),
    RuleCase(title="a machine check logged long after boot does not reach back", evidence={
        "b/syslog": ["2025-01-01T00:16:39+00:00 b kernel: [976841.188447] mce: [Hardware Error]: CPU 0: Machine Check: "
                     "0 Bank 8: b200000000200400"],
        "a/applog": ["2025-01-01T00:13:34Z a:1:1 [0] NCCL WARN NET/IB : Got completion from peer 10.0.0.2<1> with "
                     "status=12 opcode=0 len=0 vendor err 129 (Send)"]},
        context={"nodes": ["a", "b"]}, expect=Expect(fired=False)),
    RuleCase(title="the scheduler declared the node lost before its rebooted kernel logged the machine check",
             evidence={
        "b/syslog": ["2025-01-01T00:16:39+00:00 b kernel: [    2.188447] mce: [Hardware Error]: CPU 0: Machine Check: "
                     "0 Bank 8: b200000000200400"],
        "a/scheduler": ["2025-01-01T00:13:45Z   Warning   NodeNotReady   node/b   Node b status is now: NodeNotReady"]},
        context={"nodes": ["a", "b"], "scheduler": "kubernetes", "scheduler_state": "Failed", "exit_code": ""},
        expect=Expect(fired=True, sub_domain="host", culprits=["b"], demoted=["Kubernetes node failure"])),
    RuleCase(title="the OOM killer ends a node's ranks; its peers' RDMA operations to them fail", evidence={
        "b/syslog": ["Jan  1 00:10:00 b kernel: Out of memory: Killed process 4242 (python) total-vm:9000000kB, "
                     "anon-rss:8000000kB, file-rss:0kB, shmem-rss:0kB, UID:0 pgtables:20000kB oom_score_adj:0"],
        "a/applog": ["2025-01-01T00:10:02Z a:1:1 [0] NCCL WARN NET/IB : Got completion from peer 10.0.0.9<1> with "
                     "status=12 opcode=0 len=0 vendor err 129 (Send)"]},
        context={"nodes": ["a", "b"]}, expect=Expect(fired=True, sub_domain="host_oom", demoted=["IB Error-12"])),
    # the kubelet's eviction message for a pod over its ephemeral-storage limit (pkg/kubelet/eviction/helpers.go)
    RuleCase(title="the kubelet evicts a pod over its storage limit; its peer's RDMA operations to it fail", evidence={
        "b/scheduler": ["2025-01-01T00:10:00Z   Warning  Evicted  1m  kubelet  Pod ephemeral local storage usage exceeds "
                        "the total limit of containers 20Gi."],
        "a/applog": ["2025-01-01T00:10:40Z a:1:1 [0] NCCL WARN NET/IB : Got completion from peer 10.0.0.2<56211> with "
                     "status=12 opcode=0 len=0 vendor err 129 (Send)"]},
        context={"nodes": ["a", "b"]}, expect=Expect(fired=True, sub_domain="storage", demoted=["IB Error-12"])),
    RuleCase(title="RDMA errors that began before the OOM kill are not its echo", evidence={
        "b/syslog": ["Jan  1 00:10:00 b kernel: Out of memory: Killed process 4242 (python) total-vm:9000000kB, "
                     "anon-rss:8000000kB, file-rss:0kB, shmem-rss:0kB, UID:0 pgtables:20000kB oom_score_adj:0"],
        "a/applog": ["2025-01-01T00:04:02Z a:1:1 [0] NCCL WARN NET/IB : Got completion from peer 10.0.0.9<1> with "
                     "status=12 opcode=0 len=0 vendor err 129 (Send)"]},
        context={"nodes": ["a", "b"]}, expect=Expect(fired=False, sub_domain="network")),
])
def dead_node_explains_peer_errors(ws: Workspace) -> None:
    skew, echo = timedelta(seconds=ws.params.clock_skew_s), timedelta(seconds=DEAD_NODE_ECHO_S)
    stopped: dict[str, datetime] = {}  # the kernel record of each node's stop (its earliest)
    echoes: dict[str, tuple[datetime, datetime]] = {}  # when its peers' errors may begin
    how: dict[str, str] = {}
    for s in ws.active(role="root", sub_domain=SubDomain.HOST):
        if s.node and s.first_time and not ws.undated(s) and s.name.startswith(_NODE_STOPPERS) and _stopped_at(s):
            if s.node in stopped and stopped[s.node] <= s.first_time:
                continue
            stopped[s.node] = s.first_time
            if _left_from_previous_boot(ws, s):
                echoes[s.node] = (s.first_time - echo, s.first_time + skew)
                how[s.node] = f"the {s.name} it logged after rebooting ({s.first_time:%H:%M:%S}) stopped it"
            else:
                echoes[s.node] = (s.first_time - skew, s.first_time + echo)
                how[s.node] = f"{s.name} stopped it at {s.first_time:%H:%M:%S}"
    gone = dict(echoes)  # the nodes whose peers lost them: stopped by their kernel, or their ranks killed
    for s in ws.active(role="root"):
        if s.node and s.node not in gone and s.first_time and not ws.undated(s) and s.name in _WORKLOAD_KILLERS:
            gone[s.node] = (s.first_time - skew, s.first_time + echo)
            how[s.node] = f"{s.name} ended the workload's processes on it at {s.first_time:%H:%M:%S}"
    for s in ws.active(prefix=_KILLED):
        if s.node and s.node not in gone and s.first_time and not ws.undated(s) and _killed_by_sigkill(s):
            gone[s.node] = (s.first_time - timedelta(seconds=LAUNCHER_POLL_S) - skew, s.first_time + echo)
            how[s.node] = f"its launcher reported a worker killed by SIGKILL at {s.first_time:%H:%M:%S}"
    for s in ws.active(role="root", sub_domain=SubDomain.NETWORK):
        named = {n for n in (ws.canonical_node(p) for p in s.value_set("blamed_node")) if n}
        if s.node in stopped:
            continue
        # an error without a time of its own cannot be placed before the node stopped: the death explains it too; one
        # that only inherited the time of a line above it came no earlier than that
        began = s.first_time
        dead = [n for n, (lo, hi) in sorted(gone.items()) if n != s.node and named <= {n}
                and ((began is not None and lo <= began <= hi) or (ws.undated(s) and n in stopped))]
        if dead:
            ws.demote(s, f"{dead[0]}: {how[dead[0]]}; its peers lost it")
    for report in [r for name in SCHEDULER_NODE_FAILURES for r in ws.active(prefix=name)]:
        lost = set(blamed_nodes(ws, report))
        declared = report.first_time
        if lost and all(n in echoes and declared and echoes[n][0] <= declared <= echoes[n][1] for n in lost):
            first = sorted(lost)[0]
            ws.demote(report, f"{first}: {how[first]}; the scheduler declared it lost")


def _killed_by_sigkill(s: WorkSymptom) -> bool:
    """A launcher's report of a worker that died of SIGKILL."""
    return any("9" in s.value_set(group) for group in _LAUNCHER_SIGKILL)


_STEP_LIMIT = "Step reached its memory limit"
# How the workload's own reports name a SIGKILL beyond the launchers' (_LAUNCHER_SIGKILL): Open MPI's 'exited on signal
# 9', Composer's 'exit code -9', PyTorch's DataLoader 'is killed by signal: Killed.'
_OTHER_SIGKILL = (("mpi_signal", "9"), ("launcher_signal", "9"), ("loader_signal", "Killed"))


@refiner("KilledAtTheStepMemoryLimit", phase=Phase.REFINE, doc=f"""
slurmstepd notes a step whose memory cgroup reached its limit at some point (`{_STEP_LIMIT}`); page cache counts
toward the limit and is reclaimed, so a job can complete with the note. When a process of a workload that did not
complete was killed by SIGKILL (a launcher's -9, Open MPI's 'exited on signal 9', a DataLoader worker 'killed by
signal: Killed'), the cgroup's OOM handler killed it: the note becomes a host_oom root candidate.
""", cases=[
    # https://github.com/DAIC-tud/docs (content/en/docs/support/FAQs/scheduler.md: a step over its --mem)
    RuleCase(title="a DataLoader worker killed as the step reached its limit", evidence={
        "n2/applog": ["2025-01-01T00:10:00Z 5: RuntimeError: DataLoader worker (pid 20417) is killed by signal: Killed."],
        "n1/applog": ["2025-01-01T00:10:05Z slurmstepd: error: Exceeded step memory limit at some point."]},
        context={"nodes": ["n1", "n2"], "scheduler_state": "FAILED"},
        expect=Expect(fired=True, sub_domain="host_oom", culprits=[], terminal_state="OUT_OF_MEMORY")),
    RuleCase(title="the note in a completed job", evidence={
        "n1/applog": ["2025-01-01T00:10:05Z slurmstepd: error: Exceeded step memory limit at some point."]},
        context={"nodes": ["n1", "n2"], "scheduler_state": "COMPLETED", "exit_code": "0:0"},
        expect=Expect(fired=False, sub_domain="none")),
    RuleCase(title="the note in a failed job with nothing killed", evidence={
        "n1/applog": ["2025-01-01T00:09:00Z [rank0]: ValueError: bad shape",
                      "2025-01-01T00:10:05Z slurmstepd: error: Exceeded step memory limit at some point."]},
        context={"nodes": ["n1", "n2"], "scheduler_state": "FAILED"},
        expect=Expect(fired=False, sub_domain="application")),
])
def killed_at_the_step_memory_limit(ws: Workspace) -> None:
    if recorded_state(ws.context) == TerminalState.COMPLETED:
        return
    limits = ws.select(prefix=_STEP_LIMIT, status="interesting")
    killed = next((s for s in ws.active(prefix=_KILLED) if _killed_by_sigkill(s)
                   or any(value in s.value_set(group) for group, value in _OTHER_SIGKILL)), None)
    if limits and killed is not None:
        for limit in limits:
            ws.promote(limit, f"{killed.node or 'a node'}'s process was killed by SIGKILL: the step's memory cgroup "
                              "killed it at its limit")


# The records of a node shut down on purpose.
_ON_PURPOSE = ("Orderly OS shutdown", "Graceful node shutdown")


@filter_rule("NodeResetItself", phase=Phase.FILTER, after=("SlurmNodeListExpanded",), doc=f"""
A node the scheduler declared failed (Slurm not responding / DOWN, Kubernetes NotReady, Ray's GCS marking it dead)
whose own log then shows the
kernel booting again within {REBOOT_AFTER_FAILURE_S / 60:.0f} minutes (or, after the workload started, up to
{NODE_FAILURE_DETECTION_S / 60:.0f} minutes before the declaration: a node that rebooted fast was back before the
scheduler gave up on it) (or that Slurm found 'unexpectedly rebooted', or whose
kubelet recorded it 'has been rebooted'),
with no orderly shutdown or graceful node shutdown logged before, went down by itself: it reset (a hang the watchdog or BMC ended, a crash that left nothing in
its logs, a power event). A declaration before the workload started is not a reset under it. A `Node reset during the workload` root is placed on it at the declaration: a host fault
of that node, of which the node failure and its peers' errors are the consequences. Not when the scheduler declared
several nodes failed (a cause they share: power, a cluster-wide event), nor when the node logged a panic or fatal
machine check as it came back (that record is the root).
""", cases=[
    RuleCase(title="declared down, then the node boots", evidence={
        "a/scheduler": ["[2025-01-01T00:38:10.402] error: Nodes b not responding, setting DOWN"],
        "b/syslog": ["Jan  1 00:39:39 b kernel: [    0.000000] Linux version 6.1.0-18-amd64 (debian-kernel@lists.debian.org) "
                     "(gcc-12 (Debian 12.2.0-14) 12.2.0) #1 SMP"]},
        context={"scheduler": "slurm", "scheduler_state": "NODE_FAIL", "exit_code": "0:0", "nodes": ["a", "b"]},
        expect=Expect(fired=True, sub_domain="host", culprits=["b"], terminal_state="NODE_FAIL",
                      root_symptom="Node reset during the workload")),
    RuleCase(title="the node was back before Slurm declared it", evidence={
        "a/scheduler": ["[2025-01-01T00:44:10.402] error: Nodes b not responding, setting DOWN"],
        "b/syslog": ["Jan  1 00:39:39 b kernel: [    0.000000] Linux version 6.1.0-18-amd64 (debian-kernel@lists.debian.org) "
                     "(gcc-12 (Debian 12.2.0-14) 12.2.0) #1 SMP"]},
        context={"scheduler": "slurm", "scheduler_state": "NODE_FAIL", "exit_code": "0:0", "nodes": ["a", "b"],
                 "start_time": "2025-01-01T00:00:00Z", "end_time": "2025-01-01T00:45:00Z"},
        expect=Expect(fired=True, sub_domain="host", culprits=["b"], root_symptom="Node reset during the workload")),
    RuleCase(title="Slurm finds the node rebooted", evidence={
        "a/scheduler": ["[2025-01-01T00:38:10.104] validate_node_specs: Node b unexpectedly rebooted boot_time=1735691890 "
                        "last response=1735691800"]},
        context={"scheduler": "slurm", "scheduler_state": "NODE_FAIL", "exit_code": "0:0", "nodes": ["a", "b"]},
        expect=Expect(fired=True, sub_domain="host", culprits=["b"], root_symptom="Node reset during the workload")),
    RuleCase(title="shut down on purpose, then booted", evidence={
        "a/scheduler": ["[2025-01-01T00:38:10.402] error: Nodes b not responding, setting DOWN"],
        "b/syslog": ["Jan  1 00:36:00 b systemd-logind[912]: System is rebooting.",
                     "Jan  1 00:39:39 b kernel: [    0.000000] Linux version 6.1.0-18-amd64 (debian-kernel@lists.debian.org) "
                     "(gcc-12 (Debian 12.2.0-14) 12.2.0) #1 SMP"]},
        context={"scheduler": "slurm", "scheduler_state": "NODE_FAIL", "exit_code": "0:0", "nodes": ["a", "b"]},
        expect=Expect(fired=False, culprits=[])),
    RuleCase(title="Slurm found the node rebooted before the workload started", evidence={
        "a/scheduler": ["[2024-12-31T23:50:10.104] validate_node_specs: Node b unexpectedly rebooted boot_time=1735688990 "
                        "last response=1735688900"]},
        context={"scheduler": "slurm", "scheduler_state": "FAILED", "exit_code": "1:0", "nodes": ["a", "b"]},
        expect=Expect(fired=False)),
    RuleCase(title="no boot after the failure", evidence={
        "a/scheduler": ["[2025-01-01T00:38:10.402] error: Nodes b not responding, setting DOWN"]},
        context={"scheduler": "slurm", "scheduler_state": "NODE_FAIL", "exit_code": "0:0", "nodes": ["a", "b"]},
        expect=Expect(fired=False, sub_domain="scheduler", culprits=["b"])),
])
def node_reset_itself(ws: Workspace) -> None:
    declared: dict[str, tuple[datetime, Event]] = {}  # each node the scheduler declared failed: its first report
    said_reset: set[str] = set()  # ... and those it said rebooted unexpectedly (Slurm)
    for event in ws.events:
        if event.symptom in NODE_FAILURE_REPORTS and event.type == EventType.NODE_BAD and event.time is not None:
            for node in filter(None, (ws.canonical_node(name) for name in event.value_set("blamed_node"))):
                if node not in declared or event.time < declared[node][0]:
                    declared[node] = (event.time, event)
                if event.value_set("reset"):
                    said_reset.add(node)
    if len(declared) != 1:
        return  # several nodes failed at once: a cause they share (power, a cluster-wide event), not one node
    ((node, (when, report)),) = declared.items()
    start = ws.context.start_time
    if start is not None and when < start - timedelta(seconds=ws.params.clock_skew_s):
        return  # declared before the workload began: not a reset under it (what it left broken, other rules read)
    if node in {ws.canonical_node(e.node) for e in ws.events if e.symptom in _ON_PURPOSE}:
        return
    # a node that reboots fast is back before the scheduler declares it (Slurm waits SlurmdTimeout for a silent node)
    since = when - timedelta(seconds=NODE_FAILURE_DETECTION_S)
    if start is not None:
        since = max(since, start + timedelta(seconds=ws.params.clock_skew_s))
    until = when + timedelta(seconds=REBOOT_AFTER_FAILURE_S)
    boot = next((b for b in ws.events_of(f"{EventType.CONTEXT}.boot") if ws.canonical_node(b.node) == node
                 and b.time is not None and not b.evidence.time_inferred and since <= b.time <= until), None)
    if boot is None and node not in said_reset:
        return
    came_back = boot.time if boot is not None and boot.time else when
    if any(e.symptom in _NODE_STOPPERS and ws.canonical_node(e.node) == node and e.time and e.time >= came_back
           for e in ws.events):
        return  # the records the node logged as it came back say why it stopped: they are the root
    how = (f"booting again at {came_back:%H:%M:%S} ({boot.evidence.text.strip()[:80]})" if boot is not None
           else "reported by Slurm as unexpectedly rebooted")
    ws.emit(EmitSpec(type=EventType.NODE_BAD, node=node, symptom="Node reset during the workload",
                     evidence=report.evidence, time=when, attributes={
                         "meaning": f"declared failed at {when:%H:%M:%S} and {how}, with no orderly shutdown logged: "
                                    "it reset"}))


@filter_rule("NodeBootedMidRun", phase=Phase.FILTER, after=("NodeResetItself",), doc="""
A node whose kernel booted (its boot banner, with a stamp of its own) after the workload started and before it ended,
with no orderly shutdown or graceful node shutdown logged on it and no scheduler declaring any node failed (rule
NodeResetItself reads those), reset under the workload: its processes died with it. A `Node reset during the
workload` root is placed on it at the boot. Not when several nodes booted (a cause they share), nor when the node
logged a panic or fatal machine check as it came back (that record is the root).
""", cases=[
    RuleCase(title="a rented node reboots in the middle of training", evidence={
        "a/syslog": ["Jan  1 00:40:00 a kernel: [    0.000000] Linux version 6.2.0-37-generic (buildd@bos03-amd64-055) "
                     "(x86_64-linux-gnu-gcc-11 (Ubuntu 11.4.0-1ubuntu1~22.04) 11.4.0) #38-Ubuntu SMP"],
        "b/applog": ["2025-01-01T00:39:50Z b:1:1 [0] NCCL WARN socketProgress: Connection closed by remote peer a<41232>"]},
        context={"scheduler": "none", "scheduler_state": "", "exit_code": "", "nodes": ["a", "b"],
                 "start_time": "2025-01-01T00:10:00Z", "end_time": "2025-01-01T00:50:00Z"},
        expect=Expect(fired=True, sub_domain="host", culprits=["a"], root_symptom="Node reset during the workload")),
    RuleCase(title="booted before the workload started", evidence={
        "a/syslog": ["Jan  1 00:05:00 a kernel: [    0.000000] Linux version 6.2.0-37-generic (buildd@bos03-amd64-055) "
                     "(x86_64-linux-gnu-gcc-11 (Ubuntu 11.4.0-1ubuntu1~22.04) 11.4.0) #38-Ubuntu SMP"]},
        context={"scheduler": "none", "scheduler_state": "", "exit_code": "", "nodes": ["a", "b"],
                 "start_time": "2025-01-01T00:10:00Z", "end_time": "2025-01-01T00:50:00Z"},
        expect=Expect(fired=False, culprits=[])),
])
def node_booted_mid_run(ws: Workspace) -> None:
    start, end = ws.context.start_time, ws.context.end_time
    if start is None or end is None or any(e.symptom in NODE_FAILURE_REPORTS for e in ws.events):
        return
    skew = timedelta(seconds=ws.params.clock_skew_s)
    boots = [b for b in ws.events_of(f"{EventType.CONTEXT}.boot") if b.node and b.time is not None
             and not b.evidence.time_inferred and start + skew < b.time <= end + skew]
    nodes = {ws.canonical_node(b.node) for b in boots}
    if len(nodes) != 1:
        return
    boot = min(boots, key=lambda b: b.time or end)
    node = ws.canonical_node(boot.node)
    if any(ws.canonical_node(e.node) == node and (e.symptom in _ON_PURPOSE or (
            e.symptom in _NODE_STOPPERS and e.time is not None and boot.time is not None and e.time >= boot.time))
           for e in ws.events):
        return
    ws.emit(EmitSpec(type=EventType.NODE_BAD, node=node, symptom="Node reset during the workload",
                     evidence=boot.evidence, time=boot.time, attributes={
                         "meaning": f"its kernel booted at {boot.time:%H:%M:%S}, in the middle of the workload, with no "
                                    "orderly shutdown logged: it reset"}))


@refiner("ResetExplainsItsNodeFailure", phase=Phase.REFINE_LATE, after=("FailedNodeExplainsPeerErrors",), doc=f"""
A node that reset under the workload (`Node reset during the workload`) stopped answering before anyone declared it
failed: the reports that name that node alone as failed (Slurm, Kubernetes, Ray's GCS marking it dead), from
{REBOOT_AFTER_FAILURE_S / 60:.0f} minutes before the reset was placed until it, are how the reset looked from outside.
They are demoted, so the earliest of them does not outrank the reset they report.
""", cases=[
    RuleCase(title="Ray marks the node dead, then Slurm finds it rebooted", evidence={
        "h/applog": ["2025-01-01 00:10:00,000 WARNING worker.py:1828 -- The node with node id: 97ab and address: "
                     "10.0.0.2 and node name: 10.0.0.2 has been marked dead because the detector has missed too many "
                     "heartbeats from it."],
        "w/applog": ["2025-01-01 00:00:01,000 INFO scripts.py:862 -- Local node IP: 10.0.0.2"],
        "h/scheduler": ["[2025-01-01T00:13:00.104] validate_node_specs: Node w unexpectedly rebooted boot_time=1735690350 "
                        "last response=1735690180"]},
        context={"scheduler": "slurm", "scheduler_state": "NODE_FAIL", "exit_code": "0:0", "nodes": ["h", "w"]},
        expect=Expect(fired=True, sub_domain="host", culprits=["w"], root_symptom="Node reset during the workload",
                      demoted=["Ray node failure"])),
    RuleCase(title="Ray marks another node dead", evidence={
        "h/applog": ["2025-01-01 00:10:00,000 WARNING worker.py:1828 -- The node with node id: 97ab and address: "
                     "10.0.0.3 and node name: 10.0.0.3 has been marked dead because the detector has missed too many "
                     "heartbeats from it."],
        "v/applog": ["2025-01-01 00:00:01,000 INFO scripts.py:862 -- Local node IP: 10.0.0.3"],
        "h/scheduler": ["[2025-01-01T00:13:00.104] validate_node_specs: Node w unexpectedly rebooted boot_time=1735690350 "
                        "last response=1735690180"]},
        context={"scheduler": "slurm", "scheduler_state": "NODE_FAIL", "exit_code": "0:0", "nodes": ["h", "v", "w"]},
        expect=Expect(fired=True, active=["Ray node failure"])),
])
def reset_explains_its_node_failure(ws: Workspace) -> None:
    before, skew = timedelta(seconds=REBOOT_AFTER_FAILURE_S), timedelta(seconds=ws.params.clock_skew_s)
    for reset in ws.active(prefix="Node reset during the workload"):
        if reset.node is None or reset.first_time is None or ws.undated(reset):
            continue
        for report in [r for name in NODE_FAILURE_REPORTS for r in ws.active(prefix=name)]:
            when = report.first_time
            if (blamed_nodes(ws, report) == [reset.node] and when is not None and not ws.undated(report)
                    and reset.first_time - before <= when <= reset.first_time + skew):
                ws.demote(report, f"{reset.node} reset under the workload; this report is how that looked")


# How long after its kubelet's last memory reclaim a node that stopped answering can be read as starved of memory: a
# node whose memory is exhausted stalls within seconds to minutes (the kubelet stops posting status after its 40 s grace).
MEMORY_STALL_S = 300.0
_NODE_STOPPED = ("Node reset during the workload", "Kubernetes node failure")
_MEMORY_PRESSURE = "Node memory pressure"


@refiner("MemoryPressureStoppedTheNode", phase=Phase.REFINE_LATE, after=("ResetExplainsItsNodeFailure",), doc=f"""
A node whose own kubelet was reclaiming memory (`{_MEMORY_PRESSURE}`) and that then stopped answering - declared
NotReady, or reset - within {MEMORY_STALL_S:.0f} s of the last reclaim, with no hardware fault of its own (an Xid, a
machine check, a kernel panic) logged, ran out of host memory: the pressure becomes the root (host_oom, no node blamed:
the workload's or its neighbours' memory use) and the node's failure its consequence.
""", cases=[
    # https://github.com/defilantech/LLMKube/issues/1724 (a 70B model in a pod without a memory limit wedging a GB10 node)
    RuleCase(title="the kubelet reclaimed memory, then the node went NotReady and rebooted", evidence={
        "n1/syslog": ['Jan  1 00:10:02 n1 k3s[1623]: I0101 00:10:02.311507    1623 eviction_manager.go:366] "Eviction '
                      'manager: attempting to reclaim" resourceName="memory"'],
        "n1/scheduler": ["2025-01-01T00:10:53Z  Normal   NodeNotReady       node/n1   Node n1 status is now: "
                         "NodeNotReady",
                         "2025-01-01T00:30:43Z  Warning  Rebooted   node/n1   Node n1 has been rebooted, boot id: "
                         "6d1f0b2c-6a34-4c1e-9d6f-0b1e2a3c4d5e"]},
        context={"scheduler": "kubernetes", "nodes": ["n1"], "start_time": "2025-01-01T00:00:00Z",
                 "end_time": "2025-01-01T00:40:00Z"},
        expect=Expect(fired=True, sub_domain="host_oom", culprits=[], root_symptom=_MEMORY_PRESSURE)),
    RuleCase(title="a reclaim an hour before the node failed", evidence={
        "n1/syslog": ['Jan  1 00:10:02 n1 kubelet[1623]: I0101 00:10:02.311507    1623 eviction_manager.go:366] '
                      '"Eviction manager: attempting to reclaim" resourceName="memory"'],
        "n1/scheduler": ["2025-01-01T01:10:53Z  Normal   NodeNotReady       node/n1   Node n1 status is now: "
                         "NodeNotReady"]},
        context={"scheduler": "kubernetes", "nodes": ["n1", "n2"], "start_time": "2025-01-01T00:00:00Z",
                 "end_time": "2025-01-01T01:20:00Z"},
        expect=Expect(fired=False)),
])
def memory_pressure_stopped_the_node(ws: Workspace) -> None:
    window = timedelta(seconds=MEMORY_STALL_S)
    for pressure in ws.select(prefix=_MEMORY_PRESSURE):
        last = pressure.last_time or pressure.first_time
        if pressure.node is None or last is None or ws.undated(pressure):
            continue
        stopped = [s for s in ws.active(role="root") if s.name.startswith(_NODE_STOPPED)
                   and blamed_nodes(ws, s) == [pressure.node] and s.first_time is not None and not ws.undated(s)
                   and last <= s.first_time <= last + window]
        faults = [s for s in ws.active(role="root", node=pressure.node)
                  if s.sub_domain in HARDWARE and not s.name.startswith(_NODE_STOPPED)]
        if not stopped or faults:
            continue
        ws.promote(pressure, f"{pressure.node}'s kubelet was reclaiming memory just before the node stopped answering")
        for s in stopped:
            ws.demote(s, f"{pressure.node} ran out of host memory ({_MEMORY_PRESSURE}) and stopped answering")


# Tasks of the block and journal layers: ext4's journal thread (jbd2/<device>), XFS's log thread, btrfs's transaction
# thread (its 15-character comm 'btrfs-transacti'), ZFS's transaction-group threads (txg_sync, txg_quiesce) and its
# write pipeline's workers (z_wr_iss, z_wr_int), device-mapper and md RAID workers, the LVM tools. Their hang is the
# node's storage (rule StorageStackHung), not its kernel at large.
STORAGE_STACK_TASK = re.compile(r"^(?:jbd2/|xfsaild/|btrfs-transacti|txg_sync$|txg_quiesce$|z_wr_|kdmflush|dmcrypt_write|"
                                r"md\d+_raid|lvm$|lvcreate$|vgchange$)")
_TASKS_HUNG = "Many unrelated tasks hung on the node"
NODE_TASKS_HUNG = 3  # distinct tasks reported hung on one node, system tasks among them, that make its kernel stuck
# The workload's own processes (Python, its data workers, Ray's workers, launchers): their hang is the workload's
_WORKLOAD_TASK = re.compile(r"^(?:python\S*|pt_\w+|ray::\S*|torchrun|mpirun|srun|java)$")
# Frames that say where hung tasks waited: a storage client, a local filesystem, the GPU driver (their own rules)
_WAITED_ON = ("Task hung in a shared filesystem client", "Kernel stack in a local filesystem",
              "Task hung in the NVIDIA driver")


@filter_rule("NodeTasksHung", phase=Phase.FILTER, after=("StorageStackHung",), doc=f"""
The hung-task detector reporting {NODE_TASKS_HUNG} or more different tasks of one node, at least two of them not the
workload's own processes (kernel workers, system daemons: kworker, ntpd, snmpd, dockerd, kswapd), says that node's
kernel stopped serving its processes: they become `{_TASKS_HUNG}` (host, the node blamed). Reports whose stacks show
where the tasks waited (a shared or local filesystem, the NVIDIA driver) or that name the storage stack's own tasks
(jbd2, xfsaild ...) are read by those rules instead; reports of the workload's processes alone are the workload
waiting. A node the scheduler then declared lost within {WARNED_BEFORE_LOSS_S / 60:.0f} minutes of its last report needs
fewer: any system task among its hung ones (the storage stack's too, or with stacks in a local filesystem or a driver)
says its kernel stopped serving processes before it stopped answering (a wait in a shared filesystem's client is
still the file server's).
""", cases=[
    # https://github.com/openzfs/zfs/issues/2934 (ZFS's txg_sync hung and the system with it)
    RuleCase(title="txg_sync and the trainer hung, then the node stopped answering", evidence={
        "n2/syslog": ["Mar  8 09:28:10 n2 kernel: [ 1560.084180] INFO: task txg_sync:13532 blocked for more than 120 seconds.",
                      "Mar  8 09:30:10 n2 kernel: [ 1680.091377] INFO: task python:14210 blocked for more than 120 seconds."],
        "n1/scheduler": ["[2016-03-08T09:35:50.004] error: Nodes n2 not responding, setting DOWN"]},
        context={"scheduler": "slurm", "scheduler_state": "NODE_FAIL", "exit_code": "0:0", "nodes": ["n1", "n2"],
                 "start_time": "2016-03-08T09:05:00Z", "end_time": "2016-03-08T09:36:00Z"},
        expect=Expect(fired=True, sub_domain="host", culprits=["n2"], root_symptom=_TASKS_HUNG)),
    RuleCase(title="only the trainer hung before the node was lost", evidence={
        "n2/syslog": ["Mar  8 09:30:10 n2 kernel: [ 1680.091377] INFO: task python:14210 blocked for more than 120 seconds."],
        "n1/scheduler": ["[2016-03-08T09:35:50.004] error: Nodes n2 not responding, setting DOWN"]},
        context={"scheduler": "slurm", "scheduler_state": "NODE_FAIL", "exit_code": "0:0", "nodes": ["n1", "n2"],
                 "start_time": "2016-03-08T05:05:00Z", "end_time": "2016-03-08T09:36:00Z"},
        expect=Expect(fired=False, sub_domain="scheduler", culprits=["n2"])),
    RuleCase(title="a journal thread hung hours before the node was lost", evidence={
        "n2/syslog": ["Mar  8 05:28:10 n2 kernel: [ 1560.084180] INFO: task jbd2/sda1-8:532 blocked for more than 120 seconds."],
        "n1/scheduler": ["[2016-03-08T09:35:50.004] error: Nodes n2 not responding, setting DOWN"]},
        context={"scheduler": "slurm", "scheduler_state": "NODE_FAIL", "exit_code": "0:0", "nodes": ["n1", "n2"],
                 "start_time": "2016-03-08T05:05:00Z", "end_time": "2016-03-08T09:36:00Z"},
        expect=Expect(fired=False, sub_domain="scheduler", culprits=["n2"])),
    # https://github.com/sonic-net/sonic-buildimage/issues/4822 (many unrelated tasks in D state at once)
    RuleCase(title="a kernel worker and two daemons hung at once", evidence={"n2/syslog": [
        "Jan  1 00:10:12 n2 kernel: [26825.855448] INFO: task kworker/2:1:5747 blocked for more than 120 seconds.",
        "Jan  1 00:10:12 n2 kernel: [26825.873379] INFO: task ntpd:11794 blocked for more than 120 seconds.",
        "Jan  1 00:10:12 n2 kernel: [26825.888053] INFO: task snmpd:12767 blocked for more than 120 seconds."]},
        context={"nodes": ["n1", "n2"]},
        expect=Expect(fired=True, sub_domain="host", culprits=["n2"], root_symptom=_TASKS_HUNG)),
    RuleCase(title="the workload's own processes hung", evidence={"n2/syslog": [
        "Jan  1 00:10:12 n2 kernel: INFO: task python3:5747 blocked for more than 120 seconds.",
        "Jan  1 00:10:12 n2 kernel: INFO: task pt_data_worker:11794 blocked for more than 120 seconds.",
        "Jan  1 00:10:12 n2 kernel: INFO: task kworker/2:1:12767 blocked for more than 120 seconds."]},
        context={"nodes": ["n1", "n2"]}, expect=Expect(fired=False, culprits=[])),
    RuleCase(title="daemons hung in the NFS client", evidence={"n2/syslog": [
        "Jan  1 00:10:12 n2 kernel: INFO: task kworker/2:1:5747 blocked for more than 120 seconds.",
        "Jan  1 00:10:12 n2 kernel: INFO: task ntpd:11794 blocked for more than 120 seconds.",
        "Jan  1 00:10:12 n2 kernel: INFO: task snmpd:12767 blocked for more than 120 seconds.",
        "Jan  1 00:10:12 n2 kernel:  nfs_wait_bit_killable+0x1e/0x40 [nfs]"]},
        context={"nodes": ["n1", "n2"]}, expect=Expect(fired=False)),
])
def node_tasks_hung(ws: Workspace) -> None:
    by_node: dict[str, list[Event]] = {}
    for event in ws.events_of(EventType.NODE_INTERESTING):
        if event.symptom == "Hung task" and event.node:
            by_node.setdefault(event.node, []).append(event)
    waited = {e.node: e.symptom for e in ws.events_of(EventType.NODE_INTERESTING) if e.symptom in _WAITED_ON}
    declared = _first_declared_lost(ws)
    for node, events in sorted(by_node.items()):
        named = {t for e in events for t in e.value_set("task")}
        tasks = {re.sub(r"/.*$", "", t) for t in named}
        system = {t for t in tasks if not _WORKLOAD_TASK.match(t)}
        storage = any(STORAGE_STACK_TASK.match(t) for t in named)
        # the node's own tasks hung, then the scheduler lost the node: its kernel stopped serving them
        lost = bool(system) and waited.get(node) != "Task hung in a shared filesystem client" and \
            _lost_soon_after(declared.get(ws.canonical_node(node) or ""), events)
        alone = node not in waited and not storage and len(tasks) >= NODE_TASKS_HUNG and len(system) >= 2
        if not (lost or alone):
            continue
        for event in events:
            ws.reread(event, _TASKS_HUNG, f"{len(tasks)} different tasks of {node} hung at once, "
                                          f"{', '.join(sorted(system))} among them")


def _lost_soon_after(declared: datetime | None, events: list[Event]) -> bool:
    """The scheduler declared the node lost within WARNED_BEFORE_LOSS_S after the last of these reports."""
    last = max((e.last_time or e.time for e in events if e.time), default=None)
    return declared is not None and last is not None and \
        timedelta(0) <= declared - last <= timedelta(seconds=WARNED_BEFORE_LOSS_S)


def _first_declared_lost(ws: Workspace) -> dict[str, datetime]:
    """When the scheduler first declared each node lost (its node-failure reports with a time of their own)."""
    declared: dict[str, datetime] = {}
    for event in ws.events:
        if event.symptom in NODE_FAILURE_REPORTS and event.type == EventType.NODE_BAD and event.time is not None \
                and not event.evidence.time_inferred:
            for node in filter(None, (ws.canonical_node(name) for name in event.value_set("blamed_node"))):
                declared[node] = min(declared.get(node, event.time), event.time)
    return declared


_UNKILLABLE = "Step's processes could not be killed"


# Rule-case lines: the trainer hung on n2, its peer's watchdog, and slurmctld's drain of n2 for the step it could not kill
_HUNG_TRAINER = ["Jan  1 00:10:12 n2 kernel: [1088963.358712] INFO: task python3:1670971 blocked for more than 120 seconds."]
_WATCHDOG_ON_PEER = ["2025-01-01T00:18:30Z [rank0]:[E101 00:18:30.118000 ProcessGroupNCCL.cpp:616] [Rank 0] Watchdog caught "
                     "collective operation timeout: WorkNCCL(SeqNum=231412, OpType=ALLREDUCE, NumelIn=1, NumelOut=1, "
                     "Timeout(ms)=600000) ran for 600011 milliseconds before timing out."]
_KILL_TASK_FAILED = ["[2025-01-01T00:21:20.611] error: slurmd error running JobId=7 on node(s)=n2: Kill task failed"]
_TWO_NODE_FAILED_JOB = {"scheduler": "slurm", "scheduler_state": "FAILED", "exit_code": "1:0", "nodes": ["n1", "n2"],
                        "start_time": "2025-01-01T00:00:00Z", "end_time": "2025-01-01T00:21:30Z"}


@refiner("UnkillableStepAfterHang", phase=Phase.REFINE, doc=f"""
Slurm could not kill the step on a node (`{_UNKILLABLE}`), and that node's kernel had reported tasks hung while the
workload ran: its processes were stuck in the node's kernel, not waiting on their peers, and the step's end could not
clear them. With no root candidate of a known kind (a GPU's, a filesystem's, the network's: what such tasks wait on; or
the scheduler's cancel or time limit, whose kill a slow teardown outlasts), the node is the root candidate (host). A
kill that failed with no hung task reported is a slow exit past the timeout, and stays context.
""", cases=[
    # https://lore.kernel.org/all/20241126150612.114561-1-snishika@redhat.com/ (a task stuck in throttle_direct_reclaim()
    # holding its mm's rwsem, the trainer's threads hung on it) with Slurm's drain of the node whose step would not end
    RuleCase(title="the trainer's threads hung, then Slurm could not kill the step there", evidence={
        "n2/syslog": _HUNG_TRAINER,
        "n1/applog": _WATCHDOG_ON_PEER,
        "n1/scheduler": _KILL_TASK_FAILED},
        context=_TWO_NODE_FAILED_JOB,
        expect=Expect(fired=True, sub_domain="host", culprits=["n2"], root_symptom=_UNKILLABLE)),
    # https://slurm.schedmd.com/slurm.conf.html#OPT_UnkillableStepTimeout (processes slow to exit after a cancel)
    RuleCase(title="a user's cancel; a rank hung in a checkpoint write could not be killed in time", evidence={
        "n2/syslog": _HUNG_TRAINER,
        "n1/applog": ["2025-01-01T00:20:02Z slurmstepd: error: *** JOB 7 ON n1 CANCELLED AT 2025-01-01T00:20:02 ***"],
        "n1/scheduler": _KILL_TASK_FAILED},
        context=_TWO_NODE_FAILED_JOB | {"scheduler_state": "CANCELLED", "exit_code": "0:15"},
        expect=Expect(fired=False, sub_domain="scheduler", culprits=[])),
    RuleCase(title="a step too slow to end, with no hung task", evidence={
        "n1/applog": _WATCHDOG_ON_PEER,
        "n1/scheduler": _KILL_TASK_FAILED},
        context=_TWO_NODE_FAILED_JOB,
        expect=Expect(fired=False, culprits=[])),
])
def unkillable_step_after_hang(ws: Workspace) -> None:
    if any(s.sub_domain != SubDomain.UNKNOWN for s in ws.active(role="root")):
        return
    for s in ws.select(prefix=_UNKILLABLE, status="interesting"):
        for node in blamed_nodes(ws, s):
            if any(ws.dated_during_run(h) for h in ws.select(prefix="Hung task", node=node)):
                ws.promote(s, f"the kernel of {node} reported tasks hung during the run, and Slurm could not kill the "
                              "step there")


_ENV_DIFFERS = "Node's environment differs from its peers'"


@filter_rule("EnvironmentDiffersOnSomeNodes", phase=Phase.FILTER, after=("NvidiaSoftwareOnAmdGpus",), doc=f"""
A library the dynamic loader cannot find stops every process of a node at exec, whatever the program does. When it is
reported on some nodes of a multi-node workload while other nodes ran the same program (their own output was read)
without it, the difference is those nodes' installation, not the job's configuration: the reports become
`{_ENV_DIFFERS}` (configuration, those nodes blamed). Reported on every node, they stay the job's environment (no node
blamed). RDMA registration refused for want of locked memory is not read so: which processes register memory, and
when, depends on the program (a parameter server's, one side of a transfer). Nor is a loader failure on a node whose
processes had begun the program's work before it (NCCL's bootstrap or a communicator, training progress): it stopped a
tool the program ran later (Triton's ptxas compiling a kernel), and which ranks run it depends on the program.
""", cases=[
    # https://github.com/togethercomputer/together-dgxc-benchmarking (worklog/2026-04-28_straggler_finder_report.md:
    # one node's ranks exited 127 on a library the others loaded)
    RuleCase(title="one node of three cannot load a library", evidence={
        "c/applog": ["2025-01-01T00:10:00Z /opt/nccl-tests/build/all_reduce_perf: error while loading shared "
                     "libraries: libcudart.so.12: cannot open shared object file: No such file or directory"],
        "a/applog": ["2025-01-01T00:09:58Z # nccl-tests version 2.17.1 nccl-headers=22907 nccl-library=22907"],
        "b/applog": ["2025-01-01T00:09:58Z # Collective test starting: all_reduce_perf"]},
        context={"nodes": ["a", "b", "c"]},
        expect=Expect(fired=True, sub_domain="configuration", culprits=["c"], root_symptom=_ENV_DIFFERS)),
    RuleCase(title="every node cannot load it", evidence={
        f"{n}/applog": ["2025-01-01T00:10:00Z /opt/nccl-tests/build/all_reduce_perf: error while loading shared "
                        "libraries: libcudart.so.12: cannot open shared object file: No such file or directory"]
        for n in ("a", "b")},
        context={"nodes": ["a", "b"]}, expect=Expect(fired=False, sub_domain="configuration", culprits=[])),
    RuleCase(title="one node's library error, the others left no output", evidence={
        "c/applog": ["2025-01-01T00:10:00Z /opt/nccl-tests/build/all_reduce_perf: error while loading shared "
                     "libraries: libcudart.so.12: cannot open shared object file: No such file or directory"]},
        context={"nodes": ["a", "b", "c"]}, expect=Expect(fired=False, culprits=[])),
    # https://github.com/togethercomputer/together-dgxc-benchmarking (tests/b200/worklog/2026-04-15_rebenchmark_report.md:
    # Triton's JIT compile of a rotary kernel ran ptxas, which could not load libm inside the container)
    RuleCase(title="a tool the running program started later cannot load a library", evidence={
        "c/applog": ["2025-01-01T00:04:28Z c:3020:3020 [2] NCCL INFO Bootstrap: Using bond0:10.224.9.40<0>",
                     "2025-01-01T00:05:15Z /usr/local/cuda/bin/ptxas: error while loading shared libraries: libm.so.6: "
                     "cannot open shared object file: No such file or directory"],
        "a/applog": ["2025-01-01T00:04:29Z a:3003:3054 [0] NCCL INFO comm 0x55c0df9d492f rank 0 nranks 24 cudaDev 0 "
                     "nvmlDev 0 busId 1b000 commId 0x1f3a77c40e2d9b85 - Init COMPLETE",
                     "2025-01-01T00:05:06Z [NeMo I 2025-01-01 00:05:06 train:340] Starting training loop at iteration 0"],
        "b/applog": ["2025-01-01T00:04:29Z b:3003:3054 [0] NCCL INFO comm 0x55c0df9d4930 rank 8 nranks 24 cudaDev 0 "
                     "nvmlDev 0 busId 1b000 commId 0x1f3a77c40e2d9b85 - Init COMPLETE",
                     "2025-01-01T00:05:06Z [NeMo I 2025-01-01 00:05:06 train:340] Starting training loop at iteration 0"]},
        context={"nodes": ["a", "b", "c"]}, expect=Expect(fired=False, sub_domain="configuration", culprits=[])),
])
def environment_differs_on_some_nodes(ws: Workspace) -> None:
    nodes = set(ws.context.nodes)
    failed = [e for e in ws.events_of(EventType.NODE_BAD)
              if e.node and e.symptom == "Python environment error" and e.value_set("loader_lib")
              and not _program_at_work_before(ws, e)]
    hit = {ws.canonical_node(e.node) for e in failed}
    ran = {ws.canonical_node(end.node) for end in ws.output_ends if end.node and end.points} - hit
    if len(nodes) < 2 or not failed or hit >= nodes or not ran & nodes:
        return
    for event in failed:
        ws.reread(event, _ENV_DIFFERS, f"{event.node} met it; {len(ran & nodes)} other node(s) ran the program "
                                       "without it")


def _program_at_work_before(ws: Workspace, failure: Event) -> bool:
    """The failure's node had begun the program's work before it: NCCL, loaded by the program, printed its bootstrap
    or a communicator there, or training progressed."""
    if failure.time is None:
        return False
    node = ws.canonical_node(failure.node or "")
    work = [e for fact in ("host_alias", "ip_map", "nccl_init") for e in ws.events_of(f"{EventType.CONTEXT}.{fact}")]
    work += [e for e in ws.events_of(EventType.NODE_INTERESTING) if e.symptom == "Training progress"]
    return any(e.node and ws.canonical_node(e.node) == node and e.time is not None and e.time < failure.time
               for e in work)


_SEGFAULT = "Process crashed (segfault)"
_OWN_CODE_CRASH = "Crash in the program's own code"
# Files a crash can sit in whatever program runs: the C and C++ runtimes, allocators and the interpreter, the GPU
# drivers and their runtimes and maths libraries, and the communication stacks (MPI, UCX, libfabric, verbs, NCCL/RCCL,
# NVSHMEM), whose crashes a mismatch of versions, transports or devices explains as often as a bug.
_SHARED_RUNTIME = re.compile(
    r"^(?:lib)?(?:c|m|dl|rt|z|pthread|gcc_s|stdc\+\+|ld|gomp|tcmalloc|jemalloc|python|glib|X11|GL|EGL|wayland|drm|"
    r"cuda|cudart|cublas|cublasLt|cudnn|cufft|curand|cusparse|cusolver|cupti|nvrtc|nvJitLink|nvinfer|nvidia|"
    r"nvToolsExt|dcgm|gdrapi|vgpu|amdhip64|hsa|hsakmt|rocblas|hipblas|hipblaslt|MIOpen|amd_comgr|tpu|nccl|rccl|"
    r"nvshmem|mpi|mpich|mca|open|ucs|ucp|uct|ucm|fabric|ibverbs|rdmacm|mlx5|psm2|hcoll|sharp|grpc|flux)(?=[-_.\d]|$)")


_SHARING_LAYER_FAILED = "GPU-sharing layer (HAMi) failed"
# HAMi-core's interposer library, which the vGPU device plugin injects into each pod (LD_PRELOAD of libvgpu.so)
_SHARING_LAYER = re.compile(r"^libvgpu\.so(?:\.\d+)*$")


@filter_rule("CrashInTheGpuSharingLayer", phase=Phase.FILTER, doc=f"""
HAMi's device plugin injects HAMi-core (libvgpu.so) into each pod that asks for a vGPU, and it intercepts every CUDA
driver call to enforce the slice. A process whose crash the kernel places in that file ('segfault at ... error 4 in
libvgpu.so[base+size]') crashed inside the GPU-sharing layer, not in the program or the GPU: it is read as
`{_SHARING_LAYER_FAILED}` (configuration, no node blamed).
""", cases=[
    # https://github.com/Project-HAMi/HAMi/issues/1055 (NCCL's first CUDA calls under HAMi-core on two H100 vGPUs)
    RuleCase(title="a crash inside HAMi-core's interposer", evidence={"n1/syslog": [
        "Jan  1 00:13:22 n1 kernel: [1835488.737042] python[3864703]: segfault at 0 ip 00007efeb76ad8a2 sp "
        "00007ffd19dc5450 error 4 in libvgpu.so[7efeb767e000+38000]"]},
        context={"scheduler": "kubernetes", "nodes": ["n1", "n2"]},
        expect=Expect(fired=True, sub_domain="configuration", culprits=[], root_symptom=_SHARING_LAYER_FAILED)),
    RuleCase(title="a crash inside NVIDIA's vGPU guest library is not HAMi-core's", evidence={"n1/syslog": [
        "Jan  1 00:13:22 n1 kernel: python[3864703]: segfault at 0 ip 00007efeb76ad8a2 sp 00007ffd19dc5450 error 4 in "
        "libnvidia-vgpu.so.535.104.05[7efeb767e000+38000]"]},
        context={"nodes": ["n1", "n2"]}, expect=Expect(fired=False)),
])
def crash_in_the_gpu_sharing_layer(ws: Workspace) -> None:
    for event in [e for e in ws.events_of(EventType.NODE_BAD) if e.symptom == _SEGFAULT and e.rule == "UserProcessCrash"]:
        if any(_SHARING_LAYER.match(f) for f in event.value_set("object") | event.value_set("trap_object")):
            ws.reread(event, _SHARING_LAYER_FAILED, "the crash was inside libvgpu.so, HAMi-core's CUDA interposer")


_NO_DEVICES_TO_ALLOCATE = "Node's kubelet had no devices to allocate"
# A rule-case line: the kubelet's rejection of a pod whose devices it could not allocate
_ADMISSION_DENIED = ('Jan  1 00:13:55 n2 kubelet[2245]: I0101 00:13:55.610000    2245 kubelet.go:2335] "Pod admission '
                     'denied" podUID="4c3e9a0f" pod="nlp/bert-ft-worker-1" reason="UnexpectedAdmissionError" '
                     'message="Allocate failed due to requested number of devices unavailable for nvidia.com/gpu. '
                     'Requested: 1, Available: 0, which is unexpected"')


@filter_rule("AdmissionUnderHami", phase=Phase.FILTER, doc=f"""
A kubelet that rejects a pod with UnexpectedAdmissionError ('Allocate failed due to requested number of devices
unavailable') could not allocate devices its device plugin had advertised. Under HAMi (its scheduler bound the pod, or
the pod carries its hami.io annotations) the devices are HAMi's vGPU slices, and the count the scheduler and the device
plugin keep disagreeing with the kubelet's is the sharing layer's bookkeeping - HAMi's maintainers answer it with an
upgrade - not the node's GPUs: `{_NO_DEVICES_TO_ALLOCATE}` is read as `{_SHARING_LAYER_FAILED}` (configuration, no
node blamed).
""", cases=[
    # https://github.com/Project-HAMi/HAMi/issues/596 (a PyTorchJob's worker rejected; fixed by upgrading HAMi)
    RuleCase(title="a pod HAMi's scheduler bound is rejected at admission", evidence={"n2/syslog": [
        "  Normal   Scheduled                 54s   hami-scheduler  Successfully assigned nlp/bert-ft-worker-1 to n2",
        _ADMISSION_DENIED]},
        context={"scheduler": "kubernetes", "nodes": ["n1", "n2"]},
        expect=Expect(fired=True, sub_domain="configuration", culprits=[], root_symptom=_SHARING_LAYER_FAILED)),
    RuleCase(title="the same rejection without HAMi", evidence={"n2/syslog": [
        _ADMISSION_DENIED]},
        context={"scheduler": "kubernetes", "nodes": ["n1", "n2"]}, expect=Expect(fired=False)),
])
def admission_under_hami(ws: Workspace) -> None:
    if not ws.events_of(f"{EventType.CONTEXT}.gpu_sharing"):
        return
    for event in [e for e in ws.events_of(EventType.NODE_BAD) if e.symptom == _NO_DEVICES_TO_ALLOCATE]:
        ws.reread(event, _SHARING_LAYER_FAILED, "HAMi shares these GPUs: the vGPUs its scheduler bound were not there "
                                                "to allocate")


@filter_rule("CrashInTheProgramsOwnCode", phase=Phase.FILTER, after=("CrashInTheGpuSharingLayer",), doc=f"""
The kernel's report of a user process's crash names the file mapped at the faulting instruction ('segfault at ... in
libX.so[base+size]', 'traps: ... general protection fault ... in libX.so['). When every crash the kernel reported in
the workload names one and the same file, and that file is the program's own (its executable or a library of its
own, not the C runtime, a GPU driver or runtime, or a communication library whose crashes a mismatch of versions or
transports explains as often as a bug), the crash is read as `{_OWN_CODE_CRASH}` (application, no node blamed). Crashes
in several different files of one node (a node that corrupts memory for whatever runs) and a line another extractor
read more specifically (a filesystem daemon's crash) are left as they are, and so are several processes crashed on one
node alone of a workload of several (the same code ran unharmed elsewhere) and any crash in a workload with a fault of a
node's hardware, fabric or storage on record, whenever it was logged (a peer gone, memory gone bad: the crash may be its
consequence).
""", cases=[
    # https://github.com/cms-sw/cmssw/issues/36336 (segfaults in workflow 11834.21 step 2, in a tracking library)
    RuleCase(title="a crash in the program's own library", evidence={
        "n2/syslog": ["Dec 11 06:39:57 n2 kernel: traps: cmsRun[31120] general protection fault ip:2b5cbe79ae72 "
                      "sp:2b5cd13fd930 error:0 in libTrackingToolsTrackAssociator.so[2b5cbe760000+5f000]"],
        "n1/applog": ["2021-12-11T06:40:02Z srun: error: n2: task 1: Segmentation fault"]},
        context={"nodes": ["n1", "n2"]},
        expect=Expect(fired=True, sub_domain="application", culprits=[], root_symptom=_OWN_CODE_CRASH)),
    # the UserProcessCrash extractor's own case: a segfault inside libnccl is the library's, not the program's
    RuleCase(title="a crash inside NCCL", evidence={"n1/syslog": [
        "Oct 10 03:06:53 n1 kernel: [2175494.310303] pt_main_thread[2536443]: segfault at 7f797fe00000 ip "
        "00007f7c7ac69996 sp 00007f7c12fd7c30 error 4 in libnccl.so.2[7f7c7ac00000+d3d3000]"]},
        context={"nodes": ["n1", "n2"]},
        expect=Expect(fired=False, sub_domain="unknown")),
    RuleCase(title="unrelated programs crash on one node", evidence={"n1/syslog": [
        "Mar  3 10:00:00 n1 kernel: python[4100]: segfault at 10 ip 00007f00 sp 00007f10 error 4 in "
        "libarrow.so.1601[7f00000+1000]",
        "Mar  3 10:20:00 n1 kernel: cc1plus[5100]: segfault at 20 ip 00007f00 sp 00007f10 error 4 in "
        "cc1plus[400000+2000]"]},
        context={"nodes": ["n1", "n2"]},
        expect=Expect(fired=False)),
    # https://github.com/jade-hpc-gpu/jade-hpc-gpu.github.io/issues/47 (jobs segfaulting at session creation on one
    # node only; the same job ran on the others)
    RuleCase(title="every process of one node crashes, the other node runs on", evidence={
        "n1/syslog": [
            "Apr 25 10:31:55 n1 kernel: python[41872]: segfault at 0 ip 00007f3c50ac0194 sp 00007ffdbd616cc3 error 4 in "
            "_pywrap_tensorflow_internal.so[7f3c4e2a1000+8b1e000]",
            "Apr 25 10:31:55 n1 kernel: python[41873]: segfault at 0 ip 00007f3c50ac0194 sp 00007ffdbd616cc3 error 4 in "
            "_pywrap_tensorflow_internal.so[7f3c4e2a1000+8b1e000]"]},
        context={"nodes": ["n1", "n2"]},
        expect=Expect(fired=False)),
    # a FUSE daemon's crash in its own binary is read by its own extractor and rule (FilesystemDaemonCrashedOnOneNode)
    RuleCase(title="a filesystem daemon's crash in its own binary", evidence={"b/syslog": [
        "Jul 19 09:36:48 b kernel: [2838451.000000] geesefs[41000]: segfault at 0 ip 00000000004a3c1f sp "
        "000000c000a8bd70 error 4 in geesefs[400000+1a7d000]"]},
        context={"nodes": ["a", "b"]},
        expect=Expect(fired=False, sub_domain="storage", culprits=["b"])),
    RuleCase(title="a GPU fault on record on a peer", evidence={
        "n2/syslog": ["Dec 11 06:39:50 n2 kernel: NVRM: Xid (PCI:0000:91:00): 79, pid='<unknown>', name=<unknown>, GPU "
                      "has fallen off the bus."],
        "n1/syslog": ["Dec 11 06:39:57 n1 kernel: traps: cmsRun[31120] general protection fault ip:2b5cbe79ae72 "
                      "sp:2b5cd13fd930 error:0 in libTrackingToolsTrackAssociator.so[2b5cbe760000+5f000]"]},
        context={"nodes": ["n1", "n2"]},
        expect=Expect(fired=False, sub_domain="gpu", culprits=["n2"])),
])
def crash_in_the_programs_own_code(ws: Workspace) -> None:
    crashes = [e for e in ws.events_of(EventType.NODE_BAD) if e.symptom == _SEGFAULT and e.rule == "UserProcessCrash"]
    files = [e.value_set("object") | e.value_set("trap_object") for e in crashes]
    if not crashes or any(not f for f in files):
        return
    named = set().union(*files)
    if (len(named) != 1 or _SHARED_RUNTIME.match(next(iter(named))) or any(_read_otherwise(ws, e) for e in crashes)
            or _one_node_alone(ws, crashes) or _infrastructure_fault_on_record(ws)):
        return
    for event in crashes:
        ws.reread(event, _OWN_CODE_CRASH, f"every crash the kernel reported was in {next(iter(named))}, a file of the "
                                          "program's own")


def _one_node_alone(ws: Workspace, crashes: list[Event]) -> bool:
    """Several processes crashed, all on one node of a workload of several: the same code ran elsewhere unharmed."""
    nodes = {ws.canonical_node(e.node) for e in crashes}
    pids = set().union(*(e.value_set("pid") for e in crashes))
    return len(ws.context.nodes) > 1 and len(nodes) == 1 and len(pids) > 1


def _infrastructure_fault_on_record(ws: Workspace) -> bool:
    """A fault of a node's hardware, fabric or storage reported anywhere in the workload (not a warning that counts only
    when it repeats): a crash may be its consequence (a peer gone, memory gone bad), whatever file it was in."""
    infrastructure = (SubDomain.HOST, SubDomain.GPU, SubDomain.NVLINK, SubDomain.NETWORK, SubDomain.STORAGE)
    for event in ws.events_of(EventType.NODE_BAD):
        if event.symptom is None or event.symptom in _ONE_OFF_WARNINGS + _REPEATED_WARNINGS:
            continue
        definition = ws.catalog.symptom(event.symptom)
        if definition.role == "root" and definition.sub_domain in infrastructure:
            return True
    return False


def _read_otherwise(ws: Workspace, crash: Event) -> bool:
    """Another extractor read the crash's line as something more specific (a filesystem daemon's crash, which is an
    interesting event until its own rule reads it)."""
    where = crash.evidence.provenance
    return any(e is not crash and e.evidence.provenance.origin == where.origin and e.evidence.provenance.line == where.line
               for kind in (EventType.NODE_BAD, EventType.NODE_INTERESTING) for e in ws.events_of(kind))
