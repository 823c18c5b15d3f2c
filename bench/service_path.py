"""The engine's service path under load: the benchmark workload (same generator, same planted Xid 79 as the
CLI series) sent to `firstfault serve` over loopback with the v2 API, by concurrent clients.

One session = POST /v2/sessions (the scenario's context), the evidence of every node and source as
`raw_text` (or, with `--format raw_loki_streams`, Loki streams, each line stamped with its own time) batches of
at most --batch-mib (cut at line boundaries, `first_line` and `first_offset` carried on),
POST .../attribute, DELETE (with `--bundle-mib`, consecutive batches go in `bundle` requests of up to that many MiB).
Every diagnosis is checked against the planted fault, and the first session's result
against `firstfault analyze --json` of the same files (the same JSON document, key order included: analyze
indents it, the service does not). Reported per concurrency level: sessions/s, MiB/s of evidence over HTTP,
p50/p99 of whole sessions and of each request kind.

With `--replicas 1 2 3 --store redis://...`: that many `serve --store` replicas, each request of a session sent
to the next replica in turn (a balancer without stickiness), `--repeat` times per row (median and range). With
`--redis-share`: the share of an ingest spent talking to Redis, timed in one process.

The evidence is the CLI benchmark's training-log noise, so MiB/s over HTTP compares with `firstfault analyze`
on the same bytes.
"""

from __future__ import annotations

import argparse
import functools
import json
import os
import socket
import ssl
import statistics
import subprocess
import sys
import time
from collections import defaultdict
from concurrent.futures import ThreadPoolExecutor
from datetime import datetime
from pathlib import Path
from typing import Any

from bench.generate import Spec, default_jobs, generate
from bench.suite import ROOT, check

MIB = 1024 * 1024


def _batches(path: Path, node: str, source: str, batch_bytes: int, offsets: bool = True) -> list[bytes]:
    """Pre-encoded request bodies for one evidence file (`offsets`: with `first_offset`)."""
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
        if offsets:
            body["first_offset"] = pos
        bodies.append(json.dumps(body).encode())
        first_line += chunk.count("\n")
        pos = end
    return bodies


def _bundled(bodies: list[bytes], limit: int) -> list[bytes]:
    """The batch bodies regrouped, in order, into `bundle` bodies of at most `limit` bytes (a larger batch alone)."""
    groups: list[list[bytes]] = []
    size = limit
    for body in bodies:
        if size + len(body) > limit:
            groups.append([])
            size = 0
        groups[-1].append(body)
        size += len(body) + 1
    return [b'{"format":"bundle","batches":[' + b",".join(group) + b"]}" for group in groups]


def _loki_batches(path: Path, node: str, source: str, batch_bytes: int, reference: datetime) -> list[bytes]:
    """The file as `raw_loki_streams` bodies of about `batch_bytes` of text: one stream labelled with the node,
    each line stamped with its own time (a line without one: the previous line's)."""
    from firstfault.engine.timestamps import TimestampParser

    parser = TimestampParser(reference)
    bodies: list[bytes] = []
    values: list[list[str]] = []
    size = 0
    ns = int(reference.timestamp()) * 1_000_000_000
    for line in path.read_text(encoding="utf-8", errors="replace").splitlines():
        stamp = parser.parse(line)
        ns = int(stamp.timestamp() * 1_000_000) * 1000 if stamp is not None else ns
        values.append([str(ns), line])
        size += len(line) + 1
        if size >= batch_bytes:
            bodies.append(_loki_body(node, source, values))
            values, size = [], 0
    if values:
        bodies.append(_loki_body(node, source, values))
    return bodies


def _loki_body(node: str, source: str, values: list[list[str]]) -> bytes:
    return json.dumps({"format": "raw_loki_streams", "source": source, "origin": f"{node}/{source}.log",
                       "streams": [{"stream": {"hostname": node}, "values": values}]}).encode()


def _context(directory: Path) -> bytes:
    """The context `firstfault analyze` reads from the workload's scenario.toml, as a request body."""
    from firstfault.engine.evidence import read_context

    return read_context(directory).model_dump_json().encode()


def _analyze(directory: Path) -> Any:
    """`firstfault analyze --json` of the workload, as an ordered document (pairs lists keep the key order)."""
    done = subprocess.run([sys.executable, "-m", "firstfault", "analyze", "--json", str(directory)], check=True,
                          capture_output=True, cwd=ROOT)
    return json.loads(done.stdout, object_pairs_hook=list)


