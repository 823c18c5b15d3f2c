"""Scheduler rules (the Python side of catalog/scheduler.toml): the recorded state as evidence, scheduler actions
that only ended a workload already failed or hung, completed workloads, and the terminal state.

Facts used: a scheduler cancellation (time limit, preemption, scancel, node failure) is the root only if nothing
failed before it - a job hung by a fault runs into its time limit (docs/domain.md §6.2); Slurm's accounting can
call a job COMPLETED while a step failed, and a completed job's scary lines are benign (docs/domain.md §3.7).
"""

from __future__ import annotations

import itertools
import re
from datetime import datetime, timedelta
from typing import Any

import hostlist

from firstfault.engine.model import (
    EventType,
    Evidence,
    ExecutionContext,
    Provenance,
    SourceKind,
    SubDomain,
    TerminalState,
    recorded_state,
)
from firstfault.engine.rules_api import Expect, Phase, RuleCase, filter_rule, refiner
from firstfault.engine.workspace import EmitSpec, Workspace, WorkSymptom
from firstfault.rules.election import (
    LINK_DOWN_EVENTS,
    NEVER_PLACED,
    NOT_STARTED,
    SHUTDOWN_MARGIN_S,
    SURVIVED_AFTER_S,
    blamed_nodes,
    exited_zero_unrecorded,
    last_progress,
    named_peers,
    printed_before,
    quiet_between_lines,
    raised_after_completion,
)


def _not_after(ws: Workspace, candidate: WorkSymptom, action: WorkSymptom) -> bool:
    """The candidate happened before the scheduler action (or its time is unknown, so it may have)."""
    if ws.undated(candidate) or candidate.first_time is None or action.first_time is None:
        return True
    return candidate.first_time <= action.first_time + timedelta(seconds=ws.params.clock_skew_s)


HUNG_BEFORE_LIMIT_S = 2400.0  # progress that stopped this long before a time limit means the job hung
# Ray's report of a worker that died during a task: context in a run that went on (Ray retries the task), but a report
# that the workload had stopped working when a limit ended it later.
_WORKER_DIED = "Ray worker died unexpectedly"
# Context reports that the workload had stopped working, whatever else they may mean: Ray's report of a worker that died
# during a task, vLLM's full broadcast queue
_STALL_REPORTS = (_WORKER_DIED, "vLLM workers stopped taking work")
# A shorter stop counts too when it is most of the run: silent for this long, and for this share of the time from the
# workload's start to the limit or cancel (a 30-minute job that stopped after its first minute).
HUNG_MOST_OF_RUN_S = 600.0
HUNG_RUN_SHARE = 0.8
QUIET_MARGIN = 1.5  # a silence before a limit counts as a stop only past this multiple of the longest one before it
# Undated progress is placed from iteration counts: the stall must then also be this share of the time since the start.
UNDATED_PROGRESS_MARGIN = 0.25
# The symptoms of a workload that ran out of time: Slurm's time limit, a Kubernetes Job's activeDeadlineSeconds, PBS's walltime.
TIME_LIMITS = ("Slurm time limit", "Job deadline exceeded", "PBS walltime exceeded", "LSF run limit reached",
               "MPI launcher time limit")
# Reports of a node declared failed: by the scheduler (Slurm, Kubernetes, Flux) or by Ray's GCS.
SCHEDULER_NODE_FAILURES = ("Slurm node failure", "Kubernetes node failure", "Flux node failure")
NODE_FAILURE_REPORTS = (*SCHEDULER_NODE_FAILURES, "Ray node failure")
# What ends a workload from outside whether or not it still works: a time limit, a user's or operator's cancel, a
# pod deleted or evicted (kubectl delete, a drain, a preemption).
WORKLOAD_ENDERS = (*TIME_LIMITS, "Job cancelled", "Kubernetes eviction")


def _megatron_iteration(iteration: int, ms: float) -> str:
    """A rule-case line: Megatron's training_log() line, without a time of its own."""
    return (f" iteration {iteration:8d}/   10000 | consumed samples: {iteration * 512:12d} | elapsed time per iteration "
            f"(ms): {ms:.1f} | learning rate: 1.500E-04 | lm loss: 2.1E+00 |")


def _iterations_reached(ws: Workspace) -> tuple[datetime, str] | None:
    """When undated Megatron iteration lines say training had got to: from the workload's start, the last iteration
    seen times the longest time per iteration seen. A run resumed from a checkpoint only makes that later than it
    was (it counts iterations done before the start); a slow start-up makes it earlier, which the margin absorbs. None
    without a start time, or when the iterations seen may not include the last (more than a symptom keeps)."""
    start = ws.context.start_time
    progress = [s for s in ws.select(prefix="Training progress") if s.value_set("iteration") and s.value_set("iter_ms")]
    if start is None or not progress or any(len(s.values.get("iteration", [])) >= ws.params.max_values_per_attribute
                                            for s in progress):
        return None
    iteration = max(int(v) for s in progress for v in s.value_set("iteration"))
    per_iteration_ms = max(float(v) for s in progress for v in s.value_set("iter_ms"))
    reached = start + timedelta(milliseconds=iteration * per_iteration_ms)
    return reached, (f"training reached iteration {iteration} at up to {per_iteration_ms:.0f} ms per iteration (about "
                     f"{reached:%Y-%m-%dT%H:%M}Z from the start)")


def _ended_by_the_limit(title: str, lines: list[str], *, hung: bool, stamped: bool = True,
                        after: tuple[str, ...] = (), started: str | None = None) -> RuleCase:
    """A rule case: a workload on n1 whose `lines` its time limit ended at 01:59 (slurmstepd's notice, with a stamp of
    its own or only the time it states, then the lines `after` it), which had hung (the limit demoted: unknown) or not
    (the limit stands). With `started`, the scheduler also gives the job's start (and its end at 01:59:30)."""
    notice = "slurmstepd: error: *** STEP 1.0 ON n1 CANCELLED AT 2025-01-01T01:59:00 DUE TO TIME LIMIT ***"
    times = {"start_time": started, "end_time": "2025-01-01T01:59:30Z"} if started else {}
    return RuleCase(title=title, evidence={"n1/applog": [
        *lines, f"2025-01-01T01:59:00Z {notice}" if stamped else notice, *after]},
                    context={"scheduler_state": "TIMEOUT", **times},
                    expect=Expect(fired=hung, sub_domain="unknown" if hung else "scheduler", terminal_state="TIMEOUT"))


def _progress_origins(ws: Workspace) -> set[str]:
    """The streams of the last training progress reported (where the program's rhythm is read)."""
    reports = [s for s in ws.select(prefix="Training progress") if s.last_time and not ws.undated(s)]
    if not reports:
        return set()
    latest = max(reports, key=lambda s: (s.last_time, s.node or ""))
    return {e.provenance.origin for e in latest.evidence}


def _output_stopped(ws: Workspace, when: datetime, reports: list[WorkSymptom]) -> tuple[datetime, str] | None:
    """When the application last printed a stamped line of its own (one no extractor matched) before a limit or a
    cancel at `when`, on any node, and what that line was. None when some stream cannot say: its last lines before
    `when` were not seen, or unstamped lines (of unknown time) followed the one found - unless they follow the
    stream's own report of the limit or cancel (`reports`): printed after it, they are the shutdown."""
    reported: dict[str, int] = {}  # by stream, the line of its first report of the limit or cancel
    for ev in (ev for s in reports for ev in s.evidence):
        if ev.provenance.line is not None:
            reported[ev.provenance.origin] = min(ev.provenance.line, reported.get(ev.provenance.origin, ev.provenance.line))
    latest: Evidence | None = None
    quiet_before = 0.0  # the longest silence between the earlier points of the stream that printed last
    for end in ws.output_ends:
        index = next((i for i, (ev, _after) in enumerate(end.points)
                      if ev.time is not None and (when - ev.time).total_seconds() > SHUTDOWN_MARGIN_S), None)
        if index is None:
            if end.points or end.undated:
                return None
            continue
        point, undated_from = end.points[index]
        if undated_from is not None and undated_from <= reported.get(end.origin, undated_from):
            return None
        if latest is None or point.time > latest.time:  # type: ignore[operator]
            latest = point
            times = [ev.time for ev, _after in end.points[index:] if ev.time is not None]
            quiet_before = max(((later - earlier).total_seconds() for later, earlier in itertools.pairwise(times)),
                               default=0.0)
    if latest is None or latest.time is None or (when - latest.time).total_seconds() <= quiet_before * QUIET_MARGIN:
        # a program that went about as long without a word before, and went on, is not known to have stopped: one that
        # prints every hour, cut by the limit as its next line was due
        return None
    return latest.time, (f"the application printed nothing of its own after {latest.time:%Y-%m-%dT%H:%M:%SZ} (its last "
                         f"line, on {latest.node or '-'}: '{latest.text[:120]}')")


_WARNED = "Tasks killed by an unhandled warning signal"


_FIRST_TASK_EXITED = "srun ended the step after its first task exited"


@refiner("FirstTaskFailedFirst", phase=Phase.REFINE, doc=f"""
`{_FIRST_TASK_EXITED}` reads the first task's exit as the end of its work. When srun reported a task exiting with a
non-zero code before its --wait timer ran out ('task N: Exited with exit code C'), the first task failed and its
failure is the cause: the symptom is demoted.
""", cases=[
    RuleCase(title="the first task had finished; srun killed the others", evidence={"a/applog": [
        "2025-01-01T00:42:25Z srun: First task exited 30s ago",
        "2025-01-01T00:42:25Z srun: Terminating StepId=1.0",
        "2025-01-01T00:43:26Z srun: error: b: task 1: Killed"]},
        context={"nodes": ["a", "b"]},
        expect=Expect(fired=False, sub_domain="configuration", root_symptom=_FIRST_TASK_EXITED)),
    RuleCase(title="the first task failed", evidence={"a/applog": [
        "2025-01-01T00:41:55Z srun: error: a: task 0: Exited with exit code 1",
        "2025-01-01T00:42:25Z srun: First task exited 30s ago",
        "2025-01-01T00:43:26Z srun: error: b: task 1: Killed"]},
        context={"nodes": ["a", "b"]},
        expect=Expect(fired=True, demoted=[_FIRST_TASK_EXITED])),
])
def first_task_failed_first(ws: Workspace) -> None:
    for ended in ws.active(prefix=_FIRST_TASK_EXITED):
        failed = [s for s in ws.select(prefix="Step task failed") if _a_task_failed(s)
                  and (s.first_time is None or ended.first_time is None or s.first_time <= ended.first_time)]
        if failed:
            ws.demote(ended, f"a task exited with an error first ({failed[0].node or '-'}): its failure ended the step")


@refiner("UnhandledWarningSignal", phase=Phase.REFINE, doc=f"""
Tasks srun reports ended by SIGUSR1 or SIGUSR2 ('User defined signal 1') when the job had asked Slurm for that warning
signal (--signal=USR1@600: sent that many seconds, 60 by default, before the time limit) and they died when it was
due - the limit minus the lead, within the clock-skew tolerance, the limit read from the same request's --time: the
signal's default action ended a program that had no handler for it. `{_WARNED}` becomes a root candidate
(configuration). A user signal at another time came from elsewhere (a library's own preemption signal, another
process), and the report stays a candidate.
""", cases=[
    # https://github.com/martius-lab/cluster_utils/issues/87
    RuleCase(title="the warning signal the job asked for ends its tasks", evidence={"n1/applog": [
        "2025-01-01T00:00:01Z submit: sbatch --time=01:00:00 --signal=USR1@600 --nodes=2",
        "2025-01-01T00:50:02Z srun: error: n1: tasks 0-3: User defined signal 1"]},
        context={"scheduler_state": "COMPLETED", "exit_code": "0:0", "start_time": "2025-01-01T00:00:00Z",
                 "end_time": "2025-01-01T00:50:05Z"},
        expect=Expect(fired=True, sub_domain="configuration", root_symptom=_WARNED)),
    RuleCase(title="SIGUSR2 seven minutes into a four-hour allocation", evidence={"n1/applog": [
        "2025-01-01T00:00:01Z #SBATCH --signal=USR2@90 --time=240 --nodes=2",
        "2025-01-01T00:07:02Z srun: error: n1: task 0: User defined signal 2"]},
        context={"scheduler_state": "FAILED", "exit_code": "140:0", "start_time": "2025-01-01T00:00:00Z",
                 "end_time": "2025-01-01T00:07:05Z"}, expect=Expect(fired=False)),
])
def unhandled_warning_signal(ws: Workspace) -> None:
    start, skew = ws.context.start_time, timedelta(seconds=ws.params.clock_skew_s)
    due = []
    for request in ws.facts_of("warning_signal"):
        limit = _SLURM_TIME.search(request.evidence.text)
        if start is not None and limit is not None:
            due.append(start + _slurm_duration(limit.group(1)) - timedelta(seconds=int(request.attributes.get("lead_s")
                                                                                       or 60)))
    for s in ws.select(prefix=_WARNED, status="interesting"):
        if s.first_time is not None and any(abs(s.first_time - t) <= skew for t in due):
            ws.promote(s, "the job asked Slurm for this warning signal before its limit, and its tasks did not handle it")


# sbatch's --time, in the forms Slurm accepts: minutes, minutes:seconds, hours:minutes:seconds, days-hours,
# days-hours:minutes, days-hours:minutes:seconds.
_SLURM_TIME = re.compile(r"--time[= ](\d+(?:-\d+)?(?::\d+){0,2})\b")


def _slurm_duration(text: str) -> timedelta:
    days, _, clock = text.rpartition("-")
    parts = [int(p) for p in clock.split(":")]
    if days:
        hours, minutes, seconds = (parts + [0, 0])[:3]
    else:
        hours, minutes, seconds = {1: (0, parts[0], 0), 2: (0, parts[0], parts[-1])}.get(len(parts), tuple(parts))
    return timedelta(days=int(days or 0), hours=hours, minutes=minutes, seconds=seconds)


# containerd's record of an exec it ran in a container - a kubelet exec probe's command, every few seconds.
_EXEC_PROBE = re.compile(r"\bExecSync for \\?\"[0-9a-f]+\\?\" returns with exit code")
# A log record's own level as the common formats print it: Python logging's ' - ERROR - ' / 'ERROR:', log4j's ' ERROR ',
# logfmt's 'level=error', and FATAL/CRITICAL
_ERROR_RECORD = re.compile(r"(?:^|[\s\]|-])(?:ERROR|FATAL|CRITICAL)(?:[\s:|-]|$)|\blevel=(?:error|fatal)\b")
# Lines that read as a completion report but are none, each with why
_NOT_COMPLETIONS = (
    (_EXEC_PROBE, "containerd's record of a probe's exec, not the workload's end"),
    (_ERROR_RECORD, "logged at error level: not a completion report"),
)


@filter_rule("NotACompletionReport", phase=Phase.FILTER_EARLY, doc="""
Some lines read as a completion report ('exited with code 0', 'finished') and are none; their `Workload completed`
reading is dropped:
- containerd logs the result of every exec the kubelet runs in a container - liveness and readiness probes, every few
  seconds - as 'ExecSync for "<id>" returns with exit code 0': a probe command that succeeded in a running container,
  not the workload ending;
- a line the program logged at error level: a supervisor reporting that a server it expected to keep running exited
  ('ERROR - Inference server exited with code 0.'), a framework reporting an unexpected end.
""", cases=[
    RuleCase(title="a readiness probe's exec in a serving pod", evidence={"n1/syslog": [
        'Aug 14 00:10:12 n1 containerd[1876]: time="2025-08-14T00:10:12.809364430Z" level=info msg="ExecSync for '
        '\\"19bd063e310682\\" returns with exit code 0"']},
        context={"scheduler": "kubernetes", "scheduler_state": "", "exit_code": ""},
        expect=Expect(fired=True, sub_domain="unknown", terminal_state="UNKNOWN")),
    # https://github.com/gpustack/gpustack/issues/808 (a model instance whose server kept exiting on a Windows worker)
    RuleCase(title="a supervisor's error that its server exited 0", evidence={"n1/applog": [
        "2024-12-19T11:33:40+08:00 - gpustack.worker.serve_manager - ERROR - Inference server exited with code 0."]},
        context={"scheduler": "none", "scheduler_state": "", "exit_code": ""},
        expect=Expect(fired=True, sub_domain="unknown", absent=["Workload completed"])),
    RuleCase(title="a launcher's own exit report", evidence={"n1/applog": [
        "2025-01-01T00:10:00Z I 02-11 20:07:46 log_lib.py:431] Job 1 of worker1 finished with exit code 0."]},
        context={"scheduler": "none", "scheduler_state": "", "exit_code": ""},
        expect=Expect(fired=False, sub_domain="none")),
    RuleCase(title="a launcher's own completion at info level", evidence={"n1/applog": [
        "2025-01-01T01:00:00Z INFO:torch.distributed.elastic.agent.server.api:[default] worker group successfully "
        "finished. Waiting 300 seconds for other agents to finish."]},
        context={"scheduler": "none", "scheduler_state": "", "exit_code": ""},
        expect=Expect(fired=False, sub_domain="none")),
])
def not_a_completion_report(ws: Workspace) -> None:
    for event in [e for e in ws.events_of(EventType.NODE_INTERESTING) if e.symptom == "Workload completed"]:
        reason = next((why for pattern, why in _NOT_COMPLETIONS if pattern.search(event.evidence.text)), None)
        if reason is not None:
            ws.drop(event, reason)


MAX_ZONE_OFFSET_H = 14


@filter_rule("EnderStampInLocalTime", phase=Phase.FILTER_EARLY, doc=f"""
A cancel or a time limit ends the workload, so its report is dated at the end the scheduler recorded. Slurm's daemons
stamp their lines in the node's local time ('*** JOB 7 ON n1 CANCELLED AT 2020-12-07T09:49:54 ***', slurmctld's
'[2020-12-07T09:49:54.311] _slurm_rpc_kill_job'), in outputs whose other lines may be UTC or too few to tell the
stream's zone. When such a report's own stamp sits a whole number of hours (up to {MAX_ZONE_OFFSET_H}) off the
recorded end, within the clock-skew tolerance, the stamp is in another zone: the report is dated in the end's zone
instead, so that it does not appear hours before the faults it ended.
""", cases=[
    RuleCase(title="a cancel stamped in US Eastern time before a GPU fault, the job's end recorded in UTC", evidence={
        "a/applog": ["slurmstepd: error: *** JOB 7 ON a CANCELLED AT 2025-01-01T04:59:54 ***"],
        "b/syslog": ["Jan  1 09:20:00 b kernel: NVRM: Xid (PCI:0000:91:00): 79, pid=1, name=python, GPU has fallen off "
                     "the bus."]},
        context={"scheduler_state": "CANCELLED", "exit_code": "0:15", "start_time": "2025-01-01T09:00:00Z",
                 "end_time": "2025-01-01T09:59:58Z"},
        expect=Expect(fired=True, sub_domain="gpu", culprits=["b"])),
    RuleCase(title="a cancel at the recorded end", evidence={
        "a/applog": ["slurmstepd: error: *** JOB 7 ON a CANCELLED AT 2025-01-01T09:59:54 ***"]},
        context={"scheduler_state": "CANCELLED", "exit_code": "0:15", "start_time": "2025-01-01T09:00:00Z",
                 "end_time": "2025-01-01T09:59:58Z"},
        expect=Expect(fired=False, sub_domain="scheduler")),
])
def ender_stamp_in_local_time(ws: Workspace) -> None:
    end, skew = ws.context.end_time, ws.params.clock_skew_s
    if end is None:
        return
    for event in [e for e in ws.events_of(EventType.NODE_BAD) if e.symptom in WORKLOAD_ENDERS]:
        if event.time is None or event.evidence.time_inferred:
            continue
        hours = round((end - event.time).total_seconds() / 3600)
        shift = timedelta(hours=hours)
        if not 1 <= abs(hours) <= MAX_ZONE_OFFSET_H or abs((end - event.time - shift).total_seconds()) > skew:
            continue
        ws.emit(EmitSpec(type=EventType.NODE_BAD, node=event.node, symptom=event.symptom, count=event.count,
                         evidence=event.evidence.model_copy(update={"time": event.time + shift}),
                         time=event.time + shift, last_time=event.last_time + shift if event.last_time else None,
                         attributes=dict(event.attributes), values={k: sorted(v) for k, v in event.values.items()}))
        ws.drop(event, f"stamped {hours:+d} h off the recorded end: the node's local time")


# torchtitan's pipeline stages logging their shape inference (TORCH_LOGS, a V-level glog line; rule cases below)
_SHAPE_INFERENCE = ("[rank0]:[rank0]:V0101 01:30:10.327000 132351 */torch/distributed/pipelining/stage.py:1419] Shape "
                    "inference: stage 0 sending to stage 1")


