"""Every bundled sample gives its expected diagnosis: culprit, sub_domain, outcome, terminal state, root
evidence line, and the downstream symptoms kept as demoted evidence with file and line."""

from __future__ import annotations

import pytest

from firstfault.engine import Engine
from firstfault.samples import sample_dirs

EXPECTED = {
    "nvlink-walkthrough": dict(sub_domain="nvlink", outcome="Fail InfraHW", terminal="FAILED", culprits=["node-02"],
                               root="XID-149.4", root_text="NVRM: Xid (PCI:0018:01:00): 149",
                               demoted={"node-01": "IB Error-5 (flush)", "node-02": "CUDA kernel failure (unspecified)",
                                        "node-03": "NCCL watchdog timeout"}),
    "xid79-fallen-off-bus": dict(sub_domain="gpu", outcome="Fail InfraHW", terminal="FAILED", culprits=["gpu-a03"],
                                 root="XID-79", root_text="GPU has fallen off the bus",
                                 demoted={"gpu-a01": "NCCL watchdog timeout", "gpu-a03": "XID-45"}),
    "cuda-oom-rank": dict(sub_domain="gpu_oom", outcome="Fail User", terminal="FAILED", culprits=[],
                          root="CUDA out of memory", root_text="torch.OutOfMemoryError",
                          demoted={"dgx-b11": "NCCL watchdog timeout"}),
    "python-exception-rank0": dict(sub_domain="application", outcome="Fail User", terminal="FAILED", culprits=[],
                                   root="Python exception", root_text="KeyError: 'code_v3'",
                                   demoted={"trn-c02": "NCCL watchdog timeout"}),
    "slurm-time-limit": dict(sub_domain="scheduler", outcome="Fail Scheduler", terminal="TIMEOUT", culprits=[],
                             root="Slurm time limit", root_text="DUE TO TIME LIMIT", demoted={}),
}


def test_every_sample_has_an_expectation() -> None:
    assert set(sample_dirs()) == set(EXPECTED)


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_sample_diagnosis(engine: Engine, name: str) -> None:
    want = EXPECTED[name]
    result = engine.analyze_path(sample_dirs()[name])
    assert result.sub_domain.value == want["sub_domain"]
    assert result.outcome.value == want["outcome"]
    assert result.terminal_state.value == want["terminal"]
    assert [c.node for c in result.culprit_nodes] == want["culprits"]
    assert result.root_cause is not None and result.root_cause.symptom == want["root"]
    assert any(want["root_text"] in ev.text for ev in result.root_cause.evidence)
    for ev in result.root_cause.evidence:  # a log line with its position, or the scheduler's own record
        assert (ev.provenance.origin.endswith(".log") and ev.provenance.line) or ev.provenance.origin == "execution-context"
    for node, symptom in want["demoted"].items():
        matches = [s for s in result.symptoms if s.node == node and s.symptom == symptom]
        assert matches, f"{symptom} on {node} missing"
        kept = matches[0]
        assert kept.status == "interesting" and kept.demoted_by and kept.reason
        assert kept.evidence[0].provenance.origin.startswith(f"{node}/") and kept.evidence[0].provenance.line
    assert not result.coverage.partial


def test_walkthrough_next_action_follows_the_decode(engine: Engine) -> None:
    result = engine.analyze_path(sample_dirs()["nvlink-walkthrough"])
    culprit = result.culprit_nodes[0]
    assert culprit.next_action.immediate == "RESET_GPU"
    assert culprit.next_action.investigatory == "INVESTIGATE_LINK_SI"
    assert "signal integrity" in result.root_cause.description
    assert culprit.gpus == ["0018:01:00"] and culprit.links == ["05"]


def test_walkthrough_trace_names_the_seed_rules(engine: Engine) -> None:
    result = engine.analyze_path(sample_dirs()["nvlink-walkthrough"])
    rules = {t.rule for t in result.trace}
    assert {"HandleXidBurstEvents", "ElectRootCause", "DemoteExplained"} <= rules
    decide = [t for t in result.trace if t.action == "decide"]
    assert decide and decide[0].symptom == "XID-149.4" and decide[0].node == "node-02"
