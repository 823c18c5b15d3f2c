"""Time to attribute one session of many nodes, each with a few symptoms (item 5 of issue 14: attribution time
grew with the square of the node count).

    python -m tests.reliability.scripts.many_nodes --nodes 2500 5000 10000 [--profile OUT.prof]

The session is built with the engine API: node `n<i>` gets the log lines of one node of a packaged sample
(cycling over them, its own name put in), so every node has the mix of symptoms a real node has. Only
`Session.attribute()` is timed (best of `--repeats`); ingest is not part of the number.
"""

from __future__ import annotations

import argparse
import cProfile
import time
from datetime import timedelta
from pathlib import Path

from firstfault.engine import ExecutionContext, Session, SourceKind
from firstfault.engine.evidence import evidence_files, read_context
from firstfault.samples import samples_root
from firstfault.tools.verify import default_engine
from tests.reliability.scripts.measure import done

_SOURCES = (SourceKind.APPLOG, SourceKind.SYSLOG)


def sample_nodes() -> list[tuple[str, dict[SourceKind, list[str]]]]:
    """(name, lines per source) of every node of the packaged samples whose logs match something."""
    nodes: dict[tuple[str, str], dict[SourceKind, list[str]]] = {}
    for root in sorted(p for p in samples_root().iterdir() if (p / "scenario.toml").is_file()):
        for item in evidence_files(root)[0]:
            if item.source in _SOURCES:
                nodes.setdefault((root.name, item.node), {})[item.source] = item.path.read_text().splitlines()
    return [(node, lines) for (_, node), lines in sorted(nodes.items())]


def build(count: int) -> Session:
    """A session of `count` nodes named n0 .. n<count-1>, over the window of the nvlink sample."""
    base = read_context(samples_root() / "nvlink-walkthrough")
    names = [f"n{i}" for i in range(count)]
    start, end = base.start_time, base.end_time
    assert start is not None and end is not None
    context = ExecutionContext(workload_id=f"many-{count}", scheduler="slurm", job_id="1", nodes=names,
                               start_time=start - timedelta(days=400), end_time=end + timedelta(days=400),
                               scheduler_state="FAILED", exit_code="1:0")
    session = default_engine().session(context)
    templates = sample_nodes()
    for i, name in enumerate(names):
        template, per_source = templates[i % len(templates)]
        for source, lines in per_source.items():
            session.ingest_lines(name, source, [line.replace(template, name) for line in lines],
                                 f"{name}/{source.value}.log")
    return session


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--nodes", type=int, nargs="+", required=True, help="node counts to attribute")
    parser.add_argument("--repeats", type=int, default=1, help="attribute each session this often, keep the best")
    parser.add_argument("--profile", type=Path, help="write a cProfile of the largest session's attribution here")
    args = parser.parse_args(argv)
    rows = []
    for count in args.nodes:
        session = build(count)
        best = float("inf")
        for _ in range(args.repeats):
            started = time.perf_counter()
            result = session.attribute()
            best = min(best, time.perf_counter() - started)
        rows.append([count, round(best, 3), len(session.events()), len(result.symptoms), len(result.to_json())])
        print(f"{count} nodes: {best:.3f} s, {rows[-1][2]} events, {rows[-1][3]} symptoms", flush=True)
    if args.profile is not None:
        cProfile.runctx("session.attribute()", globals(), {"session": session}, str(args.profile))
    done(rows=rows)


if __name__ == "__main__":
    main()
