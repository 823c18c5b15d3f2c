"""Check a built blind batch before its labels are frozen: `python3 check_batch.py DIR [--sources FILE ...]`.

Each scenario directory needs a scenario.toml in the corpus README's format, node directories named in
`workload.nodes` holding only applog.log / syslog.log / scheduler.log, accepted labels from the README's vocabulary,
and a root_evidence substring that occurs in one of its logs; no source URL may be one an earlier batch used.
Prints one line per problem and a summary; exits 1 when there is any.
"""

from __future__ import annotations

import argparse
import re
import sys
import tomllib
from pathlib import Path

SUB_DOMAINS = {"gpu", "nvlink", "network", "storage", "host", "host_oom", "gpu_oom", "application", "configuration",
               "scheduler", "ambiguous", "unknown", "none"}
STATES = {"COMPLETED", "FAILED", "TIMEOUT", "CANCELLED", "NODE_FAIL", "OUT_OF_MEMORY", "PREEMPTED"}
LOG_FILES = {"applog.log", "syslog.log", "scheduler.log"}
WORKLOAD_KEYS = ("scheduler", "job_id", "scheduler_state", "exit_code", "start_time", "end_time", "nodes",
                 "ranks_per_node")
RFC3339_Z = re.compile(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ")
USED_SOURCES = Path(__file__).with_name("used_sources.txt")


def check_scenario(directory: Path, used: set[str]) -> list[str]:
    try:
        spec = tomllib.loads((directory / "scenario.toml").read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, tomllib.TOMLDecodeError) as exc:
        return [f"scenario.toml: {exc}"]
    workload, expected = spec.get("workload", {}), spec.get("expected", {})
    sources = spec.get("provenance", {}).get("sources", [])
    nodes = set(workload.get("nodes", []))
    problems = [f"workload.{key} missing" for key in WORKLOAD_KEYS if key not in workload]
    if spec.get("id") != directory.name:
        problems.append("id is not the directory's name")
    if workload.get("scheduler") not in ("slurm", "kubernetes", "none"):
        problems.append(f"scheduler {workload.get('scheduler')!r} is not slurm, kubernetes or none")
    problems += [f"{key} is not RFC 3339 UTC (YYYY-MM-DDTHH:MM:SSZ)" for key in ("start_time", "end_time")
                 if not RFC3339_Z.fullmatch(str(workload.get(key, "")))]
    if not expected.get("sub_domain") or set(expected["sub_domain"]) - SUB_DOMAINS:
        problems.append(f"sub_domain {expected.get('sub_domain')!r} is not from the README's vocabulary")
    if set(expected.get("culprit_nodes", [])) - nodes:
        problems.append("a culprit node is not in workload.nodes")
    if expected.get("terminal_state") not in STATES:
        problems.append(f"terminal_state {expected.get('terminal_state')!r} is not a Slurm state name")
    if expected.get("confidence") not in ("confirmed", "likely", "unclear"):
        problems.append("confidence is not confirmed, likely or unclear")
    if "root_evidence" not in expected:
        problems.append("root_evidence missing")
    if not sources:
        problems.append("no provenance.sources")
    problems += [f"source already used by an earlier batch: {url}" for url in sources if url.strip() in used]
    return problems + _check_logs(directory, nodes, str(expected.get("root_evidence", "")))


def _check_logs(directory: Path, nodes: set[str], root_evidence: str) -> list[str]:
    problems, found = [], not root_evidence
    for entry in sorted(directory.iterdir()):
        if entry.is_file():
            if entry.name != "scenario.toml":
                problems.append(f"stray file {entry.name}")
            continue
        if entry.name not in nodes:
            problems.append(f"node directory {entry.name} is not in workload.nodes")
        for log in sorted(entry.iterdir()):
            if log.name not in LOG_FILES:
                problems.append(f"{entry.name}/{log.name} is not one of {', '.join(sorted(LOG_FILES))}")
            elif root_evidence in log.read_text(encoding="utf-8", errors="replace"):
                found = True
    if not found:
        problems.append("root_evidence occurs in no log")
    return problems


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("batch", type=Path, help="the batch directory (one sub-directory per scenario)")
    parser.add_argument("--sources", type=Path, action="append", default=None, metavar="FILE",
                        help="a list of used source URLs, one per line; repeatable (default: used_sources.txt beside "
                             "this script)")
    args = parser.parse_args(argv)
    used = {url for path in args.sources or [USED_SOURCES] for url in path.read_text(encoding="utf-8").split()}
    scenarios = sorted(p for p in args.batch.iterdir() if p.is_dir())
    count = 0
    for directory in scenarios:
        for problem in check_scenario(directory, used):
            print(f"{directory.name}: {problem}")
            count += 1
    print(f"{len(scenarios)} scenarios, {count} problems")
    return 1 if count else 0


if __name__ == "__main__":
    sys.exit(main())
