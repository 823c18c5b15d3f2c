"""What the Blueprint's HTTP client costs against a hostile server: an answer that never ends (4 GiB declared)
read at the default 64 MiB cap, and a server sending one byte every 2 s (of the body, or of endless headers)
against a 5 s request deadline. The server is the Loki test server behind the fault proxy, on loopback.

    python -m tests.reliability.scripts.http_caps
"""

from __future__ import annotations

import time

from firstfault.blueprint.http import RetryingClient
from firstfault.errors import HttpError
from tests.blueprint.loki_server import LokiTestServer
from tests.reliability.fault_proxy import FaultProxy
from tests.reliability.scripts.measure import done, peak_kib

QUERY = {"query": '{hostname="gpu-l01"}', "start": "0", "end": "1", "limit": "10", "direction": "forward"}


def _failure(client: RetryingClient) -> tuple[float, str]:
    """How long one query took to fail, and why."""
    started = time.monotonic()
    try:
        client.get_json("/loki/api/v1/query_range", QUERY)
    except HttpError as exc:
        return time.monotonic() - started, str(exc)
    raise AssertionError("the query did not fail")


def main() -> None:
    server = LokiTestServer()
    proxy = FaultProxy(server.url)
    try:
        before = peak_kib()
        proxy.faults = ["huge"]
        huge_s, huge_reason = _failure(RetryingClient(proxy.url, timeout=60, retries=0))
        huge_growth_mib = (peak_kib() - before) / 1024
        proxy.trickle_every = 2.0
        cut_after: dict[str, float] = {}
        for fault in ("trickle", "trickle_headers"):
            proxy.faults = [fault]
            cut_after[f"{fault}_cut_after_s"] = round(_failure(RetryingClient(proxy.url, timeout=5, retries=0))[0], 2)
        done(huge_s=round(huge_s, 2), huge_peak_growth_mib=round(huge_growth_mib, 1),
             huge_sent_mib=round(proxy.huge_bytes_sent / 2**20), huge_reason=huge_reason[-60:], **cut_after)
    finally:
        proxy.stop()
        server.stop()


if __name__ == "__main__":
    main()
