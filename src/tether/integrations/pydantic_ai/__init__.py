"""Durable pydantic-ai agents on tether (the ``pydantic-ai`` extra; docs/pydantic_ai.md).

Wrap a pydantic-ai ``Agent`` in :class:`TetherAgent` and it becomes a tether runner: every model
request and tool call is a checkpointed step, approvals and external tool calls pause the run
as tether interrupts, and a crashed run resumes in any process that reaches the store without
repeating a completed step::

    from pydantic_ai import Agent
    from tether import SQLiteCheckpointer
    from tether.integrations.pydantic_ai import TetherAgent

    agent = Agent("openai:gpt-4o-mini", name="support")
    durable = TetherAgent(agent, checkpointer=SQLiteCheckpointer("tether.db"))
    result = durable.run("Where is my refund?")

Supported pydantic-ai versions: see :data:`SUPPORTED_VERSIONS`.
"""

from __future__ import annotations

from .agent import TetherAgent
from .errors import ReplayDivergedError
from .result import TetherRunResult

__all__ = ["SUPPORTED_VERSIONS", "ReplayDivergedError", "TetherAgent", "TetherRunResult"]

SUPPORTED_VERSIONS = ">=2.20,<3"
"""The pydantic-ai (``pydantic-ai-slim``) versions this integration supports: the extra pins
them, and the suite runs on the newest release (it was also run on 2.20.0, the oldest)."""
