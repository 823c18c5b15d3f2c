"""Benchmark of the Attribution Service over loopback: whole sessions of a 16-node workload with 100k log lines.

One session = create, one raw_text batch per node and source (32 batches), attribute, delete. The script starts
`firstfault serve` on a free loopback port (or uses --url), runs the sessions at each concurrency, checks every
diagnosis, and prints sessions/s and p50/p99 latencies as a Markdown table.

    .venv/bin/python bench/service_bench.py                      # 16 nodes, 100k lines, 20 sessions, c=1,2,4
    .venv/bin/python bench/service_bench.py --sessions 5 --concurrency 1
"""

from __future__ import annotations

import argparse
import os
import random
import socket
import subprocess
import sys
import time
from collections import defaultdict
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field

import httpx

START = 1772438405  # 2026-03-02T08:00:05Z
CULPRIT = 7


@dataclass
class Timings:
    by_kind: dict[str, list[float]] = field(default_factory=lambda: defaultdict(list))
    sessions: list[float] = field(default_factory=list)

    def merge(self, other: Timings) -> None:
        for kind, values in other.by_kind.items():
            self.by_kind[kind].extend(values)
        self.sessions.extend(other.sessions)


def stamp(second: float) -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(START + second)) + f".{int(second * 1000) % 1000:03d}Z"


def syslog_stamp(second: float) -> str:
    return time.strftime("%b %e %H:%M:%S", time.gmtime(START + second))


def node_logs(node: int, lines: int, rng: random.Random) -> tuple[str, str]:
    """(applog, syslog) of one node: training chatter, NCCL INFO, a GPU falling off the bus on the culprit."""
    name = f"node-{node:02d}"
    app_lines, sys_lines = lines * 4 // 5, lines - lines * 4 // 5
    app = []
    for i in range(app_lines):
        t = i * 3600 / app_lines
        if i % 7 == 0:
            app.append(f"{stamp(t)} {name}:{3000 + node}:{3100 + node} [{i % 8}] NCCL INFO Channel {i % 32:02d}/0 : "
                       f"{node * 8 + i % 8}[{i % 8}] -> {(node * 8 + i % 8 + 1) % 128}[{(i + 1) % 8}] via P2P/IPC")
        else:
            app.append(f"{stamp(t)} [rank{node * 8 + i % 8}]: step {i} loss {rng.uniform(1, 3):.4f} "
                       f"lr 3.0e-04 tokens/s {rng.randint(90_000, 110_000)}")
    if node != CULPRIT:
        app.append(f"{stamp(3601)} {name}:{3000 + node}:{3100 + node} [0] NCCL WARN NET/IB : Got completion from "
                   "peer 10.42.0.17<59012> with error 12, opcode 0, len 0, vendor err 129 (Recv)")
    sys_ = []
    for i in range(sys_lines):
        t = i * 3600 / sys_lines
        sys_.append(f"{syslog_stamp(t)} {name} systemd[1]: Started Session {1000 + i} of User slurm.")
    if node == CULPRIT:
        sys_.append(f"{syslog_stamp(3590)} {name} kernel: [266246.2] NVRM: Xid (PCI:0000:91:00): 79, pid=31, "
                    "name=python3, GPU has fallen off the bus.")
    return "\n".join(app) + "\n", "\n".join(sys_) + "\n"


def workload(nodes: int, lines: int, seed: int) -> list[tuple[str, str, str]]:
    rng = random.Random(seed)
    per_node = lines // nodes
    out = []
    for n in range(1, nodes + 1):
        app, sys_ = node_logs(n, per_node, rng)
        out += [(f"node-{n:02d}", "applog", app), (f"node-{n:02d}", "syslog", sys_)]
    return out


def context(nodes: int) -> dict:
    return {"workload_id": "bench", "scheduler": "slurm", "job_id": "1", "nodes": [f"node-{n:02d}" for n in
            range(1, nodes + 1)], "start_time": stamp(0), "end_time": stamp(3605), "scheduler_state": "FAILED"}


