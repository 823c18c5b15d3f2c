"""Start-up: `firstfault --version` and `firstfault analyze` of a ~1 KB workload (issue 17's start-up budget).

    python -m bench startup [--before OTHER/src] [--repeat 21] [--no-pyc] [--quiet SHARE]

The workload is one node of the bundled `xid79-fallen-off-bus` sample: seven syslog lines, the Xid 79 among them
(about 0.8 KB). Each round runs every command once per checkout (`--before`: another checkout's src/, e.g. a
`git archive` of main; the "after" side is this checkout), alternating, so a slow stretch of a shared machine
lands on both. Each checkout keeps its own cache directory, warmed by one untimed run first (the catalog is
verified once, then its snapshot and compiled databases are loaded). Python keeps its bytecode (`__pycache__`),
as an installed package has it; `--no-pyc` runs with PYTHONDONTWRITEBYTECODE=1 instead (set in some CI and agent
environments) after deleting the checkouts' `__pycache__` directories, so every start compiles the package's
sources again (the site-packages keep theirs). Reported: median wall time with the
middle half and the range of the runs, median CPU time, and whether both sides printed the same result JSON.
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import statistics
import sys
from pathlib import Path

from bench import measure

ROOT = Path(__file__).resolve().parents[1]
SAMPLE = ROOT / "src" / "firstfault" / "samples" / "xid79-fallen-off-bus"
NODE = "gpu-a03"


def small_workload(out: Path) -> Path:
    """Write the ~1 KB workload (one node, its syslog's first four lines and the Xid 79 burst) under `out`."""
    directory = out / "startup-1k"
    (directory / NODE).mkdir(parents=True, exist_ok=True)
    scenario = (SAMPLE / "scenario.toml").read_text(encoding="utf-8")
    (directory / "scenario.toml").write_text(re.sub(r"(?m)^nodes = .*$", f'nodes = ["{NODE}"]', scenario),
                                             encoding="utf-8")
    lines = (SAMPLE / NODE / "syslog.log").read_text(encoding="utf-8").splitlines()
    kept = lines[:4] + [line for line in lines if "NVRM: Xid" in line or "fallen off the bus" in line]
    (directory / NODE / "syslog.log").write_text("\n".join(kept) + "\n", encoding="utf-8")
    return directory


def run_startup(args: argparse.Namespace) -> int:
    out = args.out / "startup"
    out.mkdir(parents=True, exist_ok=True)
    workload = small_workload(out)
    firstfault = str(Path(sys.executable).with_name("firstfault"))
    commands = {"--version": ["--version"], "analyze --json": ["analyze", "--json", str(workload)],
                "analyze": ["analyze", str(workload)]}
    sides = {"after": args.after} | ({"before": args.before} if args.before else {})
    base = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
    if args.no_pyc:
        base["PYTHONDONTWRITEBYTECODE"] = "1"
        for src in sides.values():
            for cache in src.resolve().rglob("__pycache__"):
                shutil.rmtree(cache)
    envs = {side: {**base, "PYTHONPATH": str(src.resolve()), "FIRSTFAULT_CACHE_DIR": str(out / f"cache-{side}")}
            for side, src in sides.items()}
    runs: dict[tuple[str, str], list[measure.Measurement]] = {}
    for side, env in envs.items():  # warm-up: verify the catalog, fill the caches
        measure.run([firstfault, *commands["analyze --json"]], stdout=out / f"{side}.json", env=env)
    for _ in range(args.repeat):
        for i, (label, argv) in enumerate(commands.items()):
            for side, env in envs.items():
                if args.quiet < 1:
                    measure.wait_quiet(args.quiet)
                m = measure.run([firstfault, *argv], stdout=out / f"{side}-{i}.out", env=env)
                if m.exit_code:
                    raise SystemExit(f"{side} {label}: {m.stderr}")
                runs.setdefault((label, side), []).append(m)
    outputs = {side: (out / f"{side}-1.out").read_bytes() for side in envs}  # analyze --json
    for side, text in outputs.items():
        if b'"root_cause": {\n    "symptom": "XID-79"' not in text:
            raise SystemExit(f"{side}: analyze did not find the Xid 79")
    print(f"{workload} ({sum(p.stat().st_size for p in workload.rglob('*.log'))} bytes of evidence), "
          f"{args.repeat} interleaved rounds, {'no bytecode cache' if args.no_pyc else 'bytecode cached'}; "
          f"result JSON identical on both sides: {len(set(outputs.values())) == 1}")
    print("| command | checkout | wall median | middle half | range | CPU median |")
    print("|---|---|---|---|---|---|")
    for (label, side), ms in runs.items():
        walls = sorted(m.wall_s for m in ms)
        q1, _, q3 = statistics.quantiles(walls, n=4) if len(walls) > 1 else (walls[0],) * 3
        print(f"| `firstfault {label}` | {side} | {statistics.median(walls) * 1000:.0f} ms | "
              f"{q1 * 1000:.0f}-{q3 * 1000:.0f} ms | {walls[0] * 1000:.0f}-{walls[-1] * 1000:.0f} ms | "
              f"{statistics.median(m.cpu_s for m in ms) * 1000:.0f} ms |")
    return 0
