"""Runners for the answer-matching, changed-code and unreadable-value tests, in a form a fresh
process reaches: as ``--app tests.support.answers_app:app`` for the ``tether`` command and
workers, and as a child process:

    python -m tests.support.answers_app <runner> run <execution_id>
    python -m tests.support.answers_app <runner> resume <execution_id> [approve|reject]

which prints one JSON line ``{"status", "output", "pending", "error", "error_type"}``. The store
is ``tether.connect()`` (``TETHER_DATABASE_URL``). What the code looks like in this process (a
deploy) comes from environment variables:

- ``TETHER_TEST_ASK_ORDER``: ``refund,wire`` (default) or ``wire,refund``: the order in which
  the ``approvals`` chain's node asks its two questions;
- ``TETHER_TEST_TOOL``: the name of the approval tool of every agent here (default ``refund``);
- ``TETHER_TEST_BILLING``: the name of the swarm agent, supervisor worker role or chain-node
  agent that holds the approval tool (default ``billing``);
- ``TETHER_TEST_LOCAL``: comma-separated places where the ``receipts`` chain stores an instance
  of a class defined inside a function (``state``, ``context``, ``result``); elsewhere it uses
  module-level classes;
- ``TETHER_TEST_RECEIPT_KEY``: the idempotency key of ``issue_receipt`` (default: derived);
- ``TETHER_TEST_REVIEW`` / ``TETHER_TEST_PACK``: the names of the ``receipts`` chain's
  approval node (default ``review``) and of the ``fulfil`` chain's first node (``pack``);
- ``TETHER_TEST_RENAMED``: the rename map of the ``desk`` agent and of the ``receipts`` and
  ``fulfil`` chains, as ``old:new,old2:new2`` (docs/design.md §13);
- ``TETHER_TEST_STEPS``: a file that gets one line per effect (``refund A-1``, ``wire A-1``,
  ``receipt A-1``, ``tool refund``, ``pack A-1``).
"""

from __future__ import annotations

import json
import os
import sys
from collections.abc import Callable
from typing import Any

import pydantic

import tether
from tether import Agent, Chain, Registry, Resume, Supervisor, Swarm, Worker, idempotent, interrupt
from tether.agent import Tool
from tether.registry import Runner
from tether.testing import ScriptedLLM


def effect(line: str) -> None:
    path = os.environ.get("TETHER_TEST_STEPS")
    if path:
        with open(path, "a", encoding="utf-8") as f:
            f.write(line + "\n")


def effects(path: str) -> list[str]:
    """The effect lines written at ``path``, oldest first."""
    if not os.path.exists(path):
        return []
    with open(path, encoding="utf-8") as f:
        return [line.rstrip("\n") for line in f]


# --- approvals: one node asking two questions, in an order a deploy may change -------------
def _ask_both(state: dict[str, Any]) -> dict[str, Any]:
    order = os.environ.get("TETHER_TEST_ASK_ORDER", "refund,wire").split(",")
    answers = {}
    for reason in order:
        answers[reason] = interrupt(reason, {"order_id": state["order_id"], "what": reason})
    for reason in ("refund", "wire"):
        if answers[reason].approved:
            effect(f"{reason} {state['order_id']}")
    return {reason: answers[reason].approved for reason in ("refund", "wire")}


def approvals(store: tether.Checkpointer) -> Chain:
    chain = Chain("approvals", store)
    chain.add_node("approve", _ask_both)
    return chain


# --- agents paused inside an approval tool --------------------------------------------------
def _refund(order_id: str, amount: int) -> str:
    """Refund an order once a manager approves.

    Args:
        order_id: the order.
        amount: in cents.
    """
    answer = interrupt("approve_refund", {"order_id": order_id, "amount": amount})
    if not answer.approved:
        return "declined"
    effect(f"tool {order_id} {amount}")
    return f"refunded {amount}"


def _refund_tool() -> Tool[Any, Any]:
    return Tool(_refund, name=os.environ.get("TETHER_TEST_TOOL", "refund"))


def _llm() -> ScriptedLLM:
    # The script names the tool as the first deploy did; a resumed run has that call in its
    # history already. In a swarm it counts only its own agent's messages.
    call = {"name": "refund", "arguments": {"order_id": "A-1", "amount": 900}}
    return ScriptedLLM([[call], "Refund handled."], resume_aware=True)


def _renamed() -> dict[str, str]:
    pairs = [p.split(":", 1) for p in os.environ.get("TETHER_TEST_RENAMED", "").split(",") if p]
    return {old: new for old, new in pairs}


def desk(store: tether.Checkpointer) -> Agent:
    return Agent("desk", llm=_llm(), tools=[_refund_tool()], checkpointer=store, renamed=_renamed())


def desk_swarm(store: tether.Checkpointer) -> Swarm:
    billing = os.environ.get("TETHER_TEST_BILLING", "billing")
    handoff = {"name": "transfer_to_billing", "arguments": {}}
    triage = Agent(
        "triage",
        llm=ScriptedLLM([[handoff]], resume_aware=True),
        checkpointer=store,
    )
    member = Agent(billing, llm=_llm(), tools=[_refund_tool()], checkpointer=store)
    return Swarm("desk_swarm", [triage, member], entrypoint="triage", checkpointer=store)


def desk_supervisor(store: tether.Checkpointer) -> Supervisor:
    role = os.environ.get("TETHER_TEST_BILLING", "billing")
    boss = ScriptedLLM(
        [[{"name": "delegate_to_billing", "arguments": {"task": "refund A-1"}}], "All done."],
        resume_aware=True,
    )
    worker = Agent("clerk", llm=_llm(), tools=[_refund_tool()], checkpointer=store)
    return Supervisor(
        "desk_supervisor",
        llm=boss,
        workers=[Worker(worker, role, "refunds orders")],
        checkpointer=store,
    )


