"""Scheduler state words from Slurm, Kubernetes, Kubeflow, Argo and Ray, mapped to the Slurm vocabulary."""

import pytest

from firstfault.engine.model import TerminalState, normalise_state


@pytest.mark.parametrize(("raw", "state"), [
    ("COMPLETED", TerminalState.COMPLETED),
    ("Complete", TerminalState.COMPLETED),        # a Kubernetes Job's condition type
    ("Succeeded", TerminalState.COMPLETED),       # Kubeflow / Argo phase
    ("STOPPED", TerminalState.CANCELLED),         # Ray job stopped by its user
    ("Canceled", TerminalState.CANCELLED),        # Azure ML run status
    ("CANCELLED by 1234", TerminalState.CANCELLED),
    ("OOMKilled", TerminalState.OUT_OF_MEMORY),
    ("Finished", TerminalState.UNKNOWN),          # Kueue's Finished says nothing of how: its reason does
    ("", TerminalState.UNKNOWN),
])
def test_scheduler_state_words(raw: str, state: TerminalState) -> None:
    assert normalise_state(raw) == state
