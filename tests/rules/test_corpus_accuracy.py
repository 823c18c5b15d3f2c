"""CI gate on the labelled development corpus (a copy of ../shared/corpus/dev lives in tests/data): the
thresholds of the catalog issue, checked through the same code path as `firstfault eval`."""

from __future__ import annotations

import json
from dataclasses import asdict

import pytest

from firstfault.cli import main
from firstfault.engine import Engine
from firstfault.errors import EvidenceError
from firstfault.tools.evaluate import Change, EvalReport, ScenarioScore, compare, evaluate, scenario_dirs
from tests.support.workloads import CORPUS

HOLDOUT = CORPUS.parent / "holdout"


def test_dev_corpus_accuracy(engine: Engine) -> None:
    report = evaluate(CORPUS, engine)
    m = report.metrics
    failures = [f"{s.id}: got {s.got_sub_domain} {s.got_culprits}" for s in report.scores if not s.passed]
    assert m["sub_domain_accuracy"] >= 0.95, failures
    assert m["culprit_exact_match"] >= 0.95, failures
    assert m["false_infra_blame"] == 0, failures
    assert m["terminal_state_accuracy"] >= 0.95


def test_holdout_corpus_accuracy(engine: Engine) -> None:
    """24 scenarios labelled independently of the rules (tests/data/corpus/holdout/INDEX.md) of failure types the
    development corpus does not cover: the check that the catalog generalises."""
    report = evaluate(HOLDOUT, engine)
    m = report.metrics
    failures = [f"{s.id}: got {s.got_sub_domain} {s.got_culprits}" for s in report.scores if not s.passed]
    assert m["sub_domain_accuracy"] >= 0.9 and m["culprit_exact_match"] >= 0.9, failures
    assert m["false_infra_blame"] == 0, failures


