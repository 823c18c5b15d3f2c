"""End to end against the real Slurm 22.05 (tests/support/setup-slurm.sh): real jobs that complete, fail, time
out, get cancelled, hit NODE_FAIL, run as array tasks and a heterogeneous job, and get requeued; then the
Blueprint discovers them with sacct/scontrol, collects their real stdout and per-node syslog files, and stores
the diagnoses in SQLite."""

from __future__ import annotations

import json
import sqlite3
import time
from pathlib import Path

import pytest
from blueprint_helpers import SLURM_CONF, run_blueprint, slurm, wait_for


# The Xid job writes what the nodes' kernels would log into per-node "syslog" files, the way a log shipper
# would leave them; the Blueprint's files collector reads them back by node name. `date` is how the nodes stamp
# their syslog; `syslog_dir` where they write it.
def _xid_job(date: str, syslog_dir: str) -> str:
    return f"""\
#!/bin/bash
echo "$(date -u +%FT%TZ) launching 2 ranks on $SLURM_JOB_NODELIST"
srun -N2 -n2 bash -c '
  log="{syslog_dir}/$SLURMD_NODENAME.log"
  echo "$({date} "+%b %e %H:%M:%S") $SLURMD_NODENAME systemd[1]: Started Session 12 of User root." >>"$log"
  if [ "$SLURMD_NODENAME" = node2 ]; then
    echo "$({date} "+%b %e %H:%M:%S") $SLURMD_NODENAME kernel: [794287.441000] NVRM: Xid (PCI:0000:9a:00): 79, pid='"'"'<unknown>'"'"', name=<unknown>, GPU has fallen off the bus." >>"$log"
    echo "[rank1]: RuntimeError: CUDA error: unspecified launch failure"
    exit 1
  fi
  sleep 1
  echo "[rank0]:[E ProcessGroupNCCL.cpp:616] [Rank 0] Watchdog caught collective operation timeout: WorkNCCL(SeqNum=42, OpType=ALLREDUCE, NumelIn=1, NumelOut=1, Timeout(ms)=600000) ran for 600012 milliseconds before timing out."
  exit 1'
"""


XID_JOB = _xid_job("date", "$SYSLOG_DIR")
# The same fault on a cluster whose node syslogs are written in local time (Asia/Singapore, UTC+8) with no zone in
# the stamp, the way traditional syslog writes them: read as UTC the Xid would be 8 hours after the job.
LOCAL_TIME_XID_JOB = _xid_job("TZ=Asia/Singapore date", "$SYSLOG_DIR-local")
OOM_JOB = """\
#!/bin/bash
echo "epoch 0 step 10 loss 2.31"
cat >&2 <<'EOF'
Traceback (most recent call last):
  File "/workspace/train.py", line 88, in <module>
    loss = model(batch).loss
torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB. GPU 0 has a total capacity of 79.10 GiB of which 1.06 GiB is free. Process 2611 has 78.03 GiB memory in use.
EOF
exit 1
"""
# A job that fails on its own (a bug on rank 0) on node1; the next job on node1 meets an Xid minutes after the first
# one ended (past the clock-skew tolerance of 120 s). The Xid is that next job's fault, never the first one's. (They
# run on node1 once the TIMEOUT job has left it, and node1's syslog has no earlier Xid in their windows.)
BUGGY_JOB = """\
#!/bin/bash
echo "$(date -u +%FT%TZ) [rank0]: KeyError: 'lr_schedule'"
exit 1
"""
NEXT_JOB_XID = """\
#!/bin/bash
sleep 130
echo "$(date "+%b %e %H:%M:%S") node1 kernel: [795001.001000] NVRM: Xid (PCI:0000:3b:00): 79, pid='<unknown>', name=<unknown>, GPU has fallen off the bus." >>"$SYSLOG_DIR/node1.log"
echo "$(date -u +%FT%TZ) [rank0]: RuntimeError: CUDA error: unspecified launch failure"
exit 1
"""
OK_JOB = """\
#!/bin/bash
srun -N2 -n2 bash -c 'echo "[rank$SLURM_PROCID]: step 100 loss 1.93 on $SLURMD_NODENAME"'
"""


def _submit(out: Path, name: str, *args: str, script: str | None = None, wrap: str | None = None) -> str:
    argv = ["sbatch", "--parsable", "-J", name, "-o", str(out / "%x-%j.out"), "--export", f"ALL,SYSLOG_DIR={out}/syslog"]
    if script is not None:
        path = out / f"{name}.sh"
        path.write_text(script, encoding="utf-8")
        argv += [*args, str(path)]
    else:
        argv += [*args, "--wrap", wrap or "true"]
    return slurm(*argv).split(";")[0]


