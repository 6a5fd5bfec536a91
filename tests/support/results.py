"""Reading a run's result in a test."""

from __future__ import annotations

from typing import Any

from tether.result import AgentResult, ChainResult


def question_of(result: ChainResult | AgentResult) -> dict[str, Any]:
    """The question a paused run waits on: ``{reason, context, node_id, agent_path}``.

    Fails the test, naming the status and error, unless the run paused on a question.
    """
    assert result.status == "paused" and result.pending_interrupt is not None, (
        result.status,
        result.error,
    )
    return result.pending_interrupt
