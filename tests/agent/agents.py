"""Tools and agents shared by the agent tests and their child processes.

Every tool invocation appends ``{"tool": name, "arguments": {...}}`` to the JSON-lines file at
``$TOOL_LOG`` (when set), so a test can count invocations across processes.
"""

from __future__ import annotations

import json
import os
from typing import Any

import pydantic

from tether.agent import Agent, Tool, tool
from tether.interrupt import interrupt
from tether.llm.base import LLM
from tether.store.base import Checkpointer


def _log(name: str, **arguments: Any) -> None:
    path = os.environ.get("TOOL_LOG")
    if path:
        with open(path, "a", encoding="utf-8") as f:
            f.write(json.dumps({"tool": name, "arguments": arguments}) + "\n")


def tool_log(path: str) -> list[dict[str, Any]]:
    """The invocations logged at ``path``, oldest first."""
    if not os.path.exists(path):
        return []
    with open(path, encoding="utf-8") as f:
        return [json.loads(line) for line in f if line.strip()]


@tool
def lookup(order_id: str) -> dict[str, Any]:
    """Look an order up.

    Args:
        order_id: the order, e.g. ``"A-1"``.
    """
    _log("lookup", order_id=order_id)
    return {"order_id": order_id, "status": "shipped"}


@tool
def add(a: int, b: int) -> int:
    """Add two numbers."""
    _log("add", a=a, b=b)
    return a + b


@tool
def approve(amount: int) -> str:
    """Ask a human to approve an amount."""
    _log("approve", amount=amount)
    answer = interrupt("manager_approval", {"amount": amount})
    return "approved" if answer.approved else "rejected"


@tool
def boom(x: int) -> str:
    """Always fails."""
    _log("boom", x=x)
    raise RuntimeError(f"boom {x}")


class Verdict(pydantic.BaseModel):
    ok: bool
    reason: str


def make_agent(kind: str, llm: LLM, store: Checkpointer, **kwargs: Any) -> Agent:
    """``kind``: ``plain`` (lookup, add, approve) or ``typed`` (same tools, output_type)."""
    tools: list[Tool[Any, Any]] = [lookup, add, approve, boom]
    if kind == "typed":
        kwargs.setdefault("output_type", Verdict)
    return Agent(
        "helper", llm=llm, tools=tools, system_prompt="Be brief.", checkpointer=store, **kwargs
    )
