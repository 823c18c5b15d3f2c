"""Where a Slurm batch job wrote its stdout and stderr: its `sbatch --output/--error` patterns, expanded.

The patterns come from accounting where it has them (`sacct` `StdOut`/`StdErr`, JSON `stdout`/`stderr`: Slurm
24.05 and later), else from what slurmctld holds (`squeue --states=all`, until `MinJobAge` after the end), which
`OutputStore` keeps in the results database so a later pass still finds them (docs/blueprint.md, "Job output
paths").

A pattern is expanded the way slurmstepd names the batch script's files (sbatch(1), "filename pattern"; the
release differences below are from Slurm's source and were checked against the real 22.05):

- `%%` is `%`; `%j` and `%J` the job id (the batch step has no step id); `%A` the array's job id (a job that is
  not an array task: its own id); `%a` the array task id (not an array task: 4294967294, Slurm's NO_VAL, as
  slurmstepd prints it); `%b` (24.11 and later) the task id modulo 10; `%n` and `%t` 0 (the batch script is node 0,
  task 0); `%s` `batch`; `%u` the user; `%x` the job name; `%N` the short host name of the node that ran the
  batch script (before 25.11 slurmd's own host name, found as the node's `NodeHostName`; from 25.11 the node
  name); `%r` (25.11 and later) the restart count: the run's attempt number.
- A number between `%` and the letter zero-pads a numeric value to that width (at most 10).
- Not expandable: `%S` (25.11 and later: the job's SLUID, which accounting does not give), and `%N` when the
  node's host name cannot be had. Such a job's path is reported unresolved.
- A pattern with a backslash is not expanded at all: before 25.11 `\\\\` is one backslash and a single one is
  dropped; from 25.11 every backslash is dropped.
- Any other letter is not a replacement: before 25.11 slurmstepd drops the `%` and all but the last digit of a
  width (`%5q` -> `5q`, `%12q` -> `2q`) and keeps a trailing `%`; from 25.11 `%5q` stays and a trailing `%` goes.
- A relative pattern is under the job's working directory; `/dev/null` is no file.
"""

from __future__ import annotations

import re
import sqlite3
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import datetime, timedelta, timezone
from pathlib import Path

from firstfault.blueprint.outputs.sqlite import connect
from firstfault.errors import DatabaseError, SlurmError

Version = tuple[int, int]
# the first release with sacct's StdOut/StdErr fields (and sacct --json's stdout/stderr)
SACCT_PATTERNS = (24, 5)
NO_VAL = 4294967294
MAX_WIDTH = 10
_TOKEN = re.compile(r"%(\d*)(.?)", re.S)
_NUMERIC = frozenset("AabJjnrt")
_LETTERS: list[tuple[Version, frozenset[str]]] = [
    ((25, 11), frozenset("AabJjNnrSstux")), ((24, 11), frozenset("AabJjNnstux")), ((0, 0), frozenset("AaJjNnstux"))]
NEW_EXPANSION = (25, 11)   # slurmstepd uses the common expansion (node name for %N, unknown letters kept)


@dataclass(frozen=True)
class PatternJob:
    """What a pattern can name: from the job's accounting record."""

    job_id: str                 # the raw id (an array task's own id)
    array_job_id: str = ""      # "" unless an array task
    array_task_id: str = ""
    user: str = ""
    name: str = ""
    work_dir: str = ""
    host: str | None = None     # what %N stands for; None: not known
    restart_count: int | None = None


def letters(version: Version) -> frozenset[str]:
    return next(chars for since, chars in _LETTERS if version >= since)


def expand(pattern: str, job: PatternJob, version: Version) -> str:
    """The file a batch job's output pattern names ("" for /dev/null); SlurmError when it cannot be expanded."""
    text = _unescaped(pattern, version) if "\\" in pattern else _expanded(pattern, job, version)
    if text == "/dev/null":
        return ""
    if text.startswith("/"):
        return text
    if not job.work_dir:
        raise SlurmError(f"the pattern {pattern!r} is relative and the job's working directory is not known")
    return f"{job.work_dir.rstrip('/')}/{text}"


def _unescaped(pattern: str, version: Version) -> str:
    if version >= NEW_EXPANSION:
        return pattern.replace("\\", "")
    return re.sub(r"\\(\\?)", r"\1", pattern)


