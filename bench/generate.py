"""Deterministic generator of large synthetic workloads in the static corpus format.

    python -m bench generate OUT_DIR --nodes 8 --ranks 8 --mb-per-node 12.5 [--seed 7]

writes `OUT_DIR/scenario.toml` and `OUT_DIR/<node>/{applog,syslog}.log`: hours of ordinary training-job
chatter (Megatron iteration lines, NCCL INFO setup and re-init lines, Python warnings, DeepSpeed/logging
lines, checkpoint lines; systemd, cron, chronyd, sshd, slurmd and benign kernel lines in the syslog) sized to
`mib_per_node`, with one planted fault near the end: GPU 0000:9a:00 of one node falls off the bus (PCIe AER,
then Xid 79 and the follow-on Xid 45 in its syslog; NCCL WARN and a CUDA error from the rank on that GPU),
and ten minutes later every other rank of every node reports an NCCL watchdog timeout; srun reports the
failed step on the batch host. The correct attribution is `XID-79` on the faulty node, culprit that node
alone, sub_domain `gpu` (`expected()` returns it; the harness asserts it at every scale).

The same arguments always give byte-identical files (one seeded `random.Random` per node; no clock, no
hash-order dependence). Nodes are written by a process pool when `jobs > 1`; the output does not depend on
`jobs`.
"""

from __future__ import annotations

import hashlib
import json
import os
import random
import shutil
import time
from concurrent.futures import ProcessPoolExecutor
from dataclasses import asdict, dataclass
from datetime import datetime, timedelta, timezone
from pathlib import Path

GENERATOR_VERSION = 4
_MANIFEST = "bench-manifest.json"
_START = datetime(2026, 3, 1, 4, 0, 0, tzinfo=timezone.utc)
_RUN_SECONDS = 6 * 3600  # the job runs six hours before the fault
_FAULT_GPU_PCI = "0000:9a:00"
_FAULT_LOCAL_RANK = 4
_BUS_IDS = ["18000", "2a000", "3a000", "5d000", "9a000", "ab000", "ba000", "db000"]
_MONTH = ["Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec"]


@dataclass(frozen=True)
class Spec:
    nodes: int = 8
    ranks: int = 8
    mib_per_node: float = 12.5
    seed: int = 7
    syslog_share: float = 0.15  # of each node's bytes

    @property
    def total_bytes(self) -> int:
        return int(self.nodes * self.mib_per_node * 1024 * 1024)

    def node_name(self, i: int) -> str:
        return f"gpu-{i // 1000:02d}{i % 1000:03d}" if self.nodes > 999 else f"gpu-a{i + 1:03d}"

    @property
    def faulty_index(self) -> int:
        # A node in the middle of the allocation (not the batch host, not the last): attribution must not lean
        # on position.
        return (self.nodes * 5) // 8 if self.nodes > 1 else 0

    @property
    def faulty_node(self) -> str:
        return self.node_name(self.faulty_index)

    def key(self) -> str:
        blob = json.dumps({"v": GENERATOR_VERSION, **asdict(self)}, sort_keys=True).encode()
        return hashlib.sha256(blob).hexdigest()[:16]


def expected(spec: Spec) -> dict[str, object]:
    """What a correct attribution of the generated workload says."""
    return {"root_symptom": "XID-79", "root_node": spec.faulty_node, "culprits": [spec.faulty_node],
            "sub_domain": "gpu", "gpu": _FAULT_GPU_PCI}


def _fault_time(spec: Spec) -> datetime:
    return _START + timedelta(seconds=_RUN_SECONDS)


def _iso(ts: float) -> str:
    dt = datetime.fromtimestamp(ts, tz=timezone.utc)
    return dt.strftime("%Y-%m-%dT%H:%M:%S.") + f"{int(dt.microsecond / 1000):03d}Z"


def _syslog_stamp(ts: int) -> str:
    dt = datetime.fromtimestamp(ts, tz=timezone.utc)
    return f"{_MONTH[dt.month - 1]} {dt.day:2d} {dt.hour:02d}:{dt.minute:02d}:{dt.second:02d}"


