"""Storage rules (the Python side of catalog/storage.toml).

Facts used (docs/domain.md §3.2): an NFS client retries ('still trying') until the server answers ('OK'), a Lustre
client waits for recovery after losing a target ('was lost') until it reconnects ('Connection restored'), and tasks
blocked on either show up as hung tasks and soft lockups.
"""

from __future__ import annotations

import re
from datetime import datetime, timedelta
from typing import Any

from firstfault.engine.model import Event, EventType, SubDomain, TerminalState, recorded_state
from firstfault.engine.rules_api import Expect, Phase, RuleCase, filter_rule, refiner
from firstfault.engine.workspace import Workspace, WorkSymptom
from firstfault.rules.host import HUNG_STACK_S, STORAGE_STACK_TASK, promote_on_one_node
from firstfault.rules.scheduler import WORKLOAD_ENDERS

FILE_SERVER_RECOVERY_S = 300.0  # a file-server stall answered again within this many seconds recovered
# (the stall, the server answering again) for each shared-filesystem client
# (the SMB client logs no line when it reconnects at its default log level, and neither does mfsmount)
_STALLS: tuple[tuple[str, str | None], ...] = (("NFS server not responding", "NFS server OK"),
                                               ("Lustre server connection lost", "Lustre connection restored"),
                                               ("SMB server not responding", None),
                                               ("MooseFS master not answering", None))


def _answered_after(ws: Workspace, stall: WorkSymptom, answer: str) -> datetime | None:
    """When the file server answered again on the stalled node after its last report of the stall, if it did (a node
    whose server came and went reports several stalls; the last one decides)."""
    start = stall.last_time or stall.first_time
    times = [ok.last_time or ok.first_time for ok in ws.select(node=stall.node, prefix=answer)]
    later = sorted(t for t in times if t is not None and start is not None and t >= start)
    return later[0] if later else None


@refiner("FileServerStallOutcome", phase=Phase.CLEAN, doc=f"""
A shared-filesystem client that lost its server - NFS 'server not responding, still trying', Lustre 'Connection to
<target> was lost', the SMB client's 'has not responded in N seconds. Reconnecting...', MooseFS's mfsmount losing its
master - and got it back ('server OK', 'Connection restored') within {FILE_SERVER_RECOVERY_S / 60:.0f} minutes had a
recovered stall, which stays context (the SMB client and mfsmount log no line when they reconnect). A stall that lasts
longer or never recovers is a storage root candidate; the soft lockups and hung tasks of that node while it lasts are
its symptoms (the CPUs and tasks were stuck in the filesystem client).
""", cases=[
    RuleCase(title="recovered", evidence={"n1/syslog": [
        "Jan  1 00:10:00 n1 kernel: nfs: server nfs01 not responding, still trying",
        "Jan  1 00:11:05 n1 kernel: nfs: server nfs01 OK"]}, expect=Expect(fired=False, sub_domain="unknown")),
    RuleCase(title="the server answered twice, then went away for good before a cancel", evidence={"n1/syslog": [
        "Jan  1 00:10:00 n1 kernel: nfs: server nfs01 not responding, still trying",
        "Jan  1 00:10:40 n1 kernel: nfs: server nfs01 OK",
        "Jan  1 00:20:00 n1 kernel: nfs: server nfs01 not responding, still trying",
        "Jan  1 00:21:50 n1 kernel: nfs: server nfs01 OK",
        "Jan  1 00:30:00 n1 kernel: nfs: server nfs01 not responding, still trying"],
        "n1/applog": ["2025-01-01T01:30:00Z slurmstepd: error: *** JOB 7 ON n1 CANCELLED AT 2025-01-01T01:30:00 ***"]},
        context={"scheduler_state": "CANCELLED", "exit_code": "0:0"},
        expect=Expect(fired=True, sub_domain="storage", culprits=[])),
    RuleCase(title="long stall with lockups", evidence={"n1/syslog": [
        "Jan  1 00:10:00 n1 kernel: nfs: server nfs01 not responding, still trying",
        "Jan  1 00:11:20 n1 kernel: watchdog: BUG: soft lockup - CPU#98 stuck for 22s! [python3:612802]",
        "Jan  1 00:40:00 n1 kernel: nfs: server nfs01 OK"]},
        expect=Expect(fired=True, sub_domain="storage", culprits=[], demoted=["CPU soft lockup"])),
    # https://docs.oracle.com/en/operating-systems/oracle-linux/ (kernel.hung_task_panic: a task blocked longer than
    # hung_task_timeout_secs panics the node)
    RuleCase(title="the NFS server stops answering; hung_task_panic turns the blocked writer into a panic", evidence={
        "n1/syslog": ["Jan  1 00:52:38 n1 kernel: nfs: server nfs01 not responding, still trying",
                      "Jan  1 00:54:13 n1 kernel: INFO: task python3:411162 blocked for more than 122 seconds.",
                      "Jan  1 00:54:13 n1 kernel: Kernel panic - not syncing: hung_task: blocked tasks"]},
        expect=Expect(fired=True, sub_domain="storage", culprits=[], demoted=["Kernel panic or oops"])),
    RuleCase(title="a hung_task panic long after the NFS server answered again", evidence={"n1/syslog": [
        "Jan  1 00:10:00 n1 kernel: nfs: server nfs01 not responding, still trying",
        "Jan  1 00:10:30 n1 kernel: nfs: server nfs01 OK",
        "Jan  1 00:54:13 n1 kernel: Kernel panic - not syncing: hung_task: blocked tasks"]},
        expect=Expect(fired=False, sub_domain="host", culprits=["n1"])),
    # the SMB client's stall (fs/smb/client/connect.c), here under a dataset share that stopped answering
    RuleCase(title="an SMB server that stopped answering; the node's tasks hang in it", evidence={"n1/syslog": [
        "Jan  1 00:05:12 n1 kernel: [622471.567000] CIFS: VFS: \\\\10.10.0.35 has not responded in 90 seconds. "
        "Reconnecting...",
        "Jan  1 00:13:40 n1 kernel: [622979.244000] INFO: task python3:61033 blocked for more than 122 seconds."]},
        expect=Expect(fired=True, sub_domain="storage", culprits=[])),
    RuleCase(title="a Lustre target lost until a time limit", evidence={"n1/syslog": [
        "Jan  1 00:10:00 n1 kernel: Lustre: fs-OST0001-osc-ffff9d61: Connection to fs-OST0001 (at 10.0.0.8@tcp) was "
        "lost; in progress operations using this service will wait for recovery to complete",
        "Jan  1 00:14:00 n1 kernel: INFO: task python:288355 blocked for more than 122 seconds."],
        "n1/applog": ["2025-01-01T02:00:00Z slurmstepd: error: *** STEP 1.0 ON n1 CANCELLED AT 2025-01-01T02:00:00 "
                      "DUE TO TIME LIMIT ***"]},
        context={"scheduler_state": "TIMEOUT"},
        expect=Expect(fired=True, sub_domain="storage", culprits=[], terminal_state="TIMEOUT")),
])
def file_server_stall_outcome(ws: Workspace) -> None:
    recovery = timedelta(seconds=FILE_SERVER_RECOVERY_S)
    for lost, answer in _STALLS:
        for stall in ws.select(prefix=lost, status="interesting"):
            if stall.first_time is None:
                continue
            answered = _answered_after(ws, stall, answer) if answer else None
            last = stall.last_time or stall.first_time
            if answered is not None and answered <= last + recovery:
                continue
            lasted = f"{(answered - stall.first_time).total_seconds() / 60:.0f} min" if answered else "until the end"
            ws.promote(stall, f"the file server did not answer for {lasted}")
            _stuck_while(ws, stall, stall.first_time, answered)


def _stuck_while(ws: Workspace, stall: WorkSymptom, began: datetime, answered: datetime | None) -> None:
    """Soft lockups and hung tasks of the stalled node while its file server was away are the stall's, and so is the
    panic the kernel's hung_task_panic setting makes of a hung task ('Kernel panic - not syncing: hung_task: blocked
    tasks')."""
    panics = [p for p in ws.active(node=stall.node, prefix="Kernel panic or oops")
              if any(r.startswith("hung_task") for r in p.value_set("reason"))]
    for stuck in ws.active(node=stall.node, prefix="CPU soft lockup") + ws.select(node=stall.node, prefix="Hung task") + panics:
        if stuck.first_time and stuck.first_time >= began and (answered is None or stuck.first_time <= answered):
            ws.demote(stuck, f"stuck while the file server was not answering (since {began:%H:%M:%S})")


_BEEGFS_RETRY = "BeeGFS server not answering"
BEEGFS_HELD_S = 900.0  # a task reported hung this soon after its BeeGFS request was retried waited on that server


@refiner("BeeGfsServerHeldATask", phase=Phase.CLEAN, doc=f"""
BeeGFS's client logs its first retry of a request to a server that does not answer, naming the task and pid that sent
it, and nothing when a retry succeeds. When the kernel reports that same task hung ('INFO: task <task>:<pid> blocked
for more than N seconds') within {BEEGFS_HELD_S / 60:.0f} minutes after, the request never got its answer and the
task waited on the server: `{_BEEGFS_RETRY}` becomes a storage root candidate (no node blamed) and the hung-task
reports are its symptoms. A retry with no task held stays context.
""", cases=[
    RuleCase(title="the task that retried its server is reported hung two minutes later", evidence={"n1/syslog": [
        "Jan  1 00:12:44 n1 kernel: [1889711.9] beegfs: slurm_script(212337): Messaging (RPC): Retrying communication "
        "with node: node_storage_3 [ID: 3]",
        "Jan  1 00:14:47 n1 kernel: [1889834.9] INFO: task slurm_script:212337 blocked for more than 122 seconds."]},
        expect=Expect(fired=True, sub_domain="storage", culprits=[], root_symptom=_BEEGFS_RETRY)),
    RuleCase(title="a retry, and another task hung", evidence={"n1/syslog": [
        "Jan  1 00:12:44 n1 kernel: [1889711.9] beegfs: beegfs_flush(1583): Messaging (RPC): Retrying communication "
        "with node: node_storage_3 [ID: 3]",
        "Jan  1 00:14:47 n1 kernel: [1889834.9] INFO: task python:4100 blocked for more than 122 seconds."]},
        expect=Expect(fired=False)),
])
def beegfs_server_held_a_task(ws: Workspace) -> None:
    held = timedelta(seconds=BEEGFS_HELD_S)
    for retry in ws.select(prefix=_BEEGFS_RETRY, status="interesting"):
        tasks = retry.value_set("task")
        hung = [h for h in ws.select(node=retry.node, prefix="Hung task") if h.value_set("task") & tasks
                and retry.first_time is not None and h.first_time is not None
                and retry.first_time <= h.first_time <= (retry.last_time or retry.first_time) + held]
        if hung:
            ws.promote(retry, f"{sorted(hung[0].value_set('task') & tasks)[0]} retried its BeeGFS server and was then "
                              "reported hung")
            for h in hung:
                ws.demote(h, "blocked on the BeeGFS server it was retrying")


_FS_CLIENT_ERROR = "Parallel filesystem client error"


@filter_rule("LnetRecoveryPingsAreHealthChecks", phase=Phase.FILTER, after=("PythonExceptionFamily",), doc=f"""
LNet's health feature marks a peer interface unhealthy, routes around it and keeps pinging it; each failed ping is an
'LNetError: ... lnet_handle_recovery_reply()) peer NI (<nid>) recovery failed' line. No filesystem operation failed
in it: such lines are set aside and do not make or date a `{_FS_CLIENT_ERROR}`.
""", cases=[
    RuleCase(title="recovery pings to a router's interface, nothing else", evidence={"n1/syslog": [
        f"Jan  1 00:{m:02d}:41 n1 kernel: LNetError: 2933:0:(lib-move.c:4005:lnet_handle_recovery_reply()) peer NI "
        "(10.253.2.18@kfi) recovery failed with -110" for m in (10, 20, 30)]},
        expect=Expect(fired=True, sub_domain="unknown")),
    RuleCase(title="an RDMA timeout to a server", evidence={"n1/syslog": [
        "Jan  1 00:11:02 n1 kernel: LNetError: 2871:0:(o2iblnd_cb.c:3410:kiblnd_check_conns()) Timed out RDMA with "
        "10.30.0.14@o2ib (52): c: 0, oc: 0, rc: 8"]},
        expect=Expect(fired=False, active=[_FS_CLIENT_ERROR])),
])
def lnet_recovery_pings_are_health_checks(ws: Workspace) -> None:
    for event in [e for e in ws.events_of(EventType.NODE_BAD) if e.symptom == _FS_CLIENT_ERROR and e.value_set("health")]:
        ws.drop(event, "LNet health's recovery ping to a peer interface it routes around, not a filesystem operation")


# A Lustre client's connect RPC answered EALREADY (-114): a connection to that target was already being made (the
# import's reconnect racing its pinger), nothing failed.
_CONNECT_IN_PROGRESS = re.compile(r"operation \w+_connect to node \S+ failed: rc = -114\b")


