"""Engine subcommands: analyze, samples, rules, eval.

rich is imported by the functions that print with it: `analyze --json` (the command timed against grep) does not
load it (docs/benchmarks.md, start-up).
"""

from __future__ import annotations

import argparse
import json
import sys
import tomllib
from pathlib import Path

from firstfault.cli import error
from firstfault.engine.catalog import Catalog, load_catalog
from firstfault.engine.clock import parse_timezone_option
from firstfault.engine.engine import Engine, default_cache_dir
from firstfault.engine.history import read_history
from firstfault.engine.params import Params
from firstfault.engine.timing import Timings
from firstfault.errors import CatalogError
from firstfault.executor import EXECUTORS, make_executor
from firstfault.samples import sample_dirs
from firstfault.tools.verify import load_verified_catalog, verified_engine

DEFAULT_SAMPLE = "nvlink-walkthrough"


def _engine(params: Params | None = None) -> Engine:
    try:
        return verified_engine(params=params, cache_dir=default_cache_dir())
    except CatalogError as exc:
        raise CatalogError(f"the rule catalog does not load: {exc}") from None


def cmd_analyze(args: argparse.Namespace) -> int:
    if args.sample is not None:
        samples = sample_dirs()
        if args.sample not in samples:
            return error(f"no sample named {args.sample!r}; `firstfault samples` lists them")
        path = samples[args.sample]
    elif args.path is not None:
        path = args.path
    else:
        return error("give a workload directory (scenario.toml + <node>/<source>.log) or --sample")
    zones = tuple(parse_timezone_option(text) for text in args.timezone)
    params = Params(source_timezones=zones, max_decompressed_bytes=args.max_decompressed_mib * 1024 * 1024)
    if args.history_window is not None and args.history is None:
        return error("--history-window needs --history FILE")
    history = None if args.history is None else read_history(args.history, args.history_window)
    engine = _engine(None if params == Params() else params)
    timings = Timings()
    executor = make_executor(args.executor)
    try:
        result = engine.analyze_path(path, workers=args.workers, timings=timings, executor=executor, history=history)
    finally:
        executor.close()
    with timings.phase("output"):
        if args.json:
            sys.stdout.write(result.to_json() + "\n")
        else:
            from rich.console import Console

            from firstfault.cli.report import render

            render(result, Console(highlight=False, soft_wrap=True, width=None if sys.stdout.isatty() else 160))
        sys.stdout.flush()
    if args.timings is not None:
        timings.merge(engine.startup)
        report = json.dumps({"path": str(path), **timings.as_dict()}) + "\n"
        if str(args.timings) == "-":
            sys.stderr.write(report)
        else:
            args.timings.write_text(report, encoding="utf-8")
    return 0