# Blind batches whose misses have been read (docs/accuracy.md): a regression gate for the family fixes, not a
# measure of generalisation (that is each batch's first run, written down in docs/accuracy.md). blind-04 is the
# untouched final check: never run here.
READ_BATCHES = ("blind-01", "blind-02", "blind-03", "blind-05", "blind-06", "blind-07", "blind-08", "blind-09",
                "blind-10", "blind-11", "blind-12", "blind-13", "blind-14", "blind-15", "blind-16",
                "blind-17", "blind-18", "blind-19", "blind-20", "blind-21", "blind-23", "blind-24", "blind-25", "blind-26",
                "blind-28", "blind-29", "blind-30", "blind-32", "blind-33", "blind-34", "blind-36", "blind-37",
                "blind-38", "blind-40", "blind-41", "blind-42", "blind-43", "blind-44", "blind-45", "blind-47", "blind-49",
                "blind-50", "blind-51", "blind-52", "blind-57", "blind-58", "blind-59", "blind-60", "blind-61",
                "blind-62", "blind-63", "blind-65", "blind-66", "blind-67", "blind-68", "blind-75", "blind-78",
                "blind-81", "blind-88", "blind-90", "blind-93", "blind-95", "blind-103", "blind-108", "blind-109",
                "blind-110", "blind-111", "blind-112", "blind-113", "blind-114", "blind-115", "blind-27", "blind-72",
                "blind-76", "blind-89", "blind-94", "blind-102", "blind-117", "blind-119", "blind-125", "blind-126",
                "blind-127", "blind-128", "blind-133", "blind-151", "blind-153", "blind-155", "blind-156",
                "blind-160", "blind-161", "blind-147", "blind-162", "blind-164", "blind-165", "blind-167",
                "blind-168", "blind-169", "blind-173", "blind-176", "blind-177", "blind-179", "blind-174",
                "blind-180", "blind-181", "blind-182", "blind-184", "blind-190", "blind-193", "blind-196",
                "blind-198", "blind-201", "blind-207", "blind-209", "blind-210", "blind-212",
                "blind-217", "blind-219", "blind-221", "blind-222", "blind-224", "blind-225",
                "blind-229", "blind-231", "blind-70", "blind-91", "blind-98", "blind-105", "blind-116", "blind-122",
                "blind-123", "blind-178", "blind-246", "blind-254", "blind-256", "blind-260", "blind-261",
                "blind-265", "blind-270", "blind-271", "blind-278", "blind-279", "blind-280", "blind-282",
                "blind-283", "blind-285", "blind-286", "blind-287", "blind-288", "blind-289", "blind-291",
                "blind-293", "blind-294", "blind-296", "blind-298", "blind-301", "blind-302", "blind-303",
                "blind-304", "blind-305", "blind-306", "blind-308", "blind-309", "blind-310", "blind-311",
                "blind-312", "blind-313", "blind-314", "blind-315", "blind-317", "blind-320", "blind-323", "blind-324",
                "blind-325", "blind-328", "blind-329", "blind-331", "blind-335", "blind-336", "blind-337", "blind-338",
                "blind-340", "blind-352", "blind-353", "blind-358", "blind-359", "blind-362",
                "blind-365", "blind-367", "blind-368", "blind-369", "blind-374",
                "blind-379", "blind-382", "blind-385", "blind-386", "blind-387", "blind-388", "blind-393",
                "blind-394", "blind-396", "blind-398", "blind-402", "blind-405", "blind-406", "blind-409",
                "blind-410", "blind-414", "blind-417", "blind-419", "blind-424", "blind-425", "blind-426",
                "blind-430", "blind-442", "blind-443", "blind-444", "blind-447", "blind-450", "blind-455",
                "blind-460", "blind-461", "blind-462", "blind-463", "blind-471", "blind-474",
                "blind-475", "blind-476", "blind-486", "blind-489", "blind-491", "blind-492", "blind-503",
                "blind-506", "blind-507", "blind-508", "blind-512", "blind-515", "blind-516",
                "blind-534", "blind-545", "blind-548", "blind-553", "blind-574", "blind-575",
                "blind-576", "blind-577", "blind-584", "blind-586", "blind-590", "blind-618", "blind-619",
                "blind-623", "blind-625", "blind-626", "blind-630", "blind-668", "blind-680", "blind-682", "blind-683",
                "blind-684", "blind-690", "blind-698", "blind-707", "blind-711", "blind-713", "blind-714",
                "blind-715", "blind-719", "blind-721", "blind-723", "blind-733", "blind-738", "blind-742",
                "blind-744", "blind-745", "blind-750", "blind-751", "blind-753", "blind-758", "blind-765", "blind-768", "blind-775",
                "blind-781", "blind-782", "blind-783", "blind-786",
                "blind-787", "blind-795", "blind-796", "blind-813", "blind-818", "blind-823", "blind-825",
                "blind-827", "blind-830", "blind-832", "blind-836", "blind-841", "blind-843", "blind-844",
                "blind-845", "blind-846", "blind-848", "blind-705", "blind-764", "blind-766", "blind-771",
                "blind-812", "blind-851", "blind-857", "blind-862", "blind-863", "blind-866", "blind-869",
                "blind-877", "blind-889", "blind-890", "blind-895",
                "blind-886", "blind-900", "blind-904", "blind-905", "blind-908", "blind-910",
                "blind-917")
# Blame the engine keeps against a batch's label, each explained in docs/accuracy.md ("Remaining misses").
DISPUTED_BLAME = {
    "blind-12": 1,   # b12-019: Xid 119 beside an IB flap that recovered in 11 s
    "blind-24": 1,   # b24-008: the node whose kubelet reclaimed disk, the evicted pod using 34 MiB of it
    "blind-33": 1,   # b33-007: CUDA's unknown error on one rank only is a GPU suspect (issue 13)
    "blind-108": 1,  # b108-013: 'busy or unavailable' on one node with nothing else is a GPU suspect; the label names none
    "blind-126": 1,  # b126-018: Slurm's 'not responding, setting DOWN' names the node (issue 13); a restraint label
    "blind-36": 2,   # b36-017: the device plugin's own Xid 999 verdict; b36-004: NVLS set-up failing on two of four
    "blind-51": 1,   # b51-012: SIGILL on one node of two is that node's CPU against the build; a restraint label
    "blind-306": 1,  # b306-009: CUDA's unknown error on one rank of a one-node server is a GPU suspect (issue 13)
}

# Sub_domain answers the engine keeps against a batch's label, each explained in docs/accuracy.md.
DISPUTED_SUB_DOMAIN = {
    "blind-60": 1,  # b60-007: torchrun's SIGHUP from a closed terminal is how the run was launched; the label: scheduler
    "blind-117": 1,  # b117-012: a 'local protection error' completion is the stack's registration; the label: unknown
    "blind-324": 1,  # b324-005: its window sits an hour before its own UCX epoch stamps (UTC): the errors are after the end
}