def _same_as_analyze(result: bytes, expected: Any) -> None:
    """Refuse a service result that is not `analyze`'s document."""
    got = json.loads(result, object_pairs_hook=list)
    if got != expected:
        raise RuntimeError("the service's result differs from `firstfault analyze --json` of the same files")


def _session(urls: list[str], context: bytes, bodies: list[bytes], spec: Spec,
             expected: Any = None) -> dict[str, list[float]]:
    """One session, its requests sent to each of `urls` in turn."""
    import httpx

    times: dict[str, list[float]] = defaultdict(list)
    headers = {"content-type": "application/json"}
    # Each session its own connections, as separate clients would; the TLS settings every httpx.Client builds (the
    # system's CA bundle read and parsed: ~70 ms here, a third of a session before) are built once and shared.
    clients = [httpx.Client(base_url=url, timeout=600, verify=_tls()) for url in urls]
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
        answer = call("attribute", "POST", f"/v2/sessions/{sid}/attribute").content
        call("delete", "DELETE", f"/v2/sessions/{sid}")
        times["session"].append(time.perf_counter() - began)
    finally:
        for client in clients:
            client.close()
    if expected is not None:
        _same_as_analyze(_result_bytes(answer), expected)
    problem = check(json.loads(answer)["result"], spec)
    if problem:
        raise RuntimeError(f"wrong diagnosis over the service path: {problem}")
    return times


def _result_bytes(answer: bytes) -> bytes:
    """The `result` of an attribute response, as the service wrote it (it is the body's last member)."""
    head = answer.index(b',"result":')
    return answer[head + len(b',"result":'):-1]


@functools.cache
def _tls() -> ssl.SSLContext:
    return ssl.create_default_context()


def _percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))]


def _start_server(store: str = "", src: Path | None = None,
                  http_parser: str | None = None) -> tuple[subprocess.Popen[bytes], str]:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    env = {k: v for k, v in os.environ.items() if not k.startswith("FIRSTFAULT_")}
    env["FIRSTFAULT_LOG_LEVEL"] = "warning"
    if store:
        env["FIRSTFAULT_STORE"] = store
    if http_parser:
        env["FIRSTFAULT_HTTP_PARSER"] = http_parser
    if src is not None:
        env["PYTHONPATH"] = str(src.resolve())
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
    context = _context(directory)
    start = json.loads(context)["start_time"]
    bodies = []
    for node_dir in sorted(p for p in directory.iterdir() if p.is_dir()):
        for source in ("applog", "syslog"):
            path = node_dir / f"{source}.log"
            bodies += (_batches(path, node_dir.name, source, batch, not args.before) if args.format == "raw_text" else
                       _loki_batches(path, node_dir.name, source, batch, datetime.fromisoformat(start)))
    batches = len(bodies)
    if args.bundle_mib:
        bodies = _bundled(bodies, int(args.bundle_mib * MIB))
    # Loki's stamps stand for the lines' own, and evidence cites no byte offsets: only raw text is analyze's input,
    # and only servers that read first_offset (an older one, --before, is sent none) cite analyze's offsets.
    expected = _analyze(directory) if args.format == "raw_text" and not args.before else None
    if args.redis_share:
        return _redis_share(args, context, bodies)
    rows: list[dict[str, Any]] = []
    for replicas in args.replicas:
        store = args.store or ""
        if replicas > 1 and not store and not args.url:
            raise SystemExit("--replicas above 1 needs --store redis://... (the replicas share their sessions there)")
        servers = [] if args.url else [_start_server(store, args.before, args.http_parser)
                                         for _ in range(replicas)]
        urls = [args.url] if args.url else [url for _, url in servers]
        try:
            _session(urls, context, bodies, spec, expected)  # warm-up, its result checked against analyze's
            pids = [process.pid for process, _ in servers]
            for concurrency in args.concurrency:
                row = _row(urls, concurrency, context, bodies, spec, args, manifest["bytes"], pids)
                rows.append({"replicas": len(urls), "store": "redis" if store else "memory", "format": args.format,
                             "server": str(args.before or "this checkout"),
                             "http_parser": args.http_parser or "the server's default", **row})
                print(json.dumps(rows[-1]), flush=True)
        finally:
            for process, _ in servers:
                process.terminate()
                process.wait(30)
    text = _table(rows, spec, manifest["bytes"], batches, args)
    results = args.out / "results"
    results.mkdir(parents=True, exist_ok=True)
    stamp = time.strftime("%Y%m%dT%H%M%SZ", time.gmtime())
    (results / f"service-{stamp}.json").write_text(json.dumps({"spec": spec.__dict__, "rows": rows}, indent=2) + "\n")
    (results / f"service-{stamp}.md").write_text(text + "\n")
    print()
    print(text)
    return 0


