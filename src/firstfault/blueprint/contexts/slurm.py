"""Slurm: finished jobs from accounting (`sacct`), with the files their stdout and stderr went to.

    --connector context slurm since 2h                       finished in the last two hours (every user)
    --connector context slurm jobs 4512345,4512346           these jobs, whenever they ran
    --connector context slurm since 1d states FAILED,NODE_FAIL,TIMEOUT users alice

`sacct --json` is read in both layouts: Slurm 22.05 (`openapi/dbv0.0.38`: `state.current` a string) and newer
data_parser versions (`state.current` a list, numbers as `{set, infinite, number}`). 22.05's JSON reports exit
codes wrongly (0 for a batch script that exited 3), so with that layout they come from `sacct -P` and
`scontrol` instead. `format text` uses `sacct -P` only. Node lists are expanded (`gpu[01-04,07]`); an array task
is `123_4`; the components of a heterogeneous job (`123+0`, `123+1`) form one workload; each requeued run
(`sacct -D`) is an attempt of its own.

A batch job's output paths come from its `--output`/`--error` patterns (contexts/slurm_output.py): sacct's own
where it records them (24.05 and later), else what slurmctld holds until `MinJobAge` after the end (`squeue`),
kept in the results database by every pass so a later one finds them. A path that cannot be had is named per
attempt in `Discovery.unresolved`. The batch host is the batch step's node in accounting.
"""

from __future__ import annotations

import json
import re
import subprocess
from collections import defaultdict
from collections.abc import Iterable
from dataclasses import dataclass, field, replace
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any

import hostlist

from firstfault.blueprint.base import Discovery
from firstfault.blueprint.config import ConnectorSpec
from firstfault.blueprint.contexts.slurm_output import (
    NEW_EXPANSION,
    SACCT_PATTERNS,
    SEP,
    Index,
    LiveJob,
    OutputStore,
    PatternJob,
    Version,
    expand,
    index,
    local_time,
    match,
    parse_squeue,
    parse_version,
    squeue_format,
)
from firstfault.blueprint.options import LabelOptions, option, parse_options
from firstfault.engine import ExecutionContext
from firstfault.errors import FirstfaultError, SlurmError
from firstfault.timeinput import parse_time

FINISHED = frozenset({"COMPLETED", "FAILED", "TIMEOUT", "CANCELLED", "NODE_FAIL", "OUT_OF_MEMORY", "PREEMPTED",
                      "BOOT_FAIL", "DEADLINE", "REQUEUED", "REVOKED", "SPECIAL_EXIT"})
TEXT_FIELDS = ("JobID", "JobIDRaw", "JobName", "User", "Partition", "State", "ExitCode", "DerivedExitCode",
               "Start", "End", "NodeList", "Reason", "WorkDir", "Cluster", "Submit")
PATTERN_FIELDS = ("StdOut", "StdErr")   # sacct 24.05 and later
_SCONTROL_KEY = re.compile(r"\s(?=[A-Za-z][\w:/]*=)")
_HOST_FIELD = re.compile(r"%\d*N")
_EPOCH = datetime(1970, 1, 1, tzinfo=timezone.utc)


@dataclass
class JobRecord:
    """One row of accounting: one run of one job (or of one array task or het component)."""

    job_id: str
    raw_id: str
    name: str = ""
    user: str = ""
    partition: str = ""
    cluster: str = ""
    state: str = ""
    state_raw: str = ""
    reason: str = ""
    exit_code: str = ""
    derived_exit_code: str = ""
    start: datetime | None = None
    end: datetime | None = None
    nodes: list[str] = field(default_factory=list)
    work_dir: str = ""
    stdout: str = ""            # the files (expanded), "" when not known or none
    stderr: str = ""
    het_job_id: str = ""
    submit: datetime | None = None
    array_job_id: str = ""      # "" unless an array task
    array_task_id: str = ""
    stdout_pattern: str | None = None   # as submitted; None: accounting has no such field
    stderr_pattern: str | None = None
    batch: bool | None = None   # a batch job (None: not known)
    batch_host: str = ""

    @property
    def started(self) -> bool:
        return self.start is not None and bool(self.nodes)

    @property
    def finished(self) -> bool:
        return self.state in FINISHED and self.end is not None


