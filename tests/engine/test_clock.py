"""Streams written in local time: inferred only when unambiguous, corrected, and said in coverage."""

from __future__ import annotations

import json
from datetime import datetime, timedelta, timezone
from pathlib import Path

import pytest

from firstfault.cli import main
from firstfault.engine.clock import StreamClock, local_time_offset
from firstfault.engine.engine import Engine

START = datetime(2025, 3, 18, 12, 0, tzinfo=timezone.utc)
END = START + timedelta(hours=2)


def _clock(first: datetime, last: datetime, zoned: bool = False) -> StreamClock:
    clock = StreamClock()
    clock.saw(first, zoned)
    clock.saw(last, zoned)
    return clock


def test_a_stream_that_fits_as_utc_is_left_alone() -> None:
    assert local_time_offset(_clock(START - timedelta(minutes=10), END + timedelta(minutes=5)), START, END) is None


def test_a_stream_eight_hours_ahead_is_utc_plus_eight() -> None:
    shift = timedelta(hours=8)
    clock = _clock(START - timedelta(minutes=10) + shift, END + timedelta(minutes=5) + shift)
    assert local_time_offset(clock, START, END) == 8


def test_a_stream_behind_utc_gets_a_negative_offset() -> None:
    shift = timedelta(hours=-5)
    assert local_time_offset(_clock(START + shift, END + shift), START, END) == -5


def test_stamps_with_their_own_zone_are_never_moved() -> None:
    shift = timedelta(hours=8)
    assert local_time_offset(_clock(START + shift, END + shift, zoned=True), START, END) is None


def test_a_short_stream_that_several_offsets_fit_is_not_guessed() -> None:
    """Ten minutes of stamps, eight hours out, inside a six-hour job: offsets 3..8 all fit."""
    end = START + timedelta(hours=6)
    first = START + timedelta(hours=8, minutes=30)
    assert local_time_offset(_clock(first, first + timedelta(minutes=10)), START, end) is None


def _local_time_workload(root: Path) -> Path:
    """n1 logs its syslog in UTC+8 (its Xid at 21:30 local is 13:30 UTC); n2 logs UTC with zones."""
    (root / "scenario.toml").write_text(
        '[workload]\nscheduler = "slurm"\njob_id = "7"\nscheduler_state = "FAILED"\nexit_code = "1:0"\n'
        'start_time = "2025-03-18T12:00:00Z"\nend_time = "2025-03-18T14:00:00Z"\nnodes = ["n1", "n2"]\n'
        'ranks_per_node = 8\n')
    (root / "n1").mkdir()
    (root / "n2").mkdir()
    (root / "n1" / "syslog.log").write_text(
        "Mar 18 19:50:00 n1 systemd[1]: Started Session 4 of user slurm.\n"
        "Mar 18 21:30:00 n1 kernel: [1000.0] NVRM: Xid (PCI:0000:91:00): 79, pid='<unknown>', name=<unknown>, "
        "GPU has fallen off the bus.\n"
        "Mar 18 22:04:00 n1 systemd[1]: session-4.scope: Deactivated successfully.\n")
    (root / "n2" / "applog.log").write_text(
        "2025-03-18T13:40:00Z [rank8]:[E318 13:40:00.000 ProcessGroupNCCL.cpp:1] [Rank 8] Watchdog caught "
        "collective operation timeout: WorkNCCL(SeqNum=9, OpType=ALLREDUCE, NumelIn=1, NumelOut=1, "
        "Timeout(ms)=600000) ran for 600010 milliseconds before timing out.\n")
    return root


def test_a_local_time_node_keeps_its_fault_and_coverage_says_so(tmp_path: Path, engine: Engine) -> None:
    """The Xid of a node logging in UTC+8 is 8 h 'after' the job when read as UTC: read in local time it is the
    root cause, and coverage names the stream that was corrected."""
    result = json.loads(engine.analyze_path(_local_time_workload(tmp_path)).to_json())
    assert result["sub_domain"] == "gpu"
    assert [c["node"] for c in result["culprit_nodes"]] == ["n1"]
    assert result["root_cause"]["time"].startswith("2025-03-18T13:30:00")
    assert result["coverage"]["adjustments"] == [
        "n1/syslog.log: stamps carry no zone and fit the workload's window only as UTC+08:00 local time; "
        "read as such (shifted -8 h)"]
    assert result["coverage"]["partial"] is False


def test_a_configured_zone_wins_over_inference(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    workload = _local_time_workload(tmp_path)
    assert main(["analyze", str(workload), "--json", "--timezone", "n1:syslog=Asia/Singapore"]) == 0
    result = json.loads(capsys.readouterr().out)
    assert result["root_cause"]["time"].startswith("2025-03-18T13:30:00")
    assert result["coverage"]["adjustments"] == [
        "n1/syslog.log: stamps read as Asia/Singapore local time (configured; shifted by -8 h)"]


@pytest.mark.parametrize("setting", ["n1=Asia/Singapore", "n1:dmesg=UTC", "*:syslog=Mars/Olympus_Mons"])
def test_a_bad_zone_setting_is_a_clear_error(tmp_path: Path, setting: str,
                                             capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["analyze", str(_local_time_workload(tmp_path)), "--timezone", setting]) == 2
    assert setting in capsys.readouterr().err