def _explain(result: dict) -> str:
    """What a wrong answer was built from, for the failure message: the root, the symptoms with their evidence, the
    evidence each source gave."""
    diagnosis = result["diagnosis"]
    symptoms = [(s["symptom"], s["node"], s["status"], s["reason"], [e["text"][:160] for e in s["evidence"]])
                for s in diagnosis["symptoms"]]
    return json.dumps({"root_cause": diagnosis["root_cause"], "symptoms": symptoms, "trace": diagnosis["trace"],
                       "context": result["context"]}, indent=1)


def _state(job: str) -> str:
    return slurm("squeue", "-h", "-j", job, "-o", "%T") if job else ""


def _running(job: str) -> bool:
    return _state(job) == "RUNNING"


def _resume(node: str) -> None:
    """Bring a downed node back (ReturnToService=2 may already have, as soon as its slurmd answered). slurmctld
    refuses `state=resume` ("Invalid node state specified") while the node still completes the killed job, so
    it is asked again until the node is usable."""
    def usable() -> bool:
        if "down" not in slurm("sinfo", "-h", "-n", node, "-o", "%T"):
            return True
        try:
            slurm("scontrol", "update", f"nodename={node}", "state=resume")
        except AssertionError:   # not resumable yet: the next poll asks again
            pass
        return False

    wait_for(f"{node} to be usable", usable, 60, every=1)


def _accounted(jobs: list[str]) -> bool:
    """sacct shows every job (all runs) finished, with its end time."""
    rows = slurm("sacct", "-X", "-D", "-P", "-n", "-j", ",".join(jobs), "-o", "JobIDRaw,State,End").splitlines()
    ends = [row.split("|") for row in rows]
    return bool(ends) and all(e[2] not in ("Unknown", "") and e[1] not in ("RUNNING", "PENDING") for e in ends)


@pytest.fixture(scope="module")
def slurm_jobs(slurm_cluster: Path, tmp_path_factory: pytest.TempPathFactory) -> dict[str, str]:
    """Submit the test jobs once (about 90 s, bounded by the TIMEOUT job) and wait until sacct has them all."""
    out = tmp_path_factory.mktemp("slurm-out")
    (out / "syslog").mkdir()
    (out / "syslog-local").mkdir()
    out.chmod(0o777)
    jobs: dict[str, str] = {}
    jobs["timeout"] = _submit(out, "ff-timeout", "-w", "node1", "-t", "1",
                              wrap="echo 'epoch 0 step 1 loss 9.1'; sleep 600")
    jobs["ok"] = _submit(out, "ff-ok", "-N2", script=OK_JOB)
    jobs["xid"] = _submit(out, "ff-xid79", "-N2", script=XID_JOB)
    jobs["xid_local_time"] = _submit(out, "ff-xid79-local-time", "-N2", script=LOCAL_TIME_XID_JOB)
    jobs["oom"] = _submit(out, "ff-cuda-oom", "-N1", script=OOM_JOB)
    jobs["array"] = _submit(out, "ff-array", "--array=1-2", wrap="echo task $SLURM_ARRAY_TASK_ID; exit $SLURM_ARRAY_TASK_ID")
    jobs["het"] = _submit(out, "ff-het", "-n1", ":", "-n1", wrap="echo het component $SLURM_HET_SIZE")
    jobs["requeue"] = _submit(out, "ff-requeue", "--requeue", wrap="echo run ${SLURM_RESTART_COUNT:-0}; sleep 4; exit 2")
    first_run = out / f"ff-requeue-{jobs['requeue']}.out"
    wait_for("the requeue job's script to run", lambda: first_run.exists() and "run 0" in first_run.read_text(), 60)
    slurm("scontrol", "requeue", jobs["requeue"])
    wait_for("the requeued job to be pending", lambda: _state(jobs["requeue"]) == "PENDING", 30)
    time.sleep(1)   # let slurmd finish the first run, or the next launch finds the credential revoked
    slurm("scontrol", "update", f"jobid={jobs['requeue']}", "StartTime=now")   # skip the requeue hold-off
    quick = ["ok", "xid", "xid_local_time", "oom", "array", "requeue"]
    wait_for("the quick jobs", lambda: all(_state(jobs[k]) == "" for k in quick), 90)

    jobs["cancelled"] = _submit(out, "ff-cancelled", "-w", "node1", wrap="echo started; sleep 600")
    wait_for("the job to cancel to run", lambda: _running(jobs["cancelled"]), 60)
    slurm("scancel", jobs["cancelled"])

    jobs["node_fail"] = _submit(out, "ff-node-fail", "-N2", "--no-requeue", wrap="srun -N2 sleep 600")
    wait_for("the node-fail job to run", lambda: _running(jobs["node_fail"]), 60)
    try:
        slurm("scontrol", "update", "nodename=node2", "state=down", "reason=firstfault test: simulated Xid 79")
        wait_for("NODE_FAIL", lambda: _state(jobs["node_fail"]) == "", 60)
    finally:
        _resume("node2")
    wait_for("the TIMEOUT job (Slurm checks time limits about every 30 s)", lambda: _state(jobs["timeout"]) == "", 240, 2)
    jobs["buggy"] = _submit(out, "ff-buggy", "-w", "node1", script=BUGGY_JOB)
    jobs["next_on_node1"] = _submit(out, "ff-next-xid", "-w", "node1", f"--dependency=afterany:{jobs['buggy']}",
                                    script=NEXT_JOB_XID)
    wait_for("the job after the buggy one", lambda: _state(jobs["next_on_node1"]) == "", 240, 2)
    wait_for("sacct to record every job", lambda: _accounted(list(jobs.values())), 60, 1)
    time.sleep(1)  # sacct can briefly lag on the node list of a just-finished job
    jobs["out"] = str(out)
    return jobs


