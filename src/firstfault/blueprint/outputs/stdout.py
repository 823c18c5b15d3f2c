"""stdout output: one JSON line per `AttributionBlueprintResult` (progress and the summary go to stderr)."""

from __future__ import annotations

import sys
from dataclasses import dataclass
from typing import TextIO

from firstfault.blueprint.config import ConnectorSpec
from firstfault.blueprint.options import LabelOptions, parse_options
from firstfault.blueprint.result import AttributionBlueprintResult
from firstfault.engine import ExecutionContext


@dataclass(frozen=True)
class StdoutOptions(LabelOptions):
    pass


class StdoutOutput:
    kind = "output"
    Options = StdoutOptions

    def __init__(self, spec: ConnectorSpec, stream: TextIO | None = None) -> None:
        options = parse_options(StdoutOptions, spec)
        self.label = options.label or spec.name
        self.stream = stream or sys.stdout

    def already_attributed(self, ctx: ExecutionContext) -> bool:
        return False

    def write(self, result: AttributionBlueprintResult) -> None:
        self.stream.write(result.model_dump_json() + "\n")
        self.stream.flush()

    def flush(self) -> None:
        return None

    def close(self) -> None:
        return None
