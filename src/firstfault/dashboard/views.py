"""What the pages show, computed from the stored results: the headline, the cross-node timeline, the charts.

Pure functions producing plain data (geometry, text segments); the Jinja templates turn them into HTML and SVG,
so every string that came from a log or a workload is escaped by the template engine.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta

from firstfault.blueprint.result import AttributionBlueprintResult
from firstfault.dashboard.db import Bucket, node_href
from firstfault.engine.model import Attribution, SymptomView

# -- colours and badges -------------------------------------------------------------------------------------
OUTCOME_COLORS = {
    "Fail InfraHW": "#d43f3a", "Fail InfraSW": "#e8833a", "Fail User": "#7c5cd6", "Fail Scheduler": "#c59a0a",
    "Fail Unknown": "#7b8794", "Pass": "#2e9e5b", "not attributed": "#3d4451",
}
SUB_DOMAIN_COLORS = {
    "gpu": "#d43f3a", "nvlink": "#b5179e", "network": "#3a6fd4", "storage": "#e8833a", "host": "#8c564b",
    "host_oom": "#9467bd", "gpu_oom": "#7c5cd6", "application": "#4f9fcf", "configuration": "#17a2a2",
    "scheduler": "#c59a0a", "ambiguous": "#a0a7b1", "unknown": "#7b8794", "none": "#2e9e5b",
    "not attributed": "#3d4451",
}
_OUTCOME_CLASS = {"Fail InfraHW": "hw", "Fail InfraSW": "sw", "Fail User": "user", "Fail Scheduler": "sched",
                  "Fail Unknown": "unknown", "Pass": "pass"}


def outcome_class(outcome: str | None) -> str:
    """CSS class of an outcome badge (a fixed set: never built from stored text)."""
    return "o-" + _OUTCOME_CLASS.get(outcome or "", "none")


def color(key: str, palette: dict[str, str]) -> str:
    return palette.get(key, "#9aa3ad")


# -- times --------------------------------------------------------------------------------------------------
def parse_time(value: str | datetime | None) -> datetime | None:
    if value is None or value == "":
        return None
    if isinstance(value, datetime):
        return value if value.tzinfo else value.replace(tzinfo=UTC)
    try:
        parsed = datetime.fromisoformat(value)
    except ValueError:
        return None
    return parsed if parsed.tzinfo else parsed.replace(tzinfo=UTC)


def fmt_time(value: str | datetime | None, seconds: bool = True) -> str:
    """`2026-03-02 09:12:40Z` (UTC, like the stored times)."""
    t = parse_time(value)
    if t is None:
        return "—"
    t = t.astimezone(UTC)
    return t.strftime("%Y-%m-%d %H:%M:%S" if seconds else "%Y-%m-%d %H:%M") + "Z"


def fmt_clock(value: str | datetime | None) -> str:
    """`08:57:32.154` (with milliseconds only when they are not zero)."""
    t = parse_time(value)
    if t is None:
        return "—"
    t = t.astimezone(UTC)
    text = t.strftime("%H:%M:%S")
    return text + (f".{t.microsecond // 1000:03d}" if t.microsecond else "")


def fmt_duration(seconds: float) -> str:
    seconds = abs(seconds)
    if seconds < 1:
        return f"{seconds * 1000:.0f} ms"
    if seconds < 60:
        return f"{seconds:.1f} s" if seconds < 10 and seconds != int(seconds) else f"{seconds:.0f} s"
    minutes, secs = divmod(round(seconds), 60)
    if minutes < 60:
        return f"{minutes}m {secs:02d}s" if secs else f"{minutes} min"
    hours, minutes = divmod(minutes, 60)
    if hours < 48:
        return f"{hours}h {minutes:02d}m"
    return f"{hours // 24}d {hours % 24}h" if hours % 24 else f"{hours // 24}d"


# -- the headline -------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class Segment:
    """A piece of the headline: `kind` is text, node (linked), symptom, time or strong."""

    kind: str
    text: str
    href: str | None = None


def headline(d: Attribution) -> list[Segment]:
    """The diagnosis in one sentence, as segments the template can emphasise and link."""
    s: list[Segment] = []
    ended = [Segment("text", " The workload ended "), Segment("strong", d.terminal_state.value),
             Segment("text", f" ({d.outcome.value}, {d.sub_domain.value}).")]
    root = d.root_cause
    if d.sub_domain.value == "none":
        return [Segment("strong", "No failure:"), Segment("text", " the evidence names no fault."), *ended]
    if d.sub_domain.value == "ambiguous":
        s.append(Segment("strong", "Ambiguous:"))
        s.append(Segment("text", f" {len(d.candidates) or 'several'} causes fit the evidence"))
        for i, cand in enumerate(d.candidates[:4]):
            s.append(Segment("text", ": " if i == 0 else "; "))
            s.append(Segment("symptom", cand.symptom))
            if cand.nodes:
                s.append(Segment("text", " on "))
                for j, node in enumerate(cand.nodes[:3]):
                    if j:
                        s.append(Segment("text", ", "))
                    s.append(Segment("node", node, node_href(node)))
        s.append(Segment("text", ". The evidence does not decide between them."))
        return [*s, *ended]
    if root is None:
        return [Segment("strong", "Cause unknown:"), Segment("text", " the available evidence names no fault."),
                *ended]
    s.append(Segment("symptom", root.symptom))
    if root.description:
        s.append(Segment("text", f" ({root.description.rstrip('.')})"))
    if root.node:
        s.append(Segment("text", " on "))
        s.append(Segment("node", root.node, node_href(root.node)))
    where = []
    if root.gpu:
        where.append(f"GPU {root.gpu}")
    if root.link:
        where.append(f"link {root.link}")
    if where:
        s.append(Segment("text", f" ({', '.join(where)})"))
    if root.time:
        s.append(Segment("text", " at "))
        s.append(Segment("time", fmt_time(root.time)))
    s.append(Segment("text", " began the failure."))
    culprits = [c.node for c in d.culprit_nodes]
    if root.node and culprits and root.node not in culprits:
        s.append(Segment("text", " Blamed: "))
        for i, node in enumerate(culprits):
            if i:
                s.append(Segment("text", ", "))
            s.append(Segment("node", node, node_href(node)))
        s.append(Segment("text", "."))
    return [*s, *ended]


def headline_text(d: Attribution) -> str:
    return "".join(seg.text for seg in headline(d))


def symptom_order(d: Attribution) -> list[tuple[int, SymptomView]]:
    """The symptoms with their index in the result: the root first, then active ones, then the supporting
    evidence by time, context last."""
    root = d.root_cause
    root_key = (root.node, root.symptom) if root else None
    rank = {"root": 0, "bad": 1, "demoted": 2, "interesting": 2, "context": 3}
    never = datetime.max.replace(tzinfo=UTC)
    return sorted(enumerate(d.symptoms), key=lambda p: (rank[_kind(p[1], root_key)], p[1].first_time or never, p[0]))


# -- incomplete evidence ------------------------------------------------------------------------------------
@dataclass(frozen=True)
class EvidenceGap:
    """Evidence a collector delivered less of than it should have (the workload page's warning lists them)."""

    kind: str                        # the collector's kind (`logs`, `metrics`), or `engine` for what it could not read
    connector: str
    status: str                      # error | empty | partial (or another status a connector reports)
    reason: str
    nodes: tuple[str, ...] = ()      # the allocated nodes it delivered nothing for


# Coverage issues the engine derives from which nodes had evidence at all. They are not a collector's shortfall:
# a job's stdout is one file, read for its batch host, and a node with a quiet syslog has nothing to report.
_DERIVED_ISSUES = ("no evidence at all from ", "evidence from nodes outside the allocation ignored")


def evidence_gaps(result: AttributionBlueprintResult) -> list[EvidenceGap]:
    """Where a collector really returned less than it should have, from its reports and the engine's coverage:

    - a report with status `error`; or any other status than `ok` (`empty`, `partial`) when the workload ran on
      nodes, which should have had evidence;
    - a collector that delivered for two or more of the allocated nodes but not for all: a per-node source that
      missed nodes (one that delivered for one node only is taken to be job-wide, like a job's stdout);
    - a problem the engine had reading what was delivered (lines or events dropped).

    Nodes without a log of some source (the other nodes of a job whose stdout is one file) are not a gap."""
    allocated = result.context.nodes
    gaps: list[EvidenceGap] = []
    for report in result.connector_reports:
        if report.status == "error" or (report.status != "ok" and allocated):
            gaps.append(EvidenceGap(report.kind, report.connector, report.status, report.reason))
            continue
        delivered = set(report.nodes)
        covered = [n for n in allocated if n in delivered]
        missed = tuple(n for n in allocated if n not in delivered)
        if len(covered) > 1 and missed:
            reason = f"delivered for {len(covered)} of {len(allocated)} nodes, nothing for {len(missed)}"
            gaps.append(EvidenceGap(report.kind, report.connector, "partial", reason, missed))
    if result.diagnosis is not None:
        gaps += [EvidenceGap("engine", "", "partial", issue) for issue in result.diagnosis.coverage.issues
                 if not issue.startswith(_DERIVED_ISSUES)]
    return gaps


# -- the timeline across nodes ------------------------------------------------------------------------------
@dataclass
class TimelineEvent:
    index: int           # position in the symptom list (the anchor of its row below the timeline)
    lane: int
    x: float
    x2: float
    y: float
    kind: str            # root | bad | demoted | interesting | context
    symptom: str
    title: str
    inferred: bool


@dataclass
class Lane:
    name: str
    href: str | None
    y: float
    height: float
    culprit: bool
    root: bool


@dataclass
class Tick:
    x: float
    label: str
    major: bool = False


@dataclass
class AxisBreak:
    x: float
    label: str


@dataclass
class Marker:
    x: float
    label: str
    kind: str            # start | end | root
    anchor: str = "middle"


@dataclass
class Timeline:
    width: float
    height: float
    plot_left: float
    plot_right: float
    axis_y: float
    lanes: list[Lane]
    events: list[TimelineEvent]
    ticks: list[Tick]
    breaks: list[AxisBreak]
    markers: list[Marker]
    hidden_lanes: int
    untimed: int
    day: str
    root_y: tuple[float, float] | None = None
    notes: list[str] = field(default_factory=list)


LABEL_WIDTH = 150.0
LANE_HEIGHT = 26.0
SUBROW = 11.0
MAX_LANES = 32
_BREAK_WIDTH = 30.0
_TICK_STEPS = (0.001, 0.002, 0.005, 0.01, 0.02, 0.05, 0.1, 0.2, 0.5, 1, 2, 5, 10, 15, 30, 60, 120, 300, 600, 900,
               1800, 3600, 7200, 3 * 3600, 6 * 3600, 12 * 3600, 86400, 2 * 86400, 7 * 86400)


def _kind(s: SymptomView, root_key: tuple[str | None, str] | None) -> str:
    if root_key and (s.node, s.symptom) == root_key and s.status == "bad":
        return "root"
    if s.status == "bad":
        return "bad"
    if s.role == "context":
        return "context"
    return "demoted" if s.demoted_by else "interesting"


class _Scale:
    """Piecewise-linear time axis: long quiet gaps are cut out (and marked), so bursts seconds apart stay apart
    on a timeline that spans hours. Each stretch gets room by how many distinct instants it holds."""

    def __init__(self, times: list[datetime], left: float, right: float,
                 anchors: tuple[datetime, ...] = ()) -> None:
        points = sorted({t.timestamp() for t in (*times, *anchors)})
        total = points[-1] - points[0] if len(points) > 1 else 0.0
        # a quiet stretch is cut when it is long against the whole span; the workload's start and end are only
        # anchors, so the stretch to them is cut sooner (it would squeeze the events otherwise)
        between, to_anchor = max(0.12 * total, 2.0), max(0.05 * total, 2.0)
        anchor_only = {t.timestamp() for t in anchors} - {t.timestamp() for t in times}
        groups: list[list[float]] = [[points[0]]]
        for p in points[1:]:
            gap = p - groups[-1][-1]
            if gap > (to_anchor if p in anchor_only or groups[-1][-1] in anchor_only else between):
                groups.append([p])
            else:
                groups[-1].append(p)
        self.segments: list[tuple[float, float, float, float]] = []   # (t0, t1, x0, x1)
        usable = right - left - _BREAK_WIDTH * (len(groups) - 1)
        weights = [math.sqrt(len(g)) + (0.5 if g[-1] > g[0] else 0.0) for g in groups]
        x = left
        for g, w in zip(groups, weights, strict=True):
            width = usable * w / sum(weights)
            self.segments.append((g[0], g[-1], x, x + width))
            x += width + _BREAK_WIDTH
        self.pad = 10.0

    def x(self, t: datetime) -> float:
        ts = t.timestamp()
        for i, (t0, t1, x0, x1) in enumerate(self.segments):
            if ts <= t1 or i == len(self.segments) - 1:
                if ts < t0:   # inside the break before this segment
                    prev = self.segments[i - 1] if i else None
                    if prev is None:
                        return x0 + self.pad
                    frac = (ts - prev[1]) / ((t0 - prev[1]) or 1)
                    return prev[3] - self.pad + frac * (x0 - prev[3] + 2 * self.pad)
                if t1 == t0:
                    return (x0 + x1) / 2
                return x0 + self.pad + (min(ts, t1) - t0) / (t1 - t0) * (x1 - x0 - 2 * self.pad)
        return self.segments[-1][3]

    def ticks(self) -> tuple[list[Tick], list[AxisBreak]]:
        ticks: list[Tick] = []
        breaks: list[AxisBreak] = []
        for i, (t0, t1, x0, x1) in enumerate(self.segments):
            if i:
                prev = self.segments[i - 1]
                breaks.append(AxisBreak((prev[3] + x0) / 2, "+" + fmt_duration(t0 - prev[1])))
            span = t1 - t0
            room = max(1, int((x1 - x0) / 78))
            step = next((s for s in _TICK_STEPS if span / s <= room), _TICK_STEPS[-1]) if span else 0
            if not step:
                ticks.append(Tick((x0 + x1) / 2, _tick_label(t0, 1), major=True))
                continue
            first = math.ceil(t0 / step) * step
            marks = []
            k = first
            while k <= t1 + 1e-9:
                marks.append(k)
                k += step
            if not marks or marks[0] - t0 > step * 0.6:
                marks.insert(0, t0)
            for j, m in enumerate(marks):
                ticks.append(Tick(self.x(datetime.fromtimestamp(m, UTC)), _tick_label(m, step), j == 0))
        return ticks, breaks


def _tick_label(ts: float, step: float) -> str:
    t = datetime.fromtimestamp(ts, UTC)
    if step < 1:
        return t.strftime("%H:%M:%S") + f".{t.microsecond // 1000:03d}"
    if step < 60 or t.second:
        return t.strftime("%H:%M:%S")
    if step >= 86400:
        return t.strftime("%b %d")
    return t.strftime("%H:%M")


def _title(s: SymptomView, kind: str) -> str:
    role = {"root": "ROOT CAUSE", "bad": "active", "demoted": f"demoted by {s.demoted_by}",
            "interesting": "supporting", "context": "context"}[kind]
    when = fmt_clock(s.first_time)
    if s.last_time and s.first_time and s.last_time != s.first_time:
        when += f" – {fmt_clock(s.last_time)}"
    line = s.evidence[0].text if s.evidence else ""
    if len(line) > 240:
        line = line[:240] + " …"
    return f"{s.symptom} on {s.node or 'the job'} ({role}), {when}, ×{s.count}, rule {s.rule}\n{line}"


def timeline(d: Attribution, width: float = 1100.0) -> Timeline | None:
    """One lane per node with evidence, each symptom placed at its first (and last) time; the root marked."""
    root = d.root_cause
    root_key = (root.node, root.symptom) if root else None
    timed = [(i, s) for i, s in enumerate(d.symptoms) if s.first_time is not None]
    untimed = len(d.symptoms) - len(timed)
    if not timed:
        return None
    culprits = {c.node for c in d.culprit_nodes}
    # lane order: the root's node, the other culprits, nodes with active symptoms, then the rest by first event
    firsts: dict[str | None, float] = {}
    rank: dict[str | None, int] = {}
    for _, s in timed:
        node = s.node
        kind = _kind(s, root_key)
        score = 0 if kind == "root" else 1 if node in culprits else 2 if kind == "bad" else 3
        rank[node] = min(rank.get(node, 9), score)
        assert s.first_time is not None
        firsts[node] = min(firsts.get(node, math.inf), s.first_time.timestamp())
    order = sorted(rank, key=lambda n: (rank[n], firsts[n], n or ""))
    hidden = max(0, len(order) - MAX_LANES)
    order = order[:MAX_LANES]
    lane_of = {n: i for i, n in enumerate(order)}

    times: list[datetime] = []
    for _, s in timed:
        if s.node in lane_of:
            assert s.first_time is not None
            times += [s.first_time, s.last_time or s.first_time]
    start, end = d.workload.start_time, d.workload.end_time
    anchors = tuple(t for t in (start, end) if t is not None)
    left, right = LABEL_WIDTH + 8, width - 16
    scale = _Scale(times, left, right, anchors)

    # events, stacked in sub-rows inside their lane where they would overlap
    rows_used: dict[int, list[float]] = {}  # lane -> right edge of each of its sub-rows
    placed: list[tuple[int, int, int, SymptomView, str, float, float]] = []
    for i, s in sorted(timed, key=lambda p: (p[1].first_time, _kind(p[1], root_key) != "root", p[0])):
        if s.node not in lane_of:
            continue
        lane = lane_of[s.node]
        assert s.first_time is not None
        x = scale.x(s.first_time)
        x2 = scale.x(s.last_time) if s.last_time and s.last_time > s.first_time else x
        ends = rows_used.setdefault(lane, [])
        sub = next((k for k, last in enumerate(ends) if x - last >= 14), None)
        if sub is None:
            if len(ends) < 4:
                sub = len(ends)
                ends.append(0.0)
            else:
                sub = min(range(len(ends)), key=lambda k: ends[k])
        ends[sub] = max(x, x2)
        placed.append((i, lane, sub, s, _kind(s, root_key), x, x2))

    top = 30.0
    lanes: list[Lane] = []
    y = top
    lane_y: dict[int, float] = {}
    for n, node in enumerate(order):
        h = LANE_HEIGHT + (max(1, len(rows_used.get(n, []))) - 1) * SUBROW
        lanes.append(Lane(node or "(job)", node_href(node) if node else None, y, h, node in culprits,
                          bool(root and root.node == node)))
        lane_y[n] = y
        y += h
    axis_y = y + 6
    events: list[TimelineEvent] = []
    for i, lane, sub, s, kind, x, x2 in placed:
        ey = lane_y[lane] + LANE_HEIGHT / 2 + sub * SUBROW
        inferred = bool(s.evidence and s.evidence[0].time_inferred)
        events.append(TimelineEvent(i, lane, round(x, 1), round(x2, 1), round(ey, 1), kind, s.symptom,
                                    _title(s, kind), inferred))
    ticks, breaks = scale.ticks()
    def anchor(x: float, label: str) -> str:
        room = len(label) * 3.6
        return "start" if x - room < left - 8 else "end" if x + room > width else "middle"

    markers: list[Marker] = []
    if start:
        markers.append(Marker(round(scale.x(start), 1), "start", "start"))
    if end:
        label = f"end · {d.terminal_state.value}"
        markers.append(Marker(round(scale.x(end), 1), label, "end", anchor(scale.x(end), label)))
    root_y = None
    if root and root.time and root.node in lane_of:
        label = f"first fault: {root.symptom} on {root.node}" if root.node else f"first fault: {root.symptom}"
        x = scale.x(root.time)
        markers.append(Marker(round(x, 1), label, "root", anchor(x, label)))
        root_y = (top - 14, axis_y)
    notes = []
    if hidden:
        notes.append(f"{hidden} more node(s) with symptoms are not drawn; every symptom is in the table below.")
    if untimed:
        notes.append(f"{untimed} symptom(s) without a time are not drawn.")
    days = sorted({t.astimezone(UTC).strftime("%Y-%m-%d") for t in (*times, *anchors)})
    return Timeline(width, axis_y + 34, left, right, axis_y, lanes, events, [
        Tick(round(t.x, 1), t.label, t.major) for t in ticks], [AxisBreak(round(b.x, 1), b.label) for b in breaks],
        markers, hidden, untimed, " – ".join([days[0], days[-1]] if len(days) > 1 else days) + " UTC",
        root_y, notes)


# -- stacked bar charts -------------------------------------------------------------------------------------
@dataclass
class BarPart:
    key: str
    count: int
    y: float
    h: float
    color: str
    href: str


@dataclass
class Bar:
    x: float
    w: float
    label: str
    total: int
    parts: list[BarPart]


@dataclass
class Chart:
    width: float
    height: float
    plot_top: float
    plot_bottom: float
    plot_left: float
    plot_right: float
    bars: list[Bar]
    yticks: list[tuple[float, str]]
    xlabels: list[tuple[float, str]]
    legend: list[tuple[str, str, int]]


def _nice_max(value: int) -> tuple[int, int]:
    """A round axis maximum and tick step for counts up to value."""
    if value <= 4:
        return max(value, 1), 1
    raw = value / 4
    magnitude = 10 ** math.floor(math.log10(raw))
    step = next(m * magnitude for m in (1, 2, 2.5, 5, 10) if m * magnitude >= raw)
    step = max(1, int(step))
    return int(math.ceil(value / step) * step), step


def bar_chart(buckets: list[Bucket], bucket_seconds: int, palette: dict[str, str], order: list[str],
              href: str, param: str, width: float = 640, height: float = 220) -> Chart | None:
    """Stacked bars per time bucket; every part links to the workloads of that bucket and key."""
    if not buckets:
        return None
    left, right, top, bottom = 40.0, width - 8, 10.0, height - 24
    totals = [sum(b.counts.values()) for b in buckets]
    ymax, step = _nice_max(max(totals) if totals else 1)
    slot = (right - left) / len(buckets)
    bar_w = max(2.0, min(36.0, slot * 0.72))
    keys_seen: dict[str, int] = {}
    bars: list[Bar] = []
    for b, total in zip(buckets, totals, strict=True):
        x = left + slot * (len(bars) + 0.5) - bar_w / 2
        y = bottom
        parts = []
        start = b.start
        end = start + timedelta(seconds=bucket_seconds)
        for key in sorted(b.counts, key=lambda k: (order.index(k) if k in order else len(order), k)):
            count = b.counts[key]
            keys_seen[key] = keys_seen.get(key, 0) + count
            h = (bottom - top) * count / ymax
            y -= h
            parts.append(BarPart(key, count, round(y, 1), round(h, 1), color(key, palette),
                                 f"{href}?{param}={key}&from={_q(start)}&to={_q(end)}".replace(" ", "+")))
        bars.append(Bar(round(x, 1), round(bar_w, 1), _bucket_label(start, bucket_seconds), total, parts))
    yticks = [(round(bottom - (bottom - top) * v / ymax, 1), str(v)) for v in range(0, ymax + 1, step)]
    every = max(1, math.ceil(len(bars) / max(1, int((right - left) / 70))))
    xlabels = [(round(bar.x + bar.w / 2, 1), bar.label) for n, bar in enumerate(bars) if n % every == 0]
    legend = [(k, color(k, palette), keys_seen[k])
              for k in sorted(keys_seen, key=lambda k: (order.index(k) if k in order else len(order), k))]
    return Chart(width, height, top, bottom, left, right, bars, yticks, xlabels, legend)


def bucket_name(seconds: int) -> str:
    """`daily bars`, `weekly bars`, ... for a chart's subtitle."""
    names = {3600: "hourly", 6 * 3600: "6-hourly", 86400: "daily", 7 * 86400: "weekly", 30 * 86400: "30-day"}
    return f"{names[seconds]} bars" if seconds in names else f"{fmt_duration(seconds)} bars"


def _q(t: datetime) -> str:
    return t.strftime("%Y-%m-%dT%H:%M:%SZ")


def _bucket_label(t: datetime, seconds: int) -> str:
    if seconds < 86400:
        return t.strftime("%b %d %H:%M")
    return t.strftime("%b %d")
