"""Storage rules (the Python side of catalog/storage.toml).

Facts used (docs/domain.md §3.2): an NFS client retries ('still trying') until the server answers ('OK'), and
tasks blocked on it show up as hung tasks and soft lockups.
"""

from __future__ import annotations

from datetime import datetime, timedelta

from firstfault.engine.rules_api import Expect, Phase, RuleCase, refiner
from firstfault.engine.workspace import Workspace, WorkSymptom

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