@refiner("HungBeforeLimitOrCancel", phase=Phase.REFINE_LATE, doc=f"""
A time limit (Slurm's, a Kubernetes Job's deadline, PBS's walltime) or a cancel is the cause only if the workload was
still working when it struck. When training progress stopped more than {HUNG_BEFORE_LIMIT_S / 60:.0f} minutes (and
half again the longest silence the program kept between its last lines before: a run that logs every two hours)
before
it (or, without progress lines, the workload's own first report of a stall or failure - Ray's report of a worker that
died during a task and vLLM's report of its workers' full broadcast queue among them - came that long before it), or
more than {HUNG_MOST_OF_RUN_S / 60:.0f} minutes and {HUNG_RUN_SHARE:.0%} of the time from the workload's start (a short
job that stopped in its first minutes; the limit's or cancel's own stamped line must say when it struck), the
workload had hung or failed already, and the limit or the cancel only ended it: it is demoted, and the hang or the
failure - explained by that report, or by nothing in the evidence - is what remains. A workload that reported its work
done before the limit (a trainer's completion line), with no report of a failure after it, did not hang: processes
that outlived the work held the allocation, and the limit stays. Megatron's iteration lines without
a time of their own still say how far training got: the last iteration times the longest time per iteration, from the
workload's start; the stall must then also be a quarter of the time since the start (a slow start-up is not counted).
A stack dump that shows ranks waiting in a collective says the same whatever its time: it is taken of a job that
stopped making progress; so does NCCL's INFO log when ranks began a communicator ('Init START') and none finished one
('Init COMPLETE') with no training progress: the ranks hung in NCCL's initialisation. Without progress lines or
reports, the program's own output says it: its last stamped line
that no extractor read, on any node (lines printed within minutes of the limit are its shutdown, and any unstamped
output after that line, whose time is unknown, leaves the question open, as does a silence no longer than half again
one the program kept earlier among its last lines and then went on: a job whose steps take hours prints nothing for
hours, and one that prints every hour may be cut as its next line is due).
""", cases=[
    RuleCase(title="hang then limit", evidence={"n1/applog": [
        f"2025-01-01T00:{m:02d}:00Z step {m * 10} | loss 2.1" for m in range(5, 20)] + [
        "2025-01-01T01:59:00Z slurmstepd: error: *** JOB 1 ON n1 CANCELLED AT 2025-01-01T01:59:00 DUE TO TIME LIMIT ***"]},
        context={"scheduler_state": "TIMEOUT"}, expect=Expect(fired=True, sub_domain="unknown", terminal_state="TIMEOUT")),
    # https://github.com/vllm-project/vllm/issues/2050 (a TP-2 engine whose Ray worker died; requests hung until the
    # job's limit)
    RuleCase(title="a Ray worker died, then nothing until the limit", evidence={"n1/applog": [
        "2025-01-01T00:17:42Z WARNING worker.py:2074 -- A worker died or was killed while executing a task by an "
        "unexpected system error. To troubleshoot the problem, check the logs for the dead worker.",
        "2025-01-01T01:59:00Z slurmstepd: error: *** JOB 1 ON n1 CANCELLED AT 2025-01-01T01:59:00 DUE TO TIME LIMIT ***"]},
        context={"scheduler_state": "TIMEOUT"}, expect=Expect(fired=True, sub_domain="unknown", terminal_state="TIMEOUT")),
    RuleCase(title="undated Megatron iterations: 100 of 6 s each, then nothing until the limit", evidence={"n1/applog": [
        _megatron_iteration(i, 6000.0) for i in range(10, 101, 10)] + [
        "2025-01-01T01:59:00Z slurmstepd: error: *** JOB 1 ON n1 CANCELLED AT 2025-01-01T01:59:00 DUE TO TIME LIMIT ***"]},
        context={"scheduler_state": "TIMEOUT"}, expect=Expect(fired=True, sub_domain="unknown", terminal_state="TIMEOUT")),
    RuleCase(title="undated Megatron iterations that account for the time up to the limit", evidence={"n1/applog": [
        _megatron_iteration(i, 6000.0) for i in range(100, 1101, 100)] + [
        "2025-01-01T01:59:00Z slurmstepd: error: *** JOB 1 ON n1 CANCELLED AT 2025-01-01T01:59:00 DUE TO TIME LIMIT ***"]},
        context={"scheduler_state": "TIMEOUT"}, expect=Expect(fired=False, sub_domain="scheduler")),
    # https://github.com/PrimeIntellect-ai/prime-rl/pull/2961 (inference nodes left serving after the trainer finished)
    RuleCase(title="the trainer finished; other processes held the allocation until the limit", evidence={"n1/applog": [
        f"2025-01-01T00:{m:02d}:00Z step {m * 10} | loss 2.1" for m in range(5, 20)] + [
        "2025-01-01T00:19:30Z Training completed. Saving final checkpoint.",
        "2025-01-01T01:59:00Z slurmstepd: error: *** JOB 1 ON n1 CANCELLED AT 2025-01-01T01:59:00 DUE TO TIME LIMIT ***"]},
        context={"scheduler_state": "TIMEOUT"}, expect=Expect(fired=False, sub_domain="scheduler", terminal_state="TIMEOUT")),
    RuleCase(title="progress reported every two hours; the limit struck an hour after the last report", evidence={
        "n1/applog": [f"2025-01-01T{h:02d}:04:00Z [step={h * 1000}/400000] train/CrossEntropyLoss=2.61"
                      for h in range(0, 20, 2)] + [
        "2025-01-01T19:10:00Z slurmstepd: error: *** JOB 1 ON n1 CANCELLED AT 2025-01-01T19:10:00 DUE TO TIME LIMIT ***"]},
        context={"scheduler_state": "TIMEOUT", "start_time": "2025-01-01T00:00:00Z", "end_time": "2025-01-01T19:10:30Z"},
        expect=Expect(fired=False, sub_domain="scheduler", terminal_state="TIMEOUT")),
    RuleCase(title="the trainer finished, its evaluation's store failed, then nothing until the cancel", evidence={
        "n1/applog": [f"2025-01-01T00:{m:02d}:00Z step {m * 10} | loss 2.1" for m in range(5, 20)] + [
            "2025-01-01T00:19:30Z Training completed. Saving final checkpoint.",
            "2025-01-01T00:20:00Z torch.distributed.DistStoreError: Socket Timeout",
            "2025-01-01T01:59:00Z slurmstepd: error: *** JOB 1 ON n1 CANCELLED AT 2025-01-01T01:59:00 ***"]},
        context={"scheduler_state": "CANCELLED"}, expect=Expect(fired=True, terminal_state="CANCELLED")),
    RuleCase(title="hang, then the user cancels", evidence={"n1/applog": [
        f"2025-01-01T00:{m:02d}:00Z step {m * 10} | loss 2.1" for m in range(5, 20)] + [
        "2025-01-01T01:59:00Z slurmstepd: error: *** JOB 1 ON n1 CANCELLED AT 2025-01-01T01:59:00 ***"]},
        context={"scheduler_state": "CANCELLED"},
        expect=Expect(fired=True, sub_domain="unknown", terminal_state="CANCELLED")),
    RuleCase(title="working until the user cancels", evidence={"n1/applog": [
        f"2025-01-01T01:{m:02d}:00Z step {m * 10} | loss 2.1" for m in range(5, 58)] + [
        "2025-01-01T01:59:00Z slurmstepd: error: *** JOB 1 ON n1 CANCELLED AT 2025-01-01T01:59:00 ***"]},
        context={"scheduler_state": "CANCELLED"},
        expect=Expect(fired=False, sub_domain="scheduler", terminal_state="CANCELLED")),
    RuleCase(title="working until the limit", evidence={"n1/applog": [
        f"2025-01-01T01:{m:02d}:00Z step {m * 10} | loss 2.1" for m in range(5, 58)] + [
        "2025-01-01T01:59:00Z slurmstepd: error: *** JOB 1 ON n1 CANCELLED AT 2025-01-01T01:59:00 DUE TO TIME LIMIT ***"]},
        context={"scheduler_state": "TIMEOUT"}, expect=Expect(fired=False, sub_domain="scheduler")),
    RuleCase(title="hang, then a limit line without a stamp of its own", evidence={"n1/applog": [
        f"2025-01-01T00:{m:02d}:00Z step {m * 10} | loss 2.1" for m in range(5, 20)] + [
        "slurmstepd: error: *** JOB 1 ON n1 CANCELLED AT 2025-01-01T01:59:00 DUE TO TIME LIMIT ***"]},
        context={"scheduler_state": "TIMEOUT"}, expect=Expect(fired=True, sub_domain="unknown", terminal_state="TIMEOUT")),
    RuleCase(title="no progress lines; the workload reported its stall long before the limit", evidence={"n1/applog": [
        "2025-01-01T00:42:10Z [1,0]<stderr>:WARNING: One or more tensors were submitted to be reduced, gathered or "
        "broadcasted by subset of ranks and are waiting for remainder of ranks for more than 60 seconds.",
        "2025-01-01T01:59:00Z slurmstepd: error: *** JOB 1 ON n1 CANCELLED AT 2025-01-01T01:59:00 DUE TO TIME LIMIT ***"]},
        context={"scheduler_state": "TIMEOUT"},
        expect=Expect(fired=True, sub_domain="application", terminal_state="TIMEOUT")),
    # https://github.com/vllm-project/vllm/pull/45150 (a data-parallel group hung after loading; the user cancelled)
    RuleCase(title="vLLM's workers stopped taking work long before the cancel", evidence={"n1/applog": [
        "2025-01-01T00:12:00Z (DPMoEEngineCoreActor pid=3865249) INFO 01-01 00:12:00 [shm_broadcast.py:705] No "
        "available shared memory broadcast block found in 60 seconds. This typically happens when some processes are "
        "hanging or doing some time-consuming work (e.g. compilation)",
        "2025-01-01T00:58:00Z slurmstepd: error: *** JOB 1 ON n1 CANCELLED AT 2025-01-01T00:58:00 ***"]},
        context={"scheduler_state": "CANCELLED", "start_time": "2025-01-01T00:00:00Z",
                 "end_time": "2025-01-01T00:58:30Z"},
        expect=Expect(fired=True, sub_domain="unknown", terminal_state="CANCELLED")),
    # https://github.com/allenai/allennlp/issues/5088 (workers with unequal batch counts blocked at the epoch's end)
    _ended_by_the_limit("no progress lines; the program's own output stopped hours before the limit", [
        "2025-01-01T00:10:00Z 2025-01-01 00:10:00,600 - INFO - allennlp.training.gradient_descent_trainer - Worker 1: "
        "accuracy: 0.8042, batch_loss: 0.6886, loss: 0.5200 ||: 100%|##########| 1563/1563 [21:05<00:00,  1.24it/s]",
        "2025-01-01T00:10:05Z 2025-01-01 00:10:05,100 - INFO - allennlp.training.trainer - Worker 1: Validating"],
        hung=True),
    # https://github.com/SeisSol/SeisSol/issues/774 (its time clusters waiting on each other from the first step)
    _ended_by_the_limit("the program's own watchdog reported no progress an hour before the limit", [
        "Sun Jan  1 00:40:00, Warn:  Ghost: No update since  900 [s] for global cluster  6  with other cluster id  5"],
        hung=True),
    _ended_by_the_limit("dllogger records (epoch stamps) stop hours before the limit", [
        ":::NVLOGv0.2.2 Tacotron2_PyT 1735690200.047455311 (/workspace/dllogger/logger.py:251) train_iter_stop: 32"],
        hung=True, stamped=False),
    _ended_by_the_limit("the program printed until the limit, then its shutdown", [
        "2025-01-01T00:10:05Z 2025-01-01 00:10:05,100 - INFO - trainer - Worker 1: Validating",
        "2025-01-01T01:57:30Z 2025-01-01 01:57:30,100 - INFO - trainer - Worker 1: accuracy: 0.81",
        "2025-01-01T01:59:01Z Traceback (most recent call last):"], hung=False),
    RuleCase(title="quiet for hours, then the limit and srun's unstamped teardown (the launcher's, not the program's)",
             evidence={"n1/applog": [
                 "2025-01-01T00:10:05Z 2025-01-01 00:10:05,100 - INFO - trainer - initializing userbuffers",
                 "2025-01-01T01:59:00Z slurmstepd: error: *** STEP 1.0 ON n1 CANCELLED AT 2025-01-01T01:59:00 DUE TO TIME LIMIT ***",
                 "srun: Job step aborted: Waiting up to 32 seconds for job step to finish.",
                 "srun: error: Timed out waiting for job step to complete"]},
             context={"scheduler_state": "TIMEOUT"},
             expect=Expect(fired=True, sub_domain="unknown", terminal_state="TIMEOUT")),
    RuleCase(title="quiet for hours; the job's record of the limit, stamped at its end, after srun's teardown",
             evidence={"n1/applog": [
                 "2025-01-01T00:10:05Z 2025-01-01 00:10:05,100 - INFO - trainer - initializing userbuffers",
                 "2025-01-01T01:59:00Z slurmstepd: error: *** JOB 1 ON n1 CANCELLED AT 2025-01-01T01:59:00 DUE TO TIME LIMIT ***",
                 "2025-01-01T01:59:40Z srun: error: n1: task 0: Terminated"]},
             context={"scheduler_state": "TIMEOUT"},
             expect=Expect(fired=True, sub_domain="unknown", terminal_state="TIMEOUT")),
    # AlphaFold-Multimer predicts each model for hours and prints nothing in between (run_alphafold.py's lines)
    _ended_by_the_limit("a program that was as quiet before, between two of its steps, is not known to have stopped", [
        "2024-12-31T21:40:00Z I1231 21:40:00.100000 1 run_alphafold.py:190] Running model model_3_multimer on target",
        "2025-01-01T00:20:00Z I0101 00:20:00.100000 1 run_alphafold.py:202] Total JAX model model_3_multimer predict time: 9600.0s",
        "2025-01-01T00:20:30Z I0101 00:20:30.100000 1 run_alphafold.py:190] Running model model_4_multimer on target"],
        hung=False),
    # https://github.com/vllm-project/vllm/issues/6201 (workers silent after 'generating GPU P2P access cache'; Python's
    # warning at exit comes after the limit's notice in the job's output)
    _ended_by_the_limit("quiet for hours; unstamped lines only after the limit's own notice: the shutdown", [
        "INFO 01-01 00:10:03 custom_all_reduce_utils.py:202] generating GPU P2P access cache in "
        "/root/.config/vllm/gpu_p2p_access_cache_for_0,1.json"], hung=True, stamped=False, after=(
        "/usr/lib/python3.10/multiprocessing/resource_tracker.py:224: UserWarning: resource_tracker: There appear to be "
        "1 leaked semaphore objects to clean up at shutdown",)),
    _ended_by_the_limit("unstamped output after the program's last stamped line: its time is not known", [
        "2025-01-01T00:10:05Z 2025-01-01 00:10:05,100 - INFO - trainer - Worker 1: Validating",
        "Epoch 3: accuracy 0.81"], hung=False, stamped=False),
    # https://github.com/pytorch/torchtitan/issues/1492 (pipeline stages hung in shape inference across nodes; the
    # issue's TORCH_LOGS line, its time moved into the case's window)
    _ended_by_the_limit("a 30-minute job silent after its first minute, then its limit", [_SHAPE_INFERENCE], hung=True,
                        started="2025-01-01T01:29:00Z"),
    _ended_by_the_limit("the same silence in a job that had run for an hour before it", [_SHAPE_INFERENCE], hung=False,
                        started="2025-01-01T00:29:00Z"),
    # https://github.com/aws/sagemaker-training-toolkit/issues/240 (EFA left unset: ranks hung in ncclCommInitRankConfig
    # with no error until the job's limit)
    RuleCase(title="NCCL's init began on every rank and finished on none; mpirun's own limit", evidence={"n1/applog": [
        "n1:11811:11881 [0] NCCL INFO comm 0x55de rank 0 nranks 4 cudaDev 0 busId 1000 commId 0x5c1e - Init START",
        "n2:40219:40289 [0] NCCL INFO comm 0x55d1 rank 2 nranks 4 cudaDev 0 busId 1000 commId 0x5c1e - Init START",
        "The user-provided time limit for job execution has been reached:"]},
        context={"scheduler": "none", "end_time": "2025-01-01T00:10:00Z"},
        expect=Expect(fired=True, sub_domain="unknown", terminal_state="TIMEOUT")),
    RuleCase(title="NCCL's init completed; the run then went on until the limit", evidence={"n1/applog": [
        "n1:11811:11881 [0] NCCL INFO comm 0x55de rank 0 nranks 4 cudaDev 0 busId 1000 commId 0x5c1e - Init START",
        "n1:11811:11881 [0] NCCL INFO comm 0x55de rank 0 nranks 4 cudaDev 0 busId 1000 - Init COMPLETE",
        "2025-01-01T00:09:59Z slurmstepd: error: *** JOB 1 ON n1 CANCELLED AT 2025-01-01T00:09:59 DUE TO TIME LIMIT ***"]},
        context={"scheduler_state": "TIMEOUT", "end_time": "2025-01-01T00:10:00Z"},
        expect=Expect(fired=False, sub_domain="scheduler")),
    RuleCase(title="undated progress; a py-spy dump shows ranks waiting in a broadcast", evidence={"n1/applog": [
        " iteration      151/  100000 | consumed samples: 2416 | lm loss: 6.69E+00 |",
        "Thread 835995 (active): \"MainThread\"",
        "    broadcast (torch/distributed/distributed_c10d.py:1191)",
        "    _aggregate_total_loss (deepspeed/runtime/pipe/engine.py:540)",
        "2025-01-01T01:59:00Z slurmstepd: error: *** JOB 1 ON n1 CANCELLED AT 2025-01-01T01:59:00 DUE TO TIME LIMIT ***"]},
        context={"scheduler_state": "TIMEOUT"}, expect=Expect(fired=True, sub_domain="unknown", terminal_state="TIMEOUT")),
])
def hung_before_limit_or_cancel(ws: Workspace) -> None:
    if any(ws.active(prefix="Rank waiting in a collective")):
        for limit in (s for name in WORKLOAD_ENDERS for s in ws.active(prefix=name)):
            ws.demote(limit, "a stack dump shows ranks waiting in a collective: the job had hung")
        return
    if _hung_in_nccl_init(ws):
        for limit in (s for name in WORKLOAD_ENDERS for s in ws.active(prefix=name)):
            ws.demote(limit, "NCCL's communicator initialisation began ('Init START') and completed on no rank: the "
                             "ranks had hung in it")
        return
    progress_end = last_progress(ws)
    # without progress lines, the workload's own reports of a stall or failure (downstream symptoms) say since when
    # it was no longer working
    stalls = [s for name in _STALL_REPORTS for s in ws.select(prefix=name)]
    failing = [s.first_time for s in ws.active(role="symptom") + stalls
               if s.first_time and not ws.undated(s) and s.sub_domain != SubDomain.SCHEDULER]
    reached = None if progress_end is not None else _iterations_reached(ws)
    finished = [s.first_time for s in ws.select(prefix="Workload completed") if s.first_time and not ws.undated(s)]
    limits = [s for name in WORKLOAD_ENDERS for s in ws.active(prefix=name)]
    earliest = _earliest_reports(ws, {s.name for s in limits})
    origins = _progress_origins(ws) if progress_end is not None else set()
    rhythms: dict[datetime, float] = {}  # by the time a limit struck (every node reports the same one)
    for limit in limits:
        when = _struck_at(ws, limit, earliest)
        if when is None:
            continue
        done = [t for t in finished if t <= when]
        if done and not any(min(done) < t < when for t in failing):
            continue  # the work had finished, and nothing failed after: what kept the allocation did not hang
        until, said, margin = _working_until(progress_end, failing, reached, when)
        if until is None:
            until, said = _output_stopped(ws, when, limits) or (None, "")
        if until is None:
            continue
        idle = (when - until).total_seconds()
        started = ws.context.start_time
        # a program that reports its progress every two hours has not hung an hour after its last report
        if until == progress_end and when not in rhythms:
            rhythms[when] = quiet_between_lines(ws, origins, when)
        rhythm = rhythms[when] if until == progress_end else 0.0
        run = (when - started).total_seconds() if started else 0.0
        # the shorter stop needs the action's own time: one known only as the workload's end may have come earlier
        dated = bool(_stamped(limit)) or limit.name in earliest
        long_stop = idle > HUNG_BEFORE_LIMIT_S or (dated and idle > HUNG_MOST_OF_RUN_S and idle > HUNG_RUN_SHARE * run)
        if long_stop and idle > max(rhythm, margin * run):
            ws.demote(limit, f"{said} {idle / 60:.0f} min before '{limit.name}' ended the job: it had hung or "
                             "failed already")


def _hung_in_nccl_init(ws: Workspace) -> bool:
    """Ranks began an NCCL communicator and none completed one, and the workload never trained."""
    phases = {phase for e in ws.facts_of("nccl_init") for phase in e.value_set("phase")}
    return phases == {"START"} and not ws.select(prefix="Training progress")


def _stamped(s: WorkSymptom) -> list[datetime]:
    """The times of a symptom's lines that carry one of their own (an unstamped slurmstepd line only inherits a lower
    bound from the line above it)."""
    return [e.time for e in s.evidence if e.time is not None and not e.time_inferred]


def _earliest_reports(ws: Workspace, names: set[str]) -> dict[str, datetime]:
    """For each scheduler action named, the earliest stamped line of any report of it (one pass per name)."""
    earliest: dict[str, datetime] = {}
    for name in sorted(names):
        times = [t for s in ws.select(prefix=name) if s.name == name for t in _stamped(s)]
        if times:
            earliest[name] = min(times)
    return earliest


def _struck_at(ws: Workspace, action: WorkSymptom, earliest: dict[str, datetime]) -> datetime | None:
    """When a time limit or a cancel struck: the earliest of its own stamped lines, else the workload's end. A workload
    meets one limit (one cancel) however many nodes report it, so the job's record of it, stamped with the job's end,
    struck when the earliest report of the same action did (`earliest`, by action)."""
    own = min(_stamped(action), default=ws.context.end_time)
    if own is None:
        return None
    return min(own, earliest.get(action.name, own))


def _working_until(progress_end: datetime | None, failing: list[datetime], reached: tuple[datetime, str] | None,
                   when: datetime) -> tuple[datetime | None, str, float]:
    """Until when the workload was working, what says so, and the margin its stall must exceed: its last progress,
    else its first report of a stall or failure before the limit (one after it is what the limit caused), else where
    undated iteration counts place it."""
    if progress_end is not None:
        return progress_end, "training progress stopped", 0.0
    before = [t for t in failing if t < when]
    if before:
        return min(before), "the workload reported a stall or failure", 0.0
    if reached is not None:
        return reached[0], reached[1], UNDATED_PROGRESS_MARGIN
    return None, "", 0.0


# How long before the scheduler's node-failure line its peers' errors about that node may begin: Slurm marks a
# silent node DOWN after SlurmdTimeout (300 s by default); Kubernetes marks it NotReady after the node monitor grace
# period (40-50 s) and evicts its pods 5 minutes later (the unreachable taint's tolerationSeconds), and a
# `kubectl describe` or `get events` line carries the time the command ran, the event's own time only as an age.
NODE_FAILURE_DETECTION_S = 1800.0


# More names than a host list of one workload's failure is read for (a typo'd range must not expand without bound).
MAX_LISTED_NODES = 10_000


@filter_rule("SlurmNodeListExpanded", phase=Phase.FILTER, doc="""
slurmctld names several nodes of one event as a host list ('Nodes gpu-[01-03],gpu-07 not responding, setting DOWN').
A node failure that names a host list names each node in it: the list is expanded (python-hostlist, Slurm's syntax)
into the nodes blamed, so the rules that read which nodes failed, and how many at once, see them all. A list that does
not parse stays as written.
""", cases=[
    RuleCase(title="six nodes set DOWN together", evidence={"a/scheduler": [
        "[2025-01-01T00:38:10.402] error: Nodes n-[1-3],m-1 not responding, setting DOWN"]},
        context={"scheduler": "slurm", "scheduler_state": "NODE_FAIL", "exit_code": "0:0",
                 "nodes": ["n-1", "n-2", "n-3", "m-1"]},
        expect=Expect(fired=True, sub_domain="scheduler", culprits=[])),
])
def slurm_node_list_expanded(ws: Workspace) -> None:
    for event in ws.events_of(EventType.NODE_BAD):
        named = event.value_set("blamed_node") if event.symptom in SCHEDULER_NODE_FAILURES else set()
        lists = {name for name in named if "[" in name or "," in name}
        if not lists:
            continue
        names = named - lists
        for text in sorted(lists):
            try:
                expanded = hostlist.expand_hostlist(text)
            except hostlist.BadHostlist:
                expanded = [text]
            names.update(expanded if len(expanded) <= MAX_LISTED_NODES else [text])
        event.attributes.pop("blamed_node", None)
        event.values["blamed_node"] = sorted(names)
        ws.note("localise", f"the host list {', '.join(sorted(lists))} names {len(names)} node(s)", node=event.node,
                symptom=event.symptom)


_ADDRESS = re.compile(r"^\d{1,3}(?:\.\d{1,3}){3}$|^[0-9a-fA-F:]+:[0-9a-fA-F:]*$|^ip-\d+-\d+-\d+-\d+\b")


@refiner("NodeFailureOutsideTheWorkload", phase=Phase.REFINE_EARLY, after=("PodOnLostNode",), doc="""
A scheduler's node-failure report (Kubernetes NotReady, Slurm DOWN) that names only nodes by host name, none of them
allocated to the workload, is another node's loss: a storage or system node, another job's. It can explain the
workload's failure only through what that node served, which other reports show; as the workload's own node failure
it is demoted to context. Reports naming an address (an IP, an EC2 name) that no evidence maps are left alone: the node
may be one of the workload's under another name.
""", cases=[
    # https://github.com/longhorn/longhorn/issues/6651 (a Longhorn storage node rebooted under a two-node job)
    RuleCase(title="a storage node outside the job went NotReady", evidence={
        "a/scheduler": ["2025-01-01T00:43:58Z Normal   NodeNotReady   node/lh-stor-3   Node lh-stor-3 status is now: "
                        "NodeNotReady"],
        "a/applog": ["2025-01-01T00:52:27Z [rank0]: OSError: [Errno 30] Read-only file system: '/ckpt/epoch_17'"]},
        context={"scheduler": "kubernetes", "scheduler_state": "Failed", "exit_code": "", "nodes": ["a", "b"]},
        expect=Expect(fired=True, culprits=[], demoted=["Kubernetes node failure"])),
    RuleCase(title="the workload's own node went NotReady", evidence={
        "a/scheduler": ["2025-01-01T00:43:58Z Normal   NodeNotReady   node/b   Node b status is now: NodeNotReady"]},
        context={"scheduler": "kubernetes", "scheduler_state": "Failed", "exit_code": "", "nodes": ["a", "b"]},
        expect=Expect(fired=False, sub_domain="scheduler", culprits=["b"])),
])
def node_failure_outside_the_workload(ws: Workspace) -> None:
    if not ws.context.nodes:
        return
    for report in [r for name in SCHEDULER_NODE_FAILURES for r in ws.active(prefix=name)]:
        named = report.value_set("blamed_node")
        if not named or report.value_set("blamed_pod") or blamed_nodes(ws, report):
            continue
        if any(_ADDRESS.match(n) for n in named):
            continue
        ws.demote(report, f"names {', '.join(sorted(named))}, not a node of this workload")


@refiner("PodOnLostNode", phase=Phase.REFINE_EARLY, doc="""
A Kubernetes node failure reported through a pod's events names the pod. The node that ran it is the one whose own
NCCL lines print that pod's host name (IpToNodeMap's host names); that node is blamed. A report whose pod maps to no
node of the workload names nothing here and is set aside.
""", cases=[
    RuleCase(title="the pod's node went NotReady", evidence={
        "w13/applog": ["2025-01-01T00:00:01Z job-worker-1:1:1 [0] NCCL INFO Bootstrap : Using eth0:10.244.3.13<0>"],
        "w11/applog": ["2025-01-01T00:00:01Z job-worker-0:1:1 [0] NCCL INFO Bootstrap : Using eth0:10.244.1.13<0>"],
        "w11/scheduler": ["2025-01-01T00:20:00Z   Normal   NodeNotReady   pod/job-worker-1   Node is not ready"]},
        context={"scheduler": "kubernetes", "scheduler_state": "Failed", "exit_code": "", "nodes": ["w11", "w13"]},
        expect=Expect(fired=True, sub_domain="scheduler", culprits=["w13"], terminal_state="NODE_FAIL")),
    RuleCase(title="a pod nobody's lines name", evidence={
        "w11/applog": ["2025-01-01T00:10:00Z [rank0]: KeyError: 'lr'"],
        "w11/scheduler": ["2025-01-01T00:20:00Z   Normal   NodeNotReady   pod/other-job-0   Node is not ready"]},
        context={"scheduler": "kubernetes", "scheduler_state": "Failed", "exit_code": "", "nodes": ["w11", "w13"]},
        expect=Expect(fired=True, sub_domain="application", culprits=[])),
])
def pod_on_lost_node(ws: Workspace) -> None:
    hosts = ws.facts.get("host_to_node", {})
    for report in ws.active(prefix="Kubernetes node failure"):
        pods = report.value_set("blamed_pod")
        if not pods:
            continue
        nodes = sorted({hosts[p] for p in pods if p in hosts})
        if nodes:
            report.values["blamed_node"] = sorted(report.value_set("blamed_node") | set(nodes))
            ws.note("localise", f"pod {', '.join(sorted(pods))} ran on {', '.join(nodes)}", node=nodes[0])
        elif not report.value_set("blamed_node"):
            ws.demote(report, f"names pod {', '.join(sorted(pods))}, which ran on no node of this workload that the "
                      "evidence shows")


@refiner("LostNodeExplainsPeerErrors", phase=Phase.REFINE_LATE, doc=f"""
When a node dies, its peers' RDMA operations to it fail (retry exceeded, flushes) before the scheduler notices:
peer errors whose named peer is a node the scheduler then declared failed (Slurm DOWN, Kubernetes NotReady, a
Kueue node-failure eviction), within {NODE_FAILURE_DETECTION_S / 60:.0f} minutes before that declaration, are the
node failure's symptoms, not a fabric fault. They are demoted, and the node failure stays the root candidate
(a fault in the lost node's own log, earlier, still comes first); errors naming several lost nodes (a rack that lost
power) count the same, even where no one of those peers could be blamed on them. When the peer they name is an
address that no evidence maps to a node, and the scheduler declared exactly one node failed, that node is taken as the peer; errors
that name no peer at all (older NCCL's 'Got completion with error 12', UCX's 'UD endpoint ... unhandled timeout error')
are taken as the loss of the nodes declared. NCCL's
WARN lines carry no time: the time they inherit from an earlier line is a lower bound, and is read as such; one
with no time before it in its file is dated at the job's end, which says nothing about when it came.
""", cases=[
    # Flux's job-exec losing a node's shell (flux-core's bulk-exec.c message, as in
    # https://github.com/flux-framework/flux-core/issues/4089) and UCX's UD endpoint timeout on a peer (ud_ep.c's format)
    RuleCase(title="UCX's UD endpoint times out on a peer as Flux loses a node's job shell", evidence={
        "a/applog": ["2022-02-02T16:02:14Z job.exception type=exec severity=0 lost contact with job shell on broker b "
                     "(rank 42)",
                     "2022-02-02T16:02:19Z [a:40211:0:40211]      ud_ep.c:278  Fatal: UD endpoint 0x1c9f2e0 to <no "
                     "debug data>: unhandled timeout error"]},
        context={"nodes": ["a", "b"], "scheduler": "none", "scheduler_state": "", "exit_code": ""},
        expect=Expect(fired=True, culprits=["b"], demoted=["UCX UD endpoint timed out"])),
    RuleCase(title="peers lose the node Kubernetes then marks NotReady", evidence={
        "a/applog": ["2025-01-01T00:00:01Z a:1:1 [0] NCCL INFO Bootstrap : Using eth0:10.0.0.1<0>",
                     "2025-01-01T00:13:11Z a:1:1 [0] NCCL WARN NET/IB : Got completion from peer 10.0.0.2<1> with status=12 opcode=0 len=0 vendor err 129"],
        "b/applog": ["2025-01-01T00:00:01Z b:1:1 [0] NCCL INFO Bootstrap : Using eth0:10.0.0.2<0>"],
        "c/applog": ["2025-01-01T00:00:01Z c:1:1 [0] NCCL INFO Bootstrap : Using eth0:10.0.0.3<0>",
                     "2025-01-01T00:13:11Z c:1:1 [0] NCCL WARN NET/IB : Got completion from peer 10.0.0.2<1> with status=12 opcode=0 len=0 vendor err 129"],
        "a/scheduler": ["2025-01-01T00:20:00Z   Normal   NodeNotReady   Node/b   Node b status is now: NodeNotReady"]},
        context={"scheduler": "kubernetes", "scheduler_state": "Failed", "exit_code": ""},
        expect=Expect(fired=True, sub_domain="scheduler", culprits=["b"], terminal_state="NODE_FAIL",
                      demoted=["IB Error-12"])),
    RuleCase(title="peers lose an address no line maps; Slurm then marks one node down", evidence={
        "a/applog": ["2025-01-01T00:13:11Z a:1:1 [0] NCCL WARN NET/IB : Got completion from peer 10.0.0.2<1> with "
                     "status=12 opcode=0 len=0 vendor err 129"],
        "a/scheduler": ["[2025-01-01T00:18:00.000] error: Nodes b not responding, setting DOWN"]},
        context={"scheduler": "slurm", "scheduler_state": "NODE_FAIL", "exit_code": "0:0", "nodes": ["a", "b"]},
        expect=Expect(fired=True, culprits=["b"], terminal_state="NODE_FAIL", demoted=["IB Error-12"])),
    RuleCase(title="older NCCL names no peer; Slurm then marks one node down", evidence={
        "a/applog": ["2019-11-15 18:50:48 a:4102:4242 [0] transport/net_ib.cc:798 NCCL WARN NET/IB : Got completion "
                     "with error 12, opcode 0, len 0, vendor err 129"],
        "a/scheduler": ["[2019-11-15T18:55:43.090] error: Nodes b not responding, setting DOWN"]},
        context={"scheduler": "slurm", "scheduler_state": "NODE_FAIL", "exit_code": "0:0", "nodes": ["a", "b"],
                 "start_time": "2019-11-15T18:00:00Z", "end_time": "2019-11-15T18:56:00Z"},
        expect=Expect(fired=True, culprits=["b"], terminal_state="NODE_FAIL", demoted=["IB Error-12"])),
    RuleCase(title="an unstamped error first in its file; Slurm then marks the peer down", evidence={
        "a/applog": ["a:4102:4242 [0] transport/net_ib.cc:1295 NCCL WARN NET/IB : Got completion from peer "
                     "10.0.0.2<56441> with error 12, opcode 1, len 0, vendor err 129 (Recv)"],
        "b/applog": ["2025-01-01T00:00:01Z b:1:1 [0] NCCL INFO Bootstrap : Using eth0:10.0.0.2<0>"],
        "a/scheduler": ["[2025-01-01T00:18:00.000] error: Nodes b not responding, setting DOWN"]},
        context={"scheduler": "slurm", "scheduler_state": "NODE_FAIL", "exit_code": "0:0", "nodes": ["a", "b"]},
        expect=Expect(fired=True, culprits=["b"], terminal_state="NODE_FAIL", demoted=["IB Error-12"])),
    RuleCase(title="peers lose two nodes Slurm then marks down together", evidence={
        "a/applog": ["a:1:1 [0] NCCL INFO Bootstrap : Using ib0:10.0.0.1<0>",
                     "2025-01-01T00:10:00Z a:1:1 [0] NCCL WARN NET/IB : Got completion from peer 10.0.0.3<45100> with "
                     "status=12 opcode=0 len=0 vendor err 129 (Send)",
                     "2025-01-01T00:10:01Z a:1:1 [1] NCCL WARN NET/IB : Got completion from peer 10.0.0.4<45101> with "
                     "status=12 opcode=0 len=0 vendor err 129 (Send)"],
        "c/applog": ["c:1:1 [0] NCCL INFO Bootstrap : Using ib0:10.0.0.3<0>"],
        "d/applog": ["d:1:1 [0] NCCL INFO Bootstrap : Using ib0:10.0.0.4<0>"],
        "a/scheduler": ["[2025-01-01T00:14:40.000] error: Nodes c,d not responding, setting DOWN"]},
        context={"scheduler": "slurm", "scheduler_state": "NODE_FAIL", "exit_code": "0:0", "nodes": ["a", "c", "d"]},
        expect=Expect(fired=True, sub_domain="scheduler", terminal_state="NODE_FAIL", demoted=["IB Error-12"])),
    RuleCase(title="older NCCL names no peer; Slurm then marks two nodes down", evidence={
        "a/applog": ["2025-01-01T00:10:00Z a:1:1 [0] NCCL WARN NET/IB : Got completion with error 12, opcode 1, len "
                     "32768, vendor err 129"],
        "a/scheduler": ["[2025-01-01T00:14:40.000] error: Nodes c,d not responding, setting DOWN"]},
        context={"scheduler": "slurm", "scheduler_state": "NODE_FAIL", "exit_code": "0:0", "nodes": ["a", "c", "d"]},
        expect=Expect(fired=True, terminal_state="NODE_FAIL", demoted=["IB Error-12"])),
    RuleCase(title="the errors name another node", evidence={
        "a/applog": ["2025-01-01T00:00:01Z a:1:1 [0] NCCL INFO Bootstrap : Using eth0:10.0.0.1<0>",
                     "2025-01-01T00:13:11Z a:1:1 [0] NCCL WARN NET/IB : Got completion from peer 10.0.0.3<1> with status=12 opcode=0 len=0 vendor err 129"],
        "b/applog": ["2025-01-01T00:00:01Z b:1:1 [0] NCCL INFO Bootstrap : Using eth0:10.0.0.2<0>",
                     "2025-01-01T00:13:11Z b:1:1 [0] NCCL WARN NET/IB : Got completion from peer 10.0.0.3<1> with status=12 opcode=0 len=0 vendor err 129"],
        "c/applog": ["2025-01-01T00:00:01Z c:1:1 [0] NCCL INFO Bootstrap : Using eth0:10.0.0.3<0>"],
        "a/scheduler": ["2025-01-01T00:20:00Z   Normal   NodeNotReady   Node/b   Node b status is now: NodeNotReady"]},
        context={"scheduler": "kubernetes", "scheduler_state": "Failed", "exit_code": ""},
        expect=Expect(fired=False, sub_domain="network", culprits=["c"])),
])
def lost_node_explains_peer_errors(ws: Workspace) -> None:
    window = timedelta(seconds=NODE_FAILURE_DETECTION_S)
    for report in ws.active(role="root"):
        lost = set(blamed_nodes(ws, report))
        declared = report.first_time
        if report.attributes.get("terminal_state") != TerminalState.NODE_FAIL.value or not lost or declared is None:
            continue
        for s in ws.active(role="root", sub_domain=SubDomain.NETWORK):
            peers = set(blamed_nodes(ws, s)) if s.definition.blame == "peer" else set()
            if not peers and s.definition.blame == "peer" and named_peers(ws, s) <= lost:
                peers = named_peers(ws, s)  # nodes it names that no one reporter could be blamed for: all lost
            if not peers and s.definition.blame in ("peer", "none") and (
                    len(lost) == 1 or not s.value_set("peer") | s.value_set("peer_rdma")):
                # it names no peer (older NCCL's 'Got completion with error 12', UCX's UD endpoint timing out), or an
                # address no evidence maps to a node while one node was lost: the lost nodes are the peers it lost
                peers = lost
            # a time only inherited from an earlier line is a lower bound: the error came then or later; the job's
            # end, given to a line with no time before it at all, bounds nothing
            began, inherited = s.first_time, ws.undated(s)
            at_the_end_only = inherited and began == ws.context.end_time
            if peers and peers <= lost and s.node not in lost and began is not None \
                    and (inherited or declared - window <= began) \
                    and (at_the_end_only or began <= declared + timedelta(seconds=ws.params.clock_skew_s)):
                when = "later" if inherited else f"{(declared - began).total_seconds() / 60:.0f} min later"
                ws.demote(s, f"its peer {', '.join(sorted(peers))} was lost: {report.name} names it {when}")