def one_session(url: str, ctx: dict, files: list[tuple[str, str, str]]) -> Timings:
    timings = Timings()
    with httpx.Client(base_url=url, timeout=120) as client:
        began = time.perf_counter()

        def call(kind: str, method: str, path: str, body: dict | None = None) -> httpx.Response:
            t0 = time.perf_counter()
            response = client.request(method, path, json=body)
            timings.by_kind[kind].append(time.perf_counter() - t0)
            if response.status_code >= 300:
                raise RuntimeError(f"{method} {path}: {response.status_code} {response.text[:300]}")
            return response

        sid = call("create", "POST", "/v2/sessions", ctx).json()["session_id"]
        for node, source, text in files:
            call("ingest", "POST", f"/v2/sessions/{sid}/observations",
                 {"format": "raw_text", "node": node, "source": source, "text": text})
        result = call("attribute", "POST", f"/v2/sessions/{sid}/attribute").json()["result"]
        call("delete", "DELETE", f"/v2/sessions/{sid}")
        timings.sessions.append(time.perf_counter() - began)
    culprits = [c["node"] for c in result["culprit_nodes"]]
    if culprits != [f"node-{CULPRIT:02d}"]:
        raise RuntimeError(f"unexpected diagnosis: {result['outcome']} {result['sub_domain']} {culprits}")
    return timings


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))]


def run(url: str, sessions: int, concurrency: int, ctx: dict, files: list[tuple[str, str, str]]) -> tuple[float, Timings]:
    total = Timings()
    began = time.perf_counter()
    with ThreadPoolExecutor(concurrency) as pool:
        for timings in pool.map(lambda _: one_session(url, ctx, files), range(sessions)):
            total.merge(timings)
    return time.perf_counter() - began, total


def start_server() -> tuple[subprocess.Popen[bytes], str]:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    env = {k: v for k, v in os.environ.items() if not k.startswith("FIRSTFAULT_")}
    env["FIRSTFAULT_LOG_LEVEL"] = "warning"
    process = subprocess.Popen([sys.executable, "-m", "firstfault", "serve", "--port", str(port)], env=env,
                               stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    url = f"http://127.0.0.1:{port}"
    for _ in range(600):
        try:
            if httpx.get(f"{url}/v2/healthz", timeout=1).status_code == 200:
                return process, url
        except httpx.TransportError:
            time.sleep(0.1)
    process.terminate()
    raise SystemExit("the server did not start")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--url", help="an already running service (default: start one on loopback)")
    parser.add_argument("--nodes", type=int, default=16)
    parser.add_argument("--lines", type=int, default=100_000)
    parser.add_argument("--sessions", type=int, default=20, help="sessions per concurrency level")
    parser.add_argument("--concurrency", type=int, nargs="+", default=[1, 2, 4])
    parser.add_argument("--seed", type=int, default=1)
    args = parser.parse_args()
    files = workload(args.nodes, args.lines, args.seed)
    ctx = context(args.nodes)
    size = sum(len(text.encode()) for _, _, text in files)
    lines = sum(text.count("\n") for _, _, text in files)
    process, url = (None, args.url) if args.url else start_server()
    try:
        one_session(url, ctx, files)  # warm-up
        print(f"{args.nodes} nodes, {lines} lines ({size / 1e6:.1f} MB) per session in {len(files)} raw_text "
              f"batches; {args.sessions} sessions per row; CPUs: {os.cpu_count()}\n")
        print("| concurrency | sessions/s | session p50 | session p99 | ingest p50 | ingest p99 | attribute p50 |"
              " attribute p99 | create p50 |")
        print("|---|---|---|---|---|---|---|---|---|")
        for c in args.concurrency:
            elapsed, t = run(url, args.sessions, c, ctx, files)
            ms = {k: (percentile(v, 0.5) * 1000, percentile(v, 0.99) * 1000) for k, v in t.by_kind.items()}
            print(f"| {c} | {args.sessions / elapsed:.2f} | {percentile(t.sessions, 0.5) * 1000:.0f} ms | "
                  f"{percentile(t.sessions, 0.99) * 1000:.0f} ms | {ms['ingest'][0]:.1f} ms | {ms['ingest'][1]:.1f} ms"
                  f" | {ms['attribute'][0]:.1f} ms | {ms['attribute'][1]:.1f} ms | {ms['create'][0]:.1f} ms |",
                  flush=True)
    finally:
        if process is not None:
            process.terminate()
            process.wait(30)
    return 0


if __name__ == "__main__":
    sys.exit(main())
