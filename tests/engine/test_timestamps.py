"""Timestamp prefixes met on GPU clusters."""

from __future__ import annotations

from datetime import datetime, timezone

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from firstfault.engine.timestamps import TimestampParser

REF = datetime(2025, 3, 1, tzinfo=timezone.utc)


@pytest.mark.parametrize("line,expected", [
    ("2025-11-05T01:49:49.872Z host x", "2025-11-05T01:49:49.872000"),
    ("2024-10-25T00:37:30.297985043Z [rank0]: x", "2024-10-25T00:37:30.297985"),
    ("2024-03-01T10:43:35.123456+01:00 host kernel: x", "2024-03-01T09:43:35.123456"),
    ("Mar  1 10:43:35 node kernel: [12.3] NVRM", "2025-03-01T10:43:35"),
    ("Dec 31 23:59:59 node kernel: x", "2024-12-31T23:59:59"),
    ("[rank0]:[E1105 01:49:49.882303000 ProcessGroupNCCL.cpp:1589] x", "2024-11-05T01:49:49.882303"),
    ("[rank2]:[E313 10:09:51.640000120 ProcessGroupNCCL.cpp:1601] x", "2025-03-13T10:09:51.640000"),
    ("E0626 06:24:45.154486 160920 torch/distributed/x", "2025-06-26T06:24:45.154486"),
    # https://github.com/pytorch/torchtitan/issues/1492 (TORCH_LOGS=+pp: a DEBUG record, behind torchrun's rank prefix)
    ("[rank0]:[rank0]:V0731 00:56:29.062000 132351 */torch/distributed/pipelining/stage.py:1344] Shape inference: "
     "stage 0 skipping recv, because shape info passed in via `args`", "2025-07-31T00:56:29.062000"),
    ("[2023-04-07 13:08:55,468] [INFO] x", "2023-04-07T13:08:55.468000"),
    ("[Sun Feb 23 16:24:18 2025] NVRM: Xid", "2025-02-23T16:24:18"),
    ("[Jul 23 2024 07:53:55] [ERROR] [tid 841] x", "2024-07-23T07:53:55"),
    ("[1,5]<stderr>:[E1105 01:49:49.882 x] y", "2024-11-05T01:49:49.882000"),
    ("0: 2025-11-05 01:02:03 hello", "2025-11-05T01:02:03"),
    ("kern  :warn  : 2025-01-21T08:41:30,287197+00:00 x", "2025-01-21T08:41:30.287197"),
    (" 2025-02-18 12:54 [rank2]:[E218 04:54:22.461377000 x] y", "2025-02-18T04:54:22.461377"),
    ("(MegatronTrainRayActor pid=711466) [2026-05-14 10:04:40] rollout 1: train/loss=3.2", "2026-05-14T10:04:40"),
    ("(pid=4121, ip=10.0.0.2) 2026-05-14 10:04:40,123 INFO worker.py:1 x", "2026-05-14T10:04:40.123000"),
    ("[2024-04-20T09:09:36.512] slurmctld", "2024-04-20T09:09:36.512000"),
    ("2024-06-16_20:34:34 x", "2024-06-16T20:34:34"),
    ("[rank0]:[titan] 2026-05-12 17:07:23,237 - root - INFO - step: 3000  loss:  3.63069", "2026-05-12T17:07:23.237000"),
    ("25/03/01 09:41:12 ERROR Executor: Exception in task 3.0 in stage 2.0 (TID 7)", "2025-03-01T09:41:12"),
    (":::NVLOGv0.2.2 Tacotron2_PyT 1740787200.923844576 (/w/dllogger/logger.py:251) train_iter_stop: 32",
     "2025-03-01T00:00:00.923844"),
    (":::MLL 1740787200.455 run_start: {\"value\": null}", "2025-03-01T00:00:00.455000"),
    (' 0: :::MLLOG {"namespace": "", "time_ms": 1740787200455, "event_type": "INTERVAL_START", "key": "run_start"}',
     "2025-03-01T00:00:00.455000"),
    ("1740787200.343966 rank: 0, batch:0", "2025-03-01T00:00:00.343966"),
    # UCX's own log prefix: seconds since the epoch in brackets, then the host, pid and thread
    ("[1740787200.386707] [hpc-g05:64638:0]            sock.c:348  UCX  ERROR   connect(fd=127) failed",
     "2025-03-01T00:00:00.386707"),
    ("[1740787200.856286] [roce-gpu-node2:1617 :0]       ib_device.c:1332 UCX  ERROR ibv_create_ah failed",
     "2025-03-01T00:00:00.856286"),
    ("  29 | 09/14/2022 | 12:59:46 | Power Unit Pwr Unit Status | Power off/down | Asserted", "2022-09-14T12:59:46"),
    ("04/19/2016 02:55:25;0008;PBS_Server.12149;Job;7082041.hal;Job deleted at request of root@hal", "2016-04-19T02:55:25"),
    ("06/21/2015 14:02:50  S    Exit_status=255 resources_used.cput=00:00:02", "2015-06-21T14:02:50"),
    ("cluster-autoscaler: I0301 02:13:19.000000       1 scale_down.go:1102] Scale-down: removing empty node",
     "2025-03-01T02:13:19"),
    ("[pod/train-worker-1/pytorch] 2025-03-01T02:13:19Z step 100", "2025-03-01T02:13:19"),
    # pdsh (DeepSpeed's multi-node runner) puts each line's host ahead of it
    ("gw-r3n01: [2024-02-19 09:43:10,000] [INFO] running eval", "2024-02-19T09:43:10"),
    # vLLM's logger ('%m-%d %H:%M:%S', no year), behind Ray's worker prefix; SkyPilot's one-letter level in brackets
    ("(RayWorkerWrapper pid=2271909, ip=10.5.1.43) INFO 08-07 10:40:53 model_runner.py:1024] Capturing the model",
     "2025-08-07T10:40:53"),
    ("[I 03-15 16:42:58 controller.py:146] Spot job 3 (resnet-ddp): cluster is preempted", "2025-03-15T16:42:58"),
    # kubectl describe node's condition row: dated at its transition time (the second stamp), its offset applied
    ("  Ready            False   Fri, 10 Jul 2026 20:31:27 +0000   Fri, 10 Jul 2026 20:30:02 +0200   KubeletNotReady   "
     "container runtime is down", "2026-07-10T18:30:02"),
    # SeisSol's logger: a weekday and a year-less stamp, then a comma and the level
    ("Sun Jan 15 22:37:43, Warn:  Ghost: No update since  900 [s] for global cluster  6", "2025-01-15T22:37:43"),
])
def test_formats(line: str, expected: str) -> None:
    parsed = TimestampParser(REF).parse(line)
    assert parsed is not None and parsed.replace(tzinfo=None).isoformat() == expected


