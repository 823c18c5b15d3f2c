"""Peak-memory growth of the engine (`analyze_path`) and of the Blueprint's file reader (`read_batches` into a
session) over a workload whose n1/syslog.log holds a huge line; and what each of them found.

    python -m tests.reliability.scripts.huge_line WORKLOAD_DIR
"""

from __future__ import annotations

import argparse
from pathlib import Path

from firstfault.blueprint.attribution import ingest_batch
from firstfault.blueprint.collectors.files import FileScope, read_batches
from firstfault.engine import SourceKind
from firstfault.engine.evidence import read_context
from firstfault.tools.verify import default_engine
from tests.reliability.scripts.measure import done, peak_kib


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("root", type=Path, help="a static workload directory with n1/syslog.log")
    root = parser.parse_args(argv).root
    engine = default_engine()
    before = peak_kib()
    result = engine.analyze_path(root)
    engine_kib = peak_kib() - before
    session = engine.session(read_context(root))
    before = peak_kib()
    lines = 0
    for batch in read_batches(root / "n1" / "syslog.log", FileScope("n1", SourceKind.SYSLOG, "syslog.log", None, (root.resolve(),))):
        lines += batch.count()
        ingest_batch(session, batch)
    blueprint_kib = peak_kib() - before
    read = session.attribute()
    done(engine_kib=engine_kib, blueprint_kib=blueprint_kib, lines=lines,
         culprits=[c.node for c in result.culprit_nodes], issues=result.coverage.issues,
         blueprint_culprits=[c.node for c in read.culprit_nodes])


if __name__ == "__main__":
    main()
