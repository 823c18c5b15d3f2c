"""A synthetic results database of any size, in the Blueprint's own schema (its migrations), for the 100k-row
test and the dashboard benchmark. Row i (1-based) ends at BASE + i minutes; its sub_domain cycles through the
closed set; it ran on two nodes, and hardware failures blame the first one (the other shows symptoms)."""

from __future__ import annotations

import json
import sqlite3
from datetime import UTC, datetime, timedelta
from pathlib import Path

from firstfault.blueprint.outputs.sqlite import migrate
from firstfault.engine.model import SUBDOMAIN_OUTCOME, SubDomain

BASE = datetime(2026, 1, 1, tzinfo=UTC)
SUB_DOMAINS = [s.value for s in SubDomain]
HARDWARE = {"gpu", "nvlink", "network", "host"}
NODE_POOL = 2000


def sub_domain(i: int) -> str:
    return SUB_DOMAINS[i % len(SUB_DOMAINS)]


def outcome(i: int) -> str:
    return SUBDOMAIN_OUTCOME[SubDomain(sub_domain(i))].value


def terminal_state(i: int) -> str:
    sd = sub_domain(i)
    return "COMPLETED" if sd == "none" else "TIMEOUT" if sd == "scheduler" else "FAILED"


def nodes(i: int) -> list[str]:
    return [f"gpu-{(i * 2 + k) % NODE_POOL:04d}" for k in range(2)]


def culprits(i: int) -> list[str]:
    return nodes(i)[:1] if sub_domain(i) in HARDWARE else []


def end_time(i: int) -> datetime:
    return BASE + timedelta(minutes=i)


def workload_id(i: int) -> str:
    return f"slurm:synth:{i:06d}"


def build(path: Path, count: int) -> Path:
    db = sqlite3.connect(path, isolation_level=None)
    db.execute("PRAGMA journal_mode=WAL")
    migrate(db)
    db.execute("PRAGMA synchronous=OFF")
    db.execute("PRAGMA cache_size=-262144")
    attempts, runs, run_nodes, reports = [], [], [], []
    for i in range(1, count + 1):
        end = end_time(i)
        sd = sub_domain(i)
        alloc = nodes(i)
        blamed = culprits(i)
        alloc_json = json.dumps(alloc)
        blamed_json = json.dumps(blamed)
        end_iso = end.isoformat()
        attempts.append((i, workload_id(i), 0, "slurm", str(i), f"synthetic job {i}", (end - timedelta(hours=1)).isoformat(),
                         end_iso, terminal_state(i), "0:0" if sd == "none" else "1:0", alloc_json, "{}", end_iso, i))
        failed = i % 97 == 0
        runs.append((i, i, (end + timedelta(minutes=1)).isoformat(), "ok", None, "embedded", "sha256:synthetic",
                     terminal_state(i), outcome(i), sd, None if sd == "none" else f"SYN-{sd}",
                     blamed[0] if blamed else (None if sd == "none" else alloc[1]), blamed_json, int(failed),
                     0.01, 0.001, 0.011, "[]", "{}"))
        run_nodes += [(i, n, "allocated") for n in alloc]
        run_nodes += [(i, n, "culprit") for n in blamed]
        if sd != "none":
            run_nodes.append((i, alloc[1], "symptom"))
        reports.append((i, "syslog", "logs", "error" if failed else "ok", "HTTP 503" if failed else "", 100,
                        alloc_json, 0.01))
    # bulk load without the indexes, then rebuild them exactly as the migrations declared them (much faster)
    indexes = db.execute("SELECT name, sql FROM sqlite_master WHERE type = 'index' AND sql IS NOT NULL").fetchall()
    db.execute("BEGIN")
    for name, _ in indexes:
        db.execute(f"DROP INDEX {name}")
    db.executemany("INSERT INTO workload_attempts VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)", attempts)
    db.executemany("INSERT INTO attribution_runs VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)", runs)
    db.executemany("INSERT INTO run_nodes VALUES (?, ?, ?)", run_nodes)
    db.executemany("INSERT INTO connector_reports VALUES (?, ?, ?, ?, ?, ?, ?, ?)", reports)
    for _, sql in indexes:
        db.execute(sql)
    db.execute("COMMIT")
    db.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    db.close()
    return path