def desk_flow(store: tether.Checkpointer) -> Chain:
    chain = Chain("desk_flow", store)
    name = os.environ.get("TETHER_TEST_BILLING", "billing")
    agent = Agent(name, llm=_llm(), tools=[_refund_tool()], checkpointer=store)
    chain.add_node("help", agent, input_key="request", output_key="reply")
    return chain


# --- receipts: values that must be readable by name -----------------------------------------
class Stamp(pydantic.BaseModel):
    order_id: str


class Receipt(pydantic.BaseModel):
    order_id: str
    amount: int


def _local(place: str) -> bool:
    return place in os.environ.get("TETHER_TEST_LOCAL", "").split(",")


def _stamp(order_id: str, place: str) -> Any:
    cls: type[pydantic.BaseModel] = Stamp
    if _local(place):

        class LocalStamp(pydantic.BaseModel):  # defined inside a function on purpose
            order_id: str

        cls = LocalStamp
    return cls(order_id=order_id)


def _receipt(order_id: str, amount: int) -> Any:
    cls: type[pydantic.BaseModel] = Receipt
    if _local("result"):

        class LocalReceipt(pydantic.BaseModel):  # defined inside a function on purpose
            order_id: str
            amount: int

        cls = LocalReceipt
    return cls(order_id=order_id, amount=amount)


def _receipt_key(order_id: str, amount: int) -> str:
    return os.environ.get("TETHER_TEST_RECEIPT_KEY", "") or f"receipt:{order_id}:{amount}"


@idempotent(key=_receipt_key)
def issue_receipt(order_id: str, amount: int) -> Any:
    effect(f"receipt {order_id}")
    return _receipt(order_id, amount)


def receipts(store: tether.Checkpointer) -> Chain:
    chain = Chain("receipts", store, renamed=_renamed())
    review_node = os.environ.get("TETHER_TEST_REVIEW", "review")

    def stamp(state: dict[str, Any]) -> dict[str, Any]:
        return {"stamp": _stamp(state["order_id"], "state")}

    def review(state: dict[str, Any]) -> dict[str, Any]:
        context = {"stamp": _stamp(state["order_id"], "context")}
        return {"approved": interrupt("ship", context).approved}

    def pay(state: dict[str, Any]) -> dict[str, Any]:
        return {"receipt": issue_receipt(state["order_id"], 900)}

    chain.add_node("stamp", stamp)
    chain.add_node(review_node, review)
    chain.add_node("pay", pay)
    chain.add_edge("stamp", review_node)
    chain.add_edge(review_node, "pay")
    return chain


# --- fulfil: a step with an effect, to crash in (lease of 1 s: a worker takes it over soon) -
@idempotent
def pack_order(order_id: str) -> str:
    effect(f"pack {order_id}")
    return f"packed {order_id}"


def fulfil(store: tether.Checkpointer) -> Chain:
    chain = Chain("fulfil", store, renamed=_renamed())
    chain.lease_seconds = 1.0
    chain.add_node(
        os.environ.get("TETHER_TEST_PACK", "pack"),
        lambda state: {"packed": pack_order(state["order_id"])},
    )
    chain.add_node("close", lambda state: {"closed": True})
    return chain


RUNNERS: dict[str, Callable[[tether.Checkpointer], Runner]] = {
    "approvals": approvals,
    "desk": desk,
    "desk_swarm": desk_swarm,
    "desk_supervisor": desk_supervisor,
    "desk_flow": desk_flow,
    "receipts": receipts,
    "fulfil": fulfil,
}
INPUTS: dict[str, Any] = {
    "approvals": {"order_id": "A-1"},
    "receipts": {"order_id": "A-1"},
    "fulfil": {"order_id": "A-1"},
    "desk": "Please refund order A-1",
    "desk_swarm": "Please refund order A-1",
    "desk_supervisor": "Please refund order A-1",
    "desk_flow": {"request": "Please refund order A-1"},
}

_app: Registry | None = None


def __getattr__(name: str) -> Any:
    # ``app`` opens its store on first use, so tests can import the builders above.
    global _app
    if name != "app":
        raise AttributeError(name)
    if _app is None:
        _app = Registry(*(make(tether.connect()) for make in RUNNERS.values()))
    return _app


def main(argv: list[str]) -> int:
    name, verb, eid = argv[:3]
    runner: Any = __getattr__("app").get(name)
    try:
        if verb == "run":
            result = runner.run(INPUTS[name], execution_id=eid)
        elif verb == "resume":
            value = Resume(approved=argv[3] == "approve") if len(argv) > 3 else None
            result = runner.resume(eid, value)
        else:
            raise SystemExit(f"unknown verb {verb}")
        out = {
            "status": result.status,
            "output": result.output,
            "pending": result.pending_interrupt,
            "error": None if result.error is None else str(result.error),
            "error_type": None if result.error is None else type(result.error).__name__,
        }
    except tether.TetherError as exc:
        out = {"status": "error", "error": str(exc), "error_type": type(exc).__name__}
    print(json.dumps(out, default=str), flush=True)
    return 0


if __name__ == "__main__":
    # Under its importable name, so what it stores names classes a CLI or worker process
    # (which imports this module) reads back.
    from tests.support import answers_app

    sys.exit(answers_app.main(sys.argv[1:]))
