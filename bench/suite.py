"""The benchmark suites: generate workloads, run `firstfault analyze` and `grep -E -f` on the same files,
check the diagnosis, and write the numbers (JSON and Markdown) to bench/out/results/.

A case is one workload, one worker count and one catalog size. Per case: one untimed warm-up run of
firstfault (fills the page cache and the compiled-database cache), then `repeat` rounds of firstfault and
grep, alternating, so that both see the same machine conditions. Medians are reported; every run's
numbers are kept in the JSON.
"""

from __future__ import annotations

import json
import os
import platform
import shutil
import statistics
import subprocess
import sys
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from bench import measure
from bench.generate import Spec, default_jobs, expected, generate
from bench.rules import extra_rules_toml

ROOT = Path(__file__).resolve().parent.parent
MIB = 1024 * 1024


@dataclass(frozen=True)
class Case:
    series: str  # size | nodes | rules
    label: str
    spec: Spec
    workers: int
    rules: int = 1  # catalog size factor (1 = the packaged catalog)
    driver: bool = False  # run through bench.driver (needed for extra rules)


def _size_spec(total_mib: float, nodes: int = 16, ranks: int = 8) -> Spec:
    return Spec(nodes=nodes, ranks=ranks, mib_per_node=round(total_mib / nodes, 4))


def suite_cases(name: str) -> list[Case]:
    if name == "smoke":
        tiny = Spec(nodes=4, ranks=4, mib_per_node=0.25)
        return [Case("size", "1 MiB", tiny, 1), Case("size", "1 MiB", tiny, 2),
                Case("nodes", "16 nodes", Spec(nodes=16, ranks=2, mib_per_node=0.0625), 1),
                Case("rules", "x1", tiny, 1, rules=1, driver=True), Case("rules", "x2", tiny, 1, rules=2, driver=True)]
    sizes = {"quick": [(100, "100 MiB"), (1024, "1 GiB")],
             "full": [(100, "100 MiB"), (1024, "1 GiB"), (10240, "10 GiB")]}[name]
    node_counts = {"quick": [8, 1250], "full": [8, 64, 256, 1250]}[name]
    node_total = {"quick": 100, "full": 1024}[name]
    cases = [Case("size", label, _size_spec(mib), w) for mib, label in sizes for w in (1, 2)]
    cases += [Case("nodes", f"{n} nodes", _size_spec(node_total, nodes=n, ranks=8), w)
              for n in node_counts for w in (1, 2)]
    rules_total = {"quick": 100, "full": 1024}[name]
    cases += [Case("rules", f"x{f}", _size_spec(rules_total), 1, rules=f, driver=True) for f in (1, 4, 10)]
    return cases


