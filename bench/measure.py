"""Run one command and measure it: wall time, CPU time and peak memory (whole process tree).

Peak memory is measured two ways. `rss_mb` is the kernel's peak resident set of the largest single process
(ru_maxrss from wait4, which covers the command and every child it waited for). `tree_pss_mb` samples the
whole process tree every 20 ms and sums the proportional set size (PSS) of its processes, so memory that
forked workers share with their parent is counted once; `tree_rss_mb` is the same sum of plain RSS (counts
shared pages once per process, an upper bound).
"""

from __future__ import annotations

import os
import shutil
import subprocess
import threading
import time
from dataclasses import dataclass
from pathlib import Path


@dataclass
class Measurement:
    wall_s: float
    cpu_s: float
    rss_mb: float
    tree_rss_mb: float
    tree_pss_mb: float
    exit_code: int
    stderr: str
    timed_out: bool = False
    stdout_lines: int = 0


def _children(pid: int) -> list[int]:
    try:
        with open(f"/proc/{pid}/task/{pid}/children") as fh:
            return [int(x) for x in fh.read().split()]
    except OSError:
        return []


def _tree(pid: int) -> list[int]:
    out, todo = [], [pid]
    while todo:
        p = todo.pop()
        out.append(p)
        todo.extend(_children(p))
    return out


def _kb(path: str, field: str) -> int:
    try:
        with open(path) as fh:
            for line in fh:
                if line.startswith(field):
                    return int(line.split()[1])
    except (OSError, ValueError, IndexError):
        pass
    return 0


class _TreeSampler(threading.Thread):
    def __init__(self, pid: int, interval: float = 0.02) -> None:
        super().__init__(daemon=True)
        self.pid = pid
        self.interval = interval
        self.peak_rss_kb = 0
        self.peak_pss_kb = 0
        self._stop_event = threading.Event()

    def run(self) -> None:
        while not self._stop_event.is_set():
            pids = _tree(self.pid)
            rss = sum(_kb(f"/proc/{p}/status", "VmRSS:") for p in pids)
            pss = sum(_kb(f"/proc/{p}/smaps_rollup", "Pss:") for p in pids)
            self.peak_rss_kb = max(self.peak_rss_kb, rss)
            self.peak_pss_kb = max(self.peak_pss_kb, pss)
            self._stop_event.wait(self.interval)

    def stop(self) -> None:
        self._stop_event.set()
        self.join()


def _cpu_ticks() -> tuple[int, int]:
    with open("/proc/stat") as fh:
        fields = [int(x) for x in fh.readline().split()[1:]]
    idle = fields[3] + (fields[4] if len(fields) > 4 else 0)
    return sum(fields), idle


def busy_fraction(interval: float = 0.5) -> float:
    """Share of all CPUs busy over `interval` (other tenants of a shared machine included)."""
    try:
        total0, idle0 = _cpu_ticks()
        time.sleep(interval)
        total1, idle1 = _cpu_ticks()
    except (OSError, ValueError):
        return 0.0
    total = total1 - total0
    return 0.0 if total <= 0 else 1.0 - (idle1 - idle0) / total


def wait_quiet(threshold: float = 0.15, max_wait: float = 120.0) -> tuple[bool, float]:
    """Wait (up to max_wait seconds) until the machine is idle: less than `threshold` of the CPUs busy over
    half a second. Returns (quiet, seconds waited). On a shared machine this keeps runs from overlapping
    other people's test suites; it never waits forever."""
    started = time.perf_counter()
    while True:
        busy = busy_fraction()
        waited = time.perf_counter() - started
        if busy < threshold:
            return True, waited
        if waited > max_wait:
            return False, waited
        time.sleep(0.5)


def pin_prefix(cpu: int | None) -> list[str]:
    """`taskset -c CPU` (run on one core) when asked for and available."""
    if cpu is None or shutil.which("taskset") is None:
        return []
    return ["taskset", "-c", str(cpu)]


class _LineCounter(threading.Thread):
    """Drains a pipe and counts its lines (what `| wc -l` would do, without writing anything to disk)."""

    def __init__(self, fd: int) -> None:
        super().__init__(daemon=True)
        self.fd = fd
        self.lines = 0

    def run(self) -> None:
        while chunk := os.read(self.fd, 1 << 20):
            self.lines += chunk.count(b"\n")
        os.close(self.fd)


def run(cmd: list[str], *, stdout: Path | None, env: dict[str, str] | None = None, pin: int | None = None,
        timeout: float | None = None, err_path: Path | None = None) -> Measurement:
    """Run `cmd` with stdout to a file, or (stdout=None) into a pipe whose lines are counted. Never to
    /dev/null: GNU grep stops at the first match when its output is /dev/null. A pipe keeps gigabytes of
    grep output out of the page cache, where they would evict the evidence being measured."""
    full = pin_prefix(pin) + cmd
    err_path = err_path or (stdout.with_suffix(stdout.suffix + ".err") if stdout else Path(os.devnull))
    counter = None
    with open(stdout if stdout else os.devnull, "wb") as out, open(err_path, "wb") as err:
        started = time.perf_counter()
        if stdout is None:
            read_fd, write_fd = os.pipe()
            proc = subprocess.Popen(full, stdout=write_fd, stderr=err, env=env)
            os.close(write_fd)
            counter = _LineCounter(read_fd)
            counter.start()
        else:
            proc = subprocess.Popen(full, stdout=out, stderr=err, env=env)
        sampler = _TreeSampler(proc.pid)
        sampler.start()
        timed_out = False
        deadline = None if timeout is None else started + timeout
        while True:
            pid, status, usage = os.wait4(proc.pid, os.WNOHANG)
            if pid:
                break
            if deadline is not None and time.perf_counter() > deadline:
                for p in reversed(_tree(proc.pid)):
                    try:
                        os.kill(p, 9)
                    except OSError:
                        pass
                timed_out = True
                pid, status, usage = os.wait4(proc.pid, 0)
                break
            time.sleep(0.002)
        if counter is not None:
            counter.join()
        wall = time.perf_counter() - started
        sampler.stop()
    proc.returncode = os.waitstatus_to_exitcode(status)  # reaped here, so tell Popen
    stderr = "" if str(err_path) == os.devnull else err_path.read_text(errors="replace")
    if str(err_path) != os.devnull:
        err_path.unlink()
    return Measurement(wall_s=wall, cpu_s=usage.ru_utime + usage.ru_stime, rss_mb=usage.ru_maxrss / 1024,
                       tree_rss_mb=sampler.peak_rss_kb / 1024, tree_pss_mb=sampler.peak_pss_kb / 1024,
                       exit_code=proc.returncode, stderr=stderr[-2000:], timed_out=timed_out,
                       stdout_lines=counter.lines if counter else 0)
