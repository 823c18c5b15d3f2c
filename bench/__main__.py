"""firstfault benchmark harness (docs/benchmarks.md).

    python -m bench run [--suite quick|full|smoke] [--series size,nodes,rules] [--repeat N] [--pin]
                        [--clean] [--out bench/out]
    python -m bench service [--sessions N] [--concurrency 1 2 4] [--nodes N] [--mib-per-node X] [--format F]
                            [--before OTHER/src]
                            [--replicas 1 2 3 --store redis://... --repeat R] [--redis-share --store redis://...]
    python -m bench generate OUT --nodes N --ranks M --mib-per-node X [--seed S]
    python -m bench compare PATH --before OTHER/src [--before-args ARGS] [--args ARGS] [--grep]  # A/B, interleaved
    python -m bench profile PATH [--out FILE.html]          # pyinstrument profile of one analysis
    python -m bench backfill [--workloads N] [--repeat N] [--runs local:1 ray:auto ...]  # Blueprint, local vs Ray
    python -m bench startup [--before OTHER/src] [--repeat N] [--no-pyc]  # --version, analyze of 1 KB
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from bench.generate import Spec, default_jobs, generate

DEFAULT_OUT = Path(__file__).resolve().parent / "out"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = parser.add_subparsers(dest="command", required=True)
    r = sub.add_parser("run", help="run a benchmark suite (firstfault vs grep, scaling series)")
    r.add_argument("--suite", choices=["smoke", "quick", "full"], default="quick")
    r.add_argument("--series", help="comma-separated subset of size,nodes,rules")
    r.add_argument("--repeat", type=int, help="timed rounds per case (default 5, 3 above 4 GiB; smoke 1)")
    r.add_argument("--pin", action="store_true", help="pin 1-worker runs and grep to the last core (taskset)")
    r.add_argument("--clean", action="store_true", help="delete the generated workloads afterwards")
    r.add_argument("--quiet", type=float, default=0.15, metavar="SHARE",
                   help="before each timed run wait (up to 2 min) until less than SHARE of the CPUs are busy "
                        "(default 0.15; 1 disables): keeps other work on a shared machine out of the numbers")
    r.add_argument("--out", type=Path, default=DEFAULT_OUT)
    s = sub.add_parser("service", help="the service path: concurrent sessions over loopback")
    s.add_argument("--url", help="an already running `firstfault serve` (default: start one)")
    s.add_argument("--sessions", type=int, default=12, help="sessions per concurrency level")
    s.add_argument("--concurrency", type=int, nargs="+", default=[1, 2, 4])
    s.add_argument("--nodes", type=int, default=16)
    s.add_argument("--mib-per-node", type=float, default=1.0)
    s.add_argument("--batch-mib", type=float, default=4.0, help="batch size (of text)")
    s.add_argument("--bundle-mib", type=float, default=0.0,
                   help="send consecutive batches as `bundle` requests of up to this many MiB (default 0: one "
                        "request per batch)")
    s.add_argument("--before", type=Path, help="serve from this src/ directory of another checkout (sent no "
                                                "first_offset, its results not checked against analyze's)")
    s.add_argument("--format", choices=["raw_text", "raw_loki_streams"], default="raw_text",
                   help="how the evidence is sent (raw_text results are checked against analyze's)")
    s.add_argument("--replicas", type=int, nargs="+", default=[1],
                   help="`serve` replicas per row, each request sent to the next (above 1: needs --store)")
    s.add_argument("--store", default="", help="serve --store for every replica (a Redis URL)")
    s.add_argument("--http-parser", choices=["httptools", "h11"],
                   help="FIRSTFAULT_HTTP_PARSER of the servers started (default: theirs)")
    s.add_argument("--repeat", type=int, default=1, help="runs per row (median and range)")
    s.add_argument("--redis-share", action="store_true",
                   help="time the share of an ingest spent on Redis round trips, in this process (needs --store)")
    s.add_argument("--out", type=Path, default=DEFAULT_OUT)
    g = sub.add_parser("generate", help="write one synthetic workload")
    g.add_argument("out", type=Path)
    g.add_argument("--nodes", type=int, default=8)
    g.add_argument("--ranks", type=int, default=8)
    g.add_argument("--mib-per-node", type=float, default=12.5)
    g.add_argument("--seed", type=int, default=7)
    c = sub.add_parser("compare", help="time two firstfault checkouts on one workload, interleaved (before/after)")
    c.add_argument("path", type=Path, help="a workload directory")
    c.add_argument("--before", type=Path, required=True, help="the src/ directory of the 'before' checkout")
    c.add_argument("--after", type=Path, default=Path(__file__).resolve().parent.parent / "src")
    c.add_argument("--repeat", type=int, default=5)
    c.add_argument("--args", default="", help="extra arguments for the 'after' analyze (e.g. '--workers 2')")
    c.add_argument("--before-args", default="", help="extra arguments for the 'before' analyze")
    c.add_argument("--grep", action="store_true",
                   help="also time `LC_ALL=C grep -c -E -f` with the after checkout's `rules patterns --ere`, in turn")
    c.add_argument("--quiet", type=float, default=0.15, metavar="SHARE",
                   help="before each run wait (up to 2 min) until less than SHARE of the CPUs are busy (1: do not wait)")
    c.add_argument("--out", type=Path, default=DEFAULT_OUT)
    st = sub.add_parser("startup", help="time --version and analyze of a ~1 KB workload (before/after, interleaved)")
    st.add_argument("--before", type=Path, help="the src/ directory of a 'before' checkout")
    st.add_argument("--after", type=Path, default=Path(__file__).resolve().parent.parent / "src")
    st.add_argument("--repeat", type=int, default=21)
    st.add_argument("--no-pyc", action="store_true", help="run with PYTHONDONTWRITEBYTECODE=1 (no bytecode cache)")
    st.add_argument("--quiet", type=float, default=1.0, metavar="SHARE",
                    help="wait before each run until less than SHARE of the CPUs are busy (default 1: do not wait)")
    st.add_argument("--out", type=Path, default=DEFAULT_OUT)
    p = sub.add_parser("profile", help="profile one `firstfault analyze` with pyinstrument")
    p.add_argument("path", type=Path)
    p.add_argument("--workers", type=int, default=1)
    p.add_argument("--out", type=Path, help="write an HTML profile here (default: text to stdout)")
    b = sub.add_parser("backfill", help="a Blueprint backfill of many small workloads, local threads vs Ray tasks")
    b.add_argument("--workloads", type=int, default=1000)
    b.add_argument("--repeat", type=int, default=3)
    b.add_argument("--runs", nargs="+", default=["local:1", "local:auto", "ray:auto"], metavar="EXECUTOR:WORKERS")
    b.add_argument("--quiet", type=float, default=0.15, metavar="SHARE",
                   help="before each run wait (up to 2 min) until less than SHARE of the CPUs are busy")
    b.add_argument("--out", type=Path, default=DEFAULT_OUT)
    args = parser.parse_args(argv)

    if args.command == "generate":
        manifest = generate(Spec(nodes=args.nodes, ranks=args.ranks, mib_per_node=args.mib_per_node, seed=args.seed),
                            args.out, jobs=default_jobs())
        print(f"{args.out}: {manifest['bytes'] / 2**20:.1f} MiB in {manifest['files']} files; "
              f"expected {manifest['expected']}")
        return 0
    if args.command == "run":
        from bench.suite import run_suite

        series = args.series.split(",") if args.series else None
        result = run_suite(args.suite, args.out, repeat=args.repeat, pin=args.pin, series=series,
                           keep_data=not args.clean, quiet=None if args.quiet >= 1 else args.quiet)
        print()
        print(result["markdown"])
        print(f"\n(written to {result['json_path']} and .md)")
        wrong = [r for r in result["rows"] if not r["correct"]]
        if wrong:
            print(f"WRONG diagnosis in {len(wrong)} case(s): {[r['errors'] for r in wrong]}", file=sys.stderr)
            return 1
        return 0
    if args.command == "service":
        from bench.service_path import run_service

        return run_service(args)
    if args.command == "compare":
        return _compare(args)
    if args.command == "backfill":
        from bench.backfill import run_backfill

        return run_backfill(args)
    if args.command == "startup":
        from bench.startup import run_startup

        return run_startup(args)
    if args.command == "profile":
        from pyinstrument import Profiler

        from firstfault.engine.engine import default_cache_dir
        from firstfault.tools.verify import verified_engine

        engine = verified_engine(cache_dir=default_cache_dir())
        profiler = Profiler(interval=0.001)
        profiler.start()
        engine.analyze_path(args.path, workers=args.workers)
        profiler.stop()
        if args.out:
            args.out.write_text(profiler.output_html())
        else:
            print(profiler.output_text(unicode=True, color=False, show_all=False))
        return 0
    return 2


def _compare(args: argparse.Namespace) -> int:
    import os
    import statistics
    import subprocess

    from bench import measure

    out = args.out / "compare"
    out.mkdir(parents=True, exist_ok=True)
    env = {**os.environ, "FIRSTFAULT_CACHE_DIR": str(args.out / "cache")}
    cmds: dict[str, tuple[list[str], dict[str, str], Path | None]] = {}
    for name, src in (("before", args.before), ("after", args.after)):
        extra = (args.args if name == "after" else args.before_args).split()
        cmds[name] = ([sys.executable, "-m", "firstfault", "analyze", "--json", *extra, str(args.path)],
                      {**env, "PYTHONPATH": str(src.resolve())}, out / f"{name}.json")
    if args.grep:
        patterns = out / "patterns.ere"
        patterns.write_bytes(subprocess.run([sys.executable, "-m", "firstfault", "rules", "patterns", "--ere"],
                                            check=True, capture_output=True, env=cmds["after"][1]).stdout)
        # into a pipe whose lines are counted: GNU grep stops at the first match when its output is /dev/null
        cmds["grep -c"] = (["grep", "-E", "-c", "-r", "--include=*.log", "-f", str(patterns), str(args.path)],
                           {**os.environ, "LC_ALL": "C"}, None)
    results: dict[str, list[measure.Measurement]] = {name: [] for name in cmds}
    for cmd, cmd_env, stdout in cmds.values():  # warm-up (page cache, compiled-database cache)
        measure.run(cmd, stdout=stdout, env=cmd_env)
    for _ in range(args.repeat):
        for name, (cmd, cmd_env, stdout) in cmds.items():
            if args.quiet < 1:
                measure.wait_quiet(args.quiet)
            m = measure.run(cmd, stdout=stdout, env=cmd_env)
            if m.exit_code:
                raise SystemExit(f"{name}: {m.stderr}")
            results[name].append(m)
    same = (out / "before.json").read_bytes() == (out / "after.json").read_bytes()
    print(f"{args.path}: {args.repeat} interleaved rounds; result JSON identical: {same}")
    print("| | wall median | wall middle half | wall best | CPU median | peak RSS |")
    print("|---|---|---|---|---|---|")
    for name, runs in results.items():
        walls = sorted(m.wall_s for m in runs)
        q1, _, q3 = statistics.quantiles(walls, n=4) if len(walls) > 1 else (walls[0],) * 3
        print(f"| {name} | {statistics.median(walls):.2f} s | {q1:.2f}-{q3:.2f} s | {walls[0]:.2f} s | "
              f"{statistics.median(m.cpu_s for m in runs):.2f} s | {max(m.rss_mb for m in runs):.0f} MB |")
    if args.grep:  # per round, so that both sides of a ratio ran under the same load
        for name in ("before", "after"):
            ratios = [g.wall_s / f.wall_s for g, f in zip(results["grep -c"], results[name], strict=True)]
            cpu = [g.cpu_s / f.cpu_s for g, f in zip(results["grep -c"], results[name], strict=True)]
            print(f"grep -c / {name}: wall {statistics.median(ratios):.2f} (rounds {min(ratios):.2f}-{max(ratios):.2f}), "
                  f"CPU {statistics.median(cpu):.2f} ({min(cpu):.2f}-{max(cpu):.2f})")
    return 0 if same else 1


if __name__ == "__main__":
    sys.exit(main())
