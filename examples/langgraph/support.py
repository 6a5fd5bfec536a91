"""A LangGraph refund graph on tether: the graph code is plain LangGraph; the checkpointer is
``TetherSaver`` instead of ``SqliteSaver``, and the compiled graph is registered as a tether
runner so its pauses show up in ``tether pending list`` and the approvals page.

    python examples/langgraph/support.py

The graph looks a refund request up, asks a manager with LangGraph's ``interrupt()``, and pays.
This process starts the thread and stops at the question; a second, fresh process approves it
(as ``tether approve RF-1015 --app examples.langgraph.support:app`` would) and the graph
finishes there. A second thread is answered the LangGraph way, ``Command(resume=...)``, on the
same saver. The store is ``examples/langgraph/out/support.db`` (or ``TETHER_DATABASE_URL``).
"""

from __future__ import annotations

import csv
import os
import subprocess
import sys
import uuid
from pathlib import Path
from typing import Any, TypedDict

from langgraph.graph import END, START, StateGraph
from langgraph.types import Command, interrupt

from tether import Registry, Resume
from tether.integrations.langgraph import LangGraphRunner, TetherSaver

HERE = Path(__file__).resolve().parent
DATA = HERE.parents[0] / "refunds" / "refunds.csv"
URL = os.environ.get("TETHER_DATABASE_URL") or f"sqlite:///{HERE / 'out' / 'support.db'}"


class Refund(TypedDict, total=False):
    request_id: str
    request: dict[str, str]
    decision: dict[str, Any]
    paid: str


def lookup(state: Refund) -> Refund:
    with DATA.open(newline="", encoding="utf-8") as f:
        rows = {row["request_id"]: row for row in csv.DictReader(f)}
    return {"request": rows[state["request_id"]]}


def approve(state: Refund) -> Refund:
    request = state["request"]
    # Paused here until someone answers; tether lists the question with this value.
    decision = interrupt({"refund": request["request_id"], "amount": request["amount"]})
    return {"decision": decision}


def pay(state: Refund) -> Refund:
    ok = state["decision"].get("approved")
    return {"paid": state["request"]["amount"] if ok else "0"}


builder = StateGraph(Refund)
builder.add_node("lookup", lookup)
builder.add_node("approve", approve)
builder.add_node("pay", pay)
builder.add_edge(START, "lookup")
builder.add_edge("lookup", "approve")
builder.add_edge("approve", "pay")
builder.add_edge("pay", END)

# The two lines that change: SqliteSaver.from_conn_string(...) becomes TetherSaver.from_url(...)
(HERE / "out").mkdir(exist_ok=True)
saver = TetherSaver.from_url(URL)
graph = builder.compile(checkpointer=saver)
# And, for tether's operators (pending list, approvals page, workers): register the graph.
refunds = LangGraphRunner(graph, name="refunds")
app = Registry(refunds)


def main() -> None:
    if sys.argv[1:2] == ["approve"]:  # the second process
        done = refunds.resume(sys.argv[2], Resume(approved=True, metadata={"by": "manager"}))
        print(
            f"{sys.argv[2]} approved in a fresh process: {done.status}, paid {done.output['paid']}"
        )
        return
    run = uuid.uuid4().hex[:6]  # thread ids of this run of the example
    thread_id = f"RF-1015-{run}"
    paused = refunds.run({"request_id": "RF-1015"}, thread_id=thread_id)
    question = paused.pending_interrupt or {}
    print(f"{thread_id} {paused.status} at {question['node_id']}: {question['context']}")
    subprocess.run([sys.executable, __file__, "approve", thread_id], check=True)

    # The LangGraph way, on the same saver: invoke, read __interrupt__, answer with Command.
    config = {"configurable": {"thread_id": f"RF-1001-{run}"}}
    first = graph.invoke({"request_id": "RF-1001"}, config)
    print(f"RF-1001 asks: {first['__interrupt__'][0].value}")
    final = graph.invoke(Command(resume={"approved": False}), config)
    print(f"RF-1001 answered with Command(resume=...): paid {final['paid']}")
    history = list(saver.list(config))
    print(f"RF-1001 has {len(history)} checkpoints in {URL}")


if __name__ == "__main__":
    main()
