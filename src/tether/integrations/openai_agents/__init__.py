"""Durable OpenAI Agents SDK agents on tether (extra ``openai-agents``).

Wrap an agent in :class:`TetherAgent` and it is a tether runner: its model calls and function
tool calls are journaled as checkpoints, a crashed run resumes without repeating completed
calls, ``needs_approval`` tools pause as tether interrupts, and the run can be registered in a
:class:`tether.Registry`, continued by ``tether worker``, forked and pruned. See
``docs/openai-agents.md``.

Importing this module imports the ``agents`` package; ``import tether`` does not.
"""

from __future__ import annotations

from ._calls import JournalMismatchError
from ._drive import APPROVAL_REASON
from ._result import TetherRunResult
from .agent import TetherAgent

__all__ = ["APPROVAL_REASON", "JournalMismatchError", "TetherAgent", "TetherRunResult"]
