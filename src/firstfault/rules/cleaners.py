"""Per-node cleaners (CLEAN): decide, node by node, what a kernel or driver report means on its own.

Facts used: MCi_STATUS bit 61 (UC) marks an uncorrected machine-check error (Intel SDM vol. 3B, MCi_STATUS);
PCIe AER corrected-error storms on a root port precede devices falling off the bus (NVIDIA Xid 79 guidance);
an IB port error followed by 'port active' is a recovered flap (ibv async events 10 and 9); Fabric Manager
not ready makes CUDA fail with 'system not yet initialized' (CUDA error 802); NCCL on a loopback or bridge
interface only breaks jobs that span nodes; an NFS client retries ('still trying') until the server answers
('OK'), and tasks blocked on it show up as hung tasks and soft lockups.
"""

from __future__ import annotations

from datetime import datetime, timedelta

from firstfault.engine.rules_api import Expect, Phase, RuleCase, refiner
from firstfault.engine.workspace import Workspace, WorkSymptom

MCE_UC_BIT = 61
AER_STORM_MIN = 10  # corrected AER events on one node within a burst that make a storm
FLAP_RECOVERY_S = 60.0  # a port back to active within this many seconds after its last error recovered


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
PCIe AER corrected errors are context one at a time. {AER_STORM_MIN} or more on a node (counting the kernel's
'N Corrected errors received' summaries) are a storm on that link: a root candidate that blames the node.
""", cases=[
    RuleCase(title="storm", evidence={"n1/syslog": [
        f"Jan  1 00:10:{i:02d} n1 kernel: pcieport 0000:00:03.0: AER: Corrected error received: 0000:00:03.0"
        for i in range(12)]}, expect=Expect(fired=True, active=["PCIe AER corrected errors"], culprits=["n1"])),
    RuleCase(title="single", evidence={"n1/syslog": [
        "Jan  1 00:10:00 n1 kernel: pcieport 0000:00:03.0: AER: Corrected error received: 0000:00:03.0"]},
        expect=Expect(fired=False, sub_domain="unknown")),
])
def aer_corrected_storm(ws: Workspace) -> None:
    for s in ws.select(prefix="PCIe AER corrected errors", status="interesting"):
        total = s.count + sum(int(v) - 1 for v in s.value_set("batch"))
        if total >= AER_STORM_MIN:
            s.attributes["storm_events"] = total
            ws.promote(s, f"{total} corrected AER errors: a storm on this node's PCIe link")


@refiner("RecoveredLinkFlap", phase=Phase.CLEAN, doc=f"""
An IB port error or link-down on a node that is followed, within {FLAP_RECOVERY_S:.0f} s of its last
occurrence, by the port coming back (port active / Link ACTIVE) is a recovered flap: context, not a cause.
Repeated errors with no recovery stay (a flapping or dead link).
""", cases=[
    RuleCase(title="flap", evidence={"n1/applog": [
        "2025-01-01T00:10:00Z n1:1:1 [0] NCCL WARN NET/IB : mlx5_5:1 Got non-fatal async event: port error(10)",
        "2025-01-01T00:10:03Z n1:1:1 [0] NCCL WARN NET/IB : mlx5_5:1 Got non-fatal async event: port active(9)"]},
        expect=Expect(fired=True, demoted=["IB port error"])),
    RuleCase(title="down", evidence={"n1/applog": [
        "2025-01-01T00:10:00Z n1:1:1 [0] NCCL WARN NET/IB : Got async event : port error"]},
        expect=Expect(fired=False, culprits=["n1"], sub_domain="network")),
])
def recovered_link_flap(ws: Workspace) -> None:
    window = timedelta(seconds=FLAP_RECOVERY_S)
    for down in ws.active(prefix="IB port error") + ws.active(prefix="IB link down"):
        last = down.last_time or down.first_time
        if last is None:
            continue
        for up in ws.select(node=down.node, prefix="IB port active") + ws.select(node=down.node, prefix="IB link up"):
            up_last = up.last_time or up.first_time
            if up_last is not None and last <= up_last <= last + window:
                ws.demote(down, f"the port came back ({up.name}) {(up_last - last).total_seconds():.0f} s after "
                          "its last error: a recovered flap")
                break


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


@refiner("NcclInterfaceNeedsPeers", phase=Phase.CLEAN, doc="""
NCCL on a loopback or bridge interface only fails jobs that span several nodes; on a single-node job it is
harmless and is demoted.
""", cases=[
    RuleCase(title="single node", evidence={"n1/applog": [
        "2025-01-01T00:00:01Z n1:1:1 [0] NCCL INFO Bootstrap : Using [0]lo:127.0.0.1<0>"]},
        context={"nodes": ["n1"]}, expect=Expect(fired=True, demoted=["NCCL on a non-routable interface"])),
    RuleCase(title="two nodes", evidence={
        "n1/applog": ["2025-01-01T00:00:01Z n1:1:1 [0] NCCL INFO Bootstrap : Using [0]lo:127.0.0.1<0>"],
        "n2/applog": ["2025-01-01T00:00:01Z n2:1:1 [0] NCCL INFO Bootstrap : Using [0]lo:127.0.0.1<0>"]},
        expect=Expect(fired=False, sub_domain="configuration")),
])
def nccl_interface_needs_peers(ws: Workspace) -> None:
    if len(ws.context.nodes) > 1:
        return
    for s in ws.active(prefix="NCCL on a non-routable interface"):
        ws.demote(s, "single-node job: NCCL traffic stays on the host")


NFS_RECOVERY_S = 300.0  # an NFS stall answered by 'server OK' within this many seconds recovered


def _nfs_ok_after(ws: Workspace, stall: WorkSymptom) -> datetime | None:
    """When the NFS server answered again on the stalled node, if it did."""
    start = stall.first_time
    times = [ok.last_time or ok.first_time for ok in ws.select(node=stall.node, prefix="NFS server OK")]
    later = sorted(t for t in times if t is not None and start is not None and t >= start)
    return later[0] if later else None


@refiner("NfsStallOutcome", phase=Phase.CLEAN, doc=f"""
An NFS 'server not responding, still trying' answered by 'server OK' within {NFS_RECOVERY_S / 60:.0f} minutes
is a recovered stall and stays context. A stall that lasts longer or never recovers is a storage root
candidate; the soft lockups and hung tasks of that node while it lasts are its symptoms (the CPUs and tasks
were stuck in the NFS client).
""", cases=[
    RuleCase(title="recovered", evidence={"n1/syslog": [
        "Jan  1 00:10:00 n1 kernel: nfs: server nfs01 not responding, still trying",
        "Jan  1 00:11:05 n1 kernel: nfs: server nfs01 OK"]}, expect=Expect(fired=False, sub_domain="unknown")),
    RuleCase(title="long stall with lockups", evidence={"n1/syslog": [
        "Jan  1 00:10:00 n1 kernel: nfs: server nfs01 not responding, still trying",
        "Jan  1 00:11:20 n1 kernel: watchdog: BUG: soft lockup - CPU#98 stuck for 22s! [python3:612802]",
        "Jan  1 00:40:00 n1 kernel: nfs: server nfs01 OK"]},
        expect=Expect(fired=True, sub_domain="storage", culprits=[], demoted=["CPU soft lockup"])),
])
def nfs_stall_outcome(ws: Workspace) -> None:
    recovery = timedelta(seconds=NFS_RECOVERY_S)
    for stall in ws.select(prefix="NFS server not responding", status="interesting"):
        if stall.first_time is None:
            continue
        answered = _nfs_ok_after(ws, stall)
        last = stall.last_time or stall.first_time
        if answered is not None and answered <= last + recovery:
            continue
        lasted = f"{(answered - stall.first_time).total_seconds() / 60:.0f} min" if answered else "until the end"
        ws.promote(stall, f"the NFS server did not answer for {lasted}")
        for stuck in ws.active(node=stall.node, prefix="CPU soft lockup") + ws.select(node=stall.node, prefix="Hung task"):
            if stuck.first_time and stuck.first_time >= stall.first_time and (answered is None or stuck.first_time <= answered):
                ws.demote(stuck, f"stuck while the NFS server was not responding (since {stall.first_time:%H:%M:%S})")