class _Clock:
    """Second-resolution stamp caches (formatting a datetime per line would dominate generation time)."""

    def __init__(self) -> None:
        self._iso_sec = -1
        self._iso_head = ""
        self._sys_sec = -1
        self._sys = ""

    def iso(self, ts: float) -> str:
        sec = int(ts)
        if sec != self._iso_sec:
            self._iso_sec = sec
            self._iso_head = datetime.fromtimestamp(sec, tz=timezone.utc).strftime("%Y-%m-%dT%H:%M:%S.")
        return f"{self._iso_head}{int((ts - sec) * 1000):03d}Z"

    def syslog(self, ts: float) -> str:
        sec = int(ts)
        if sec != self._sys_sec:
            self._sys_sec = sec
            self._sys = _syslog_stamp(sec)
        return self._sys


# -- applog noise ---------------------------------------------------------------------------------------------

def _app_templates(spec: Spec, node_index: int, host: str, rng: random.Random) -> list[tuple[int, object]]:
    """(weight, maker) pairs; a maker takes (ts, rng) and returns one line without the stamp prefix."""
    ranks = spec.ranks
    base_rank = node_index * ranks
    nranks = spec.nodes * ranks
    pid0 = 20000 + (node_index % 50) * 100
    ip = f"10.{50 + node_index // 62500}.{(node_index // 250) % 250}.{10 + node_index % 240}"
    state = {"it": 10, "loss": 2.9}

    def who(local: int) -> str:
        return f"{host}:{pid0 + local}:{pid0 + 90 + local} [{local}]"

    def iteration(ts: float, r: random.Random) -> str:
        state["it"] += 1
        state["loss"] = max(1.2, state["loss"] - 0.00001)
        it = state["it"]
        return (f"[rank{base_rank + ranks - 1}]: iteration {it:>8d}/ 500000 | consumed samples: {it * 512:>12d} | "
                f"elapsed time per iteration (ms): {880 + r.random() * 80:.1f} | learning rate: 3.000E-04 | "
                f"global batch size:   512 | lm loss: {state['loss']:.6E} | loss scale: 1.0 | grad norm: "
                f"{0.3 + r.random() * 0.6:.3f} | number of skipped iterations:   0 | number of nan iterations:   0 |")

    def nccl_channel(ts: float, r: random.Random) -> str:
        local = r.randrange(ranks)
        ch = r.randrange(32)
        peer = (local + 1) % ranks
        via = r.choice(("P2P/IPC/read", "P2P/CUMEM/read", "NET/IB/0/GDRDMA", "NVLS"))
        return (f"{who(local)} NCCL INFO Channel {ch:02d}/0 : {base_rank + local}[{local}] -> "
                f"{base_rank + peer}[{peer}] via {via}")

    def nccl_setup(ts: float, r: random.Random) -> str:
        local = r.randrange(ranks)
        kind = r.randrange(8)
        if kind == 0:
            return (f"{who(local)} NCCL INFO comm 0x55d0c1a2b3c0 rank {base_rank + local} nranks {nranks} cudaDev "
                    f"{local} nvmlDev {local} busId {_BUS_IDS[local % 8]} commId 0x6f1e2d3c4b5a6978 - Init COMPLETE")
        if kind == 1:
            return f"{who(local)} NCCL INFO Bootstrap : Using ib0:{ip}<0>"
        if kind == 2:
            return f"{who(local)} NCCL INFO NET/IB : Using [0]mlx5_0:1/IB [1]mlx5_1:1/IB ; OOB ib0:{ip}<0>"
        if kind == 3:
            return f"{who(local)} NCCL INFO Connected all rings, use ring PXN 0 GDR 1"
        if kind == 4:
            return f"{who(local)} NCCL INFO threadThresholds 8/8/64 | 256/8/64 | 512 | 512"
        if kind == 5:
            return f"{who(local)} NCCL INFO 24 coll channels, 24 collnet channels, 0 nvls channels, 32 p2p channels"
        if kind == 6:
            return (f"{who(local)} NCCL INFO Trees [0] {local + 1}/-1/-1->{local}->{max(local - 1, -1)} "
                    f"[1] {local + 1}/-1/-1->{local}->{max(local - 1, -1)}")
        return f"{who(local)} NCCL INFO ncclCommInitRank comm 0x7f3a1c000c80 rank {base_rank + local} nranks {nranks} cudaDev {local} busId {_BUS_IDS[local % 8]} commId 0x9e3c - Init START"

    def warning(ts: float, r: random.Random) -> str:
        kind = r.randrange(4)
        if kind == 0:
            return ("/usr/local/lib/python3.10/dist-packages/torch/utils/checkpoint.py:90: UserWarning: "
                    "torch.utils.checkpoint: the use_reentrant parameter should be passed explicitly.")
        if kind == 1:
            return (f"[rank{base_rank + r.randrange(ranks)}]: /opt/megatron/core/tensor_parallel/layers.py:609: "
                    "UserWarning: async_grad_allreduce is deprecated and will be removed in a future release.")
        if kind == 2:
            return "WARNING: Logging before flag parsing goes to stderr."
        return ("/usr/local/lib/python3.10/dist-packages/transformer_engine/pytorch/attention.py:4870: "
                "DeprecationWarning: flash-attn v2 window_size semantics changed")

    def logging_line(ts: float, r: random.Random) -> str:
        kind = r.randrange(4)
        rank = base_rank + r.randrange(ranks)
        if kind == 0:
            return (f"[INFO] [logging.py:96:log_dist] [Rank {rank}] step={state['it']}, skipped=0, "
                    f"lr=[0.00029999], mom=[(0.9, 0.95)]")
        if kind == 1:
            return (f"[rank{rank}]: throughput per GPU (TFLOP/s/GPU): {400 + r.random() * 40:.1f} | "
                    f"tokens per second per GPU: {11000 + r.randrange(2000)}")
        if kind == 2:
            return f"[rank{rank}]: [before the start of training step] datetime: 2026-03-01 08:00:00 "
        return f"INFO:dataloader:worker {r.randrange(8)} prefetched shard {r.randrange(100000):06d} ({r.randrange(64, 512)} MiB)"

    def checkpoint(ts: float, r: random.Random) -> str:
        return (f"[rank{base_rank}]: saving checkpoint at iteration {state['it']:>8d} to /lustre/ckpt/run-17 "
                f"in torch_dist format")

    return [(55, iteration), (14, nccl_channel), (3, nccl_setup), (6, warning), (21, logging_line),
            (1, checkpoint)]