def _expanded(pattern: str, job: PatternJob, version: Version) -> str:
    known = letters(version)
    new = version >= NEW_EXPANSION
    out: list[str] = []
    i = 0
    while i < len(pattern):
        if pattern[i] != "%":
            j = pattern.find("%", i)
            j = len(pattern) if j < 0 else j
            out.append(pattern[i:j])
            i = j
            continue
        token = _TOKEN.match(pattern, i)
        assert token is not None   # `%` then anything matches
        digits, letter = token.groups()
        if letter == "%" and not digits:
            out.append("%")
        elif letter in known and letter:
            out.append(_value(letter, min(int(digits or 0), MAX_WIDTH), job, pattern))
        elif new:
            out.append(token.group(0) if letter or digits else "")
        else:
            out.append(digits[-1:] or "%")
            i = token.end() - len(letter)   # slurmstepd reads on from the letter
            continue
        i = token.end()
    return "".join(out)


def _value(letter: str, width: int, job: PatternJob, pattern: str) -> str:
    if letter in _NUMERIC:
        return f"{_number(letter, job, pattern):0{width}d}"
    if letter == "N":
        if job.host is None:
            raise SlurmError(f"%N in {pattern!r}: the host name of the node that ran the batch script is not known")
        return job.host
    if letter == "S":
        raise SlurmError(f"%S in {pattern!r}: the job's SLUID is not in its accounting record")
    return {"s": "batch", "u": job.user, "x": job.name}[letter]


def _number(letter: str, job: PatternJob, pattern: str) -> int:
    if letter == "r":
        if job.restart_count is None:
            raise SlurmError(f"%r in {pattern!r}: the job's restart count is not known")
        return job.restart_count
    value = {"A": job.array_job_id or job.job_id, "J": job.job_id, "j": job.job_id, "a": job.array_task_id,
             "b": job.array_task_id}.get(letter)
    if value is None:
        return 0   # %n, %t: node 0, task 0
    if not (value.isascii() and value.isdigit()):
        if letter in "ab" and not value:
            return NO_VAL if letter == "a" else NO_VAL % 10
        raise SlurmError(f"%{letter} in {pattern!r}: the job's id {value!r} is not a number")
    return int(value) % 10 if letter == "b" else int(value)


def parse_version(text: str) -> Version | None:
    """`slurm-wlm 22.05.8`, `slurm 24.11.5` -> (22, 5), (24, 11)."""
    found = re.search(r"(\d+)\.(\d+)", text)
    return (int(found.group(1)), int(found.group(2))) if found else None


# -- what slurmctld holds: squeue --------------------------------------------------------------------------------
SEP = "\x1f"   # the field separator asked of squeue and sacct: no path or job name holds it
SQUEUE_FIELDS = ("JobID", "ArrayJobID", "ArrayTaskID", "BatchFlag", "BatchHost", "SubmitTime", "UserName",
                 "WorkDir", "STDOUT", "STDERR")


@dataclass(frozen=True)
class LiveJob:
    """A job slurmctld holds, with its output patterns as submitted."""

    job_id: str
    array_job_id: str       # "" unless an array (a pending array's one line included)
    submit: datetime
    user: str
    batch: bool
    batch_host: str
    stdout: str
    stderr: str


def squeue_format() -> str:
    return ",".join(f"{name}:{SEP}" for name in SQUEUE_FIELDS)


def local_time(text: str) -> datetime | None:
    """Slurm's commands print local times without a zone."""
    if text in ("", "Unknown", "None", "N/A"):
        return None
    return datetime.fromisoformat(text).astimezone(timezone.utc)


