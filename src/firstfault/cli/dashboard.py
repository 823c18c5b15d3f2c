"""`firstfault dashboard` (the read-only web UI over a results database) and `firstfault quickstart` (the bundled
samples attributed into a fresh database by the in-process Blueprint, then the dashboard over it)."""

from __future__ import annotations

import argparse
import ipaddress
import os
import socket
import sys
import threading
import time
import webbrowser
from pathlib import Path
from typing import Any
from urllib.parse import quote

from rich.console import Console

from firstfault.blueprint.resultsdb import is_postgres
from firstfault.cli import error
from firstfault.dashboard.db import RepeatPolicy
from firstfault.errors import ConfigError, DatabaseError
from firstfault.timeinput import parse_duration

DEFAULT_PORT = 8080
QUICKSTART_DB = Path(".firstfault") / "quickstart.db"


def add_commands(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = sub.add_parser("dashboard", help="the read-only web dashboard over a results database",
                       description="Serve the read-only dashboard over a results database written by `firstfault "
                                   "blueprint ... --connector output db sqlite path FILE` (or `... db postgres dsn "
                                   "DSN`). The database is opened read-only; no page writes.")
    p.add_argument("--db", type=_db_target, metavar="FILE|DSN",
                   default=_env_path("FIRSTFAULT_SQLITE_PATH") or os.environ.get("FIRSTFAULT_POSTGRES_DSN") or None,
                   help="the results database: a SQLite file, or PostgreSQL as postgresql://USER@HOST:PORT/DB "
                        "(default: $FIRSTFAULT_SQLITE_PATH, else $FIRSTFAULT_POSTGRES_DSN)")
    _server_options(p)
    _repeat_options(p)
    p.set_defaults(func=cmd_dashboard)

    q = sub.add_parser("quickstart", help="attribute the bundled samples into SQLite and open the dashboard",
                       description="One command, no external services: the in-process Blueprint attributes the "
                                   "bundled sample workloads into a SQLite database, then the dashboard serves it. "
                                   "Ctrl-C stops everything.")
    q.add_argument("--db", type=Path, default=QUICKSTART_DB, metavar="FILE",
                   help=f"the database to write (default: {QUICKSTART_DB}; attempts already in it are kept)")
    q.add_argument("--no-browser", action="store_true", help="do not open a web browser")
    _server_options(q)
    _repeat_options(q)
    q.set_defaults(func=cmd_quickstart)


def _server_options(p: argparse.ArgumentParser) -> None:
    p.add_argument("--host", default="127.0.0.1", help="address to bind (default 127.0.0.1: loopback only)")
    p.add_argument("--port", type=int, default=DEFAULT_PORT, help=f"TCP port (default {DEFAULT_PORT}; 0 picks a "
                                                                  "free one)")
    p.add_argument("--log-level", choices=["debug", "info", "warning", "error"], default=None,
                   help="server log level (default: info for dashboard, warning for quickstart)")
    p.add_argument("--allowed-hosts", default=os.environ.get("FIRSTFAULT_ALLOWED_HOSTS", ""), metavar="NAMES",
                   help="Host header names answered, comma-separated ('*.example.org' for subdomains); others get "
                        "400 (DNS rebinding). Default: $FIRSTFAULT_ALLOWED_HOSTS, else the loopback names and --host")


def _repeat_options(p: argparse.ArgumentParser) -> None:
    default = RepeatPolicy()
    p.add_argument("--repeat-workloads", type=int, default=default.workloads, metavar="N",
                   help=f"a node is a repeat offender when it was the culprit of at least N distinct failed workloads "
                        f"within the window (default {default.workloads}; attempts of one workload count once)")
    p.add_argument("--repeat-window", default=f"{default.window.days}d", metavar="DURATION",
                   help=f"the repeat-offender window, e.g. 24h, 7d, 2w (default {default.window.days}d)")


def _repeat_policy(args: argparse.Namespace) -> RepeatPolicy:
    """ConfigError when the options do not make a policy."""
    return RepeatPolicy(args.repeat_workloads, parse_duration(args.repeat_window))


def _db_target(text: str) -> str | Path:
    """A PostgreSQL DSN as given, anything else a SQLite file."""
    return text if is_postgres(text) else Path(text)


def _env_path(name: str) -> Path | None:
    value = os.environ.get(name)
    return Path(value) if value else None


def cmd_dashboard(args: argparse.Namespace) -> int:
    if args.db is None:
        return error("give the results database: --db FILE or --db postgresql://... (or set FIRSTFAULT_SQLITE_PATH "
                     "or FIRSTFAULT_POSTGRES_DSN)")
    try:
        app = _app(args.db, _repeat_policy(args), args)
        sock = _bind(args.host, args.port)
    except (DatabaseError, ConfigError, OSError) as exc:
        return error(str(exc))
    console = Console(stderr=True, highlight=False, soft_wrap=True)
    url = _url(args.host, sock.getsockname()[1])
    console.print(f"[bold]firstfault dashboard[/bold] on {url}  (database {app.state.results.name}, read-only)")
    _warn_if_exposed(console, args.host)
    return _serve(app, sock, args.log_level or "info", console)


def cmd_quickstart(args: argparse.Namespace) -> int:
    console = Console(stderr=True, highlight=False, soft_wrap=True)
    db_path: Path = args.db.expanduser()
    try:
        repeat = _repeat_policy(args)
        sock = _bind(args.host, args.port)  # before the work: a busy port fails at once
    except (ConfigError, OSError) as exc:
        return error(str(exc))
    console.print("[bold]firstfault quickstart[/bold]: attributing the bundled samples (in-process Blueprint) …")
    started = time.monotonic()
    code = _attribute_samples(db_path, console)
    if code:
        sock.close()
        return code
    try:
        app = _app(db_path, repeat, args)
    except DatabaseError as exc:
        sock.close()
        return error(str(exc))
    url = _url(args.host, sock.getsockname()[1])
    out = Console(highlight=False, soft_wrap=True)
    out.print(f"\n[bold green]ready[/bold green] in {time.monotonic() - started:.1f} s\n")
    rows = [("dashboard", url),
            ("NVLink sample", f"{url}workload?id={quote('nvlink-walkthrough', safe='')}"),
            ("its culprit", f"{url}nodes/node-02"),
            ("all workloads", f"{url}workloads"),
            ("database", str(db_path.resolve())),
            ("again, later", f"{_program()} dashboard --db {db_path}")]
    for label, value in rows:
        out.print(f"  {label:<14} {value}")
    out.print("\nCtrl-C stops the dashboard.\n")
    _warn_if_exposed(console, args.host)
    if not args.no_browser and _has_display():
        threading.Thread(target=_open_browser, args=(app, url), daemon=True).start()
    return _serve(app, sock, args.log_level or "warning", console)


def _program() -> str:
    """How the user ran firstfault (`.venv/bin/firstfault` from scripts/run-sample), for commands we print."""
    argv0 = Path(sys.argv[0])
    if argv0.name != "firstfault":
        return "firstfault"
    try:
        return str(argv0.resolve().relative_to(Path.cwd().resolve()))
    except ValueError:
        return "firstfault" if not argv0.is_absolute() or argv0.parent in map(Path, os.get_exec_path()) else str(argv0)


def _attribute_samples(db_path: Path, console: Console) -> int:
    from firstfault.blueprint.config import BlueprintConfig, spec_from_words
    from firstfault.blueprint.connectors import build_plan
    from firstfault.blueprint.runner import Runner
    from firstfault.errors import ConfigError, SchemaError
    from firstfault.samples import samples_root

    config = BlueprintConfig(connectors=[
        spec_from_words(["context", "static", "path", str(samples_root())]),
        spec_from_words(["output", "db", "sqlite", "path", str(db_path)])])
    try:
        plan = build_plan(config)
    except (ConfigError, SchemaError, OSError) as exc:
        return error(f"{db_path}: {exc}")
    runner = Runner(plan, config, console=console, progress=False)
    try:
        runner.run_once()
    finally:
        plan.close()
    s = runner.summary
    console.print(f"  {s.attributed} attributed, {s.skipped} already in the database, {s.failed} failed")
    if s.failed or s.problems:
        runner.print_summary()
        return error("the samples could not all be attributed")
    return 0


def _app(db_path: str | Path, repeat: RepeatPolicy, args: argparse.Namespace) -> Any:
    from firstfault.dashboard.app import create_app
    from firstfault.service.settings import trusted_hosts

    return create_app(db_path, repeat=repeat, allowed_hosts=trusted_hosts(args.host, args.allowed_hosts))


def _bind(host: str, port: int) -> socket.socket:
    """Bind the listening socket here, so a busy port is a clear error before anything starts."""
    if not 0 <= port <= 65535:
        raise OSError(f"--port {port}: not a TCP port")
    try:
        family = socket.AF_INET6 if ipaddress.ip_address(host).version == 6 else socket.AF_INET
    except ValueError:
        family = socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind((host, port))
    except OSError as exc:
        sock.close()
        reason = "in use: pick another with --port" if exc.errno == 98 else exc.strerror or str(exc)
        raise OSError(f"cannot listen on {host}:{port}: {reason}") from None
    sock.listen(128)
    sock.set_inheritable(True)
    return sock


def _url(host: str, port: int) -> str:
    shown = f"[{host}]" if ":" in host else ("127.0.0.1" if host in ("0.0.0.0", "") else host)
    return f"http://{shown}:{port}/"


def _warn_if_exposed(console: Console, host: str) -> None:
    try:
        loopback = ipaddress.ip_address(host).is_loopback
    except ValueError:
        loopback = host == "localhost"
    if not loopback:
        console.print(f"[yellow]warning[/yellow]: listening on {host}: the dashboard has no authentication; "
                      "anyone who can reach this address can read every stored result")


def _serve(app: Any, sock: socket.socket, log_level: str, console: Console) -> int:
    import uvicorn

    config = uvicorn.Config(app, log_level=log_level, access_log=log_level in ("debug", "info"),
                            server_header=False, timeout_graceful_shutdown=5)
    server = uvicorn.Server(config)
    app.state.server = server
    try:
        server.run(sockets=[sock])
    except KeyboardInterrupt:  # uvicorn re-raises the Ctrl-C it handled, after shutting down cleanly
        pass
    finally:
        sock.close()
    if not server.started:
        return error("the dashboard did not start")
    console.print("stopped")
    return 0


def _has_display() -> bool:
    if sys.platform in ("darwin", "win32"):
        return True
    # without a display, webbrowser may pick a text browser that takes over the terminal
    return bool(os.environ.get("DISPLAY") or os.environ.get("WAYLAND_DISPLAY"))


def _open_browser(app: Any, url: str) -> None:
    for _ in range(100):
        server = getattr(app.state, "server", None)
        if server is not None and server.started:
            webbrowser.open(url)
            return
        time.sleep(0.1)
