"""Engine tunables. Defaults are documented in docs/rules.md; the service and CLI can override them."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Params:
    # Two root candidates on different nodes whose first times differ by less than this are treated as
    # simultaneous: node clocks (and log shippers) disagree by this much in practice.
    clock_skew_s: float = 120.0
    # Kernel and GPU events of one node separated by less than this belong to one burst (NVIDIA Fleet
    # Intelligence groups Xids until 3 minutes of silence).
    burst_gap_s: float = 180.0
    # The systemic guard: when one root signature appears on more than this share of the job's nodes
    # (and on at least `systemic_min_nodes`), it is a shared cause and no single node is blamed.
    systemic_share: float = 0.5
    systemic_min_nodes: int = 3
    # Bounds that keep one session's memory fixed whatever the input.
    max_event_keys: int = 200_000
    max_values_per_attribute: int = 64
    max_evidence_chars: int = 4096
    # A `.gz` evidence file is decompressed up to this many bytes (8 GiB); the rest is not read and the result
    # says so (partial): a small file that inflates without end costs bounded time.
    max_decompressed_bytes: int = 8 * 1024**3
    # Streams whose zone-less stamps are local time, as (node, source, IANA zone); "*" matches any node or
    # source. Set by `analyze --timezone`; a stream without an entry is inferred (engine/clock.py).
    source_timezones: tuple[tuple[str, str, str], ...] = ()
