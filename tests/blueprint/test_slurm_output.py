"""Expanding Slurm's output file patterns (contexts/slurm_output.py), and keeping what slurmctld holds.

The 22.05 cases are the file names the real slurmstepd 22.05 of tests/support/setup-slurm.sh wrote for these
patterns (test_slurm_output_paths.py checks them end to end); the later releases' cases follow their source."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone
from pathlib import Path

import pytest

from firstfault.blueprint.contexts.slurm_output import (
    LiveJob,
    OutputStore,
    PatternJob,
    expand,
    index,
    match,
    parse_squeue,
    parse_version,
)
from firstfault.errors import SlurmError

V22, V24_11, V25_11 = (22, 5), (24, 11), (25, 11)
JOB = PatternJob(job_id="1", user="root", name="probe", work_dir="/tmp/ffsd", host="vm", restart_count=0)


@pytest.mark.parametrize(("pattern", "job", "expected"), [
    ("/o/o-%x-%j-%N-%u-%A-%a-%s-%t-%n-%J-%%-%5j.out", JOB, "/o/o-probe-1-vm-root-1-4294967294-batch-0-0-1-%-00001.out"),
    ("/o/p-%5q-%%-%12j-%3x-%0j-%%j.out", PatternJob(job_id="4", name="pq"), "/o/p-5q-%-0000000004-pq-4-%j.out"),
    ("/o/q-%12q-%5q.out", JOB, "/o/q-2q-5q.out"),
    ("/o/b-\\%j-%j-\\\\x.out", JOB, "/o/b-%j-%j-\\x.out"),
    ("/o/arr-%A-%a-%j.out", PatternJob(job_id="9", array_job_id="6", array_task_id="3"), "/o/arr-6-3-9.out"),
    ("slurm-%A_%a.out", PatternJob(job_id="13", array_job_id="12", array_task_id="1", work_dir="/w/"),
     "/w/slurm-12_1.out"),
    ("/o/rel-%x.out", PatternJob(job_id="8", name="name%j"), "/o/rel-name%j.out"),
    ("/o/%b-%r-trail%", JOB, "/o/%b-%r-trail%"),     # not replacement symbols before 24.11 / 25.11
    ("/dev/null", JOB, ""),
])
def test_patterns_as_slurm_22_05_expands_them(pattern: str, job: PatternJob, expected: str) -> None:
    assert expand(pattern, job, V22) == expected


def test_later_releases() -> None:
    task = PatternJob(job_id="20", array_job_id="7", array_task_id="13", host="gpu01", restart_count=2)
    assert expand("/o/%b-%3b.out", task, V24_11) == "/o/3-003.out"
    assert expand("/o/%r-%N-%5q-x%", task, V25_11) == "/o/2-gpu01-%5q-x"   # a trailing % is dropped from 25.11
    assert expand("/o/\\%j\\\\x", task, V25_11) == "/o/%jx"          # every backslash dropped from 25.11


def test_what_cannot_be_expanded_says_why() -> None:
    with pytest.raises(SlurmError, match="SLUID"):
        expand("/o/%S.out", JOB, V25_11)
    with pytest.raises(SlurmError, match="host name"):
        expand("/o/%N.out", PatternJob(job_id="1"), V22)
    with pytest.raises(SlurmError, match="working directory"):
        expand("out-%j", PatternJob(job_id="1"), V22)


def test_versions() -> None:
    assert parse_version("slurm-wlm 22.05.8") == (22, 5)
    assert parse_version("slurm 24.11.5") == (24, 11)
    assert parse_version("") is None


SQUEUE = "\x1f".join(["{id}", "{array}", "{task}", "1", "node1", "2026-12-01T10:14:43", "root", "/w", "{out}", "{err}",
                      ""])


def test_squeue_lines_and_its_array_default() -> None:
    lines = [SQUEUE.format(id="12", array="12", task="1-3", out="/w/slurm-12.out", err="/w/slurm-12.out"),
             SQUEUE.format(id="3", array="3", task="N/A", out="/w/o-%j.out", err="/w/e-%j.err"),
             "not a line"]
    pending_array, single = parse_squeue("\n".join(lines))
    assert (pending_array.array_job_id, pending_array.stdout, pending_array.stderr) == ("12", "slurm-%A_%a.out", "")
    assert (single.array_job_id, single.stdout, single.stderr, single.batch_host) == ("", "/w/o-%j.out", "/w/e-%j.err",
                                                                                     "node1")


def test_the_store_keeps_patterns_and_finds_them_by_job_or_array(tmp_path: Path) -> None:
    submit = datetime(2026, 12, 1, 10, 14, 43, tzinfo=timezone.utc)
    now = datetime(2026, 12, 2, tzinfo=timezone.utc)
    store = OutputStore(tmp_path / "r.db", timedelta(days=30))
    array = LiveJob("12", "12", submit, "root", True, "", "slurm-%A_%a.out", "")
    old = LiveJob("5", "", submit, "bob", True, "n1", "/o/%j", "")
    store.save([old], now - timedelta(days=31))
    store.save([array], now)
    assert store.find(["13", "12", "5"]) == [array]          # 30 days after it was last seen, `old` is gone
    rows = index([array])
    assert match(rows, "13", "12", {submit}, "root") == array   # a task of the array
    assert match(rows, "13", "12", {submit + timedelta(seconds=1)}, "root") is None   # another submission
    assert match(rows, "13", "12", {submit}, "alice") is None