def _syslog_templates(host: str, node_index: int) -> list[tuple[int, object]]:
    def systemd(ts: float, r: random.Random) -> str:
        return f"{host} systemd[1]: Started Session {1000 + r.randrange(9000)} of User slurm."

    def cron(ts: float, r: random.Random) -> str:
        return f"{host} CRON[{2000 + r.randrange(8000)}]: (root) CMD (/usr/local/sbin/node-health-check --quiet)"

    def chrony(ts: float, r: random.Random) -> str:
        return f"{host} chronyd[812]: Selected source 10.0.0.{1 + r.randrange(3)} (ntp{1 + r.randrange(3)}.cluster.local)"

    def sshd(ts: float, r: random.Random) -> str:
        return (f"{host} sshd[{3000 + r.randrange(6000)}]: Accepted publickey for slurm from 10.0.0.{r.randrange(250)} "
                f"port {30000 + r.randrange(30000)} ssh2: ED25519 SHA256:q3Vb1rT0mHc")

    def slurmd(ts: float, r: random.Random) -> str:
        return f"{host} slurmd[1733]: slurmd: debug:  _rpc_acct_gather_update: {r.randrange(100)} tasks"

    def kernel(ts: float, r: random.Random) -> str:
        up = 700000 + (ts - _START.timestamp())
        kind = r.randrange(41)
        if kind == 40:  # a benign line the catalog matches (a context fact: the driver version)
            return (f"{host} kernel: [{up:.6f}] NVRM: loading NVIDIA UNIX Open Kernel Module for x86_64  "
                    "570.124.06  Release Build  (dvs-builder@U16-I3-B03-4-3)  Wed Feb 26 01:48:30 UTC 2025")
        kind %= 4
        if kind == 0:
            return (f"{host} kernel: [{up:.6f}] mlx5_core 0000:18:00.0: mlx5_cmd_out_err:838:(pid 3121): "
                    "ACCESS_REG(0x805) op_mod(0x1) failed, status bad resource(0x5), syndrome (0x305684), err(-22)")
        if kind == 1:
            return (f"{host} kernel: [{up:.6f}] audit: type=1400 audit({int(ts)}.120:{r.randrange(9999)}): "
                    'apparmor="DENIED" operation="open" profile="snap.lxd" name="/proc/sys/kernel/osrelease"')
        if kind == 2:
            return f"{host} kernel: [{up:.6f}] IPv6: ADDRCONF(NETDEV_CHANGE): veth{r.randrange(99999):05x}: link becomes ready"
        return f"{host} kernel: [{up:.6f}] nvidia-nvlink: Unregistered Nvlink Core, major device number 236"

    def dcgm(ts: float, r: random.Random) -> str:
        return (f"{host} nv-hostengine[2211]: DCGM field update: gpu {r.randrange(8)} power {500 + r.randrange(200)} W "
                f"temp {40 + r.randrange(30)} C sm_clock 1980 MHz")

    return [(8, systemd), (10, cron), (6, chrony), (8, sshd), (30, slurmd), (18, kernel), (20, dcgm)]


