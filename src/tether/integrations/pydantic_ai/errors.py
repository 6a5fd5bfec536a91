"""Errors of the pydantic-ai integration (besides tether's own, :mod:`tether.errors`)."""

from __future__ import annotations

from ...errors import ExecutionError

__all__ = ["ReplayDivergedError"]


class ReplayDivergedError(ExecutionError):
    """A resumed run asked for a step its journal recorded differently.

    A resume replays the agent from its start and answers each step the run completed from
    the journal; that needs the agent to ask for the same steps in the same order. It does not
    when the agent's code, tools or prompts changed between the crash and the resume. The drive
    fails (``status="failed"``) and writes nothing else, so the run resumes once the code that
    started it is back (docs/pydantic_ai.md, "Replay").

    Attributes:
        key: the journal key of the step that differs, e.g. ``model:2``.
    """

    def __init__(
        self,
        message: str,
        *,
        key: str,
        execution_id: str | None = None,
        node_id: str | None = None,
    ) -> None:
        super().__init__(message, execution_id=execution_id, node_id=node_id)
        self.key = key