def _blueprint(jobs: dict[str, str], db: Path, capsys: pytest.CaptureFixture[str], *extra: str,
               syslog: str = "syslog", ids: list[str] | None = None) -> list[dict]:
    wanted = ",".join(ids or [v for k, v in jobs.items() if k != "out"])
    code, results, err = run_blueprint([
        "--connector", "context", "slurm", "jobs", wanted, *extra,
        "--connector", "logs", "files", "label", "stdout", "applog", "{stdout}", "roots", jobs["out"],
        "--connector", "logs", "files", "label", "syslog", "syslog", f"{jobs['out']}/{syslog}/{{node}}.log",
        "--connector", "logs", "files", "label", "slurmctld", "scheduler", str(SLURM_CONF.parent / "log" / "slurmctld.log"),
        "--connector", "output", "db", "sqlite", "path", str(db),
        "--connector", "output", "stdout"], capsys)
    assert code == 0, err
    return results


def _by_job(results: list[dict]) -> dict[tuple[str, int], dict]:
    return {(r["context"]["job_id"], r["context"]["attempt"]): r for r in results}


def _report(result: dict, label: str) -> dict:
    return next(r for r in result["connector_reports"] if r["connector"] == label)


def test_slurm_jobs_are_discovered_collected_and_stored(slurm_jobs: dict[str, str], tmp_path: Path,
                                                        capsys: pytest.CaptureFixture[str]) -> None:
    db = tmp_path / "r.db"
    got = _by_job(_blueprint(slurm_jobs, db, capsys))
    j = slurm_jobs

    ok = got[(j["ok"], 0)]
    assert ok["context"]["scheduler_state"] == "COMPLETED" and ok["context"]["exit_code"] == "0:0"
    assert ok["context"]["nodes"] == ["node1", "node2"]
    assert ok["context"]["workload_id"] == f"slurm:ci:{j['ok']}"
    assert _report(ok, "stdout")["status"] == "ok" and _report(ok, "stdout")["nodes"] == ["node1"]

    xid = got[(j["xid"], 0)]
    assert xid["context"]["scheduler_state"] == "FAILED" and xid["context"]["exit_code"] == "1:0"
    assert xid["context"]["metadata"]["stdout"] == f"{j['out']}/ff-xid79-{j['xid']}.out"
    assert xid["context"]["metadata"]["batch_host"] == "node1"
    stdout = _report(xid, "stdout")
    assert stdout["status"] == "ok" and stdout["observation_count"] >= 3 and stdout["nodes"] == ["node1"]
    syslog = _report(xid, "syslog")
    assert syslog["status"] == "ok" and syslog["nodes"] == ["node1", "node2"]
    assert xid["diagnosis"]["sub_domain"] == "gpu"
    assert [c["node"] for c in xid["diagnosis"]["culprit_nodes"]] == ["node2"]
    assert "Xid" in xid["diagnosis"]["root_cause"]["evidence"][0]["text"]

    oom = got[(j["oom"], 0)]
    assert oom["context"]["exit_code"] == "1:0"   # 22.05's sacct --json says 0: taken from sacct -P instead
    assert any("CUDA out of memory" in s["evidence"][0]["text"] for s in oom["diagnosis"]["symptoms"])

    timeout = got[(j["timeout"], 0)]
    assert timeout["context"]["scheduler_state"] == "TIMEOUT"
    assert timeout["diagnosis"]["terminal_state"] == "TIMEOUT"
    stdout_file = Path(timeout["context"]["metadata"]["stdout"]).read_text()
    assert "DUE TO TIME LIMIT" in stdout_file and _report(timeout, "stdout")["status"] == "ok"

    cancelled = got[(j["cancelled"], 0)]
    assert cancelled["context"]["scheduler_state"] == "CANCELLED"
    assert cancelled["context"]["metadata"]["state_raw"].startswith("CANCELLED")

    node_fail = got[(j["node_fail"], 0)]
    assert node_fail["context"]["scheduler_state"] == "NODE_FAIL"
    assert node_fail["context"]["nodes"] == ["node1", "node2"]
    assert node_fail["context"]["metadata"]["stdout"].endswith(f"/ff-node-fail-{j['node_fail']}.out")
    # slurmctld's log names the node it killed this job on (other jobs' lines in the same log are dropped)
    assert node_fail["diagnosis"]["terminal_state"] == "NODE_FAIL"
    assert [c["node"] for c in node_fail["diagnosis"]["culprit_nodes"]] == ["node2"], _explain(node_fail)
    cited = [e["text"] for s in node_fail["diagnosis"]["symptoms"] for e in s["evidence"]]
    assert any(f"Killing JobId={j['node_fail']} on failed node node2" in text for text in cited)
    assert not any("Killing JobId=" in text and f"JobId={j['node_fail']} " not in text for text in cited)

    # an Xid logged minutes after the buggy job ended belongs to the next job on that node
    buggy, following = got[(j["buggy"], 0)], got[(j["next_on_node1"], 0)]
    assert buggy["diagnosis"]["sub_domain"] == "application" and buggy["diagnosis"]["culprit_nodes"] == []
    assert any(s["symptom"] == "XID-79" and s["status"] == "interesting" for s in buggy["diagnosis"]["symptoms"])
    assert following["diagnosis"]["sub_domain"] == "gpu"
    assert [c["node"] for c in following["diagnosis"]["culprit_nodes"]] == ["node1"]

    array_id = j["array"]
    assert got[(f"{array_id}_1", 0)]["context"]["exit_code"] == "1:0"
    assert got[(f"{array_id}_2", 0)]["context"]["exit_code"] == "2:0"

    het = got[(j["het"], 0)]
    assert het["context"]["nodes"] == ["node1", "node2"] and het["context"]["scheduler_state"] == "COMPLETED"

    first, second = got[(j["requeue"], 0)], got[(j["requeue"], 1)]
    assert first["context"]["scheduler_state"] == "REQUEUED"
    assert second["context"]["scheduler_state"] == "FAILED" and second["context"]["exit_code"] == "2:0"
    assert first["context"]["end_time"] <= second["context"]["start_time"]

    with sqlite3.connect(db) as con:
        rows = dict(con.execute("SELECT job_id || '#' || attempt, scheduler_state FROM workload_attempts"))
        assert rows[f"{j['node_fail']}#0"] == "NODE_FAIL" and rows[f"{j['requeue']}#1"] == "FAILED"
        culprits = con.execute("SELECT a.job_id FROM run_nodes n JOIN attribution_runs r ON r.id = n.run_id "
                               "JOIN workload_attempts a ON a.id = r.attempt_id "
                               "WHERE n.node = 'node2' AND n.role = 'culprit'").fetchall()
        assert (j["xid"],) in culprits
        reports = json.loads(con.execute(
            "SELECT r.connector_reports_json FROM attribution_runs r JOIN workload_attempts a ON a.id = r.attempt_id "
            "WHERE a.job_id = ?", (j["xid"],)).fetchone()[0])
        assert {r["connector"] for r in reports} == {"slurm", "stdout", "syslog", "slurmctld"}


