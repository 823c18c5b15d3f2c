"""Metric extractors (node_metrics observations) and the refiner that reads counter increases.

Facts used: dcgm-exporter's DCGM_FI_DEV_XID_ERRORS gauge holds the value of the last Xid seen on a GPU (not a
count); ECC DBE and NVLink error counters and node_exporter's node_infiniband_link_downed_total are counters,
so what matters is an increase inside the workload window; DCGM_FI_DEV_ROW_REMAP_FAILURE = 1 is a row-remap
failure (docs/domain.md §4.1, §4.2).
"""

from __future__ import annotations

from firstfault.engine.model import Event, EventType, Evidence, MetricSample, Provenance, SourceKind
from firstfault.engine.rules_api import Expect, Phase, RuleCase, filter_rule, metric_extractor, refiner
from firstfault.engine.workspace import EmitSpec, Workspace

COUNTERS = {
    "DCGM_FI_DEV_ECC_DBE_VOL_TOTAL": "GPU uncorrectable ECC (DCGM counter)",
    "DCGM_FI_DEV_ECC_DBE_AGG_TOTAL": "GPU uncorrectable ECC (DCGM counter)",
    "DCGM_FI_DEV_NVLINK_CRC_FLIT_ERROR_COUNT_TOTAL": "NVLink error counters rising (DCGM)",
    "DCGM_FI_DEV_NVLINK_CRC_DATA_ERROR_COUNT_TOTAL": "NVLink error counters rising (DCGM)",
    "DCGM_FI_DEV_NVLINK_REPLAY_ERROR_COUNT_TOTAL": "NVLink error counters rising (DCGM)",
    "DCGM_FI_DEV_NVLINK_RECOVERY_ERROR_COUNT_TOTAL": "NVLink error counters rising (DCGM)",
    "node_infiniband_link_downed_total": "IB link downed counter rising",
}


def _evidence(sample: MetricSample) -> Evidence:
    labels = ",".join(f'{k}="{v}"' for k, v in sorted(sample.labels.items()))
    return Evidence(source=SourceKind.NODE_METRICS, node=None, time=None,
                    text=f"{sample.name}{{{labels}}} {sample.value:g}", provenance=Provenance(origin=sample.name))


def _gpu_attributes(sample: MetricSample) -> dict[str, object]:
    attrs: dict[str, object] = {"metric": sample.name, "value": f"{sample.value:g}"}
    for label, key in (("pci_bus_id", "pci"), ("gpu", "gpu"), ("UUID", "uuid"), ("device", "device"), ("port", "port")):
        if sample.labels.get(label):
            attrs[key] = sample.labels[label]
    return attrs


def _gpu_key(event: Event) -> str:
    """One GPU's identity in its samples: the UUID, else the PCI bus id, else the NVML index."""
    return str(event.attributes.get("uuid") or event.attributes.get("pci") or event.attributes.get("gpu") or "")


GAUGE_FACT = f"{EventType.CONTEXT}.dcgm_xid_gauge"


@metric_extractor("DcgmXidGauge", metrics=("DCGM_FI_DEV_XID_ERRORS",), doc="""
DCGM_FI_DEV_XID_ERRORS is a gauge holding the code of the last Xid on a GPU until the exporter restarts: every
sample (0 included) is kept as a fact, one per GPU and value; DcgmXidGaugeChanges turns a value into an Xid only
when the gauge took it inside the window.""")
def dcgm_xid_gauge(sample: MetricSample) -> list[EmitSpec]:
    if sample.value < 0 or sample.value != int(sample.value):
        return []
    return [EmitSpec(type=GAUGE_FACT, node=None, symptom=f"{int(sample.value)}", evidence=_evidence(sample),
                     attributes={**_gpu_attributes(sample), "xid": str(int(sample.value)),
                                 "form": "dcgm-exporter gauge"})]


