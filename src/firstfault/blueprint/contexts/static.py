"""Static workloads: directories in the corpus format (`scenario.toml` + `<node>/<source>.log`), the format
`firstfault analyze` reads. The connector finds the workloads; `StaticEvidence` collects their log files.

    --configs DIR                                  (the same as the next line)
    --connector context static path DIR [path DIR2 ...]

DIR is one workload directory or a directory of them.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from firstfault.blueprint.base import Discovery, LineBatch
from firstfault.blueprint.collectors.files import FileScope, read_files
from firstfault.blueprint.config import ConnectorSpec
from firstfault.blueprint.options import LabelOptions, option, parse_options
from firstfault.engine import ExecutionContext
from firstfault.engine.evidence import SCENARIO_FILE, evidence_files, read_context
from firstfault.errors import CollectorError, ConfigError, EvidenceError, NothingInScope

STATIC_DIR = "static_dir"


def workload_dirs(root: Path) -> list[Path]:
    if (root / SCENARIO_FILE).is_file():
        return [root]
    return sorted(p for p in root.iterdir() if (p / SCENARIO_FILE).is_file())


@dataclass(frozen=True)
class StaticOptions(LabelOptions):
    path: tuple[str, ...] = option((), "a workload directory or a directory of them", split=True)


class StaticContexts:
    kind = "context"
    Options = StaticOptions

    def __init__(self, spec: ConnectorSpec) -> None:
        options = parse_options(StaticOptions, spec)
        self.label = options.label or spec.name
        self.roots = [Path(p).expanduser() for p in options.path]
        if not self.roots:
            raise ConfigError("context static: give `path DIR` (or --configs DIR)")

    def discover(self) -> Discovery:
        found = Discovery()
        for root in self.roots:
            if not root.is_dir():
                found.problems.append(f"{root}: not a directory")
                continue
            for directory in workload_dirs(root):
                try:
                    ctx = read_context(directory)
                except EvidenceError as exc:
                    found.problems.append(str(exc))
                    continue
                except Exception as exc:  # noqa: BLE001 - one unreadable workload never hides the others
                    found.problems.append(f"{directory / SCENARIO_FILE}: cannot be read: "
                                          f"{exc.__class__.__name__}: {exc}")
                    continue
                ctx.metadata[STATIC_DIR] = str(directory.resolve())
                found.contexts.append(ctx)
        return found


class StaticEvidence:
    """The log files that ship with a static workload (never window-filtered: they are already scoped)."""

    kind = "logs"
    label = "static"

    def applies(self, ctx: ExecutionContext) -> bool:
        return STATIC_DIR in ctx.metadata

    def collect(self, ctx: ExecutionContext) -> Iterator[LineBatch]:
        """The workload's files; what the engine sets aside (a symlink out of the directory, a FIFO, a name
        that is not evidence: what `analyze` records as issues) makes the report an `error` naming it."""
        directory = Path(ctx.metadata[STATIC_DIR])
        files, set_aside = evidence_files(directory)
        not_read = f"{len(set_aside)} entr{'y' if len(set_aside) == 1 else 'ies'} not read: " + \
            "; ".join(f"{directory / name}: {reason}" for name, reason in set_aside[:3])
        if not files:
            raise (CollectorError(not_read) if set_aside else
                   NothingInScope(f"{directory}: no <node>/applog.log, syslog.log or scheduler.log"))
        roots = (directory.resolve(),)   # a workload's files never lead out of its directory
        try:
            yield from read_files((item.path, FileScope(item.node, item.source,
                                                        str(item.path.relative_to(directory)), None, roots))
                                  for item in files)
        except CollectorError as exc:
            raise CollectorError("; ".join([str(exc), *([not_read] if set_aside else [])])) from None
        if set_aside:
            raise CollectorError(not_read)