def test_text_and_json_accounting_agree(slurm_jobs: dict[str, str], tmp_path: Path,
                                        capsys: pytest.CaptureFixture[str]) -> None:
    from_json = _by_job(_blueprint(slurm_jobs, tmp_path / "a.db", capsys))
    from_text = _by_job(_blueprint(slurm_jobs, tmp_path / "b.db", capsys, "format", "text"))
    assert from_json.keys() == from_text.keys()
    for key, result in from_json.items():
        a, b = result["context"], from_text[key]["context"]
        assert (a["scheduler_state"], a["exit_code"], a["nodes"], a["start_time"], a["end_time"]) == \
               (b["scheduler_state"], b["exit_code"], b["nodes"], b["start_time"], b["end_time"]), key


def test_time_window_discovery_finds_recent_failures(slurm_jobs: dict[str, str], tmp_path: Path,
                                                     capsys: pytest.CaptureFixture[str]) -> None:
    code, results, err = run_blueprint([
        "--connector", "context", "slurm", "since", "30m", "states", "NODE_FAIL,TIMEOUT",
        "--connector", "output", "stdout"], capsys)
    assert code == 0, err
    found = {r["context"]["job_id"] for r in results}
    assert {slurm_jobs["node_fail"], slurm_jobs["timeout"]} <= found
    assert all(r["context"]["scheduler_state"] in ("NODE_FAIL", "TIMEOUT") for r in results)