@filter_rule("LustreConnectAlreadyInProgress", phase=Phase.FILTER, doc=f"""
'LustreError: 11-0: <target>: operation ost_connect to node <nid> failed: rc = -114' is a connect the client sent while
one to the same target was still in progress (EALREADY): a reconnect race the import resolves by itself, not a failed
filesystem operation. When it is the node's only Lustre client error it is set aside and does not make a
`{_FS_CLIENT_ERROR}` (the node's client errors are read as one report: another error after it keeps the report).
""", cases=[
    # Lustre's client report of a connect reply (ptlrpc: 'operation <op>_connect to node <nid> failed: rc = <errno>');
    # -114 is EALREADY
    RuleCase(title="a connect already in progress", evidence={"n1/syslog": [
        "Jun 25 10:38:55 n1 kernel: LustreError: 11-0: lustre5-OST0042-osc-ff3a1e0c8e2d9800: operation ost_connect to "
        "node 172.21.4.19@o2ib100 failed: rc = -114"]},
        expect=Expect(fired=True, absent=[_FS_CLIENT_ERROR])),
    RuleCase(title="a connect refused", evidence={"n1/syslog": [
        "Jun 25 10:38:55 n1 kernel: LustreError: 11-0: lustre5-OST0042-osc-ff3a1e0c8e2d9800: operation ost_connect to "
        "node 172.21.4.19@o2ib100 failed: rc = -19"]},
        expect=Expect(fired=False)),
    RuleCase(title="a connect already in progress, then the client evicted", evidence={"n1/syslog": [
        "Jun 25 10:38:55 n1 kernel: LustreError: 11-0: lustre5-OST0042-osc-ff3a1e0c8e2d9800: operation ost_connect to "
        "node 172.21.4.19@o2ib100 failed: rc = -114",
        "Jun 25 10:40:12 n1 kernel: LustreError: 167-0: lustre5-OST0042-osc-ff3a1e0c8e2d9800: This client was evicted "
        "by lustre5-OST0042; in progress operations using this service will fail."]},
        expect=Expect(fired=False)),
])
def lustre_connect_already_in_progress(ws: Workspace) -> None:
    for event in [e for e in ws.events_of(EventType.NODE_BAD) if e.symptom == _FS_CLIENT_ERROR and e.count == 1
                  and _CONNECT_IN_PROGRESS.search(e.evidence.text)]:
        ws.drop(event, "a connect to a target already being connected (EALREADY): the client's reconnect race")


# A Lustre client's connect RPC to a target refused for now ('LustreError: 11-0: <import>: operation ost_connect to node
# <nid> failed: rc = -16', older 'Communicating with <nid>, operation ost_connect failed with -16.'): the import retries,
# and 'Connection restored' on the same import says a later attempt succeeded. An eviction is read apart.
_CONNECT_REFUSED = re.compile(r"LustreError: 11-0: (?P<import>\S+?): (?:operation \w+_connect to node \S+ failed: rc = -\d+|"
                              r"Communicating with \S+, operation \w+_connect failed with -\d+)")
# An operation the server answered with ENOTCONN (rc = -107): it no longer knew the client's connection, so the client
# reconnects; whether the operation's resend then succeeded the client does not log
_NOT_CONNECTED = re.compile(r"LustreError: 11-0: (?P<import>\S+?): operation \w+ to node \S+ failed: rc = -107\b")
_IMPORT_OF = re.compile(r"(?:Lustre|LustreError): (?:\d+-\d+: )?(?P<import>[\w.-]+-(?:OST|MDT)[0-9a-fA-F]{4}-(?:osc|mdc)-\w+):")
# LNet's o2ib driver giving up on a transmission to a peer ('Timed out tx for <nid>', 'Timed out RDMA with <nid>'), and
# the server NID a restored Lustre connection names ('Connection restored to <target> (at <nid>)')
_LNET_TIMEOUT = re.compile(r"Timed out (?:tx for|RDMA with) (?P<nid>[\w.:-]+@\w+)")
_RESTORED_AT = re.compile(r"Connection restored to \S+ \(at (?P<nid>[\w.:-]+@\w+)\)")


def _not_connected_then_restored(title: str, start: str, expect: Expect) -> RuleCase:
    """A rule case in the formats of ptlrpc's reply check (lustre/ptlrpc/client.c) and the import's reconnect
    (lustre/ptlrpc/import.c): a metadata request the server no longer had a connection for, the import back 6 s later."""
    return RuleCase(title=title, evidence={"n1/syslog": [
        "Jan  1 00:57:52 n1 kernel: LustreError: 11-0: lustre-MDT0001-mdc-ffff9d4b2c1e8000: operation mds_getattr to "
        "node 172.21.0.12@o2ib failed: rc = -107",
        "Jan  1 00:57:58 n1 kernel: Lustre: lustre-MDT0001-mdc-ffff9d4b2c1e8000: Connection restored to 172.21.0.12@o2ib "
        "(at 172.21.0.12@o2ib)"]},
        context={"start_time": start, "end_time": "2025-01-01T01:30:00Z"}, expect=expect)


def _step_then_evicted(title: str, operation: str, rc: str, target: str, nid: str,
                       context: dict[str, Any] | None = None) -> RuleCase:
    """A near-miss rule case: an import's failed operation, then the client evicted by the target (the console format
    of lustre/ptlrpc/import.c), then its connection restored: the eviction keeps the report."""
    client = f"{target}-osc-ffff9a1c4e2b3800"
    return RuleCase(title=title, evidence={"n1/syslog": [
        f"Jan  1 00:10:00 n1 kernel: LustreError: 11-0: {client}: operation {operation} to node {nid} failed: {rc}",
        f"Jan  1 00:10:55 n1 kernel: LustreError: 167-0: {client}: This client was evicted by {target}; in progress "
        "operations using this service will fail.",
        f"Jan  1 00:11:00 n1 kernel: Lustre: {client}: Connection restored to {nid} (at {nid})"]},
        context=context or {}, expect=Expect(fired=False))


def _lnet_timeout_then_restored(title: str, restored: str, expect: Expect) -> RuleCase:
    """A rule case: LNet's transmission timeout to 10.180.0.12@o2ib, then a Lustre import's connection restored to
    `restored` 40 s later."""
    return RuleCase(title=title, evidence={"n1/syslog": [
        "Apr 13 18:21:42 n1 kernel: [3545687.000000] LNetError: 2611:0:(o2iblnd_cb.c:3373:kiblnd_check_conns()) Timed "
        "out tx for 10.180.0.12@o2ib: 2 seconds",
        f"Apr 13 18:22:22 n1 kernel: [3545727.000000] Lustre: lfs1-OST0013-osc-ffff9c2f3a2e1000: Connection restored to "
        f"{restored} (at {restored})"]}, expect=expect)


@filter_rule("LustreReconnectCompleted", phase=Phase.FILTER, after=("LustreConnectAlreadyInProgress",), doc=f"""
A Lustre client's connect to a target refused for the moment ('operation ost_connect ... failed: rc = -16', the target
busy with the import's previous connection) is a step of the import's reconnection: when the same import's 'Connection
restored' follows within {FILE_SERVER_RECOVERY_S / 60:.0f} minutes on that node and it was that node's only Lustre
client error (an eviction or a failed operation is another, and keeps the report), the reconnection completed and the
refused connect does not make or date a `{_FS_CLIENT_ERROR}`. So is an LNet transmission to a server that timed out
('Timed out tx for <nid>', 'Timed out RDMA with <nid>') when a Lustre connection to that server's NID is restored on the
node within the same time: the client reconnected and its operations went on. An operation the server answered with
ENOTCONN ('operation mds_getattr ... failed: rc = -107': it no longer knew the client's connection) whose import was
restored before the workload began is dropped the same way: the workload's I/O never met the disconnection. During the
workload it stays, since the client does not log whether the operation's resend succeeded.
""", cases=[
    # the formats of LNet's o2iblnd (lnet/klnds/o2iblnd/o2iblnd_cb.c, kiblnd_check_conns) and of the Lustre import's
    # reconnect (lustre/ptlrpc/import.c) in the Lustre source tree: a transmission timed out, the import came back
    _lnet_timeout_then_restored("an LNet timeout to a server, its connection restored 40 s later", "10.180.0.12@o2ib",
                                expect=Expect(fired=True, absent=[_FS_CLIENT_ERROR])),
    _lnet_timeout_then_restored("an LNet timeout to a server, another server's connection restored", "10.180.0.13@o2ib",
                                expect=Expect(fired=False)),
    # https://www.nics.tennessee.edu/computing-resources/file-systems/scratch (a Cray client's reconnect, the older
    # wording of the refused connect)
    RuleCase(title="a refused connect, restored five seconds later", evidence={"n1/syslog": [
        "May 12 14:01:58 n1 kernel: LustreError: 11-0: medusa-OST0012-osc-ffff8804253f4c00: Communicating with "
        "10.36.200.12@o2ib, operation ost_connect failed with -16.",
        "May 12 14:02:03 n1 kernel: Lustre: medusa-OST0012-osc-ffff8804253f4c00: Connection restored to medusa-OST0012 "
        "(at 10.36.200.12@o2ib)"]},
        expect=Expect(fired=True, absent=[_FS_CLIENT_ERROR])),
    _not_connected_then_restored("an operation answered with ENOTCONN, restored before the workload began",
                                 "2025-01-01T01:00:00Z", expect=Expect(fired=True, absent=[_FS_CLIENT_ERROR])),
    _not_connected_then_restored("the same, the workload already running", "2025-01-01T00:50:00Z",
                                 expect=Expect(fired=False)),
    # https://github.com/kubernetes-sigs/aws-fsx-csi-driver/issues/169 (an FSx client's read answered with ENOTCONN, then
    # the client evicted: its open files are lost; the eviction in the console format of lustre/ptlrpc/import.c)
    _step_then_evicted("an operation answered with ENOTCONN, then the client evicted", "ost_read", "rc = -107",
                       "fs-abcd12345-OST0000", "10.0.1.5@tcp",
                       context={"start_time": "2025-01-01T00:30:00Z", "end_time": "2025-01-01T01:30:00Z"}),
    _step_then_evicted("a refused connect, then the client evicted, then restored", "ost_connect", "rc = -16",
                       "scratch-OST0007", "10.31.2.17@o2ib"),
    RuleCase(title="a refused connect never restored", evidence={"n1/syslog": [
        "May 12 14:01:58 n1 kernel: LustreError: 11-0: medusa-OST0012-osc-ffff8804253f4c00: Communicating with "
        "10.36.200.12@o2ib, operation ost_connect failed with -16."]},
        expect=Expect(fired=False)),
])
def lustre_reconnect_completed(ws: Workspace) -> None:
    within = timedelta(seconds=FILE_SERVER_RECOVERY_S)
    restored: dict[tuple[str | None, str], list[datetime]] = {}  # by node and import, and by node and server NID
    for event in ws.events:
        if event.time is None or "Connection restored" not in event.evidence.text:
            continue
        for found, key in ((_IMPORT_OF.search(event.evidence.text), "import"),
                           (_RESTORED_AT.search(event.evidence.text), "nid")):
            if found:
                restored.setdefault((event.node, found.group(key)), []).append(event.last_time or event.time)
    began = ws.context.start_time
    for event in [e for e in ws.events_of(EventType.NODE_BAD) if e.symptom == _FS_CLIENT_ERROR and e.count == 1]:
        text, at = event.evidence.text, event.time
        step = (m.group("import") if (m := _CONNECT_REFUSED.search(text)) else
                m.group("nid") if (m := _LNET_TIMEOUT.search(text)) else None)
        until = at + within if at is not None else None
        if step is None and (m := _NOT_CONNECTED.search(text)) and began is not None:
            step, until = m.group("import"), began  # back before the workload's I/O could meet the disconnection
        if step is None or at is None or until is None:
            continue
        back = [t for t in restored.get((event.node, step), []) if at <= t <= until]
        if back:
            ws.drop(event, f"the connection to {step} was restored {(min(back) - at).total_seconds():.0f} s later: a "
                           "reconnect that completed")


# LocalDiskFailure's captures that name a SCSI block device (a partition's name ends in its number)
_DISK_KEYS = ("device", "block", "sense_dev", "ext4_device", "ext4_bio", "fs")


def _iscsi_disks(ws: Workspace) -> dict[str, set[str]]:
    """By node, the sd disks the kernel attached on an iSCSI initiator's SCSI host (facts are still events here)."""
    hosts = {(e.node, h) for e in ws.events_of(f"{EventType.CONTEXT}.iscsi_host") for h in e.value_set("scsi_host")}
    disks: dict[str, set[str]] = {}
    for event in ws.events_of(f"{EventType.CONTEXT}.scsi_disk"):
        if event.node and (event.node, str(event.attributes.get("scsi_host"))) in hosts:
            disks.setdefault(event.node, set()).update(event.value_set("disk"))
    return disks


_REMOTE_VOLUME = "Remote block volume failed"
_BACKEND_FAILED = "Volume backend failed the pod's mount"


_EXPEL_DISPUTE = "Filesystem client expelled in a dispute with another node"
EXPEL_DISPUTE_S = 600.0  # a node expelled this soon after it asked to expel another lost that dispute


@filter_rule("ExpelRequesterExpelled", phase=Phase.FILTER, doc=f"""
A Storage Scale client that asked the cluster manager to expel another node ('Request sent to ... to expel <node>') and
lost its own membership within {EXPEL_DISPUTE_S / 60:.0f} minutes after was expelled in that dispute: the manager chose
it over the node it could not reach. Its loss of membership is read as `{_EXPEL_DISPUTE}` (storage, no node blamed)
instead of a failure of its own client. A node expelled with no request of its own stays the node whose client failed.
""", cases=[
    RuleCase(title="expelled after asking to expel a node outside the job", evidence={"n2/syslog": [
        "Jan  1 00:10:00 n2 mmfs[3377]: [N] Request sent to 10.40.9.21 (ess-mgr01) to expel 10.40.3.44 (cn-b44) from "
        "cluster ess.hpc.local",
        "Jan  1 00:10:35 n2 mmfs[3377]: [E] Lost membership in cluster ess.hpc.local. Unmounting file systems."]},
        context={"nodes": ["n1", "n2"]},
        expect=Expect(fired=True, sub_domain="storage", culprits=[], root_symptom=_EXPEL_DISPUTE)),
    RuleCase(title="expelled with no request of its own", evidence={"n2/syslog": [
        "Nov  5 05:41:02 n2 mmfs[5521]: Close connection to 10.60.1.22 ess-io2",
        "Nov  5 05:41:07 n2 mmfs[5521]: Lost membership in cluster ess.storage.cluster. Unmounting file systems."]},
        context={"nodes": ["n1", "n2"]},
        expect=Expect(fired=False, sub_domain="storage", culprits=["n2"])),
])
def expel_requester_expelled(ws: Workspace) -> None:
    requests: dict[str, list[datetime]] = {}
    for fact in ws.events_of(f"{EventType.CONTEXT}.expel_request"):
        if fact.time is not None and fact.node:
            requests.setdefault(fact.node, []).append(fact.time)
    window = timedelta(seconds=EXPEL_DISPUTE_S)
    for event in [e for e in ws.events_of(EventType.NODE_BAD) if e.symptom == "Node's filesystem client failed"
                  and "Lost membership" in e.evidence.text]:
        lost = event.time
        if lost is None:
            continue
        asked = [t for t in requests.get(event.node or "", []) if timedelta(0) <= lost - t <= window]
        if asked:
            ws.reread(event, _EXPEL_DISPUTE, f"{event.node} asked to expel another node at {min(asked):%H:%M:%S} and "
                                             "lost its membership after: it lost that dispute")