# The kubelet's eviction message: how far free space fell below its threshold, and what each evicted container used.
_EVICTION_SHORTFALL = re.compile(r"Threshold quantity: (?P<threshold>[0-9.]+[KMGTPE]?i?), available: "
                                 r"(?P<available>[0-9.]+[KMGTPE]?i?)")
_CONTAINER_USE = re.compile(r"Container (?:\S+ )?was using (?P<used>[0-9.]+[KMGTPE]?i?)")
_QUANTITY = re.compile(r"(?P<number>[0-9.]+)(?P<suffix>[KMGTPE]?i?)")
_SUFFIX = {"": 1, "K": 10**3, "M": 10**6, "G": 10**9, "T": 10**12, "P": 10**15, "E": 10**18,
           "Ki": 2**10, "Mi": 2**20, "Gi": 2**30, "Ti": 2**40, "Pi": 2**50, "Ei": 2**60}


def _bytes(quantity: str) -> float:
    """A Kubernetes resource quantity ('9702960Ki', '2Gi', '10120387530') in bytes."""
    match = _QUANTITY.fullmatch(quantity)
    return float(match["number"]) * _SUFFIX[match["suffix"]] if match and match["suffix"] in _SUFFIX else 0.0


# Without the threshold in the message, a pod whose containers wrote this much into the node's disk (checkpoints,
# caches in the writable layer) is taken to have filled it itself.
BIG_WRITER_BYTES = 1 << 30


def _evicted_pods_filled_the_disk(ws: Workspace) -> bool:
    """Some disk-pressure eviction message shows its pod's containers using at least the shortfall below the
    kubelet's threshold (without that pod's own writes the node would not have been under pressure), or, when the
    message gives no threshold, at least BIG_WRITER_BYTES."""
    for s in ws.active(prefix="Evicted: node disk full"):
        for evidence in s.evidence:
            shortfall = _EVICTION_SHORTFALL.search(evidence.text)
            used = sum(_bytes(m["used"]) for m in _CONTAINER_USE.finditer(evidence.text))
            if shortfall and used and used >= _bytes(shortfall["threshold"]) - _bytes(shortfall["available"]):
                return True
            if not shortfall and used >= BIG_WRITER_BYTES:
                return True
    return False


# The kubelet's eviction manager reclaiming disk on node b (the cases below).
# A write of the node's container runtime or kubelet: the daemon's own log line, or a path in their state directories.
_NODE_RUNTIME_WRITE = re.compile(r"\b(?:dockerd|containerd|kubelet)\[\d+\]|/var/lib/(?:docker|containerd|kubelet)/")
_RECLAIMING = {"b/syslog": ["2025-01-01T00:10:00Z b kubelet[1]: W0101 00:10:00.000000 1 eviction_manager.go:344] "
                            "eviction manager: attempting to reclaim ephemeral-storage"]}


@filter_rule("DescribedPodOnItsNode", phase=Phase.FILTER_EARLY, doc="""
kubectl describe pod names the pod's node ('Node: a100-n13/10.44.7.13'), and what the describe says of its containers
(their last state's reason and message, the kubelet's events) happened on that node - wherever the output was saved
(often the file of the node the operator ran kubectl on; a describe cut above its 'Node:' line still names it in
its Scheduled event). An event read from a 'Node:' line (or that Scheduled event) or the lines after it, up
to the next object's 'Name:' or the next '$ ' prompt of the same file (a prompt line is the next command's, not the
pod's), is moved to the described pod's node when that is another node of the workload.
""", cases=[
    # https://github.com/NVIDIA/nvidia-docker/issues/1451 (a node whose driver was upgraded under the loaded module)
    RuleCase(title="one pod's describe, saved in another node's file", evidence={
        "a/scheduler": ["Name:         train-worker-1", "Node:         b/10.0.0.2",
                        "      Message:      OCI runtime create failed: running prestart hook 1 caused: error running "
                        "hook: exit status 1, stdout: , stderr: nvidia-container-cli: initialization error: nvml "
                        "error: driver/library version mismatch: unknown"]},
        context={"scheduler": "kubernetes", "nodes": ["a", "b"]},
        expect=Expect(fired=True, sub_domain="gpu", culprits=["b"])),
    RuleCase(title="the next command's output is not the pod's", evidence={
        "a/scheduler": ["Name:         train-worker-1", "Node:         b/10.0.0.2", "$ kubectl logs train-worker-0",
                        "2025-01-01T00:10:00Z RuntimeError: CUDA error: an illegal memory access was encountered"]},
        context={"scheduler": "kubernetes", "nodes": ["a", "b"]},
        expect=Expect(fired=False, sub_domain="application")),
])
def described_pod_on_its_node(ws: Workspace) -> None:
    marks: dict[str, list[tuple[int, str | None]]] = {}  # origin -> (line, the described pod's node or None: a boundary)
    for fact in ws.events_of(f"{EventType.CONTEXT}.describe_block"):
        provenance = fact.evidence.provenance
        node = ws.canonical_node(str(fact.attributes["pod_node"])) if fact.attributes.get("pod_node") else None
        marks.setdefault(provenance.origin, []).append((provenance.line or 0, node))
    if not any(node for found in marks.values() for _, node in found):
        return
    for found in marks.values():
        found.sort(key=lambda mark: mark[0])
    for event in [e for e in ws.events if e.type in (EventType.NODE_BAD, EventType.NODE_INTERESTING)]:
        line = event.evidence.provenance.line or 0
        before = [node for at, node in marks.get(event.evidence.provenance.origin, []) if at <= line]
        if before and before[-1] and before[-1] != ws.canonical_node(event.node):
            ws.move(event, before[-1], f"kubectl describe places the pod on {before[-1]} (its output is in "
                                       f"{event.node}'s file)")


# srun --label's prefix of a task's output line ('1: ...'), after a collector's stamp if any
_SRUN_TASK_LABEL = re.compile(r"^\s*(?:\d{4}-\d{2}-\d{2}[T ][\d:.,]+Z?\s+)?(\d{1,6}):\s")


@filter_rule("SrunLabelNamesTheTask", phase=Phase.FILTER_EARLY,
             after=("DescribedPodOnItsNode", "RelayedOutput", "CudaErrorCodeMeaning"), doc="""
srun --label prefixes each line of a task's output with the task's number ('1: ...'), and the job's output, every
task's lines in it, is written where the batch script runs. srun's report of a task's end in the same output names
the node the task ran on ('srun: error: a100-n08: task 1: Exited with exit code 255'): a line of that output labelled
with the task (one line, not a coalesced run of them, whose tasks may differ) is that node's, and is moved to it.
""", cases=[
    # https://github.com/NVIDIA/nvidia-container-toolkit/issues/69 (one node's container could not reach a GPU its
    # host saw; the job's output saved on the first node)
    RuleCase(title="task 1's nvidia-smi error in the batch node's output", evidence={"a/applog": [
        "1: Unable to determine the device handle for GPU0000:65:00.0: Unknown Error",
        "srun: error: b: task 1: Exited with exit code 255"]},
        context={"nodes": ["a", "b"]}, expect=Expect(fired=True, sub_domain="gpu", culprits=["b"])),
    RuleCase(title="no srun report names the task's node", evidence={"a/applog": [
        "1: Unable to determine the device handle for GPU0000:65:00.0: Unknown Error"]},
        context={"nodes": ["a", "b"]}, expect=Expect(fired=False, sub_domain="gpu", culprits=["a"])),
])
def srun_label_names_the_task(ws: Workspace) -> None:
    where: dict[tuple[str, str], str] = {}  # (origin, task number) -> the node srun says the task ran on
    for event in ws.events_of(EventType.NODE_BAD):
        node = ws.canonical_node(str(event.attributes.get("task_node") or ""))
        if event.symptom != "Step task failed" or node is None:
            continue
        for task in _task_numbers(str(event.attributes.get("tasks", ""))):
            where[(event.evidence.provenance.origin, task)] = node
    if not where:
        return
    for event in [e for e in ws.events if e.type in (EventType.NODE_BAD, EventType.NODE_INTERESTING) and e.count == 1]:
        label = _SRUN_TASK_LABEL.match(event.evidence.text)
        node = where.get((event.evidence.provenance.origin, label.group(1))) if label else None
        if label and node and node != ws.canonical_node(event.node):
            ws.move(event, node, f"srun's label names task {label.group(1)}, which ran on {node}")


def _task_numbers(tasks: str) -> list[str]:
    """srun's task list ('1', '0-3', '2,5'), as numbers; a range longer than a node can hold is not expanded."""
    numbers: list[str] = []
    for part in tasks.split(","):
        low, _, high = part.partition("-")
        if low.isdigit() and (not high or high.isdigit() and 0 <= int(high) - int(low) < 1024):
            numbers.extend(str(n) for n in range(int(low), int(high or low) + 1))
    return numbers


@refiner("NodeDiskPressureNamesTheNode", phase=Phase.REFINE, doc="""
A disk-pressure eviction ('The node was low on resource: ephemeral-storage', 'The node had condition:
[DiskPressure]') names the resource, not the node, and is often read from another node's `kubectl describe`. The
node whose own kubelet was reclaiming disk (eviction manager, image GC over its threshold) is the one whose disk
was full: when exactly one node's kubelet did, its `Node disk pressure` becomes the root candidate and blames it (a
'No space left on device' of that node's container runtime or kubelet, or on their directories under /var/lib, is the
same full disk and is demoted under it) - unless the eviction message shows the evicted pod's containers using at least the shortfall below the kubelet's
threshold ('Threshold quantity: T, available: A. Container c was using U'), or using a gibibyte or more where the
message gives no threshold in bytes (none, or a percentage of a disk whose size it does not say) ('Container train was using 7499Mi, which exceeds its request of 0'): then the workload's
own writes filled the disk and the node is not blamed.
""", cases=[
    RuleCase(title="the evicting node's own kubelet", evidence={
        "a/scheduler": ["2025-01-01T00:10:05Z   Warning  Evicted    1m  kubelet  The node had condition: [DiskPressure]."],
        **_RECLAIMING},
        expect=Expect(fired=True, sub_domain="storage", culprits=["b"], root_symptom="Node disk pressure")),
    RuleCase(title="the evicted pod itself filled the disk", evidence={
        "a/scheduler": ["2025-01-01T00:10:05Z   Warning  Evicted  pod/w-1  The node was low on resource: "
                        "ephemeral-storage. Threshold quantity: 2Gi, available: 1487Mi. Container pytorch was using "
                        "6Gi, request is 0, which exceeds its request of 0."],
        **_RECLAIMING},
        expect=Expect(fired=True, culprits=[], sub_domain="storage")),
    RuleCase(title="no threshold given, the pod wrote gigabytes", evidence={
        "a/scheduler": ["2025-01-01T00:10:05Z   Warning  Evicted  pod/w-1  The node was low on resource: "
                        "ephemeral-storage. Container train was using 7499Mi, which exceeds its request of 0."],
        **_RECLAIMING},
        expect=Expect(fired=True, culprits=[], sub_domain="storage")),
    RuleCase(title="a message that leaves the container unnamed (fms-hf-tuning PR 106)", evidence={
        "a/scheduler": ["2025-01-01T00:10:05Z   Warning  Evicted  pod/w-1  The node was low on resource: "
                        "ephemeral-storage. Container was using 1498072868Ki, which exceeds its request of 0."],
        **_RECLAIMING},
        expect=Expect(fired=True, culprits=[], sub_domain="storage")),
    RuleCase(title="no threshold given, the pod wrote little", evidence={
        "a/scheduler": ["2025-01-01T00:10:05Z   Warning  Evicted  pod/w-1  The node was low on resource: "
                        "ephemeral-storage. Container pytorch was using 34260Ki, which exceeds its request of 0."],
        **_RECLAIMING},
        expect=Expect(fired=True, culprits=["b"])),
    RuleCase(title="a percentage threshold, the pod wrote far more than a gibibyte", evidence={
        "a/scheduler": ["Message:          The node was low on resource: ephemeral-storage. Threshold quantity: 10%.",
                        "2025-01-01T00:10:05Z  Warning  Evicted  95s  kubelet  The node was low on resource: "
                        "ephemeral-storage. Threshold quantity: 10%, available: 88917Mi. Container pytorch was using "
                        "161Gi, request is 0, has larger consumption of ephemeral-storage."],
        **_RECLAIMING},
        expect=Expect(fired=True, culprits=[], sub_domain="storage")),
    RuleCase(title="the evicted pod used little of it", evidence={
        "a/scheduler": ["2025-01-01T00:10:05Z   Warning  Evicted  pod/w-1  The node was low on resource: "
                        "ephemeral-storage. Threshold quantity: 24068434671, available: 23201836Ki. Container pytorch "
                        "was using 106848Ki, request is 0, has larger consumption of ephemeral-storage."],
        **_RECLAIMING},
        expect=Expect(fired=True, culprits=["b"])),
    RuleCase(title="reclaiming disk, nothing evicted", evidence=_RECLAIMING,
        expect=Expect(fired=False, culprits=[])),
    # https://github.com/kubernetes/minikube/issues/7073 (the runtime's image store filling the node's disk)
    RuleCase(title="the node's runtime ran out of the same disk first", evidence={
        "a/scheduler": ["2025-01-01T00:10:05Z   Warning  Evicted    1m  kubelet  The node had condition: [DiskPressure]."],
        "b/syslog": ["2025-01-01T00:09:00Z b dockerd[1187]: time=\"2025-01-01T00:09:00Z\" level=error msg=\"Handler for "
                     "POST /v1.40/images/create returned error: write /var/lib/docker/tmp/GetImageBlob718341052: no "
                     "space left on device\"", *_RECLAIMING["b/syslog"]]},
        expect=Expect(fired=True, sub_domain="storage", culprits=["b"], root_symptom="Node disk pressure",
                      demoted=["No space left on device"])),
])
def node_disk_pressure_names_the_node(ws: Workspace) -> None:
    if not ws.active(prefix="Evicted: node disk full"):
        return
    if _evicted_pods_filled_the_disk(ws):
        ws.note("localize", "the evicted pod's own containers used more than the disk's shortfall: its writes filled it")
        return
    pressed = ws.select(prefix="Node disk pressure", status="interesting")
    if len({s.node for s in pressed}) == 1:
        for s in pressed:
            ws.promote(s, "this node's kubelet was reclaiming disk when the workload's pods were evicted for a full disk")
        for full in ws.active(prefix="No space left on device", node=pressed[0].node):
            if any(_NODE_RUNTIME_WRITE.search(e.text) for e in full.evidence):
                ws.demote(full, "the node's container runtime or kubelet ran out of the disk its kubelet was reclaiming")


def _lost_before_it_started(title: str, cloud_line: str, killed_at: str) -> RuleCase:
    """A case: Slurm killed job 1 at `killed_at` (HH:MM:SS.mmm) on node b, which the cloud's or slurmctld's
    `cloud_line` says never started or was taken back: a NODE_FAIL no node is blamed for."""
    return RuleCase(title=title, evidence={
        "a/scheduler": [cloud_line, f"[2025-01-01T{killed_at}] Killing JobId=1 on failed node b"]},
        context={"scheduler": "slurm", "scheduler_state": "NODE_FAIL", "exit_code": "0:0", "nodes": ["a", "b"]},
        expect=Expect(fired=True, sub_domain="scheduler", culprits=[], terminal_state="NODE_FAIL",
                      demoted=["Slurm node failure"]))


@refiner("OrderlyShutdownIsNotANodeFailure", phase=Phase.REFINE_LATE, after=("LostNodeExplainsPeerErrors", "DeadNodeExplainsPeerErrors"), doc=f"""
A node that ran the kubelet's graceful shutdown (its pods terminated 'in response to imminent node shutdown'), or
whose operating system powered off or rebooted in order (systemd-logind), goes NotReady or stops responding because it
was shut down on purpose; a powered-down node Slurm could not resume (ResumeTimeout, or the cloud's capacity error in
its reason) never came up at all. Its munged stops with the
shutdown, so the Slurm messages that then fail for want of munged are the shutdown's too. A Kubernetes or Slurm node
failure naming that node, declared within
{NODE_FAILURE_DETECTION_S / 60:.0f} minutes after the shutdown began (or with no time of its own), is that shutdown,
not a fault of the node: it is demoted and the node is not blamed. The operating system's shutdown then stands as
what took the node from the workload (scheduler, no node blamed). Not when the node came back and its slurmd then
failed to start: that is why it was lost. So is a node failure declared within that time of a cloud's record that it
reclaimed a spot instance (such records name an instance, not a node): the cloud took the instance back.
""", cases=[
    RuleCase(title="a spot node reclaimed", evidence={
        "b/syslog": ["2025-01-01T00:10:00Z b kubelet[1]: I0101 00:10:00.000000 1 nodeshutdown_manager_linux.go:265] "
                     "\"Shutdown manager detected new shutdown event, isNodeShuttingDownNow\" event=true"],
        "a/scheduler": ["2025-01-01T00:11:00Z   Warning   NodeNotReady   node/b   Node b status is now: NodeNotReady"]},
        context={"scheduler": "kubernetes", "scheduler_state": "Failed", "exit_code": ""},
        expect=Expect(fired=True, sub_domain="scheduler", culprits=[], terminal_state="PREEMPTED",
                      demoted=["Kubernetes node failure"])),
    RuleCase(title="this node was lost; another one was shut down later", evidence={
        "a/syslog": ["2025-01-01T00:30:00Z a kubelet[1]: I0101 00:30:00.000000 1 nodeshutdown_manager_linux.go:265] "
                     "\"Shutdown manager detected new shutdown event, isNodeShuttingDownNow\" event=true"],
        "a/scheduler": ["2025-01-01T00:11:00Z   Warning   NodeNotReady   node/b   Node b status is now: NodeNotReady"]},
        context={"scheduler": "kubernetes", "scheduler_state": "Failed", "exit_code": "", "nodes": ["a", "b"]},
        expect=Expect(fired=False, culprits=["b"])),
    RuleCase(title="a VM powered off by its cloud under Slurm", evidence={
        "b/syslog": ["Jul  4 15:24:51 b systemd-logind[912]: Power key pressed short."],
        "a/scheduler": ["[2025-07-04T15:27:31.902] error: Nodes b not responding, setting DOWN"]},
        context={"scheduler": "slurm", "scheduler_state": "NODE_FAIL", "exit_code": "0:0", "nodes": ["a", "b"],
                 "start_time": "2025-07-04T11:00:00Z", "end_time": "2025-07-04T15:31:00Z"},
        expect=Expect(fired=True, sub_domain="scheduler", culprits=[], terminal_state="NODE_FAIL",
                      demoted=["Slurm node failure"])),
    # https://github.com/aws/aws-parallelcluster/issues/1763 (the node-health daemon terminated a busy node after one
    # sinfo timeout; srun's unstamped line sits under the last training line of an hour before)
    RuleCase(title="a node its cluster's daemon powered off; srun's line carries no time", evidence={
        "b/applog": ["2020-05-07 00:16:40,148 INFO train: epoch 1 | iter  2000/21000 | loss 2.500 | 11.6 it/s",
                     "srun: error: Node failure on b"],
        "b/syslog": ["May  7 00:58:01 b systemd-logind[1030]: Power key pressed."],
        "a/scheduler": ["[2020-05-07T00:58:40.901] error: Nodes b not responding, setting DOWN"]},
        context={"scheduler": "slurm", "scheduler_state": "NODE_FAIL", "exit_code": "0:0", "nodes": ["a", "b"],
                 "start_time": "2020-05-06T21:16:40Z", "end_time": "2020-05-07T00:58:06Z"},
        expect=Expect(fired=True, sub_domain="scheduler", culprits=[], terminal_state="NODE_FAIL",
                      demoted=["Slurm node failure"])),
    # https://github.com/aws/aws-parallelcluster/issues/1763 (a node powered off; its slurmstepd then found no munged)
    RuleCase(title="a node shutting down loses munged with everything else", evidence={
        "b/syslog": ["Jan  1 00:29:08 b systemd-logind[912]: Power key pressed."],
        "b/applog": ['2025-01-01T00:29:10Z slurmstepd: error: Munge encode failed: Failed to access '
                     '"/var/run/munge/munge.socket.2": No such file or directory']},
        context={"scheduler": "slurm", "scheduler_state": "NODE_FAIL", "exit_code": "0:0", "nodes": ["a", "b"],
                 "start_time": "2025-01-01T00:00:00Z", "end_time": "2025-01-01T00:31:00Z"},
        expect=Expect(fired=True, culprits=[], demoted=["munged not running on the node"])),
    # https://github.com/aws/aws-parallelcluster/issues/1671 (Spot instances reclaimed under a multi-node job: NODE_FAIL and
    # a requeue)
    _lost_before_it_started("the cloud reclaimed a spot instance; Slurm then lost its node",
                            "aws ec2 describe-spot-instance-requests (g5.48xlarge, i-0c3d7ab41f2e8a911): Status.Code "
                            "instance-terminated-no-capacity, UpdateTime 2025-01-01T00:30:01Z", "00:31:50.005"),
    # https://github.com/aws/aws-parallelcluster-node/pull/603 (EC2 had no p4d capacity for the job's dynamic nodes)
    _lost_before_it_started("a cloud node the provider had no capacity for",
                            "[2025-01-01T00:15:34.171] update_node: node b reason set to: "
                            "(Code:InsufficientInstanceCapacity)Failure when resuming nodes", "00:15:34.174"),
    # https://github.com/aws/aws-parallelcluster/issues/2716 (older releases: the capacity error names the nodes in a list)
    _lost_before_it_started("the launch error names the node the cloud had no capacity for",
                            "2025-01-01 00:15:11,823 - [slurm_plugin.common:add_instances_for_nodes] - ERROR - "
                            "Encountered exception when launching instances for nodes (x1) ['b']: An error occurred "
                            "(InsufficientInstanceCapacity) when calling the RunInstances operation (reached max "
                            "retries: 1)", "00:15:11.830"),
    _lost_before_it_started("a cloud node that never resumed",
                            "[2025-01-01T00:45:58.897] node b not resumed by ResumeTimeout(2400) - marking down and "
                            "power_save", "00:45:58.900"),
    # https://github.com/aws/aws-parallelcluster/wiki ((3.2.0-3.5.1) GPU nodes not coming back online after scontrol
    # reboot: slurmd starts before the GPU device files exist)
    RuleCase(title="a node Slurm rebooted came back, and its slurmd failed", evidence={
        "b/syslog": ["Jan  1 00:00:09 b systemd-logind[1122]: The system will reboot now!",
                     "Jan  1 00:04:57 b slurmd[1402]: slurmd: fatal: Invalid GRES record for gpu, count does not match "
                     "File value"],
        "a/scheduler": ["[2025-01-01T00:30:05.002] node b not resumed by ResumeTimeout(1800) - marking down and "
                        "power_save",
                        "[2025-01-01T00:30:05.003] Killing JobId=1 on failed node b"]},
        context={"scheduler": "slurm", "scheduler_state": "NODE_FAIL", "exit_code": "0:0", "nodes": ["a", "b"],
                 "start_time": "2025-01-01T00:00:03Z", "end_time": "2025-01-01T00:30:05Z"},
        expect=Expect(fired=False, sub_domain="scheduler", culprits=["b"],
                      root_symptom="slurmd failed to start on the node")),
])
def orderly_shutdown_is_not_a_node_failure(ws: Workspace) -> None:
    window = timedelta(seconds=NODE_FAILURE_DETECTION_S)
    began = {s.node: s.first_time for s in ws.select(prefix="Orderly OS shutdown") + ws.active(prefix="Graceful node shutdown")
             if s.node and s.first_time}
    began.update({node: s.first_time for name in ("Node never resumed", "Cloud capacity unavailable")
                  for s in ws.active(prefix=name) if s.first_time
                  for node in (ws.canonical_node(n) for n in _nodes_not_started(s)) if node})
    # a node that came back from a shutdown or a resume and whose slurmd then failed was lost to that
    shutdowns = _shutdown_times(ws)
    for broken in ws.active(prefix="slurmd failed to start on the node"):
        since = shutdowns.get(broken.node or "", ws.context.start_time)
        if broken.node in began and broken.first_time and (since is None or broken.first_time >= since):
            del began[broken.node]
    # a shutdown (a reclaimed spot instance's too) stops munged with every other service: the node's messages fail
    stopping = dict(began)
    stopping.update({s.node: s.first_time for s in ws.select(prefix="Spot instance reclaimed") if s.node and s.first_time})
    for gone in ws.active(prefix="munged not running on the node"):
        when = stopping.get(gone.node or "")
        if when is not None and (ws.undated(gone) or gone.first_time is None or when <= gone.first_time):
            ws.demote(gone, f"{gone.node} was shutting down: its munged stopped with it")
    reclaims = ws.active(prefix="Spot instance reclaimed")
    for report in [r for name in SCHEDULER_NODE_FAILURES for r in ws.active(prefix=name)]:
        lost = set(blamed_nodes(ws, report))
        declared = min(_stamped(report), default=None)  # an unstamped srun line inherits only a lower bound
        reclaim = next((r for r in reclaims if declared is None or r.first_time is None or ws.undated(r)
                        or abs(declared - r.first_time) <= window), None)
        if reclaim is not None:
            # the cloud took a spot instance back as the scheduler lost the node (its record names an instance, not a
            # node): the reclaim, not the node
            ws.demote(report, f"a spot instance was reclaimed ({reclaim.node or '-'}): the node was taken back")
            continue
        shut = sorted(n for n in lost if n in began and (declared is None or
                                                        began[n] - window <= declared <= began[n] + window))
        if shut and len(shut) == len(lost):
            ws.demote(report, f"{', '.join(shut)} ran a graceful shutdown (shut down on purpose, not lost)")
            for shutdown in (s for node in shut for s in ws.select(prefix="Orderly OS shutdown", node=node)):
                ws.promote(shutdown, f"the shutdown of {shutdown.node} took it from the workload")


