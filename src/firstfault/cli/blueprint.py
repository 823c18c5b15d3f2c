"""`firstfault blueprint`: discover workloads, collect evidence, attribute them, store the results."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from rich.console import Console

from firstfault.blueprint.config import BlueprintConfig, ConnectorSpec, apply_environment, load_toml, spec_from_words
from firstfault.blueprint.connectors import build_plan
from firstfault.blueprint.runner import Runner, stop_on_signals
from firstfault.cli import error
from firstfault.cli.engine import worker_count
from firstfault.errors import ConfigError, ExecutorError, SchemaError
from firstfault.executor import EXECUTORS, make_executor
from firstfault.timeinput import parse_duration


def build_config(args: argparse.Namespace) -> BlueprintConfig:
    """The config file (if any), then the command line on top, then the environment."""
    config, configs = load_toml(args.config) if args.config else (BlueprintConfig(), [])
    configs += [str(p) for p in args.configs or []]
    if configs:
        config.connectors.insert(0, ConnectorSpec("context", "static", {"path": configs}))
    config.connectors += [spec_from_words(words) for words in args.connector or []]
    if args.margin is not None:
        config.margin = parse_duration(args.margin)
    if args.interval is not None:
        config.interval = parse_duration(args.interval)
    if args.collect_timeout is not None:
        config.collect_timeout = parse_duration(args.collect_timeout)
    if args.workers is not None:
        config.workers = args.workers
    config.executor = args.executor or config.executor
    config.force = args.force or config.force
    config.watch = args.watch or config.watch
    apply_environment(config)
    return config


def cmd_blueprint(args: argparse.Namespace) -> int:
    try:
        config = build_config(args)
        plan = build_plan(config)
    except (ConfigError, SchemaError, OSError) as exc:
        return error(str(exc))
    try:
        executor = make_executor(config.executor)
    except ExecutorError as exc:
        plan.close()
        return error(str(exc))
    console = Console(stderr=True)
    progress = args.progress if args.progress is not None else sys.stderr.isatty()
    runner = Runner(plan, config, console=console, progress=progress, executor=executor)
    try:
        if config.watch:
            with stop_on_signals(runner):
                runner.watch(cycles=args.cycles)
        else:
            runner.run_once()
    finally:
        executor.close()
        plan.close()
    if not args.quiet:
        runner.print_summary()
    if runner.stopped_by:   # a watch asked to stop (systemctl stop, Ctrl-C): its passes were logged as they ran
        return 0
    failed = runner.summary.failed or runner.summary.problems
    return 1 if failed or (args.strict and runner.summary.incomplete) else 0


def add_commands(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = sub.add_parser(
        "blueprint", help="discover finished workloads, collect their evidence, attribute them, store the results",
        description="Discover finished workloads (Slurm, Kueue, static directories), collect their logs and "
                    "metrics, attribute them (in-process, or through the service) and write the results "
                    "(stdout, SQLite). Connector options: docs/blueprint.md.")
    p.add_argument("--configs", type=Path, action="append", metavar="DIR",
                   help="static workloads: a workload directory or a directory of them (repeatable)")
    p.add_argument("--connector", nargs="+", action="append", metavar="WORD",
                   help="KIND [NAME] [key value]...: e.g. `output db sqlite path r.db`, `logs loki url URL` "
                        "(repeatable)")
    p.add_argument("--config", type=Path, metavar="FILE", help="a TOML file with the same content")
    p.add_argument("--margin", metavar="DURATION", help="widen every workload window by this much (default 10m)")
    p.add_argument("--workers", type=worker_count, metavar="N|auto",
                   help="workloads attributed in parallel (default 1; auto: one per core here, or per CPU of the "
                        "Ray cluster)")
    p.add_argument("--executor", choices=EXECUTORS, default=None,
                   help="where workloads are attributed: threads here (local, the default), or Ray tasks on the "
                        "cluster at RAY_ADDRESS (else a local one; needs pip install 'firstfault[ray]')")
    p.add_argument("--collect-timeout", metavar="DURATION",
                   help="the longest one collector may take for one workload (default 10m)")
    p.add_argument("--force", action="store_true", help="attribute again what an output already holds")
    p.add_argument("--watch", action="store_true",
                   help="keep discovering newly finished workloads (one JSON line per pass on stderr; SIGTERM or "
                        "SIGINT finishes the workloads in progress, then exits 0)")
    p.add_argument("--interval", metavar="DURATION", help="time between discovery passes in watch mode (60s)")
    p.add_argument("--cycles", type=int, metavar="N", help="stop watching after N discovery passes")
    p.add_argument("--progress", action=argparse.BooleanOptionalAction, default=None,
                   help="show a progress bar (default: when stderr is a terminal)")
    p.add_argument("--quiet", action="store_true", help="no summary at the end")
    p.add_argument("--strict", action="store_true",
                   help="also exit 1 when a workload was attributed with evidence missing: a collector failed, or "
                        "the context could not locate some (e.g. a Slurm job's output path)")
    p.set_defaults(func=cmd_blueprint)