def expand_nodes(text: str) -> list[str]:
    """`gpu[01-04,07]` as node names (SlurmError for a list that is not one, or more than 100,000 names)."""
    text = text.strip()
    if not text or text in ("None assigned", "(null)", "None"):
        return []
    try:
        return list(hostlist.expand_hostlist(text))
    except hostlist.BadHostlist as exc:
        raise SlurmError(f"node list {text[:200]!r}: {exc}") from None


def base_state(text: str) -> str:
    """`CANCELLED by 1234` -> `CANCELLED`."""
    return text.split()[0] if text.split() else ""


def _epoch(value: Any) -> datetime | None:
    number = _number(value)
    return _EPOCH + timedelta(seconds=number) if number else None


def _number(value: Any) -> int | None:
    """A plain number (22.05) or `{set, infinite, number}` (newer data_parser)."""
    if isinstance(value, dict):
        return int(value["number"]) if value.get("set") and not value.get("infinite") else None
    return None if value is None else int(value)


def _skip(problems: list[str] | None, message: str) -> None:
    """A record that cannot be read: reported in `problems` and skipped, or, without that list, SlurmError."""
    if problems is None:
        raise SlurmError(message)
    problems.append(message)


def parse_sacct_text(text: str, problems: list[str] | None = None,
                     fields: tuple[str, ...] = TEXT_FIELDS) -> list[JobRecord]:
    """Rows of `sacct -X -D -P -n --delimiter=<SEP> -o <fields>` (TEXT_FIELDS, and PATTERN_FIELDS where sacct has
    them). A row that cannot be read is a SlurmError, or, given a `problems` list, is skipped and described there."""
    records = []
    for line in text.splitlines():
        if not line.strip():
            continue
        cols = line.split(SEP)
        if len(cols) != len(fields):
            _skip(problems, f"sacct -P: expected {len(fields)} fields, got {len(cols)}: {line[:200]!r}")
            continue
        row = dict(zip(fields, cols, strict=True))
        het = row["JobID"].split("+", 1)[0] if "+" in row["JobID"] else ""
        array, _, task = row["JobID"].partition("_")
        try:
            records.append(JobRecord(
                job_id=row["JobID"], raw_id=row["JobIDRaw"], name=row["JobName"], user=row["User"],
                partition=row["Partition"], cluster=row["Cluster"], state=base_state(row["State"]),
                state_raw=row["State"], reason=row["Reason"], exit_code=row["ExitCode"],
                derived_exit_code=row["DerivedExitCode"], start=local_time(row["Start"]),
                end=local_time(row["End"]), nodes=expand_nodes(row["NodeList"]), work_dir=row["WorkDir"],
                het_job_id=het, submit=local_time(row["Submit"]), array_job_id=array if task else "",
                array_task_id=task, stdout_pattern=row.get("StdOut"), stderr_pattern=row.get("StdErr")))
        except (SlurmError, ValueError, OverflowError) as exc:
            _skip(problems, f"sacct -P: job {row['JobID'][:100]!r}: {exc}")
    return records


def _json_exit_code(value: dict[str, Any] | None) -> str:
    if not value:
        return ""
    signal = value.get("signal") or {}
    sig = signal.get("signal_id") if "signal_id" in signal else _number(signal.get("id"))
    return f"{_number(value.get('return_code')) or 0}:{sig or 0}"


def _json_job_id(job: dict[str, Any]) -> tuple[str, str]:
    """(display id, het job id): `123_4` for array tasks, `123+1` for het components."""
    raw = str(job["job_id"])
    array, het = job.get("array") or {}, job.get("het") or {}
    task = _number(array.get("task_id"))
    if _number(array.get("job_id")) and task is not None:
        return f"{_number(array['job_id'])}_{task}", ""
    offset = _number(het.get("job_offset"))
    if _number(het.get("job_id")) and offset is not None:
        return f"{_number(het['job_id'])}+{offset}", str(_number(het["job_id"]))
    return raw, ""