@filter_rule("IscsiDiskIsRemote", phase=Phase.FILTER, doc=f"""
A disk the kernel attached through an iSCSI initiator ('scsi hostN: iSCSI Initiator over TCP/IP', then 'sd N:...:
[sdX] Attached SCSI disk') is a remote volume (a Longhorn volume, a SAN LUN), not the node's own drive: block-layer
and filesystem errors on it are `{_REMOTE_VOLUME}` (storage, no node blamed: the volume's replicas or target are
elsewhere), not `Local disk failure`.
""", cases=[
    # https://github.com/longhorn/longhorn/issues/1920 (medium errors on a Longhorn volume: Longhorn's bug, not a disk)
    RuleCase(title="medium errors on a disk that came through an iSCSI initiator", evidence={"n1/syslog": [
        "Jan  1 00:00:30 n1 kernel: scsi host3: iSCSI Initiator over TCP/IP",
        "Jan  1 00:00:30 n1 kernel: sd 3:0:0:1: [sde] Attached SCSI disk",
        "Jan  1 00:10:20 n1 kernel: sd 3:0:0:1: [sde] tag#40 Sense Key : Medium Error [current] ",
        "Jan  1 00:10:20 n1 kernel: Buffer I/O error on dev sde, logical block 407599, async page read"]},
        expect=Expect(fired=True, sub_domain="storage", culprits=[], root_symptom=_REMOTE_VOLUME)),
    RuleCase(title="medium errors on a disk of a local controller", evidence={"n1/syslog": [
        "Jan  1 00:00:30 n1 kernel: scsi host0: ahci",
        "Jan  1 00:00:30 n1 kernel: sd 0:0:0:0: [sda] Attached SCSI disk",
        "Jan  1 00:10:20 n1 kernel: sd 0:0:0:0: [sda] tag#40 Sense Key : Medium Error [current] "]},
        expect=Expect(fired=False, sub_domain="storage", culprits=["n1"])),
])
def iscsi_disk_is_remote(ws: Workspace) -> None:
    remote = _iscsi_disks(ws)
    if not remote:
        return
    for event in [e for e in ws.events_of(EventType.NODE_BAD) if e.symptom == "Local disk failure"]:
        named = {re.sub(r"\d+$", "", d) for key in _DISK_KEYS for d in event.value_set(key)}
        if named and named <= remote.get(event.node or "", set()):
            ws.reread(event, _REMOTE_VOLUME, f"{', '.join(sorted(named))} came through an iSCSI initiator on "
                                             f"{event.node}: the device is remote")


@refiner("NetworkBlockDeviceIsNotLocal", phase=Phase.REFINE_EARLY, doc="""
A node that lost the connection to a network block device's target (iSCSI, a SAN path, a distributed block store)
and then logged block-layer or filesystem errors: those errors are on the remote device, not on a failing local
disk, so `Local disk failure` on that node, from the connection loss on, is demoted and the node is not blamed for
it. Disk errors before any connection loss, or on another node, keep their reading.
""", cases=[
    RuleCase(title="ext4 aborts on an iSCSI volume whose connection dropped", evidence={"n1/syslog": [
        "Jan  1 00:10:00 n1 iscsid: Kernel reported iSCSI connection 2:0 error (1011 - ISCSI_ERR_CONN_FAILED: iSCSI "
        "connection failed) state (3)",
        "Jan  1 00:10:20 n1 kernel: I/O error, dev sdf, sector 18874432 op 0x1:(WRITE) flags 0x800 phys_seg 256 prio "
        "class 2"]},
        expect=Expect(fired=True, sub_domain="storage", culprits=[], demoted=["Local disk failure"])),
    RuleCase(title="a local disk failing with no storage connection lost", evidence={"n1/syslog": [
        "Jan  1 00:10:20 n1 kernel: I/O error, dev nvme0n1, sector 18874432 op 0x1:(WRITE) flags 0x800 phys_seg 256 "
        "prio class 2"]},
        expect=Expect(fired=False, sub_domain="storage", culprits=["n1"])),
])
def network_block_device_is_not_local(ws: Workspace) -> None:
    skew = timedelta(seconds=ws.params.clock_skew_s)
    for disk in ws.active(prefix="Local disk failure"):
        lost = [s.first_time for s in ws.select(node=disk.node, prefix="Network block storage connection lost")
                if s.first_time is not None]
        if lost and (disk.first_time is None or min(lost) <= disk.first_time + skew):
            ws.demote(disk, f"{disk.node} lost its network block storage connection at {min(lost):%H:%M:%S}: the "
                      "device is remote")


# The hung-task detector reports a task again each check period (120 s by default) while it stays blocked: reports of
# a node's own storage stack spanning this long are I/O that did not complete for minutes, not one slow write.
STORAGE_STACK_HUNG_S = 240.0
_STORAGE_HUNG = "Hung task in the node's storage stack"


@filter_rule("StorageStackHung", phase=Phase.FILTER, doc=f"""
Hung-task reports of a node's own block and journal layers (jbd2/<device>, xfsaild, btrfs's transaction thread, ZFS's
txg_sync and write workers, device-mapper and md workers, the LVM tools), or of any task whose printed stack runs
through ext4, jbd2, XFS, btrfs or ZFS or the block layer's waits for a device (a writeback worker, the training
process's fsync, a direct write to a raw device), that recur over {STORAGE_STACK_HUNG_S:.0f} s or more, or whose task
had been blocked that long when reported, say that node's storage did not complete I/O for minutes: they become
`{_STORAGE_HUNG}` on that node (storage, the node blamed). A single report is a slow write and stays context; a file
server's stall on the same node takes them as its own (FileServerStallOutcome).
""", cases=[
    # https://github.com/Azure/local-csi-driver/issues/153 (an LVM volume on local NVMe, AKS H100 node)
    RuleCase(title="the LVM tools and the journal blocked for six minutes", evidence={"n1/syslog": [
        "Aug 19 02:04:26 n1 kernel: INFO: task lvm:1233013 blocked for more than 120 seconds.",
        "Aug 19 02:06:26 n1 kernel: INFO: task jbd2/dm-8-8:105408 blocked for more than 120 seconds.",
        "Aug 19 02:10:26 n1 kernel: INFO: task lvm:1233429 blocked for more than 120 seconds."]},
        expect=Expect(fired=True, sub_domain="storage", culprits=["n1"], root_symptom=_STORAGE_HUNG)),
    # https://github.com/Open-CAS/open-cas-linux/issues/746 (an ext4 on a cache device; the writeback worker and the
    # trainer's fsync blocked in the journal)
    RuleCase(title="writeback and the trainer blocked in ext4's journal for four minutes", evidence={"n1/syslog": [
        "Apr  7 04:25:22 n1 kernel: [3170108.268135] INFO: task kworker/u146:16:495 blocked for more than 120 seconds.",
        "Apr  7 04:25:22 n1 kernel: [3170108.349135]  jbd2_log_wait_commit+0xac/0x120 [jbd2]",
        "Apr  7 04:29:27 n1 kernel: [3170353.268135] INFO: task python:55855 blocked for more than 241 seconds.",
        "Apr  7 04:29:27 n1 kernel: [3170353.457135]  __ext4_journal_start_sb+0x6e/0x130 [ext4]"]},
        context={"start_time": "2025-04-07T04:00:00Z", "end_time": "2025-04-07T05:00:00Z"},
        expect=Expect(fired=True, sub_domain="storage", culprits=["n1"], root_symptom=_STORAGE_HUNG)),
    # https://github.com/ocurrent/obuilder/issues/47 (an unlink blocked in btrfs's metadata reclaim for minutes)
    RuleCase(title="the trainer's unlink blocked in btrfs for six minutes", evidence={"n1/syslog": [
        "Jan 14 11:43:05 n1 kernel: [1325170.432411] INFO: task python3:218804 blocked for more than 120 seconds.",
        "Jan 14 11:43:05 n1 kernel: [1325170.455957]  flush_space+0x60b/0x770 [btrfs]",
        "Jan 14 11:49:07 n1 kernel: [1325532.927871] INFO: task python3:218804 blocked for more than 483 seconds.",
        "Jan 14 11:49:07 n1 kernel: [1325532.955957]  flush_space+0x60b/0x770 [btrfs]"]},
        context={"start_time": "2025-01-14T11:00:00Z", "end_time": "2025-01-14T12:00:00Z"},
        expect=Expect(fired=True, sub_domain="storage", culprits=["n1"], root_symptom=_STORAGE_HUNG)),
    # https://github.com/openzfs/zfs/issues/2990 (ZFS's transaction-group sync waiting on pool I/O, then the writers)
    RuleCase(title="ZFS's txg_sync and the trainer blocked for six minutes", evidence={"n1/syslog": [
        "Jun 11 02:18:58 n1 kernel: [ 8038.216669] INFO: task txg_sync:1351 blocked for more than 120 seconds.",
        "Jun 11 02:18:58 n1 kernel: [ 8038.216921]  [<ffffffffa06e2fdd>] ? zio_wait+0x116/0x15f [zfs]",
        "Jun 11 02:22:58 n1 kernel: [ 8278.225871] INFO: task python:41881 blocked for more than 120 seconds.",
        "Jun 11 02:25:00 n1 kernel: [ 8400.002311] INFO: task python:41884 blocked for more than 120 seconds."]},
        context={"start_time": "2024-06-11T00:40:00Z", "end_time": "2024-06-11T04:40:00Z"},
        expect=Expect(fired=True, sub_domain="storage", culprits=["n1"], root_symptom=_STORAGE_HUNG)),
    # https://github.com/Open-CAS/open-cas-linux/issues/758 (a direct write to a cache device blocked for four minutes)
    RuleCase(title="a direct write to a raw device blocked for more than 241 seconds", evidence={"n1/syslog": [
        "Jun 19 12:05:59 n1 kernel: [ 8235.506508] INFO: task shardcache:51891 blocked for more than 120 seconds.",
        "Jun 19 12:05:59 n1 kernel: [ 8235.589835]  blkdev_direct_IO+0x45c/0x490",
        "Jun 19 12:08:02 n1 kernel: [ 8358.386921] INFO: task shardcache:51891 blocked for more than 241 seconds."]},
        context={"start_time": "2023-06-19T11:00:00Z", "end_time": "2023-06-19T13:00:00Z"},
        expect=Expect(fired=True, sub_domain="storage", culprits=["n1"], root_symptom=_STORAGE_HUNG)),
    RuleCase(title="one slow journal commit", evidence={"n1/syslog": [
        "Dec  9 12:34:12 n1 kernel: [293631.000000] INFO: task jbd2/vdt-8:390 blocked for more than 120 seconds."]},
        expect=Expect(fired=False, sub_domain="unknown", culprits=[])),
    RuleCase(title="the application's own tasks", evidence={"n1/syslog": [
        "Mar  2 05:22:16 n1 kernel: INFO: task python3:55980 blocked for more than 240 seconds.",
        "Mar  2 05:28:19 n1 kernel: INFO: task python3:55986 blocked for more than 600 seconds."]},
        expect=Expect(fired=False, sub_domain="unknown", culprits=[])),
])
def storage_stack_hung(ws: Workspace) -> None:
    window = timedelta(seconds=HUNG_STACK_S)
    frames = [e for e in ws.events_of(EventType.NODE_INTERESTING)
              if e.symptom == "Kernel stack in a local filesystem" and e.time is not None]

    def in_local_filesystem(hung: Event) -> bool:
        """Local-filesystem frames on the node from the report's first line to a stack's length after its last."""
        first, last = hung.time, hung.last_time or hung.time
        return first is not None and last is not None and any(
            f.node == hung.node and f.time is not None and f.time <= last + window and (f.last_time or f.time) >= first
            for f in frames)

    by_node: dict[str, list[Event]] = {}
    for event in ws.events_of(EventType.NODE_INTERESTING):
        if event.symptom == "Hung task" and event.node and (
                STORAGE_STACK_TASK.match(str(event.attributes.get("task"))) or in_local_filesystem(event)):
            by_node.setdefault(event.node, []).append(event)
    for node, events in sorted(by_node.items()):
        times = [t for e in events for t in (e.time, e.last_time) if t is not None]
        blocked = max((int(v) for e in events for v in e.value_set("blocked_s") if v.isdigit()), default=0)
        if not times or max((max(times) - min(times)).total_seconds(), blocked) < STORAGE_STACK_HUNG_S:
            continue
        for event in events:
            ws.reread(event, _STORAGE_HUNG, f"{node}'s storage stack blocked for minutes")


_DISK_FULL = "Node's local disk full"


_DAEMON_CRASHED = "Filesystem daemon crashed"


