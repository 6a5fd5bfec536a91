"""Errors an :class:`~tether.agent.agent.Agent` run can fail with, beside the tree in
:mod:`tether.errors`::

    ExecutionError
    ├── MaxTurnsExceeded        the tool loop wanted more model calls than ``max_turns``
    └── OutputValidationError   the final answer did not parse into ``output_type``
"""

from __future__ import annotations

from ..errors import ExecutionError

__all__ = ["MaxTurnsExceeded", "OutputValidationError"]


class MaxTurnsExceeded(ExecutionError):
    """The model kept asking for tools past the agent's ``max_turns`` model calls.

    Attributes:
        max_turns: the bound that was hit.
    """

    def __init__(
        self,
        message: str,
        *,
        max_turns: int,
        execution_id: str | None = None,
        node_id: str | None = None,
    ) -> None:
        super().__init__(message, execution_id=execution_id, node_id=node_id)
        self.max_turns = max_turns


class OutputValidationError(ExecutionError):
    """The model's final answer did not parse into the agent's ``output_type``, even after the
    corrective re-asks.

    Attributes:
        output: the last answer's text.
        errors: why it did not parse (pydantic's description, or the JSON error).
    """

    def __init__(
        self,
        message: str,
        *,
        output: str,
        errors: str,
        execution_id: str | None = None,
        node_id: str | None = None,
    ) -> None:
        super().__init__(message, execution_id=execution_id, node_id=node_id)
        self.output = output
        self.errors = errors