def _at_least_one(text: str, wanted: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(wanted) from None
    if value < 1:
        raise argparse.ArgumentTypeError(wanted)
    return value


def _mebibytes(text: str) -> int:
    return _at_least_one(text, "a whole number of MiB >= 1")


def _days(text: str) -> int:
    days = _at_least_one(text, "a whole number of days from 1 to 3650")
    if days > 3650:
        raise argparse.ArgumentTypeError("a whole number of days from 1 to 3650")
    return days


def worker_count(text: str) -> int:
    """`--workers`: N >= 1, or `auto` (0)."""
    return 0 if text == "auto" else _at_least_one(text, "an integer >= 1, or auto")


def cmd_samples(args: argparse.Namespace) -> int:
    from rich.console import Console
    from rich.markup import escape
    from rich.table import Table

    rows = []
    for name, path in sample_dirs().items():
        doc = tomllib.loads((path / "scenario.toml").read_text(encoding="utf-8"))
        rows.append({"name": name, "title": doc.get("title", ""), "path": str(path)})
    if args.json:
        print(json.dumps(rows, indent=2))
        return 0
    table = Table(title="Bundled sample workloads (firstfault analyze --sample NAME)")
    for col in ("name", "title", "path"):
        table.add_column(col)
    for row in rows:
        table.add_row(row["name"], escape(row["title"]), row["path"])
    Console().print(table)
    return 0


def _load(verify: bool, extra: list[Path] | None = None) -> Catalog:
    try:
        files = [(p.name, p.read_bytes()) for p in (extra or [])]
    except OSError as exc:
        raise CatalogError(f"{exc.filename}: cannot be read: {exc.strerror}") from None
    return load_verified_catalog(files) if verify else load_catalog(extra_files=files)


def cmd_rules(args: argparse.Namespace) -> int:
    if args.rules_command == "test":
        return _rules_test(args)
    catalog = _load(verify=False)
    if args.rules_command == "list":
        return _rules_list(catalog, args.json)
    if args.rules_command == "show":
        return _rules_show(catalog, args.name)
    if args.rules_command == "patterns":
        return _rules_patterns(catalog, ere=args.ere)
    if args.rules_command == "docs":
        from firstfault.tools.catalog_docs import render_markdown

        sys.stdout.write(render_markdown(catalog))
        return 0
    return error(f"unknown rules command {args.rules_command}")


def _rules_patterns(catalog: Catalog, *, ere: bool) -> int:
    if not ere:
        for pattern in catalog.pattern_list():
            print(pattern)
        return 0
    from firstfault.errors import EreError
    from firstfault.tools.ere import to_ere

    lines = []
    for extractor in catalog.extractors:
        try:
            lines.append(to_ere(extractor.match_re))
        except EreError as exc:
            return error(f"{extractor.origin}: extractor {extractor.name}: no POSIX ERE form: {exc}")
    sys.stdout.write("".join(line + "\n" for line in lines))
    return 0


def _rules_list(catalog: Catalog, as_json: bool) -> int:
    from rich.console import Console
    from rich.markup import escape
    from rich.table import Table

    rows = [{"name": e.name, "kind": "extractor", "phase": "EXTRACTION", "emits": e.symptom or f"Context.{e.fact}",
             "origin": e.origin} for e in catalog.extractors]
    rows += [{"name": r.name, "kind": r.kind, "phase": r.phase.name, "emits": "", "origin": r.module}
             for r in catalog.python_rules]
    if as_json:
        print(json.dumps({"catalog_hash": catalog.content_hash, "rules": rows}, indent=2))
        return 0
    table = Table(title=f"Rule catalog {catalog.content_hash} ({len(rows)} rules, {len(catalog.symptoms)} symptoms)")
    for col in ("name", "kind", "phase", "emits", "origin"):
        table.add_column(col)
    for row in rows:
        table.add_row(*(escape(str(row[c])) for c in ("name", "kind", "phase", "emits", "origin")))
    Console().print(table)
    return 0


def _rules_show(catalog: Catalog, name: str) -> int:
    from rich.console import Console
    from rich.markup import escape

    console = Console(highlight=False)
    for e in catalog.extractors:
        if e.name == name:
            console.print(f"[bold]{e.name}[/bold] (extractor, {e.origin}; sources: {', '.join(s.value for s in e.sources)})")
            console.print(escape(e.doc))
            console.print(f"match_re = {escape(e.match_re)}")
            console.print(f"emits {e.emit_type} {escape(e.symptom or 'Context.' + str(e.fact))}")
            if e.ref:
                console.print(f"ref: {escape(e.ref)}")
            for case in e.cases:
                console.print(f"  case expect={case.expect}: {escape(case.line)}")
            return 0
    for r in catalog.python_rules:
        if r.name == name:
            console.print(f"[bold]{r.name}[/bold] ({r.kind}, phase {r.phase.name}, {r.module})")
            console.print(escape(r.doc))
            for rule_case in r.cases:
                console.print(f"  case {escape(rule_case.title)}: expect {escape(json.dumps(rule_case.expect.as_dict()))}")
            return 0
    if name in catalog.symptoms:
        s = catalog.symptoms[name]
        console.print(f"[bold]{s.name}[/bold] (symptom, {s.sub_domain.value}, role {s.role}, blame {s.blame}, "
                      f"strength {s.strength}, {s.origin})")
        console.print(escape(s.doc))
        console.print(f"next action: {s.next_action.immediate} - {escape(s.next_action.summary)}")
        return 0
    return error(f"no rule or symptom named {name!r}")


def _rules_test(args: argparse.Namespace) -> int:
    from firstfault.tools.verify import check_catalog

    catalog = _load(verify=False, extra=args.file)
    failures = check_catalog(catalog, strict=True)
    cases = sum(len(e.cases) for e in catalog.extractors) + sum(len(r.cases) for r in catalog.python_rules)
    for failure in failures:
        print(f"FAIL {failure}")
    print(f"{cases - len(failures)}/{cases} inline cases passed "
          f"({len(catalog.extractors)} extractors, {len(catalog.python_rules)} Python rules)")
    return 1 if failures else 0


def cmd_eval(args: argparse.Namespace) -> int:
    from rich.console import Console
    from rich.progress import Progress

    from firstfault.tools.evaluate import compare, evaluate, load_baseline, scenario_dirs

    baseline = load_baseline(args.baseline) if args.baseline else None
    stderr = Console(stderr=True)
    with Progress(console=stderr, transient=True, disable=not stderr.is_terminal) as bar:
        task = bar.add_task("scenarios", total=len(scenario_dirs(args.corpus)))
        report = evaluate(args.corpus, None if args.jobs > 1 else _engine(), jobs=args.jobs,
                          progress=lambda: bar.advance(task))
    if args.json:
        print(json.dumps(report.as_dict(), indent=2))
    else:
        _print_eval(report)
    m = report.metrics
    failed = []
    if baseline is not None:
        changes = compare(report, baseline)
        for change in changes:
            print(f"{change.kind} {change.id}: {change.before} -> {change.after}", file=sys.stderr)
        broke = sum(1 for c in changes if c.kind == "broke")
        if broke:
            failed.append(f"{broke} scenario(s) right in {args.baseline} are wrong now")
    if args.min_accuracy is not None and m["sub_domain_accuracy"] < args.min_accuracy:
        failed.append(f"sub_domain accuracy {m['sub_domain_accuracy']} < {args.min_accuracy}")
    if args.min_culprit is not None and m["culprit_exact_match"] < args.min_culprit:
        failed.append(f"culprit exact-match {m['culprit_exact_match']} < {args.min_culprit}")
    if args.max_false_blame is not None and m["false_infra_blame"] > args.max_false_blame:
        failed.append(f"false infra blame {m['false_infra_blame']} > {args.max_false_blame}")
    for message in failed:
        stderr.print(f"[bold red]threshold:[/bold red] {message}")
    return 1 if failed else 0


def _print_eval(report: object) -> None:
    from rich.console import Console
    from rich.markup import escape
    from rich.table import Table

    from firstfault.tools.evaluate import EvalReport

    assert isinstance(report, EvalReport)
    console = Console(highlight=False)
    table = Table(title="Scenarios")
    for col in ("scenario", "expected sub_domain", "got", "expected culprits", "got culprits", "state", "result"):
        table.add_column(col)
    for s in report.scores:
        table.add_row(s.id, ",".join(s.expected_sub_domain), s.got_sub_domain, ",".join(s.expected_culprits) or "-",
                      ",".join(s.got_culprits) or "-",
                      s.got_terminal_state + ("" if s.terminal_ok else f" (exp {s.expected_terminal_state})"),
                      "[green]pass[/green]" if s.passed else f"[red]FAIL[/red] {escape(s.error)}")
    console.print(table)
    m = report.metrics
    console.print(f"sub_domain accuracy {m['sub_domain_accuracy']:.1%}  culprit exact-match {m['culprit_exact_match']:.1%}  "
                  f"terminal_state {m['terminal_state_accuracy']:.1%}  root evidence {m['root_evidence_accuracy']:.1%}")
    console.print(f"false infra blame {m['false_infra_blame']}  missed hardware {m['missed_hardware']} of "
                  f"{m['expected_culprit_nodes']} expected culprit nodes  passed {m['passed']}/{m['scenarios']}")
    console.print(f"committed answers {m['committed_share']:.1%} (not unknown/ambiguous), their sub_domain precision "
                  f"{m['committed_precision']:.1%}; by the answer's confidence: " + ", ".join(
                      f"{level} {c['sub_domain_accuracy']:.0%} of {c['answers']:.0f}"
                      for level, c in report.calibration.items()))


def add_commands(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = sub.add_parser("analyze", help="analyse one workload directory (or a bundled sample)")
    p.add_argument("path", nargs="?", type=Path, help="directory with scenario.toml and <node>/<source>.log")
    p.add_argument("--sample", nargs="?", const=DEFAULT_SAMPLE, default=None, metavar="NAME",
                   help=f"analyse a bundled sample (default {DEFAULT_SAMPLE}; see `firstfault samples`)")
    p.add_argument("--json", action="store_true", help="print the result JSON instead of the report")
    p.add_argument("--workers", type=worker_count, default=0, metavar="N|auto",
                   help="scan files in N parallel tasks (default auto: one per core, up to 8, or per CPU of the Ray "
                        "cluster, when the evidence is at least 64 MiB in several files; otherwise in-process). The "
                        "result is the same")
    p.add_argument("--executor", choices=EXECUTORS, default="local",
                   help="where the parallel tasks run: local worker processes (default), or Ray tasks on the cluster "
                        "at RAY_ADDRESS (else a local one; needs pip install 'firstfault[ray]'). The result is the same")
    p.add_argument("--timezone", action="append", default=[], metavar="NODE:SOURCE=ZONE",
                   help="read the zone-less stamps of a node's source as local time of ZONE (an IANA name; NODE or "
                        "SOURCE may be *), e.g. '*:syslog=Asia/Singapore'; repeatable. Without it, a stream that fits "
                        "the workload's window only at one whole-hour offset is read at that offset")
    p.add_argument("--max-decompressed-mib", type=_mebibytes, default=Params().max_decompressed_bytes // 1024**2,
                   metavar="MIB", help="read a .gz evidence file up to this many decompressed MiB (default %(default)s, "
                                       "8 GiB); past it the rest is skipped and the result says it is partial")
    p.add_argument("--history", type=Path, default=None, metavar="FILE",
                   help="earlier findings on the workload's nodes (JSON or JSON Lines; docs/quickstart.md, 'Node fault "
                        "history'): the same fault on the same node and GPU before supports blaming it now")
    p.add_argument("--history-window", type=_days, default=None, metavar="DAYS",
                   help="count only findings this many days before the workload (default: the file's window_days, "
                        "else 30)")
    p.add_argument("--timings", type=Path, default=None, metavar="FILE",
                   help="write where the time went (seconds per phase, bytes, lines) as JSON to FILE ('-': stderr)")
    p.set_defaults(func=cmd_analyze)

    p = sub.add_parser("samples", help="list the bundled sample workloads")
    p.add_argument("--json", action="store_true")
    p.set_defaults(func=cmd_samples)

    p = sub.add_parser("rules", help="inspect and test the rule catalog")
    rsub = p.add_subparsers(dest="rules_command", required=True, metavar="RULES_COMMAND")
    q = rsub.add_parser("list", help="list every rule")
    q.add_argument("--json", action="store_true")
    q = rsub.add_parser("test", help="run every inline case (optionally with extra rule files)")
    q.add_argument("--file", type=Path, action="append", help="an extra catalog TOML file to check with the rest")
    q = rsub.add_parser("show", help="show one rule or symptom")
    q.add_argument("name")
    q = rsub.add_parser("patterns", help="print every extractor pattern, one per line",
                        description="Print every extractor pattern, one per line. Python re syntax by default; "
                                    "with --ere converted to POSIX ERE for `LC_ALL=C grep -E -f` (docs/benchmarks.md).")
    q.add_argument("--ere", action="store_true",
                   help="convert to POSIX extended regular expressions (grep -E; \\b is the one GNU extension)")
    rsub.add_parser("docs", help="print the catalog documentation as Markdown (docs/rules.md)")
    p.set_defaults(func=cmd_rules)

    p = sub.add_parser("eval", help="score the engine on labelled corpora")
    p.add_argument("corpus", type=Path, nargs="+",
                   help="a corpus (directory of scenario directories) or a directory of corpora; several may be given")
    p.add_argument("--jobs", type=int, default=1, metavar="N",
                   help="analyse in N processes on the packaged catalog (the report is the same)")
    p.add_argument("--json", action="store_true")
    p.add_argument("--min-accuracy", type=float, default=None, help="fail below this sub_domain accuracy (0..1)")
    p.add_argument("--min-culprit", type=float, default=None, help="fail below this culprit exact-match rate")
    p.add_argument("--max-false-blame", type=int, default=None, help="fail above this many false infra blames")
    p.add_argument("--baseline", type=Path, default=None, metavar="FILE",
                   help="an earlier `eval --json` report of the same corpus: print (on stderr) each scenario fixed, "
                        "broken or answered differently since, and fail if any broke")
    p.set_defaults(func=cmd_eval)
