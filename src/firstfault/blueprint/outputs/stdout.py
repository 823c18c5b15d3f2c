"""stdout output: one JSON line per `AttributionBlueprintResult` (progress and the summary go to stderr)."""

from __future__ import annotations

import sys
from typing import TextIO

from firstfault.blueprint.config import ConnectorSpec
from firstfault.blueprint.result import AttributionBlueprintResult
from firstfault.engine import ExecutionContext


class StdoutOutput:
    kind = "output"
    OPTIONS = ("label",)

    def __init__(self, spec: ConnectorSpec, stream: TextIO | None = None) -> None:
        self.label = spec.label
        self.stream = stream or sys.stdout

    def already_attributed(self, ctx: ExecutionContext) -> bool:
        return False

    def write(self, result: AttributionBlueprintResult) -> None:
        self.stream.write(result.model_dump_json() + "\n")
        self.stream.flush()

    def close(self) -> None:
        return None
