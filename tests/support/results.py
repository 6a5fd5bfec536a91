"""Reading a run's result in a test."""

from __future__ import annotations

from typing import Any

from tether.checkpoint import Checkpoint
from tether.registry import RunOutcome
from tether.store.base import Checkpointer, RunRecord


def question_of(result: RunOutcome) -> dict[str, Any]:
    """The question a paused run waits on: ``{reason, context, node_id, agent_path}``.

    Fails the test, naming the status and error, unless the run paused on a question.
    """
    assert result.status == "paused" and result.pending_interrupt is not None, (
        result.status,
        result.error,
    )
    return result.pending_interrupt


def run_of(store: Checkpointer, execution_id: str) -> RunRecord:
    """The run row of ``execution_id``; fails the test if the store has no such run."""
    run = store.get_run(execution_id)
    assert run is not None, f"no run {execution_id!r}"
    return run


def last_row(store: Checkpointer, execution_id: str) -> Checkpoint:
    """The newest checkpoint of ``execution_id``; fails the test if the run has none."""
    row = store.get_last(execution_id)
    assert row is not None, f"no checkpoint of {execution_id!r}"
    return row