def _json_batch_step(job: dict[str, Any]) -> tuple[bool | None, str]:
    """(is a batch job, the node of its batch step) from the job's steps; (None, "") when it has none."""
    steps = job.get("steps") or []
    if not isinstance(steps, list) or not steps:
        return None, ""
    for step in steps:
        info = step.get("step") or {}
        if info.get("name") == "batch" or str(info.get("id", "")).endswith("batch"):
            return True, _text((step.get("nodes") or {}).get("range"))
    return False, ""


def parse_sacct_json(doc: Any, problems: list[str] | None = None) -> tuple[list[JobRecord], bool]:
    """Records of `sacct --json`, and whether the layout is 22.05's (whose exit codes must not be trusted).
    A job that cannot be read is a SlurmError, or, given a `problems` list, is skipped and described there."""
    jobs = doc.get("jobs", []) if isinstance(doc, dict) else None
    if not isinstance(jobs, list):
        raise SlurmError(f"sacct --json: no list of jobs in {str(doc)[:200]}")
    records: list[JobRecord] = []
    old_layout = False
    for job in jobs:
        try:
            record, old = _json_record(job)
        except (SlurmError, KeyError, TypeError, ValueError, AttributeError, OverflowError) as exc:
            job_id = job.get("job_id") if isinstance(job, dict) else None
            _skip(problems, f"sacct --json: job {str(job_id)[:100]!r}: {exc.__class__.__name__}: {exc}")
            continue
        records.append(record)
        old_layout = old_layout or old
    return records, old_layout


def _json_record(job: dict[str, Any]) -> tuple[JobRecord, bool]:
    """One job of `sacct --json`, and whether it is in 22.05's layout."""
    if not isinstance(job, dict):
        raise SlurmError(f"not a job object: {str(job)[:100]}")
    state = (job.get("state") or {}).get("current", "")
    old_layout = isinstance(state, str)
    flags = [_text(state)] if old_layout else [_text(f) for f in state]
    job_id, het = _json_job_id(job)
    main = next((f for f in flags if f in FINISHED), flags[0] if flags else "")
    times = job.get("time") or {}
    array, _, task = job_id.partition("_")
    batch, batch_host = _json_batch_step(job)
    record = JobRecord(
        job_id=job_id, raw_id=str(job["job_id"]), name=_text(job.get("name")), user=_text(job.get("user")),
        partition=_text(job.get("partition")), cluster=_text(job.get("cluster")), state=main,
        state_raw=" ".join(flags), reason=_text((job.get("state") or {}).get("reason")),
        exit_code=_json_exit_code(job.get("exit_code")),
        derived_exit_code=_json_exit_code(job.get("derived_exit_code")),
        start=_epoch(times.get("start")), end=_epoch(times.get("end")),
        nodes=expand_nodes(_text(job.get("nodes"))),
        work_dir=_text(job.get("working_directory")) or _text(job.get("current_working_directory")),
        het_job_id=het, submit=_epoch(times.get("submission")), array_job_id=array if task else "",
        array_task_id=task, stdout_pattern=_text(job["stdout"]) if "stdout" in job else None,
        stderr_pattern=_text(job["stderr"]) if "stderr" in job else None, batch=batch, batch_host=batch_host)
    return record, old_layout


def _text(value: Any) -> str:
    """A string field of sacct's JSON ("" when absent); anything else is not a record this parser can read."""
    if value is None:
        return ""
    if not isinstance(value, str):
        raise SlurmError(f"expected a string, got {str(value)[:100]}")
    return value


def parse_scontrol(text: str, key: str = "JobId") -> dict[str, dict[str, str]]:
    """`scontrol show job|node -o` lines as {<key>: {field: value}}."""
    items: dict[str, dict[str, str]] = {}
    for line in text.splitlines():
        if f"{key}=" not in line:
            continue
        fields = dict(part.split("=", 1) for part in _SCONTROL_KEY.split(line.strip()) if "=" in part)
        if key in fields:
            items[fields[key]] = fields
    return items


