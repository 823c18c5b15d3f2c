"""GPU Xid rules: burst decoding (HandleXidBurstEvents), NVLink5 decode, and per-node Xid ordering.

Facts used (docs/rules.md cites them): NVIDIA Xid catalog resolution buckets; the "XID 144-150 Decode"
sheet (IntrInfo unit field by driver generation, reason sub-code in bits 25:20, errorStatus rows); NVIDIA
Fleet Intelligence's burst definition (Xids of a node until 3 minutes of silence); the catalog's ordering
guidance: within a burst the earliest hardware-class Xid is the root, and 45/43/154 and later
application-class Xids are its symptoms.
"""

from __future__ import annotations

import importlib.resources
import re
import tomllib
from dataclasses import dataclass
from datetime import timedelta
from functools import lru_cache

from firstfault.engine.model import EventType
from firstfault.engine.rules_api import Phase, RuleCase, filter_rule, refiner
from firstfault.engine.workspace import EmitSpec, Workspace

NVLINK5_CODES = range(144, 151)
# Bits 25:20 of IntrInfo carry the NETIR link-down reason (decode sheet; gpud calculateSubCode).
SUBCODE_SHIFT, SUBCODE_MASK = 20, 0x3F
R575 = 575  # drivers >= R575 print the V2 IntrInfo layout
_DRIVER_RE = re.compile(r"^(\d{3})\.")
_CAUSED_BY_RE = re.compile(r"caused by previous Xid (\d+)")


@dataclass(frozen=True)
class DecodeRow:
    xid: int
    unit: str
    v1: str
    v2: str
    error_status: int | None  # None: any
    immediate: str
    investigatory: str
    severity: str
    hw_sw: str
    impact: str


@dataclass(frozen=True)
class Nvlink5Decode:
    xid: int
    unit: str
    subcode: int
    layout: str  # v1 | v2
    immediate: str
    investigatory: str
    severity: str
    hw_sw: str
    impact: str

    @property
    def symptom(self) -> str:
        if self.unit.startswith("NETIR_LINK"):
            return f"XID-{self.xid}.{self.subcode}"
        return f"XID-{self.xid}.{self.unit.split('/')[0]}"

    @property
    def fatal(self) -> bool:
        return self.immediate not in ("IGNORE", "XID_154_EVAL")


@lru_cache(maxsize=1)
def decode_rows() -> tuple[DecodeRow, ...]:
    blob = (importlib.resources.files("firstfault.rules") / "data" / "nvlink5_decode.toml").read_bytes()
    rows = []
    for r in tomllib.loads(blob.decode())["row"]:
        status = None if r["error_status"] == "any" else int(r["error_status"], 16)
        rows.append(DecodeRow(xid=r["xid"], unit=r["unit"], v1=r["v1"], v2=r["v2"], error_status=status,
                              immediate=r["immediate"], investigatory=r["investigatory"], severity=r["severity"],
                              hw_sw=r["hw_sw"], impact=r["impact"]))
    return tuple(rows)


def _mask_matches(mask: str, value: int) -> bool:
    bits = f"{value & 0xFFFFFFFF:032b}"
    return all(m == "-" or m == b for m, b in zip(mask, bits, strict=True))