def parse_squeue(text: str) -> list[LiveJob]:
    """Lines of `squeue -h -O <squeue_format()>` (a line that is not one is skipped). squeue prints
    `<WorkDir>/slurm-<JobID>.out` for a job submitted without `--output`: right but for an array, whose default
    is `slurm-%A_%a.out`."""
    jobs = []
    for line in text.splitlines():
        cols = line.split(SEP)
        if len(cols) < len(SQUEUE_FIELDS):
            continue
        row = dict(zip(SQUEUE_FIELDS, cols, strict=False))
        try:
            submit = local_time(row["SubmitTime"])
        except ValueError:
            continue
        if submit is None:
            continue
        array = row["ArrayJobID"] if row["ArrayTaskID"] not in ("", "N/A") else ""
        stdout, stderr = row["STDOUT"], row["STDERR"]
        default = f"{row['WorkDir'].rstrip('/')}/slurm-{row['JobID']}.out"
        if array and stdout == default:
            stdout = "slurm-%A_%a.out"
            stderr = "" if stderr == default else stderr
        jobs.append(LiveJob(
            job_id=row["JobID"], array_job_id=array, submit=submit, user=row["UserName"],
            batch=row["BatchFlag"] == "1", batch_host=row["BatchHost"] if row["BatchFlag"] == "1" else "",
            stdout=_given(stdout), stderr="" if stderr == stdout else _given(stderr)))
    return jobs


def _given(value: str) -> str:
    return "" if value in ("N/A", "(null)") else value


# -- kept in the results database --------------------------------------------------------------------------------
class OutputStore:
    """The output patterns of the jobs a pass saw in slurmctld, in the results database (`slurm_job_output`), so a
    later pass finds them after slurmctld forgot the job. A row is found again by the job's id (or its array's)
    with the same submit time (a requeued job is submitted anew) and user; rows not seen for `keep` are dropped."""

    def __init__(self, path: Path, keep: timedelta) -> None:
        self.path = path
        self.keep = keep

    @contextmanager
    def _open(self) -> Iterator[sqlite3.Connection]:
        db = connect(self.path)
        try:
            yield db
        except sqlite3.Error as exc:
            raise DatabaseError(f"{self.path}: {exc}") from None
        finally:
            db.close()

    def save(self, jobs: Iterable[LiveJob], now: datetime) -> None:
        """Keep these jobs' patterns (seen now) and drop the rows not seen for `keep`, in one transaction."""
        rows = [(j.job_id, j.submit.isoformat(), j.array_job_id, j.user, int(j.batch), j.batch_host, j.stdout,
                 j.stderr, now.isoformat()) for j in jobs]
        with self._open() as db:
            db.execute("BEGIN IMMEDIATE")
            try:
                db.executemany(
                    """INSERT INTO slurm_job_output VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)
                       ON CONFLICT (job_id, submit_time) DO UPDATE SET array_job_id = excluded.array_job_id,
                           user_name = excluded.user_name, batch = excluded.batch, batch_host = excluded.batch_host,
                           stdout = excluded.stdout, stderr = excluded.stderr, seen_at = excluded.seen_at""", rows)
                db.execute("DELETE FROM slurm_job_output WHERE seen_at < ?", ((now - self.keep).isoformat(),))
                db.execute("COMMIT")
            except BaseException:
                db.execute("ROLLBACK")
                raise

    def find(self, ids: Iterable[str]) -> list[LiveJob]:
        """The rows of these job ids, as a job's own or its array's."""
        wanted = sorted(set(ids))
        found = []
        with self._open() as db:
            for start in range(0, len(wanted), 400):
                chunk = wanted[start:start + 400]
                marks = ",".join("?" * len(chunk))
                found += db.execute(
                    f"SELECT job_id, array_job_id, submit_time, user_name, batch, batch_host, stdout, stderr "
                    f"FROM slurm_job_output WHERE job_id IN ({marks}) OR array_job_id IN ({marks})",
                    chunk + chunk).fetchall()
        return [LiveJob(job_id=r[0], array_job_id=r[1], submit=datetime.fromisoformat(r[2]), user=r[3],
                        batch=bool(r[4]), batch_host=r[5], stdout=r[6], stderr=r[7]) for r in found]


Index = dict[str, list[LiveJob]]


def index(jobs: Iterable[LiveJob]) -> Index:
    """The jobs by their own id and by their array's."""
    found: Index = {}
    for job in jobs:
        for key in {job.job_id, job.array_job_id} - {""}:
            found.setdefault(key, []).append(job)
    return found


def match(jobs: Index, job_id: str, array_job_id: str, submits: set[datetime], user: str) -> LiveJob | None:
    """The record of this job (its own id first, else its array's) submitted at one of `submits` by `user`."""
    for key in (job_id, array_job_id):
        for job in jobs.get(key, []) if key else []:
            if job.submit in submits and (not user or job.user == user):
                return job
    return None