def test_a_node_logging_in_local_time_keeps_its_fault(slurm_jobs: dict[str, str], tmp_path: Path,
                                                      capsys: pytest.CaptureFixture[str]) -> None:
    """Both nodes' syslogs are in UTC+8 without a zone: the files collector finds the one whole-hour offset at which
    they fit the job (nothing is dropped as out of the window), the engine reads the stamps at it, and coverage
    says so; the Xid on node2 is the root cause."""
    results = _by_job(_blueprint(slurm_jobs, tmp_path / "tz.db", capsys, syslog="syslog-local",
                                 ids=[slurm_jobs["xid_local_time"]]))
    diagnosis = results[(slurm_jobs["xid_local_time"], 0)]["diagnosis"]
    assert diagnosis["sub_domain"] == "gpu"
    assert [c["node"] for c in diagnosis["culprit_nodes"]] == ["node2"]
    assert "Xid" in diagnosis["root_cause"]["evidence"][0]["text"]
    assert any("UTC+8" in note and "syslog-local/node2.log" in note for note in diagnosis["coverage"]["adjustments"])


def test_a_job_output_path_outside_the_roots_is_not_read(slurm_cluster: Path, tmp_path: Path,
                                                         capsys: pytest.CaptureFixture[str]) -> None:
    """Two real jobs name their output with `--output`: one a symlink inside the allowed root that leads to a
    mode-600 file outside it, one that file's sibling directly. sacct/scontrol record those paths; the Blueprint
    refuses both, says why in the report, and stores none of their content."""
    allowed, private = tmp_path / "jobs", tmp_path / "private"
    allowed.mkdir()
    private.mkdir()
    for directory in (allowed, private):
        directory.chmod(0o777)
    secret = private / "secret"
    secret.write_text("SECRET-TOKEN-1234\n")
    secret.chmod(0o600)
    (allowed / "link.out").symlink_to(secret)
    jobs = {name: slurm("sbatch", "--parsable", "-J", f"ff-{name}", "-w", "node1", "-o", str(output), "--open-mode=append",
                        "--wrap", "echo '[rank0]: step 1 loss 2.0'; exit 1").split(";")[0]
            for name, output in (("via-symlink", allowed / "link.out"), ("outside", private / "direct.out"))}
    wait_for("the two jobs", lambda: all(_state(j) == "" for j in jobs.values()), 90)
    wait_for("sacct to record them", lambda: _accounted(list(jobs.values())), 60, 1)
    db = tmp_path / "r.db"
    code, results, err = run_blueprint([
        "--connector", "context", "slurm", "jobs", ",".join(jobs.values()),
        "--connector", "logs", "files", "label", "stdout", "applog", "{stdout}", "roots", str(allowed),
        "--connector", "output", "db", "sqlite", "path", str(db), "--connector", "output", "stdout"], capsys)
    assert code == 0, err
    by_job = {r["context"]["job_id"]: r for r in results}
    for name, job in jobs.items():
        report = _report(by_job[job], "stdout")
        assert report["status"] == "error" and report["observation_count"] == 0, report
        where = secret.resolve() if name == "via-symlink" else (private / "direct.out").resolve()
        assert f"refused: it resolves to {where}, outside the allowed roots ({allowed.resolve()})" in report["reason"]
        assert by_job[job]["diagnosis"]["coverage"]["partial"] is True
    assert "SECRET-TOKEN" in secret.read_text() and "step 1" in secret.read_text()   # the job wrote through the link
    assert "SECRET-TOKEN" not in db.read_bytes().decode("latin-1")
