"""What a durable pydantic-ai run's verbs return."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Generic, Literal, TypeVar

from pydantic_ai.messages import ModelMessage
from pydantic_ai.run import AgentRunResult

__all__ = ["TetherRunResult"]

OutputT = TypeVar("OutputT")


@dataclass(slots=True)
class TetherRunResult(Generic[OutputT]):
    """The outcome of ``TetherAgent.arun`` / ``aresume`` / ``afork`` (a tether ``RunOutcome``).

    Attributes:
        status: ``completed``, ``paused`` or ``failed``.
        execution_id: the run's id (a fork's own new id).
        output: on completion, the agent's output, typed as the agent's ``output_type`` says;
            else ``None``.
        pending_interrupt: for a pause, ``{reason, context, node_id, agent_path}``; for a tool
            approval the context is ``{"tool_name", "args", "tool_call_id"}``.
        error: for a failure, the exception that escaped the agent (also recorded on the run).
        run_result: on completion, pydantic-ai's own result of this drive (messages, usage).
    """

    status: Literal["completed", "paused", "failed"]
    execution_id: str
    output: OutputT | None = None
    pending_interrupt: dict[str, Any] | None = None
    error: BaseException | None = None
    run_result: AgentRunResult[OutputT] | None = None

    def all_messages(self) -> list[ModelMessage]:
        """The whole conversation of a completed run (``[]`` otherwise)."""
        return [] if self.run_result is None else list(self.run_result.all_messages())

    def raise_for_status(self) -> TetherRunResult[OutputT]:
        """Re-raise the run's error if it failed; return self otherwise."""
        if self.status == "failed" and self.error is not None:
            raise self.error
        return self
