"""A small fleet's results, written by the real Blueprint from the bundled samples (renamed, re-attempted, trimmed)
for the dashboard's node history, repeat-offender and incomplete-evidence tests:

- gpu-a03 is the culprit of three distinct workloads that ended together (the Xid 79 sample under three job ids)
  and of a fourth eleven days later: a repeat offender (three within seven days; four only within two weeks);
- node-02 is the culprit of one workload three times (the NVLink sample as attempts 0, 1, 2 of one job, as a
  requeue gives): not a repeat offender;
- cn-101 showed symptoms in a workload that failed (the time-limit sample) and, later, in one that passed (the
  same training run completed): its history lists the failure only;
- `stdout-once`: a three-node job whose stdout is one file, read for its batch host, with every node's syslog
  collected - complete evidence;
- `syslog-missing`: a `logs files` collector whose per-node syslogs do not exist (report `empty`);
- `syslog-partial`: a `logs files` collector that found the syslogs of two of three nodes (report `ok`, trn-c03
  missed).
"""

from __future__ import annotations

import re
import shutil
from pathlib import Path

from firstfault.samples import samples_root
from tests.dashboard.helpers import blueprint_into

XID_JOBS = ("xid79-mon", "xid79-tue", "xid79-wed")
XID_LATER = "xid79-later"
REQUEUED = "nvlink-requeued"
PASSED = "training-completed"
STDOUT_ONCE = "stdout-once"
SYSLOG_MISSING = "syslog-missing"
SYSLOG_PARTIAL = "syslog-partial"


def copy_sample(sample: str, into: Path, workload_id: str, **fields: str) -> Path:
    """A sample under another id, with some `[workload]` fields replaced (values are TOML strings or numbers)."""
    into.mkdir(parents=True, exist_ok=True)
    target = into / f"{len(list(into.iterdir())):02d}-{workload_id}"
    shutil.copytree(samples_root() / sample, target)
    scenario = target / "scenario.toml"
    text = re.sub(r'^id = ".*"$', f'id = "{workload_id}"', scenario.read_text(), count=1, flags=re.M)
    for key, value in fields.items():
        line = f"{key} = {value}"
        text, found = re.subn(rf"^{key} = .*$", line, text, count=1, flags=re.M)
        if not found:
            text = text.replace("[workload]\n", f"[workload]\n{line}\n", 1)
    scenario.write_text(text)
    return target


def _shift_days(text: str) -> str:
    """The Xid 79 sample's stamps (Feb 11-12, ISO and syslog forms) moved to Feb 22-23."""
    for before, after in (("2026-02-11T", "2026-02-22T"), ("2026-02-12T", "2026-02-23T"), ("Feb 11 ", "Feb 22 "),
                          ("Feb 12 ", "Feb 23 ")):
        text = text.replace(before, after)
    return text


def build_fleet(root: Path) -> Path:
    """The fleet's results database (see the module's docstring)."""
    static = root / "static"
    for n, job in enumerate(XID_JOBS):
        copy_sample("xid79-fallen-off-bus", static, job, job_id=f'"41000{n + 20}"')
    later = copy_sample("xid79-fallen-off-bus", static, XID_LATER, job_id='"4100030"',
                  start_time='"2026-02-22T22:14:00Z"', end_time='"2026-02-23T01:03:12Z"')
    for log in later.glob("*/*.log"):   # the same fault eleven days later
        log.write_text(_shift_days(log.read_text()))
    for attempt in range(3):
        copy_sample("nvlink-walkthrough", static, REQUEUED, attempt=str(attempt))
    copy_sample("slurm-time-limit", static, "time-limit")
    passed = copy_sample("slurm-time-limit", static, PASSED, scheduler_state='"COMPLETED"', exit_code='"0:0"',
                   end_time='"2026-05-03T06:00:37Z"')
    for applog in passed.glob("*/applog.log"):   # it completed: no time-limit cancellation
        applog.write_text("".join(line for line in applog.read_text().splitlines(keepends=True)
                                  if "DUE TO TIME LIMIT" not in line))
    once = copy_sample("python-exception-rank0", static, STDOUT_ONCE)
    for applog in sorted(once.glob("*/applog.log"))[1:]:   # one stdout file, read for the batch host trn-c01
        applog.unlink()

    missing = copy_sample("cuda-oom-rank", root / "missing", SYSLOG_MISSING)
    partial = copy_sample("python-exception-rank0", root / "partial", SYSLOG_PARTIAL)
    extra = root / "extra-syslogs"
    extra.mkdir()
    for node in ("trn-c01", "trn-c02"):   # none for trn-c03
        shutil.copy(partial / node / "syslog.log", extra / f"{node}.log")

    db = root / "fleet.db"
    blueprint_into(db, static)
    blueprint_into(db, missing.parent, extra_args=[
        "--connector", "logs", "files", "syslog", str(root / "nowhere" / "{node}.log")])
    blueprint_into(db, partial.parent, extra_args=[
        "--connector", "logs", "files", "syslog", str(extra / "{node}.log")])
    return db
