"""The `firstfault` command line: a thin shell over the engine, the service, the Blueprint and the dashboard."""

from __future__ import annotations

import sys
from collections.abc import Callable
from typing import TYPE_CHECKING

from firstfault import __version__
from firstfault.errors import FirstfaultError

if TYPE_CHECKING:
    import argparse

# Subcommands contributed by the parts of the package: module path -> function adding its parsers.
_PART_COMMANDS = (
    "firstfault.cli.engine",
    "firstfault.cli.blueprint",
    "firstfault.cli.service",
    "firstfault.cli.dashboard",
)


# The engine's own commands. When one of them is run, only the engine part is imported: `firstfault analyze`
# (the command people time against grep) does not pay for importing the service and the Blueprint.
_ENGINE_COMMANDS = frozenset({"analyze", "samples", "rules", "eval"})


def build_parser(argv: list[str] | None = None) -> argparse.ArgumentParser:
    import argparse
    import importlib

    parser = argparse.ArgumentParser(
        prog="firstfault",
        description="Say why a distributed GPU workload failed: the fault that began it and the node it began on.")
    parser.add_argument("--version", action="version", version=f"firstfault {__version__}")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    command = next((a for a in argv or [] if not a.startswith("-")), None)
    parts = _PART_COMMANDS[:1] if command in _ENGINE_COMMANDS else _PART_COMMANDS
    for module_name in parts:
        add: Callable[[argparse._SubParsersAction[argparse.ArgumentParser]], None] = importlib.import_module(module_name).add_commands
        add(sub)
    return parser


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv == ["--version"]:   # answered before argparse or any part of the package is imported
        print(f"firstfault {__version__}")
        return 0
    parser = build_parser(argv)
    args = parser.parse_args(argv)
    try:
        return int(args.func(args) or 0)
    except FirstfaultError as exc:  # every error raised on purpose: one line for people, exit 2
        return error(str(exc))
    except KeyboardInterrupt:
        return 130
    except BrokenPipeError:
        return 0


def error(message: str) -> int:
    """Print a one-line error for people (no traceback) and return the CLI's error exit status."""
    from rich.console import Console  # imported here: a command that succeeds does not pay for it
    from rich.markup import escape

    Console(stderr=True, soft_wrap=True).print(f"[bold red]error:[/bold red] {escape(message)}", highlight=False)
    return 2


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