# ParallelCluster's resume log names the nodes whose instances it could not launch as a Python list ("for nodes (x2)
# ['gpu-dy-p4d-3', 'gpu-dy-p4d-4']: An error occurred (InsufficientInstanceCapacity) ...").
_QUOTED_NAME = re.compile(r"'([\w.-]+)'")


def _nodes_not_started(s: WorkSymptom) -> set[str]:
    """The nodes a report of a node that never started names: its blamed node, or the names its lines quote."""
    return s.value_set("blamed_node") | {name for e in s.evidence for name in _QUOTED_NAME.findall(e.text)}


def _shutdown_times(ws: Workspace) -> dict[str, datetime]:
    """When each node's operating system began an orderly power-off or reboot (dated lines only)."""
    began: dict[str, datetime] = {}
    for s in ws.select(prefix="Orderly OS shutdown"):
        if s.node and s.first_time and not ws.undated(s):
            began[s.node] = min(began.get(s.node, s.first_time), s.first_time)
    return began


def _powered_off_b_then_timeout_on_a(timed_out: str) -> dict[str, list[str]]:
    """Rule-case evidence: node b powered off at 00:20 by its power button; a's watchdog gave up at `timed_out`."""
    return {"b/syslog": ["Jan  1 00:20:00 b systemd-logind[912]: Power key pressed."],
            "a/applog": [f"2025-01-01T{timed_out}Z [rank0]:[E ProcessGroupNCCL.cpp:616] [Rank 0] Watchdog caught "
                         "collective operation timeout: WorkNCCL(SeqNum=812, OpType=ALLREDUCE, NumelIn=1, NumelOut=1, "
                         "Timeout(ms)=600000) ran for 600012 milliseconds before timing out."]}


@refiner("ShutdownLeftPeersWaiting", phase=Phase.REFINE_LATE,
          after=("OrderlyShutdownIsNotANodeFailure", "UnplacedPodFollowsAFailure"), doc=f"""
Without a scheduler's word on a lost node, the peers of a node whose operating system powered off in order (a
reclaimed spot VM, an operator's reboot, a node auto-repair replacing it) only see its ranks vanish: their collectives
and stores time out minutes later, their network transports report failed connections or completions, and those
reports name no node. When no root candidate remains but such network errors on the other nodes after the shutdown
(they are demoted), exactly one node of the workload began an
orderly shutdown while it ran, that node reported no failure before it, the other nodes' first failure followed within
{NODE_FAILURE_DETECTION_S / 60:.0f} minutes and training did not go on after it, the shutdown is what took the node from
the workload: it stands as the answer (scheduler, no node blamed). When none of the other nodes' failure lines carries
a time of its own, the workload's end stands for their first failure.
""", cases=[
    RuleCase(title="a spot VM powered off; its peer's watchdog fires ten minutes later",
             evidence=_powered_off_b_then_timeout_on_a("00:30:05"),
             context={"nodes": ["a", "b"], "scheduler": "none", "exit_code": "1"},
             expect=Expect(fired=True, sub_domain="scheduler", culprits=[])),
    RuleCase(title="a spot VM powered off a minute before the end; the peer's lines carry no time", evidence={
        "b/syslog": ["Jan  1 00:49:00 b systemd-logind[912]: Power key pressed."],
        "a/applog": ["a:5634:6012 [0] misc/socket.cc:49 NCCL WARN socketProgress: Connection closed by remote peer "
                     "b<41232>"]},
        context={"nodes": ["a", "b"], "scheduler": "none", "exit_code": "1", "start_time": "2025-01-01T00:00:00Z",
                 "end_time": "2025-01-01T00:50:00Z"},
        expect=Expect(fired=True, sub_domain="scheduler", culprits=[])),
    # https://github.com/aws/containers-roadmap/issues/2567 (node auto-repair replacing a GPU node under a job)
    RuleCase(title="a node powered down; its peers' OFI completions fail seconds later", evidence={
        "b/syslog": ["Jan  1 00:20:00 b systemd-logind[1201]: System is powering down."],
        "a/applog": ["2025-01-01T00:20:38Z a:200:260 [0] NCCL WARN NET/OFI Request 0x7f2c1c0b2e40 completed with error. "
                     "RC: 103. Error: 4353 (Connection failed). Completed length: 0, Request: { dev: 0, size: 0, state: "
                     "CREATED, type: RECV }"]},
        context={"nodes": ["a", "b"], "scheduler": "kubernetes", "scheduler_state": "Failed", "exit_code": ""},
        expect=Expect(fired=True, sub_domain="scheduler", culprits=[])),
    RuleCase(title="the peer failed first", evidence=_powered_off_b_then_timeout_on_a("00:10:05"),
             context={"nodes": ["a", "b"], "scheduler": "none", "exit_code": "1"},
             expect=Expect(fired=False, culprits=[])),
    RuleCase(title="a root candidate of its own stays the answer", evidence={
        "b/syslog": ["Jan  1 00:20:00 b systemd-logind[912]: Power key pressed."],
        "a/syslog": ["Jan  1 00:25:00 a kernel: NVRM: Xid (PCI:0000:91:00): 79, pid=1, name=x, GPU has fallen off "
                     "the bus."]},
        context={"nodes": ["a", "b"], "scheduler": "none", "exit_code": "1"},
        expect=Expect(fired=False, sub_domain="gpu", culprits=["a"])),
])
def shutdown_left_peers_waiting(ws: Workspace) -> None:
    start, end = ws.context.start_time, ws.end_time
    began = {node: t for node, t in _shutdown_times(ws).items()
             if (start is None or t >= start) and (end is None or t <= end)}
    if len(began) != 1:
        return
    (node, shut), = began.items()
    window = timedelta(seconds=NODE_FAILURE_DETECTION_S)
    roots = ws.active(role="root")
    # the other nodes' network errors after the shutdown: their transports finding the node's ranks gone
    vanished = [r for r in roots if r.node != node and r.sub_domain == SubDomain.NETWORK and r.first_time
                and not ws.undated(r) and shut <= r.first_time <= shut + window]
    if len(vanished) != len(roots):
        return
    # a stall is placed on whichever node printed the last progress line: not that node's own failure
    own_first = min((t for s in ws.active(node=node) if (t := s.first_time) and not ws.undated(s)
                     and not s.name.startswith("Training stalled")), default=None)
    others = [s for s in ws.active() if s.node != node]
    others_first = min((t for s in others if (t := s.first_time) and not ws.undated(s)), default=None)
    if others_first is None and others and end is not None:
        others_first = end  # none of their lines carries a time: the workload's end bounds them
    if (own_first is not None and own_first < shut) or others_first is None or \
            not shut <= others_first <= shut + timedelta(seconds=NODE_FAILURE_DETECTION_S):
        return
    progress_end = last_progress(ws)
    if progress_end is not None and progress_end > shut + timedelta(seconds=SURVIVED_AFTER_S):
        return
    for report in vanished:
        ws.demote(report, f"{node} shut down in order just before: its peers' transport lost its ranks")
    for s in ws.select(prefix="Orderly OS shutdown", node=node):
        ws.promote(s, f"{node} was shut down in order {(others_first - shut).total_seconds() / 60:.0f} min before "
                      "its peers' first failure, which names no node")


# What ranks report when the processes they wait for were stopped: a collective or the store outlived its timeout.
_SUSPENSION_TIMEOUTS = ("NCCL watchdog timeout", "NCCL heartbeat monitor timeout", "Rendezvous or store timeout")


@refiner("SuspendedCollectivesTimedOut", phase=Phase.REFINE_LATE, doc="""
A job Slurm suspended in place and resumed keeps the collectives its ranks had in flight; on resume their
watchdogs find them older than the timeout and abort every rank. When the job's record says it was suspended and
the only failures are collective or store timeouts (no root candidate of its own), the suspension is the answer
(scheduler, no node blamed).
""", cases=[
    RuleCase(title="watchdogs fire on resume", evidence={
        "a/scheduler": ["   SuspendTime=2025-01-01T00:50:00 SecsPreSuspend=1800 LastSchedEval=2025-01-01T00:00:00"],
        "a/applog": ["2025-01-01T00:50:01Z [rank0]:[E ProcessGroupNCCL.cpp:616] [Rank 0] Watchdog caught collective "
                     "operation timeout: WorkNCCL(SeqNum=9, OpType=ALLREDUCE, NumelIn=1, NumelOut=1, "
                     "Timeout(ms)=1800000) ran for 2843855 milliseconds before timing out."]},
        context={"scheduler": "slurm", "scheduler_state": "FAILED", "exit_code": "1:0"},
        expect=Expect(fired=True, sub_domain="scheduler", culprits=[])),
    RuleCase(title="a fault of its own outranks the suspension", evidence={
        "a/scheduler": ["   SuspendTime=2025-01-01T00:50:00 SecsPreSuspend=1800 LastSchedEval=2025-01-01T00:00:00"],
        "a/syslog": ["Jan  1 00:49:00 a kernel: NVRM: Xid (PCI:0000:91:00): 79, pid=1, name=x, GPU has fallen off "
                     "the bus."]},
        context={"scheduler": "slurm", "scheduler_state": "FAILED", "exit_code": "1:0"},
        expect=Expect(fired=False, sub_domain="gpu", culprits=["a"])),
])
def suspended_collectives_timed_out(ws: Workspace) -> None:
    suspended = ws.select(prefix="Job suspended by the scheduler")
    if not suspended or ws.active(role="root"):
        return
    timeouts = sorted((s for s in ws.active() if s.name.startswith(_SUSPENSION_TIMEOUTS)), key=WorkSymptom.sort_key)
    if timeouts:
        ws.promote(suspended[0], f"the job was suspended and resumed; {timeouts[0].name} is what a pause leaves")


def _ray_node_went_silent(title: str) -> RuleCase:
    """A case of Ray's GCS marking node w dead with nothing else in the logs: the node is blamed, the cause unknown."""
    return RuleCase(title=title, evidence={
        "h/applog": ["2025-01-01 00:10:00,000 WARNING worker.py:1828 -- The node with node id: 97ab and address: "
                     "10.0.0.2 and node name: 10.0.0.2 has been marked dead because the detector has missed too many "
                     "heartbeats from it."],
        "w/applog": ["2025-01-01 00:00:01,000 INFO scripts.py:862 -- Local node IP: 10.0.0.2"]},
        context={"nodes": ["h", "w"]},
        expect=Expect(fired=False, culprits=["w"], sub_domain="unknown"))


_UNPLACED = "Ray resource request never placed"
# Ray's autoscaler repeats its warning for a request that still waits; one that waited this long without the job
# progressing is not waiting for a neighbour's actors to finish.
RAY_REQUEST_WAIT_S = 600.0


@refiner("RayRequestNeverPlaced", phase=Phase.REFINE, doc=f"""
A Ray resource request the autoscaler reported as infeasible ('No available node types can fulfill resource
request') is the job's request, and so is one vLLM gave up waiting for ('Cannot provide a placement group ... within N
seconds', after its own timeout); one the autoscaler reported as waiting ('cannot be scheduled right now') is, when the warnings
span {RAY_REQUEST_WAIT_S / 60:.0f} minutes or more and no training progress came after the first: a bundle or an actor
bigger than what a node of the job's cluster registered. `{_UNPLACED}` becomes a root candidate (configuration);
a limit or a cancel that ended the wait yields to it (rule SchedulerActionYields).
""", cases=[
    # https://github.com/allenai/open-instruct/issues/1431 (60-CPU bundles on Ray nodes that have 32)
    RuleCase(title="a placement group waits until the time limit", evidence={
        "a/applog": [f"2025-01-01 00:{m:02d}:00 (autoscaler +{m}m0s) Warning: The following resource request cannot "
                     "be scheduled right now: {'CPU': 60.0, 'GPU': 6.0}. This is likely due to all cluster resources "
                     "being claimed by actors." for m in (1, 11, 21, 31)]
                    + ["slurmstepd: error: *** JOB 7 ON a CANCELLED AT 2025-01-01T01:59:00 DUE TO TIME LIMIT ***"]},
        context={"scheduler_state": "TIMEOUT"},
        expect=Expect(fired=True, sub_domain="configuration", culprits=[], root_symptom=_UNPLACED)),
    RuleCase(title="the driver's unstamped warnings, timed by the autoscaler's own clock", evidence={
        "a/applog": ["2025-01-01 00:00:30 placement bundle of: [{'GPU': 6, 'CPU': 60}]"]
                    + [f"(autoscaler +{m}m0s) Warning: The following resource request cannot be scheduled right now: "
                       "{'CPU': 60.0, 'GPU': 6.0}. This is likely due to all cluster resources being claimed by actors."
                       for m in (1, 11, 21, 31)]},
        context={"scheduler_state": "TIMEOUT"},
        expect=Expect(fired=True, sub_domain="configuration", culprits=[], root_symptom=_UNPLACED)),
    RuleCase(title="vLLM gave up on its placement group (no autoscaler lines)", evidence={
        "a/applog": ["2025-01-01 00:31:00 ERROR 01-01 00:31:00 engine.py:400] ValueError: Cannot provide a placement group "
                     "of placement_group_specs=[{'node:10.0.0.5': 0.001, 'GPU': 1.0}, {'GPU': 1.0}] within 1800 seconds. "
                     "See `ray status` to make sure the cluster has enough resources."]},
        expect=Expect(fired=True, sub_domain="configuration", culprits=[], root_symptom=_UNPLACED)),
    RuleCase(title="a request that waited a minute, then training went on", evidence={
        "a/applog": ["2025-01-01 00:01:00 (autoscaler +1m0s) Warning: The following resource request cannot be "
                     "scheduled right now: {'CPU': 8.0}. This is likely due to all cluster resources being claimed "
                     "by actors.",
                     "2025-01-01 00:03:00 step 10 | loss 2.1"]},
        expect=Expect(fired=False)),
])
def ray_request_never_placed(ws: Workspace) -> None:
    progress = [s.last_time or s.first_time for s in ws.select(prefix="Training progress")]
    for s in ws.select(prefix=_UNPLACED, status="interesting"):
        if s.value_set("infeasible"):
            ws.promote(s, "Ray found no node type that can hold the request")
            continue
        if s.value_set("specs"):
            ws.promote(s, "vLLM gave up waiting for its placement group")
            continue
        if s.first_time is None or s.last_time is None:
            continue
        elapsed = [_seconds(v) for v in s.value_set("elapsed")]
        waited = (max(elapsed) - min(elapsed) if elapsed else 0.0) if ws.undated(s) else \
            (s.last_time - s.first_time).total_seconds()
        if waited >= RAY_REQUEST_WAIT_S and not any(t is not None and t > s.first_time for t in progress):
            ws.promote(s, f"the request waited {waited / 60:.0f} minutes and the job made no progress")


def _seconds(span: str) -> float:
    """Seconds in a duration written as Ray's autoscaler writes it ('1h2m3.5s', '11m20s')."""
    parts = re.fullmatch(r"(?:(\d+)h)?(?:(\d+)m)?([\d.]+)s", span)
    if parts is None:
        return 0.0
    hours, minutes, seconds = parts.groups()
    return int(hours or 0) * 3600 + int(minutes or 0) * 60 + float(seconds)


_GANG_SHORT = "Gang has fewer pods than its minimum"


def _volcano_gang_event(tally: str) -> str:
    """A rule-case line: Volcano's Unschedulable event for a gang, with its tally of tasks by status."""
    return f"  Normal   Unschedulable  2m (x38 over 38m)  volcano  1/1 tasks in gang unschedulable: pod group is not ready, {tally}"


@refiner("GangBelowItsMinimum", phase=Phase.REFINE, doc=f"""
Volcano's fit error for a gang counts the job's tasks by status and states the PodGroup's minAvailable (sorted as
strings, so the minimum can come anywhere in the list); the scheduler cache's event before it counts the pending tasks
('<pending>/<tasks> tasks in gang unschedulable'), which the tally may leave out. When the tasks counted (with those
pending, once the job has pods) are fewer than the minimum, or the gang plugin says 'Not enough valid tasks', the gang cannot be placed until
more pods exist: the job's request or its operator's pod creation is at fault, not capacity. `{_GANG_SHORT}` becomes
a root candidate (configuration) unless training made progress after it was first reported; a gang with as many tasks
as its minimum is waiting for capacity.
""", cases=[
    # https://github.com/volcano-sh/volcano/issues/1959 (kubedl created the worker only after the master ran)
    RuleCase(title="one pod of a gang of two", evidence={"a/scheduler": [_volcano_gang_event("1 Pending, 2 minAvailable")]},
             expect=Expect(fired=True, sub_domain="configuration", culprits=[], root_symptom=_GANG_SHORT)),
    RuleCase(title="the minimum sorted first", evidence={"a/scheduler": [_volcano_gang_event("12 minAvailable, 3 Pending, 8 Running")]},
             expect=Expect(fired=True, sub_domain="configuration", culprits=[], root_symptom=_GANG_SHORT)),
    RuleCase(title="the gang plugin's own count", evidence={"a/scheduler": [
        "Warning  PodGroupNotReady  podgroup/llama-ft  Not enough valid tasks for gang-scheduling, valid: 3, min: 4"]},
             expect=Expect(fired=True, sub_domain="configuration", culprits=[], root_symptom=_GANG_SHORT)),
    RuleCase(title="a whole gang waiting for GPUs", evidence={"a/scheduler": [_volcano_gang_event("4 Pending, 4 minAvailable")]},
             expect=Expect(fired=False)),
    # https://github.com/volcano-sh/volcano/issues/2462 (part of a gang started; the other 12 pods wait for room)
    RuleCase(title="pending tasks counted before the tally", evidence={"a/scheduler": [
        "    message: '12/8 tasks in gang unschedulable: pod group is not ready, 20 minAvailable, 8 Running'"]},
             expect=Expect(fired=False)),
    RuleCase(title="the same message folded in the PodGroup's YAML", evidence={"a/scheduler": [
        "    message: '12/8 tasks in gang unschedulable: pod group is not ready, 20 minAvailable,", "      8 Running'"]},
             expect=Expect(fired=False)),
])
def gang_below_its_minimum(ws: Workspace) -> None:
    progress = [s.last_time or s.first_time for s in ws.select(prefix="Training progress")]
    for s in ws.select(prefix=_GANG_SHORT, status="interesting"):
        if s.first_time is not None and any(t is not None and t > s.first_time for t in progress):
            continue
        short = sorted(t for t, pending in _gang_tallies(s) if _tasks_below_minimum(t, pending))
        if short:
            ws.promote(s, f"the gang has fewer tasks than its minimum ({short[0]})")
        elif s.value_set("valid"):
            ws.promote(s, "Volcano's gang plugin found fewer valid tasks than the minimum")


_GANG_EVENT = re.compile(r"(?:(\d+)/(\d+) tasks in gang unschedulable: )?pod group is not ready, (\d+ \w+(?:, \d+ \w+)*)")


def _gang_tallies(s: WorkSymptom) -> list[tuple[str, int]]:
    """Each tally the symptom read with the pending tasks its line counted before it: 0 when it counted none, or no
    pod of the job exists yet ('3/0 tasks': a PodGroup never enqueued, whose pending tasks are only its spec's); a
    tally whose line is not among the evidence (one of a coalesced run) with none. A tally cut by a line wrap (a
    PodGroup's YAML message folded after a comma) is incomplete and left out."""
    found = [(m, e.text) for e in s.evidence for m in [_GANG_EVENT.search(e.text)] if m]
    seen = {m.group(3) for m, _ in found}
    whole = [(m.group(3), int(m.group(1)) if m.group(2) and int(m.group(2)) else 0)
             for m, text in found if not text[m.end():].strip().startswith(",")]
    return whole + [(tally, 0) for tally in sorted(s.value_set("tally") - seen)]


def _tasks_below_minimum(tally: str, pending: int) -> bool:
    """Whether Volcano's tally ('1 Pending, 2 minAvailable'), with the pending tasks counted before it when the tally
    has no Pending entry, holds fewer tasks than its minAvailable."""
    counts = [entry.split(" ", 1) for entry in tally.split(", ")]
    minimum = [int(n) for n, what in counts if what == "minAvailable"]
    tasks = sum(int(n) for n, what in counts if what != "minAvailable")
    if not any(what == "Pending" for _, what in counts):
        tasks += pending
    return bool(minimum) and tasks < minimum[0]


RAY_CHECK = "Ray component failed an internal check"
# The check's message, or its expression when a log keeps only that (the reconnect timeout it compares against).
_GCS_UNREACHABLE_CHECK = re.compile(r"Failed to connect to GCS within|gcs_last_alive_time_\)? < [:\w().]*"
                                    r"gcs_rpc_server_reconnect_timeout_s")


@refiner("RayProcessLostTheGcs", phase=Phase.REFINE, doc=f"""
A raylet or core worker checks that the GCS answers and aborts through a failed RAY_CHECK when it has not for
gcs_rpc_server_reconnect_timeout_s ('gcs_rpc_client.h:N: Check failed: ... Failed to connect to GCS within 60 seconds.
GCS may have been killed ...'; some logs keep only the check's expression, which names that timeout). That check is how a Ray process dies after losing the GCS (killed, crashed or
unreachable), not a defect of its own: when every line of a `{RAY_CHECK}` report is that check, the report is demoted.
Why the GCS went away, when it is logged, is the root.
""", cases=[
    # https://github.com/ray-project/ray/issues/26966 (a nightly test whose raylet lost the GCS; no cause in the thread)
    RuleCase(title="a raylet aborts after losing the GCS", evidence={"a/applog": [
        "2022-07-25 08:35:14 (raylet, ip=10.30.3.7) [2022-07-25 08:35:14,805 C 157 212] (raylet) gcs_rpc_client.h:537:  "
        "Check failed: absl::ToInt64Seconds(absl::Now() - gcs_last_alive_time_) < ::RayConfig::instance()."
        "gcs_rpc_server_reconnect_timeout_s() Failed to connect to GCS within 60 seconds. GCS may have been killed."]},
        expect=Expect(fired=True, sub_domain="unknown", demoted=[RAY_CHECK])),
    # https://github.com/ray-project/ray/issues/62340 (a head OOM-killed; the worker's raylet log keeps the check's
    # expression only)
    RuleCase(title="the check's expression without its message", evidence={"a/applog": [
        "2025-01-01T00:10:00Z [2025-01-01 00:10:00,913 C 9 40] (raylet) gcs_rpc_client.h:554: Check failed: "
        "absl::ToInt64Seconds(absl::Now() - gcs_last_alive_time_) < ::RayConfig::instance()."
        "gcs_rpc_server_reconnect_timeout_s()"]},
        expect=Expect(fired=True, sub_domain="unknown", demoted=[RAY_CHECK])),
    # https://github.com/ray-project/ray/issues/28579 (the raylet's memory monitor reading cgroup memory)
    RuleCase(title="an assertion of Ray's own", evidence={"a/applog": [
        "(raylet) [2022-09-16 09:27:25,719 C 236 236] (raylet) memory_monitor.cc:121:  Check failed: "
        "(_left_ > _right_)  117896851456 vs 117896851456"]},
        expect=Expect(fired=False, sub_domain="application")),
])
def ray_process_lost_the_gcs(ws: Workspace) -> None:
    for s in ws.select(prefix=RAY_CHECK, status="bad"):
        if aborted_for_the_gcs(s):
            ws.demote(s, "the Ray process aborted because it could not reach the GCS: a consequence of the GCS's loss")


def aborted_for_the_gcs(s: WorkSymptom) -> bool:
    """Whether every line of a Ray check report is the check that the GCS answered within its reconnect timeout."""
    return s.name.startswith(RAY_CHECK) and s.count <= len(s.evidence) and all(
        _GCS_UNREACHABLE_CHECK.search(e.text) for e in s.evidence)


# How long after `ray stop` its cluster's ends are reported: the GCS marks the stopped nodes dead within seconds, and
# the `ray start --block` steps that held them exit.
RAY_STOP_TEARDOWN_S = 120.0


@filter_rule("RayStoppedByTheJob", phase=Phase.FILTER, doc=f"""
A job script that runs a Ray cluster stops it at its end (`ray stop`, fact ray_stopped). What follows within
{RAY_STOP_TEARDOWN_S:.0f} s of that - the GCS marking the stopped nodes dead (`Ray node failure`), srun's report of the
`ray start --block` steps that held the nodes exiting non-zero (`Step task failed`) - is the cluster's teardown, not a
failure of the workload: those reports are dropped. A node lost or a step failed before the stop stays.
""", cases=[
    RuleCase(title="the script stops Ray; the GCS marks the worker dead, its ray start step exits 1", evidence={
        "a/applog": ["2025-03-04T05:46:31Z (TaskRunner pid=40311) Final validation metrics: {'val/score': 0.85}",
                     "2025-03-04T05:47:51Z Stopped all 14 Ray processes.",
                     "2025-03-04T05:47:52Z srun: error: b: task 0: Exited with exit code 1",
                     "2025-03-04T05:47:52Z training finished, exit 0"],
        "b/applog": ["2025-03-04T05:47:51Z ERROR worker.py:409 -- Unhandled error: The node with node id: 7b1f0e2d and "
                     "address: 10.30.3.14 and node name: 10.30.3.14 has been marked dead because the detector has "
                     "missed too many heartbeats from it."]},
        context={"nodes": ["a", "b"], "scheduler_state": "COMPLETED", "exit_code": "0:0",
                 "start_time": "2025-03-03T21:04:11Z", "end_time": "2025-03-04T05:47:53Z"},
        expect=Expect(fired=True, sub_domain="none", terminal_state="COMPLETED")),
    RuleCase(title="a node marked dead an hour before the stop", evidence={
        "a/applog": ["2025-03-04T04:47:51Z ERROR worker.py:409 -- Unhandled error: The node with node id: 7b1f0e2d and "
                     "address: 10.30.3.15 and node name: 10.30.3.15 has been marked dead because the detector has "
                     "missed too many heartbeats from it.",
                     "2025-03-04T05:47:51Z Stopped all 14 Ray processes."]},
        context={"nodes": ["a", "b"], "scheduler_state": "FAILED", "exit_code": "1:0",
                 "start_time": "2025-03-03T21:04:11Z", "end_time": "2025-03-04T05:47:53Z"},
        expect=Expect(fired=False, active=["Ray node failure"])),
])
def ray_stopped_by_the_job(ws: Workspace) -> None:
    stops = [f.time for f in ws.events_of(f"{EventType.CONTEXT}.ray_stopped") if f.time is not None]
    if not stops:
        return
    skew, teardown = timedelta(seconds=ws.params.clock_skew_s), timedelta(seconds=RAY_STOP_TEARDOWN_S)
    for event in [e for e in ws.events_of(EventType.NODE_BAD) if e.symptom in ("Ray node failure", "Step task failed")]:
        stop = next((t for t in stops if event.time is not None and t - skew <= event.time <= t + teardown), None)
        if stop is not None:
            ws.drop(event, f"reported after `ray stop` at {stop:%H:%M:%S}: the job script's teardown of its Ray cluster")


