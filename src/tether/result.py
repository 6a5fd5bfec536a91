"""What a run returns."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Literal

__all__ = ["ChainResult", "RunStatusName"]

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
        node_results: the updates each node returned during this call, by node id (a node run
            several times in a cycle keeps its last).
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