@refiner("FilesystemDaemonCrashedOnOneNode", phase=Phase.REFINE, doc=f"""
A FUSE filesystem's daemon that crashed on one node of the workload alone (`{_DAEMON_CRASHED}`: the kernel's segfault or
general-protection line naming s3fs, ossfs, geesefs, gcsfuse, blobfuse ...) cut that node off its mount: the
node's client failed, and it is the root candidate (storage, the node blamed); the ENOTCONN errors of the node's
processes follow from it. The same holds when the OOM killer killed the daemon (a mount pod over its memory limit):
that kill is the node's client lost, not the workload out of memory, and the host OOM symptoms (the kernel's, a
node-problem-detector's OOMKilling event) are demoted. Longhorn's volume engine and instance manager serve a Kubernetes
node's block volumes as a FUSE daemon serves its mount: when they die, the node's iSCSI sessions to them drop
(`Network block storage connection lost` from then on on that node is demoted with them). The same daemon crashing on
several nodes is its own bug meeting the same workload, or the store behind it: no node is blamed; on every node of the
workload it is the root candidate (storage, rule SystemicGuard blames none), on some of them it stays context. A daemon
known to have ended only from its container's record (a CSI node plugin or FUSE pod that kubelet restarted, which a
rollout does on purpose too) counts only where the node's own I/O then failed (a storage failure from its end on).
""", cases=[
    # https://github.com/ceph/ceph-csi/issues/792 (restarting the cephfs plugin's container; the pod's mount then
    # answers ENOTCONN)
    RuleCase(title="one node's cephfs plugin container restarted, its ranks lose the mount", evidence={
        "b/syslog": ["Jan 15 04:19:33 b kubelet[2071]: I0115 04:19:33.552001    2071 kubelet.go:1933] SyncLoop (PLEG): "
                     "\"ceph1-csi-cephfsplugin-czl9r_default(3fd90197-32d4-11ea-9d2e-744aa4028226)\", event: "
                     "&pleg.PodLifecycleEvent{ID:\"3fd90197-32d4-11ea-9d2e-744aa4028226\", Type:\"ContainerDied\", "
                     "Data:\"ae33cf5ab2d2\"}"],
        "b/applog": ["2020-01-15T04:19:37Z [rank 10] OSError: [Errno 107] Transport endpoint is not connected: "
                     "'/data/LibriSpeech/train-clean-360/7148/59157/7148-59157-0004.flac'"]},
        context={"nodes": ["a", "b"], "start_time": "2020-01-15T02:00:00Z", "end_time": "2020-01-15T05:00:00Z"},
        expect=Expect(fired=True, sub_domain="storage", culprits=["b"], root_symptom=_DAEMON_CRASHED)),
    RuleCase(title="a plugin container restarted and nothing failed after it", evidence={
        "b/syslog": ["Jan 15 04:19:33 b kubelet[2071]: I0115 04:19:33.552001    2071 kubelet.go:1933] SyncLoop (PLEG): "
                     "\"ceph1-csi-cephfsplugin-czl9r_default(3fd90197-32d4-11ea-9d2e-744aa4028226)\", event: "
                     "&pleg.PodLifecycleEvent{ID:\"3fd90197-32d4-11ea-9d2e-744aa4028226\", Type:\"ContainerDied\", "
                     "Data:\"ae33cf5ab2d2\"}"],
        "a/applog": ["2020-01-15T04:30:00Z [rank 0] ValueError: expected 80 mel bins, got 64"]},
        context={"nodes": ["a", "b"], "start_time": "2020-01-15T02:00:00Z", "end_time": "2020-01-15T05:00:00Z"},
        expect=Expect(fired=False, sub_domain="application", culprits=[])),
    # https://github.com/s3fs-fuse/s3fs-fuse/issues/366 (random s3fs crashes; the trainer's reads then fail)
    RuleCase(title="one node's s3fs crashes, its ranks lose the mount", evidence={
        "b/syslog": ["Jul 19 09:36:48 b kernel: [2838451.000000] traps: s3fs[2952] general protection ip:441e7a "
                     "sp:7f69627fb580 error:0 in s3fs[400000+63000]"],
        "b/applog": ["2025-07-19T09:36:54Z [rank12]:OSError: [Errno 107] Transport endpoint is not connected: "
                     "'/mnt/s3/coco2017/train2017/000000315242.jpg'"]},
        context={"nodes": ["a", "b"], "start_time": "2025-07-19T09:00:00Z", "end_time": "2025-07-19T10:00:00Z"},
        expect=Expect(fired=True, sub_domain="storage", culprits=["b"], root_symptom=_DAEMON_CRASHED)),
    # https://github.com/juicedata/juicefs-csi-driver/issues/1640 (the mount pod's daemon OOM-killed; ENOTCONN after)
    RuleCase(title="the OOM killer takes one node's JuiceFS daemon", evidence={
        "b/syslog": ["Jul  6 23:22:49 b kernel: Memory cgroup out of memory: Killed process 48812 (juicefs) "
                     "total-vm:7612040kB, anon-rss:5190244kB, file-rss:10112kB, shmem-rss:0kB, UID:0"],
        "b/applog": ["2025-07-06T23:23:22Z [rank10]: OSError: [Errno 107] Transport endpoint is not connected: "
                     "'/mnt/jfs/datasets/part-03898.arrow'"]},
        context={"nodes": ["a", "b"], "start_time": "2025-07-06T23:00:00Z", "end_time": "2025-07-07T00:00:00Z"},
        expect=Expect(fired=True, sub_domain="storage", culprits=["b"], root_symptom=_DAEMON_CRASHED,
                      demoted=["Host OOM kill"])),
    # https://github.com/seaweedfs/seaweedfs/issues/805 (weed mount's memory growing until the OOM killer took it; the
    # older kernel names only the process that invoked it, systemd the unit it killed)
    RuleCase(title="the mount daemon invokes the OOM killer and its unit is killed", evidence={
        "b/syslog": ["Oct 14 07:47:49 b kernel: [1197949.482696] weed invoked oom-killer: gfp_mask=0x140cca"
                     "(GFP_HIGHUSER_MOVABLE|__GFP_COMP), order=0, oom_score_adj=0",
                     "Oct 14 07:47:50 b systemd[1]: weed-mount.service: Main process exited, code=killed, status=9/KILL"],
        "b/applog": ["2025-10-14T07:47:55Z [rank17]: OSError: [Errno 107] Transport endpoint is not connected: "
                     "'/mnt/weed/datasets/web-mix-v3/shard-01'"]},
        context={"nodes": ["a", "b"], "start_time": "2025-10-14T07:00:00Z", "end_time": "2025-10-14T08:00:00Z"},
        expect=Expect(fired=True, sub_domain="storage", culprits=["b"], root_symptom=_DAEMON_CRASHED,
                      demoted=["Host OOM kill"])),
    # https://github.com/juicedata/juicefs-csi-driver/issues/1648 (the mount pod's container status: OOMKilled at the
    # second the kernel killed its juicefs)
    RuleCase(title="a container status OOMKilled as the kernel killed the mount daemon", evidence={
        "b/syslog": ["Aug 05 08:20:28 b kernel: Memory cgroup out of memory: Killed process 91544 (juicefs) "
                     "total-vm:19877104kB, anon-rss:16612880kB, file-rss:30112kB, shmem-rss:0kB, UID:0"],
        "b/scheduler": ["restarts=3 last={\"terminated\":{\"exitCode\":137,\"finishedAt\":\"2026-08-05T08:20:28Z\","
                        "\"reason\":\"OOMKilled\"}}"],
        "b/applog": ["2026-08-05T08:20:31Z [rank14]: OSError: [Errno 107] Transport endpoint is not connected: "
                     "'/mnt/jfs/checkpoints/step-1200'"]},
        context={"nodes": ["a", "b"], "scheduler": "kubernetes", "start_time": "2026-08-05T07:00:00Z",
                 "end_time": "2026-08-05T09:00:00Z"},
        expect=Expect(fired=True, sub_domain="storage", culprits=["b"], root_symptom=_DAEMON_CRASHED)),
    # https://github.com/longhorn/longhorn/issues/12643 (a leaking instance manager; its volumes' iSCSI sessions drop)
    RuleCase(title="the OOM killer takes one node's Longhorn instance manager", evidence={
        "b/syslog": ["Feb  7 21:14:37 b kernel: [566365.208000] Out of memory: Killed process 86927 (longhorn-instan) "
                     "total-vm:10660660kB, anon-rss:5409428kB, file-rss:284kB, shmem-rss:0kB, UID:0 pgtables:11232kB "
                     "oom_score_adj:999",
                     "Feb  7 21:14:37 b kernel: [566365.618000]  connection3:0: detected conn error (1020)"],
        "b/scheduler": ["2026-02-07T21:14:40Z Warning  OOMKilling  node/b  Out of memory: Killed process 86927 "
                        "(longhorn-instan)"]},
        context={"nodes": ["a", "b"], "scheduler": "kubernetes", "start_time": "2026-02-07T18:00:00Z",
                 "end_time": "2026-02-07T22:00:00Z"},
        expect=Expect(fired=True, sub_domain="storage", culprits=["b"], root_symptom=_DAEMON_CRASHED)),
    RuleCase(title="the same daemon crashes on two nodes of three", evidence={
        f"{n}/syslog": [f"Jul 19 09:36:48 {n} kernel: [2838451.000000] geesefs[41000]: segfault at 0 "
                        "ip 00000000004a3c1f sp 000000c000a8bd70 error 4 in geesefs[400000+1a7d000]"] for n in ("a", "b")},
        context={"nodes": ["a", "b", "c"], "start_time": "2025-07-19T09:00:00Z", "end_time": "2025-07-19T10:00:00Z"},
        expect=Expect(fired=False, culprits=[])),
    # https://github.com/GoogleCloudPlatform/gcsfuse/issues/981 (gcsfuse panicking on a bucket with fine-grained ACLs;
    # the program then finds the mount empty)
    RuleCase(title="the daemon panics on every node, the program finds its mount empty", evidence={
        **{f"{n}/syslog": [f"Mar  2 00:16:45 {n} gcsfuse[2210]: panic: runtime error: invalid memory address or nil "
                           "pointer dereference"] for n in ("a", "b")},
        "a/applog": ["2023-03-02T00:17:31Z FileNotFoundError: [Errno 2] No such file or directory: '/bucket/train'"]},
        context={"nodes": ["a", "b"], "start_time": "2023-03-02T00:00:00Z", "end_time": "2023-03-02T01:00:00Z"},
        expect=Expect(fired=True, sub_domain="storage", culprits=[], root_symptom=_DAEMON_CRASHED)),
])
def filesystem_daemon_crashed_on_one_node(ws: Workspace) -> None:
    crashed = [s for s in ws.select(prefix=_DAEMON_CRASHED, status="interesting") if s.node and (
        not _container_record(s) or _storage_failed_after(ws, s))]
    nodes = {s.node for s in crashed}
    if len(nodes) > 1 and nodes >= set(ws.context.nodes):
        for s in crashed:
            ws.promote(s, "the daemon crashed on every node of the workload: its own bug or the store behind it, no "
                          "node's")
        return
    if len(nodes) != 1:
        return
    node, daemons = crashed[0].node, {d for s in crashed for d in s.value_set("daemon") | s.value_set("killed")}
    daemons |= {d for s in crashed for d in s.value_set("cored") | s.value_set("panicked") | s.value_set("gluster")
                | s.value_set("unit")}
    for s in crashed:
        ws.promote(s, f"{s.node} alone lost its filesystem daemon: its mount answers nothing from then on")
    kills: list[tuple[datetime, str]] = []  # the kernel's kills on the node: when, and which process
    for oom in [*ws.active(prefix="Host OOM kill", node=node), *ws.active(prefix="Kubernetes OOMKilled", node=node)]:
        # the victim the record names; else the process that invoked the OOM killer - when that is the daemon whose
        # end is on record, its own allocation ran out and it was the one killed
        killed = (oom.value_set("process") or {m.group(1) for e in oom.evidence for m in _KILLED_PROCESS.finditer(e.text)}
                  or oom.value_set("comm"))
        kills += [(e.time, m.group(1)) for e in oom.evidence if e.time for m in _KILLED_PROCESS.finditer(e.text)]
        if killed and killed <= daemons:
            ws.demote(oom, "the OOM killer took the node's filesystem daemon, not the workload's processes")
    skew = timedelta(seconds=ws.params.clock_skew_s)
    for status in ws.active(prefix="Kubernetes OOMKilled", node=node):
        # a container status naming no process: the kernel's kills at its end say whose it was
        ended = _container_finished(ws, status)
        near = {p for t, p in kills if ended and abs(t - ended) <= skew}
        if near and near <= daemons:
            ws.demote(status, f"the container was OOM-killed as the kernel killed {', '.join(sorted(near))}: the mount's "
                              "daemon, not the workload")
    since = min((s.first_time for s in crashed if s.first_time), default=None)
    for lost in ws.active(prefix="Network block storage connection lost", node=node):
        if since is not None and lost.first_time is not None and lost.first_time >= since - skew:
            ws.demote(lost, "the daemon that served the node's volumes had died")


def _container_record(crashed: WorkSymptom) -> bool:
    """The daemon's end is known only from its container's (a CSI node plugin, a FUSE pod: rolled out or restarted on
    purpose as well as crashed), not from the process's own crash."""
    return bool(crashed.value_set("pod") or crashed.value_set("named")) and not any(
        crashed.value_set(key) for key in ("daemon", "killed", "cored", "panicked", "unit", "gluster"))


def _storage_failed_after(ws: Workspace, crashed: WorkSymptom) -> bool:
    """The node's own I/O failed (storage) once its daemon's container had ended: its mounts were cut off."""
    since = crashed.first_time
    skew = timedelta(seconds=ws.params.clock_skew_s)
    return since is not None and any(
        s.sub_domain == SubDomain.STORAGE and s.first_time is not None and s.first_time >= since - skew
        for s in ws.active(node=crashed.node) if s.name != _DAEMON_CRASHED)


def _container_finished(ws: Workspace, status: WorkSymptom) -> datetime | None:
    """When a container status says its container ended: its own finishedAt, else its line's own time."""
    for e in status.evidence:
        if match := _FINISHED_AT.search(e.text):
            return datetime.fromisoformat(match.group(1).replace("Z", "+00:00"))
    return None if ws.undated(status) else status.first_time


# A container state's end as the API prints it (JSON or YAML: "finishedAt":"2026-08-05T08:20:28Z", finishedAt: ...)
_FINISHED_AT = re.compile(r"\bfinishedAt\W{1,4}(\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(?:\.\d+)?(?:Z|[+-]\d\d:\d\d))")