def _attempts(records: Iterable[JobRecord]) -> dict[str, list[JobRecord]]:
    """Runs per job id, oldest first (requeues repeat the id)."""
    runs: dict[str, list[JobRecord]] = defaultdict(list)
    for record in records:
        runs[record.job_id].append(record)
    for group in runs.values():
        group.sort(key=lambda r: r.start or r.end or _EPOCH)
    return runs


def _het_runs(components: Iterable[JobRecord]) -> list[list[JobRecord]]:
    """Het components grouped per run: the k-th run of every component of a job belongs to run k."""
    groups: dict[tuple[str, int], list[JobRecord]] = defaultdict(list)
    seen: dict[str, int] = defaultdict(int)
    for record in sorted(components, key=lambda r: r.start or r.end or _EPOCH):
        groups[(record.het_job_id, seen[record.job_id])].append(record)
        seen[record.job_id] += 1
    return list(groups.values())


def merge_het(components: list[JobRecord]) -> JobRecord:
    """One record for a heterogeneous job: its nodes, its span, and the first component that did not complete."""
    components = sorted(components, key=lambda r: int(r.job_id.split("+", 1)[1]))
    first = components[0]
    worst = next((c for c in components if c.state != "COMPLETED"), first)
    nodes = list(dict.fromkeys(n for c in components for n in c.nodes))
    starts = [c.start for c in components if c.start]
    ends = [c.end for c in components if c.end]
    return replace(first, job_id=first.het_job_id, nodes=nodes, state=worst.state, state_raw=worst.state_raw,
                   reason=worst.reason, exit_code=worst.exit_code, start=min(starts, default=None),
                   end=max(ends, default=None))


def to_context(record: JobRecord, attempt: int) -> ExecutionContext:
    metadata = {"cluster": record.cluster, "user": record.user, "partition": record.partition, "job_id_raw": record.raw_id,
                "state_raw": record.state_raw, "reason": record.reason, "work_dir": record.work_dir,
                "stdout": record.stdout, "stderr": record.stderr, "derived_exit_code": record.derived_exit_code,
                "batch_host": record.batch_host}
    return ExecutionContext(
        workload_id=f"slurm:{record.cluster or 'default'}:{record.job_id}", attempt=attempt, scheduler="slurm",
        job_id=record.job_id, name=record.name, nodes=record.nodes, start_time=record.start, end_time=record.end,
        scheduler_state=record.state, exit_code=record.exit_code,
        metadata={k: v for k, v in metadata.items() if v})


@dataclass(frozen=True)
class SlurmOptions(LabelOptions):
    jobs: tuple[str, ...] = option((), "job ids; when given, the time options are ignored", split=True)
    since: str = option("1d", "finished after this time (ISO 8601 or a duration ago)", kind="time")
    until: str | None = option(None, "and before this one", shown="`now`", kind="time")
    users: tuple[str, ...] = option((), "restrict to these users", shown="every user", split=True)
    partitions: tuple[str, ...] = option((), "restrict to these partitions", shown="all", split=True)
    states: tuple[str, ...] = option((), "e.g. `FAILED,NODE_FAIL,TIMEOUT,OUT_OF_MEMORY`",
                                     shown="every finished state", split=True)
    format: str = option("json", "`json` (`sacct --json`, exit codes fixed up on 22.05) or `text` (`sacct -P` only)",
                         choices=["json", "text"])
    lookback: timedelta = option(timedelta(minutes=15), "in watch mode each pass starts this long before the "
                                                        "previous one (accounting lags)")
    database: str | None = option(None, "the SQLite database that keeps the output paths of the jobs slurmctld "
                                        "holds, for later passes (sacct before 24.05 has none)",
                                  shown="the `output db sqlite` database, if one is declared")
    keep_output_paths: timedelta = option(timedelta(days=30), "how long a job's output paths are kept in that "
                                                              "database after a pass last saw it in slurmctld")
    sacct: str = option("sacct", "the command to run (e.g. a wrapper that adds `-M cluster`)")
    squeue: str = option("squeue", "the command to run (the output paths of the jobs slurmctld holds)")
    scontrol: str = option("scontrol", "the command to run (`show node`: the host name `%N` stands for)")
    timeout: timedelta = option(timedelta(seconds=120), "per command")