def decode_nvlink5(xid: int, intrinfo: int, error_status: int, unit_text: str = "",
                   driver_major: int | None = None) -> Nvlink5Decode | None:
    """Decode one NVLink5 Xid (144-150) line. Returns None when no row of the sheet matches.

    The unit field sits in IntrInfo[9:5] (V1, drivers < R575) or IntrInfo[6:0] (V2, >= R575). With a known
    driver version only that layout is tried; otherwise both, preferring the row whose unit name matches the
    unit printed in the line.
    """
    layouts = ["v1", "v2"]
    if driver_major is not None:
        layouts = ["v2"] if driver_major >= R575 else ["v1"]
    printed = unit_text.split("/")[0]
    best: tuple[int, DecodeRow, str] | None = None
    for row in decode_rows():
        if row.xid != xid:
            continue
        if row.error_status is not None:
            if row.error_status == 0 and error_status != 0:
                continue
            if row.error_status != 0 and not error_status & row.error_status:
                continue
        for layout in layouts:
            if not _mask_matches(row.v1 if layout == "v1" else row.v2, intrinfo):
                continue
            score = (2 if printed and row.unit.split("/")[0] == printed else 0) + (1 if _fatal(row) else 0)
            if best is None or score > best[0]:
                best = (score, row, layout)
    if best is None:
        return None
    _, row, layout = best
    return Nvlink5Decode(xid=xid, unit=row.unit, subcode=(intrinfo >> SUBCODE_SHIFT) & SUBCODE_MASK, layout=layout,
                         immediate=row.immediate, investigatory=row.investigatory, severity=row.severity,
                         hw_sw=row.hw_sw, impact=row.impact)


def _fatal(row: DecodeRow) -> bool:
    return row.immediate not in ("IGNORE", "XID_154_EVAL")


def _driver_major(ws: Workspace, node: str | None) -> int | None:
    for event in ws.events_of(f"{EventType.CONTEXT}.driver_version"):
        if event.node == node:
            m = _DRIVER_RE.match(str(event.attributes.get("version", "")))
            if m:
                return int(m.group(1))
    return None


_WALKTHROUGH_CASE = RuleCase(
    title="seed walkthrough",
    evidence={
        "node-01/applog": ["2025-01-01T00:30:00Z node-01:1:1 [0] transport/net_ib.cc:1 NCCL WARN NET/IB : Got "
                           "completion from peer 10.0.0.2<1234> with status=5 opcode=0 len=0 vendor err 249 (Recv)"],
        "node-02/syslog": ["Jan  1 00:29:58 node-02 kernel: [100.1] NVRM: Xid (PCI:0008:01:00): 149, NETIR_LINK_EVT "
                           "Fatal XC0 i0 Link 08 (0x004505c6 0x00000000 0x00000000 0x00000000 0x00000000 0x00000000)"],
        "node-03/applog": ["2025-01-01T00:40:00Z [rank8]:[E0101 00:40:00.000000000 ProcessGroupNCCL.cpp:1] [PG ID 0 "
                           "PG GUID 0(default_pg) Rank 8] Watchdog caught collective operation timeout: "
                           "WorkNCCL(SeqNum=9, OpType=ALLREDUCE, NumelIn=1, NumelOut=1, Timeout(ms)=600000) ran "
                           "for 600010 milliseconds before timing out."],
    },
    expect={"fired": True, "root_symptom": "XID-149.4", "sub_domain": "nvlink", "culprits": ["node-02"]},
)


