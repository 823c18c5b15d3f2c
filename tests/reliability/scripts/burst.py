"""Peak-memory growth, time and output size of attributing a workload (every evidence file ingested into one
engine session with the given scan block size), and the XID-79 symptom's count and evidence.

    python -m tests.reliability.scripts.burst WORKLOAD_DIR --block-size BYTES
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

from firstfault.engine.evidence import evidence_files, read_context
from firstfault.tools.verify import default_engine
from tests.reliability.scripts.measure import done, peak_kib


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("root", type=Path, help="a static workload directory")
    parser.add_argument("--block-size", type=int, required=True, help="the engine's scan block, in bytes")
    args = parser.parse_args(argv)
    engine = default_engine()
    before = peak_kib()
    started = time.perf_counter()
    session = engine.session(read_context(args.root), block_size=args.block_size)
    for item in evidence_files(args.root)[0]:
        engine.ingest_file(session, item.node, item.source, item.path)
    result = session.attribute()
    seconds = time.perf_counter() - started
    xid = [s for s in result.symptoms if s.symptom == "XID-79"]
    done(growth_kib=peak_kib() - before, seconds=seconds, json_bytes=len(result.to_json()),
         count=xid[0].count if xid else 0, evidence=len(xid[0].evidence) if xid else 0,
         culprits=[c.node for c in result.culprit_nodes])


if __name__ == "__main__":
    main()
