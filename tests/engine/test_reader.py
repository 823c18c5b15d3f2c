"""The per-line shortcuts of the reader give what the general code gives (engine/reader.py)."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from firstfault.engine.catalog import load_catalog
from firstfault.engine.engine import Engine
from firstfault.engine.reader import _RANK_PREFIX, _emits, _newlines, _rank_prefix, _relay_prefix
from firstfault.engine.rules_api import Expect, RuleCase
from firstfault.tools.verify import run_rule_case

_prefixes = st.sampled_from(["", " ", "  ", "host ", "[rank3]:", "[rank12]: ", "x [rank0]:", "[1,3]<stdout>:",
                             "[0,12]<stderr>: ", "[rank]:", "[1,3]<stdin>:", "a b [rank1]:", "]:", ">:"])


@settings(max_examples=2000)
@given(_prefixes, st.text(alphabet=" []:<>rank0123456789,stdoue\t", max_size=40), st.integers(0, 300))
def test_the_rank_prefix_shortcut_reads_what_the_pattern_reads(prefix: str, rest: str, padding: int) -> None:
    for text in (prefix + rest, " " * padding + prefix + rest, rest + prefix):
        found = _RANK_PREFIX.match(text, 0, 256)
        assert _rank_prefix(text) == (found and (found.group(1) or found.group(2)))


@settings(max_examples=500)
@given(st.lists(st.sampled_from(b"\n\ra\x00\xff"), max_size=300), st.integers(0, 310), st.integers(0, 310))
def test_newlines_are_counted_as_bytes_count_counts_them(values: list[int], start: int, end: int) -> None:
    data = bytes(values)
    for buffer in (data, bytearray(data)):
        assert _newlines(buffer, start, end) == data.count(b"\n", start, end)


def test_each_extractor_emits_what_its_definition_says() -> None:
    extractors = load_catalog().extractors
    for extractor, emit in zip(extractors, _emits(extractors), strict=True):
        assert emit.extractor is extractor and emit.attributes == extractor.attributes
        for case in extractor.cases:
            groups = extractor.regex.search(case.line)
            if groups is not None:
                symptom = extractor.render_symptom(groups.groupdict()) if emit.templated else emit.symptom
                assert symptom == extractor.render_symptom(groups.groupdict())


@pytest.mark.parametrize(("line", "address"), [
    ("(WorkerDict pid=876764, ip=10.52.12.17) RuntimeError: CUDA error: unknown error", "10.52.12.17"),
    ("2026-03-14T07:42:20.050Z (pid=4242, ip=10.0.0.3) Traceback (most recent call last):", "10.0.0.3"),
    ("(raylet, ip=10.52.12.18) [2026-03-14 03:02:47,118 E 61873 61873] file_system_monitor.cc:116", "10.52.12.18"),
    ("INFO worker.py:1841 -- Connecting to existing Ray cluster at address: 10.0.0.1:6379", None),
    ("curl -s 'http://metadata/?ip=10.0.0.7'", None),
])
def test_the_relay_prefix_names_where_ray_printed_the_line(line: str, address: str | None) -> None:
    assert _relay_prefix(line) == address


def test_a_relayed_line_states_no_fact_about_the_node_that_relayed_it(engine: Engine) -> None:
    """The driver's output relays a worker's NCCL interface line: the address is not the driver node's, so a peer
    error naming it does not resolve to the driver node."""
    case = RuleCase(title="relayed interface line", evidence={
        "a/applog": ["2025-01-01T00:00:01Z a:1:1 [0] NCCL INFO Bootstrap : Using eth0:10.0.0.1<0>",
                     "2025-01-01T00:00:02Z (WorkerDict pid=4242, ip=10.0.0.2) b:7:7 [0] NCCL INFO Bootstrap : Using "
                     "eth0:10.0.0.2<0>"]},
        context={"nodes": ["a", "b"]}, expect=Expect())
    result = run_rule_case(engine.compiled, case)
    collected = [t.detail for t in result.trace if t.rule == "IpToNodeMap"]
    assert collected and collected[0].startswith("1 node addresses"), collected


def test_a_gathered_line_states_its_facts_about_the_host_it_names(engine: Engine) -> None:
    """pdsh gathers every host's output into the launching node's file, each line behind 'host: ': the interface line
    of b states b's address, so the RDMA error naming that address names b, whose rank crashed just before - the
    error is what a saw of b's crash, not a network fault."""
    case = RuleCase(title="gathered interface lines", evidence={
        "a/applog": ["2025-01-01T00:00:01Z a: a:1:1 [0] NCCL INFO NET/IB : Using [0]mlx5_0:1/IB ; OOB ib0:10.0.0.1<0>",
                     "2025-01-01T00:00:02Z b: b:7:7 [0] NCCL INFO NET/IB : Using [0]mlx5_0:1/IB ; OOB ib0:10.0.0.2<0>",
                     "2025-01-01T00:10:01Z a: a:1:9 [0] transport/net_ib.cc:1295 NCCL WARN NET/IB : Got completion "
                     "from peer 10.0.0.2<45212> with error 12, opcode 32676, len 0, vendor err 129 (Recv)"],
        "b/syslog": ["Jan  1 00:10:00 b kernel: [1015398.492000] python3.10[94985]: segfault at 10 ip 00007f6e5a93d2a8 "
                     "sp 00007f6d0cffa8e0 error 4 in libtorch_cpu.so[7f6e56c00000+14a5f000]"]},
        context={"nodes": ["a", "b"]}, expect=Expect())
    result = run_rule_case(engine.compiled, case)
    assert result.sub_domain != "network" and not result.culprit_nodes, (result.sub_domain, result.culprit_nodes)