@dataclass
class Runner:
    out: Path
    repeat: int = 5
    pin: bool = False
    python: str = sys.executable
    grep_timeout: float = 600.0
    quiet: float | None = 0.15  # wait for the machine to be this idle before each timed run (None: do not wait)
    quiet_max_wait: float = 120.0
    log: Any = print
    rows: list[dict[str, Any]] = field(default_factory=list)

    @property
    def env(self) -> dict[str, str]:
        env = dict(os.environ)
        env["FIRSTFAULT_CACHE_DIR"] = str(self.out / "cache")
        env["PYTHONPATH"] = os.pathsep.join(p for p in (str(ROOT), env.get("PYTHONPATH", "")) if p)
        return env

    def data_dir(self, spec: Spec) -> Path:
        return self.out / "data" / f"{spec.nodes}n-{spec.mib_per_node}m-{spec.key()}"

    def patterns(self, rules: int) -> tuple[Path, Path | None]:
        """(ERE pattern file for grep, extra rule file or None) for a catalog `rules` times the packaged one."""
        ere = self.out / f"patterns-x{rules}.ere"
        extra = None
        if rules > 1:
            from firstfault.engine.catalog import load_catalog

            extra = self.out / f"rules-x{rules}.toml"
            if not extra.exists():
                extra.write_text(extra_rules_toml(load_catalog(), rules - 1))
        if not ere.exists():
            cmd = ([self.python, "-m", "bench.driver", "patterns"] + (["--extra-rules", str(extra)] if extra else [])
                   if extra else [self.python, "-m", "firstfault", "rules", "patterns", "--ere"])
            ere.write_bytes(subprocess.run(cmd, check=True, capture_output=True, env=self.env, cwd=ROOT).stdout)
        return ere, extra

    def run_case(self, case: Case) -> dict[str, Any]:
        data = self.data_dir(case.spec)
        gen_started = time.perf_counter()
        manifest = generate(case.spec, data, jobs=default_jobs())
        generated_s = time.perf_counter() - gen_started
        ere, extra = self.patterns(case.rules)
        pin = (os.cpu_count() or 1) - 1 if self.pin and case.workers == 1 else None
        runs = self.out / "runs"
        runs.mkdir(parents=True, exist_ok=True)
        tag = f"{case.series}-{data.name}-w{case.workers}-x{case.rules}"
        timings_file = runs / f"{tag}.timings.json"
        if case.driver:
            ff_cmd = [self.python, "-m", "bench.driver", "analyze", str(data), "--workers", str(case.workers),
                      "--timings", str(timings_file)] + (["--extra-rules", str(extra)] if extra else [])
        else:
            ff_cmd = [self.python, "-m", "firstfault", "analyze", "--json", "--workers", str(case.workers),
                      "--timings", str(timings_file), str(data)]
        grep_cmd = ["grep", "-E", "-r", "--include=*.log", "-f", str(ere), str(data)]
        # The same scan without writing the matching lines (grep -c prints one count per file): grep's output
        # volume depends on how many lines the catalog matches, e.g. sampled progress markers.
        grep_count_cmd = ["grep", "-E", "-c", "-r", "--include=*.log", "-f", str(ere), str(data)]
        grep_env = {**os.environ, "LC_ALL": "C"}
        load_before = os.getloadavg()
        _read_all(data)  # into the page cache: the runs measure the tools, not the disk
        warm = measure.run(ff_cmd, stdout=runs / f"{tag}.json", env=self.env, pin=pin)
        if warm.exit_code != 0:
            raise RuntimeError(f"{' '.join(ff_cmd)} failed: {warm.stderr}")
        warm_timings = json.loads(timings_file.read_text())
        ff_runs: list[measure.Measurement] = []
        grep_runs: list[measure.Measurement] = []
        count_runs: list[measure.Measurement] = []
        ff_timings: list[dict[str, Any]] = []
        correct = []
        rounds = self.repeat if manifest["bytes"] < 4 * 1024 * MIB else min(self.repeat, 3)
        quiet_runs = 0
        for _ in range(rounds):
            quiet_runs += self._settle()
            m = measure.run(ff_cmd, stdout=runs / f"{tag}.json", env=self.env, pin=pin)
            if m.exit_code != 0:
                raise RuntimeError(f"{' '.join(ff_cmd)} failed: {m.stderr}")
            ff_runs.append(m)
            ff_timings.append(json.loads(timings_file.read_text()))
            correct.append(check(json.loads((runs / f"{tag}.json").read_text()), case.spec))
            quiet_runs += self._settle()
            g = measure.run(grep_cmd, stdout=None, env=grep_env, pin=pin, timeout=self.grep_timeout,
                            err_path=runs / f"{tag}.grep.err")
            if g.exit_code not in (0, 1) and not g.timed_out:
                raise RuntimeError(f"grep failed: {g.stderr}")
            grep_runs.append(g)
            self._settle()
            count_runs.append(measure.run(grep_count_cmd, stdout=None, env=grep_env, pin=pin,
                                          timeout=self.grep_timeout, err_path=runs / f"{tag}.grep.err"))
        grep_lines = grep_runs[-1].stdout_lines
        nbytes = manifest["bytes"]
        ff_wall = statistics.median(m.wall_s for m in ff_runs)
        grep_wall = statistics.median(m.wall_s for m in grep_runs)
        # The phase breakdown of the run with the median wall time.
        order = sorted(range(len(ff_runs)), key=lambda i: ff_runs[i].wall_s)
        median_timings = ff_timings[order[len(order) // 2]]
        row = {
            "series": case.series, "label": case.label, "workers": case.workers, "rules_factor": case.rules,
            "extractors": median_timings["counts"].get("extractors") or _count_lines(ere),
            "workload": {**asdict(case.spec), "bytes": nbytes, "files": manifest["files"], "generated_s": round(
                generated_s, 1)},
            "firstfault": {
                "command": " ".join(ff_cmd), "wall_s": round(ff_wall, 3), "wall_min_s": round(min(m.wall_s for m in ff_runs), 3),
                "wall_runs": [round(m.wall_s, 3) for m in ff_runs], "cpu_runs": [round(m.cpu_s, 3) for m in ff_runs],
                "cpu_s": round(statistics.median(m.cpu_s for m in ff_runs), 3),
                "throughput_mib_s": round(nbytes / MIB / ff_wall, 1),
                "peak_rss_mb": round(max(m.rss_mb for m in ff_runs), 1),
                "peak_tree_rss_mb": round(max(m.tree_rss_mb for m in ff_runs), 1),
                "peak_tree_pss_mb": round(max(m.tree_pss_mb for m in ff_runs), 1),
                "phases": median_timings["seconds"], "phases_cpu": median_timings.get("cpu_seconds", {}),
                "counts": median_timings["counts"],
                "warmup_phases": warm_timings["seconds"],
            },
            "grep": {
                "command": "LC_ALL=C " + " ".join(grep_cmd), "wall_s": round(grep_wall, 3),
                "wall_min_s": round(min(m.wall_s for m in grep_runs), 3),
                "wall_runs": [round(m.wall_s, 3) for m in grep_runs], "cpu_runs": [round(m.cpu_s, 3) for m in grep_runs],
                "cpu_s": round(statistics.median(m.cpu_s for m in grep_runs), 3),
                "throughput_mib_s": round(nbytes / MIB / grep_wall, 1),
                "peak_rss_mb": round(max(m.rss_mb for m in grep_runs), 1), "matched_lines": grep_lines,
                "timed_out": any(m.timed_out for m in grep_runs),
            },
            "grep_count": {"command": "LC_ALL=C " + " ".join(grep_count_cmd),
                           "wall_s": round(statistics.median(m.wall_s for m in count_runs), 3),
                           "wall_runs": [round(m.wall_s, 3) for m in count_runs],
                           "cpu_s": round(statistics.median(m.cpu_s for m in count_runs), 3)},
            "ratio_grep_over_firstfault": round(grep_wall / ff_wall, 2),
            "ratio_grep_count_over_firstfault": round(statistics.median(m.wall_s for m in count_runs) / ff_wall, 2),
            "ratio_cpu": round(statistics.median(m.cpu_s for m in grep_runs)
                               / statistics.median(m.cpu_s for m in ff_runs), 2),
            "correct": all(c is None for c in correct), "errors": [c for c in correct if c],
            "pinned_cpu": pin, "runs_started_on_idle_machine": f"{quiet_runs}/{2 * rounds}",
            "loadavg_before": [round(x, 2) for x in load_before],
            "loadavg_after": [round(x, 2) for x in os.getloadavg()],
        }
        self.rows.append(row)
        self.log(summary_line(row))
        return row


    def _settle(self) -> int:
        if self.quiet is None:
            return 0
        quiet, _ = measure.wait_quiet(self.quiet, self.quiet_max_wait)
        return int(quiet)


def check(result: dict[str, Any], spec: Spec) -> str | None:
    """None when the result names the planted fault, else what is wrong."""
    want = expected(spec)
    root = result.get("root_cause") or {}
    got = {"root_symptom": root.get("symptom"), "root_node": root.get("node"),
           "culprits": [c["node"] for c in result.get("culprit_nodes", [])], "sub_domain": result.get("sub_domain"),
           "gpu": root.get("gpu")}
    wrong = {k: (got[k], v) for k, v in want.items() if got[k] != v}
    return None if not wrong else f"expected vs got: {wrong}"


def _read_all(directory: Path) -> None:
    for path in sorted(directory.glob("*/*.log")):
        with open(path, "rb") as fh:
            while fh.read(1 << 22):
                pass


def _count_lines(path: Path) -> int:
    n = 0
    with open(path, "rb") as fh:
        while chunk := fh.read(1 << 22):
            n += chunk.count(b"\n")
    return n


def summary_line(row: dict[str, Any]) -> str:
    ff, gr = row["firstfault"], row["grep"]
    return (f"{row['series']:6} {row['label']:>9} w={row['workers']} x{row['rules_factor']}: "
            f"firstfault {ff['wall_s']:.2f}s {ff['throughput_mib_s']:.0f} MiB/s rss {ff['peak_rss_mb']:.0f} MB | "
            f"grep {gr['wall_s']:.2f}s {gr['throughput_mib_s']:.0f} MiB/s | ratio {row['ratio_grep_over_firstfault']:.2f}"
            f" | {'correct' if row['correct'] else 'WRONG'}")


def _proc_field(path: str, prefix: str, parse: Any, default: Any) -> Any:
    """The first line of a /proc file that starts with `prefix`, parsed; `default` where there is none."""
    try:
        with open(path) as lines:
            return next((parse(line) for line in lines if line.startswith(prefix)), default)
    except OSError:
        return default


def _first_line_of(cmd: list[str]) -> str:
    """The first line a command prints, or "" when it is not installed or fails (recorded, not required)."""
    try:
        done = subprocess.run(cmd, capture_output=True, text=True, cwd=ROOT)
    except OSError:
        return ""
    lines = done.stdout.splitlines() if done.returncode == 0 else []
    return lines[0].strip() if lines else ""


def environment() -> dict[str, Any]:
    cpu = _proc_field("/proc/cpuinfo", "model name", lambda line: line.split(":", 1)[1].strip(), "")
    import hyperscan

    grep_version = _first_line_of(["grep", "--version"])
    commit = _first_line_of(["git", "rev-parse", "--short", "HEAD"]) or "unknown (not a git checkout)"
    mem = _proc_field("/proc/meminfo", "MemTotal", lambda line: int(line.split()[1]) // 1024, 0)
    return {"cpu": cpu, "cores": os.cpu_count(), "memory_mb": mem, "python": platform.python_version(),
            "hyperscan": hyperscan.__version__, "grep": grep_version, "commit": commit,
            "started": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())}


def _phase(row: dict[str, Any], *names: str, cpu: bool = False) -> float:
    phases = row["firstfault"]["phases_cpu" if cpu else "phases"]
    return sum(phases.get(n, 0.0) for n in names)


def markdown(rows: list[dict[str, Any]], env: dict[str, Any], repeat: int) -> str:
    out = [f"Machine: {env['cpu']}, {env['cores']} cores, {env['memory_mb']} MB; Python {env['python']}, "
           f"hyperscan {env['hyperscan']}, {env['grep']}; commit {env['commit']}; median of {repeat} runs "
           "(3 above 4 GiB).", ""]
    size = [r for r in rows if r["series"] == "size"]
    if size:
        out += ["### Evidence size (16 nodes x 8 ranks)", "",
                "| evidence | workers | firstfault | MiB/s | CPU | peak RSS (largest process) | peak PSS (tree) "
                "| grep -E -f | grep MiB/s | grep/firstfault | grep -c | grep -c/firstfault | correct |",
                "|---|---|---|---|---|---|---|---|---|---|---|---|---|"]
        out += [_size_row(r) for r in size]
        out += ["", "### Cores (same runs): 1 vs 2 worker processes", "",
                "| evidence | 1 worker | 2 workers | speed-up end to end | ingest phase 1 -> 2 | speed-up of the ingest phase |",
                "|---|---|---|---|---|---|"]
        for label in dict.fromkeys(r["label"] for r in size):
            one = next((r for r in size if r["label"] == label and r["workers"] == 1), None)
            two = next((r for r in size if r["label"] == label and r["workers"] == 2), None)
            if one and two:
                i1, i2 = _phase(one, "analyze.ingest"), _phase(two, "analyze.ingest")
                out.append(f"| {label} | {one['firstfault']['wall_s']:.2f} s | {two['firstfault']['wall_s']:.2f} s | "
                           f"{one['firstfault']['wall_s'] / two['firstfault']['wall_s']:.2f}x | {i1:.2f} s -> {i2:.2f} s | "
                           f"{i1 / i2 if i2 else 0:.2f}x |")
        out += ["", "### Where the time goes (median run; CPU seconds, summed over workers)", "",
                "| evidence | workers | wall | process CPU | startup (load + compile + verify) | read | line count "
                "| hyperscan scan | Python on hits | hit lines | merge | attribute | interpreter, imports, exit |",
                "|---|---|---|---|---|---|---|---|---|---|---|---|---|"]
        for r in size:
            wall = r["firstfault"]["wall_s"]
            startup = _phase(r, "catalog.load", "catalog.compile", "catalog.verify", cpu=True)
            accounted = (_phase(r, "catalog.load", "catalog.compile", "catalog.verify") +
                         _phase(r, "analyze.discover", "analyze.ingest", "analyze.attribute", "output"))
            out.append(f"| {r['label']} | {r['workers']} | {wall:.2f} | {r['firstfault']['cpu_s']:.2f} | {startup:.2f} | "
                       f"{_phase(r, 'ingest.read', cpu=True):.2f} | {_phase(r, 'ingest.lines', cpu=True):.2f} | "
                       f"{_phase(r, 'ingest.scan', cpu=True):.2f} | {_phase(r, 'ingest.hits', cpu=True):.2f} | "
                       f"{r['firstfault']['counts'].get('hit_lines', 0):,} | {_phase(r, 'analyze.merge', cpu=True):.2f} | "
                       f"{_phase(r, 'analyze.attribute', cpu=True):.3f} | {max(0.0, wall - accounted):.2f} (wall) |")
        out.append("")
    nodes = [r for r in rows if r["series"] == "nodes"]
    if nodes:
        total = nodes[0]["workload"]["bytes"] / MIB
        out += [f"### Node count ({total:.0f} MiB in all)", "",
                "| nodes | files | workers | firstfault | MiB/s | peak RSS | peak PSS (tree) | grep -E -f | grep/firstfault | correct |",
                "|---|---|---|---|---|---|---|---|---|---|"]
        for r in nodes:
            ff, gr = r["firstfault"], r["grep"]
            out.append(f"| {r['workload']['nodes']} | {r['workload']['files']} | {r['workers']} | {ff['wall_s']:.2f} s | "
                       f"{ff['throughput_mib_s']:.0f} | {ff['peak_rss_mb']:.0f} MB | {ff['peak_tree_pss_mb']:.0f} MB | "
                       f"{gr['wall_s']:.2f} s | {r['ratio_grep_over_firstfault']:.2f} | {_ok(r)} |")
        out.append("")
    rules = [r for r in rows if r["series"] == "rules"]
    if rules:
        base = next((r for r in rules if r["rules_factor"] == 1), rules[0])
        total = base["workload"]["bytes"] / MIB
        out += [f"### Rule count ({total:.0f} MiB, 1 worker)", "",
                "| catalog | extractors | firstfault | MiB/s | vs x1 | scan (CPU s) | scan MiB/s | startup (warm cache) "
                "| compile (cold) | grep -E -f | grep/firstfault | correct |",
                "|---|---|---|---|---|---|---|---|---|---|---|---|"]
        for r in rules:
            ff, gr = r["firstfault"], r["grep"]
            scan = _phase(r, "ingest.scan", cpu=True)
            drop = 1 - ff["throughput_mib_s"] / base["firstfault"]["throughput_mib_s"]
            cold = r["firstfault"]["warmup_phases"].get("catalog.compile", 0.0)
            grep_cell = "timeout" if gr["timed_out"] else f"{gr['wall_s']:.2f} s"
            out.append(f"| x{r['rules_factor']} | {r['extractors']} | {ff['wall_s']:.2f} s | {ff['throughput_mib_s']:.0f} | "
                       f"{-drop:+.0%} | {scan:.2f} s | {r['workload']['bytes'] / MIB / scan if scan else 0:.0f} | "
                       f"{_phase(r, 'catalog.load', 'catalog.compile', 'catalog.verify'):.2f} s | {cold:.2f} s | "
                       f"{grep_cell} | {r['ratio_grep_over_firstfault']:.2f} | {_ok(r)} |")
        out.append("")
    return "\n".join(out)


def _ok(row: dict[str, Any]) -> str:
    return "yes" if row["correct"] else "NO"


def _size_row(r: dict[str, Any]) -> str:
    ff, gr = r["firstfault"], r["grep"]
    return (f"| {r['label']} | {r['workers']} | {ff['wall_s']:.2f} s | {ff['throughput_mib_s']:.0f} | {ff['cpu_s']:.2f} s | "
            f"{ff['peak_rss_mb']:.0f} MB | {ff['peak_tree_pss_mb']:.0f} MB | {gr['wall_s']:.2f} s | "
            f"{gr['throughput_mib_s']:.0f} | {r['ratio_grep_over_firstfault']:.2f} | "
            f"{r['grep_count']['wall_s']:.2f} s | {r['ratio_grep_count_over_firstfault']:.2f} | {_ok(r)} |")


def run_suite(name: str, out: Path, *, repeat: int | None = None, pin: bool = False, series: list[str] | None = None,
              keep_data: bool = True, log: Any = print, quiet: float | None = 0.15) -> dict[str, Any]:
    """Run a suite; returns {"environment", "rows", "markdown", "json_path"} and writes them under out/results."""
    if shutil.which("grep") is None:
        raise SystemExit("grep is not installed: the benchmark compares against grep -E -f")
    out.mkdir(parents=True, exist_ok=True)
    runner = Runner(out=out, repeat=repeat or (1 if name == "smoke" else 5), pin=pin, log=log,
                    quiet=None if name == "smoke" else quiet)
    env = environment()
    cases = [c for c in suite_cases(name) if series is None or c.series in series]
    try:
        for case in cases:
            runner.run_case(case)
    finally:
        if not keep_data:
            shutil.rmtree(out / "data", ignore_errors=True)
    text = markdown(runner.rows, env, runner.repeat)
    results = out / "results"
    results.mkdir(exist_ok=True)
    stamp = time.strftime("%Y%m%dT%H%M%SZ", time.gmtime())
    json_path = results / f"{name}-{stamp}.json"
    json_path.write_text(json.dumps({"suite": name, "environment": env, "rows": runner.rows}, indent=2) + "\n")
    (results / f"{name}-{stamp}.md").write_text(text + "\n")
    return {"environment": env, "rows": runner.rows, "markdown": text, "json_path": str(json_path)}