@refiner("RayNodeAliveWhenMarkedDead", phase=Phase.REFINE_LATE, doc="""
Ray's GCS marks a node dead when its health checks go unanswered. When the raylet of that node says itself that
it was mistakenly marked dead and exits, the node was running: the checks were missed because the machine or
raylet was overloaded or the network to the head was slow (Ray's own explanation), and the logs do not say which.
When the raylet reported its own crash (a fatal signal) before it was marked dead, the process died, not the machine.
Either way the node failure is demoted, the node is not blamed, and the report no longer makes the end a NODE_FAIL.
""", cases=[
    RuleCase(title="the named node's raylet was alive", evidence={
        "h/applog": ["2025-01-01 00:10:00,000 WARNING worker.py:1828 -- The node with node id: 97ab and address: "
                     "10.0.0.2 and node name: 10.0.0.2 has been marked dead because the detector has missed too many "
                     "heartbeats from it."],
        "w/applog": ["2025-01-01 00:00:01,000 INFO scripts.py:862 -- Local node IP: 10.0.0.2",
                     "[2025-01-01 00:10:01,000 C 21 21] (raylet) node_manager.cc:999: [Timeout] Exiting because this "
                     "node manager has mistakenly been marked as dead by the GCS: GCS didn't receive heartbeats from "
                     "this node for 30000 ms."]},
        context={"nodes": ["h", "w"]},
        expect=Expect(fired=True, culprits=[], demoted=["Ray node failure"])),
    # https://github.com/Visual-Agent/DeepEyes/issues/49 (the raylet's SIGBUS, relayed to the driver's output)
    RuleCase(title="the named node's raylet crashed", evidence={
        "h/applog": ["2025-01-01 00:10:00,000 WARNING worker.py:1828 -- The node with node id: 97ab and address: "
                     "10.0.0.2 and node name: 10.0.0.2 has been marked dead because the detector has missed too many "
                     "heartbeats from it.",
                     "2025-01-01 00:09:30 (raylet, ip=10.0.0.2) *** SIGBUS received at time=1735689570 on cpu 166 ***"],
        "w/applog": ["2025-01-01 00:00:01,000 INFO scripts.py:862 -- Local node IP: 10.0.0.2"]},
        context={"nodes": ["h", "w"]},
        expect=Expect(fired=True, culprits=[], demoted=["Ray node failure"])),
    _ray_node_went_silent("the named node went silent"),
])
def ray_node_alive_when_marked_dead(ws: Workspace) -> None:
    alive = {s.node for s in ws.select(prefix="Raylet alive when marked dead") if s.node}
    for report in ws.active(prefix="Ray node failure"):
        lost = set(blamed_nodes(ws, report))
        crashed = {s.node for s in ws.select(prefix="Process crashed") if s.node in lost and _before(s, report)
                   and any("raylet" in e.text for e in s.evidence)}
        if lost and lost <= alive:
            ws.demote(report, f"the raylet of {', '.join(sorted(lost))} was running when it was marked dead "
                              "(missed health checks: an overloaded machine or a slow network)")
        elif lost and lost <= crashed:
            ws.demote(report, f"the raylet of {', '.join(sorted(lost))} crashed before it was marked dead: the "
                              "process died, not the machine")
        else:
            continue
        report.attributes.pop("terminal_state", None)  # a node that was running did not fail: no NODE_FAIL


def _before(s: WorkSymptom, report: WorkSymptom) -> bool:
    return s.first_time is not None and report.first_time is not None and s.first_time <= report.first_time


@refiner("PreemptionKilledTheRayNodes", phase=Phase.REFINE_LATE,
          after=("RayNodeAliveWhenMarkedDead", "LostNodeExplainsPeerErrors"), doc=f"""
A scheduler that preempted or evicted the workload (Kueue's 'Preempted to accommodate a workload', a preempted or
evicted pod, a node shut down for a preemption, a reclaimed spot instance) killed its pods, so Ray's GCS then misses
the heartbeats of the nodes they ran on and marks them dead: a Ray node failure within
{NODE_FAILURE_DETECTION_S / 60:.0f} minutes of the preemption is its consequence, not a node fault. It is demoted, the
node is not blamed, and the preemption stays the root candidate. So is one within that time of the scheduler's own
declaration that the node it names (or any node, when Ray's address resolves to none) failed (Slurm, Kubernetes): Ray
reports the same loss, later and from further away.
""", cases=[
    RuleCase(title="Kueue preempts a RayJob; Ray then loses the worker's node", evidence={
        "h/applog": ["2025-01-01 00:10:02,000 WARNING worker.py:1828 -- The node with node id: 97ab and address: "
                     "10.0.0.2 and node name: 10.0.0.2 has been marked dead because the detector has missed too many "
                     "heartbeats from it."],
        "w/applog": ["2025-01-01 00:00:01,000 INFO scripts.py:862 -- Local node IP: 10.0.0.2"],
        "h/scheduler": ["2025-01-01T00:10:00Z   Warning  Preempted  workload/rayjob-grpo-a1  Preempted to accommodate a "
                        "workload (UID: 4f6c, JobUID: 7a9b) due to prioritization in the ClusterQueue"]},
        context={"nodes": ["h", "w"], "scheduler": "kubernetes", "scheduler_state": "", "exit_code": ""},
        expect=Expect(fired=True, sub_domain="scheduler", culprits=[], demoted=["Ray node failure"])),
    RuleCase(title="Kubernetes declares the node lost; Ray marks it dead after", evidence={
        "h/applog": ["2025-01-01 00:10:20,000 WARNING worker.py:1828 -- The node with node id: 97ab and address: "
                     "10.0.0.2 and node name: 10.0.0.2 has been marked dead because the detector has missed too many "
                     "heartbeats from it."],
        "w/applog": ["2025-01-01 00:00:01,000 INFO scripts.py:862 -- Local node IP: 10.0.0.2"],
        "h/scheduler": ["2025-01-01T00:10:00Z   Warning   NodeNotReady   node/w   Node w status is now: NodeNotReady"]},
        context={"nodes": ["h", "w"], "scheduler": "kubernetes", "scheduler_state": "Failed", "exit_code": ""},
        expect=Expect(fired=True, culprits=["w"], demoted=["Ray node failure"])),
    _ray_node_went_silent("a node lost with no preemption"),
])
def preemption_killed_the_ray_nodes(ws: Workspace) -> None:
    window = timedelta(seconds=NODE_FAILURE_DETECTION_S)
    preempted = [s.first_time for s in ws.active(role="root") if s.first_time is not None
                 and s.attributes.get("terminal_state") == TerminalState.PREEMPTED.value and s.name != "Ray node failure"]
    declared = [(s.first_time, set(blamed_nodes(ws, s))) for name in SCHEDULER_NODE_FAILURES
                for s in ws.active(prefix=name) if s.first_time is not None]
    for report in ws.active(prefix="Ray node failure"):
        began, lost = report.first_time, set(blamed_nodes(ws, report))
        if began is not None and any(abs(began - t) <= window for t in preempted):
            ws.demote(report, "the scheduler preempted the workload: its pods were killed and Ray lost their nodes")
            report.attributes.pop("terminal_state", None)  # the nodes did not fail: the run was preempted
        elif began is not None and any(abs(began - t) <= window and lost <= nodes for t, nodes in declared):
            ws.demote(report, "the scheduler declared the node failed: Ray reports the same loss")




RAY_DEATH_AFTER_DELETE_S = 120.0  # Ray's GCS marks a node dead within seconds of missing its heartbeats


@refiner("PodDeletionTookTheRayNode", phase=Phase.REFINE_LATE,
          after=("RayNodeAliveWhenMarkedDead", "UnplacedPodFollowsAFailure"), doc=f"""
Ray's GCS marks a node dead when its raylet stops answering - also when the raylet's pod was deleted. When the kubelet of
the node Ray names logged a pod's deletion through the API ('"SyncLoop DELETE" source="api"') in the
{RAY_DEATH_AFTER_DELETE_S / 60:.0f} minutes before Ray marked the node dead, the node left because its pod was deleted:
the Ray node failure is demoted (the node is not blamed) and the deletion is the root candidate.
""", cases=[
    # https://github.com/vllm-project/aibrix/issues/2435 (a worker pod force-deleted under a serving Ray cluster)
    RuleCase(title="a worker's pod is deleted; Ray marks its node dead two seconds later", evidence={
        "w/syslog": ['Jan  1 00:10:05 w kubelet[2544]: I0101 00:10:05.118230    2544 kubelet.go:2439] "SyncLoop DELETE" '
                     'source="api" pods=["serving/llm-worker-x7k2p"]'],
        "w/applog": ["2025-01-01 00:00:01,000 INFO scripts.py:862 -- Local node IP: 10.0.0.2"],
        "h/applog": ["2025-01-01 00:10:07,402 WARNING worker.py:1828 -- The node with node id: 97ab and address: "
                     "10.0.0.2 and node name: 10.0.0.2 has been marked dead because the detector has missed too many "
                     "heartbeats from it."]},
        context={"nodes": ["h", "w"], "scheduler": "kubernetes", "scheduler_state": "", "exit_code": ""},
        expect=Expect(fired=True, sub_domain="scheduler", culprits=[], demoted=["Ray node failure"])),
    RuleCase(title="a pod deleted on another node", evidence={
        "h/syslog": ['Jan  1 00:10:05 h kubelet[2544]: I0101 00:10:05.118230    2544 kubelet.go:2439] "SyncLoop DELETE" '
                     'source="api" pods=["serving/llm-router-1"]'],
        "w/applog": ["2025-01-01 00:00:01,000 INFO scripts.py:862 -- Local node IP: 10.0.0.2"],
        "h/applog": ["2025-01-01 00:10:07,402 WARNING worker.py:1828 -- The node with node id: 97ab and address: "
                     "10.0.0.2 and node name: 10.0.0.2 has been marked dead because the detector has missed too many "
                     "heartbeats from it."]},
        context={"nodes": ["h", "w"], "scheduler": "kubernetes", "scheduler_state": "", "exit_code": ""},
        expect=Expect(fired=False, culprits=["w"])),
])
def pod_deletion_took_the_ray_node(ws: Workspace) -> None:
    deletions = [s for s in ws.select(prefix="Pod deleted through the API") if s.first_time and not ws.undated(s)]
    for report in ws.active(prefix="Ray node failure"):
        began, lost = report.first_time, set(blamed_nodes(ws, report))
        took = [d for d in deletions if began is not None and d.node in lost and d.first_time is not None
                and timedelta(0) <= began - d.first_time <= timedelta(seconds=RAY_DEATH_AFTER_DELETE_S)]
        if took:
            ws.promote(took[0], f"Ray marked the node of {took[0].node} dead after its pod was deleted")
            ws.demote(report, f"its pod was deleted through the API on {took[0].node} first: the node left, it did not "
                              "fail")


@refiner("UnplacedPodFollowsAFailure", phase=Phase.REFINE_LATE, after=("OrderlyShutdownIsNotANodeFailure",), doc=f"""
`{NEVER_PLACED}` is the cause only when nothing else went wrong: a pod the scheduler cannot place after a node was lost,
drained or preempted, after a GPU dropped out of a node's allocatable, or before a deadline struck a job that had
other trouble is the replacement of a pod that failed for that reason, or a wait. When another root candidate (other
than the time limit or cancel that ended the job) stands, or the workload had trained before it (a replacement pod),
the placement failure is demoted, and so it is when the cloud had no capacity for the nodes the pod waited for (`Cloud
capacity unavailable`: a scale-up refused for quota or resources). So is a queue's refusal to admit a workload larger than its capacity (Kueue's
'request > maximum capacity'): a workload that trained was admitted before, and its requeued copy is what is refused.
A pod deleted by hand (kubectl delete's 'pod "<name>" deleted') is how the user ended the wait, not a failure the
placement follows from (a drain's eviction is). A pod whose own kubectl describe shows its Scheduled event beside the
FailedScheduling ('Successfully assigned ... to
<node>') was placed after a wait (an autoscaler adding nodes): that placement failure is demoted too.
""", cases=[
    RuleCase(title="no node offers the pod what it asks; nothing else failed", evidence={"a/scheduler": [
        "2025-01-01T00:10:00Z   Warning  FailedScheduling  2m (x12 over 58m)  default-scheduler  0/4 nodes are available: "
        "4 Insufficient nvidia.com/gpu."]},
        context={"scheduler": "kubernetes", "scheduler_state": "Failed", "exit_code": ""},
        expect=Expect(fired=False, sub_domain="configuration", root_symptom=NEVER_PLACED)),
    RuleCase(title="the replacement of a preempted pod finds no node", evidence={"a/scheduler": [
        "2025-01-01T00:05:00Z     DisruptionTarget  True    PreemptionByScheduler   volcano: preempted by higher-priority "
        "podgroup llm-prod/pg-rlhf",
        "2025-01-01T00:10:00Z   Warning  FailedScheduling  2m (x12 over 58m)  default-scheduler  0/4 nodes are available: "
        "4 Insufficient nvidia.com/gpu."]},
        context={"scheduler": "kubernetes", "scheduler_state": "Failed", "exit_code": ""},
        expect=Expect(fired=True, sub_domain="scheduler", demoted=[NEVER_PLACED])),
    # https://github.com/huggingface/Google-Cloud-Containers/issues/126 (the node pool could not grow: GCE quota)
    RuleCase(title="the pod waited for nodes the cloud could not add", evidence={"a/scheduler": [
        "2025-01-01T00:10:00Z   Warning  FailedScheduling  14m  default-scheduler  0/6 nodes are available: 2 "
        "Insufficient nvidia.com/gpu, 4 node(s) didn't match Pod's node affinity/selector.",
        "2025-01-01T00:11:00Z   Warning  FailedScaleUp  13m  cluster-autoscaler  Node scale up in zones us-central1-c "
        "associated with this pod failed: GCE quota exceeded. Pod is at risk of not being scheduled."]},
        context={"scheduler": "kubernetes", "scheduler_state": "Failed", "exit_code": ""},
        expect=Expect(fired=True, sub_domain="scheduler", demoted=[NEVER_PLACED])),
    # https://github.com/triton-inference-server/tutorials/blob/main/Deployment/Kubernetes/EKS_Multinode_Triton_TRTLLM/3.%20Deploy_Triton.md
    # (a second replica waited for the autoscaler's nodes, then ran)
    RuleCase(title="the pod's describe shows it placed after the wait", evidence={"a/scheduler": [
        "$ kubectl describe pod lws-sample-1",
        "  Warning  FailedScheduling  48s   default-scheduler   0/3 nodes are available: 2 Insufficient nvidia.com/gpu.",
        "  Normal   TriggeredScaleUp  15s   cluster-autoscaler  pod triggered scale-up: [{ng-2 2->4 (max: 4)}]",
        "  Normal   Scheduled         58s   default-scheduler   Successfully assigned default/lws-sample-1 to b"]},
        context={"scheduler": "kubernetes", "scheduler_state": "Running", "exit_code": "", "nodes": ["a", "b"]},
        expect=Expect(fired=True, demoted=[NEVER_PLACED])),
    RuleCase(title="another pod's placement, in the next command's output, says nothing of this one", evidence={
        "a/scheduler": [
            "$ kubectl describe pod lws-sample-1",
            "  Warning  FailedScheduling  48s   default-scheduler   0/3 nodes are available: 2 Insufficient nvidia.com/gpu.",
            "$ kubectl get events",
            "  Normal   Scheduled         58s   default-scheduler   Successfully assigned default/lws-sample-0 to b"]},
        context={"scheduler": "kubernetes", "scheduler_state": "Failed", "exit_code": "", "nodes": ["a", "b"]},
        expect=Expect(fired=False, sub_domain="configuration", root_symptom=NEVER_PLACED)),
    # https://github.com/kai-scheduler/KAI-Scheduler/issues/706 (pods Pending on a node without KAI's GPU-memory label,
    # deleted by the user)
    RuleCase(title="the user deleted the pods that waited for a node", evidence={"a/scheduler": [
        "2025-01-01T00:10:00Z   Warning  Unschedulable  kai-scheduler  no nodes with enough resources were found: 1 "
        "node(s) didn't have enough resources: GPU memory.",
        '2025-01-01T00:50:00Z pod "qwen-vl-shared-bench-0" deleted']},
        context={"scheduler": "kubernetes", "scheduler_state": "", "exit_code": ""},
        expect=Expect(fired=False, sub_domain="configuration", root_symptom=NEVER_PLACED)),
    RuleCase(title="the workload trained, then a replacement pod finds no node", evidence={
        "a/applog": [f"2025-01-01T00:{m:02d}:00Z step {m * 10} | loss 2.1" for m in range(5, 20)],
        "a/scheduler": ["2025-01-01T00:30:00Z   Warning  FailedScheduling  2m  default-scheduler  0/4 nodes are "
                        "available: 1 node(s) were unschedulable, 3 Insufficient nvidia.com/gpu."]},
        context={"scheduler": "kubernetes", "scheduler_state": "Failed", "exit_code": ""},
        expect=Expect(fired=True, demoted=[NEVER_PLACED])),
])
def unplaced_pod_follows_a_failure(ws: Workspace) -> None:
    unplaced = [s for s in ws.active(role="root") if s.name in NOT_STARTED]
    if not unplaced:
        return
    for s in unplaced:
        if (placed := _placed_later(ws, s)) is not None:
            ws.demote(s, f"the same pod's describe shows it placed later ('{placed.text.strip()[:100]}'): it waited "
                         "for room")
    started = [t for s in ws.select(prefix="Training progress") if (t := s.first_time) and not ws.undated(s)]
    for s in unplaced:
        if s.first_time is not None and any(t < s.first_time for t in started):
            ws.demote(s, f"the workload had trained from {min(started):%H:%M:%S}: a replacement pod left without a node")
    capacity = ws.active(prefix="Cloud capacity unavailable")
    for s in [s for s in unplaced if s.active] if capacity else []:
        ws.demote(s, f"the cloud had no capacity for the nodes it waited for ({capacity[0].node or '-'})")
    unplaced = [s for s in ws.active(role="root") if s.name in NOT_STARTED]
    enders = {name for name in WORKLOAD_ENDERS if name != "Kubernetes eviction"}
    others = [s for s in ws.active(role="root") if s.name not in NOT_STARTED and not s.name.startswith(tuple(enders))
              and not _deleted_by_hand(s)]
    if unplaced and others:
        first = min(others, key=WorkSymptom.sort_key)
        for s in unplaced:
            ws.demote(s, f"{first.name} on {first.node or '-'} is what went wrong; the pod left without a node is its "
                         "consequence or a wait")


# kubectl delete's report of a pod it removed ('pod "<name>" deleted', 'pod/<name> deleted'): the user's end of a
# workload, unlike a drain's eviction of pods from a node that is going away.
_DELETED_BY_HAND = re.compile(r'\bpod(?:/| \\*")[\w.-]+\\*"? deleted\b')


def _deleted_by_hand(s: WorkSymptom) -> bool:
    """A `Kubernetes eviction` whose every line is kubectl delete's report of a pod it removed."""
    return s.name == "Kubernetes eviction" and all(_DELETED_BY_HAND.search(e.text) for e in s.evidence)


def _placed_later(ws: Workspace, unplaced: WorkSymptom) -> Evidence | None:
    """The Scheduled event of the pod whose FailedScheduling `unplaced` cites: in one pod's kubectl describe (its block
    opened by the object's 'Name:' or by a 'kubectl describe' command, with no other block opened between them)."""
    openers: dict[str, list[tuple[int, bool]]] = {}  # origin -> (line, whether it opens one object's describe)
    for fact in ws.events_of(f"{EventType.CONTEXT}.describe_block"):
        if fact.attributes.get("pod_node"):
            continue  # the pod's node, inside its block
        command = str(fact.attributes.get("command") or "")
        openers.setdefault(fact.evidence.provenance.origin, []).append(
            (fact.evidence.provenance.line or 0, bool(fact.attributes.get("object")) or "describe" in command))
    for cited in unplaced.evidence:
        origin, at = cited.provenance.origin, cited.provenance.line or 0
        for fact in ws.events_of(f"{EventType.CONTEXT}.pod_scheduled"):
            other = fact.evidence.provenance
            if other.origin != origin:
                continue
            low, high = sorted((at, other.line or 0))
            marks = openers.get(origin, [])
            opened = [describes for line, describes in sorted(marks) if line <= low]
            if opened and opened[-1] and not any(low < line <= high for line, _ in marks):
                return fact.evidence
    return None


# Records of an attempt the scheduler requeued: the job itself went on.
_REQUEUES = ("Slurm requeue",)
# The ends a job's later run records: the job ran again after its requeue, and the state is that run's.
_RAN_AGAIN = (TerminalState.FAILED, TerminalState.TIMEOUT, TerminalState.NODE_FAIL, TerminalState.OUT_OF_MEMORY)
_REQUEUED_ATTEMPT_ENDS = ("Slurm preemption", *_REQUEUES)


def _preempted_then_failed(requeued: str, failed: str, state: str) -> RuleCase:
    """A rule case: a job preempted at 00:12:08 on a and b, slurmctld's record of it at `requeued` (empty: none), the
    job's later run raising at `failed`, and the state recorded at its end. Only a requeue followed by a later run's
    FAILED sets the preemption aside (the corrupt checkpoint is then the answer)."""
    notice = "slurmstepd: error: *** STEP 7.0 ON {} CANCELLED AT 2025-01-01T00:12:08 DUE TO PREEMPTION ***"
    ctld = [f"[{requeued}] preempted JobId=7 has been requeued to reclaim resources for JobId=9"] if requeued else []
    earlier_run = bool(requeued) and state == "FAILED"
    return RuleCase(title=f"a preempted job, {'requeued' if requeued else 'no requeue recorded'}; {state}", evidence={
        "a/applog": [f"2025-01-01T00:12:08Z {notice.format('a')}",
                     f"{failed} RuntimeError: storage has wrong size: expected 4249925191133211469 got 65536"],
        "b/applog": [f"2025-01-01T00:12:08Z {notice.format('b')}"], "a/scheduler": ctld},
        context={"scheduler_state": state, "exit_code": "1:0", "start_time": "2025-01-01T00:00:00Z",
                 "end_time": "2025-01-01T00:21:00Z"},
        expect=Expect(fired=earlier_run, demoted=["Slurm preemption"] if earlier_run else [],
                      sub_domain="application" if earlier_run else "scheduler"))


@refiner("PreemptedRunWasRequeued", phase=Phase.REFINE_LATE, doc="""
A Slurm job preempted under PreemptMode=REQUEUE goes back to the queue and runs again under the same id; slurmctld logs
it ('preempted JobId=N has been requeued to reclaim resources for JobId=M', 'Requeuing JobId=N'). When the state
recorded at the job's end is a later run's (FAILED, TIMEOUT, NODE_FAIL, OUT_OF_MEMORY; not PREEMPTED, nor CANCELLED: a
requeued job cancelled while it waited ended with the preemption), the preemption or requeue notices dated no later
than the requeue record ended an earlier run of the job, not the job: they are demoted, and the later run's own
failure is weighed.
""", cases=[
    # https://github.com/NVIDIA/apex/issues/886 (checkpoints written by one process per node, read back corrupt by the
    # run after a preemption); the scavenger partition's requeue as slurmctld logs it
    _preempted_then_failed("2025-01-01T00:12:08.001", "2025-01-01T00:20:50Z", "FAILED"),
    _preempted_then_failed("", "2025-01-01T00:20:50Z", "FAILED"),
    _preempted_then_failed("2025-01-01T00:12:08.001", "2025-01-01T00:20:50Z", "PREEMPTED"),
])
def preempted_run_was_requeued(ws: Workspace) -> None:
    requeued = [e.time for e in ws.facts_of("slurm_requeued") if e.time is not None]
    if not requeued or recorded_state(ws.context) not in _RAN_AGAIN:
        return
    last = max(requeued) + timedelta(seconds=ws.params.clock_skew_s)
    for name in _REQUEUED_ATTEMPT_ENDS:
        for end in ws.active(prefix=name):
            if end.first_time is not None and not ws.undated(end) and end.first_time <= last:
                ws.demote(end, "the job was requeued after it and ran again: it ended an earlier run, not the job")