@filter_rule("DcgmXidGaugeChanges", phase=Phase.FILTER_EARLY, doc="""
A DCGM Xid gauge counts an Xid only where its value changes inside the window: a GPU whose gauge first reads 0 (or
another code) and later reads N had Xid N during the workload, timed at its first sample of N. A gauge that reads
the same code throughout holds an Xid from before the workload (it keeps its last value until the exporter
restarts) and blames nothing.
""", cases=[
    RuleCase(title="the gauge jumps inside the window", evidence={}, metrics={"n1": [
        ("DCGM_FI_DEV_XID_ERRORS", {"gpu": "3", "Hostname": "n1"}, 0.0, "2025-01-01T00:10:00+00:00"),
        ("DCGM_FI_DEV_XID_ERRORS", {"gpu": "3", "Hostname": "n1"}, 79.0, "2025-01-01T00:11:00+00:00")]},
        expect=Expect(fired=True, sub_domain="gpu", culprits=["n1"], root_symptom="XID-79")),
    RuleCase(title="the gauge holds an old Xid", evidence={}, metrics={"n1": [
        ("DCGM_FI_DEV_XID_ERRORS", {"gpu": "3", "Hostname": "n1"}, 79.0, "2025-01-01T00:10:00+00:00"),
        ("DCGM_FI_DEV_XID_ERRORS", {"gpu": "3", "Hostname": "n1"}, 79.0, "2025-01-01T00:11:00+00:00")]},
        expect=Expect(fired=True, sub_domain="unknown", culprits=[])),
])
def dcgm_xid_gauge_changes(ws: Workspace) -> None:
    by_gpu: dict[tuple[str | None, str], list[Event]] = {}
    for event in ws.events_of(GAUGE_FACT):
        by_gpu.setdefault((event.node, _gpu_key(event)), []).append(event)
    for (node, gpu), samples in sorted(by_gpu.items(), key=lambda item: (item[0][0] or "", item[0][1])):
        for event in samples:
            ws.drop(event, "DCGM Xid gauge sample")
        timed = sorted((e for e in samples if e.time is not None), key=lambda e: (e.time, e.symptom or ""))
        if len({e.symptom for e in samples}) < 2:
            if timed and timed[0].symptom != "0":
                ws.note("consume", f"DCGM Xid gauge of GPU {gpu or '?'} holds {timed[0].symptom} through the window: "
                        "an Xid from before the workload", node=node)
            continue
        first_value = timed[0].symptom if timed else None
        for event in timed:
            if event.symptom in ("0", first_value):
                continue
            ws.emit(EmitSpec(type=EventType.XID_BURST, node=node, symptom=f"XID-{event.symptom}",
                             evidence=event.evidence, time=event.time, attributes=dict(event.attributes)))


@metric_extractor("DcgmRowRemapFailure", metrics=("DCGM_FI_DEV_ROW_REMAP_FAILURE",), doc="""
DCGM_FI_DEV_ROW_REMAP_FAILURE = 1: the GPU failed to remap a memory row.""")
def dcgm_row_remap_failure(sample: MetricSample) -> list[EmitSpec]:
    if sample.value < 1:
        return []
    return [EmitSpec(type=EventType.NODE_BAD, node=None, symptom="GPU row remap failure (DCGM)",
                     evidence=_evidence(sample), attributes=_gpu_attributes(sample))]


@metric_extractor("ErrorCounterSample", metrics=tuple(COUNTERS), doc="""
Samples of error counters (ECC DBE, NVLink CRC/replay/recovery, IB link_downed) are kept as interesting
evidence per counter; CounterIncrease promotes them when the counter rose inside the window.""")
def error_counter_sample(sample: MetricSample) -> list[EmitSpec]:
    return [EmitSpec(type=EventType.NODE_INTERESTING, node=None, symptom=COUNTERS[sample.name],
                     evidence=_evidence(sample), attributes=_gpu_attributes(sample))]


_DBE = "DCGM_FI_DEV_ECC_DBE_VOL_TOTAL"


