"""The application the run-inspector browser test serves: the orders chain and a support
agent that looks an order up and then asks a manager before refunding (a scripted model)."""

from __future__ import annotations

from typing import Any

import tether
from tests.support.chains import orders_chain
from tether import Agent, interrupt
from tether.registry import Registry
from tether.store.base import Checkpointer
from tether.testing import ScriptedLLM


def lookup(order_id: str) -> dict[str, Any]:
    """Look an order up.

    Args:
        order_id: the order, e.g. ``"A-1"``.
    """
    return {"order_id": order_id, "status": "delivered", "total": 120}


def refund(order_id: str, amount: int) -> str:
    """Refund an order, once a manager approved.

    Args:
        order_id: the order.
        amount: how much, in euros.
    """
    answer = interrupt("refund_approval", {"order_id": order_id, "amount": amount})
    return f"refunded {amount}" if answer.approved else "refund declined"


def support_agent(store: Checkpointer) -> Agent:
    llm = ScriptedLLM(
        [
            [{"name": "lookup", "arguments": {"order_id": "A-17"}}],
            [{"name": "refund", "arguments": {"order_id": "A-17", "amount": 120}}],
            "Your refund of 120 EUR is on its way.",
        ],
        resume_aware=True,  # the server's copy picks up where the conversation is
    )
    return Agent(
        "support",
        llm=llm,
        tools=[lookup, refund],
        system_prompt="You are a support agent. Refunds need a manager.",
        checkpointer=store,
    )


app = Registry(orders_chain(tether.connect()), support_agent(tether.connect()))
