"""``@idempotent`` inside a LangGraph node driven by a :class:`LangGraphRunner` knows its run:
a node that charges before LangGraph's ``interrupt()`` runs again from its top when the answer
comes (LangGraph re-executes the interrupted node), and the charge must not fire again. Sync
nodes (LangGraph runs them on its executor threads) and async nodes; both backends."""

from __future__ import annotations

from typing import Any, TypedDict

from langgraph.graph import END, START, StateGraph
from langgraph.types import interrupt

from tether import Resume, idempotent
from tether.integrations.langgraph import LangGraphRunner, TetherSaver


class _S(TypedDict, total=False):
    order: str
    receipt: str
    approved: bool


def _graph(store: Any, ledger: list[str], *, use_async: bool) -> LangGraphRunner:
    @idempotent(key=lambda order: f"charge:{order}")
    def charge(order: str) -> str:
        ledger.append(order)
        return f"rcpt-{order}-{len(ledger)}"

    @idempotent(key=lambda order: f"charge:{order}")
    async def acharge(order: str) -> str:
        ledger.append(order)
        return f"rcpt-{order}-{len(ledger)}"

    def pay(state: _S) -> dict[str, Any]:
        receipt = charge(state["order"])
        answer = interrupt({"question": "ship it?", "receipt": receipt})
        return {"receipt": receipt, "approved": bool(answer["approved"])}

    async def apay(state: _S) -> dict[str, Any]:
        receipt = await acharge(state["order"])
        answer = interrupt({"question": "ship it?", "receipt": receipt})
        return {"receipt": receipt, "approved": bool(answer["approved"])}

    builder = StateGraph(_S)
    builder.add_node("pay", apay if use_async else pay)
    builder.add_edge(START, "pay")
    builder.add_edge("pay", END)
    name = "apay" if use_async else "pay"
    return LangGraphRunner(builder.compile(checkpointer=TetherSaver(store)), name=name)


def test_a_charge_before_a_langgraph_interrupt_fires_once_when_the_node_runs_again(store):
    for use_async in (False, True):
        ledger: list[str] = []
        runner = _graph(store, ledger, use_async=use_async)
        eid = f"lg-idem-{use_async}"
        paused = runner.run({"order": "A-1"}, thread_id=eid)
        assert paused.status == "paused", paused.error
        assert ledger == ["A-1"]
        done = runner.resume(eid, Resume(approved=True))
        assert done.status == "completed", done.error
        # The node ran again from its top; the charge returned its cached receipt.
        assert ledger == ["A-1"], use_async
        assert done.output == {"order": "A-1", "receipt": "rcpt-A-1-1", "approved": True}