# The OOM killer's record of its victim, as the kernel and node-problem-detector's OOMKilling event print it
_KILLED_PROCESS = re.compile(r"Killed process \d+ \(([^)]+)\)")


_FILLED_BY_WORKLOAD = "Local disk filled while the workload ran"


@filter_rule("WorkloadFilledTheDisk", phase=Phase.FILTER, doc=f"""
df's row of a node's local disk at 100% (`{_DISK_FULL}`) after a df of the same mount on the same node showed room,
earlier in the same stream (a job script's df before and after its run): the disk filled while the workload wrote to
it (checkpoints, caches), it was not full when the workload came. The reading becomes `{_FILLED_BY_WORKLOAD}` (storage,
no node blamed: cleaning the job's files frees it). A disk found full with no earlier room on record stays the node's.
""", cases=[
    # https://github.com/facebookresearch/mmf/issues/870 (checkpoints filled the node-local save directory)
    RuleCase(title="the job script's df before and after: 95%, then 100%", evidence={"n1/applog": [
        "2025-01-01T00:00:01Z /dev/nvme0n1p1  1.8T  1.7T  104G  95% /local",
        "2025-01-01T00:10:05Z /dev/nvme0n1p1  1.8T  1.8T     0 100% /local"]},
        context={"nodes": ["n1", "n2"]},
        expect=Expect(fired=True, sub_domain="storage", culprits=[], root_symptom=_FILLED_BY_WORKLOAD)),
    RuleCase(title="another mount had room", evidence={"n1/applog": [
        "2025-01-01T00:00:01Z /dev/nvme0n1p2   98G   61G  37G  63% /scratch",
        "2025-01-01T00:10:05Z /dev/sda2  440G  417G     0 100% /"]},
        context={"nodes": ["n1", "n2"]}, expect=Expect(fired=False, culprits=["n1"])),
])
def workload_filled_the_disk(ws: Workspace) -> None:
    room = [(e.evidence.provenance.origin, e.evidence.provenance.line or 0, str(e.attributes.get("mount")))
            for e in ws.events_of(f"{EventType.CONTEXT}.disk_with_room")]
    if not room:
        return
    for event in [e for e in ws.events_of(EventType.NODE_BAD) if e.symptom == _DISK_FULL]:
        origin, line, mount = event.evidence.provenance.origin, event.evidence.provenance.line or 0, \
            str(event.attributes.get("mount"))
        if any(o == origin and at < line and m == mount for o, at, m in room):
            ws.reread(event, _FILLED_BY_WORKLOAD, f"{mount} had room earlier in the same output: the workload's "
                                                  "writes filled it")


# A node's own reports of a full local disk: df's row at 100%, systemd-journald refused space.
_LOCAL_DISK_FULL = (_DISK_FULL, "Node's journal out of space")


@filter_rule("SpillFilledTheDisk", phase=Phase.FILTER, after=("WorkloadFilledTheDisk",), doc=f"""
Ray spills objects that do not fit in its object store to the node's local disk and reports each batch ('Spilled 8192
MiB, 64 objects, ...'). A node's local disk found full (df at 100%, journald without space) after the workload had
spilled to it, in the same run, was filled by the workload's spilling: the reading becomes `{_FILLED_BY_WORKLOAD}`
(storage, no node blamed: the job needs more disk for its spills, or less data in flight). A full disk with no spill
before it stays the node's.
""", cases=[
    # https://github.com/osudrl/apex/issues/31 (PPO on Ray: spills, then the IO worker's ENOSPC and a full root disk)
    RuleCase(title="the head node spilled, then its disk was full", evidence={
        "n1/applog": ["2025-01-01T00:10:00Z INFO worker.py:1404 -- (raylet) Spilled 16384 MiB, 128 objects, write "
                      "throughput 398 MiB/s.",
                      "2025-01-01T00:20:00Z An unexpected internal error occurred while the IO worker was spilling "
                      "objects: [Errno 28] No space left on device"],
        "n1/syslog": ["Jan  1 00:20:05 n1 systemd-journald[412]: Failed to write entry (21 items, 611 bytes), ignoring: "
                      "No space left on device"]},
        context={"nodes": ["n1", "n2"], "scheduler_state": "FAILED"},
        expect=Expect(fired=True, sub_domain="storage", culprits=[])),
    RuleCase(title="a full disk on a node that spilled nothing", evidence={
        "n1/applog": ["2025-01-01T00:20:00Z OSError: [Errno 28] No space left on device"],
        "n1/syslog": ["Jan  1 00:20:05 n1 systemd-journald[412]: Failed to write entry (21 items, 611 bytes), ignoring: "
                      "No space left on device"]},
        context={"nodes": ["n1", "n2"], "scheduler_state": "FAILED"},
        expect=Expect(fired=False, sub_domain="storage", culprits=["n1"])),
])
def spill_filled_the_disk(ws: Workspace) -> None:
    spilled: dict[str, list[datetime]] = {}
    for fact in ws.events_of(f"{EventType.CONTEXT}.ray_spill"):
        if fact.node and fact.time is not None:
            spilled.setdefault(fact.node, []).append(fact.time)
    reports = [*ws.events_of(EventType.NODE_BAD), *ws.events_of(EventType.NODE_INTERESTING)]
    for event in [e for e in reports if e.symptom in _LOCAL_DISK_FULL and e.node in spilled]:
        if event.time is not None and min(spilled[event.node or ""]) <= event.time:
            ws.reread(event, _FILLED_BY_WORKLOAD, "the workload's Ray objects were spilled to this node's disk before "
                                                  "it was full")


@refiner("UndatedDiskSnapshot", phase=Phase.REFINE_EARLY, doc=f"""
`{_DISK_FULL}` read from df's table or a program's warning without a time of its own (a snapshot printed by a
script or pasted after the job) says what the disk held when it was printed, not when the failure began: while
another root candidate has a time of its own, the snapshot is demoted to supporting evidence instead of competing
with it. A dated snapshot keeps its place (a job script's df before the failure).
""", cases=[
    RuleCase(title="a df table pasted after the container failed", evidence={
        "n1/applog": ["2025-01-01T00:10:00Z slurmstepd: error: pyxis:     Write on output file failed because No space "
                      "left on device",
                      "2025-01-01T00:10:00Z slurmstepd: error: spank: required plugin spank_pyxis.so: task_init() "
                      "failed with rc=-1"],
        "n2/scheduler": ["$ df -h /", "/dev/nvme0n1p1  492G  492G     0 100% /"]},
        context={"nodes": ["n1", "n2"]},
        expect=Expect(fired=True, culprits=[], demoted=[_DISK_FULL])),
    RuleCase(title="the job script's df before the failure", evidence={"n1/applog": [
        "2025-01-01T00:09:00Z /dev/sda2  440G  417G     0 100% /",
        "2025-01-01T00:10:00Z OSError: [Errno 28] No space left on device: '/tmp/cache/part_1.bin'"]},
        context={"nodes": ["n1", "n2"]},
        expect=Expect(fired=False, sub_domain="storage", culprits=["n1"], root_symptom=_DISK_FULL)),
])
def undated_disk_snapshot(ws: Workspace) -> None:
    if not any(not ws.undated(s) for s in ws.active(role="root") if s.name != _DISK_FULL):
        return
    for snapshot in ws.active(prefix=_DISK_FULL):
        if ws.undated(snapshot):
            ws.demote(snapshot, "a snapshot without a time of its own: it supports, it does not begin the failure")


_MOUNT_MISSING = "Shared filesystem missing on the node"
_NOT_ATTACHED = "Volume could not be attached"
# The kubelet's wait for a pod's volumes to be attached and mounted ('Unable to (attach or) mount volumes ...')
_VOLUME_WAIT = re.compile(r"Unable to (?:attach or )?mount volumes\b")


@refiner("DirectoryMissingOnSomeNodes", phase=Phase.REFINE, doc=f"""
slurmstepd could not enter the job's working directory, or the automounter could not mount the shared export, or the
kubelet could not mount the pod's CSI volume, on some nodes of the allocation but not on others (the others ran in it): the shared filesystem is not mounted on those
nodes, and `{_MOUNT_MISSING}` there becomes a root candidate that blames them. The automounter or the kubelet's CSI
volume failing on every node is the file server's or the volume's (promoted; no node is blamed, rule SystemicGuard). slurmstepd's chdir failing on every node is
a directory missing for all (a container's work directory that exists only inside the container, a mistyped path):
not promoted. On a node whose mount failed while others have it, the filesystem client's errors logged up to the failure
(LustreError, LNet) are why it failed there: they are demoted, and the missing mount blames the node; so is that node's
program not finding a file under the directory the mount would have provided. A node where the volume's backend failed
the mount (`{_BACKEND_FAILED}`) is not missing it by itself: the kubelet's wait there is that failure's echo; nor is a
node whose kubelet waited for a pod's volumes while a volume could not be attached (`{_NOT_ATTACHED}`, wherever its
record was logged): the attach, not the node, is why.
""", cases=[
    # https://github.com/kubernetes/kubernetes/issues/45726 (a rescheduled pod's EBS volume still attached elsewhere)
    RuleCase(title="the kubelet waits for a volume the controller could not attach", evidence={
        "a/scheduler": ['Jul 27 08:11:30 a kube-controller-manager[901]: W0727 08:11:30.000000     901 event.go:1] '
                        'Failed to attach volume "pvc-1122" on node "b" with: Error attaching EBS volume "vol-1122" to '
                        'instance "i-1122": VolumeInUse: vol-1122 is already attached to an instance'],
        "b/syslog": ['Jul 27 08:12:08 b kubelet[1288]: E0727 08:12:08.551002    1288 kubelet.go:1556] Unable to mount '
                     'volumes for pod "trainer-2_ml(7c1e)": timeout expired waiting for volumes to attach/mount for pod '
                     '"ml"/"trainer-2". list of unattached/unmounted volumes=[shard-cache]']},
        context={"nodes": ["a", "b"], "scheduler": "kubernetes", "start_time": "2017-07-27T08:00:00Z",
                 "end_time": "2017-07-27T09:00:00Z"},
        expect=Expect(fired=False, sub_domain="storage", culprits=[])),
    # https://github.com/marbits-icm/marbits-public/issues/209
    RuleCase(title="one node of three cannot enter the run directory", evidence={
        "c/applog": ["2025-01-01T00:00:05Z slurmstepd: error: couldn't chdir to `/mnt/smart/runs/a': No such file or "
                     "directory: going to /tmp instead"],
        "a/applog": ["2025-01-01T00:00:20Z srun: error: c: task 2: Exited with exit code 1"]},
        context={"nodes": ["a", "b", "c"]},
        expect=Expect(fired=True, sub_domain="storage", culprits=["c"], root_symptom=_MOUNT_MISSING)),
    RuleCase(title="Lustre's mount failed on one node at boot; its LNet errors are why", evidence={
        "b/syslog": ["Jan  1 00:01:25 b kernel: LNetError: 120-3: Refusing connection from 10.6.0.204 for "
                     "10.6.0.204@tcp: No matching NI",
                     "Jan  1 00:01:26 b mount: mount.lustre: mount 10.6.0.204@tcp:/fsx at /fsx failed: Input/output error"],
        "a/applog": ["2025-01-01T00:10:20Z srun: error: b: task 1: Exited with exit code 2"]},
        context={"nodes": ["a", "b"]},
        expect=Expect(fired=True, sub_domain="storage", culprits=["b"], root_symptom=_MOUNT_MISSING,
                      demoted=["Parallel filesystem client error"])),
    # https://cloud.google.com/managed-lustre/docs/troubleshooting (the Lustre module refused under Secure Boot)
    RuleCase(title="Lustre's mount failed on one node; its ranks find no dataset under it", evidence={
        "b/syslog": ["Jan  1 00:01:26 b mount[1183]: mount.lustre: mount 10.130.0.5@tcp:/lfs01 at /lustre failed: No "
                     "such device"],
        "b/applog": ["2025-01-01T00:10:20Z [rank16]: FileNotFoundError: [Errno 2] No such file or directory: "
                     "'/lustre/datasets/c4/train_00000.bin'"]},
        context={"nodes": ["a", "b"]},
        expect=Expect(fired=True, sub_domain="storage", culprits=["b"], root_symptom=_MOUNT_MISSING,
                      demoted=["Python exception"])),
    RuleCase(title="Lustre's mount failed on one node; its program missed a file elsewhere before", evidence={
        "b/syslog": ["Jan  1 00:01:26 b mount[1183]: mount.lustre: mount 10.130.0.5@tcp:/lfs01 at /lustre failed: No "
                     "such device"],
        "b/applog": ["2025-01-01T00:01:20Z [rank16]: FileNotFoundError: [Errno 2] No such file or directory: "
                     "'/home/u/config.yaml'"]},
        context={"nodes": ["a", "b"]}, expect=Expect(fired=True, active=["Python exception"])),
    # https://github.com/longhorn/longhorn/issues/7254 (a volume that failed its check: the kubelet's wait is its echo)
    RuleCase(title="the volume's backend failed the mount; the kubelet's wait timed out on that node", evidence={
        "b/syslog": [
            'Jan  1 00:04:11 b kubelet[2211]: E0101 00:04:11.120331    2211 kubelet.go:1860] "Unable to attach or mount '
            'volumes for pod; skipping pod" err="unmounted volumes=[cache], unattached volumes=[], failed to process '
            'volumes=[]: timed out waiting for the condition" pod="ml/trainer-1"'],
        "b/scheduler": [
            "  Warning  FailedMount  67s (x13 over 11m)  kubelet  MountVolume.MountDevice failed for volume \"pvc-d88f\" "
            ": rpc error: code = Internal desc = 'fsck' found errors on device /dev/longhorn/pvc-d88f but could not "
            "correct them"]},
        context={"nodes": ["a", "b"]},
        expect=Expect(fired=False, sub_domain="storage", culprits=[], root_symptom=_BACKEND_FAILED)),
    # https://github.com/kubernetes-sigs/aws-efs-csi-driver/issues/325 (an EFS volume that mounted on no node)
    RuleCase(title="the pods' CSI volume mounts on no node", evidence={
        f"n{i}/syslog": [f"Jan  1 00:22:03 n{i} kubelet[3811]: E0101 00:22:03.113801    3811 kubelet.go:1684] Unable to "
                         f"attach or mount volumes for pod \"sft-{i}_ml\": unmounted volumes=[efs], unattached "
                         "volumes=[efs]: timed out waiting for the condition"] for i in (1, 2)},
        context={"nodes": ["n1", "n2"]},
        expect=Expect(fired=True, sub_domain="storage", culprits=[], root_symptom=_MOUNT_MISSING)),
    RuleCase(title="a container's work directory, missing on every node", evidence={
        f"n{i}/applog": ["2025-01-01T00:00:05Z slurmstepd: error: couldn't chdir to `/workspace': No such file or "
                         "directory: going to /tmp instead"] for i in (1, 2)},
        context={"nodes": ["n1", "n2"]}, expect=Expect(fired=False)),
])
def directory_missing_on_some_nodes(ws: Workspace) -> None:
    # a job directory of slurmd's spool exists on the batch node only: no mount is missing (SlurmstepdChdirToSpool)
    failed_by_backend = {s.node for s in ws.active(prefix=_BACKEND_FAILED)}
    # a pod's volume that could not be attached is why the kubelet waited for it, whichever node's file holds the record
    not_attached = bool(ws.active(prefix=_NOT_ATTACHED))
    missing = [s for s in ws.select(prefix=_MOUNT_MISSING, status="interesting")
               if s.node not in failed_by_backend and not all(_SPOOL_JOB_DIRECTORY.search(e.text) for e in s.evidence)
               and not (not_attached and all(_VOLUME_WAIT.search(e.text) for e in s.evidence))]
    nodes = {s.node for s in missing if s.node}
    shared_mount = any(_SHARED_MOUNT_FAILED.search(e.text) for s in missing for e in s.evidence)
    if nodes and (nodes < set(ws.context.nodes) or shared_mount):
        for s in missing:
            ws.promote(s, f"the job's directory is missing on {', '.join(sorted(nodes))} only")
    if nodes and nodes < set(ws.context.nodes):
        _client_errors_of_the_mount(ws, missing)
        _files_missing_under_the_mount(ws, missing)


