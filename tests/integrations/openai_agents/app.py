"""An OpenAI Agents SDK app made durable with ``TetherAgent``, for the integration tests.

Unmodified SDK agents (a triage agent handing off to a billing agent with function tools, one
of them ``needs_approval``) talk over HTTP, through the official ``openai`` client and the
Responses API, to the test's :class:`tests.llm.stub_server.StubServer` at
``TETHER_TEST_STUB_URL``. The store is ``TETHER_DATABASE_URL`` (the CLI sets it from ``--db``).

Tool bodies append a line to the file ``TETHER_TEST_LEDGER`` each time they run, so a test
counts them across processes. ``ship`` charges through ``@idempotent`` and then, while the
file ``TETHER_TEST_HOLD`` exists, notes ``ship-held`` and waits (a test kills the process
there: mid-tool, after the charge is cached).
"""

from __future__ import annotations

import os
import time
from dataclasses import dataclass
from pathlib import Path

from agents import Agent, RunConfig, RunContextWrapper, function_tool, set_tracing_disabled
from agents.models.openai_provider import OpenAIProvider
from openai import AsyncOpenAI

from tether import Registry, idempotent, interrupt
from tether.integrations.openai_agents import TetherAgent

set_tracing_disabled(True)  # the SDK would export traces to OpenAI otherwise


def note(line: str) -> None:
    """Append one line to the test's ledger file."""
    path = os.environ.get("TETHER_TEST_LEDGER")
    if path:
        with open(path, "a", encoding="utf-8") as f:
            f.write(line + "\n")


def ledger(path: Path) -> list[str]:
    """The lines a ledger file holds (none when it does not exist)."""
    return path.read_text(encoding="utf-8").splitlines() if path.exists() else []


@function_tool
def lookup(order_id: str) -> str:
    """Look an order up.

    Args:
        order_id: the order.
    """
    note(f"lookup:{order_id}")
    return f"order {order_id}: 900 cents, paid"


@idempotent
def charge(order_id: str) -> dict[str, str]:
    note(f"charge:{order_id}")
    return {"charged": order_id}


@function_tool
async def ship(order_id: str) -> str:
    """Ship an order (charges it first).

    Args:
        order_id: the order.
    """
    note(f"ship-start:{order_id}")
    receipt = charge(order_id)
    hold = os.environ.get("TETHER_TEST_HOLD")
    if hold and os.path.exists(hold):
        note(f"ship-held:{order_id}")
    deadline = time.monotonic() + 60
    while hold and os.path.exists(hold) and time.monotonic() < deadline:
        time.sleep(0.02)
    note(f"ship-done:{order_id}")
    return f"shipped {order_id} ({receipt['charged']})"


@function_tool(needs_approval=True)
def refund(order_id: str, amount: int) -> str:
    """Refund an order; a manager approves it first.

    Args:
        order_id: the order.
        amount: in cents.
    """
    note(f"refund:{order_id}:{amount}")
    return f"refunded {amount} on {order_id}"


@function_tool
def escalate(order_id: str) -> str:
    """Ask a human supervisor about an order.

    Args:
        order_id: the order.
    """
    answer = interrupt("supervisor", {"order_id": order_id})
    note(f"escalate:{order_id}:{answer.approved}")
    return f"supervisor says {answer.data or ('yes' if answer.approved else 'no')}"


@dataclass
class Customer:
    """The run context object of a support run."""

    name: str
    tier: str


@function_tool
def whoami(ctx: RunContextWrapper[Customer]) -> str:
    """Say who the customer is."""
    note(f"whoami:{ctx.context.name}")
    return f"{ctx.context.name} ({ctx.context.tier})"


billing = Agent(
    name="billing",
    instructions="You handle refunds and shipping.",
    tools=[lookup, ship, refund, escalate, whoami],
)
triage = Agent(name="triage", instructions="Route the customer.", handoffs=[billing])


def run_config(stub_url: str | None = None) -> RunConfig:
    """The SDK run config: the Responses API at the stub, tracing off."""
    url = stub_url or os.environ["TETHER_TEST_STUB_URL"]
    client = AsyncOpenAI(base_url=url + "/v1", api_key="sk-test-not-a-key", max_retries=0)
    return RunConfig(
        model_provider=OpenAIProvider(openai_client=client, use_responses=True),
        model="gpt-4o-mini",
        tracing_disabled=True,
    )


def support(checkpointer=None, stub_url=None) -> TetherAgent:
    """The durable support desk; in-process tests pass a store and the stub's URL."""
    return TetherAgent(
        triage,
        name="support",
        checkpointer=checkpointer,
        run_config=run_config(stub_url),
        lease_seconds=1.0,  # a worker takes a killed run over within about a second
    )


def _app() -> Registry:
    return Registry(support()) if "TETHER_TEST_STUB_URL" in os.environ else Registry()


app = _app()