@refiner("CounterIncrease", phase=Phase.CLEAN, doc="""
An error counter that rose inside the workload window (its highest sample exceeds its lowest) is a root
candidate on its node; a flat counter (errors from before the job) stays context.""", cases=[
    RuleCase(title="DBE counter rises", evidence={}, metrics={"n1": [
        (_DBE, {"gpu": "3", "Hostname": "n1"}, 0.0, "2025-01-01T00:10:00+00:00"),
        (_DBE, {"gpu": "3", "Hostname": "n1"}, 2.0, "2025-01-01T00:11:00+00:00")]},
        expect=Expect(fired=True, sub_domain="gpu", culprits=["n1"])),
    RuleCase(title="flat counter", evidence={}, metrics={"n1": [
        (_DBE, {"gpu": "3", "Hostname": "n1"}, 5.0, "2025-01-01T00:10:00+00:00"),
        (_DBE, {"gpu": "3", "Hostname": "n1"}, 5.0, "2025-01-01T00:11:00+00:00")]},
        expect=Expect(fired=False, sub_domain="unknown")),
])
def counter_increase(ws: Workspace) -> None:
    for name in sorted(set(COUNTERS.values())):
        for s in ws.select(prefix=name, status="interesting"):
            values = sorted(float(v) for v in s.value_set("value"))
            if len(values) >= 2 and values[-1] > values[0]:
                s.attributes["increase"] = f"{values[-1] - values[0]:g}"
                ws.promote(s, f"{name}: counter rose by {values[-1] - values[0]:g} during the workload")


# NVML clocks-event (throttle) reason bits that mean the hardware or the thermal/power protection slowed the GPU
# (nvmlClocksEventReason*: idle 0x1, application clocks 0x2, SW power cap 0x4 and sync boost 0x10 are routine).
SLOWDOWN_REASONS = {0x8: "hardware slowdown", 0x20: "software thermal slowdown", 0x40: "hardware thermal slowdown",
                    0x80: "hardware power brake slowdown"}


@metric_extractor("DcgmClockSlowdownReasons", metrics=("DCGM_FI_DEV_CLOCKS_EVENT_REASONS",
                                                       "DCGM_FI_DEV_CLOCK_THROTTLE_REASONS"), doc="""
DCGM_FI_DEV_CLOCKS_EVENT_REASONS (older name ..._CLOCK_THROTTLE_REASONS) is NVML's clocks-event bitmask. A sample
with a hardware, thermal or power-brake slowdown bit set (0x8, 0x20, 0x40, 0x80) is supporting evidence that the
GPU ran hot or was held back by its protection; idle, application-clock, power-cap and sync-boost bits are routine.""")
def dcgm_clock_slowdown_reasons(sample: MetricSample) -> list[EmitSpec]:
    if sample.value < 0 or sample.value != int(sample.value):
        return []
    reasons = [name for bit, name in SLOWDOWN_REASONS.items() if int(sample.value) & bit]
    if not reasons:
        return []
    return [EmitSpec(type=EventType.NODE_INTERESTING, node=None, symptom="GPU clocks slowed by protection (DCGM)",
                     evidence=_evidence(sample), attributes={**_gpu_attributes(sample), "reasons": ", ".join(reasons)})]


GPU_GAUGE_FACT = f"{EventType.CONTEXT}.dcgm_gpu_gauge"
SUPPORTING_GAUGES = ("DCGM_FI_DEV_GPU_TEMP", "DCGM_FI_DEV_SLOWDOWN_TEMP", "DCGM_FI_DEV_PCIE_REPLAY_COUNTER")


@metric_extractor("DcgmGpuGauge", metrics=SUPPORTING_GAUGES, doc="""
GPU temperature, its slowdown threshold and the PCIe replay counter are kept as facts per GPU; SupportingGpuMetrics
reads them together.""")
def dcgm_gpu_gauge(sample: MetricSample) -> list[EmitSpec]:
    return [EmitSpec(type=GPU_GAUGE_FACT, node=None, symptom=sample.name, evidence=_evidence(sample),
                     attributes=_gpu_attributes(sample))]


def _readings(samples: list[Event], metric: str) -> list[float]:
    """Every value a GPU's samples of `metric` took (identical samples are coalesced into one event with values)."""
    found: set[float] = set()
    for e in samples:
        if e.symptom == metric:
            found.update(float(v) for v in [*e.values.get("value", []), str(e.attributes["value"])])
    return sorted(found)


