"""The Slurm connector's parsers on recorded output: `sacct --json` from the real 22.05 cluster (with its wrong
exit codes) and in the newer data_parser layout, `sacct -P` (recorded with `|`; the connector now asks for the
\x1f separator, and the Submit column was added from the same jobs' JSON record), `scontrol show -o`.
squeue-22.05.txt is a stand-in: what `squeue -O` prints for job 1, written to agree with that job's recorded
`scontrol show job` (the cluster that ran these jobs is gone)."""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest

from firstfault.blueprint.config import spec_from_words
from firstfault.blueprint.contexts.slurm import (
    SlurmContexts,
    expand_nodes,
    parse_sacct_json,
    parse_sacct_text,
    parse_scontrol,
)

DATA = Path(__file__).parent / "data" / "slurm"


@pytest.fixture(autouse=True)
def utc(monkeypatch: pytest.MonkeyPatch) -> None:
    """The recorded `sacct -P` times are the recording machine's local time, which was UTC."""
    monkeypatch.setenv("TZ", "UTC")
    time.tzset()


def fake_command(tmp_path: Path, name: str, outputs: dict[str, str]) -> str:
    """A stand-in for sacct/squeue printing a recorded file, chosen by a flag of its command line."""
    script = tmp_path / name
    cases = "\n".join(f'  *"{flag}"*) cat "{DATA / file}" ;;' for flag, file in outputs.items())
    script.write_text(f'#!/bin/sh\ncase "$*" in\n{cases}\nesac\n')
    script.chmod(0o755)
    return str(script)


def test_node_lists_are_expanded() -> None:
    assert expand_nodes("gpu[01-04,07]") == ["gpu01", "gpu02", "gpu03", "gpu04", "gpu07"]
    assert expand_nodes("None assigned") == []


def test_the_22_05_layout_is_detected_and_its_exit_codes_distrusted() -> None:
    records, old = parse_sacct_json(json.loads((DATA / "sacct-22.05.json").read_text()))
    assert old
    failed = next(r for r in records if r.job_id == "1")
    assert failed.exit_code == "0:0"          # what 22.05's JSON claims for a script that exited 3
    text = {r.job_id: r for r in parse_sacct_text((DATA / "sacct-22.05.txt").read_text())}
    assert text["1"].exit_code == "3:0" and text["2_1"].raw_id == "5" and text["3+1"].het_job_id == "3"
    assert {r.job_id for r in records} == {"1", "2_1", "2_2", "3+0", "3+1", "6"}


def test_the_newer_layout() -> None:
    records, old = parse_sacct_json(json.loads((DATA / "sacct-newer-layout.json").read_text()))
    assert not old
    by_id = {r.job_id: r for r in records}
    run = by_id["812345"]
    assert (run.state, run.exit_code, run.nodes[-1], len(run.nodes)) == ("FAILED", "1:0", "gpu07", 5)
    assert run.stdout_pattern == "/lustre/alice/run7/%x-%j.out" and run.batch is None   # the fixture has no steps
    assert by_id["812399_3"].exit_code == "0:9" and by_id["812399_3"].state == "NODE_FAIL"
    assert by_id["812500+1"].het_job_id == "812500"
    assert not by_id["812600"].finished


def test_discovery_from_recorded_22_05_output(tmp_path: Path) -> None:
    sacct = fake_command(tmp_path, "sacct", {"--json": "sacct-22.05.json", "-P": "sacct-22.05.txt"})
    squeue = fake_command(tmp_path, "squeue", {"-O": "squeue-22.05.txt"})
    found = SlurmContexts(spec_from_words(["context", "slurm", "jobs", "1,2,3,6", "sacct", sacct,
                                           "squeue", squeue, "scontrol", "/bin/false"])).discover()
    assert found.problems == []
    got = {(c.job_id, c.attempt): c for c in found.contexts}
    assert set(got) == {("1", 0), ("2_1", 0), ("2_2", 0), ("3", 0), ("6", 0), ("6", 1)}
    assert got[("1", 0)].exit_code == "3:0"                           # from sacct -P, not the JSON
    assert got[("1", 0)].metadata["stdout"] == "/tmp/slurm-ci/out/failjob-1.out"   # squeue's pattern, expanded
    assert got[("1", 0)].metadata["batch_host"] == "node1"            # the batch step's node in accounting
    assert got[("6", 1)].metadata["batch_host"] == "node1"
    # slurmctld no longer holds the other jobs, and no database kept what an earlier pass saw
    assert {key for key in found.unresolved} == {(f"slurm:ci:{j}", a) for j, a in got if j != "1"}
    assert "job 2_1 (arr): stdout path unknown: sacct records no output paths before Slurm 24.05 and slurmctld no " \
           "longer holds the job (MinJobAge); declare `output db sqlite`" in found.unresolved[("slurm:ci:2_1", 0)]
    assert got[("2_2", 0)].exit_code == "2:0"
    assert got[("3", 0)].nodes == ["node1", "node2"]                 # both het components
    assert got[("6", 0)].scheduler_state == "REQUEUED" and got[("6", 1)].scheduler_state == "COMPLETED"
    assert got[("6", 0)].end_time <= got[("6", 1)].start_time
    assert got[("1", 0)].workload_id == "slurm:ci:1"


def test_discovery_merges_newer_het_jobs(tmp_path: Path) -> None:
    sacct = fake_command(tmp_path, "sacct", {"--json": "sacct-newer-layout.json"})
    found = SlurmContexts(spec_from_words(["context", "slurm", "since", "30d", "sacct", sacct,
                                           "squeue", "/bin/false", "scontrol", "/bin/false"])).discover()
    got = {c.job_id: c for c in found.contexts}
    assert set(got) == {"812345", "812399_3", "812500"}
    # 24.11's own pattern, expanded (no live record needed); the others' records here have no stdout field
    assert got["812345"].metadata["stdout"] == "/lustre/alice/run7/llama-pretrain-812345.out"
    assert set(found.unresolved) == {("slurm:gb200:812399_3", 0), ("slurm:gb200:812500", 0)}
    assert any("could not be read" in p and "/bin/false" in p for p in found.problems)   # squeue failed
    het = got["812500"]
    assert het.nodes == ["gpu20", "gpu21", "gpu22"] and het.scheduler_state == "FAILED" and het.exit_code == "2:0"


def test_scontrol_values_with_spaces() -> None:
    line = ("JobId=7 JobName=train model JobState=FAILED Reason=NonZeroExitCode ExitCode=3:0 "
            "NodeList=gpu[01-02] BatchHost=gpu01 Command=/home/a/run job.sh StdOut=/home/a/out dir/7.out")
    fields = parse_scontrol(line)["7"]
    assert fields["JobName"] == "train model" and fields["Command"] == "/home/a/run job.sh"
    assert fields["StdOut"] == "/home/a/out dir/7.out"
    node = ("NodeName=node1 Arch=x86_64 CoresPerSocket=1  CPUAlloc=0 NodeAddr=127.0.0.1 NodeHostName=vm Port=16831 "
            "Version=22.05.8 OS=Linux 6.18.44-fc-v657 #1 SMP PREEMPT_DYNAMIC @0  RealMemory=2000")   # the real 22.05
    assert parse_scontrol(node, "NodeName")["node1"]["NodeHostName"] == "vm"
