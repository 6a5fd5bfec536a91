"""What a :class:`~tether.integrations.openai_agents.TetherAgent` verb returns."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Literal

if TYPE_CHECKING:
    from agents import RunResult

__all__ = ["TetherRunResult"]


@dataclass(slots=True)
class TetherRunResult:
    """The outcome of ``TetherAgent.arun`` / ``aresume`` / ``afork``.

    Attributes:
        status: ``completed``, ``paused`` or ``failed``.
        execution_id: the run's id (a fork's own new id).
        output: on completion, the run's ``final_output``, typed as the last agent's
            ``output_type`` makes it (a ``str`` without one); else ``None``.
        pending_interrupt: for a pause, ``{reason, context, node_id, agent_path}``. A tool
            waiting for approval has reason ``"tool_approval"`` and context ``{"tool",
            "arguments", "agent", "call_id"}``; a tool that called ``tether.interrupt()`` has
            the reason and context it gave.
        error: for a failure, the exception that escaped (also recorded on the run).
        run_result: the SDK's own :class:`agents.RunResult` of the drive's last stretch
            (``new_items``, ``last_agent``, ``raw_responses``...), when it got one.
    """

    status: Literal["completed", "paused", "failed"]
    execution_id: str
    output: Any = None
    pending_interrupt: dict[str, Any] | None = None
    error: BaseException | None = None
    run_result: RunResult | None = None

    def raise_for_status(self) -> TetherRunResult:
        """Re-raise the run's error if it failed; return self otherwise."""
        if self.status == "failed" and self.error is not None:
            raise self.error
        return self
