"""Static workload directories for the tests (the corpus format: scenario.toml and `<node>/<source>.log`), and
the labelled development corpus they sit next to."""

from __future__ import annotations

import re
import shutil
from collections.abc import Callable
from pathlib import Path

CORPUS = Path(__file__).resolve().parents[1] / "data" / "corpus" / "dev"

# The `make_workload` fixture (tests/conftest.py): write_workload with its parent directory bound.
WorkloadFactory = Callable[..., Path]


def write_workload(parent: Path, files: dict[str, list[str] | bytes], *, nodes: list[str] | None = None,
                   name: str = "wl", scheduler_state: str = "FAILED", start: str = "2025-01-01T00:00:00Z",
                   end: str = "2025-01-01T02:00:00Z") -> Path:
    """Write `parent/name`: a scenario.toml and one log per `{"node/source": [lines] | bytes}` entry."""
    root = parent / name
    root.mkdir()
    all_nodes = nodes or sorted({key.split("/")[0] for key in files})
    node_list = ", ".join(f'"{n}"' for n in all_nodes)
    (root / "scenario.toml").write_text(
        f'id = "{name}"\n[workload]\nscheduler = "slurm"\njob_id = "1"\nscheduler_state = "{scheduler_state}"\n'
        f'exit_code = "1:0"\nstart_time = "{start}"\nend_time = "{end}"\nnodes = [{node_list}]\n'
        "ranks_per_node = 8\n")
    for key, content in files.items():
        node, source = key.split("/")
        path = root / node / f"{source}.log"
        path.parent.mkdir(exist_ok=True)
        path.write_bytes(content if isinstance(content, bytes) else ("\n".join(content) + "\n").encode())
    return root


def sample_copies(root: Path, copies: int) -> Path:
    """`root` holding `copies` renamed copies of every bundled sample (`<sample>-NN`: 5 x copies workloads)."""
    from firstfault.samples import samples_root

    for sample in sorted(p for p in samples_root().iterdir() if (p / "scenario.toml").exists()):
        for n in range(copies):
            target = root / f"{sample.name}-{n:02d}"
            shutil.copytree(sample, target)
            scenario = target / "scenario.toml"
            scenario.write_text(re.sub(r'^id = "(.*)"$', rf'id = "\1-{n:02d}"', scenario.read_text(), count=1,
                                       flags=re.M))
    return root