@pytest.mark.parametrize("line", ["no stamp here", "[W Utils.hpp:135] Warning", "Feb 30 10:00:00 x y", "",
                                  "[titan] step 5 at 2026-05-12 17:07:23",
                                  "12/03/01 09:41:12 a log4j stamp years from the window is not read",
                                  "1740787200 samples, an integer is a count", "1234567890.5 seconds far from the window",
                                  "[1740787200.386707] no host bracket after the seconds",
                                  "29 | 14/09/2022 | 12:59:46 | a day-first date is not ipmitool's",
                                  "19/04/2016 02:55:25;0008; a day-first date is not PBS's",
                                  "error: I0301 is not a component's glog line without its time",
                                  "INFO 2025-03 summary: a level and a year-month are no stamp",
                                  "gw-r3n01: step 20 | loss 1.4005 (a host prefix and no stamp after it)",
                                  # `date` and nvidia-smi's banner: the printing host's local time, with a year
                                  "Sat Jan  6 22:24:32 2024       ",
                                  "Mon Dec  7 04:00:16 CET 2026"])
def test_no_timestamp(line: str) -> None:
    assert TimestampParser(REF).parse(line) is None


def test_year_less_stamp_needs_a_window() -> None:
    assert TimestampParser(None).parse("Mar  1 10:43:35 node kernel: x") is None



_stamps = st.builds(
    "{:04d}-{:02d}-{:02d}T{:02d}:{:02d}:{:02d}{}{}{}".format,
    st.sampled_from([1, 1969, 1970, 2026, 2199, 2200, 9999]), st.integers(0, 13), st.integers(0, 32),
    st.integers(0, 25), st.integers(0, 61), st.integers(0, 61),
    st.sampled_from(["", ".5", ".086", ",25", ".123456", ".1234567", ".123456789", ".1234567891"]),
    st.sampled_from(["Z", "Z]", "", " Z", "+01:00", "ZZ", "UTC"]), st.sampled_from([" rest", "", "]x"]))


@settings(max_examples=3000)
@given(_stamps)
def test_the_shortcut_for_utc_iso_stamps_reads_them_as_the_long_way_does(line: str) -> None:
    parser = TimestampParser(datetime(2026, 3, 1, tzinfo=timezone.utc))
    fast, slow = parser.parse_stamp(line), parser._parse_stamp(line)
    assert fast == slow
    assert fast.time is None or fast.time.tzinfo is slow.time.tzinfo  # type: ignore[union-attr]


@pytest.mark.parametrize(("start", "end", "line", "expected"), [
    # Habana's spdlog pattern and MXNet's logging, inside a window of an afternoon
    ("2023-05-03T14:28:22", "2023-05-03T14:48:55", "[14:28:26.076200][HCCL           ][info ][tid:10C53] x",
     "2023-05-03T14:28:26.076200"),
    ("2023-05-03T14:28:22", "2023-05-03T14:48:55", "[14:30:02] src/operator/nn/cudnn x", "2023-05-03T14:30:02"),
    # a window across midnight: the time of day says which side
    ("2023-05-03T23:10:00", "2023-05-04T02:00:00", "[00:41:12] step 30 loss 2.1", "2023-05-04T00:41:12"),
    ("2023-05-03T23:10:00", "2023-05-04T02:00:00", "[23:41:12] step 10 loss 2.3", "2023-05-03T23:41:12"),
])
def test_a_time_of_day_is_placed_in_the_window(start: str, end: str, line: str, expected: str) -> None:
    parser = TimestampParser(datetime.fromisoformat(start + "+00:00"), datetime.fromisoformat(end + "+00:00"))
    parsed = parser.parse(line)
    assert parsed is not None and parsed.replace(tzinfo=None).isoformat() == expected


@pytest.mark.parametrize(("start", "end", "line"), [
    (None, None, "[14:28:26] step 5"),                                         # no window: no date to give it
    ("2023-05-03T14:28:22", None, "[14:28:26] step 5"),                        # no end: no window
    ("2023-05-03T14:28:22", "2023-05-05T14:28:22", "[14:28:26] step 5"),       # two days long: every day fits
    ("2023-05-03T14:28:22", "2023-05-03T14:48:55", "[03:00:00] step 5"),       # hours outside the window
    ("2023-05-03T14:28:22", "2023-05-03T14:48:55", "[00:05:00<00:10:00, 2.1it/s]"),  # a progress bar's clock
])
def test_a_time_of_day_outside_a_known_short_window_is_not_read(start: str | None, end: str | None, line: str) -> None:
    parser = TimestampParser(datetime.fromisoformat(start + "+00:00") if start else None,
                             datetime.fromisoformat(end + "+00:00") if end else None)
    assert parser.parse(line) is None