@pytest.mark.parametrize("batch", READ_BATCHES)
def test_read_blind_batches_keep_their_fixes(engine: Engine, batch: str) -> None:
    report = evaluate(CORPUS.parent / batch, engine)
    m = report.metrics
    failures = [f"{s.id}: got {s.got_sub_domain} {s.got_culprits}" for s in report.scores if not s.passed]
    disputed = DISPUTED_SUB_DOMAIN.get(batch, 0) / m["scenarios"]
    assert m["sub_domain_accuracy"] + disputed >= 0.88 and m["culprit_exact_match"] >= 0.9, failures
    assert m["false_infra_blame"] <= DISPUTED_BLAME.get(batch, 0), failures
    assert m["committed_precision"] >= 0.9, failures


def test_eval_command_thresholds(capsys) -> None:
    assert main(["eval", str(CORPUS), "--min-accuracy", "0.95", "--min-culprit", "0.95", "--max-false-blame", "0"]) == 0
    assert main(["eval", str(CORPUS), "--min-accuracy", "1.01"]) == 1
    assert "threshold" in capsys.readouterr().err


def test_eval_baseline_lists_what_changed(capsys, tmp_path) -> None:
    """`eval --baseline` against the holdout's own report: nothing changed; against a copy edited to say one scenario
    was wrong before and another had another culprit, one is fixed and one moved; an unreadable report is an error."""
    assert main(["eval", str(HOLDOUT), "--json"]) == 0
    report = json.loads(capsys.readouterr().out)
    baseline = tmp_path / "before.json"
    baseline.write_text(json.dumps(report))
    assert main(["eval", str(HOLDOUT), "--baseline", str(baseline)]) == 0
    assert not capsys.readouterr().err
    first, second = report["scenarios"][:2]
    first.update(passed=False, got_sub_domain="unknown")
    second.update(got_terminal_state="PREEMPTED")
    baseline.write_text(json.dumps(report))
    assert main(["eval", str(HOLDOUT), "--baseline", str(baseline)]) == 0
    err = capsys.readouterr().err.splitlines()
    assert err[0].startswith(f"fixed {first['id']}: unknown [") and err[1].startswith(f"moved {second['id']}: ")
    assert len(err) == 2 and "PREEMPTED ->" in err[1]
    baseline.write_text("{}")
    assert main(["eval", str(HOLDOUT), "--baseline", str(baseline)]) == 2
    assert "not a `firstfault eval --json` report" in capsys.readouterr().err


def test_eval_over_several_corpora_in_several_processes(capsys, tmp_path) -> None:
    """Two corpora in one `eval` score the scenarios of both, in order; two processes give the same report as one;
    a directory of corpora stands for all of them; an id present twice, or a directory with no scenarios, is an
    error that names it."""
    corpora = [HOLDOUT, CORPUS.parent / "blind-335"]
    assert main(["eval", *map(str, corpora), "--json"]) == 0
    one_process = capsys.readouterr().out
    assert main(["eval", *map(str, corpora), "--json", "--jobs", "2"]) == 0
    assert capsys.readouterr().out == one_process
    ids = [s["id"] for s in json.loads(one_process)["scenarios"]]
    assert ids == [d.name for corpus in corpora for d in scenario_dirs([corpus])]
    assert len(ids) == len(scenario_dirs([HOLDOUT])) + len(scenario_dirs([CORPUS.parent / "blind-335"]))
    parent = tmp_path / "corpora"
    parent.mkdir()
    (parent / "holdout").symlink_to(HOLDOUT)
    assert scenario_dirs([parent]) == [parent / "holdout" / d.name for d in scenario_dirs([HOLDOUT])]
    with pytest.raises(EvidenceError, match="twice"):
        scenario_dirs([HOLDOUT, parent])
    assert main(["eval", str(tmp_path)]) == 2
    assert "no scenario directories" in capsys.readouterr().err


def test_a_scenario_right_in_the_baseline_and_wrong_now_is_a_regression() -> None:
    now = ScenarioScore("s1", "likely", ["gpu"], "network", ["n1"], ["n2"], "FAILED", "FAILED", "", "",
                        False, False, True, True)
    before = asdict(now) | {"got_sub_domain": "gpu", "got_culprits": ["n1"], "passed": True}
    changes = compare(EvalReport(scores=[now]), {"s1": before})
    assert changes == [Change("broke", "s1", "gpu [n1] FAILED", "network [n2] FAILED")]
