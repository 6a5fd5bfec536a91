"""Agents: an LLM tool loop, swarms of agents that hand off, and supervisors of workers."""

from __future__ import annotations

from .agent import Agent
from .errors import MaxTurnsExceeded, OutputValidationError
from .tool import Tool, ToolArgumentsError, tool

__all__ = [
    "Agent",
    "MaxTurnsExceeded",
    "OutputValidationError",
    "Tool",
    "ToolArgumentsError",
    "tool",
]
