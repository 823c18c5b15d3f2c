"""Output paths that outlive slurmctld's memory of a job, on the real Slurm 22.05 (tests/support/setup-slurm.sh).

22.05's sacct records no output paths, and slurmctld forgets a finished job `MinJobAge` after its end. This module
lowers MinJobAge to 10 s (slurm.conf, `scontrol reconfigure`) and restores the setup script's value after it. One
pass of the Blueprint's watch sees real jobs while they are pending or running and keeps their `--output`/`--error`
patterns in the results database; another job runs while nothing watches; once slurmctld has forgotten them all,
a one-shot run finds every watched job's stdout (patterns with %x %j %N %u %s %t %n %J %% %5j, arrays, the
defaults, a backslash) and names the unwatched one as unresolved, which `--strict` turns into exit status 1.

The setting is the cluster's: while this module runs (about 35 s), slurmctld also forgets the finished jobs of any
other test run sharing the cluster. CI runs the Slurm modules one after the other (this one after
test_slurm_e2e.py, whose jobs it no longer needs)."""

from __future__ import annotations

import os
import pwd
import re
import socket
import sqlite3
from collections.abc import Iterator
from pathlib import Path

import pytest
from blueprint_helpers import SLURM_CONF, run_blueprint, slurm, wait_for

MIN_JOB_AGE = 10
WORK = "echo \"ff-marker $SLURM_JOB_ID\"; echo \"ff-err $SLURM_JOB_ID\" >&2; sleep 6; exit 1"


def _min_job_age() -> str:
    return next(line.split("=", 1)[1].strip() for line in slurm("scontrol", "show", "config").splitlines()
                if line.startswith("MinJobAge"))


def _reconfigure(conf: str, expected: str) -> None:
    SLURM_CONF.write_text(conf, encoding="utf-8")
    slurm("scontrol", "reconfigure")
    wait_for(f"MinJobAge = {expected}", lambda: _min_job_age() == expected, 30)


@pytest.fixture(scope="module")
def short_min_job_age(slurm_cluster: Path) -> Iterator[int]:
    """slurmctld forgets finished jobs 10 s after their end (purging every 10 s) while the module runs."""
    conf = SLURM_CONF.read_text(encoding="utf-8")
    setting = re.search(r"^MinJobAge=(\d+)$", conf, re.M)
    assert setting, "slurm.conf of tests/support/setup-slurm.sh sets MinJobAge"
    try:
        _reconfigure(conf.replace(setting.group(0), f"MinJobAge={MIN_JOB_AGE}"), f"{MIN_JOB_AGE} sec")
        yield MIN_JOB_AGE
    finally:
        _reconfigure(conf, f"{setting.group(1)} sec")


def _sbatch(out: Path, name: str, *args: str) -> str:
    return slurm("sbatch", "--parsable", "-J", name, "--chdir", str(out), *args, "--wrap", WORK).split(";")[0]


def _held() -> set[str]:
    """The job and array ids slurmctld still holds."""
    rows = slurm("squeue", "-h", "-t", "all", "-O", "JobID:|,ArrayJobID:|").splitlines()
    return {part for row in rows for part in row.split("|") if part}


def _accounted(ids: list[str]) -> bool:
    rows = slurm("sacct", "-X", "-n", "-P", "-j", ",".join(ids), "-o", "State,End").splitlines()
    return bool(rows) and all(r.split("|")[1] not in ("", "Unknown") and not r.startswith(("RUNNING", "PENDING"))
                              for r in rows)


def _blueprint(ids: list[str], out: Path, db: Path, capsys: pytest.CaptureFixture[str],
               *extra: str) -> tuple[int, list[dict], str]:
    return run_blueprint([
        "--connector", "context", "slurm", "jobs", ",".join(ids),
        "--connector", "logs", "files", "label", "stdout", "applog", "{stdout}", "applog", "{stderr}",
        "roots", str(out),
        "--connector", "output", "db", "sqlite", "path", str(db), "--connector", "output", "stdout", *extra], capsys)


def _report(result: dict, label: str) -> dict:
    return next(r for r in result["connector_reports"] if r["connector"] == label)