# The mounts every node makes from one service (the automounter's export, the kubelet's CSI volume): failing on every
# node, they are that service's failure, not the job's directory.
_SHARED_MOUNT_FAILED = re.compile(r"automount|MountVolume\.|Unable to attach or mount volumes")
# Where a report of a missing mount names the directory: mount.lustre's 'at <dir> failed', automount's 'on <dir>',
# slurmstepd's 'couldn't chdir to `<dir>''.
_MISSING_DIRECTORY = re.compile(r" at (/\S+) failed: | on (/\S+)|couldn't chdir to `([^'\n]+)'")
_SPOOL_JOB_DIRECTORY = re.compile(r"couldn't chdir to `/[^'\n]*spool[^'\n]*/job\d+")
# A Python error naming the path it did not find ('[Errno 2] No such file or directory: '/lustre/x'').
_FILE_NOT_FOUND = re.compile(r"No such file or directory: '(/[^'\n]+)'")


def _files_missing_under_the_mount(ws: Workspace, missing: list[WorkSymptom]) -> None:
    """A node's own 'No such file or directory' for a path under the directory its missing mount names is that mount."""
    for s in missing:
        dirs = {d.rstrip("/") for e in s.evidence for m in _MISSING_DIRECTORY.finditer(e.text) for d in m.groups() if d}
        for error in ws.active(node=s.node, prefix="Python exception"):
            paths = [m.group(1) for e in error.evidence for m in _FILE_NOT_FOUND.finditer(e.text)]
            if any(p == d or p.startswith(d + "/") for p in paths for d in dirs):
                ws.demote(error, f"its path lies under {sorted(dirs)[0]}, which is not mounted on {s.node}")


def _client_errors_of_the_mount(ws: Workspace, missing: list[WorkSymptom]) -> None:
    """A filesystem client's errors on a node whose mount failed, from before the failure, are why it failed there."""
    skew = timedelta(seconds=ws.params.clock_skew_s)
    for s in missing:
        if s.first_time is None or ws.undated(s):
            continue
        for error in ws.active(node=s.node, prefix="Parallel filesystem client error"):
            if error.first_time is not None and error.first_time <= s.first_time + skew:
                ws.demote(error, f"the client's errors as the mount failed on {s.node}, which the other nodes have")


# A container runtime unpacking an image into its store on the node.
_RUNTIME_STORE = re.compile(r"failed to (?:extract|register) layer")
_PULL_FAILED = re.compile(r"ErrImagePull|ImagePullBackOff|[Ff]ailed to pull (?:and unpack )?image")


@refiner("FullImageStoreFailsThePull", phase=Phase.REFINE, doc=f"""
A node whose container runtime could not unpack an image into its store (`{_DISK_FULL}` read from 'failed to extract
layer ...: no space left on device') cannot pull the workload's image:
the image-pull failures of that node (ErrImagePull, ImagePullBackOff), and those other nodes' listings report for a
pod there (kubectl's wide output names the node), are that full disk, not the image's reference or credentials.
They are demoted; the full disk stays the root candidate and blames the node.
""", cases=[
    # https://github.com/skypilot-org/skypilot/pull/3721 (a GKE node's boot disk full of images)
    RuleCase(title="the pull fails on the node whose image store is full", evidence={
        "b/syslog": ['Jan  1 00:05:00 b containerd[1593]: level=error msg="PullImage \\"gpu:latest\\" failed" '
                     'error="failed to extract layer sha256:8b1f: write /var/lib/containerd/io.containerd.snapshotter'
                     '.v1.overlayfs/snapshots/4411/fs/usr/lib/libcublasLt.so.12: no space left on device: unknown"'],
        "a/scheduler": ["w-1       0/1     ImagePullBackOff   0          22m   10.88.3.22   b"]},
        context={"nodes": ["a", "b"]},
        expect=Expect(fired=True, sub_domain="storage", culprits=["b"], demoted=["Container image or start error"])),
    RuleCase(title="a pull that fails on another node", evidence={
        "b/syslog": ['Jan  1 00:05:00 b containerd[1593]: level=error msg="PullImage \\"gpu:latest\\" failed" '
                     'error="failed to extract layer sha256:8b1f: write /var/lib/containerd/io.containerd.snapshotter'
                     '.v1.overlayfs/snapshots/4411/fs/usr/lib/libcublasLt.so.12: no space left on device: unknown"'],
        "a/scheduler": ["w-0       0/1     ImagePullBackOff   0          22m   10.88.3.21   a"]},
        context={"nodes": ["a", "b"]}, expect=Expect(fired=False)),
])
def full_image_store_fails_the_pull(ws: Workspace) -> None:
    full = {s.node for s in ws.active(prefix=_DISK_FULL)
            if s.node and any(_RUNTIME_STORE.search(e.text) for e in s.evidence)}
    for s in ws.active(prefix="Container image or start error"):
        pulls = [e.text for e in s.evidence if _PULL_FAILED.search(e.text)]
        node = next((n for n in sorted(full) if n == s.node or any(re.search(rf"\b{re.escape(n)}\b", t)
                                                                   for t in pulls)), None)
        if pulls and node:
            ws.demote(s, f"{node}'s image store was full: the image could not be pulled there")


# A path under the node's own temporary directories (FHS: /tmp, /var/tmp), which no other node mounts.
_NODE_TMP_PATH = re.compile(r"(?:^|[\s'\"(=:,])/(?:var/)?tmp/")


@filter_rule("NoSpaceInNodeTmp", phase=Phase.FILTER, after=("PythonExceptionFamily",), doc=f"""
ENOSPC writing under /tmp or /var/tmp - a node's own temporary directories (the Filesystem Hierarchy Standard's
local scratch, a local disk or the node's tmpfs, never a shared mount) - reported on one node of several that ran the
same work: that node's local disk was full, not the job's target filesystem. The reports become `{_DISK_FULL}` on that
node (node blamed). Reported on every node, or on a path elsewhere, it stays `No space left on device` (the job's own
use, or a shared filesystem full).
""", cases=[
    # https://github.com/torch/distro/issues/247 (nvcc's temporary file in a full /tmp)
    RuleCase(title="one node's /tmp full while it built an extension", evidence={
        "n2/applog": ["2025-01-01T00:10:00Z /tmp/tmpxft_0003a8b9_00000000-4_multi_tensor_adam.cudafe1.stub.c:1046:27: "
                      "fatal error: error writing to /tmp/cc2mYx0T.s: No space left on device"],
        "n1/applog": ["2025-01-01T00:09:00Z step 10 loss 2.1"]},
        context={"nodes": ["n1", "n2"]},
        expect=Expect(fired=True, sub_domain="storage", culprits=["n2"], root_symptom=_DISK_FULL)),
    RuleCase(title="every node's /tmp filled by the job", evidence={
        f"n{i}/applog": [f"2025-01-01T00:10:0{i}Z OSError: [Errno 28] No space left on device: '/tmp/cache/part_{i}.bin'"]
        for i in (1, 2)},
        context={"nodes": ["n1", "n2"]}, expect=Expect(fired=False, sub_domain="storage", culprits=[])),
    RuleCase(title="a shared checkpoint directory full", evidence={"n2/applog": [
        "2025-01-01T00:10:00Z OSError: [Errno 28] No space left on device: '/lustre/ckpt/step_100/optim.pt'"]},
        context={"nodes": ["n1", "n2"]}, expect=Expect(fired=False, sub_domain="storage", culprits=[])),
])
def no_space_in_node_tmp(ws: Workspace) -> None:
    full = [e for e in ws.events_of(EventType.NODE_BAD) if e.symptom == "No space left on device" and e.node]
    local = [e for e in full if _NODE_TMP_PATH.search(e.evidence.text)]
    nodes = {e.node for e in full}
    if len(ws.context.nodes) < 2 or len(nodes) != 1 or not local:
        return
    for event in local:
        ws.reread(event, _DISK_FULL, f"ENOSPC in {event.node}'s own /tmp, on no other node: its local disk was full")


@refiner("NodeDiskFullAlone", phase=Phase.REFINE, doc="""
A node's own system logging that its disk is full (systemd-journald unable to write its journal for want of space)
says a filesystem of that node filled, not whose writes filled it. When that node alone of a workload that did not
complete logged it, its disk differs from its peers' (stale data left before the job, a smaller disk): the report,
`Node's journal out of space`, becomes a root candidate (storage, that node). On several nodes (the job's own spilling
filled every disk) or in a completed workload it stays context.
""", cases=[
    # systemd-journald's message when its journal's filesystem has no room (src/journal/journald-server.c); a job's
    # spill to that node failing at the same time
    RuleCase(title="one node's journal has no room, the job's spill fails", evidence={
        "n2/syslog": ["Jan  1 00:10:30 n2 systemd-journald[631]: Failed to open system journal: No space left on device"],
        "n1/applog": ["2025-01-01T00:10:18Z OSError: [Errno 28] No space left on device"]},
        context={"nodes": ["n1", "n2"], "scheduler_state": "FAILED"},
        expect=Expect(fired=True, sub_domain="storage", culprits=["n2"])),
    RuleCase(title="every node's journal has no room", evidence={
        f"{n}/syslog": [f"Jan  1 00:10:30 {n} systemd-journald[631]: Failed to open system journal: No space left on "
                        "device"] for n in ("n1", "n2")},
        context={"nodes": ["n1", "n2"], "scheduler_state": "FAILED"}, expect=Expect(fired=False, culprits=[])),
])
def node_disk_full_alone(ws: Workspace) -> None:
    promote_on_one_node(ws, "Node's journal out of space", "logged its own disk full: its disk differs from its "
                                                           "peers'")


_SHM_FULL = "Shared memory (/dev/shm) exhausted"
_HARDWARE_MEMORY_FAILURE = "Machine check (uncorrected)"
# Faults of a filesystem every node mounts: a file mapped from it fails on any node, not only where the fault was seen.
_SHARED_FILESYSTEM_FAULTS = tuple(lost for lost, _ in _STALLS) + ("Parallel filesystem client error",)


_KILLED = "Worker killed by signal"
# The capture groups of the catalog's signal-exit forms (torchelastic, DeepSpeed, Open MPI, launchers).
_SIGNAL_GROUPS = ("signal", "signal_name", "ds_signal", "mpi_signal", "launcher_signal")
DOCKER_DEFAULT_SHM_BYTES = 64 * 2**20
_SIZE = re.compile(r"(\d+(?:\.\d+)?)([KMGT]?)")  # df's 64M, or a count of bytes (Ray's warning)
_CRASHED = "Process crashed (segfault)"


def _bytes(size: str) -> float:
    found = _SIZE.fullmatch(size)
    return float(found.group(1)) * 1024 ** "_KMGT".index(found.group(2) or "_") if found else float("inf")


# ShellReportedCrash's groups that keep a crash's signal name (SEGV, BUS, ILL)
_CRASH_SIGNAL_GROUPS = ("crash_signal", "spawn_signal", "mpt_signal", "gfortran_signal")


def _bus_error(event: Event) -> bool:
    """A worker's death or a crash report that names SIGBUS (signal 7)."""
    if event.symptom == _CRASHED:
        return "BUS" in (event.attributes.get(group) for group in _CRASH_SIGNAL_GROUPS) or \
            event.attributes.get("tf_signal") == "7" or \
            bool(event.attributes.get("python_bus_error") or event.attributes.get("shell_bus_error"))
    return event.symptom == _KILLED and any(str(event.attributes.get(group)) == "7" for group in _SIGNAL_GROUPS)