class SlurmContexts:
    kind = "context"
    Options = SlurmOptions

    def __init__(self, spec: ConnectorSpec) -> None:
        options = parse_options(SlurmOptions, spec)
        self.label = options.label or spec.name
        self.jobs = list(options.jobs)
        self.since = options.since
        self.until = options.until
        self.users = list(options.users)
        self.partitions = list(options.partitions)
        self.states = {s.upper() for s in options.states}
        self.format = options.format
        self.lookback = options.lookback
        self.database = Path(options.database).expanduser() if options.database else None
        self.keep_output_paths = options.keep_output_paths
        self.sacct = options.sacct
        self.squeue = options.squeue
        self.scontrol = options.scontrol
        self.timeout = options.timeout.total_seconds()
        self._last_pass: datetime | None = None
        self._sacct_version: Version | None = None
        self.version: Version | None = None    # of the last pass's sacct (None: not known)

    # -- commands ---------------------------------------------------------------------------------------
    def run(self, argv: list[str]) -> str:
        try:
            done = subprocess.run(argv, capture_output=True, text=True, timeout=self.timeout, check=False)
        except (OSError, subprocess.TimeoutExpired) as exc:
            raise SlurmError(f"{argv[0]}: {exc}") from None
        if done.returncode != 0:
            raise SlurmError(f"{' '.join(argv)}: exit {done.returncode}: {done.stderr.strip()[:500]}")
        return done.stdout

    def _selection(self, now: datetime) -> list[str]:
        args = ["-D"]
        if self.jobs:
            return args + ["-j", ",".join(self.jobs)]
        since = parse_time(self.since, now)
        if self._last_pass is not None:   # watch mode: from the previous pass, minus accounting lag
            since = max(since, self._last_pass - self.lookback)
        until = parse_time(self.until, now) if self.until else now
        args += ["-S", _sacct_time(since), "-E", _sacct_time(until)]
        args += ["-u", ",".join(self.users)] if self.users else ["--allusers"]
        if self.partitions:
            args += ["-r", ",".join(self.partitions)]
        return args

    def _command_version(self) -> Version | None:
        """`sacct --version`, asked once (None while it cannot be read)."""
        if self._sacct_version is None:
            try:
                self._sacct_version = parse_version(self.run([self.sacct, "--version"]))
            except SlurmError:
                return None
        return self._sacct_version

    def _text_records(self, selection: list[str], version: Version | None,
                      problems: list[str] | None = None) -> list[JobRecord]:
        fields = TEXT_FIELDS + (PATTERN_FIELDS if version and version >= SACCT_PATTERNS else ())
        out = self.run([self.sacct, "-X", "-P", "-n", f"--delimiter={SEP}", "-o", ",".join(fields), *selection])
        return parse_sacct_text(out, problems, fields)

    def records(self, now: datetime | None = None, problems: list[str] | None = None) -> list[JobRecord]:
        """Accounting records of the selection; with a `problems` list, records that cannot be read are
        described there and skipped instead of failing the pass."""
        now = now or datetime.now(timezone.utc)
        selection = self._selection(now)
        if self.format == "text":
            self.version = self._command_version()
            records = self._text_records(selection, self.version, problems)
            self._batch_steps(records, problems)
        else:
            try:
                doc = json.loads(self.run([self.sacct, "--json", *selection]))
            except (json.JSONDecodeError, RecursionError) as exc:
                raise SlurmError(f"sacct --json: not JSON: {exc}") from None
            records, old_layout = parse_sacct_json(doc, problems)
            self.version = _json_version(doc) or self._command_version()
            if old_layout:
                _take_exit_codes(records, self._text_records(selection, self.version, []))
        self._last_pass = now
        return records

    def _batch_steps(self, records: list[JobRecord], problems: list[str] | None) -> None:
        """`sacct -P` has no steps: which started jobs ran a batch script, and on which node (`<id>.batch`)."""
        ids = sorted({r.raw_id for r in records if r.started})
        if not ids:
            return
        try:
            out = self.run([self.sacct, "-D", "-P", "-n", f"--delimiter={SEP}", "-o", "JobIDRaw,NodeList",
                             "-j", ",".join(ids)])
        except SlurmError as exc:
            if problems is not None:
                problems.append(f"the batch steps could not be read: {exc}")
            return
        hosts = {row[0].removesuffix(".batch"): row[1] for row in (line.split(SEP) for line in out.splitlines())
                 if len(row) == 2 and row[0].endswith(".batch")}
        for record in records:
            if record.started:
                record.batch, record.batch_host = record.raw_id in hosts, hosts.get(record.raw_id, "")

    # -- discovery --------------------------------------------------------------------------------------
    def discover(self) -> Discovery:
        found = Discovery()
        now = datetime.now(timezone.utc)
        records = [r for r in self.records(now, problems=found.problems)
                   if r.finished and (not self.states or r.state in self.states)]
        singles = [r for r in records if not r.het_job_id]
        merged = singles + [merge_het(group) for group in _het_runs(r for r in records if r.het_job_id)]
        groups = dict(sorted(_attempts(merged).items()))
        outputs = OutputPaths(self, found.problems, merged)
        for job_id, runs in groups.items():
            for attempt, record in enumerate(runs):
                why = outputs.resolve(record, attempt, runs)
                try:
                    ctx = to_context(record, attempt)
                except ValueError as exc:
                    found.problems.append(f"job {job_id}: {exc}")
                    continue
                found.contexts.append(ctx)
                if why:
                    found.unresolved[(ctx.workload_id, attempt)] = f"job {record.job_id} ({record.name}): {why}"
        outputs.keep(now)
        return found