@filter_rule("SupportingGpuMetrics", phase=Phase.FILTER_EARLY, doc="""
Per GPU, within the window: a temperature at or above the GPU's own slowdown threshold (DCGM_FI_DEV_GPU_TEMP >=
DCGM_FI_DEV_SLOWDOWN_TEMP; no threshold is assumed when the GPU does not report one), and a PCIe replay counter that
rose (link retries: corrected, so a symptom of a poor link, not a failure by itself). Both are interesting
evidence on the GPU's node, never a root cause on their own.
""", cases=[
    RuleCase(title="hot GPU and PCIe replays", evidence={}, metrics={"n1": [
        ("DCGM_FI_DEV_GPU_TEMP", {"gpu": "2", "Hostname": "n1"}, 71.0, "2025-01-01T00:10:00+00:00"),
        ("DCGM_FI_DEV_GPU_TEMP", {"gpu": "2", "Hostname": "n1"}, 93.0, "2025-01-01T00:11:00+00:00"),
        ("DCGM_FI_DEV_SLOWDOWN_TEMP", {"gpu": "2", "Hostname": "n1"}, 90.0, "2025-01-01T00:11:00+00:00"),
        ("DCGM_FI_DEV_PCIE_REPLAY_COUNTER", {"gpu": "2", "Hostname": "n1"}, 10.0, "2025-01-01T00:10:00+00:00"),
        ("DCGM_FI_DEV_PCIE_REPLAY_COUNTER", {"gpu": "2", "Hostname": "n1"}, 4810.0, "2025-01-01T00:11:00+00:00")]},
        expect=Expect(fired=True, sub_domain="unknown", culprits=[],
                      demoted=["GPU at its slowdown temperature (DCGM)", "PCIe replays rising (DCGM)"])),
    RuleCase(title="warm but below the threshold, flat replays", evidence={}, metrics={"n1": [
        ("DCGM_FI_DEV_GPU_TEMP", {"gpu": "2", "Hostname": "n1"}, 84.0, "2025-01-01T00:11:00+00:00"),
        ("DCGM_FI_DEV_SLOWDOWN_TEMP", {"gpu": "2", "Hostname": "n1"}, 90.0, "2025-01-01T00:11:00+00:00"),
        ("DCGM_FI_DEV_PCIE_REPLAY_COUNTER", {"gpu": "2", "Hostname": "n1"}, 10.0, "2025-01-01T00:10:00+00:00"),
        ("DCGM_FI_DEV_PCIE_REPLAY_COUNTER", {"gpu": "2", "Hostname": "n1"}, 10.0, "2025-01-01T00:11:00+00:00")]},
        expect=Expect(fired=True, sub_domain="unknown", culprits=[],
                      absent=["GPU at its slowdown temperature", "PCIe replays rising"])),
])
def supporting_gpu_metrics(ws: Workspace) -> None:
    by_gpu: dict[tuple[str, str], list[Event]] = {}
    for event in ws.events_of(GPU_GAUGE_FACT):
        ws.drop(event, "DCGM GPU gauge sample")
        by_gpu.setdefault((event.node or "", _gpu_key(event)), []).append(event)
    for _, samples in sorted(by_gpu.items()):
        temps, limits = _readings(samples, "DCGM_FI_DEV_GPU_TEMP"), _readings(samples, "DCGM_FI_DEV_SLOWDOWN_TEMP")
        if temps and limits and temps[-1] >= limits[0]:
            _emit_supporting(ws, samples, "DCGM_FI_DEV_GPU_TEMP", "GPU at its slowdown temperature (DCGM)",
                             {"peak_temp": f"{temps[-1]:g}", "slowdown_temp": f"{limits[0]:g}"})
        replays = _readings(samples, "DCGM_FI_DEV_PCIE_REPLAY_COUNTER")
        if len(replays) >= 2:
            _emit_supporting(ws, samples, "DCGM_FI_DEV_PCIE_REPLAY_COUNTER", "PCIe replays rising (DCGM)",
                             {"increase": f"{replays[-1] - replays[0]:g}"})


def _emit_supporting(ws: Workspace, samples: list[Event], metric: str, symptom: str, extra: dict[str, object]) -> None:
    sample = next(e for e in samples if e.symptom == metric)
    ws.emit(EmitSpec(type=EventType.NODE_INTERESTING, node=sample.node, symptom=symptom, evidence=sample.evidence,
                     time=sample.time, last_time=sample.last_time,
                     attributes={**{k: v for k, v in sample.attributes.items() if k != "value"}, **extra}))