def _pick(templates: list[tuple[int, object]]) -> tuple[list[object], list[int]]:
    makers = [m for _, m in templates]
    cum = []
    total = 0
    for w, _ in templates:
        total += w
        cum.append(total)
    return makers, cum


def _write_noise(path: Path, nbytes: int, templates: list[tuple[int, object]], rng: random.Random,
                 stamp: object, start: float, end: float) -> None:
    """Write about `nbytes` of noise lines with times rising from `start` to `end`."""
    makers, cum = _pick(templates)
    total = cum[-1]
    choices = rng.choices
    # Estimate line count from a probe to spread stamps evenly over the window.
    probe = [m(start, random.Random(1)) for m in makers]
    avg = sum(len(p) * (cum[i] - (cum[i - 1] if i else 0)) for i, p in enumerate(probe)) / total + 26
    n_lines = max(1, int(nbytes / avg))
    step = (end - start) / n_lines
    written = 0
    ts = start
    buf: list[str] = []
    buffered = 0
    with open(path, "w", encoding="utf-8", newline="\n") as fh:
        while written < nbytes:
            for maker in choices(makers, cum_weights=cum, k=256):
                line = f"{stamp(ts)} {maker(ts, rng)}\n"  # type: ignore[operator]
                buf.append(line)
                buffered += len(line)
                ts = min(end, ts + step)
            if buffered > (1 << 20) or written + buffered >= nbytes:
                fh.write("".join(buf))
                written += buffered
                buf.clear()
                buffered = 0


def _fault_lines(spec: Spec, node_index: int, host: str) -> tuple[list[str], list[str]]:
    """(applog lines, syslog lines) appended after the noise, in time order."""
    t0 = _fault_time(spec).timestamp()
    ranks = spec.ranks
    base_rank = node_index * ranks
    pid0 = 20000 + (node_index % 50) * 100
    app: list[str] = []
    sys_: list[str] = []
    up = 700000 + (t0 - _START.timestamp())
    if node_index == spec.faulty_index:
        sys_.append(f"{_syslog_stamp(int(t0 - 1))} {host} kernel: [{up - 1:.6f}] pcieport 0000:97:01.0: AER: "
                    f"Uncorrected (Fatal) error received: 0000:9a:00.0")
        sys_.append(f"{_syslog_stamp(int(t0))} {host} kernel: [{up:.6f}] NVRM: Xid (PCI:{_FAULT_GPU_PCI}): 79, "
                    "pid='<unknown>', name=<unknown>, GPU has fallen off the bus.")
        sys_.append(f"{_syslog_stamp(int(t0))} {host} kernel: [{up + 0.002:.6f}] NVRM: GPU {_FAULT_GPU_PCI}.0: "
                    "GPU has fallen off the bus.")
        sys_.append(f"{_syslog_stamp(int(t0 + 4))} {host} kernel: [{up + 4:.6f}] NVRM: Xid (PCI:{_FAULT_GPU_PCI}): 45, "
                    f"pid={pid0 + _FAULT_LOCAL_RANK}, name=python, Ch 00000010")
        local = _FAULT_LOCAL_RANK
        app.append(f"{_iso(t0 + 1.141)} {host}:{pid0 + local}:{pid0 + 90 + local} [{local}] enqueue.cc:1556 "
                   "NCCL WARN Cuda failure 999 'unknown error'")
        app.append(f"{_iso(t0 + 1.146)} [rank{base_rank + local}]: RuntimeError: CUDA error: unknown error")
    t_timeout = t0 + 602
    hdr = datetime.fromtimestamp(t_timeout, tz=timezone.utc)
    for local in range(ranks):
        if node_index == spec.faulty_index and local == _FAULT_LOCAL_RANK:
            continue
        rank = base_rank + local
        ts = t_timeout + local * 0.037
        app.append(f"{_iso(ts)} [rank{rank}]:[E{hdr.month}{hdr.day:02d} {hdr:%H:%M:%S}.{local * 37:03d}000000 "
                   f"ProcessGroupNCCL.cpp:632] [PG ID 0 PG GUID 0(default_pg) Rank {rank}] Watchdog caught collective "
                   "operation timeout: WorkNCCL(SeqNum=120331, OpType=ALLREDUCE, NumelIn=4194304, "
                   "NumelOut=4194304, Timeout(ms)=600000) ran for 600013 milliseconds before timing out.")
    if node_index == 0:
        app.append(f"{_iso(t_timeout + 5)} srun: error: {host}: task 0: Exited with exit code 1")
    return app, sys_