@filter_rule("HandleXidBurstEvents", phase=Phase.FILTER_EARLY, doc="""
Decode raw Xid burst events into node symptoms. Xid 144-150 (NVLink5) are decoded from IntrInfo and
errorStatus (decode sheet): a fatal row becomes a bad symptom named XID-<code>.<reason sub-code> (link-down
rows) or XID-<code>.<unit>, a non-fatal row an interesting one; the decoded immediate and investigatory
actions become the symptom's next action. Other Xids become XID-<code>, bad unless the catalog calls the
code informational. Each decode is also published as an XID_parser.info event for inspection.
""", cases=[
    _WALKTHROUGH_CASE,
    RuleCase(title="no xid", evidence={"node-01/applog": ["2025-01-01T00:00:00Z training step 10 loss 1.0"]},
             expect={"fired": False}),
])
def handle_xid_burst_events(ws: Workspace) -> None:
    for event in ws.events_of(EventType.XID_BURST):
        ws.drop(event, "decoded")
        code = int((event.symptom or "XID-0").removeprefix("XID-"))
        attributes = dict(event.attributes)
        symptom = f"XID-{code}"
        bad = ws.catalog.symptom(symptom).role != "context"
        if code in NVLINK5_CODES and attributes.get("intrinfo"):
            decoded = decode_nvlink5(code, int(attributes["intrinfo"], 16), int(attributes.get("error_status", "0x0"), 16),
                                     str(attributes.get("unit", "")), _driver_major(ws, event.node))
            if decoded is not None:
                symptom, bad = decoded.symptom, decoded.fatal
                attributes.update(unit=decoded.unit, subcode=decoded.subcode, decode_layout=decoded.layout,
                                  immediate=decoded.immediate, investigatory=decoded.investigatory,
                                  severity=decoded.severity, hw_sw=decoded.hw_sw, impact=decoded.impact)
            else:
                attributes["decode"] = "no row of the NVLink5 decode sheet matches"
        caused_by = _CAUSED_BY_RE.search(event.evidence.text)
        if caused_by:
            attributes["caused_by_xid"] = caused_by.group(1)
        spec = EmitSpec(type=EventType.NODE_BAD if bad else EventType.NODE_INTERESTING, node=event.node,
                        symptom=symptom, evidence=event.evidence, time=event.time, last_time=event.last_time,
                        attributes=attributes, count=event.count)
        ws.emit(spec)
        ws.emit(EmitSpec(type=EventType.XID_INFO, node=event.node, symptom=symptom, evidence=event.evidence,
                         time=event.time, attributes=attributes, count=event.count))


@refiner("XidBurstRoot", phase=Phase.CLEAN, doc="""
Within one node's Xid burst (events less than burst_gap_s apart, 3 minutes by default) the earliest
hardware-class Xid (strength >= 80: 48, 62, 64, 74, 79, 94, 95, 119/120, 140, 143, fatal NVLink5 ...) is
the root. Later Xids of the burst, and application-class Xids (13, 31, 43) in it, are its symptoms: a GPU
that fell off the bus makes NVLink peers log 74 and running contexts log 13/31/45.
""", cases=[
    RuleCase(title="79 then 74", evidence={"n1/syslog": [
        "Jan  1 00:10:00 n1 kernel: NVRM: Xid (PCI:0000:91:00): 79, pid='<unknown>', name=<unknown>, GPU has fallen off the bus.",
        "Jan  1 00:10:05 n1 kernel: NVRM: Xid (PCI:0000:92:00): 74, pid='<unknown>', name=<unknown>, NVLink: fatal error detected on link 3(0x0, 0x0, 0x10000, 0x0, 0x0, 0x0, 0x0)"]},
        expect={"root_symptom": "XID-79", "demoted": ["XID-74"], "culprits": ["n1"]}),
    RuleCase(title="single xid", evidence={"n1/syslog": [
        "Jan  1 00:10:00 n1 kernel: NVRM: Xid (PCI:0000:91:00): 79, pid='<unknown>', name=<unknown>, GPU has fallen off the bus."]},
        expect={"fired": False, "root_symptom": "XID-79"}),
])
def xid_burst_root(ws: Workspace) -> None:
    gap = timedelta(seconds=ws.params.burst_gap_s)
    nodes = sorted({s.node or "" for s in ws.active(role="root") if s.definition.family == "xid"})
    for node in nodes:
        xids = sorted((s for s in ws.select(status="bad", node=node or None, family="xid")), key=lambda s: s.sort_key())
        hardware = [s for s in xids if s.role == "root" and s.definition.strength >= 80]
        if not hardware or hardware[0].first_time is None:
            continue
        root = hardware[0]
        for other in xids:
            if other is root or other.first_time is None:
                continue
            in_burst = other.first_time <= (root.last_time or root.first_time) + gap
            application_class = other.definition.strength < 80
            if in_burst and (other.first_time >= root.first_time or application_class):
                ws.demote(other, f"in the Xid burst of {root.name} on the same node, which came first")