class OutputPaths:
    """One pass's resolution of output paths of `records`: from accounting, else from what slurmctld holds
    (`squeue`, read once), else from what earlier passes kept in the database (read once)."""

    def __init__(self, slurm: SlurmContexts, problems: list[str], records: list[JobRecord]) -> None:
        self.slurm = slurm
        self.problems = problems
        self.version = slurm.version or (0, 0)
        self.store = OutputStore(slurm.database, slurm.keep_output_paths) if slurm.database else None
        self.wanting = [r for r in records if r.started and r.batch is not False and not r.stdout_pattern]
        self._live: list[LiveJob] | None = None
        self._live_index: Index | None = None
        self._stored: Index | None = None
        self._hosts: dict[str, str] | None = None

    def resolve(self, record: JobRecord, attempt: int, runs: list[JobRecord]) -> str:
        """Set the run's `stdout`, `stderr` (and `batch_host` when accounting lacks it); why they are not known
        ("" when they are, or when the run has no output file: it never started, or was not a batch job)."""
        if not record.started or record.batch is False:
            return ""
        patterns = (record.stdout_pattern, record.stderr_pattern or "") if record.stdout_pattern else None
        if patterns is None:
            seen = self._seen(record, {r.submit for r in runs if r.submit})
            if seen is None:
                return self._missing()
            record.batch_host = record.batch_host or seen.batch_host
            if not seen.batch:
                return ""
            patterns = (seen.stdout, seen.stderr)
        job = PatternJob(job_id=record.raw_id, array_job_id=record.array_job_id, array_task_id=record.array_task_id,
                         user=record.user, name=record.name, work_dir=record.work_dir,
                         host=self._host(record, patterns), restart_count=attempt)
        try:
            record.stdout = expand(patterns[0], job, self.version)
            record.stderr = expand(patterns[1], job, self.version) if patterns[1] else record.stdout
        except SlurmError as exc:
            return f"its output path cannot be expanded: {exc}"
        return ""

    def _seen(self, record: JobRecord, submits: set[datetime]) -> LiveJob | None:
        if self._live_index is None:
            self._live_index = index(self.live())
        found = match(self._live_index, record.raw_id, record.array_job_id, submits, record.user)
        if found is None and self.store is not None:
            found = match(self._stored_rows(), record.raw_id, record.array_job_id, submits, record.user)
        return found

    def live(self) -> list[LiveJob]:
        """The jobs slurmctld holds (read once a pass); a failure is a problem of the pass."""
        if self._live is None:
            self._live = []
            try:
                self._live = parse_squeue(self.slurm.run(
                    [self.slurm.squeue, "--all", "--states=all", "-h", "-O", squeue_format()]))
            except SlurmError as exc:
                self.problems.append(f"the output paths slurmctld holds could not be read: {exc}")
        return self._live

    def _stored_rows(self) -> Index:
        """The rows kept for every record that needs them, read at once."""
        assert self.store is not None
        if self._stored is None:
            self._stored = {}
            try:
                self._stored = index(self.store.find(
                    {i for r in self.wanting for i in (r.raw_id, r.array_job_id) if i}))
            except FirstfaultError as exc:
                self.problems.append(f"the output paths kept in {self.store.path} could not be read: {exc}")
        return self._stored

    def keep(self, now: datetime) -> None:
        """Keep what slurmctld holds for later passes, where sacct does not record output paths."""
        if self.store is None or self.version >= SACCT_PATTERNS:
            return
        try:
            self.store.save(self.live(), now)
        except FirstfaultError as exc:
            self.problems.append(f"the output paths could not be kept in {self.store.path}: {exc}")

    def _missing(self) -> str:
        if self.version >= SACCT_PATTERNS:
            why = "sacct recorded no output path (AccountingStoreFlags=no_stdio?)"
        else:
            why = "sacct records no output paths before Slurm 24.05"
        why += " and slurmctld no longer holds the job (MinJobAge)"
        if self.store is None:
            return f"stdout path unknown: {why}; declare `output db sqlite` so that passes keep the paths they see"
        return f"stdout path unknown: {why}, and no pass saw it while it did"

    def _host(self, record: JobRecord, patterns: tuple[str, str]) -> str | None:
        """What %N stands for: the batch node's name (25.11 and later) or its short host name (before)."""
        if not record.batch_host or not any(_HOST_FIELD.search(p) for p in patterns):
            return None
        if self.version >= NEW_EXPANSION:
            return record.batch_host
        if self._hosts is None:
            try:
                nodes = parse_scontrol(self.slurm.run([self.slurm.scontrol, "show", "node", "-o"]), "NodeName")
                self._hosts = {name: info.get("NodeHostName", "") for name, info in nodes.items()}
            except SlurmError:
                self._hosts = {}
        host = self._hosts.get(record.batch_host, "")
        return host.split(".", 1)[0] or None


def _json_version(doc: dict[str, Any]) -> Version | None:
    """The release in `sacct --json`'s meta (`Slurm` in 22.05, `slurm` later)."""
    meta = doc.get("meta") or {}
    version = (meta.get("slurm") or meta.get("Slurm") or {}).get("version") or {}
    try:
        return int(version["major"]), int(version["minor"])
    except (KeyError, TypeError, ValueError):
        return None


def _take_exit_codes(records: list[JobRecord], text_records: list[JobRecord]) -> None:
    """Slurm 22.05 JSON: keep its signals, take the exit status from `sacct -P` (matched by id and start)."""
    codes = {(r.raw_id, r.start): r.exit_code for r in text_records}
    derived = {(r.raw_id, r.start): r.derived_exit_code for r in text_records}
    for record in records:
        key = (record.raw_id, record.start)
        if key in codes:
            record.exit_code = codes[key]
            record.derived_exit_code = derived[key]


def _sacct_time(value: datetime) -> str:
    """sacct reads zone-less local times."""
    return value.astimezone().strftime("%Y-%m-%dT%H:%M:%S")
