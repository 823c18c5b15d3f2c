"""Seconds per MB of crafted lines against benign lines of the same length and shape, per extractor family and
line length; and how the cost of one crafted line grows with its length.

Each family pairs a hostile line with a benign one of the same length that matches the same extractor, so the two
sets cost the same per-line work and differ only in what a backtracking engine would make of them.

    python -m tests.reliability.scripts.crafted_lines --sizes 100 4000 65536 --total 300000 --repeats 2
"""

from __future__ import annotations

import argparse
import io
import time
from collections.abc import Callable
from datetime import UTC, datetime

from firstfault.engine import Engine, ExecutionContext, SourceKind
from firstfault.tools.verify import default_engine
from tests.reliability.scripts.measure import done

CONTEXT = ExecutionContext(workload_id="w", nodes=["n1"], start_time=datetime(2026, 3, 2, 8, tzinfo=UTC),
                           end_time=datetime(2026, 3, 2, 9, tzinfo=UTC))
SYS = "Mar  2 08:10:01 n1 kernel: "
APP = "2026-03-02T08:10:01.000Z [rank0]: "
XID = "NVRM: Xid (PCI:0000:01:00): 79, "

Line = Callable[[int], str]


def pad(n: int) -> str:
    return ("word " * (n // 5 + 1))[:n]


# name: (source, benign line of length ~n, hostile line of length ~n)
FAMILIES: dict[str, tuple[str, Line, Line]] = {
    # (?P<comm>\S+) invoked oom-killer: - every start position inside a long token is tried
    "long token before \\S+": ("syslog", lambda n: SYS + pad(n) + " x invoked oom-killer:",
                               lambda n: SYS + "a" * n + " x invoked oom-killer:"),
    # (?P<process>[\w.-]+)\[(?P<pid>\d+)\]: segfault at
    "long word before [\\w.-]+": ("syslog", lambda n: SYS + pad(n) + " python[12]: segfault at 0 ip 0 sp 0 error 4",
                                  lambda n: SYS + "a" * n + " python[12]: segfault at 0 ip 0 sp 0 error 4"),
    # (?P<interface>ib\d+|ibp\S+): Link down
    "repeated ibp prefix": ("syslog", lambda n: SYS + pad(n) + " ib0: Link down",
                            lambda n: SYS + "ibp" * (n // 3) + " ib0: Link down"),
    # Xid: (?:[^\n]*?GPU recovery action changed from 0x.. \([^)]*\) to ...)? - unclosed parentheses
    "Xid with unclosed recovery groups": ("syslog", lambda n: SYS + XID + pad(n),
                                          lambda n: SYS + XID + "GPU recovery action changed from 0x1 (" * (n // 38)),
    # RuntimeError: (?:...|shape .* is invalid for input of size|...)
    "near-miss .* alternatives": ("applog", lambda n: APP + pad(n) + " RuntimeError: size mismatch",
                                  lambda n: APP + "RuntimeError: shape " * (n // 20) + "RuntimeError: size mismatch"),
    # LustreError: \S+|Lustre: .*Request sent has failed ...|LNetError:
    "many Lustre: prefixes": ("syslog", lambda n: SYS + pad(n) + " LNetError: x",
                              lambda n: SYS + "Lustre: " * (n // 8) + "LNetError: x"),
    # nvme (?P<nvme>nvme\d+): I/O \d+ .*timeout, ...|Buffer I/O error on dev (?P<device>\S+),
    "many nvme I/O prefixes": ("syslog", lambda n: SYS + pad(n) + " Buffer I/O error on dev sda1,",
                               lambda n: SYS + "nvme nvme0: I/O 1 " * (n // 18) + "Buffer I/O error on dev sda1,"),
    # the timestamp parser's launcher-prefix pattern \[[A-Za-z_][\w.-]*\d...\]:
    "long bracketed prefix": ("syslog", lambda n: "[a1] " + pad(n) + " " + XID + "x",
                              lambda n: "[a" + "1" * n + " " + XID + "x"),
    # many 'NVRM: Xid (' prefixes without a closing parenthesis (no match at all)
    "unclosed Xid prefixes": ("syslog", lambda n: SYS + pad(n), lambda n: SYS + "NVRM: Xid (" * (n // 11)),
}


def seconds_per_mb(engine: Engine, source: str, line: str, count: int, repeats: int) -> float:
    """The best of `repeats` ingests of `count` copies of `line`, in seconds per MB of input."""
    data = ("\n".join([line] * count) + "\n").encode()
    best = float("inf")
    for _ in range(repeats):
        session = engine.session(CONTEXT)
        started = time.perf_counter()
        session.ingest_stream("n1", SourceKind(source), io.BytesIO(data), "x")
        best = min(best, time.perf_counter() - started)
    return best / (len(data) / 1e6)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", type=int, nargs="+", required=True, help="line lengths, in characters")
    parser.add_argument("--total", type=int, required=True, help="characters of input per family and size")
    parser.add_argument("--repeats", type=int, required=True, help="runs of each measurement (the best counts)")
    args = parser.parse_args(argv)
    engine = default_engine()
    rows = []
    for name, (source, benign, hostile) in FAMILIES.items():
        for size in args.sizes:
            count = max(16, args.total // size)
            b = seconds_per_mb(engine, source, benign(size), count, args.repeats)
            h = seconds_per_mb(engine, source, hostile(size), count, args.repeats)
            rows.append([name, size, round(b * 1e3, 2), round(h * 1e3, 2), round(h / b, 2)])
    # linear in the length of one line: one 1 MB hostile line against sixteen 64 kB ones
    _, _, hostile = FAMILIES["long token before \\S+"]
    short = seconds_per_mb(engine, "syslog", hostile(64 * 1024), 16, args.repeats)
    long = seconds_per_mb(engine, "syslog", hostile(1000 * 1024), 1, args.repeats)
    done(rows=rows, line_scaling=round(long / short, 2))


if __name__ == "__main__":
    main()