def _row(urls: list[str], concurrency: int, context: bytes, bodies: list[bytes], spec: Spec,
         args: argparse.Namespace, nbytes: int, pids: list[int]) -> dict[str, Any]:
    """`args.repeat` runs of `args.sessions` sessions by `concurrency` clients: median and range of the rates,
    percentiles of every request of every run, and the servers' CPU time per session (when this process started
    them: `pids`), which the other work on a shared machine does not inflate as it does wall time."""
    times: dict[str, list[float]] = defaultdict(list)
    rates = []
    cpu = []
    for _ in range(args.repeat):
        began, cpu_before = time.perf_counter(), _cpu_seconds(pids)
        with ThreadPoolExecutor(concurrency) as pool:
            for t in pool.map(lambda _: _session(urls, context, bodies, spec), range(args.sessions)):
                for kind, values in t.items():
                    times[kind].extend(values)
        rates.append(args.sessions / (time.perf_counter() - began))
        cpu.append((_cpu_seconds(pids) - cpu_before) / args.sessions)
    mib = nbytes / MIB
    per_cpu = {"server_cpu_ms": round(statistics.median(cpu) * 1000, 1),
               "mib_per_server_cpu_s": round(mib / statistics.median(cpu), 1),
               "mib_per_server_cpu_s_min": round(mib / max(cpu), 1),
               "mib_per_server_cpu_s_max": round(mib / min(cpu), 1)} if pids and min(cpu) > 0 else {}
    return {"concurrency": concurrency, "sessions": args.sessions, "repeat": args.repeat, **per_cpu,
            "sessions_per_s": round(statistics.median(rates), 2), "sessions_per_s_min": round(min(rates), 2),
            "sessions_per_s_max": round(max(rates), 2), "mib_per_s": round(statistics.median(rates) * mib, 1),
            "mib_per_s_min": round(min(rates) * mib, 1), "mib_per_s_max": round(max(rates) * mib, 1),
            **{f"{k}_p{q}_ms": round(_percentile(v, q / 100) * 1000, 1) for k, v in times.items() for q in (50, 99)},
            "session_mean_ms": round(statistics.mean(times["session"]) * 1000, 1)}


def _cpu_seconds(pids: list[int]) -> float:
    """User + system CPU time of the processes `pids` so far (Linux /proc; 0 elsewhere)."""
    total = 0
    for pid in pids:
        try:
            fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            return 0.0
        total += int(fields[11]) + int(fields[12])  # utime, stime (fields 14 and 15 of stat)
    return total / os.sysconf("SC_CLK_TCK")


def _bundles(args: argparse.Namespace) -> str:
    return f" (sent in bundles of <= {args.bundle_mib} MiB)" if args.bundle_mib else ""


def _table(rows: list[dict[str, Any]], spec: Spec, nbytes: int, batches: int, args: argparse.Namespace) -> str:
    lines = [f"{spec.nodes} nodes x {spec.mib_per_node} MiB = {nbytes / MIB:.1f} MiB per session in "
             f"{batches} {args.format} batches of <= {args.batch_mib} MiB"
             f"{_bundles(args)}; {args.sessions} sessions per run, "
             f"{args.repeat} runs per row (median [min-max]); {os.cpu_count()} cores shared by servers, Redis and "
             f"clients; HTTP parser: {args.http_parser or 'the server default'}. Server CPU: the servers' user + system "
             "time per session, and the MiB each CPU second ingests.",
             "", "| replicas | store | concurrency | sessions/s | evidence MiB/s | server CPU / session | MiB per server "
             "CPU s | session p50 | session p99 | ingest p50 | ingest p99 | attribute p50 | attribute p99 |",
             "|---|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for r in rows:
        cpu = (f"{r['server_cpu_ms']:.0f} ms | {r['mib_per_server_cpu_s']:.0f} [{r['mib_per_server_cpu_s_min']:.0f}-"
               f"{r['mib_per_server_cpu_s_max']:.0f}]") if "server_cpu_ms" in r else "- | -"
        lines.append(
            f"| {r['replicas']} | {r['store']} | {r['concurrency']} | {r['sessions_per_s']:.2f} "
            f"[{r['sessions_per_s_min']:.2f}-{r['sessions_per_s_max']:.2f}] | {r['mib_per_s']:.1f} "
            f"[{r['mib_per_s_min']:.1f}-{r['mib_per_s_max']:.1f}] | {cpu} | {r['session_p50_ms']:.0f} ms | "
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