@refiner("SchedulerActionYields", phase=Phase.REFINE_LATE,
          after=("HungBeforeLimitOrCancel", "UnplacedPodFollowsAFailure", "LostNodeExplainsPeerErrors", "DeadNodeExplainsPeerErrors",
                 "PreemptionKilledTheRayNodes", "ResetExplainsItsNodeFailure", "PodDeletionTookTheRayNode"), doc="""
A scheduler action (time limit, preemption, cancellation, eviction, declared node failure) is demoted when
another root candidate started before it (not another report of a node failure, such as Ray's GCS marking a node dead:
that is how a preemption looks from the workload), or has no time of its own and may have: the job had already failed
or hung, and the scheduler only ended it. A peer's error naming only the nodes whose pods an eviction took, dated no
earlier than the eviction, is how the peers saw those pods end, whatever the clock-skew tolerance allows; so is one
naming only the node whose own kubelet ended its pods (rejecting them at re-admission, a graceful shutdown). A cancel is
also demoted when the program itself reported failing (an
error in its own output, even one that names no cause) more than five minutes before it and training did not go
on after that: someone ended a run that had already failed; a user's `kubectl delete` of the workload's pods ('pod
"<name>" deleted', stamped) is such a cancel.
""", cases=[
    RuleCase(title="port error then time limit", evidence={
        "a/applog": ["a:1:1 [0] NCCL WARN NET/IB : Got async event : port error"],
        "b/applog": ["2025-01-01T01:59:00Z slurmstepd: error: *** JOB 1 ON b CANCELLED AT 2025-01-01T01:59:00 DUE TO TIME LIMIT ***"]},
        context={"scheduler_state": "TIMEOUT"},
        expect=Expect(fired=True, sub_domain="network", culprits=["a"], terminal_state="TIMEOUT")),
    RuleCase(title="a cancel long after the ranks failed", evidence={
        "a/applog": ["2025-01-01T00:30:00Z RuntimeError: NCCL error in: ProcessGroupNCCL.cpp:272, unhandled cuda error"],
        "b/scheduler": ["[2025-01-01T00:56:00.000] _slurm_rpc_kill_job: REQUEST_KILL_JOB JobId=1 uid 1000"]},
        context={"scheduler_state": "CANCELLED"}, expect=Expect(fired=True, sub_domain="unknown", culprits=[])),
    RuleCase(title="a cancel right after an error", evidence={
        "a/applog": ["2025-01-01T00:55:00Z RuntimeError: NCCL error in: ProcessGroupNCCL.cpp:272, unhandled cuda error"],
        "b/scheduler": ["[2025-01-01T00:56:00.000] _slurm_rpc_kill_job: REQUEST_KILL_JOB JobId=1 uid 1000"]},
        context={"scheduler_state": "CANCELLED"}, expect=Expect(fired=False, sub_domain="scheduler")),
    # https://github.com/defilantech/LLMKube/issues/1781 (a multi-node group looping on a dead member until the user
    # deleted both pods)
    RuleCase(title="the user deleted the pods long after the ranks failed", evidence={
        "a/applog": ["2025-01-01T00:30:00Z RuntimeError: NCCL error in: ProcessGroupNCCL.cpp:272, unhandled cuda error"],
        "b/scheduler": ['2025-01-01T00:56:00Z pod "llm-mn-0" deleted', '2025-01-01T00:56:00Z pod "llm-mn-1" deleted']},
        context={"scheduler": "kubernetes", "scheduler_state": ""},
        expect=Expect(fired=True, sub_domain="unknown", culprits=[])),
    RuleCase(title="time limit alone", evidence={
        "b/applog": ["2025-01-01T01:59:00Z slurmstepd: error: *** JOB 1 ON b CANCELLED AT 2025-01-01T01:59:00 DUE TO TIME LIMIT ***"]},
        context={"scheduler_state": "TIMEOUT"}, expect=Expect(fired=False, sub_domain="scheduler")),
    # https://github.com/kubernetes/kubernetes/issues/119248 (a restarted kubelet rejecting its running GPU pod at
    # re-admission; the peers' receives from that node failed seconds later)
    RuleCase(title="a node's kubelet rejects its running pod, then its peer's RDMA error naming it", evidence={
        "b/applog": ["2025-01-01T00:00:01Z job-worker-1:61:61 [0] NCCL INFO Bootstrap : Using eth0:10.244.3.17<0>"],
        "b/syslog": ["2025-01-01T00:28:00Z b kubelet[771]: Warning UnexpectedAdmissionError Allocate failed due to "
                     "requested number of devices unavailable for nvidia.com/gpu. Requested: 8, Available: 0, which is "
                     "unexpected"],
        "a/applog": ["2025-01-01T00:00:01Z job-worker-0:61:61 [0] NCCL INFO Bootstrap : Using eth0:10.244.2.17<0>",
                     "2025-01-01T00:28:25Z NET/IB : Got completion from peer 10.244.3.17<41238> with status=12 opcode=0 "
                     "len=0 vendor err=129 (Recv) localGid ::ffff:10.244.2.17 remoteGids::ffff:10.244.3.17 hca mlx5_1"]},
        context={"scheduler": "kubernetes", "scheduler_state": "Failed", "exit_code": "", "nodes": ["a", "b"],
                 "start_time": "2025-01-01T00:00:00Z", "end_time": "2025-01-01T00:30:00Z"},
        expect=Expect(fired=True, sub_domain="scheduler", culprits=["b"], demoted=["IB Error-12"])),
    # https://github.com/volcano-sh/volcano/issues/4814 (a drained node's pod evicted; its peers' RDMA receives failed
    # two seconds later, naming that node)
    RuleCase(title="a pod evicted, then its peer's RDMA error naming its node", evidence={
        "b/applog": ["2025-01-01T00:00:01Z job-worker-1:61:61 [0] NCCL INFO Bootstrap : Using eth0:10.244.3.17<0>"],
        "a/applog": ["2025-01-01T00:00:01Z job-worker-0:61:61 [0] NCCL INFO Bootstrap : Using eth0:10.244.2.17<0>",
                     "2025-01-01T00:28:20Z NET/IB : Got completion from peer 10.244.3.17<41238> with status=12 opcode=0 "
                     "len=0 vendor err=129 (Recv) localGid ::ffff:10.244.2.17 remoteGids::ffff:10.244.3.17 hca mlx5_1"],
        "c/scheduler": ["I0101 00:28:18.432174       1 job_controller.go:356] Try to handle request <Queue: , Job: "
                        "ml/job, Task:worker, Pod:job-worker-1, Event:PodEvicted, ExitCode:0, Action:, JobVersion: 0>"]},
        context={"scheduler": "kubernetes", "scheduler_state": "Failed", "exit_code": "", "nodes": ["a", "b", "c"],
                 "start_time": "2025-01-01T00:00:00Z", "end_time": "2025-01-01T00:30:00Z"},
        expect=Expect(fired=True, sub_domain="scheduler", culprits=[], demoted=["IB Error-12"])),
])
def scheduler_action_yields(ws: Workspace) -> None:
    actions = ws.active(role="root", sub_domain=SubDomain.SCHEDULER)
    others = [s for s in ws.active(role="root") if s.sub_domain != SubDomain.SCHEDULER
              and s.name not in NODE_FAILURE_REPORTS]
    earliest = _earliest_reports(ws, {a.name for a in actions if _a_cancel(a)})
    for action in actions:
        taken = _pods_nodes(ws, action)
        effects = [s for s in others if _peer_of_taken(ws, s, action, taken)]
        earlier = [s for s in others if _not_after(ws, s, action) and s not in effects]
        if earlier:
            first = min(earlier, key=WorkSymptom.sort_key)
            ws.demote(action, f"the job had already failed ({first.name} on {first.node or '-'}); "
                      "the scheduler only ended it")
        elif effects:
            for effect in effects:
                ws.demote(effect, f"names {', '.join(sorted(taken))}, whose pod was taken by {action.name}: how its "
                          "peers saw that pod end")
        elif _a_cancel(action) and (found := _failed_long_before(ws, action, earliest)) is not None:
            failed, minutes = found
            ws.demote(action, f"the program had reported its failure ({failed.name} on {failed.node or '-'}) "
                      f"{minutes:.0f} min before the cancel, which only ended it")


def _a_cancel(action: WorkSymptom) -> bool:
    """A user's end of the workload: the scheduler's cancel, or kubectl delete's report of the pods it removed."""
    return action.name.startswith("Job cancelled") or _deleted_by_hand(action)


# Scheduler actions a node's own kubelet takes on the pods it runs: the kubelet rejecting a running pod at re-admission
# (after its restart, devices it could not allocate) and its graceful shutdown terminating them. The node that logged
# the action is the one whose pods ended.
_ON_ITS_OWN_PODS = ("Node's kubelet had no devices to allocate", "Graceful node shutdown")


def _pods_nodes(ws: Workspace, action: WorkSymptom) -> set[str]:
    """The nodes that ran the pods an eviction names (by the pods' host names in their own NCCL lines), or the node
    whose kubelet acted on its own pods."""
    hosts = ws.facts.get("host_to_node", {})
    named = {hosts[p] for p in action.value_set("pod") | action.value_set("blamed_pod") if p in hosts}
    if not named and action.node and action.name.startswith(_ON_ITS_OWN_PODS):
        named = {action.node}
    return named


def _peer_of_taken(ws: Workspace, candidate: WorkSymptom, action: WorkSymptom, taken: set[str]) -> bool:
    """A peer's error that names only the nodes whose pods the action took, no earlier than the action: what its
    peers saw of that pod's end, not a failure before it (the clock-skew tolerance does not apply to it)."""
    peers = named_peers(ws, candidate)
    return bool(taken and peers and peers <= taken and not ws.undated(candidate) and candidate.first_time is not None
                and action.first_time is not None and candidate.first_time >= action.first_time)


# Kernel reports a node gives while processes are being torn down: a CPU stuck in the kernel as killed processes free
# their memory and devices.
_TEARDOWN_STALLS = ("CPU soft lockup",)


def _lockup_and_cancel(title: str, stuck_at: str, expect: Expect) -> RuleCase:
    """A rule case: a cancel at 03:05:10 on node a, a soft lockup reported on node b at `stuck_at` (stuck for 22 s)."""
    return RuleCase(title=title, evidence={
        "a/applog": ["2025-01-01T03:05:10Z slurmstepd: error: *** JOB 1 ON a CANCELLED AT 2025-01-01T03:05:10 ***"],
        "b/syslog": [f"Jan  1 {stuck_at} b kernel: [295714.000000] watchdog: BUG: soft lockup - CPU#113 stuck for 22s! "
                     "[python:884211]"]},
        context={"nodes": ["a", "b"], "scheduler_state": "CANCELLED", "exit_code": "0:15",
                 "start_time": "2025-01-01T02:00:00Z", "end_time": "2025-01-01T03:06:13Z"}, expect=expect)


@refiner("StallsAfterTheEnd", phase=Phase.REFINE, doc=f"""
When the scheduler ended the workload from outside (a cancel, a time limit, an eviction), a kernel stall that began at
or after that moment ({", ".join(_TEARDOWN_STALLS)}, dated from when the CPU got stuck) is the teardown's - processes
killed while freeing their memory and devices - not why the workload ended: it is demoted before the scheduler's
action is weighed against the other candidates. A stall that began before the action stays a candidate.
""", cases=[
    _lockup_and_cancel("soft lockups on one node as the cancelled job's processes are killed", "03:05:34",
                       Expect(fired=True, sub_domain="scheduler", culprits=[], demoted=["CPU soft lockup"])),
    _lockup_and_cancel("a node stuck before the cancel", "03:01:34", Expect(fired=False, sub_domain="host", culprits=["b"])),
])
def stalls_after_the_end(ws: Workspace) -> None:
    ended = [s.first_time for name in WORKLOAD_ENDERS for s in ws.active(prefix=name)
             if s.first_time is not None and not ws.undated(s)]
    if not ended:
        return
    end = min(ended)
    for stall in [s for name in _TEARDOWN_STALLS for s in ws.active(prefix=name)]:
        if stall.first_time is not None and not ws.undated(stall) and stall.first_time >= end:
            ws.demote(stall, f"stuck from {stall.first_time:%H:%M:%S}, after the scheduler ended the workload at "
                             f"{end:%H:%M:%S}: its processes' teardown")


CANCELLED_AFTER_FAILURE_S = 300.0  # a cancel this long after the program reported failing is a reaction to it


def _failed_long_before(ws: Workspace, cancel: WorkSymptom,
                        earliest: dict[str, datetime]) -> tuple[WorkSymptom, float] | None:
    """The program's own first failure report (its output, dated) and how many minutes it came before a cancel: at
    least CANCELLED_AFTER_FAILURE_S, with no training progress after it - the run had failed and someone ended what
    was left."""
    cancelled = _struck_at(ws, cancel, earliest) if cancel.first_time is not None and not ws.undated(cancel) else None
    if cancelled is None:
        return None
    progress_end = last_progress(ws)
    reports = sorted(((t, s) for s in ws.active() if s.sub_domain != SubDomain.SCHEDULER and (t := s.first_time)
                      and not ws.undated(s) and _own_output(s)), key=lambda pair: pair[1].sort_key())
    for reported, s in reports:
        if reported > cancelled - timedelta(seconds=CANCELLED_AFTER_FAILURE_S):
            return None
        if progress_end is None or progress_end <= reported + timedelta(seconds=SURVIVED_AFTER_S):
            return s, (cancelled - reported).total_seconds() / 60
    return None


def _own_output(s: WorkSymptom) -> bool:
    """Every line of the symptom is the workload's own output (applog: its stdout and stderr)."""
    return bool(s.evidence) and all(e.source == SourceKind.APPLOG for e in s.evidence)


def _during_run(ws: Workspace, s: WorkSymptom) -> bool:
    """The symptom happened while the workload ran (not in the collection margin around it). A line of the
    workload's own output (applog: its stdout and stderr) was written while it ran, stamped or not."""
    return _own_output(s) or ws.dated_during_run(s)


_KERNEL_KILL_RECORDS = ("Process crashed",)  # the kernel's own record of a process it crashed (host_oom: killed)
# UCX's log line carries its level ('[ts] [host:pid:tid] file.c:N UCX  WARN  ...'): at WARN, UCX went on
_UCX_WARNING = re.compile(r"\bUCX +WARN\b")


def _ended_a_process(s: WorkSymptom) -> bool:
    """The symptom shows a process of the workload ended: read from its own output or the scheduler's records, or
    the kernel's record of killing or crashing one. A fabric port's going down is the NIC's state whoever printed it
    (NCCL relays it as a 'non-fatal async event'): what it broke shows as the job's own errors. A library's report at
    its warning level (UCX's WARN) is one it carried on after."""
    if s.name.startswith(LINK_DOWN_EVENTS) or (s.evidence and all(_UCX_WARNING.search(e.text) for e in s.evidence)):
        return False
    return (any(e.source != SourceKind.SYSLOG for e in s.evidence) or s.sub_domain == SubDomain.HOST_OOM
            or s.name.startswith(_KERNEL_KILL_RECORDS))


def _unscheduled_success_after_link_down(exit_code: str) -> dict[str, Any]:
    """Rule-case evidence and context: no scheduler; n1's link went down during the run, then torchelastic reported
    success; the workload exited with `exit_code`."""
    return {"evidence": {
        "n1/syslog": ["Jan  1 00:21:00 n1 kernel: mlx5_core 0000:0d:00.0 enp13s0f0np0: Link down"],
        "n1/applog": ["2025-01-01T01:50:00Z INFO:torch.distributed.elastic.agent.server.api:Local worker group "
                      "finished (WorkerState.SUCCEEDED)."]},
        "context": {"scheduler": "none", "scheduler_state": "", "exit_code": exit_code,
                    "start_time": "2025-01-01T00:10:00Z", "end_time": "2025-01-01T01:51:00Z"}}


# A Spark application's lines as its driver and an executor print them when a task attempt failed and was retried
_SPARK_RETRIED_TASK = [
    "2024-11-18 10:27:13 WARN TaskSetManager: Lost task 1.0 in stage 12.0 (TID 3043) (10.31.0.22 executor 1): "
    "org.apache.spark.api.python.PythonException: Traceback (most recent call last):",
    "2024-11-18 10:27:13 WARN DAGScheduler: Resubmitting failed barrier stage ResultStage 12 (attempt 1)"]
_SPARK_JOB_FINISHED = "2024-11-18 10:51:58 INFO DAGScheduler: Job 9 finished: collect at knn.py:1041, took 1817.442 s"


@refiner("SparkTasksRetriedToSuccess", phase=Phase.REFINE, doc="""
Spark retries a failed task inside its job (spark.task.maxFailures; a failed barrier stage is resubmitted whole), and
its driver logs 'Job N finished' only for a job that succeeded. When the driver reported finished jobs and none that
failed (no 'aborting job', 'Job N failed' or 'Job aborted due to stage failure'), the failures that began before the
last finished job were task attempts Spark retried to success and are demoted - except those that blame a node (a
GPU's or a host's fault stays: the task ran again, the node is still at fault). A failure after the last finished job
is not covered by it and stays.
""", cases=[
    # https://github.com/NVIDIA/cuml-spark/issues/786 (UCXUnreachable in a barrier stage, retried until it finished)
    RuleCase(title="lost task attempts, then the job finished", evidence={
        "drv/applog": [*_SPARK_RETRIED_TASK, _SPARK_JOB_FINISHED]},
        context={"scheduler": "none", "scheduler_state": "", "exit_code": ""},
        expect=Expect(fired=True, sub_domain="none", terminal_state="COMPLETED", demoted=["Python exception"])),
    RuleCase(title="a task out of its attempts: the job was aborted", evidence={
        "drv/applog": [*_SPARK_RETRIED_TASK, _SPARK_JOB_FINISHED,
                       "2024-11-18 10:58:02 ERROR TaskSetManager: Task 0 in stage 14.0 failed 4 times; aborting job"]},
        context={"scheduler": "none", "scheduler_state": "", "exit_code": ""},
        expect=Expect(fired=False, sub_domain="application")),
    RuleCase(title="a failure after the last finished job", evidence={
        "drv/applog": [_SPARK_JOB_FINISHED, *(line.replace("10:27:13", "10:53:40") for line in _SPARK_RETRIED_TASK)]},
        context={"scheduler": "none", "scheduler_state": "", "exit_code": ""},
        expect=Expect(fired=False, sub_domain="application")),
])
def spark_tasks_retried_to_success(ws: Workspace) -> None:
    finished = [t for s in ws.select(prefix="Workload completed") if s.value_set("spark_job")
                for t in (s.last_time or s.first_time,) if t is not None]
    if not finished or ws.select(prefix="Spark job failed"):
        return
    last = max(finished)
    for s in ws.active():
        if s.definition.blame == "none" and s.first_time is not None and s.first_time <= last:
            ws.demote(s, f"Spark retried the task and its job finished ({last:%H:%M:%S}); no job failed")


# NCCL asked for CollNet algorithms only, with no CollNet set up (nccl-tests on two B200 nodes, SHARP unavailable)
_NO_COLLNET_ALGORITHM = ("n1:39559:39559 [7] enqueue.cc:1966 NCCL WARN Error : no algorithm/protocol available for "
                         "function AllReduce with datatype ncclFloat32. NCCL_ALGO was set to CollNetChain,CollNetDirect. "
                         "NCCL_PROTO was set to Simple.")


_CRASH_REPORTS = ("Process crashed (segfault)", "Worker killed by signal")


@refiner("CompletedWorkload", phase=Phase.REFINE_LATE, after=("SchedulerActionYields",), doc="""
When the scheduler recorded the workload as COMPLETED, or no scheduler recorded a state and the workload exited 0
(a bare mpirun or torchrun, whose exit code is the launcher's): if the workload also reports success (torchelastic
WorkerState.SUCCEEDED, training finished) or nothing failed while it ran, every remaining bad symptom was
survived (or belongs to the collection margin around the job, e.g. another job on a shared node) and is
demoted, giving `none`. If root candidates from the run itself remain without a success report, and they ended
a process - the workload's own output or the scheduler's records show them, or the kernel recorded killing or
crashing a process (OOM kill, segfault); a kernel warning alone (a soft lockup, an Xid) or a fabric port's going down
(NCCL's 'Got non-fatal async event: port error') was survived by a job that completed - the accounting is wrong (a
step failed) and the terminal state becomes FAILED; so does srun's record of a task that exited with a non-zero code or crashed (Aborted, Segmentation fault ...), or a launcher's non-zero status
(ezpz's 'Execution finished with 143.', DeepSpeed's '... exits with return code = 1'), in the workload's last five minutes
(the batch script ignored the step's failure; an earlier step's, such as a preflight check the script went past, is
not how it ended), and so does a crash or a signal death reported while it ran (a batch script's 'line 17: 4568 Bus
error <command>', a worker's 'exitcode: -9'). In output without times, a task's failure (a batch script's 'line 65:
2377913 Aborted (core dumped)') printed after the last training progress of its stream is how the work ended, and a
success line the script echoed right after it, with no training between, is the script's. A success report within
five minutes after such a root, with no training progress between, is a wrapper's message whatever its child did
(an entrypoint that always exits 0): it does not count, unless the kubelet restarted the failed container in
between (its BackOff record): the restarted run's success is its own; and a Kubernetes Job whose pod tally counts
failed pods beside the one that succeeded retried to success (backoffLimit): the failures were earlier attempts'. A
success report followed, in the same stream, by NCCL setting a communicator up again and then by a root is an earlier
step's (a benchmark script's first mode): the later step's failure is how the workload ended. A
requeue ended an earlier attempt of the same job, not the
job that then completed (a script that requeues itself before its time limit, a preempted job that ran again). A step
ended by its own time limit (`srun --time`) in the workload's last five minutes ended the workload, whatever the batch
script returned after it or the program printed as it was killed: TIMEOUT, with nothing demoted. A completed state (Torque's COMPLETE covers a job
however it ended) with the job's deletion in its last five minutes ('Job deleted at request of ...') is CANCELLED, with
nothing demoted.
""", cases=[
    RuleCase(title="benign flap in a completed job", evidence={"n1/applog": [
        "2025-01-01T00:10:00Z n1:1:1 [0] NCCL WARN NET/IB : Got async event : port error",
        "2025-01-01T01:50:00Z INFO:torch.distributed.elastic.agent.server.api:Local worker group finished (WorkerState.SUCCEEDED)."]},
        context={"scheduler_state": "COMPLETED", "exit_code": "0:0"},
        expect=Expect(fired=True, sub_domain="none", culprits=[], terminal_state="COMPLETED")),
    # https://github.com/saforem2/ezpz/blob/main/docs/cli/launch/index.md (the launcher's status line; PBS recorded the
    # batch script's exit 0 after it)
    RuleCase(title="a completed state over a launcher's non-zero status at the end", evidence={"n1/applog": [
        "[2025-01-01 01:58:20,402115][I][ezpz/launch:971:launch] Execution finished with 143."]},
        context={"scheduler": "none", "scheduler_state": "COMPLETED", "exit_code": ""},
        expect=Expect(fired=True, terminal_state="FAILED", sub_domain="unknown")),
    # https://github.com/LeifKa/MOTRv2/blob/main/CLAUDE.md (six of ten epochs, then an abort in ProcessGroupNCCL; the
    # batch script echoed its end line and Slurm recorded COMPLETED)
    RuleCase(title="unstamped output: training, an abort, then the script's closing echo", evidence={"n1/applog": [
        "Epoch: [6]  [10020/18943]  eta: 1:29:41  lr: 0.000010  grad_norm: 12.56 (12.40)  loss: 4.2494 (4.3265)",
        "Exception raised from run at /pytorch/torch/csrc/distributed/c10d/ProcessGroupNCCL.cpp:2063",
        "/var/spool/slurmd/job53583/slurm_script: line 65: 2377913 Aborted (core dumped)",
        "Training completed at Sun Jan 11 06:08:51 UTC 2026"]},
        context={"scheduler_state": "COMPLETED", "exit_code": "0:0"},
        expect=Expect(fired=True, terminal_state="FAILED", sub_domain="unknown")),
    RuleCase(title="unstamped output: an abort, then training goes on and completes", evidence={"n1/applog": [
        "/var/spool/slurmd/job53583/slurm_script: line 12: 2377913 Aborted (core dumped)",
        "Epoch: [6]  [10020/18943]  eta: 1:29:41  lr: 0.000010  grad_norm: 12.56 (12.40)  loss: 4.2494 (4.3265)",
        "Training completed at Sun Jan 11 06:08:51 UTC 2026"]},
        context={"scheduler_state": "COMPLETED", "exit_code": "0:0"},
        expect=Expect(fired=True, terminal_state="COMPLETED", sub_domain="none")),
    RuleCase(title="no scheduler, exit 0, a success report after a link went down during the run",
             **_unscheduled_success_after_link_down("0"),
             expect=Expect(fired=True, sub_domain="none", terminal_state="COMPLETED", culprits=[])),
    RuleCase(title="no scheduler and no exit code: a failure stays a failure", **_unscheduled_success_after_link_down(""),
             expect=Expect(fired=False, sub_domain="network", culprits=["n1"])),
    # https://github.com/cBio/cbio-cluster/issues/403 (Torque's COMPLETE for a job an administrator deleted)
    RuleCase(title="Torque's completed state for a job deleted at its end", evidence={"n1/scheduler": [
        "01/01/2025 01:59:00;0008;PBS_Server.1;Job;1.hal;Job deleted at request of root@hal"]},
        context={"scheduler": "none", "scheduler_state": "COMPLETE", "exit_code": ""},
        expect=Expect(fired=True, sub_domain="scheduler", terminal_state="CANCELLED")),
    RuleCase(title="another job's Xid before the start", evidence={"n1/syslog": [
        "Dec 31 23:55:00 n1 kernel: NVRM: Xid (PCI:0000:91:00): 79, pid=1, name=x, GPU has fallen off the bus."]},
        context={"scheduler_state": "COMPLETED", "exit_code": "0:0"},
        expect=Expect(fired=True, sub_domain="none", terminal_state="COMPLETED", culprits=[])),
    # https://github.com/E3SM-Project/e3sm_diags/issues/933 (ILAMB's MPI run completed under an older system UCX's
    # warning on every rank)
    RuleCase(title="a completed job whose every rank warned of an older UCX", evidence={"n1/applog": [
        "2025-01-01T00:00:12Z [1739399232.206867] [n1:2735073:0]     ucp_context.c:1951 UCX  WARN  UCP API version is "
        "incompatible: required >= 1.16, actual 1.14.0 (loaded from /usr/lib64/libucp.so.0)"]},
        context={"scheduler_state": "COMPLETED", "exit_code": "0:0"},
        expect=Expect(fired=True, sub_domain="none", terminal_state="COMPLETED", culprits=[])),
    RuleCase(title="a soft lockup at teardown of a completed job", evidence={"n1/syslog": [
        "2025-01-01T00:50:00Z n1 kernel: [1443371.3] watchdog: BUG: soft lockup - CPU#29 stuck for 22s! [python:274704]"]},
        context={"scheduler_state": "COMPLETED", "exit_code": "0:0"},
        expect=Expect(fired=True, sub_domain="none", terminal_state="COMPLETED", culprits=[])),
    # https://www.sherlock.stanford.edu/docs/advanced-topics/service-jobs/ (a job that requeues itself before its limit)
    RuleCase(title="accounting says completed after the job requeued itself", evidence={"n1/applog": [
        "2025-01-01T00:58:30Z slurmstepd: error: *** STEP 1.0 ON n1 CANCELLED AT 2025-01-01T00:58:30 DUE TO JOB "
        "REQUEUE ***"]},
        context={"scheduler_state": "COMPLETED", "exit_code": "0:0", "start_time": "2025-01-01T00:00:00Z",
                 "end_time": "2025-01-01T03:00:00Z"},
        expect=Expect(fired=True, sub_domain="none", terminal_state="COMPLETED")),
    RuleCase(title="accounting says completed, a step failed", evidence={"n1/applog": [
        "2025-01-01T00:10:00Z [rank0]: KeyError: 'x'"]},
        context={"scheduler_state": "COMPLETED", "exit_code": "0:0"},
        expect=Expect(fired=True, sub_domain="application", terminal_state="FAILED")),
    # https://github.com/cortexlabs/cortex/issues/1806 (an entrypoint that exits 0 whatever its child did)
    RuleCase(title="accounting says completed; a wrapper says 'finished' seconds after a rank was OOM-killed", evidence={
        "n1/syslog": ["Jan  1 00:10:00 n1 kernel: [1000.1] Memory cgroup out of memory: Killed process 4242 (python) "
                      "total-vm:90000000kB, anon-rss:50000000kB, file-rss:0kB, shmem-rss:0kB, UID:1000 pgtables:99000kB "
                      "oom_score_adj:0"],
        "n1/applog": ["2025-01-01T00:05:00Z step 100 | loss 2.1", "2025-01-01T00:10:03Z training finished"]},
        context={"scheduler_state": "COMPLETED", "exit_code": "0:0"},
        expect=Expect(fired=True, sub_domain="host_oom", terminal_state="OUT_OF_MEMORY")),
    # https://github.com/desihub/desispec/issues/2744 (a task failed; the batch script exited 0)
    RuleCase(title="accounting says completed, srun says a task exited 1", evidence={"n1/applog": [
        "2025-01-01T01:58:00Z srun: error: n1: task 26: Exited with exit code 1"]},
        context={"scheduler_state": "COMPLETED", "exit_code": "0:0"},
        expect=Expect(fired=True, sub_domain="unknown", terminal_state="FAILED")),
    # https://github.com/open-mpi/ompi/issues/14174 (ranks aborted on an RDMA error; the batch script echoed and exited 0)
    RuleCase(title="accounting says completed, srun says tasks aborted and the others were killed", evidence={
        "n1/applog": ["2025-01-01T01:58:00Z srun: error: n2: task 2: Aborted (core dumped)",
                      "2025-01-01T01:58:02Z srun: error: n1: tasks 0-1: Killed"]},
        context={"scheduler_state": "COMPLETED", "exit_code": "0:0", "nodes": ["n1", "n2"]},
        expect=Expect(fired=True, terminal_state="FAILED")),
    # https://github.com/mlcommons/training_results_v5.0/blob/main/Dell/results/16xXE9712x4GB200/stable_diffusion/result_9.txt
    # (training reached its step count, then the evaluation step raised on every rank; the batch script exited 0)
    RuleCase(title="accounting says completed; an unstamped success report, then a later step failed", evidence={
        "n1/applog": [" 0: `Trainer.fit` stopped: `max_steps=6000` reached.",
                      "2025-01-01T01:55:00Z  2: [rank2]: ValueError: Imaginary component 0.0029952042492374167",
                      "2025-01-01T01:56:00Z srun: error: n1: tasks 0-3: Exited with exit code 1"]},
        context={"scheduler_state": "COMPLETED", "exit_code": "0:0", "start_time": "2025-01-01T00:00:00Z",
                 "end_time": "2025-01-01T01:58:00Z"},
        expect=Expect(fired=True, sub_domain="application", terminal_state="FAILED")),
    RuleCase(title="accounting says completed, the job's own output says a step was OOM-killed", evidence={
        "n1/applog": ["slurmstepd: error: Detected 1 oom-kill event(s) in StepId=1.0. Some of the step tasks have been OOM Killed."]},
        context={"scheduler_state": "COMPLETED", "exit_code": "0:0"},
        expect=Expect(fired=True, sub_domain="host_oom", terminal_state="OUT_OF_MEMORY")),
    # https://github.com/nanoporetech/dorado/issues/348 (the batch script's client died of SIGBUS; the script waited
    # for its other step and exited 0)
    RuleCase(title="accounting says completed; the batch script reported its command died of a bus error", evidence={
        "n1/applog": ["2025-01-01T01:47:22Z /var/spool/slurmd/job28500656/slurm_script: line 17:  4568 Bus error"
                      "               ont_basecall_client -p 5555 -i pod5/"]},
        context={"scheduler_state": "COMPLETED", "exit_code": "0:0", "start_time": "2025-01-01T00:00:00Z",
                 "end_time": "2025-01-01T01:58:00Z"},
        expect=Expect(fired=True, sub_domain="unknown", terminal_state="FAILED")),
    # https://github.com/mlcommons/training_results_v5.1/blob/main/Nebius/results/nebius_b200_n4/llama2_70b_lora/result_6.txt
    # (srun --time=10 on the training step; the run's success record came ten seconds after the limit struck)
    RuleCase(title="accounting says completed; the training step's own limit ended it as it converged", evidence={
        "n1/applog": ["2025-01-01T01:55:00Z 0: :::MLLOG {\"namespace\": \"\", \"time_ms\": 1735696500000, "
                      "\"event_type\": \"POINT_IN_TIME\", \"key\": \"eval_accuracy\", \"value\": 0.9251}",
                      "2025-01-01T01:58:25Z 0: slurmstepd: error: *** STEP 364.44 ON n1 CANCELLED AT 2025-01-01T01:58:25 "
                      "DUE TO TIME LIMIT ***",
                      "2025-01-01T01:58:35Z 0: :::MLLOG {\"namespace\": \"\", \"time_ms\": 1735696715000, "
                      "\"event_type\": \"INTERVAL_END\", \"key\": \"run_stop\", \"value\": null, \"metadata\": "
                      "{\"status\": \"success\"}}",
                      "2025-01-01T01:58:35Z srun: error: n1: tasks 0-7: Terminated"]},
        context={"scheduler_state": "COMPLETED", "exit_code": "0:0", "start_time": "2025-01-01T00:00:00Z",
                 "end_time": "2025-01-01T01:59:04Z"},
        expect=Expect(fired=True, sub_domain="scheduler", terminal_state="TIMEOUT")),
    # https://github.com/kubeflow/mpi-operator/issues/470 (the launcher ran before its workers were ready, crashed and
    # was restarted by the kubelet; the restarted run completed)
    RuleCase(title="the job succeeded; its launcher failed, was restarted, and the run completed", evidence={
        "n1/applog": ["2025-01-01T00:10:03Z ORTE was unable to reliably start one or more daemons.",
                      "2025-01-01T00:10:49Z # Avg bus bandwidth    : 11.9617 "],
        "n1/syslog": ["2025-01-01T00:10:19.873000+00:00 n1 kubelet[3411]: E0101 00:10:19.873020    3411 "
                      "pod_workers.go:951] \"Error syncing pod, skipping\" err=\"failed to \\\"StartContainer\\\" for "
                      "\\\"mpi-launcher\\\" with CrashLoopBackOff: \\\"back-off 10s restarting failed "
                      "container=mpi-launcher pod=nccl-tests-launcher-mkjgm_default\\\"\""]},
        context={"scheduler": "kubernetes", "scheduler_state": "Succeeded", "exit_code": ""},
        expect=Expect(fired=True, sub_domain="none", terminal_state="COMPLETED")),
    # https://github.com/kubeflow/mpi-operator/issues/386 (the launcher Job failed four pods, then one succeeded)
    RuleCase(title="the Job's launcher failed four pods, then one succeeded", evidence={
        "n1/applog": ["2025-01-01T00:10:03Z [launcher-7bq2x] ORTE was unable to reliably start one or more daemons."],
        "n1/scheduler": ["Pods Statuses:  0 Active / 1 Succeeded / 4 Failed"]},
        context={"scheduler": "kubernetes", "scheduler_state": "Succeeded", "exit_code": ""},
        expect=Expect(fired=True, sub_domain="none", terminal_state="COMPLETED")),
    RuleCase(title="the job succeeded; its launcher failed and a wrapper said 'done' without a restart", evidence={
        "n1/applog": ["2025-01-01T00:10:03Z ORTE was unable to reliably start one or more daemons.",
                      "2025-01-01T00:10:49Z # Avg bus bandwidth    : 11.9617 "]},
        context={"scheduler": "kubernetes", "scheduler_state": "Succeeded", "exit_code": ""},
        expect=Expect(fired=True, sub_domain="configuration", terminal_state="FAILED")),
    # https://github.com/mit-orcd/orcd-benchmarks/blob/main/b200-nodes/out-nccl-2node-sharp/nccl-sharp-5501-5502-19794679.out
    # (a script running nccl-tests in ring mode, then with CollNet forced where no SHARP manager ran)
    RuleCase(title="accounting says completed; the first mode passed, the second set NCCL up again and failed", evidence={
        "n1/applog": ["# Avg bus bandwidth    : 101.286",
                      "n1:39559:39575 [0] NCCL INFO ncclCommInitRank comm 0x3e5a7120 rank 0 nranks 16 cudaDev 0 nvmlDev "
                      "0 busId 1b000 commId 0x41f353c93ab8c2f9 - Init COMPLETE",
                      _NO_COLLNET_ALGORITHM]},
        context={"scheduler_state": "COMPLETED", "exit_code": "0:0"},
        expect=Expect(fired=True, sub_domain="configuration", terminal_state="FAILED")),
    RuleCase(title="accounting says completed; the second mode's new process read the driver and failed", evidence={
        "n1/applog": ["# Avg bus bandwidth    : 107.132",
                      "n1:44730:44730 [0] NCCL INFO cudaDriverVersion 13010",
                      _NO_COLLNET_ALGORITHM]},
        context={"scheduler_state": "COMPLETED", "exit_code": "0:0"},
        expect=Expect(fired=True, sub_domain="configuration", terminal_state="FAILED")),
    RuleCase(title="accounting says completed; the same error right after the report, nothing set up again", evidence={
        "n1/applog": ["# Avg bus bandwidth    : 101.286", _NO_COLLNET_ALGORITHM]},
        context={"scheduler_state": "COMPLETED", "exit_code": "0:0"},
        expect=Expect(fired=True, sub_domain="none", terminal_state="COMPLETED")),
    RuleCase(title="accounting says completed; an early step's limit, then the run went on and finished", evidence={
        "n1/applog": ["2025-01-01T00:05:00Z slurmstepd: error: *** STEP 364.1 ON n1 CANCELLED AT 2025-01-01T00:05:00 "
                      "DUE TO TIME LIMIT ***",
                      "2025-01-01T01:50:00Z INFO:torch.distributed.elastic.agent.server.api:Local worker group finished "
                      "(WorkerState.SUCCEEDED)."]},
        context={"scheduler_state": "COMPLETED", "exit_code": "0:0", "start_time": "2025-01-01T00:00:00Z",
                 "end_time": "2025-01-01T01:51:00Z"},
        expect=Expect(fired=True, sub_domain="none", terminal_state="COMPLETED")),
    # https://github.com/mghpcc/aicr-benchmarks (Benchmark_WG/pytorch-training/rtx_pro_6000/resnet50): a one-node run
    # whose NCCL relayed its HCA port's errors and went on to finish
    RuleCase(title="accounting says completed; NCCL relayed a port error that never came back", evidence={
        "n1/applog": ["2025-01-01T00:10:00Z n1:4955:4962 [0] transport/net_ib.cc:253 NCCL WARN NET/IB : mlx5_3:1 Got "
                      "non-fatal async event: port error(10)"]},
        context={"scheduler_state": "COMPLETED", "exit_code": "0:0", "start_time": "2025-01-01T00:00:00Z",
                 "end_time": "2025-01-01T00:20:00Z"},
        expect=Expect(fired=True, sub_domain="none", terminal_state="COMPLETED")),
])
def completed_workload(ws: Workspace) -> None:
    recorded = recorded_state(ws.context)
    exited_zero = exited_zero_unrecorded(ws)
    if recorded != TerminalState.COMPLETED and not exited_zero:
        return
    limit = next((s for name in TIME_LIMITS for s in ws.select(prefix=name) if _at_the_end(ws, s)), None)
    if limit is not None:
        # the batch script's exit 0 after its step was ended by its time limit (srun returns, the script goes on)
        ws.decision.terminal_state = TerminalState.TIMEOUT
        ws.note("state", f"accounting says COMPLETED, but {limit.name} ended a step as the workload ended: TIMEOUT")
        return
    deleted = next((s for s in ws.select(prefix="Job cancelled") if _at_the_end(ws, s)), None)
    if deleted is not None and recorded == TerminalState.COMPLETED:
        # Torque's and PBS's completed state is set however the job ended: a qdel at its end is how it ended
        ws.decision.terminal_state = TerminalState.CANCELLED
        ws.note("state", "the scheduler's completed state covers a job it deleted at its end: CANCELLED")
        return
    if recorded == TerminalState.COMPLETED and _job_retried_to_success(ws):
        for s in ws.active():
            ws.demote(s, "the Job failed pods before the one that succeeded: an earlier attempt's, survived")
        return
    roots = [s for s in ws.active(role="root")
             if _during_run(ws, s) and _ended_a_process(s) and s.name not in _REQUEUES]
    roots += [s for s in ws.active(prefix="Step task failed")
              if (_at_the_end(ws, s) or _after_the_work(ws, s)) and _a_task_failed(s)]
    roots += [s for s in ws.active() if s.name in _CRASH_REPORTS and _during_run(ws, s) and _ended_a_process(s)]
    working = _working_marks(ws) if roots else []
    succeeded = any(not _follows_a_kill(ws, report, roots, working) and not _a_later_step_failed(ws, report, roots)
                    for report in ws.select(prefix="Workload completed"))
    if roots and not succeeded:
        ws.decision.terminal_state = TerminalState.FAILED
        ws.note("state", f"accounting says COMPLETED but {roots[0].name} failed the workload: FAILED")
        return
    for s in ws.active():
        ws.demote(s, "the workload completed: this was survived")