def _write_node(args: tuple[Spec, int, str]) -> int:
    spec, i, out = args
    host = spec.node_name(i)
    node_dir = Path(out) / host
    node_dir.mkdir(parents=True, exist_ok=True)
    rng = random.Random(spec.seed * 1_000_003 + i)
    clock = _Clock()
    nbytes = int(spec.mib_per_node * 1024 * 1024)
    sys_bytes = int(nbytes * spec.syslog_share)
    start = _START.timestamp() + 20
    end = _fault_time(spec).timestamp() - 30
    app_path = node_dir / "applog.log"
    sys_path = node_dir / "syslog.log"
    _write_noise(app_path, nbytes - sys_bytes, _app_templates(spec, i, host, rng), rng, clock.iso, start, end)
    _write_noise(sys_path, sys_bytes, _syslog_templates(host, i), rng, clock.syslog, start - 600, end)
    app, sys_ = _fault_lines(spec, i, host)
    with open(app_path, "a", encoding="utf-8", newline="\n") as fh:
        fh.write("".join(line + "\n" for line in app))
    with open(sys_path, "a", encoding="utf-8", newline="\n") as fh:
        fh.write("".join(line + "\n" for line in sys_))
    return app_path.stat().st_size + sys_path.stat().st_size


def _scenario(spec: Spec) -> str:
    nodes = ", ".join(f'"{spec.node_name(i)}"' for i in range(spec.nodes))
    end = _fault_time(spec) + timedelta(seconds=640)
    return (f'id = "bench-{spec.key()}"\n'
            f'title = "Synthetic benchmark: {spec.nodes} nodes x {spec.ranks} ranks, {spec.mib_per_node} MB/node, '
            f'Xid 79 on {spec.faulty_node}"\n\n'
            "[workload]\n"
            'scheduler = "slurm"\n'
            f'job_id = "{9_000_000 + spec.seed}"\n'
            'scheduler_state = "FAILED"\n'
            'exit_code = "1:0"\n'
            f'start_time = "{_START:%Y-%m-%dT%H:%M:%SZ}"\n'
            f'end_time = "{end:%Y-%m-%dT%H:%M:%SZ}"\n'
            f"nodes = [{nodes}]\n"
            f"ranks_per_node = {spec.ranks}\n")


def generate(spec: Spec, out: Path, *, jobs: int = 1, reuse: bool = True) -> dict[str, object]:
    """Write the workload (or reuse an identical one already at `out`). Returns the manifest."""
    manifest_path = out / _MANIFEST
    if reuse and manifest_path.is_file():
        manifest = json.loads(manifest_path.read_text())
        if manifest.get("key") == spec.key() and manifest.get("complete"):
            return manifest
    if out.exists():
        shutil.rmtree(out)
    out.mkdir(parents=True)
    started = time.perf_counter()
    tasks = [(spec, i, str(out)) for i in range(spec.nodes)]
    if jobs > 1 and spec.nodes > 1:
        with ProcessPoolExecutor(max_workers=jobs) as pool:
            sizes = list(pool.map(_write_node, tasks, chunksize=max(1, len(tasks) // (jobs * 8))))
    else:
        sizes = [_write_node(t) for t in tasks]
    (out / "scenario.toml").write_text(_scenario(spec), encoding="utf-8")
    manifest = {"key": spec.key(), "spec": asdict(spec), "bytes": sum(sizes), "files": 2 * spec.nodes,
                "expected": expected(spec), "generated_s": round(time.perf_counter() - started, 2),
                "complete": True}
    manifest_path.write_text(json.dumps(manifest, indent=2) + "\n")
    return manifest


def default_jobs() -> int:
    return max(1, min(os.cpu_count() or 1, 8))
