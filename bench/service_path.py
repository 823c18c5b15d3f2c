"""The engine's service path under load: the benchmark workload (same generator, same planted Xid 79 as the
CLI series) sent to `firstfault serve` over loopback with the v2 API, by concurrent clients.

One session = POST /v2/sessions (the scenario's context), the evidence of every node and source as
`raw_text` batches of at most --batch-mib (cut at line boundaries, `first_line` carried on), POST
.../attribute, DELETE. Every diagnosis is checked against the planted fault. Reported per concurrency level:
sessions/s, MiB/s of evidence over HTTP, p50/p99 of whole sessions and of each request kind.

The evidence is the CLI benchmark's training-log noise, so MiB/s over HTTP compares with `firstfault analyze`
on the same bytes.
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import statistics
import subprocess
import sys
import time
import tomllib
from collections import defaultdict
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

from bench.generate import Spec, default_jobs, generate
from bench.suite import ROOT, check

MIB = 1024 * 1024


def _batches(path: Path, node: str, source: str, batch_bytes: int) -> list[bytes]:
    """Pre-encoded request bodies for one evidence file."""
    bodies = []
    data = path.read_bytes()
    first_line = 1
    pos = 0
    while pos < len(data):
        end = min(len(data), pos + batch_bytes)
        if end < len(data):
            nl = data.rfind(b"\n", pos, end)
            end = nl + 1 if nl > pos else end
        chunk = data[pos:end].decode("utf-8", errors="replace")
        body = {"format": "raw_text", "node": node, "source": source, "origin": f"{node}/{source}.log",
                "first_line": first_line, "text": chunk.removesuffix("\n")}
        bodies.append(json.dumps(body).encode())
        first_line += chunk.count("\n")
        pos = end
    return bodies


def _context(directory: Path) -> bytes:
    doc = tomllib.loads((directory / "scenario.toml").read_text())
    w = doc["workload"]
    ctx = {"workload_id": doc["id"], "scheduler": w["scheduler"], "job_id": w["job_id"], "nodes": w["nodes"],
           "ranks_per_node": w["ranks_per_node"], "start_time": w["start_time"], "end_time": w["end_time"],
           "scheduler_state": w["scheduler_state"], "exit_code": w["exit_code"]}
    return json.dumps(ctx).encode()


def _session(url: str, context: bytes, bodies: list[bytes], spec: Spec) -> dict[str, list[float]]:
    import httpx

    times: dict[str, list[float]] = defaultdict(list)
    headers = {"content-type": "application/json"}
    with httpx.Client(base_url=url, timeout=600) as client:
        began = time.perf_counter()

        def call(kind: str, method: str, path: str, content: bytes | None = None) -> httpx.Response:
            t0 = time.perf_counter()
            response = client.request(method, path, content=content, headers=headers)
            times[kind].append(time.perf_counter() - t0)
            if response.status_code >= 300:
                raise RuntimeError(f"{method} {path}: {response.status_code} {response.text[:300]}")
            return response

        sid = call("create", "POST", "/v2/sessions", context).json()["session_id"]
        for body in bodies:
            call("ingest", "POST", f"/v2/sessions/{sid}/observations", body)
        result = call("attribute", "POST", f"/v2/sessions/{sid}/attribute").json()["result"]
        call("delete", "DELETE", f"/v2/sessions/{sid}")
        times["session"].append(time.perf_counter() - began)
    problem = check(result, spec)
    if problem:
        raise RuntimeError(f"wrong diagnosis over the service path: {problem}")
    return times


def _percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))]


def _start_server() -> tuple[subprocess.Popen[bytes], str]:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    env = {k: v for k, v in os.environ.items() if not k.startswith("FIRSTFAULT_")}
    env["FIRSTFAULT_LOG_LEVEL"] = "warning"
    process = subprocess.Popen([sys.executable, "-m", "firstfault", "serve", "--port", str(port)], env=env, cwd=ROOT,
                               stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    url = f"http://127.0.0.1:{port}"
    import httpx

    for _ in range(600):
        if process.poll() is not None:
            err = process.stderr.read().decode(errors="replace") if process.stderr else ""
            raise SystemExit(f"`firstfault serve` did not start: {err[-500:]}")
        try:
            if httpx.get(f"{url}/v2/healthz", timeout=1).status_code == 200:
                return process, url
        except httpx.TransportError:
            time.sleep(0.1)
    process.terminate()
    raise SystemExit("`firstfault serve` did not answer /v2/healthz")


def run_service(args: argparse.Namespace) -> int:
    spec = Spec(nodes=args.nodes, ranks=8, mib_per_node=args.mib_per_node)
    directory = args.out / "data" / f"service-{spec.key()}"
    manifest = generate(spec, directory, jobs=default_jobs())
    batch = int(args.batch_mib * MIB)
    bodies = []
    for node_dir in sorted(p for p in directory.iterdir() if p.is_dir()):
        for source in ("applog", "syslog"):
            bodies += _batches(node_dir / f"{source}.log", node_dir.name, source, batch)
    context = _context(directory)
    process, url = (None, args.url) if args.url else _start_server()
    rows: list[dict[str, Any]] = []
    try:
        _session(url, context, bodies, spec)  # warm-up
        for concurrency in args.concurrency:
            times: dict[str, list[float]] = defaultdict(list)
            began = time.perf_counter()
            with ThreadPoolExecutor(concurrency) as pool:
                for t in pool.map(lambda _: _session(url, context, bodies, spec), range(args.sessions)):
                    for kind, values in t.items():
                        times[kind].extend(values)
            elapsed = time.perf_counter() - began
            row = {"concurrency": concurrency, "sessions": args.sessions, "elapsed_s": round(elapsed, 2),
                   "sessions_per_s": round(args.sessions / elapsed, 2),
                   "mib_per_s": round(args.sessions * manifest["bytes"] / MIB / elapsed, 1),
                   **{f"{k}_p{q}_ms": round(_percentile(v, q / 100) * 1000, 1) for k, v in times.items()
                      for q in (50, 99)},
                   "session_mean_ms": round(statistics.mean(times["session"]) * 1000, 1)}
            rows.append(row)
            print(json.dumps(row), flush=True)
    finally:
        if process is not None:
            process.terminate()
            process.wait(30)
    lines = [f"{spec.nodes} nodes x {spec.mib_per_node} MiB = {manifest['bytes'] / MIB:.1f} MiB per session in "
             f"{len(bodies)} raw_text batches of <= {args.batch_mib} MiB; {args.sessions} sessions per row; "
             f"{os.cpu_count()} cores shared by server and clients.", "",
             "| concurrency | sessions/s | evidence MiB/s | session p50 | session p99 | ingest p50 | ingest p99 "
             "| attribute p50 | attribute p99 |", "|---|---|---|---|---|---|---|---|---|"]
    for r in rows:
        lines.append(f"| {r['concurrency']} | {r['sessions_per_s']:.2f} | {r['mib_per_s']:.1f} | {r['session_p50_ms']:.0f} ms | "
                     f"{r['session_p99_ms']:.0f} ms | {r['ingest_p50_ms']:.0f} ms | {r['ingest_p99_ms']:.0f} ms | "
                     f"{r['attribute_p50_ms']:.0f} ms | {r['attribute_p99_ms']:.0f} ms |")
    text = "\n".join(lines)
    results = args.out / "results"
    results.mkdir(parents=True, exist_ok=True)
    stamp = time.strftime("%Y%m%dT%H%M%SZ", time.gmtime())
    (results / f"service-{stamp}.json").write_text(json.dumps({"spec": spec.__dict__, "rows": rows}, indent=2) + "\n")
    (results / f"service-{stamp}.md").write_text(text + "\n")
    print()
    print(text)
    return 0