@filter_rule("BusErrorInADefaultShm", phase=Phase.FILTER, doc=f"""
A worker killed by SIGBUS (torchelastic's exitcode -7, DeepSpeed's 'exits with return code = -7', 'Signal 7 (SIGBUS)',
a crash handler's '*** SIGBUS received', faulthandler's 'Fatal Python error: Bus error') where df or Ray's start-up
warning shows the job's /dev/shm at Docker's default of 64 MB or less: a process touched a page of a shared-memory
segment (NCCL's, a DataLoader's) that the full tmpfs could not back, the documented failure of a container started
without --shm-size or ipc=host. The kill becomes `{_SHM_FULL}` (configuration, no node). Without a /dev/shm that
small the signal stays a worker's death that something else must explain.
""", cases=[
    # https://github.com/InternLM/xtuner/issues/80 (df's 64M /dev/shm, then torchelastic's exitcode -7)
    RuleCase(title="DeepSpeed's workers die of SIGBUS in containers with the default /dev/shm", evidence={
        "n1/applog": ["2025-01-01T00:00:01Z shm              64M     0   64M   0% /dev/shm",
                      "2025-01-01T00:10:00Z [ERROR] [launch.py:324:sigkill_handler] ['/usr/bin/python', '-u', "
                      "'train.py', '--local_rank=1'] exits with return code = -7"]},
        expect=Expect(fired=True, sub_domain="configuration", culprits=[], root_symptom=_SHM_FULL)),
    # https://github.com/vllm-project/vllm/issues/789 (Ray's warning of a 64 MB /dev/shm, then a worker's SIGBUS)
    RuleCase(title="a Ray worker's crash handler reports SIGBUS where Ray found a 64 MB /dev/shm", evidence={
        "n1/applog": ["2025-01-01T00:00:01Z 2025-01-01 00:00:01,283\tWARNING services.py:1832 -- WARNING: The object "
                      "store is using /tmp instead of /dev/shm because /dev/shm has only 67108864 bytes available.",
                      "2025-01-01T00:10:00Z (RayWorker pid=4711) *** SIGBUS received at time=1692322557 on cpu 5 ***",
                      "2025-01-01T00:10:00Z (RayWorker pid=4711) Fatal Python error: Bus error"]},
        expect=Expect(fired=True, sub_domain="configuration", culprits=[], root_symptom=_SHM_FULL)),
    RuleCase(title="a segfault where Ray found a 64 MB /dev/shm", evidence={
        "n1/applog": ["2025-01-01T00:00:01Z 2025-01-01 00:00:01,283\tWARNING services.py:1832 -- WARNING: The object "
                      "store is using /tmp instead of /dev/shm because /dev/shm has only 67108864 bytes available.",
                      "2025-01-01T00:10:00Z (RayWorker pid=4711) *** SIGSEGV received at time=1692322557 on cpu 5 ***"]},
        expect=Expect(fired=False, absent=[_SHM_FULL])),
    RuleCase(title="a SIGBUS where /dev/shm is large", evidence={
        "n1/applog": ["2025-01-01T00:00:01Z tmpfs           252G     0  252G   0% /dev/shm",
                      "2025-01-01T00:10:00Z [ERROR] [launch.py:324:sigkill_handler] ['/usr/bin/python', '-u', "
                      "'train.py', '--local_rank=1'] exits with return code = -7"]},
        expect=Expect(fired=False)),
])
def bus_error_in_a_default_shm(ws: Workspace) -> None:
    sizes = [_bytes(str(e.attributes.get("size", ""))) for e in ws.events_of(f"{EventType.CONTEXT}.shm_size")]
    if not sizes or max(sizes) > DOCKER_DEFAULT_SHM_BYTES:
        return
    for event in [e for e in ws.events_of(EventType.NODE_BAD) if _bus_error(e)]:
        ws.reread(event, _SHM_FULL, f"SIGBUS where /dev/shm is {max(sizes) / 2**20:.0f} MB, Docker's default: "
                                    "a shared-memory page the full tmpfs could not back")


_CLIENT_FAILED = "Node's filesystem client failed"
_POD_VOLUMES = "/var/lib/kubelet/pods/"  # the kubelet's directory of each pod's own volumes
_LOOPBACK = re.compile(r"127(?:\.\d{1,3}){3}|localhost|::1")
_CLIENT_HUNG = "Task hung in a shared filesystem client"


@filter_rule("FuseDaemonHungOnOneNode", phase=Phase.FILTER, doc=f"""
A task blocked with FUSE's frames on its stack (request_wait_answer [fuse]) waits for the FUSE daemon of its own node:
the kernel hands every request on the mount to that user-space process (s3fs, goofys, gcsfuse, mount-s3 ...), whatever
store is behind it. On one node of the workload alone, it is that node's daemon that stopped answering: the frames are
read as `{_CLIENT_FAILED}` (storage, that node blamed). On several nodes the store behind the daemons is as likely,
and they stay `{_CLIENT_HUNG}`.
""", cases=[
    # https://github.com/s3fs-fuse/s3fs-fuse/issues/2422 (one node's s3fs stopped answering; its readers hung)
    RuleCase(title="one node's tasks blocked on its FUSE daemon", evidence={"b/syslog": [
        "Jan  1 00:10:00 b kernel: INFO: task python3.10:118233 blocked for more than 120 seconds.",
        "Jan  1 00:10:00 b kernel:  request_wait_answer+0x125/0x1f0 [fuse]"]},
        context={"nodes": ["a", "b"]},
        expect=Expect(fired=True, sub_domain="storage", culprits=["b"], root_symptom=_CLIENT_FAILED)),
    RuleCase(title="both nodes' tasks blocked on their FUSE daemons", evidence={f"{n}/syslog": [
        f"Jan  1 00:10:00 {n} kernel: INFO: task python3.10:118233 blocked for more than 120 seconds.",
        f"Jan  1 00:10:00 {n} kernel:  request_wait_answer+0x125/0x1f0 [fuse]"] for n in "ab"},
        context={"nodes": ["a", "b"]},
        expect=Expect(fired=False, culprits=[])),
])
def fuse_daemon_hung_on_one_node(ws: Workspace) -> None:
    frames = [e for e in ws.events_of(EventType.NODE_INTERESTING)
              if e.symptom == _CLIENT_HUNG and e.value_set("fs_module") == {"fuse"}]
    if len({ws.canonical_node(e.node) for e in frames}) != 1:
        return
    for event in frames:
        ws.reread(event, _CLIENT_FAILED, "a task waited on the node's own FUSE daemon, and on no other node")


@filter_rule("NfsThroughTheNodesOwnProxy", phase=Phase.FILTER, doc=f"""
An NFS server at a loopback address is a proxy on the node itself: Amazon EFS's mount helper mounts with TLS through a
stunnel (or efs-proxy) listening on 127.0.0.1, which carries the node's NFS traffic to the file system. The kernel
giving up on '127.0.0.1' ('nfs: server 127.0.0.1 not responding, timed out'), or retrying it ('still trying') with no
'server 127.0.0.1 OK' after, on one node of the workload alone is that node's proxy gone or wedged, not the file
system: it is read as `{_CLIENT_FAILED}` (storage, that node blamed). On several nodes at once the file system behind
the proxies is as likely, and the reading stands.
""", cases=[
    # https://github.com/aws/efs-utils/issues/125 (the TLS tunnel died; the node's EFS mount hung)
    RuleCase(title="one node's EFS TLS tunnel", evidence={"b/syslog": [
        "Jan  1 00:10:00 b kernel: [108301.000000] nfs: server 127.0.0.1 not responding, timed out"]},
        context={"nodes": ["a", "b"]},
        expect=Expect(fired=True, sub_domain="storage", culprits=["b"], root_symptom=_CLIENT_FAILED)),
    # https://github.com/aws/efs-utils/issues/125 (the same, as the kernel first reports it)
    RuleCase(title="one node retrying its tunnel, never answered", evidence={"b/syslog": [
        "Jan  1 00:10:00 b kernel: [108301.000000] nfs: server 127.0.0.1 not responding, still trying"]},
        context={"nodes": ["a", "b"]},
        expect=Expect(fired=True, sub_domain="storage", culprits=["b"], root_symptom=_CLIENT_FAILED)),
    RuleCase(title="one node's tunnel back after a stall", evidence={"b/syslog": [
        "Jan  1 00:10:00 b kernel: [108301.000000] nfs: server 127.0.0.1 not responding, still trying",
        "Jan  1 00:11:00 b kernel: [108361.000000] nfs: server 127.0.0.1 OK"]},
        context={"nodes": ["a", "b"]},
        expect=Expect(fired=False, culprits=[])),
    RuleCase(title="every node's tunnel at once", evidence={f"{n}/syslog": [
        f"Jan  1 00:10:00 {n} kernel: [108301.000000] nfs: server 127.0.0.1 not responding, timed out"] for n in "ab"},
        context={"nodes": ["a", "b"]},
        expect=Expect(fired=False, culprits=[])),
    RuleCase(title="an NFS server by name", evidence={"b/syslog": [
        "Jan  1 00:10:00 b kernel: [108301.000000] nfs: server nfs-home.cluster.local not responding, timed out"]},
        context={"nodes": ["a", "b"]},
        expect=Expect(fired=False, culprits=[])),
])
def nfs_through_the_nodes_own_proxy(ws: Workspace) -> None:
    def loopback(event: Event) -> bool:
        return any(_LOOPBACK.fullmatch(server) for server in event.value_set("server"))

    recovered = {ws.canonical_node(e.node) for e in ws.events if e.rule == "NfsServerOk" and loopback(e)}
    local = [e for e in ws.events if loopback(e) and (e.rule == "NfsTimedOut" or (
        e.rule == "NfsStillTrying" and ws.canonical_node(e.node) not in recovered))]
    if len({ws.canonical_node(e.node) for e in local}) != 1:
        return
    for event in local:
        ws.reread(event, _CLIENT_FAILED, "the NFS server is the node's own loopback proxy (a TLS tunnel): the node's "
                                         "client side failed")


@filter_rule("PodVolumeIsThePods", phase=Phase.FILTER, doc=f"""
A path answering ENOTCONN is a FUSE mount whose daemon is gone. Under {_POD_VOLUMES}<uid>/volumes/ it is one pod's own
volume (a CSI ephemeral volume served by the pod's sidecar, as GKE's gcsfuse sidecar): its daemon lived and died with
that pod, and the node's other mounts are not touched, so it is not `{_CLIENT_FAILED}` and no node is blamed for it;
what the pod's containers report about the volume stands.
""", cases=[
    # https://github.com/GoogleCloudPlatform/gcs-fuse-csi-driver/issues/534 (the pod's gcsfuse sidecar crashed)
    RuleCase(title="a pod's sidecar-served volume", evidence={"n1/scheduler": [
        "2025-01-01T00:10:00Z Warning  Failed  kubelet  Error: failed to generate container spec: failed to stat "
        "\"/var/lib/kubelet/pods/4383ae58/volumes/kubernetes.io~csi/gcs-fuse-csi-ephemeral/mount\": stat "
        "/var/lib/kubelet/pods/4383ae58/volumes/kubernetes.io~csi/gcs-fuse-csi-ephemeral/mount: transport endpoint is "
        "not connected"]},
        expect=Expect(fired=True, culprits=[], absent=[_CLIENT_FAILED])),
    # https://github.com/pytorch/ci-infra/pull/876 (a node's hostPath FUSE mount, its rclone daemon OOM-killed)
    RuleCase(title="a node's own mount", evidence={"n1/scheduler": [
        "2025-01-01T00:10:00Z Warning  Failed  pod/ft-eval-1  Error: failed to generate container spec: failed to stat "
        "\"/mnt/hf_cache\": stat /mnt/hf_cache: transport endpoint is not connected"]},
        expect=Expect(fired=False, sub_domain="storage", culprits=["n1"])),
])
def pod_volume_is_the_pods(ws: Workspace) -> None:
    for event in ws.events_of(EventType.NODE_BAD):
        if event.symptom == _CLIENT_FAILED and any(path.startswith(_POD_VOLUMES)
                                                   for path in event.value_set("disconnected_path")):
            ws.drop(event, "the disconnected mount is one pod's own volume, served from that pod, not the node's")


# Within this many seconds, SIGBUS deaths of several processes of one node are one event of their shared memory.
SHARED_BUS_ERROR_S = 60


