"""The engine's service path under load: the benchmark workload (same generator, same planted Xid 79 as the
CLI series) sent to `firstfault serve` over loopback with the v2 API, by concurrent clients.

One session = POST /v2/sessions (the scenario's context), the evidence of every node and source as
`raw_text` batches of at most --batch-mib (cut at line boundaries, `first_line` carried on), POST
.../attribute, DELETE. Every diagnosis is checked against the planted fault. Reported per concurrency level:
sessions/s, MiB/s of evidence over HTTP, p50/p99 of whole sessions and of each request kind.

With `--replicas 1 2 3 --store redis://...`: that many `serve --store` replicas, each request of a session sent
to the next replica in turn (a balancer without stickiness), `--repeat` times per row (median and range). With
`--redis-share`: the share of an ingest spent talking to Redis, timed in one process.

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


def _session(urls: list[str], context: bytes, bodies: list[bytes], spec: Spec) -> dict[str, list[float]]:
    """One session, its requests sent to each of `urls` in turn."""
    import httpx

    times: dict[str, list[float]] = defaultdict(list)
    headers = {"content-type": "application/json"}
    clients = [httpx.Client(base_url=url, timeout=600) for url in urls]
    turn = iter(range(1 << 30))
    try:
        began = time.perf_counter()

        def call(kind: str, method: str, path: str, content: bytes | None = None) -> httpx.Response:
            t0 = time.perf_counter()
            response = clients[next(turn) % len(clients)].request(method, path, content=content, headers=headers)
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
    finally:
        for client in clients:
            client.close()
    problem = check(result, spec)
    if problem:
        raise RuntimeError(f"wrong diagnosis over the service path: {problem}")
    return times


def _percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))]


def _start_server(store: str = "") -> tuple[subprocess.Popen[bytes], str]:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    env = {k: v for k, v in os.environ.items() if not k.startswith("FIRSTFAULT_")}
    env["FIRSTFAULT_LOG_LEVEL"] = "warning"
    if store:
        env["FIRSTFAULT_STORE"] = store
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
    if args.redis_share:
        return _redis_share(args, context, bodies)
    rows: list[dict[str, Any]] = []
    for replicas in args.replicas:
        store = args.store or ""
        if replicas > 1 and not store and not args.url:
            raise SystemExit("--replicas above 1 needs --store redis://... (the replicas share their sessions there)")
        servers = [] if args.url else [_start_server(store) for _ in range(replicas)]
        urls = [args.url] if args.url else [url for _, url in servers]
        try:
            _session(urls, context, bodies, spec)  # warm-up
            for concurrency in args.concurrency:
                row = _row(urls, concurrency, context, bodies, spec, args, manifest["bytes"])
                rows.append({"replicas": len(urls), "store": "redis" if store else "memory", **row})
                print(json.dumps(rows[-1]), flush=True)
        finally:
            for process, _ in servers:
                process.terminate()
                process.wait(30)
    text = _table(rows, spec, manifest["bytes"], len(bodies), args)
    results = args.out / "results"
    results.mkdir(parents=True, exist_ok=True)
    stamp = time.strftime("%Y%m%dT%H%M%SZ", time.gmtime())
    (results / f"service-{stamp}.json").write_text(json.dumps({"spec": spec.__dict__, "rows": rows}, indent=2) + "\n")
    (results / f"service-{stamp}.md").write_text(text + "\n")
    print()
    print(text)
    return 0


def _row(urls: list[str], concurrency: int, context: bytes, bodies: list[bytes], spec: Spec,
         args: argparse.Namespace, nbytes: int) -> dict[str, Any]:
    """`args.repeat` runs of `args.sessions` sessions by `concurrency` clients: median and range of the rates,
    percentiles of every request of every run."""
    times: dict[str, list[float]] = defaultdict(list)
    rates = []
    for _ in range(args.repeat):
        began = time.perf_counter()
        with ThreadPoolExecutor(concurrency) as pool:
            for t in pool.map(lambda _: _session(urls, context, bodies, spec), range(args.sessions)):
                for kind, values in t.items():
                    times[kind].extend(values)
        rates.append(args.sessions / (time.perf_counter() - began))
    mib = nbytes / MIB
    return {"concurrency": concurrency, "sessions": args.sessions, "repeat": args.repeat,
            "sessions_per_s": round(statistics.median(rates), 2), "sessions_per_s_min": round(min(rates), 2),
            "sessions_per_s_max": round(max(rates), 2), "mib_per_s": round(statistics.median(rates) * mib, 1),
            "mib_per_s_min": round(min(rates) * mib, 1), "mib_per_s_max": round(max(rates) * mib, 1),
            **{f"{k}_p{q}_ms": round(_percentile(v, q / 100) * 1000, 1) for k, v in times.items() for q in (50, 99)},
            "session_mean_ms": round(statistics.mean(times["session"]) * 1000, 1)}


def _table(rows: list[dict[str, Any]], spec: Spec, nbytes: int, batches: int, args: argparse.Namespace) -> str:
    lines = [f"{spec.nodes} nodes x {spec.mib_per_node} MiB = {nbytes / MIB:.1f} MiB per session in "
             f"{batches} raw_text batches of <= {args.batch_mib} MiB; {args.sessions} sessions per run, "
             f"{args.repeat} runs per row (median [min-max]); {os.cpu_count()} cores shared by servers, Redis and "
             "clients.", "",
             "| replicas | store | concurrency | sessions/s | evidence MiB/s | session p50 | session p99 | ingest p50 "
             "| ingest p99 | attribute p50 | attribute p99 |", "|---|---|---|---|---|---|---|---|---|---|---|"]
    for r in rows:
        lines.append(
            f"| {r['replicas']} | {r['store']} | {r['concurrency']} | {r['sessions_per_s']:.2f} "
            f"[{r['sessions_per_s_min']:.2f}-{r['sessions_per_s_max']:.2f}] | {r['mib_per_s']:.1f} "
            f"[{r['mib_per_s_min']:.1f}-{r['mib_per_s_max']:.1f}] | {r['session_p50_ms']:.0f} ms | "
            f"{r['session_p99_ms']:.0f} ms | {r['ingest_p50_ms']:.0f} ms | {r['ingest_p99_ms']:.0f} ms | "
            f"{r['attribute_p50_ms']:.0f} ms | {r['attribute_p99_ms']:.0f} ms |")
    return "\n".join(lines)


def _redis_share(args: argparse.Namespace, context: bytes, bodies: list[bytes]) -> int:
    """Ingest the sessions' batches in this process through a Redis store, timing what is spent talking to Redis
    (scripts and pipelines, round trips included) and writing states as JSON, against the whole ingest."""
    from contextlib import contextmanager

    from pydantic import TypeAdapter

    from firstfault.engine import state_format
    from firstfault.engine.model import ExecutionContext
    from firstfault.service import redis_store
    from firstfault.service.core import AttributionService
    from firstfault.service.settings import Settings
    from firstfault.tools.verify import default_engine
    from firstfault.wire import ObservationBatch

    if not args.store:
        raise SystemExit("--redis-share needs --store redis://...")
    spent = {"redis": 0.0, "encode": 0.0}
    talking, encode = redis_store.RedisSessionStore.talking, state_format.encode_state

    @contextmanager
    def timed_talking(self: Any) -> Any:
        t0 = time.perf_counter()
        try:
            with talking(self):
                yield
        finally:
            spent["redis"] += time.perf_counter() - t0

    def timed_encode(*a: Any) -> bytes:
        t0 = time.perf_counter()
        try:
            return encode(*a)
        finally:
            spent["encode"] += time.perf_counter() - t0

    redis_store.RedisSessionStore.talking = timed_talking  # type: ignore[method-assign]
    redis_store.encode_state = timed_encode
    service = AttributionService(default_engine(), Settings(store=args.store))
    adapter: TypeAdapter[ObservationBatch] = TypeAdapter(ObservationBatch)
    batches = [adapter.validate_json(body) for body in bodies]
    ctx = ExecutionContext.model_validate_json(context)
    shares = []
    for n in range(args.sessions + 1):
        sid = service.create_session(ctx)
        spent.update(redis=0.0, encode=0.0)
        t0 = time.perf_counter()
        for b in batches:
            service.ingest(sid, b)
        total = time.perf_counter() - t0
        service.delete(sid)
        if n:  # the first is a warm-up
            shares.append((spent["redis"] / total, spent["encode"] / total, total))
            print(json.dumps({"ingest_s": round(total, 3), "redis_share": round(shares[-1][0], 4),
                              "encode_share": round(shares[-1][1], 4)}), flush=True)
    redis_part, encode_part, totals = (sorted(x) for x in zip(*shares, strict=True))
    print(f"\n{len(batches)} batches per session, {args.sessions} sessions: ingest {statistics.median(totals):.3f} s "
          f"[{totals[0]:.3f}-{totals[-1]:.3f}]; Redis round trips {statistics.median(redis_part):.1%} "
          f"[{redis_part[0]:.1%}-{redis_part[-1]:.1%}]; writing states as JSON {statistics.median(encode_part):.1%} "
          f"[{encode_part[0]:.1%}-{encode_part[-1]:.1%}]")
    return 0
