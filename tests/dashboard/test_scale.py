"""100k workload attempts (synthetic rows in the Blueprint's schema): server-side paging, sorting and filters
return the right rows, first page to last. A correctness test; docs/benchmarks.md has the timings."""

from __future__ import annotations

import re
import time
from collections import Counter
from collections.abc import Iterator
from pathlib import Path

import pytest
from fastapi.testclient import TestClient

from firstfault.dashboard.app import create_app
from tests.dashboard import synthetic
from tests.dashboard.helpers import fingerprint

N = 100_000
IDS = range(1, N + 1)


@pytest.fixture(scope="module")
def big_db(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return synthetic.build(tmp_path_factory.mktemp("big") / "big.db", N)


@pytest.fixture(scope="module")
def big(big_db: Path) -> Iterator[TestClient]:
    with TestClient(create_app(big_db, allowed_hosts=["testserver"])) as client:
        yield client


def ids(html: str) -> list[int]:
    return [int(m) for m in re.findall(r'class="wl" href="[^"]*">slurm:synth:(\d+)</a>', html)]


def total(html: str) -> int:
    m = re.search(r'of ([\d,]+)</span>', html)
    return int(m.group(1).replace(",", "")) if m else 0


def get(client: TestClient, url: str, timings: dict[str, float]) -> str:
    started = time.perf_counter()
    r = client.get(url)
    timings[url] = time.perf_counter() - started
    assert r.status_code == 200, (url, r.status_code, r.text[:500])
    return r.text


def test_pages_sorts_and_filters_over_100k_rows(big: TestClient, big_db: Path) -> None:
    before = fingerprint(big_db)
    timings: dict[str, float] = {}
    newest_first = sorted(IDS, reverse=True)

    html = get(big, "/workloads", timings)
    assert total(html) == N and ids(html) == newest_first[:50]
    assert "page 1 of 2,000" in html
    assert ids(get(big, "/workloads?page=2", timings)) == newest_first[50:100]
    assert ids(get(big, "/workloads?page=1999", timings)) == newest_first[-100:-50]     # read backwards
    assert ids(get(big, "/workloads?page=2000", timings)) == newest_first[-50:]
    assert ids(get(big, "/workloads?page=1000&per_page=100", timings)) == newest_first[99_900:100_000]
    assert ids(get(big, "/workloads?page=2001", timings)) == []
    assert ids(get(big, "/workloads?order=asc&page=2000", timings)) == list(IDS)[-50:]
    assert ids(get(big, "/workloads?sort=workload&order=asc&page=1234", timings)) == list(IDS)[61_650:61_700]

    nvlink = [i for i in newest_first if synthetic.sub_domain(i) == "nvlink"]
    html = get(big, "/workloads?sub_domain=nvlink", timings)
    assert total(html) == len(nvlink) and ids(html) == nvlink[:50]
    last = -(-len(nvlink) // 50)
    assert ids(get(big, f"/workloads?sub_domain=nvlink&page={last}", timings)) == nvlink[(last - 1) * 50:]

    hw_in_march = [i for i in newest_first if synthetic.outcome(i) == "Fail InfraHW"
                   and "2026-03-01" <= synthetic.end_time(i).isoformat() < "2026-03-15"]
    html = get(big, "/workloads?outcome=Fail+InfraHW&from=2026-03-01&to=2026-03-15&per_page=200", timings)
    assert total(html) == len(hw_in_march) and ids(html) == hw_in_march[:200]

    blamed = [i for i in newest_first if "gpu-0040" in synthetic.culprits(i)]
    html = get(big, "/workloads?node=gpu-0040&role=culprit", timings)
    assert total(html) == len(blamed) > 0 and ids(html) == blamed[:50]
    ran = [i for i in newest_first if "gpu-0041" in synthetic.nodes(i)]
    assert total(get(big, "/workloads?node=gpu-0041", timings)) == len(ran)

    timeouts = [i for i in newest_first if synthetic.terminal_state(i) == "TIMEOUT"]
    html = get(big, "/workloads?state=TIMEOUT&page=3", timings)
    assert total(html) == len(timeouts) and ids(html) == timeouts[100:150]

    matching = [i for i in newest_first if "synth:0999" in synthetic.workload_id(i)]
    html = get(big, "/workloads?q=synth:0999", timings)
    assert total(html) == len(matching) == 100 and ids(html) == matching[:50]

    # the other pages stay correct at this size
    html = get(big, "/", timings)
    assert ">100,000</span>" in html
    blame_counts = Counter(n for i in IDS for n in synthetic.culprits(i))
    html = get(big, "/nodes", timings)
    top = re.search(r'class="node culprit" href="/nodes/([^"]+)">.*?role=culprit&amp;failed=1">([\d,]+)</a>', html,
                    re.DOTALL)
    assert top and int(top.group(2)) == max(blame_counts.values()) == blame_counts[top.group(1)]
    html = get(big, "/nodes/gpu-0040", timings)
    assert f">{len(blamed)}</span><span class=\"l\">failed workloads it was blamed for" in html
    get(big, "/rules", timings)

    slowest = sorted(timings.items(), key=lambda kv: -kv[1])[:5]
    print("\nslowest pages over 100k rows: " + ", ".join(f"{u} {t * 1000:.0f} ms" for u, t in slowest))
    assert fingerprint(big_db) == before