def _a_later_step_failed(ws: Workspace, report: WorkSymptom, roots: list[WorkSymptom]) -> bool:
    """After the success report, in the same stream, NCCL set a communicator up again (its Init lines, or a new
    process's one-time 'cudaDriverVersion' line) and then one of `roots` failed: the report was an earlier step's (a
    benchmark script's first mode), and a later step is how the workload ended. Errors right after a report with no
    new set-up between are its teardown."""
    reported = {e.provenance.origin: e.provenance.line or 0 for e in report.evidence}
    setups: dict[str, list[int]] = {}
    for fact in ws.facts_of("nccl_init") + ws.events_of(f"{EventType.CONTEXT}.cuda_driver"):
        setups.setdefault(fact.evidence.provenance.origin, []).append(fact.evidence.provenance.line or 0)

    def set_up_again_before(origin: str, line: int) -> bool:
        return any(reported[origin] < setup < line for setup in setups.get(origin, []))

    return any(e.provenance.origin in reported and set_up_again_before(e.provenance.origin, e.provenance.line or 0)
               for r in roots for e in r.evidence)


# What the extractors of 'Step task failed' capture in `how`: srun's status of each task (its exit code or the signal
# that ended it), slurmstepd's record of the step ended for its tasks' failure ('DUE TO TASK FAILURE'), and a launcher's
# non-zero status for its child (ezpz's 'Execution finished with 143.', DeepSpeed's '... exits with return code = 1').
# All of these say a task failed of itself, except srun's own ending of the others once one had failed (Killed,
# Terminated) and a task's clean exit.
_NOT_A_TASK_FAILURE = frozenset({"Killed", "Terminated", "Exited with exit code 0"})


def _a_task_failed(s: WorkSymptom) -> bool:
    """A 'Step task failed' symptom with a status that is a task's own failure (a non-zero code or a crash)."""
    return any(how not in _NOT_A_TASK_FAILURE for how in s.value_set("how"))


def _after_the_work(ws: Workspace, s: WorkSymptom) -> bool:
    """Without a time of its own, printed after the last training progress of its stream and before none: how the
    program's work ended, whatever the batch script echoed after it."""
    progress = ws.select(prefix="Training progress")
    return ws.undated(s) and any(printed_before(p, [s]) for p in progress) and not printed_before(s, progress)


def _job_retried_to_success(ws: Workspace) -> bool:
    """A Kubernetes Job's pod tally counts a succeeded pod after failed ones: it retried to success (backoffLimit)."""
    return any(int(e.attributes.get("succeeded") or 0) > 0 and int(e.attributes.get("failed") or 0) > 0
               for e in ws.facts_of("job_pod_tally"))


def _at_the_end(ws: Workspace, s: WorkSymptom) -> bool:
    """The symptom's last report came in the last SUCCESS_AFTER_KILL_S of the workload (an earlier step's failure,
    a preflight check the script went past, is not how the job ended)."""
    end, first, last = ws.context.end_time, s.first_time, s.last_time or s.first_time
    if end is None or first is None or last is None or (first == end and all(e.time_inferred for e in s.evidence)):
        return False  # no time, or only the job-end fallback's
    return end - last <= timedelta(seconds=SUCCESS_AFTER_KILL_S)
# A success report this soon after a root that ended a process, with no progress between, is a wrapper's message
# printed whatever its child did (a shell script's echo, an entrypoint that always exits 0).
SUCCESS_AFTER_KILL_S = 300.0


def _working_marks(ws: Workspace) -> list[datetime]:
    """When the workload was seen working: its training progress, and the kubelet restarting a failed container (the
    restarted container ran the workload again, so a success after it is that run's own)."""
    progress = [t for p in ws.select(prefix="Training progress") for t in (p.first_time, p.last_time) if t]
    return progress + [e.time for s in ws.select() for e in s.evidence if e.time and _CONTAINER_RESTARTED.search(e.text)]


def _follows_a_kill(ws: Workspace, report: WorkSymptom, roots: list[WorkSymptom], working: list[datetime]) -> bool:
    """The success report came within SUCCESS_AFTER_KILL_S after one of `roots`, and no training progress or container
    restart (`working`) between; or,
    without a time of its own, it was printed before srun recorded a task exiting with a non-zero code, in the same
    stream (whose lines are in time order): a step that failed after it is how the workload ended (an exception at exit
    after the report, with the tasks exiting 0, is not)."""
    said = report.last_time or report.first_time
    if said is None or ws.undated(report):
        progress = ws.select(prefix="Training progress")
        tasks = [r for r in roots if r.name.startswith("Step task failed")]
        # a script's echo right after its command's failure, no training between, is the script's, not the program's
        right_after = any(printed_before(r, [report]) and not any(printed_before(r, [p]) for p in progress)
                          for r in tasks)
        return right_after or printed_before(report, tasks)
    return any(r.first_time is not None and timedelta(0) <= said - r.first_time <= timedelta(seconds=SUCCESS_AFTER_KILL_S)
               and not any(r.first_time < t <= said for t in working) for r in roots)


# The kubelet's record of a container it restarts after a failure: the BackOff event ('Back-off restarting failed
# container') and its CrashLoopBackOff sync error ('back-off 10s restarting failed container=...')
_CONTAINER_RESTARTED = re.compile(r"(?i)\bback-off (?:\d+\w* )?restarting failed container")


@refiner("TerminalStateFromEvidence", phase=Phase.POST_OUTCOME, doc="""
When the scheduler state is missing (bare mpirun, unknown), derive the terminal state from the evidence: the
state a scheduler root implies (TIMEOUT, NODE_FAIL, OUT_OF_MEMORY, PREEMPTED, CANCELLED), OUT_OF_MEMORY for a
host out of memory under a scheduler (a bare launch the OOM killer ended failed: FAILED), FAILED for any other
failure, COMPLETED when the workload reported success and nothing failed, CANCELLED when someone interrupted it from
its terminal (Ctrl-C) and nothing failed, or nothing whose cause is known (a report with no cause did not end a run
that was still there to interrupt), FAILED when no root was found but a process ended in an uncaught exception
(ProgramRaised). A recorded FAILED is refined when the root itself is the scheduler's or
runtime's report of a more specific end (a pod OOMKilled: OUT_OF_MEMORY), and so is a recorded CANCELLED whose root is
the scheduler's own memory-limit kill (older Slurm records that kill as CANCELLED). A recorded COMPLETED that the evidence contradicts (a silent
failure) becomes what happened: OUT_OF_MEMORY when the host ran out of memory, otherwise FAILED. A recorded FAILED
where a time limit or Job deadline ended the workload (even one that had hung or failed before) is TIMEOUT, and so
is a workload without a recorded state whose step a time limit ended as it ended, and a recorded CANCELLED whose root
is the platform's own limit (SageMaker records a job its MaxRuntimeInSeconds stopped as Stopped).
""", cases=[
    RuleCase(title="mpirun failure", evidence={"n1/applog": [
        "2025-01-01T00:10:00Z [1,2]<stderr>:n1:1:1 [2] transport/net_ib.cu:781 WARN NET/IB : Got completion with error 12, opcode 1, len0, vendor err 129"]},
        context={"scheduler": "none", "scheduler_state": ""}, expect=Expect(fired=True, terminal_state="FAILED")),
    RuleCase(title="a kernel panic on the node Kubernetes then marked NotReady", evidence={
        "n2/syslog": ["Jan  1 00:10:00 n2 kernel: [1000.1] Kernel panic - not syncing: softlockup: hung tasks"],
        "n1/scheduler": ["2025-01-01T00:11:00Z   Normal   NodeNotReady   Node/n2   Node n2 status is now: NodeNotReady"]},
        context={"scheduler": "kubernetes", "scheduler_state": "Failed", "exit_code": ""},
        expect=Expect(fired=True, sub_domain="host", culprits=["n2"], terminal_state="NODE_FAIL")),
    # https://github.com/longhorn/longhorn/issues/3283 (the node NotReady for 21 s while its iSCSI volumes failed; the
    # job failed ten minutes later on its read-only checkpoint directory)
    RuleCase(title="the node was NotReady for seconds and Ready again before the job failed", evidence={
        "n2/syslog": ["Jan  1 00:10:00 n2 kernel: [1000.1] Kernel panic - not syncing: softlockup: hung tasks"],
        "n1/scheduler": ["2025-01-01T00:11:00Z   Normal   NodeNotReady   Node/n2   Node n2 status is now: NodeNotReady",
                         "2025-01-01T00:11:21Z   Normal   NodeReady      Node/n2   Node n2 status is now: NodeReady"]},
        context={"scheduler": "kubernetes", "scheduler_state": "Failed", "exit_code": "",
                 "end_time": "2025-01-01T00:21:00Z"},
        expect=Expect(fired=False, sub_domain="host", culprits=["n2"], terminal_state="FAILED")),
    RuleCase(title="a Kubernetes Job hung, then its deadline ended it", evidence={"n1/applog": [
        f"2025-01-01T00:{m:02d}:00Z step {m * 10} | loss 2.1" for m in range(5, 20)] + [
        "2025-01-01T01:59:00Z   Warning   DeadlineExceeded   Job/train-7   Job was active longer than specified "
        "deadline"]},
        context={"scheduler": "kubernetes", "scheduler_state": "Failed", "exit_code": ""},
        expect=Expect(fired=True, sub_domain="unknown", terminal_state="TIMEOUT")),
    # https://github.com/mlcommons/training_results_v5.0/blob/main/Supermicro/results/SYS-A21GE-NBRT/retinanet/result_1.txt
    # (NCCL refused a vNIC request at exit, rank 0 waited in the barrier until the step's limit; no accounting kept)
    RuleCase(title="no state recorded; a failure at exit, then the step's time limit", evidence={"n1/applog": [
        "2025-01-01T01:20:00Z 7:   what():  NCCL error in: /opt/pytorch/pytorch/torch/csrc/distributed/c10d/"
        "NCCLUtils.cpp:77, invalid usage (run with NCCL_DEBUG=WARN for details), NCCL version 2.25.1",
        "2025-01-01T01:58:25Z 0: slurmstepd: error: *** STEP 58107.4 ON n1 CANCELLED AT 2025-01-01T01:58:25 DUE TO "
        "TIME LIMIT ***"]},
        context={"scheduler_state": "", "exit_code": "", "start_time": "2025-01-01T00:00:00Z",
                 "end_time": "2025-01-01T01:59:00Z"},
        expect=Expect(fired=True, terminal_state="TIMEOUT")),
    RuleCase(title="no scheduler; the OOM killer ended a rank", evidence={"n1/syslog": [
        "Jan  1 00:10:00 n1 kernel: [1000.1] Out of memory: Killed process 4242 (python) total-vm:900000000kB, "
        "anon-rss:500000000kB, file-rss:0kB, shmem-rss:0kB, UID:1000 pgtables:990000kB oom_score_adj:0"]},
        context={"scheduler": "none", "scheduler_state": ""},
        expect=Expect(fired=True, sub_domain="host_oom", terminal_state="FAILED")),
    # https://github.com/NVIDIA/nccl/issues/1606 (nccl-tests that printed nothing, stopped by hand)
    RuleCase(title="no scheduler; a run that printed no error, interrupted from its terminal", evidence={"n1/applog": [
        "2025-01-01T00:00:01Z # nThread 1 nGpus 1 minBytes 8 maxBytes 134217728 step: 2(factor) warmup iters: 5",
        "^Cmpirun: abort is already in progress...hit ctrl-c again to forcibly terminate"]},
        context={"scheduler": "none", "scheduler_state": ""},
        expect=Expect(fired=True, sub_domain="unknown", terminal_state="CANCELLED")),
    RuleCase(title="no scheduler; a failure with no known cause, then the hung run interrupted", evidence={
        "n1/applog": ["2025-01-01T00:00:05Z RuntimeError: Engine core initialization failed. See root cause above. "
                      "Failed core proc(s): {}",
                      "^Cmpirun: abort is already in progress...hit ctrl-c again to forcibly terminate"]},
        context={"scheduler": "none", "scheduler_state": ""},
        expect=Expect(fired=True, sub_domain="unknown", terminal_state="CANCELLED")),
    # https://github.com/horovod/horovod/issues/893 (NCCL 2.4's shared-memory set-up refused on one rank; Horovod hung)
    RuleCase(title="no scheduler; NCCL's set-up failed, then the hung run interrupted", evidence={
        "n1/applog": ["2025-01-01T00:00:05Z n1:151780:151928 [2] include/shm.h:42 NCCL WARN Cuda failure 'invalid "
                      "argument'",
                      "^Cmpirun: abort is already in progress...hit ctrl-c again to forcibly terminate"]},
        context={"scheduler": "none", "scheduler_state": ""},
        expect=Expect(fired=True, sub_domain="configuration", terminal_state="FAILED")),
    RuleCase(title="accounting says completed, the OOM killer killed a rank", evidence={"n1/syslog": [
        "Jan  1 00:10:00 n1 kernel: [1000.1] Out of memory: Killed process 4242 (python) total-vm:900000000kB, anon-rss:500000000kB, file-rss:0kB, shmem-rss:0kB, UID:1000 pgtables:990000kB oom_score_adj:0"]},
        context={"scheduler_state": "COMPLETED", "exit_code": "0:0"},
        expect=Expect(fired=True, sub_domain="host_oom", terminal_state="OUT_OF_MEMORY")),
    # https://github.com/coqui-ai/STT/issues/2238 (older Slurm: sacct says CANCELLED after this kill)
    RuleCase(title="accounting says cancelled; slurmstepd killed the job for its memory limit", evidence={"n1/applog": [
        "2025-01-01T00:10:00Z slurmstepd: error: Job 7518 exceeded memory limit (626359956 > 512000000), being killed",
        "2025-01-01T00:10:01Z slurmstepd: error: *** JOB 7518 ON n1 CANCELLED AT 2025-01-01T00:10:01 ***"]},
        context={"scheduler_state": "CANCELLED", "exit_code": "0:9"},
        expect=Expect(fired=True, sub_domain="host_oom", terminal_state="OUT_OF_MEMORY")),
    # https://github.com/awsdocs/amazon-sagemaker-developer-guide/blob/master/doc_source/distributed-troubleshooting-data-parallel.md
    RuleCase(title="the platform records a stop; its own limit stopped the job", evidence={"n1/scheduler": [
        '    "Secondary": "MaxRuntimeExceeded",']},
        context={"scheduler": "none", "scheduler_state": "Stopped", "exit_code": ""},
        expect=Expect(fired=True, sub_domain="scheduler", terminal_state="TIMEOUT")),
    RuleCase(title="accounting says cancelled; the owner cancelled it", evidence={"n1/applog": [
        "2025-01-01T00:10:01Z slurmstepd: error: *** JOB 7518 ON n1 CANCELLED AT 2025-01-01T00:10:01 ***"]},
        context={"scheduler_state": "CANCELLED", "exit_code": "0:15"},
        expect=Expect(fired=False, terminal_state="CANCELLED")),
])
def terminal_state_from_evidence(ws: Workspace) -> None:
    recorded = recorded_state(ws.context)
    root = ws.decision.root
    # what the scheduler's or runtime's own report of the root incident says: the root itself, else a report of the
    # same sub_domain it outranked (a pod's OOMKilled behind the kernel's cgroup kill)
    same_incident = [*root, *(ws.select(sub_domain=ws.decision.sub_domain) if ws.decision.sub_domain else [])]
    implied = next((str(s.attributes["terminal_state"]) for s in same_incident if s.attributes.get("terminal_state")),
                   None)
    generic_failure = ws.decision.terminal_state == TerminalState.FAILED and recorded in (TerminalState.FAILED,
                                                                                         TerminalState.UNKNOWN)
    limit = next((s for name in TIME_LIMITS for s in ws.select(prefix=name)), None)
    undecided = recorded == TerminalState.UNKNOWN and ws.decision.terminal_state in (None, TerminalState.UNKNOWN)
    # a platform that records its own limit's stop as a stop (SageMaker's Stopped, MaxRuntimeExceeded)
    stopped_at_its_limit = recorded == TerminalState.CANCELLED and any(s.name in TIME_LIMITS for s in root)
    if limit is not None and (generic_failure or stopped_at_its_limit or undecided and _at_the_end(ws, limit)):
        # a workload that a time limit or Job deadline ended ended by it, even one that had hung or lost a node first
        ws.decision.terminal_state = TerminalState.TIMEOUT
        ws.note("state", f"the scheduler says {ws.context.scheduler_state or 'nothing'}; {limit.name} ended the "
                "workload: TIMEOUT")
        return
    if recorded == TerminalState.FAILED and implied and ws.decision.terminal_state == TerminalState.FAILED:
        # A generic FAILED refined by what the scheduler/runtime itself reported (e.g. a pod OOMKilled).
        ws.decision.terminal_state = TerminalState(implied)
        ws.note("state", f"the scheduler says FAILED; its own report in the evidence says {implied}")
        return
    if recorded == TerminalState.CANCELLED and _killed_for_memory(root) and \
            ws.decision.terminal_state == TerminalState.CANCELLED:
        # slurmstepd's memory-limit enforcement cancels the job, and older Slurm records that as CANCELLED
        ws.decision.terminal_state = TerminalState.OUT_OF_MEMORY
        ws.note("state", "the scheduler says CANCELLED; it cancelled the workload for exceeding its memory limit")
        return
    if generic_failure:
        failed_node = _node_declared_failed(ws)
        if failed_node:
            ws.decision.terminal_state = TerminalState.NODE_FAIL
            ws.note("state", f"the root cause is on {failed_node}, which the scheduler declared failed: NODE_FAIL")
            return
    out_of_memory = ws.decision.sub_domain == SubDomain.HOST_OOM
    if recorded == TerminalState.COMPLETED and ws.decision.terminal_state == TerminalState.FAILED and out_of_memory:
        ws.decision.terminal_state = TerminalState.OUT_OF_MEMORY
        ws.note("state", "the scheduler says COMPLETED; the host ran out of memory and killed the workload")
        return
    if ws.decision.terminal_state not in (None, TerminalState.UNKNOWN):
        return
    if implied:
        state = TerminalState(implied)
    elif ws.select(prefix="Interrupted by the user") and ws.decision.sub_domain == SubDomain.UNKNOWN:
        state = TerminalState.CANCELLED  # the run was still there to stop; what failed in it says no cause
    elif root and ws.decision.sub_domain != SubDomain.NONE:
        # OUT_OF_MEMORY is a state a scheduler records; a bare launch killed by the OOM killer failed
        scheduled = ws.context.scheduler.strip().lower() not in ("", "none")
        state = TerminalState.OUT_OF_MEMORY if out_of_memory and scheduled else TerminalState.FAILED
    elif ws.select(prefix="Workload completed") and not raised_after_completion(ws):
        state = TerminalState.COMPLETED
    elif ws.decision.sub_domain == SubDomain.NONE and exited_zero_unrecorded(ws):
        state = TerminalState.COMPLETED  # a bare launcher's exit 0 with nothing failed
    elif ws.select(prefix="Interrupted by the user"):
        state = TerminalState.CANCELLED  # nothing failed that we can see: someone stopped it from its terminal
    elif ws.facts_of("program_raised"):
        state = TerminalState.FAILED  # a process ended in an uncaught exception, whatever it reported
    else:
        return
    ws.decision.terminal_state = state
    ws.note("state", f"no scheduler state recorded; the evidence says {state.value}")


