"""Metric evidence carries the GPU it is about into the answer: the culprit's `gpus` and the root cause's `gpu` name
the PCI bus id when DCGM labels one, else the UUID, else the NVML index."""

from __future__ import annotations

import pytest

from firstfault.engine.engine import Engine
from firstfault.engine.rules_api import Expect, RuleCase
from firstfault.tools.verify import run_rule_case

DBE = "DCGM_FI_DEV_ECC_DBE_VOL_TOTAL"


@pytest.fixture(scope="module")
def engine() -> Engine:
    return Engine()


@pytest.mark.parametrize(("labels", "gpu"), [
    ({"gpu": "3", "Hostname": "n1", "pci_bus_id": "00000000:9A:00.0", "UUID": "GPU-5e0b"}, "00000000:9A:00.0"),
    ({"gpu": "3", "Hostname": "n1", "UUID": "GPU-5e0b"}, "GPU-5e0b"),
    ({"gpu": "3", "Hostname": "n1"}, "gpu:3"),
])
def test_the_gpu_of_a_rising_counter_reaches_the_culprit(engine: Engine, labels: dict[str, str], gpu: str) -> None:
    case = RuleCase(title="DBE counter rises", evidence={}, metrics={"n1": [
        (DBE, labels, 0.0, "2025-01-01T00:10:00+00:00"), (DBE, labels, 2.0, "2025-01-01T00:11:00+00:00")]},
        expect=Expect())
    result = run_rule_case(engine.compiled, case)
    assert [(c.node, c.gpus) for c in result.culprit_nodes] == [("n1", [gpu])]
    assert result.root_cause is not None and result.root_cause.gpu == gpu


def test_slowdown_reasons_are_supporting_evidence_only(engine: Engine) -> None:
    """A hardware thermal slowdown bit (0x40) is kept as context on its GPU; idle and power-cap bits (0x1, 0x4) are
    routine and kept nowhere; neither makes a culprit."""
    labels = {"gpu": "1", "Hostname": "n1"}
    case = RuleCase(title="slowdown", evidence={}, metrics={"n1": [
        ("DCGM_FI_DEV_CLOCKS_EVENT_REASONS", labels, 0x5, "2025-01-01T00:10:00+00:00"),
        ("DCGM_FI_DEV_CLOCKS_EVENT_REASONS", labels, 0x44, "2025-01-01T00:11:00+00:00")]}, expect=Expect())
    result = run_rule_case(engine.compiled, case)
    slowed = [s for s in result.symptoms if s.symptom == "GPU clocks slowed by protection (DCGM)"]
    assert [(s.node, s.status, s.attributes["reasons"]) for s in slowed] == [
        ("n1", "interesting", "hardware thermal slowdown")]
    assert result.culprit_nodes == [] and result.sub_domain.value == "unknown"
