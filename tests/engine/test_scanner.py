"""The streaming scanner finds exactly the lines Python's re finds, with correct line numbers, in bounded
memory, across block boundaries and over-long lines."""

from __future__ import annotations

import io
import random
import re

from firstfault.engine.scanner import SourceScanner, iter_blocks

PATTERNS = [r"NVRM: Xid \(PCI:[0-9a-f:]+\): \d+", r"NCCL WARN .*status=12", r"(?i:out of memory)"]


def _reference(lines: list[str]) -> list[tuple[int, list[int]]]:
    out = []
    for n, line in enumerate(lines, start=1):
        ids = [i for i, p in enumerate(PATTERNS) if re.search(p, line)]
        if ids:
            out.append((n, ids))
    return out


def _scan(data: bytes, block_size: int, max_line: int = 1 << 20) -> list[tuple[int, list[int]]]:
    scanner = SourceScanner(PATTERNS)
    found = []
    for block in iter_blocks(io.BytesIO(data), block_size=block_size, max_line_bytes=max_line):
        lines_before = 0
        pos = 0
        for start, _end, ids in scanner.scan(block.data):
            lines_before += block.data.count(b"\n", pos, start)
            pos = start
            found.append((block.first_line + lines_before, ids))
    return found


def test_matches_reference_for_many_block_sizes() -> None:
    rnd = random.Random(7)
    vocab = ["iteration 5 loss 2.1", "n1:1:1 [0] NCCL WARN NET/IB : x status=12 y", "NCCL INFO ok",
             "kernel: NVRM: Xid (PCI:0000:9a:00): 79, pid=1", "CUDA error: OUT OF MEMORY here", "", "x" * 300]
    lines = [rnd.choice(vocab) for _ in range(3000)]
    data = ("\n".join(lines) + "\n").encode()
    want = _reference(lines)
    for block_size in (17, 64, 1000, 4096, 1 << 20):
        assert _scan(data, block_size) == want, block_size


def test_file_without_final_newline() -> None:
    assert _scan(b"a\nNVRM: Xid (PCI:0000:01:00): 48", 4) == [(2, [0])]


def test_over_long_line_is_truncated_and_numbering_continues() -> None:
    data = b"y" * 10_000 + b"\nNCCL WARN a status=12\n"
    blocks = list(iter_blocks(io.BytesIO(data), block_size=1024, max_line_bytes=2048))
    assert blocks[0].truncated_lines == [1] and len(blocks[0].data) == 2048
    assert _scan(data, 1024, max_line=2048) == [(2, [1])]


def test_offsets_point_at_line_starts() -> None:
    data = b"aa\nbbb\ncccc\n"
    blocks = list(iter_blocks(io.BytesIO(data), block_size=4))
    for block in blocks:
        assert data[block.start_offset:block.start_offset + len(block.data)] == block.data


def test_sampled_patterns_report_first_and_last_match_only() -> None:
    patterns = [r"ERROR \d+", r"iteration \d+"]
    scanner = SourceScanner(patterns, sampled=frozenset({1}))
    lines = [f"iteration {i}" if i % 3 else f"ERROR {i}" for i in range(60_000)]
    data = "\n".join(lines).encode()
    got = scanner.scan(data)
    errors = [start for start, _end, ids in got if ids == [0]]
    progress = [data[start:end] for start, end, ids in got if ids == [1]]
    assert len(errors) == 20_000
    assert progress == [b"iteration 1", b"iteration 59999"]


def test_sampled_last_match_found_outside_the_tail_window() -> None:
    scanner = SourceScanner([r"ERROR", r"iteration \d+"], sampled=frozenset({1}))
    data = b"iteration 1\niteration 2\n" + b"x" * (3 * 1024 * 1024) + b"\nend"
    got = [data[s:e] for s, e, ids in scanner.scan(data)]
    assert got == [b"iteration 1", b"iteration 2"]
