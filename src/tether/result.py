"""What a run returns."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Literal

from .llm.messages import Message, Usage

__all__ = ["AgentResult", "ChainResult", "RunStatusName"]

RunStatusName = Literal["completed", "paused", "failed"]


@dataclass(slots=True)
class ChainResult:
    """The outcome of ``Chain.arun`` / ``aresume`` / ``afork``.

    Attributes:
        status: ``completed``, ``paused`` or ``failed``.
        output: the final state on completion, else ``None``.
        state: the state at the last boundary reached (for a pause, the state the paused node
            will see again).
        execution_id: the run's id (a fork's own new id).
        pending_interrupt: for a pause, ``{reason, context, node_id, agent_path}``.
        node_results: the update the last node committed in this call returned, under its
            node id (``{}`` when none did). One entry, whatever the run's length, so a long run
            holds no history in memory (docs/design.md, "What a result holds"); every step's
            state is in the store: ``checkpointer.list(execution_id)``.
        error: for a failure, the exception that escaped (also recorded on the run).
    """

    status: RunStatusName
    execution_id: str
    output: Any = None
    state: dict[str, Any] = field(default_factory=dict)
    pending_interrupt: dict[str, Any] | None = None
    node_results: dict[str, Any] = field(default_factory=dict)
    error: BaseException | None = None

    def raise_for_status(self) -> ChainResult:
        """Re-raise the run's error if it failed; return self otherwise."""
        if self.status == "failed" and self.error is not None:
            raise self.error
        return self


@dataclass(slots=True)
class AgentResult:
    """The outcome of ``Agent.arun`` / ``aresume`` / ``afork``.

    Attributes:
        status: ``completed``, ``paused`` or ``failed``.
        execution_id: the run's id (a fork's own new id).
        output: the model's final text on completion, else ``None``.
        parsed: with the agent's ``output_type``: the final text parsed into that pydantic
            model; else ``None``.
        messages: the whole history at the last boundary reached, oldest first (system prompt
            included); for a pause, the history the paused tool will see again.
        usage: tokens summed over every model call of the run so far (across resumes).
        pending_interrupt: for a pause, ``{reason, context, node_id, agent_path}``.
        error: for a failure, the exception that escaped (also recorded on the run).
    """

    status: RunStatusName
    execution_id: str
    output: str | None = None
    parsed: Any = None
    messages: list[Message] = field(default_factory=list)
    usage: Usage = field(default_factory=Usage)
    pending_interrupt: dict[str, Any] | None = None
    error: BaseException | None = None

    def raise_for_status(self) -> AgentResult:
        """Re-raise the run's error if it failed; return self otherwise."""
        if self.status == "failed" and self.error is not None:
            raise self.error
        return self
