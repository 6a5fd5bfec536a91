"""The pydantic-ai agents the integration tests make durable, in this process and in children.

The model is pydantic-ai's own ``OpenAIChatModel`` talking over HTTP to the loopback stub
(``tests/llm/stub_server.py``). Every tool body appends a line to the file ``TOOL_LOG`` names,
so tests count the bodies that ran across processes; ``charge`` is ``@idempotent`` and appends
to ``LEDGER``; ``pack`` waits, when ``PACK_GATE`` names a file, until that file exists (a test
kills the process while it waits).
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from pydantic import BaseModel
from pydantic_ai import Agent, ModelRetry
from pydantic_ai.exceptions import CallDeferred
from pydantic_ai.models.openai import OpenAIChatModel
from pydantic_ai.providers.openai import OpenAIProvider

from tether import Checkpointer, idempotent, interrupt
from tether.integrations.pydantic_ai import TetherAgent

API_KEY = "sk-test-pydantic-ai-0000"


class Refund(BaseModel):
    """A typed output."""

    order_id: str
    refunded: int


def _append(env: str, record: dict[str, Any]) -> None:
    path = os.environ.get(env)
    if path:
        with open(path, "a", encoding="utf-8") as f:
            f.write(json.dumps(record) + "\n")


def read_log(path: str | Path) -> list[dict[str, Any]]:
    """The lines a ``TOOL_LOG`` or ``LEDGER`` file holds."""
    p = Path(path)
    if not p.exists():
        return []
    return [json.loads(line) for line in p.read_text().splitlines() if line]


@idempotent
def charge(order_id: str, amount: int) -> str:
    """The side effect: one ledger line per run and arguments, however often a step re-runs."""
    _append("LEDGER", {"order_id": order_id, "amount": amount})
    return f"charged {amount} on {order_id}"


def model(stub_url: str) -> OpenAIChatModel:
    return OpenAIChatModel(
        "gpt-4o-mini", provider=OpenAIProvider(base_url=stub_url + "/v1", api_key=API_KEY)
    )


def support_agent(
    stub_url: str, *, typed: bool = False, capabilities: Sequence[Any] = ()
) -> Agent[Any, Any]:
    """An agent with the tools the tests call (``typed``: its output is a :class:`Refund`)."""
    agent: Agent[Any, Any] = Agent(
        model(stub_url),
        name="support",
        instructions="You help customers with their orders.",
        output_type=Refund if typed else str,
        capabilities=list(capabilities),
    )

    @agent.tool_plain
    def lookup(order_id: str) -> dict[str, str]:
        """Look an order up."""
        _append("TOOL_LOG", {"tool": "lookup", "order_id": order_id})
        return {"order_id": order_id, "status": "delivered"}

    @agent.tool_plain
    def pack(order_id: str) -> str:
        """Charge and pack an order (waits at PACK_GATE when set)."""
        _append("TOOL_LOG", {"tool": "pack", "order_id": order_id})
        receipt = charge(order_id, 100)
        gate = os.environ.get("PACK_GATE")
        if gate:
            deadline = time.monotonic() + 60
            while not os.path.exists(gate) and time.monotonic() < deadline:
                time.sleep(0.02)
        return f"packed {order_id} ({receipt})"

    @agent.tool_plain(requires_approval=True)
    def refund(order_id: str, amount: int) -> str:
        """Refund an order; a human approves each call."""
        _append("TOOL_LOG", {"tool": "refund", "order_id": order_id, "amount": amount})
        return charge(order_id, -amount)

    @agent.tool_plain
    def escalate(order_id: str) -> str:
        """Ask a manager, with tether's own interrupt()."""
        answer = interrupt("manager_review", {"order_id": order_id})
        _append("TOOL_LOG", {"tool": "escalate", "order_id": order_id, "note": answer.data})
        return f"manager says: {answer.data}"

    @agent.tool_plain
    def courier(order_id: str) -> str:
        """A call run outside the agent (its result comes with the answer)."""
        raise CallDeferred({"queue": "couriers"})

    @agent.tool_plain(retries=2)
    def flaky(order_id: str) -> str:
        """Asks the model to try again on its first call for each order."""
        _append("TOOL_LOG", {"tool": "flaky", "order_id": order_id})
        if order_id.startswith("retry-"):
            raise ModelRetry(f"order ids never start with 'retry-': {order_id}")
        return f"flaky ok {order_id}"

    return agent


def durable(stub_url: str, store: Checkpointer, *, typed: bool = False) -> TetherAgent[Any, Any]:
    """The support agent made durable on ``store``."""
    return TetherAgent(support_agent(stub_url, typed=typed), checkpointer=store)
