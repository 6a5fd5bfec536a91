"""Agents: an LLM tool loop, swarms of agents that hand off, and supervisors of workers."""

from __future__ import annotations

from .agent import Agent
from .errors import MaxTurnsExceeded, OutputValidationError
from .supervisor import Supervisor, Worker
from .swarm import Swarm
from .tool import Tool, ToolArgumentsError, tool

__all__ = [
    "Agent",
    "MaxTurnsExceeded",
    "OutputValidationError",
    "Supervisor",
    "Swarm",
    "Tool",
    "ToolArgumentsError",
    "Worker",
    "tool",
]