def test_output_paths_seen_by_a_pass_outlive_min_job_age(short_min_job_age: int, tmp_path: Path,
                                                         capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "jobs"
    out.mkdir()
    out.chmod(0o777)
    db = tmp_path / "results.db"
    seen = {
        "patterns": _sbatch(out, "ff-pat", "-o", f"{out}/std-%x-%j-%N-%u-%s-%t-%n-%J-%%-%5j.out",
                            "-e", f"{out}/err-%x-%j.err"),
        "array": _sbatch(out, "ff-arr", "--array=1-2", "-o", f"{out}/arr-%A_%a-%j.out"),
        "array_default": _sbatch(out, "ff-arr-default", "--array=1-2"),
        "default": _sbatch(out, "ff-default"),
        "escaped": _sbatch(out, "ff-escaped", "-o", f"{out}/esc-\\%j.out"),
    }
    slurm("srun", "-N1", "-J", "ff-interactive", "true")   # not a batch job: it has no output file
    interactive = slurm("sacct", "-X", "-n", "-P", "--name", "ff-interactive", "-o", "JobIDRaw").splitlines()[-1]

    # one pass of the watch while the jobs are pending or running: their patterns are kept
    code, _, err = _blueprint(list(seen.values()), out, db, capsys, "--watch", "--cycles", "1")
    assert code == 0, err
    unseen = _sbatch(out, "ff-unseen")

    everything = [*seen.values(), unseen, interactive]
    wait_for("the jobs to finish", lambda: _accounted(everything), 180, 1)
    wait_for("slurmctld to forget them (MinJobAge)", lambda: not _held() & set(everything), 120, 2)

    # (the pass above may have attributed the jobs that ended before it asked sacct: all of them again)
    code, results, err = _blueprint(everything, out, db, capsys, "--force")
    assert code == 0, err   # an unresolved path is no failure without --strict
    by_job = {r["context"]["job_id"]: r for r in results}
    assert len(by_job) == 9 and len(results) == 9   # 5 jobs, 2 arrays of 2, the unwatched one, the interactive one

    written = sorted(p for p in out.iterdir() if p.suffix in (".out", ".err"))
    found = set()
    for job_id, result in by_job.items():
        if job_id in (unseen, interactive):
            continue
        meta, raw = result["context"]["metadata"], result["context"]["metadata"]["job_id_raw"]
        assert f"ff-marker {raw}" in Path(meta["stdout"]).read_text(), job_id
        assert f"ff-err {raw}" in Path(meta["stderr"]).read_text(), job_id
        assert _report(result, "slurm")["status"] == "ok" and _report(result, "stdout")["status"] == "ok", result
        found |= {meta["stdout"], meta["stderr"]}
    assert sorted(found) == [str(p) for p in written if p.name != f"slurm-{unseen}.out"]   # every file but one

    host, user = socket.gethostname().split(".")[0], pwd.getpwuid(os.getuid()).pw_name
    job = seen["patterns"]
    assert by_job[job]["context"]["metadata"]["stdout"] == \
        f"{out}/std-ff-pat-{job}-{host}-{user}-batch-0-0-{job}-%-{int(job):05d}.out"
    assert by_job[seen["escaped"]]["context"]["metadata"]["stdout"] == f"{out}/esc-%j.out"
    assert by_job[f"{seen['array_default']}_2"]["context"]["metadata"]["stdout"] == \
        f"{out}/slurm-{seen['array_default']}_2.out"

    missing = _report(by_job[unseen], "slurm")
    assert missing["status"] == "error"
    assert missing["reason"].startswith(f"job {unseen} (ff-unseen): stdout path unknown: sacct records no output "
                                        "paths before Slurm 24.05 and slurmctld no longer holds the job (MinJobAge)")
    assert by_job[unseen]["diagnosis"]["coverage"]["partial"] is True
    assert "stdout" not in by_job[interactive]["context"]["metadata"]
    assert _report(by_job[interactive], "slurm")["status"] == "ok"
    assert "unresolved context slurm: 1 workload(s)" in " ".join(err.split())

    # the next run attributes again only the partial ones (no evidence at all from their node; the others are
    # stored `ok`); --strict fails on the unresolved path, not on the interactive job's lack of evidence
    code, results, err = _blueprint(everything, out, db, capsys, "--strict")
    assert code == 1 and sorted(r["context"]["job_id"] for r in results) == sorted([unseen, interactive]), err
    assert "unresolved context slurm: 1 workload(s)" in " ".join(err.split())
    with sqlite3.connect(db) as con:
        kept = {row[0] for row in con.execute("SELECT job_id FROM slurm_job_output")}
    assert set(seen.values()) <= kept and unseen not in kept
