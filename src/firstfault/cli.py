"""The `firstfault` command line: a thin shell over the engine, the service, the Blueprint and the dashboard."""

from __future__ import annotations

import argparse
import importlib
import sys
from collections.abc import Callable

from rich.console import Console
from rich.markup import escape

# Subcommands contributed by the parts of the package: module path -> function adding its parsers.
_PART_COMMANDS = (
    "firstfault.engine.commands",
    "firstfault.blueprint.cli",
    "firstfault.service.cli",
    "firstfault.dashboard.cli",
)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="firstfault",
        description="Say why a distributed GPU workload failed: the fault that began it and the node it began on.")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for module_name in _PART_COMMANDS:
        add: Callable[[argparse._SubParsersAction], None] = importlib.import_module(module_name).add_commands
        add(sub)
    return parser


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        return int(args.func(args) or 0)
    except KeyboardInterrupt:
        return 130
    except BrokenPipeError:
        return 0


def error(message: str) -> int:
    """Print a one-line error for people (no traceback) and return the CLI's error exit status."""
    Console(stderr=True, soft_wrap=True).print(f"[bold red]error:[/bold red] {escape(message)}", highlight=False)
    return 2


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
