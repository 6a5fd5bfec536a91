"""Two deploys of one application for the rename tests (``--app tests.control.deploy:app``):
``TETHER_TEST_DEPLOY=1`` has the old names, ``2`` renamed a chain node and an agent's tool and
says so with ``Chain(renamed=)`` and ``Agent(renamed_tools=)``.

Every node and tool records each run of its body in the run database's ledger
(``tests.workers.app``), so a test sees what ran, under which deploy, how often.
"""

from __future__ import annotations

import os
import signal
from typing import Any

from tests.workers.app import _ledger
from tether import Agent, Chain, Registry, interrupt, tool
from tether.testing import ScriptedLLM

DEPLOY = os.environ.get("TETHER_TEST_DEPLOY", "1")
OLD = DEPLOY == "1"


def _review(state: dict[str, Any]) -> dict[str, Any]:
    _ledger(f"review:{DEPLOY}:{state['eid']}", state["eid"], "review")
    if state.get("preapproved"):
        return {"approved": True}
    answer = interrupt("approve", {"amount": state["amount"]})
    return {"approved": answer.approved}


def _charge(state: dict[str, Any]) -> dict[str, Any]:
    _ledger(f"charge:{DEPLOY}:{state['eid']}", state["eid"], "charge")
    if state.get("crash") and OLD:
        os.kill(os.getpid(), signal.SIGKILL)  # the old code dies mid-step
    return {"charged": state["amount"]}


refunds = Chain("refunds", renamed=None if OLD else {"review": "manager_review", "charge": "pay"})
refunds.add_node("prepare", lambda state: {"prepared": True})
refunds.add_node("review" if OLD else "manager_review", _review)
refunds.add_node("charge" if OLD else "pay", _charge)


def _lookup(order_id: str) -> str:
    """Find an order."""
    _ledger(f"lookup:{DEPLOY}:{order_id}", order_id, "lookup")
    answer = interrupt("share_order", {"order_id": order_id})
    return "shipped" if answer.approved else "refused"


lookup = tool(_lookup, name="lookup" if OLD else "find_order")
support = Agent(
    "support",
    llm=ScriptedLLM(
        [[{"name": "lookup", "arguments": {"order_id": "A-1"}}], "It shipped."],
        resume_aware=True,
    ),
    tools=[lookup],
    renamed_tools=None if OLD else {"lookup": "find_order"},
)

app = Registry(refunds, support)