def test_hpl_names_the_host_of_its_cuda_error(engine: Engine) -> None:
    """HPL-NVIDIA's launcher gathers every rank's output into one node's file, and its CUDA error report names the rank
    and the host it ran on ('CUDART (25->b): ...'): the error is b's, whose GPU failed, not the gathering node's."""
    case = RuleCase(title="gathered HPL CUDA error", evidence={
        "a/applog": ["2025-01-01T00:10:00Z  CUDART (25->b): cudaGetDeviceProperties(&prop, 0) = 999 (unknown error) at "
                     "(src/driver.cpp:396), process will now exit"]},
        context={"nodes": ["a", "b"]}, expect=Expect())
    result = run_rule_case(engine.compiled, case)
    assert [c.node for c in result.culprit_nodes] == ["b"], result.culprit_nodes


def test_slurmstepd_cancel_notice_is_dated_by_the_time_it_states(engine: Engine) -> None:
    """The job output's cancel notice has no stamp of its own; the time it states ('CANCELLED AT ...') is its time,
    not the earlier line's it would otherwise inherit as a lower bound."""
    case = RuleCase(title="unstamped cancel notice", evidence={
        "a/applog": ["2025-01-01T00:10:00Z RuntimeError: NCCL error in: ProcessGroupNCCL.cpp:272, unhandled cuda error",
                     "slurmstepd: error: *** JOB 7 ON a CANCELLED AT 2025-01-01T00:56:00 ***"]},
        context={"scheduler_state": "CANCELLED"}, expect=Expect())
    result = run_rule_case(engine.compiled, case)
    cancels = [s for s in result.symptoms if s.symptom.startswith("Job cancelled") and s.node == "a"]
    assert cancels and cancels[0].evidence[0].time == datetime(2025, 1, 1, 0, 56, tzinfo=UTC)
    assert not cancels[0].evidence[0].time_inferred


@pytest.mark.parametrize(("stamp", "recorded", "expected"), [
    # a health check prints the BMC's event log eight minutes after the power supply failed: the record's time
    ("Jan  1 00:22:31", "01/01/2025 | 00:14:51", datetime(2025, 1, 1, 0, 14, 51, tzinfo=UTC)),
    # a record stamped after the line that printed it: the BMC's clock is ahead, the line's time stands
    ("Jan  1 00:22:31", "01/01/2025 | 00:40:00", datetime(2025, 1, 1, 0, 22, 31, tzinfo=UTC)),
    # a record days older than the line: a BMC clock that was never set, the line's time stands
    ("Jan  1 00:22:31", "12/20/2024 | 00:14:51", datetime(2025, 1, 1, 0, 22, 31, tzinfo=UTC)),
])
def test_an_sel_record_printed_later_is_placed_at_its_own_time(engine: Engine, stamp: str, recorded: str,
                                                                expected: datetime) -> None:
    """An extractor's recorded_date/recorded_time captures date the event at the record's time, within bounds."""
    case = RuleCase(title="SEL printed by a health check", evidence={"b/syslog": [
        f"{stamp} b node-health[2231]: SEL:  1f2 | {recorded} | Power Supply PS1 Status | Failure detected | Asserted"]},
        context={"start_time": "2025-01-01T00:00:00Z", "end_time": "2025-01-01T01:00:00Z"}, expect=Expect())
    result = run_rule_case(engine.compiled, case)
    faults = [s for s in result.symptoms if s.symptom == "BMC reported a hardware fault"]
    assert faults and faults[0].evidence[0].time == expected and not faults[0].evidence[0].time_inferred


def test_an_ipmiutil_sel_record_with_a_two_digit_year_is_placed_at_its_own_time(engine: Engine) -> None:
    """ipmiutil prints the record's date with a two-digit year; it dates the event as ipmitool's four-digit one does."""
    case = RuleCase(title="ipmiutil's SEL printed after a reboot", evidence={"b/syslog": [
        "Jan  1 00:22:31 b sel-collector[2231]: 7840 01/01/25 00:14:51 MIN BMC Memory #08 Uncorrectable ECC, DIMM6/CPU1 "
        "6f [20 ff 10]"]},
        context={"start_time": "2025-01-01T00:00:00Z", "end_time": "2025-01-01T01:00:00Z"}, expect=Expect())
    result = run_rule_case(engine.compiled, case)
    faults = [s for s in result.symptoms if s.symptom == "BMC reported a hardware fault"]
    assert faults and faults[0].evidence[0].time == datetime(2025, 1, 1, 0, 14, 51, tzinfo=UTC)
