"""Scheduler state words from Slurm, Kubernetes, Kubeflow, Argo, Ray, dstack and Determined, mapped to the Slurm vocabulary."""

import pytest

from firstfault.engine.model import ExecutionContext, TerminalState, normalise_state, recorded_state


@pytest.mark.parametrize(("raw", "state"), [
    ("COMPLETED", TerminalState.COMPLETED),
    ("Complete", TerminalState.COMPLETED),        # a Kubernetes Job's condition type
    ("Succeeded", TerminalState.COMPLETED),       # Kubeflow / Argo phase
    ("STOPPED", TerminalState.CANCELLED),         # Ray job stopped by its user
    ("Canceled", TerminalState.CANCELLED),        # Azure ML run status
    ("Terminated", TerminalState.UNKNOWN),        # dstack's user stop, Volcano's reclaim: the reason says which
    ("Error", TerminalState.FAILED),              # Argo phase, Determined trial state
    ("CANCELLED by 1234", TerminalState.CANCELLED),
    ("OOMKilled", TerminalState.OUT_OF_MEMORY),
    ("Finished", TerminalState.UNKNOWN),          # Kueue's Finished says nothing of how: its reason does
    ("", TerminalState.UNKNOWN),
])
def test_scheduler_state_words(raw: str, state: TerminalState) -> None:
    assert normalise_state(raw) == state


@pytest.mark.parametrize(("state", "exit_code", "recorded"), [
    ("COMPLETE", "255", TerminalState.FAILED),      # Torque: COMPLETE whatever the job's Exit_status
    ("COMPLETE", "0", TerminalState.COMPLETED),
    ("COMPLETED", "0:0", TerminalState.COMPLETED),  # Slurm
    ("COMPLETED", "1:0", TerminalState.FAILED),
    ("Complete", "", TerminalState.COMPLETED),      # a Kubernetes Job: no exit code of its own
    ("TIMEOUT", "0:15", TerminalState.TIMEOUT),     # only a completed state is read with its exit code
    ("", "1", TerminalState.UNKNOWN),
    ("completed (failure: ExitCode 135)", "", TerminalState.FAILED),  # Azure Batch: the task's state and its result
    ("completed (success)", "", TerminalState.COMPLETED),
    ("COMPLETED exit code 0", "", TerminalState.COMPLETED),
])
def test_recorded_state_reads_the_exit_code(state: str, exit_code: str, recorded: TerminalState) -> None:
    context = ExecutionContext(workload_id="w", scheduler_state=state, exit_code=exit_code)
    assert recorded_state(context) == recorded