def _killed_for_memory(root: list[WorkSymptom]) -> bool:
    return any(s.attributes.get("terminal_state") == TerminalState.OUT_OF_MEMORY.value for s in root)


def _node_declared_failed(ws: Workspace) -> str | None:
    """The root cause's node, when a scheduler's node-failure report (Slurm DOWN, Kubernetes NotReady) made during the
    workload names it (one made before the workload started was about whatever ran then; a NotReady the node recovered
    from within its pods' toleration, without a reboot, lost nothing)."""
    root_nodes = {s.node for s in ws.decision.root if s.node}
    start = ws.context.start_time
    ready_again = _ready_again(ws)
    for report in ws.select():
        if report.attributes.get("terminal_state") != TerminalState.NODE_FAIL.value:
            continue
        if start is not None and not ws.undated(report) and report.first_time is not None and \
                report.first_time < start - timedelta(seconds=ws.params.clock_skew_s):
            continue
        named = {ws.canonical_node(n) for n in report.value_set("blamed_node")}
        last = report.last_time or report.first_time
        if not report.value_set("reset") and last is not None and not ws.undated(report):
            # NotReady, then Ready again before its pods' NotReady toleration ran out: they were not evicted
            named = {n for n in named if not any(last < t <= last + timedelta(seconds=NOT_READY_TOLERATION_S)
                                                 for t in ready_again.get(n or "", []))}
        if named & root_nodes:
            return sorted(named & root_nodes)[0]  # type: ignore[type-var]
    return None


# Kubernetes' DefaultTolerationSeconds admission plugin gives every pod 300 s of toleration for the not-ready and
# unreachable taints: a node back to Ready sooner kept its pods (and a node that rebooted lost them whenever it returned).
NOT_READY_TOLERATION_S = 300.0


def _ready_again(ws: Workspace) -> dict[str, list[datetime]]:
    """When each node was recorded Ready again during the workload (rule TerminalStateFromEvidence)."""
    end = ws.context.end_time
    skew = timedelta(seconds=ws.params.clock_skew_s)
    ready: dict[str, list[datetime]] = {}
    for event in ws.events_of(EventType.NODE_INTERESTING):
        if event.symptom != "Kubernetes node ready again" or event.time is None or event.evidence.time_inferred:
            continue
        if end is not None and event.time > end + skew:
            continue
        for key in ("ready_node", "ready_node2", "ready_node3", "ready_node4"):
            for name in event.value_set(key):
                ready.setdefault(ws.canonical_node(name) or name, []).append(event.last_time or event.time)
    return ready


_REFUSED_CREDENTIAL = ("Step launch refused: credential expired (node clock)",
                       "Step launch refused: credential invalid on the node")
_REFUSED_BY_SEVERAL = "Step credential refused by several nodes"
_MUNGE_REFUSED = "Munge refused a credential (key mismatch)"


@filter_rule("CredentialRefusedBySeveralNodes", phase=Phase.FILTER, doc=f"""
srun's 'Task launch ... failed on node <n>: Job credential expired' (or 'Invalid job credential') blames that node's
clock or Slurm installation when it alone refused the credential. The credential is the controller's, signed with its
clock and key: refused by two nodes or more, the controller's set-up is what is off, and the reports become
`{_REFUSED_BY_SEVERAL}` (configuration, no node blamed). Refused by one node alone, munge's own refusals in the daemons'
logs (`{_MUNGE_REFUSED}`) are that node's key seen from both ends, and are dropped.
""", cases=[
    # https://github.com/c3nl-neuraldynamics/c3nl_cluster/issues/18 (the controller's clock out of sync)
    RuleCase(title="every node finds the credential expired", evidence={"a/applog": [
        f"2025-01-01T00:04:42Z srun: error: Task launch for StepId=8.0 failed on node {n}: Job credential expired"
        for n in ("a", "b", "c")]},
        context={"nodes": ["a", "b", "c"]},
        expect=Expect(fired=True, sub_domain="configuration", culprits=[], root_symptom=_REFUSED_BY_SEVERAL)),
    # https://github.com/clustervision/trinity/issues/759 (a reimaged node with another munge key)
    RuleCase(title="one node refuses the launch; munge's refusals in the logs", evidence={
        "a/scheduler": ["[2025-01-01T00:00:26.410] error: Munge decode failed: Invalid credential"],
        "a/applog": ["2025-01-01T00:04:44Z srun: error: Task launch for StepId=8.0 failed on node b: Protocol "
                     "authentication error"]},
        context={"nodes": ["a", "b", "c"]}, expect=Expect(fired=True, sub_domain="configuration", culprits=["b"])),
    RuleCase(title="one node finds it expired", evidence={"a/applog": [
        "2025-01-01T00:04:42Z srun: error: Task launch for StepId=8.0 failed on node b: Job credential expired"]},
        context={"nodes": ["a", "b", "c"]}, expect=Expect(fired=False, sub_domain="host", culprits=["b"])),
])
def credential_refused_by_several_nodes(ws: Workspace) -> None:
    events = [e for e in ws.events_of(EventType.NODE_BAD) if e.symptom in _REFUSED_CREDENTIAL]
    refused = {n for e in events for n in (ws.canonical_node(b) for b in e.value_set("blamed_node")) if n}
    if len(refused) == 1:
        # munged's refusals of the same key mismatch, as the daemons logged them, are that node's refusal
        for munge in [e for e in ws.events_of(EventType.NODE_BAD) if e.symptom == _MUNGE_REFUSED]:
            ws.drop(munge, f"{min(refused)} alone refused the step's credential: its key, which munge's refusals echo")
    if len(refused) < 2:
        return
    for event in events:
        ws.reread(event, _REFUSED_BY_SEVERAL, f"{len(refused)} nodes refused the step's credential: the controller's "
                  "clock or key, not theirs", {**event.attributes, "blamed_node": ""})


_SPEC_REJECTED = "Kubernetes rejected the workload's spec"
_FOLLOWER_HELD = "JobSet followers held for their leader"


@filter_rule("JobSetFollowerWaitsOnLeader", phase=Phase.FILTER, doc=f"""
JobSet's pod webhook refuses the follower pods of an exclusive-placement Job until the Job's leader pod is scheduled
(and is one live pod); the Job controller repeats the denial as FailedCreate events. Read as `{_FOLLOWER_HELD}`, such a
denial is not `{_SPEC_REJECTED}`: the followers wait on their leader's placement or failure, which the answer names.
""", cases=[
    # https://github.com/kubernetes-sigs/jobset/issues/1187 (the leader Pending for lack of GPUs, its followers refused)
    RuleCase(title="followers refused while the leader is unschedulable", evidence={"n0/scheduler": [
        "2025-01-01 00:49:05.000 Warning  FailedScheduling   pod/train-slice-1-0   0/6 nodes are available: 4 "
        "Insufficient nvidia.com/gpu.",
        "2025-01-01 00:51:00.000 Warning  FailedCreate       job/train-slice-1     Error creating: admission webhook "
        '"vpod.kb.io" denied the request: follower pod node selector not set']},
        context={"nodes": ["n0", "n1"]}, expect=Expect(fired=True, absent=[_SPEC_REJECTED])),
    RuleCase(title="a webhook's denial of a field", evidence={"n0/scheduler": [
        "2025-01-01 00:51:00.000 Warning  FailedCreate       job/train-slice-1     Error creating: admission webhook "
        '"vpod.kb.io" denied the request: follower pod has no owner reference']},
        context={"nodes": ["n0", "n1"]}, expect=Expect(fired=False, root_symptom=_SPEC_REJECTED)),
])
def jobset_follower_waits_on_leader(ws: Workspace) -> None:
    held = {(e.evidence.provenance.origin, e.evidence.provenance.line) for e in ws.events_of(EventType.NODE_INTERESTING)
            if e.symptom == _FOLLOWER_HELD}
    for event in [e for e in ws.events_of(EventType.NODE_BAD) if e.symptom == _SPEC_REJECTED
                  and (e.evidence.provenance.origin, e.evidence.provenance.line) in held]:
        ws.drop(event, "JobSet's webhook holds the follower pods until their leader is placed: a wait, not the spec")


_HELD_GPUS = "Pod waited for GPUs already in use"
_SHORT_OF_GPUS = re.compile(r"\bInsufficient (?:nvidia|amd)\.com/gpu\b")


def _gpus_held_case(title: str, requested: str, expect: Expect) -> RuleCase:
    """A rule case: a worker pod unplaced for lack of GPUs; describe node shows `requested` GPUs of pods bound there."""
    return RuleCase(title=title, evidence={"n1/scheduler": [
        "2025-01-01T00:30:08Z Warning  FailedScheduling  pod/llm-ft-worker-2  0/4 nodes are available: 1 Insufficient "
        "nvidia.com/gpu, 3 node(s) didn't match pod anti-affinity rules.",
        "Allocated resources:", "  Resource           Requests      Limits", f"  nvidia.com/gpu     {requested}"
        f"             {requested}"]},
        context={"scheduler": "kubernetes", "nodes": ["n1", "n2"], "start_time": "2025-01-01T00:30:00Z",
                 "end_time": "2025-01-01T01:00:00Z"}, expect=expect)


@filter_rule("GpusHeldByOtherPods", phase=Phase.FILTER, doc=f"""
A pod the scheduler could not place because the nodes' free GPUs were fewer than it asked ('Insufficient
nvidia.com/gpu' in its fit error) while describe node shows GPUs requested by the pods bound to a node (fact
node_gpus_requested above 0) waited for GPUs that exist and are in use: `{NEVER_PLACED}` is read as `{_HELD_GPUS}`
(scheduler). With no GPU requested anywhere the GPUs were never there to give (no device plugin, none advertised),
and the placement failure stays the workload's request or setup.
""", cases=[
    # https://github.com/NVIDIA/cluster-readiness-engine/issues/310 (a pod pinned to a node whose GPUs other tenants'
    # pods held, Pending on 'Insufficient nvidia.com/gpu' for hours); the table's form is kubectl describe node's
    _gpus_held_case("another team's pods hold the node's eight GPUs", "8",
                    Expect(fired=True, sub_domain="scheduler", root_symptom=_HELD_GPUS)),
    _gpus_held_case("the node's GPUs are not requested by anyone", "0",
                    Expect(fired=False, sub_domain="configuration")),
])
def gpus_held_by_other_pods(ws: Workspace) -> None:
    held = [f for f in ws.events_of(f"{EventType.CONTEXT}.node_gpus_requested")
            if int(f.attributes.get("gpus_requested") or 0) > 0]
    if not held:
        return
    for event in [e for e in ws.events_of(EventType.NODE_BAD) if e.symptom == NEVER_PLACED
                  and _SHORT_OF_GPUS.search(e.evidence.text)]:
        ws.reread(event, _HELD_GPUS, f"describe node shows {held[0].attributes['gpus_requested']} GPUs requested by "
                                     "the pods bound there: the pod waited for GPUs in use")


_PLATFORM_OOM = "Platform component killed for memory"
# Pods of the GPU Operator (operator and operands, named by their DaemonSets) and of Node Feature Discovery, and the
# namespaces the platform installs them in
_PLATFORM_POD = re.compile(r"\b(?:gpu-operator|nvidia-(?:driver|container-toolkit|device-plugin|dcgm-exporter|dcgm|"
                           r"operator-validator|cuda-validator|mig-manager)[\w-]*|gpu-feature-discovery|"
                           r"node-feature-discovery|nfd-(?:master|worker|gc))[\w-]*|"
                           r"(?:^|\s)(?:-n|--namespace)[= ](?:gpu-operator|nvidia-gpu-operator|node-feature-discovery)\b")


def _platform_case(title: str, pod: str, expect: Expect) -> RuleCase:
    """A rule case: kubectl describe of `pod`, whose container's last state is OOMKilled."""
    return RuleCase(title=title, evidence={"n1/scheduler": [
        f"$ kubectl describe pod {pod}", "    Last State:     Terminated", "      Reason:       OOMKilled",
        "      Exit Code:    137"]},
        context={"scheduler": "kubernetes", "nodes": ["n1", "n2"]}, expect=expect)


@filter_rule("PlatformComponentOom", phase=Phase.FILTER, doc=f"""
A Kubernetes OOMKilled inside kubectl describe output of a GPU platform component's pod (its block opened by a 'Name:'
or a describe command naming a GPU Operator pod - gpu-operator, nvidia-driver-daemonset, nvidia-device-plugin,
nvidia-dcgm-exporter, gpu-feature-discovery, nvidia-operator-validator, nvidia-mig-manager ... - or Node Feature
Discovery's, or run in their namespaces), or a pod listing's OOMKilled row of such a pod, is that component's memory
limit, not the workload's memory: it is read as
`{_PLATFORM_OOM}` (configuration, no node blamed).
""", cases=[
    # https://github.com/NVIDIA/gpu-operator/issues/208 (the operator OOMKilled in a loop under its 100Mi limit)
    _platform_case("the GPU Operator's own pod was OOMKilled", "gpu-operator-7d6c9f5b8-xq4zt",
                   Expect(fired=True, sub_domain="configuration", root_symptom=_PLATFORM_OOM)),
    _platform_case("the workload's own pod was OOMKilled", "llm-sft-worker-1",
                   Expect(fired=False, sub_domain="host_oom")),
    RuleCase(title="a pod listing's row of NFD's worker in OOMKilled", evidence={"n1/scheduler": [
        "nfd-worker-7xk2p   0/1     OOMKilled   5 (2m ago)   40m"]},
        context={"scheduler": "kubernetes", "nodes": ["n1", "n2"]},
        expect=Expect(fired=True, sub_domain="configuration", root_symptom=_PLATFORM_OOM)),
])
def platform_component_oom(ws: Workspace) -> None:
    blocks: dict[str, list[tuple[int, bool]]] = {}  # origin -> (line, whether the block is a platform pod's)
    for fact in ws.events_of(f"{EventType.CONTEXT}.describe_block"):
        if fact.attributes.get("pod_node"):
            continue  # the pod's node, inside its block
        named = str(fact.attributes.get("object") or fact.attributes.get("command") or "")
        blocks.setdefault(fact.evidence.provenance.origin, []).append(
            (fact.evidence.provenance.line or 0, bool(_PLATFORM_POD.search(named))))
    for found in blocks.values():
        found.sort(key=lambda block: block[0])
    for event in [e for e in ws.events_of(EventType.NODE_BAD) if e.symptom == "Kubernetes OOMKilled"]:
        line = event.evidence.provenance.line or 0
        opened = [platform for at, platform in blocks.get(event.evidence.provenance.origin, []) if at <= line]
        if (opened and opened[-1]) or _PLATFORM_POD.match(event.evidence.text.strip()):
            ws.reread(event, _PLATFORM_OOM, "the OOMKilled container is the GPU platform's component, under its own "
                                            "memory limit")


_MPI_INIT_FAILED = "MPI could not initialise"


def _mpi_init_case(title: str, nodes: str, expect: Expect) -> RuleCase:
    """A rule case: Open MPI's MPI_Init abort banner on each of `nodes` (a two-node job, a and b)."""
    return RuleCase(title=title, evidence={f"{n}/applog": [
        "2025-01-01T00:10:32Z *** An error occurred in MPI_Init",
        f"2025-01-01T00:10:32Z [{n}:21881] Local abort before MPI_INIT completed completed successfully, but am not "
        "able to aggregate error messages, and not able to guarantee that all other processes were killed!"]
        for n in nodes}, context={"nodes": ["a", "b"]}, expect=expect)


@refiner("MpiInitFailedEverywhere", phase=Phase.REFINE_LATE, doc=f"""
`{_MPI_INIT_FAILED}` (Open MPI's abort banner for a failed MPI_Init, with no reason of its own) is the answer only
when every node of a multi-node workload printed it and nothing else went wrong: the library could not set itself up
anywhere it was launched - the launch or the environment. On some nodes only, the fault is those nodes' (unknown
from the banner), and beside another root candidate the banner is that fault's consequence: it is demoted.
""", cases=[
    # https://github.com/NVIDIA/pyxis/issues/78 (srun without --mpi=pmi2: every task aborts in MPI_Init)
    _mpi_init_case("every node's ranks abort in MPI_Init", "ab",
                   Expect(fired=False, sub_domain="configuration", root_symptom=_MPI_INIT_FAILED)),
    _mpi_init_case("one node's ranks abort in MPI_Init", "b", Expect(fired=True, demoted=[_MPI_INIT_FAILED])),
])
def mpi_init_failed_everywhere(ws: Workspace) -> None:
    banners = ws.active(prefix=_MPI_INIT_FAILED)
    if not banners:
        return
    everywhere = len(ws.context.nodes) >= 2 and {ws.canonical_node(s.node) for s in banners} >= set(ws.context.nodes)
    other = next((s for s in ws.active(role="root") if s.name != _MPI_INIT_FAILED), None)
    for s in banners:
        if other is not None:
            ws.demote(s, f"{other.name} on {other.node or '-'} is why MPI could not start")
        elif not everywhere:
            ws.demote(s, "only some nodes' ranks failed MPI_Init: the banner does not say what those nodes lack")


# Slurm's own errors for a message that never reached a node's slurmd or never came back (slurm_strerror).
_UNREACHED = re.compile(r"Communication (?:connection|send|receive) failure|Socket timed out on send/recv operation|"
                        r"Zero Bytes were transmitted or received")


@filter_rule("LaunchOnUnreachableNode", phase=Phase.FILTER, doc="""
A step launch that failed on a node because Slurm could not talk to that node's slurmd ('Task launch for StepId=...
failed on node <n>: Communication connection failure', 'Socket timed out on send/recv operation'): the request was
right and the node did not answer. It is read as `Slurm node failure` naming that node, not as a launch the job asked
for wrongly.
""", cases=[
    # https://github.com/NVIDIA-NeMo/RL/pull/1022 (a background srun of ray.sub dying on an unreachable node)
    RuleCase(title="the launch never reached the node", evidence={"a/applog": [
        "2025-01-01T00:01:00Z srun: error: Task launch for StepId=5341187.1 failed on node b: Communication connection "
        "failure"]}, context={"nodes": ["a", "b"]},
        expect=Expect(fired=True, sub_domain="scheduler", culprits=["b"])),
    RuleCase(title="a launch refused by the node", evidence={"a/applog": [
        "2025-01-01T00:01:00Z srun: error: Task launch for StepId=77.0 failed on node b: Invalid job credential"]},
        context={"nodes": ["a", "b", "c"]}, expect=Expect(fired=False, sub_domain="configuration", culprits=["b"])),
    RuleCase(title="a launch refused by every node", evidence={"a/applog": [
        f"2025-01-01T00:01:00Z srun: error: Task launch for StepId=77.0 failed on node {n}: Invalid job credential"
        for n in ("a", "b")]},
        context={"nodes": ["a", "b"]}, expect=Expect(fired=False, sub_domain="configuration", culprits=[])),
])
def launch_on_unreachable_node(ws: Workspace) -> None:
    for event in list(ws.events_of(EventType.NODE_BAD)):
        node = event.attributes.get("launch_node")
        if event.symptom == "Task launch failure" and node and _UNREACHED.search(str(event.attributes.get("launch_error"))):
            ws.reread(event, "Slurm node failure", f"Slurm could not reach {node}'s slurmd: the node did not answer",
                      {"blamed_node": str(node)})


@filter_rule("LaunchAfterTheJobWasKilled", phase=Phase.FILTER, doc="""
A step launch refused because the job's credential was revoked ('Task launch for StepId=... failed on node <n>: Job
credential revoked', ESLURMD_CREDENTIAL_REVOKED): a node's slurmd revokes a job's credential when slurmctld tells it to
end the job, so the launch came after the job was already being killed. slurmctld itself treats this error as the race
of a job's termination, not a real error (src/slurmctld/proc_req.c). The line is dropped: what ended the job is the
answer, not the step that arrived late. An expired or invalid credential (clocks, keys) is read as before.
""", cases=[
    RuleCase(title="a node failure, then the step's launch on the surviving node", evidence={
        "a/applog": ["2025-01-01T00:06:34Z srun: error: Task launch for StepId=314.0 failed on node a: Job credential "
                     "revoked"],
        "a/scheduler": ["[2025-01-01T00:06:34.016] Killing JobId=314 on failed node b"]},
        context={"nodes": ["a", "b"], "job_id": "314", "scheduler_state": "NODE_FAIL", "exit_code": "0:0"},
        expect=Expect(fired=True, culprits=["b"], absent=["Task launch failure"])),
    # https://github.com/c3nl-neuraldynamics/c3nl_cluster/issues/61 (a head node's clock ahead of its compute nodes)
    RuleCase(title="a credential expired by the clocks", evidence={"a/applog": [
        "2025-01-01T00:01:00Z srun: error: Task launch for 1443722.0 failed on node a: Job credential expired"]},
        context={"nodes": ["a"]}, expect=Expect(fired=False, root_symptom="Step launch refused: credential expired (node clock)")),
])
def launch_after_the_job_was_killed(ws: Workspace) -> None:
    for event in list(ws.events_of(EventType.NODE_BAD)):
        if event.symptom == "Task launch failure" and event.attributes.get("launch_error") == "Job credential revoked":
            ws.drop(event, "the job's credential was revoked: Slurm was already ending the job when this step arrived")


# What a recorded scheduler state says by itself (Slurm job states; Kubernetes mapped to the same vocabulary).
STATE_SYMPTOMS = {
    TerminalState.TIMEOUT: "Slurm time limit",
    TerminalState.PREEMPTED: "Slurm preemption",
    TerminalState.NODE_FAIL: "Slurm node failure",
    TerminalState.OUT_OF_MEMORY: "Slurm OOM kill",
    TerminalState.CANCELLED: "Job cancelled",
}
# The same states as Kubernetes (and Kueue) reach them: a Job past activeDeadlineSeconds, an eviction or preemption,
# a node lost, a container OOMKilled.
KUBERNETES_STATE_SYMPTOMS = {
    **STATE_SYMPTOMS,
    TerminalState.TIMEOUT: "Job deadline exceeded",
    TerminalState.PREEMPTED: "Kubernetes eviction",
    TerminalState.NODE_FAIL: "Kubernetes node failure",
    TerminalState.OUT_OF_MEMORY: "Kubernetes OOMKilled",
}
_SIGNAL_EXIT = re.compile(r"^\d+:(?P<signal>[1-9]\d*)$")


@filter_rule("SchedulerStateEvidence", phase=Phase.FILTER_EARLY, doc="""
The scheduler state and exit code recorded in the ExecutionContext are evidence too: TIMEOUT, PREEMPTED,
NODE_FAIL, OUT_OF_MEMORY and CANCELLED mean what the scheduler did (cited when no log line says more; a NODE_FAIL
blames the nodes the connector read as failed, `metadata.failed_nodes`), and an exit code with a signal (e.g. 0:9)
says the job was killed. They are timed at the job end, so any earlier fault
found in the logs wins over them.
""", cases=[
    RuleCase(title="timeout without logs", evidence={"n1/syslog": ["Jan  1 00:00:01 n1 systemd[1]: Started Session 1."]},
             context={"scheduler_state": "TIMEOUT", "exit_code": "0:0"},
             expect=Expect(fired=True, sub_domain="scheduler", terminal_state="TIMEOUT")),
    RuleCase(title="failed job", evidence={"n1/syslog": ["Jan  1 00:00:01 n1 systemd[1]: Started Session 1."]},
             context={"scheduler_state": "FAILED", "exit_code": "1:0"}, expect=Expect(fired=False, sub_domain="unknown")),
    RuleCase(title="Kueue names the failed node", evidence={"n1/syslog": ["Jan  1 00:00:01 n1 systemd[1]: Started Session 1."]},
             context={"scheduler": "kubernetes", "scheduler_state": "NODE_FAIL", "exit_code": "",
                      "nodes": ["n1", "n2"], "metadata": {"failed_nodes": "n2"}},
             expect=Expect(fired=True, sub_domain="scheduler", culprits=["n2"], terminal_state="NODE_FAIL")),
])
def scheduler_state_evidence(ws: Workspace) -> None:
    ctx = ws.context
    state = recorded_state(ctx)
    symptom = (KUBERNETES_STATE_SYMPTOMS if ctx.scheduler == "kubernetes" else STATE_SYMPTOMS).get(state)
    signal = _SIGNAL_EXIT.match(ctx.exit_code.strip())
    if symptom is None and signal:
        symptom = "Worker killed by signal"
    if symptom is None:
        return
    text = f"{ctx.scheduler} recorded the workload as {ctx.scheduler_state or 'unknown'}" + (
        f" with exit code {ctx.exit_code}" if ctx.exit_code else "")
    evidence = Evidence(source=SourceKind.SCHEDULER, node=None, time=ctx.end_time, text=text,
                        provenance=Provenance(origin="execution-context"))
    attributes = {"terminal_state": state.value} if state in STATE_SYMPTOMS else {}
    if signal:
        attributes["signal"] = signal.group("signal")
    # the nodes a scheduler connector read from the scheduler's own record of a node failure (Kueue's unhealthy nodes)
    failed = sorted({n.strip() for n in str(ctx.metadata.get("failed_nodes", "")).split(",") if n.strip()})
    values = {"blamed_node": failed} if state == TerminalState.NODE_FAIL and failed else {}
    ws.emit(EmitSpec(type=EventType.NODE_BAD, node=None, symptom=symptom, evidence=evidence, attributes=attributes,
                     values=values))


def _job_numbers(ctx: ExecutionContext) -> set[str]:
    """The job numbers this workload goes by: its id's leading number (123 of 123_4 or 123+0) and the scheduler's
    raw id when the context names one (an array task's own JobId)."""
    ids = {ctx.job_id, ctx.metadata.get("job_id_raw", "")}
    return {m.group(0) for m in (_JOB_NUMBER.match(i) for i in ids if i) if m}


_JOB_NUMBER = re.compile(r"\d+")


@filter_rule("OtherJobsRecords", phase=Phase.FILTER_EARLY, doc="""
A scheduler log (slurmctld's) records every job: a line that names another job by its JobId is about that job,
not this workload, and is dropped - a node that failed under another job, another job's time limit or kill
request. Lines that name no job (a node not responding) stay: they are about the node.
""", cases=[
    RuleCase(title="another job's node failure", evidence={"n1/scheduler": [
        "[2025-01-01T00:30:00.058] Killing JobId=999 on failed node n2"]},
        context={"job_id": "1234", "scheduler_state": "FAILED"}, expect=Expect(fired=True, culprits=[])),
    RuleCase(title="this job's node failure, after another job's in the same log", evidence={"n1/scheduler": [
        "[2025-01-01T00:20:00.058] Killing JobId=999 on failed node n2",
        "[2025-01-01T00:30:00.058] Killing JobId=1234 on failed node n2"]},
        context={"job_id": "1234", "scheduler_state": "NODE_FAIL", "nodes": ["n1", "n2"]},
        expect=Expect(fired=True, culprits=["n2"], terminal_state="NODE_FAIL")),
])
def other_jobs_records(ws: Workspace) -> None:
    mine = _job_numbers(ws.context)
    if not mine:
        return
    for event in list(ws.events):
        named = event.attributes.get("job_id")
        if named and str(named) not in mine:
            ws.drop(event, f"about JobId={named}, another job")
