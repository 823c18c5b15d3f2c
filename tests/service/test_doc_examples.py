"""The worked examples in docs/service.md, run as written (with bash, curl and jq) against a real `firstfault serve`
on loopback, and their printed answers compared with the ones the doc shows."""

from __future__ import annotations

import json
import re
import subprocess
from pathlib import Path

from tests.service.live_server import Server

DOC = Path(__file__).resolve().parents[2] / "docs" / "service.md"


def _example(name: str) -> tuple[str, list[str]]:
    """The bash block after `<!-- doc-example: name -->` and the lines of the json block that follows it."""
    text = DOC.read_text(encoding="utf-8")
    found = re.search(rf"<!-- doc-example: {name} -->\n```bash\n(.*?)```.*?```json\n(.*?)```", text, re.S)
    assert found, f"docs/service.md has no doc-example {name!r}"
    return found.group(1), found.group(2).splitlines()


def test_the_v1_worked_example_runs_as_documented(tmp_path: Path) -> None:
    """curl and jq come from tests/support/setup-doc-tools.sh."""
    script, shown = _example("v1")
    server = Server.start(tmp_path)
    try:
        script = re.sub(r"^S=\S+$", f"S={server.url}", script, count=1, flags=re.M)
        assert f"S={server.url}" in script
        run = subprocess.run(["bash", "-euo", "pipefail", "-c", script], cwd=DOC.parents[1], capture_output=True,
                             text=True, timeout=120)
    finally:
        server.stop()
    assert run.returncode == 0, run.stderr
    printed = run.stdout.splitlines()
    assert len(printed) == len(shown)
    for got, want in zip(printed, shown, strict=True):
        got_json, want_json = json.loads(got), json.loads(want)
        if "observation_id" in want_json:   # ids differ per run: the shape and the count are what the doc promises
            assert got_json["observation_id"].endswith(want_json["observation_id"].rsplit("-", 1)[1])
            got_json["observation_id"] = want_json["observation_id"]
        assert got_json == want_json