@filter_rule("BusErrorOnSeveralLocalRanks", phase=Phase.FILTER, after=("BusErrorInADefaultShm",), doc=f"""
SIGBUS is what a process gets when it touches a page of a shared mapping that cannot be backed. Two or more processes
of one node killed by it within {SHARED_BUS_ERROR_S} s of each other (torchelastic's 'Signal 7 (SIGBUS) received by
PID n' for different PIDs) touched a mapping they share: NCCL's and the DataLoader's segments in /dev/shm, whose tmpfs
(64 MB by default in a container) ran out as more local ranks joined. Unless the node's kernel reported a hardware
memory failure (a poisoned page kills the one process that touched it, with the kernel's own line), the deaths
become `{_SHM_FULL}` (configuration, no node). So do SIGBUS deaths on every node of a multi-node job within
{SHARED_BUS_ERROR_S} s of each other, one process each or more (a server's download or shard process in each replica's
container): the same mapping failing on every node at once is their common container setup, not each node's memory.
One process's SIGBUS on one node stays a worker's death that something else must explain.
""", cases=[
    # https://github.com/huggingface/text-generation-inference/issues/446 (both replicas' download processes, no /dev/shm)
    RuleCase(title="one process on each node killed by SIGBUS in the same second", evidence={
        f"{n}/applog": [f"2023-06-13T12:16:2{i}Z ERROR download: text_generation_launcher: Download process was signaled "
                        "to shutdown with signal 7: "] for i, n in enumerate(("n1", "n2"))},
        context={"nodes": ["n1", "n2"]},
        expect=Expect(fired=True, sub_domain="configuration", culprits=[], root_symptom=_SHM_FULL)),
    # https://github.com/meta-llama/llama-cookbook/issues/223 (torchelastic's summary: ranks ended by SIGBUS in a container)
    RuleCase(title="four local ranks die of SIGBUS in the same second", evidence={"n1/applog": [
        f"2025-01-01T00:10:00Z   traceback : Signal 7 (SIGBUS) received by PID {pid}" for pid in (5057, 5061, 5063, 5064)]},
        expect=Expect(fired=True, sub_domain="configuration", culprits=[], root_symptom=_SHM_FULL)),
    RuleCase(title="one rank's SIGBUS", evidence={"n1/applog": [
        "2025-01-01T00:10:00Z   traceback : Signal 7 (SIGBUS) received by PID 5057"]},
        expect=Expect(fired=False, absent=[_SHM_FULL])),
    RuleCase(title="the kernel sent SIGBUS over poisoned pages", evidence={
        "n1/syslog": ["Jan  1 00:09:59 n1 kernel: [4584434.000400] Memory failure: 0xe16677: Sending SIGBUS to "
                      "pt_main_thread:5057 due to hardware memory corruption"],
        "n1/applog": [f"2025-01-01T00:10:00Z   traceback : Signal 7 (SIGBUS) received by PID {pid}"
                      for pid in (5057, 5061)]},
        expect=Expect(fired=False, sub_domain="host", culprits=["n1"])),
])
def bus_error_on_several_local_ranks(ws: Workspace) -> None:
    poisoned = {e.node for e in ws.events_of(EventType.NODE_BAD) if e.symptom == _HARDWARE_MEMORY_FAILURE}
    by_node: dict[str, list[Event]] = {}
    for event in ws.events_of(EventType.NODE_BAD):
        if event.symptom == _KILLED and event.node and event.node not in poisoned and event.time is not None \
                and "7" in event.value_set("signal_name") and event.value_set("signal_pid"):
            by_node.setdefault(event.node, []).append(event)
    for node, events in sorted(by_node.items()):
        first = min(e.time for e in events if e.time is not None)
        together = [e for e in events if e.time is not None and (e.time - first).total_seconds() <= SHARED_BUS_ERROR_S]
        pids = set().union(*(e.value_set("signal_pid") for e in together))
        if len(pids) < 2:
            continue
        for event in together:
            ws.reread(event, _SHM_FULL, f"SIGBUS in {len(pids)} processes of {node} at once: a shared-memory mapping "
                                        "its tmpfs could not back")
    _bus_error_on_every_node(ws, poisoned)


def _bus_error_on_every_node(ws: Workspace, poisoned: set[str | None]) -> None:
    """SIGBUS deaths on every node of a multi-node job within SHARED_BUS_ERROR_S of each other: their shared setup."""
    deaths = [e for e in ws.events_of(EventType.NODE_BAD) if _bus_error(e) and e.node not in poisoned]
    times = [e.time for e in deaths if e.time is not None]
    if len(ws.context.nodes) < 2 or not times or len(times) < len(deaths) or \
            {ws.canonical_node(e.node) for e in deaths} != set(ws.context.nodes) or \
            (max(times) - min(times)).total_seconds() > SHARED_BUS_ERROR_S:
        return
    for event in deaths:
        ws.reread(event, _SHM_FULL, "SIGBUS on every node of the job at once: the shared-memory setup their containers "
                                    "share")


@refiner("BusErrorOnAFailingFilesystem", phase=Phase.REFINE_EARLY, doc=f"""
SIGBUS with BUS_ADRERR ('nonexistent physical address') is a page of a shared mapping that could not be backed: a
full /dev/shm, or a file mapped from a filesystem that could not read it (mmap(2)). After a storage fault on the same
node, or a shared filesystem's fault on any node (a Lustre target lost, a file server not answering, parallel
filesystem client errors), it is that filesystem's: the bus-error reading of `{_SHM_FULL}` is demoted. Without one it
stays /dev/shm's.
""", cases=[
    RuleCase(title="weights mapped from a Lustre target that was lost", evidence={"n1/syslog": [
        "Jan  1 00:10:00 n1 kernel: Lustre: fs-OST0017-osc-ffff9c3a: Connection to fs-OST0017 (at 10.0.0.27@o2ib) was "
        "lost; in progress operations using this service will wait for recovery to complete"],
        "n1/applog": ["2025-01-01T00:10:40Z [n1:31902] Signal code: Non-existant physical address (2)"]},
        expect=Expect(fired=True, sub_domain="storage", culprits=[], demoted=[_SHM_FULL])),
    RuleCase(title="a bus error with no storage fault", evidence={"n1/applog": [
        "2025-01-01T00:10:40Z [n1:31902] Signal code: Non-existant physical address (2)"]},
        expect=Expect(fired=False, sub_domain="configuration", culprits=[])),
])
def bus_error_on_a_failing_filesystem(ws: Workspace) -> None:
    for shm in ws.active(prefix=_SHM_FULL):
        if shm.node is None or shm.first_time is None or not all("physical address" in e.text for e in shm.evidence):
            continue
        failed = [s for s in ws.select(sub_domain=SubDomain.STORAGE)
                  if s.role == "root" and s.first_time is not None and s.first_time <= shm.first_time
                  and (s.node == shm.node or s.name.startswith(_SHARED_FILESYSTEM_FAULTS))]
        if failed:
            ws.demote(shm, f"{failed[0].name} on {failed[0].node or '-'} before it: a file-backed mapping that could not "
                           "be read")



# A file path in an error message: its first two directories name the mount it is on (/mnt/nfs_share, /fsx/data).
_PATH = re.compile(r"(?<![\w.])(/[\w.-]+/[\w.-]+)/[\w./-]*")
# A program's error and a filesystem's fault this close together on one mount are one incident.
SAME_MOUNT_S = 120.0
_FILESYSTEM_ERRORS = ("I/O error",)


@refiner("ExceptionOnAFailingMount", phase=Phase.REFINE_EARLY, doc=f"""
A program's exception about a file (FileNotFoundError, a failed open) on a mount where a filesystem error (EIO,
ESTALE, ECOMM: `I/O error`) was reported within {SAME_MOUNT_S:.0f} s of it, on any node, is that filesystem's
failure seen from the program: a file another rank could not finish writing is missing for the next one. The exception
is demoted; the filesystem error stays the root candidate. An exception about a path on another mount, or with no
filesystem error near it, stays the program's.
""", cases=[
    # https://github.com/hiyouga/LlamaFactory/issues/5454 (a datasets cache on an NFS share; paths rewritten)
    RuleCase(title="one rank's write fails on the NFS share, another's read finds no file", evidence={
        "a/applog": ["2025-01-01T00:10:00Z [rank9]: OSError: [Errno 70] Communication error on send: "
                     "'/mnt/nfs_share/hf_cache/json/default-42ac/0.0.0/ab57.incomplete'"],
        "b/applog": ["2025-01-01T00:10:01Z [rank3]: FileNotFoundError: [Errno 2] Failed to open local file "
                     "'/mnt/nfs_share/hf_cache/json/default-b15a/0.0.0/ab57/cache-1f17.arrow'. Detail: [errno 2] No "
                     "such file or directory"]},
        expect=Expect(fired=True, sub_domain="storage", culprits=[], demoted=["Python exception"])),
    RuleCase(title="a missing file on another mount", evidence={
        "a/applog": ["2025-01-01T00:10:00Z [rank9]: OSError: [Errno 70] Communication error on send: "
                     "'/mnt/nfs_share/hf_cache/x.incomplete'"],
        "b/applog": ["2025-01-01T00:10:01Z [rank3]: FileNotFoundError: [Errno 2] No such file or directory: "
                     "'/home/user/config/train.yaml'"]},
        expect=Expect(fired=False)),
])
def exception_on_a_failing_mount(ws: Workspace) -> None:
    faults = [(mount, s.first_time) for s in ws.active(role="root", sub_domain=SubDomain.STORAGE)
              if s.name in _FILESYSTEM_ERRORS and s.first_time is not None
              for e in s.evidence for mount in _PATH.findall(e.text)]
    if not faults:
        return
    window = timedelta(seconds=SAME_MOUNT_S)
    for s in ws.active(role="root", sub_domain=SubDomain.APPLICATION):
        if s.first_time is None:
            continue
        mounts = {mount for e in s.evidence for mount in _PATH.findall(e.text)}
        near = [mount for mount, when in faults if mount in mounts and abs(s.first_time - when) <= window]
        if near:
            ws.demote(s, f"a file on {near[0]}, where a filesystem error was reported at the same time")


LOCK_WAIT_MIN_S = 600.0  # polling a file lock this long is no download a peer finishes
_LOCK_WAIT = "Waited on a file lock until the end"


@refiner("FileLockNeverAcquired", phase=Phase.CLEAN, doc=f"""
A process that polled a file lock (filelock's 'Lock N not acquired on <path>') for at least
{LOCK_WAIT_MIN_S / 60:.0f} minutes, in a workload that made no training progress after the wait began and was ended by
a time limit, a deadline or a cancel, waited for a lock nobody released: `{_LOCK_WAIT}` becomes a root candidate. A
shorter wait, or one after which training went on, stays context.
""", cases=[
    RuleCase(title="polling a lock on the shared cache until the Job's deadline", evidence={"a/applog": [
        f"2025-01-01T00:{m:02d}:00Z DEBUG - filelock - Lock 1401865 not acquired on /fsx/cache/x.lock, waiting 0.05 "
        "seconds ..." for m in range(1, 59)] + [
        "2025-01-01T00:59:10Z   Warning   DeadlineExceeded   Job/train-7   Job was active longer than specified "
        "deadline"]},
        context={"scheduler": "kubernetes", "scheduler_state": "Failed", "exit_code": "",
                 "start_time": "2025-01-01T00:00:00Z", "end_time": "2025-01-01T00:59:30Z"},
        expect=Expect(fired=True, sub_domain="configuration", culprits=[], root_symptom=_LOCK_WAIT)),
    RuleCase(title="a minute's wait for a peer's download", evidence={"a/applog": [
        f"2025-01-01T00:01:{s:02d}Z DEBUG - filelock - Lock 1401865 not acquired on /fsx/cache/x.lock, waiting 0.05 "
        "seconds ..." for s in range(0, 59, 5)]},
        context={"start_time": "2025-01-01T00:00:00Z", "end_time": "2025-01-01T00:59:30Z"},
        expect=Expect(fired=False)),
])
def file_lock_never_acquired(ws: Workspace) -> None:
    ended_by = [s for name in WORKLOAD_ENDERS for s in ws.active(prefix=name)]
    recorded = recorded_state(ws.context) in (TerminalState.TIMEOUT, TerminalState.CANCELLED)
    if not (ended_by or recorded):
        return
    progress = [t for p in ws.select(prefix="Training progress") for t in (p.first_time, p.last_time) if t]
    for wait in ws.select(prefix=_LOCK_WAIT, status="interesting"):
        first, last = wait.first_time, wait.last_time or wait.first_time
        if first is None or last is None or ws.undated(wait) or any(t > first for t in progress):
            continue
        if (last - first).total_seconds() >= LOCK_WAIT_MIN_S:
            ws.promote(wait, f"polled a file lock for {(last - first).total_seconds() / 60:.0f} min and made no "
                             "progress before the workload was ended")


@refiner("RecoveredStallEndedNothing", phase=Phase.REFINE_EARLY, doc=f"""
A file server that came back ('server OK', 'Connection restored') after a long stall held the workload up; whether it
ended it, only the rest of the evidence says. With no scheduler state, no process of the workload that raised or was
killed, and no root candidate but that filesystem's own reports, nothing failed after the server answered again: the
stall and its client errors (`{_FS_CLIENT_ERROR}`) are demoted, and the answer does not claim a failure nobody
reported. A stall that never ended, or one beside any other failure, keeps its place.
""", cases=[
    # a Lustre OSS failover during a run that then went on (TSUBAME's failover notice; generated timings)
    RuleCase(title="a Lustre target lost for 17 minutes and restored; nothing else failed", evidence={"n1/syslog": [
        "Jan  1 01:04:11 n1 kernel: Lustre: hs1-OST0016-osc-ffff8817: Connection to hs1-OST0016 (at 172.20.3.12@o2ib) "
        "was lost; in progress operations using this service will wait for recovery to complete",
        "Jan  1 01:06:52 n1 kernel: LustreError: 11-0: hs1-OST0016-osc-ffff8817: operation ost_read to node "
        "172.20.3.12@o2ib failed: rc = -107",
        "Jan  1 01:21:37 n1 kernel: Lustre: hs1-OST0016-osc-ffff8817: Connection restored to 172.20.3.13@o2ib (at "
        "172.20.3.13@o2ib)"]},
        context={"scheduler": "none", "scheduler_state": "", "exit_code": ""},
        expect=Expect(fired=True, sub_domain="unknown", demoted=["Lustre server connection lost"])),
    RuleCase(title="the same stall, and a rank that raised", evidence={"n1/syslog": [
        "Jan  1 01:04:11 n1 kernel: Lustre: hs1-OST0016-osc-ffff8817: Connection to hs1-OST0016 (at 172.20.3.12@o2ib) "
        "was lost; in progress operations using this service will wait for recovery to complete",
        "Jan  1 01:21:37 n1 kernel: Lustre: hs1-OST0016-osc-ffff8817: Connection restored to 172.20.3.13@o2ib (at "
        "172.20.3.13@o2ib)"],
        "n1/applog": ["2025-01-01T01:22:00Z [rank0]: OSError: [Errno 5] Input/output error: '/gs/hs1/run/ckpt.pt'"]},
        context={"scheduler": "none", "scheduler_state": "", "exit_code": ""},
        expect=Expect(fired=False, sub_domain="storage")),
])
def recovered_stall_ended_nothing(ws: Workspace) -> None:
    if ws.context.scheduler_state.strip() or ws.facts_of("program_raised"):
        return
    own = tuple(lost for lost, _ in _STALLS) + (_FS_CLIENT_ERROR,)
    roots = ws.active(role="root")
    if not roots or any(not s.name.startswith(own) for s in roots):
        return
    stalls = [(s, answer) for lost, answer in _STALLS for s in ws.select(prefix=lost)]
    if not stalls or any(answer is None or _answered_after(ws, s, answer) is None for s, answer in stalls):
        return
    for s in roots:
        ws.demote(s, "the file server answered again and nothing of the workload failed after it")
